
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#ifndef _NGX_ZK_LOCK_TAKE_H_INCLUDED_
#define _NGX_ZK_LOCK_TAKE_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>

#include "ngx_zk_lock_recipe.h"
#include "ngx_zk_lock_params.h"
#include "ngx_zk_lock_fair.h"


/*
 * A participant's node in the lock of a directive, through this worker's
 * session, whichever recipe takes it: Curator's mutex, semaphore or
 * read/write lock, semaphore v2, or a lease kept by the worker (keep=).
 * The layers ask through ngx_zk_lock_get(), which may send them to a
 * broker; the broker that takes locks for the workers without a session
 * of their own (see ngx_zk_lock_broker.c) asks here.
 */

ngx_zk_lock_node_t *ngx_zk_lock_take(ngx_zk_lock_session_t *s,
    ngx_zk_lock_params_t *lp, ngx_str_t *path, ngx_uint_t weight,
    ngx_zk_lock_flow_t *flow, ngx_str_t *info, ngx_uint_t try,
    ngx_zk_lock_notify_pt notify, ngx_zk_lock_notify_pt recall, void *data,
    ngx_log_t *log);
void ngx_zk_lock_take_late(ngx_zk_lock_node_t *node);
ngx_msec_t ngx_zk_lock_kept(ngx_zk_lock_params_t *lp,
    ngx_uint_t weight, ngx_uint_t try);


#endif /* _NGX_ZK_LOCK_TAKE_H_INCLUDED_ */
