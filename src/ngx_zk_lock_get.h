
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#ifndef _NGX_ZK_LOCK_GET_H_INCLUDED_
#define _NGX_ZK_LOCK_GET_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>

#include "ngx_zk_lock_recipe.h"
#include "ngx_zk_lock_params.h"
#include "ngx_zk_lock_conf.h"
#include "ngx_zk_lock_fair.h"


/*
 * The one call a layer asks for a participant's node with, and
 * ngx_zk_lock_release() the one that gives it back, whichever way the
 * node came, as an upstream's balancers are a peer's get and free:
 *
 *   get --> the worker's session: ngx_zk_lock_take() (Curator's recipes,
 *           semaphore v2, or keep= wrapping a recipe, as the keepalive
 *           module wraps a balancer)
 *       --> a sibling's session (zk_sessions: ngx_zk_lock_remote.c), for
 *           a worker without one, or whose own ZooKeeper refused, and for
 *           a lease kept for the whole instance (worker 0's); the
 *           worker's own if none answers, or if the one asked had no
 *           session (ngx_zk_lock_get_own(), see gate_reask())
 */

/* ngx_zk_lock_get(), or ngx_zk_lock_get_own() */
typedef ngx_zk_lock_node_t *(*ngx_zk_lock_get_pt)(ngx_zk_lock_session_t *s,
    ngx_zk_lock_params_t *lp, ngx_str_t *path, ngx_uint_t weight,
    ngx_zk_lock_flow_t *flow, ngx_str_t *info, ngx_uint_t try,
    ngx_zk_lock_notify_pt notify, void *data, ngx_log_t *log);


ngx_int_t ngx_zk_lock_get_init(ngx_cycle_t *cycle, ngx_zk_lock_session_t *s,
    ngx_zk_lock_conf_t *zc, ngx_array_t *specs, ngx_uint_t local_used,
    ngx_str_t *layer);
ngx_zk_lock_node_t *ngx_zk_lock_get(ngx_zk_lock_session_t *s,
    ngx_zk_lock_params_t *lp, ngx_str_t *path, ngx_uint_t weight,
    ngx_zk_lock_flow_t *flow, ngx_str_t *info, ngx_uint_t try,
    ngx_zk_lock_notify_pt notify, void *data, ngx_log_t *log);
ngx_zk_lock_node_t *ngx_zk_lock_get_own(ngx_zk_lock_session_t *s,
    ngx_zk_lock_params_t *lp, ngx_str_t *path, ngx_uint_t weight,
    ngx_zk_lock_flow_t *flow, ngx_str_t *info, ngx_uint_t try,
    ngx_zk_lock_notify_pt notify, void *data, ngx_log_t *log);
ngx_uint_t ngx_zk_lock_get_waiting(ngx_zk_lock_session_t *s,
    ngx_zk_lock_params_t *lp, ngx_str_t *path, ngx_uint_t weight);


#endif /* _NGX_ZK_LOCK_GET_H_INCLUDED_ */
