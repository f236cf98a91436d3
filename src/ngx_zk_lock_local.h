
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#ifndef _NGX_ZK_LOCK_LOCAL_H_INCLUDED_
#define _NGX_ZK_LOCK_LOCAL_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>


/*
 * zk_lock_fail local=<n>: while a worker has no usable session, at most n
 * requests or connections per lock of this nginx instance pass, HTTP and
 * stream together, in the order they came,
 * whichever worker they are in, whichever generation of workers (reload)
 * they are in.  A shared memory zone of its own, kept across reloads,
 * has one entry per lock (its type and path as configured):
 *
 *     zone: entries --> entry --> entry --> ...
 *     entry: type, path, ring of waiting tickets (pids), leases (pids)
 *
 * A ticket or a lease names the pid of its worker: one whose worker is
 * gone (killed, crashed) is skipped or no longer counts, and nothing is
 * cleared when a worker starts, so the old workers' leases still count
 * for the new ones.  Waiters in other workers are not woken: every worker
 * looks again every POLL ms while it has any.
 */

typedef struct ngx_zk_lock_local_s  ngx_zk_lock_local_t;

typedef void (*ngx_zk_lock_local_pt)(ngx_zk_lock_local_t *l);


struct ngx_zk_lock_local_s {
    ngx_queue_t                   queue;      /* the worker's waiters */
    ngx_uint_t                    index;      /* the lock's entry */
    ngx_uint_t                    n;          /* leases of the instance */
    ngx_atomic_uint_t             ticket;
    ngx_uint_t                    lease;      /* held: its place */
    unsigned                      waiting:1;
    unsigned                      held:1;
    unsigned                      telling:1;  /* to be told, see tell() */

    /* told once it holds, if it had to wait, or recalled (held 0) */
    ngx_zk_lock_local_pt          handler;
    void                         *data;
    void                         *owner;      /* recalled with its kind */
};


ngx_int_t ngx_zk_lock_local_add(ngx_conf_t *cf, ngx_uint_t type,
    ngx_str_t *name, ngx_shm_zone_t **zone);
ngx_int_t ngx_zk_lock_local_worker(ngx_cycle_t *cycle,
    ngx_shm_zone_t *zone);
ngx_int_t ngx_zk_lock_local_take(ngx_zk_lock_local_t *l);
void ngx_zk_lock_local_leave(ngx_zk_lock_local_t *l);
void ngx_zk_lock_local_recall(void *owner);
ngx_uint_t ngx_zk_lock_local_warn(ngx_uint_t index, ngx_uint_t outage);


#endif /* _NGX_ZK_LOCK_LOCAL_H_INCLUDED_ */
