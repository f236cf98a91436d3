
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#include <ngx_config.h>
#include <ngx_core.h>

#include "ngx_zk_lock_semv2.h"


/*
 * Curator's InterProcessSemaphoreV2: a participant takes the mutex
 * "<path>/locks" (an InterProcessMutex), creates its lease
 * "<path>/leases/_c_<uuid>-lease-<seq>", holds it once there are at most
 * "leases" children there (watching the children until then), and gives
 * the mutex back.  The owner sees one node, the lease: its HELD or FAILED
 * is the whole protocol's, and releasing it gives back the mutex too.
 */


/* "<path>" + "/leases" */
#define NGX_ZK_LOCK_SEMV2_LEN  (NGX_ZK_LOCK_MAX_PATH + 7)


static ngx_int_t ngx_zk_lock_semv2_path(ngx_str_t *dst, u_char *buf,
    ngx_str_t *path, char *child);


ngx_zk_lock_node_t *
ngx_zk_lock_semv2_acquire(ngx_zk_lock_session_t *s,
    ngx_str_t *path, ngx_uint_t leases, ngx_uint_t weight,
    ngx_zk_lock_counter_t *counter,
    ngx_str_t *info, ngx_uint_t transient, ngx_zk_lock_notify_pt notify,
    void *data, ngx_log_t *log)
{
    ngx_str_t                 locks, lease;
    ngx_uint_t                levels;
    ngx_zk_lock_node_t       *mutex, *node;
    u_char                    buf1[NGX_ZK_LOCK_SEMV2_LEN];
    u_char                    buf2[NGX_ZK_LOCK_SEMV2_LEN];

    if (ngx_zk_lock_semv2_path(&locks, buf1, path, "/locks") != NGX_OK
        || ngx_zk_lock_semv2_path(&lease, buf2, path, "/leases")
           != NGX_OK)
    {
        return NULL;
    }

    /* the mutex's count is its own: one */

    /* the levels of the path, and its own below it */

    levels = transient ? transient + 1 : 0;

    mutex = ngx_zk_lock_acquire(s, &locks, NGX_ZK_LOCK_LEASE, 1, 1,
                                NULL, info, levels, notify, data, log);
    if (mutex == NULL) {
        return NULL;
    }

    /* the leases of a weighted request, all made while it holds */

    node = ngx_zk_lock_behind(mutex, &lease, NGX_ZK_LOCK_COUNT,
                              leases, weight, counter);
    if (node == NULL) {
        ngx_zk_lock_release(mutex);
        return NULL;
    }

    ngx_zk_lock_transient(node, levels);

    return node;
}


/* its requests that wait, for the mutex or for a lease */

ngx_uint_t
ngx_zk_lock_semv2_waiting(ngx_zk_lock_session_t *s,
    ngx_str_t *path)
{
    ngx_str_t   locks, lease;
    u_char      buf1[NGX_ZK_LOCK_SEMV2_LEN];
    u_char      buf2[NGX_ZK_LOCK_SEMV2_LEN];

    if (ngx_zk_lock_semv2_path(&locks, buf1, path, "/locks") != NGX_OK
        || ngx_zk_lock_semv2_path(&lease, buf2, path, "/leases")
           != NGX_OK)
    {
        return 0;
    }

    return ngx_zk_lock_waiting(s, &locks)
           + ngx_zk_lock_waiting(s, &lease);
}


static ngx_int_t
ngx_zk_lock_semv2_path(ngx_str_t *dst, u_char *buf, ngx_str_t *path,
    char *child)
{
    if (path->len > NGX_ZK_LOCK_MAX_PATH) {
        return NGX_ERROR;
    }

    dst->data = buf;
    dst->len = ngx_sprintf(buf, "%V%s", path, child) - buf;

    return NGX_OK;
}
