
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#include <ngx_config.h>
#include <ngx_core.h>

#include "ngx_zk_lock_get.h"
#include "ngx_zk_lock_take.h"
#include "ngx_zk_lock_semv2.h"
#include "ngx_zk_lock_remote.h"


static ngx_uint_t ngx_zk_lock_get_remote(ngx_zk_lock_session_t *s,
    ngx_msec_t keep);


ngx_zk_lock_node_t *
ngx_zk_lock_get(ngx_zk_lock_session_t *s, ngx_zk_lock_params_t *lp,
    ngx_str_t *path, ngx_uint_t weight, ngx_str_t *info, ngx_uint_t try,
    ngx_zk_lock_notify_pt notify, void *data, ngx_log_t *log)
{
    ngx_msec_t           keep;
    ngx_zk_lock_node_t  *node;

    keep = ngx_zk_lock_kept(lp, weight, try);

    if (ngx_zk_lock_get_remote(s, keep)) {
        node = ngx_zk_lock_remote_acquire(s, lp, path, weight, info, try,
                                          keep, notify, data, log);

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

    return ngx_zk_lock_take(s, lp, path, weight, info, try, notify, NULL,
                            data, log);
}


/* those that wait for a lock in the worker: its max_waiting= */

ngx_uint_t
ngx_zk_lock_get_waiting(ngx_zk_lock_session_t *s, ngx_zk_lock_params_t *lp,
    ngx_str_t *path, ngx_uint_t weight)
{
    if (ngx_zk_lock_get_remote(s, ngx_zk_lock_kept(lp, weight, 0))) {
        return ngx_zk_lock_remote_waiting(lp->id, path);
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
