
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#include <ngx_config.h>
#include <ngx_core.h>

#include "ngx_zk_lock_get.h"
#include "ngx_zk_lock_take.h"
#include "ngx_zk_lock_semv2.h"
#include "ngx_zk_lock_remote.h"
#include "ngx_zk_lock_broker.h"


/* workers of an nginx with a session each by default, see get_sessions() */
#define NGX_ZK_LOCK_GET_SESSIONS  4


static ngx_uint_t ngx_zk_lock_get_sessions(ngx_cycle_t *cycle,
    ngx_zk_lock_conf_t *zc, ngx_uint_t local_used);
static ngx_uint_t ngx_zk_lock_get_keeps(ngx_cycle_t *cycle,
    ngx_array_t *specs);
static ngx_uint_t ngx_zk_lock_get_remote(ngx_zk_lock_session_t *s,
    ngx_msec_t keep);


/*
 * A layer's session in a worker, and its siblings': zk_sessions (the
 * first workers have one, and broker for the others), keep= (worker 0
 * keeps the instance's leases, and brokers them).  Each layer has its
 * own brokers, named after it: the layers' configurations and sessions
 * are their own (see the README).
 */

ngx_int_t
ngx_zk_lock_get_init(ngx_cycle_t *cycle, ngx_zk_lock_session_t *s,
    ngx_zk_lock_conf_t *zc, ngx_array_t *specs, ngx_uint_t local_used,
    ngx_str_t *layer)
{
    ngx_uint_t  keeper, sessions;

    keeper = ngx_zk_lock_get_keeps(cycle, specs);

    s->borrow = keeper && ngx_worker != 0;

    sessions = ngx_zk_lock_get_sessions(cycle, zc, local_used);

    if (ngx_zk_lock_remote_init(cycle, s, sessions, layer, zc->generation)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (sessions && ngx_process == NGX_PROCESS_WORKER
        && ngx_worker >= sessions)
    {
        s->brokered = 1;

        return ngx_zk_lock_session_init(cycle, s);
    }

    /* a worker that ZooKeeper refuses a session asks a sibling's broker */
    s->siblings = (sessions > 1 && ngx_process == NGX_PROCESS_WORKER);

    if (ngx_zk_lock_session_init(cycle, s) != NGX_OK) {
        return NGX_ERROR;
    }

    if (ngx_process == NGX_PROCESS_WORKER
        && (sessions || (keeper && ngx_worker == 0)))
    {
        return ngx_zk_lock_broker_init(cycle, s, specs, layer,
                                       zc->generation);
    }

    return NGX_OK;
}


/*
 * How many workers have a session of their own, each a broker for the
 * others.  ZooKeeper lets one address connect maxClientCnxns times (60 by
 * default), counted over every nginx behind it and doubled during a
 * reload: by default a session per worker up to NGX_ZK_LOCK_GET_SESSIONS
 * workers, and that many brokers for more, whatever worker_processes;
 * the brokers also serve a worker whose own session ZooKeeper refuses
 * (several nginx behind one address).  0: one per worker, and no broker.
 * A sibling takes no local lease (zk_lock_fail local=): then one per
 * worker.
 */

static ngx_uint_t
ngx_zk_lock_get_sessions(ngx_cycle_t *cycle, ngx_zk_lock_conf_t *zc,
    ngx_uint_t local_used)
{
    ngx_core_conf_t  *ccf;

    if (zc->sessions != NGX_CONF_UNSET_UINT) {
        return zc->sessions;
    }

#if !(NGX_LINUX)

    /* the workers meet on abstract unix sockets */
    return 0;

#endif

    ccf = (ngx_core_conf_t *) ngx_get_conf(cycle->conf_ctx, ngx_core_module);

    if (local_used || ccf->worker_processes < 2) {
        return 0;
    }

    return ngx_min((ngx_uint_t) ccf->worker_processes,
                   NGX_ZK_LOCK_GET_SESSIONS);
}


/*
 * keep= in a worker of several: the instance is the participant, and its
 * leases are kept in worker 0's pool for all its workers
 */

static ngx_uint_t
ngx_zk_lock_get_keeps(ngx_cycle_t *cycle, ngx_array_t *specs)
{
    ngx_uint_t              i;
    ngx_core_conf_t        *ccf;
    ngx_zk_lock_params_t  **lp;

#if !(NGX_LINUX)

    /* the workers meet on abstract unix sockets */
    return 0;

#endif

    ccf = (ngx_core_conf_t *) ngx_get_conf(cycle->conf_ctx, ngx_core_module);

    if (ngx_process != NGX_PROCESS_WORKER || ccf->worker_processes < 2
        || specs == NULL)
    {
        return 0;
    }

    lp = specs->elts;

    for (i = 0; i < specs->nelts; i++) {
        if (lp[i]->keep) {
            return 1;
        }
    }

    return 0;
}


ngx_zk_lock_node_t *
ngx_zk_lock_get(ngx_zk_lock_session_t *s, ngx_zk_lock_params_t *lp,
    ngx_str_t *path, ngx_uint_t weight, ngx_zk_lock_flow_t *flow,
    ngx_str_t *info, ngx_uint_t try, ngx_zk_lock_notify_pt notify,
    void *data, ngx_log_t *log)
{
    ngx_msec_t           keep;
    ngx_zk_lock_node_t  *node;

    keep = ngx_zk_lock_kept(lp, weight, try);

    if (ngx_zk_lock_get_remote(s, keep)) {

        /*
         * a flow's request (fair=) goes to the pool every time: a lease
         * kept here between requests would serve this worker's in the
         * order they come, whatever their flows
         */

        node = ngx_zk_lock_remote_acquire(s, lp, path, weight, flow, info,
                                          try, flow ? 0 : keep, notify,
                                          data, log);

        if (node == NULL || node->state != NGX_ZK_LOCK_FAILED) {
            return node;
        }

        if (s->brokered) {
            ngx_log_error(NGX_LOG_ERR, log, 0,
                          "zk_sessions: no broker took the lock \"%V\"",
                          path);
            return node;
        }

        if (ngx_zk_lock_session_none(s)) {
            /* nor does the worker's own session: the caller refuses */
            return node;
        }

        /* worker 0 does not listen yet, or any more: the worker's own pool */
        ngx_zk_lock_release(node);
    }

    return ngx_zk_lock_take(s, lp, path, weight, flow, info, try, notify,
                            NULL, data, log);
}


/*
 * Through the worker's own session, whatever the brokers: an ask that a
 * sibling's broker declined for want of a session of its own (see
 * gate_reask()), which would decline it again while it has none
 */

ngx_zk_lock_node_t *
ngx_zk_lock_get_own(ngx_zk_lock_session_t *s, ngx_zk_lock_params_t *lp,
    ngx_str_t *path, ngx_uint_t weight, ngx_zk_lock_flow_t *flow,
    ngx_str_t *info, ngx_uint_t try, ngx_zk_lock_notify_pt notify,
    void *data, ngx_log_t *log)
{
    return ngx_zk_lock_take(s, lp, path, weight, flow, info, try, notify,
                            NULL, data, log);
}


/* those that wait for a lock in the worker: its max_waiting= */

ngx_uint_t
ngx_zk_lock_get_waiting(ngx_zk_lock_session_t *s, ngx_zk_lock_params_t *lp,
    ngx_str_t *path, ngx_uint_t weight)
{
    if (ngx_zk_lock_get_remote(s, ngx_zk_lock_kept(lp, weight, 0))) {
        return ngx_zk_lock_remote_waiting(s, lp->id, path);
    }

    return lp->v2 ? ngx_zk_lock_semv2_waiting(s, path)
                  : ngx_zk_lock_waiting(s, path);
}


/*
 * Whether the worker's node in a lock is taken by another worker's
 * session: a worker without one (zk_sessions), or a kept lease, which is
 * worker 0's, or a worker whose own session ZooKeeper refuses (or cannot
 * be reached for) while a sibling's may serve; "keep" as
 * ngx_zk_lock_kept() says
 */

static ngx_uint_t
ngx_zk_lock_get_remote(ngx_zk_lock_session_t *s, ngx_msec_t keep)
{
    return s->brokered || (keep && s->borrow)
           || (s->siblings && ngx_zk_lock_session_none(s));
}
