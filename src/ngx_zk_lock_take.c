
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#include <ngx_config.h>
#include <ngx_core.h>

#include "ngx_zk_lock_take.h"
#include "ngx_zk_lock_semv2.h"
#include "ngx_zk_lock_keep.h"


/*
 * "try": the first listing answers (see ngx_zk_lock_try()).
 * "recall": an owner that may keep a kept lease between its requests is
 * asked through it to end it (see keep_recall()).
 * "flow": fair= (see ngx_zk_lock_fair.c), for a kept lease; or NULL.
 */

ngx_zk_lock_node_t *
ngx_zk_lock_take(ngx_zk_lock_session_t *s,
    ngx_zk_lock_params_t *lp, ngx_str_t *path, ngx_uint_t weight,
    ngx_zk_lock_flow_t *flow, ngx_str_t *info, ngx_uint_t try,
    ngx_zk_lock_notify_pt notify, ngx_zk_lock_notify_pt recall, void *data,
    ngx_log_t *log)
{
    ngx_zk_lock_node_t     *node;
    ngx_zk_lock_counter_t  *counter;

    counter = NULL;

    if (lp->counter.len) {
        counter = ngx_zk_lock_counter(s, &lp->counter);
        if (counter == NULL) {
            return NULL;
        }
    }

    if (lp->v2) {
        node = ngx_zk_lock_semv2_acquire(s, path, lp->leases, weight,
                                         counter, info, lp->transient,
                                         notify, data, log);

    } else if (ngx_zk_lock_kept(lp, weight, try)) {
        return ngx_zk_lock_keep_acquire(s, path, lp->kind, lp->leases,
                                        counter, lp->keep, lp->transient,
                                        lp, flow, notify, recall, data, log);

    } else {
        node = ngx_zk_lock_acquire(s, path,
                                   lp->kind,
                                   lp->leases, weight, counter, info,
                                   lp->transient, notify, data, log);

        if (node && lp->revocable) {
            ngx_zk_lock_revocable(node);
        }
    }

    if (node && try) {
        ngx_zk_lock_try(node);
    }

    return node;
}


/* a kept lease recalled from its owner comes back only later */

void
ngx_zk_lock_take_late(ngx_zk_lock_node_t *node)
{
    if (node->ticket) {
        ngx_zk_lock_keep_late(node);
    }
}


/*
 * A kept lease (keep=) is not for a weighted participant, whose nodes
 * must be consecutive, nor for a try
 */

ngx_msec_t
ngx_zk_lock_kept(ngx_zk_lock_params_t *lp, ngx_uint_t weight,
    ngx_uint_t try)
{
    return (!lp->v2 && weight == 1 && !try) ? lp->keep : 0;
}
