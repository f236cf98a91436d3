
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#ifndef _NGX_ZK_LOCK_REMOTE_H_INCLUDED_
#define _NGX_ZK_LOCK_REMOTE_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>

#include "ngx_zk_lock_recipe.h"
#include "ngx_zk_lock_params.h"
#include "ngx_zk_lock_fair.h"


/*
 * A worker without a session (zk_sessions): its requests' nodes are held
 * by a broker's session, see ngx_zk_lock_broker.h for the protocol
 */

/* a layer's brokers, as its workers ask them: see remote.c */
typedef struct ngx_zk_lock_remotes_s  ngx_zk_lock_remotes_t;


ngx_int_t ngx_zk_lock_remote_init(ngx_cycle_t *cycle,
    ngx_zk_lock_session_t *s, ngx_uint_t sessions, ngx_str_t *layer,
    ngx_uint_t generation);
ngx_zk_lock_node_t *ngx_zk_lock_remote_acquire(ngx_zk_lock_session_t *s,
    ngx_zk_lock_params_t *lp, ngx_str_t *path, ngx_uint_t weight,
    ngx_zk_lock_flow_t *flow, ngx_str_t *info, ngx_uint_t try,
    ngx_msec_t keep, ngx_zk_lock_notify_pt notify, void *data,
    ngx_log_t *log);
ngx_uint_t ngx_zk_lock_remote_waiting(ngx_zk_lock_session_t *s,
    ngx_uint_t id, ngx_str_t *path);


#endif /* _NGX_ZK_LOCK_REMOTE_H_INCLUDED_ */
