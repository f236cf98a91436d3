
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>

#include "ngx_http_zk_lock_local.h"


#define NGX_HTTP_ZK_LOCK_LOCAL_SLOTS  64     /* workers, modulo */
#define NGX_HTTP_ZK_LOCK_LOCAL_RING   128    /* tickets waiting, per lock */
#define NGX_HTTP_ZK_LOCK_LOCAL_POLL   20     /* ms */


typedef struct {
    ngx_atomic_uint_t             next;       /* the ticket to give */
    ngx_atomic_uint_t             head;       /* the first one to serve */
    ngx_pid_t                     ring[NGX_HTTP_ZK_LOCK_LOCAL_RING];
    ngx_atomic_uint_t             held[NGX_HTTP_ZK_LOCK_LOCAL_SLOTS];
} ngx_http_zk_lock_local_entry_t;


typedef struct {
    ngx_uint_t                    n;
    ngx_http_zk_lock_local_entry_t  entries[1];
} ngx_http_zk_lock_local_shm_t;


static ngx_int_t ngx_http_zk_lock_local_init_zone(ngx_shm_zone_t *shm_zone,
    void *data);
static ngx_uint_t ngx_http_zk_lock_local_grant(ngx_http_zk_lock_local_t *l);
static void ngx_http_zk_lock_local_skip(ngx_http_zk_lock_local_entry_t *e);
static void ngx_http_zk_lock_local_poll(ngx_event_t *ev);
static void ngx_http_zk_lock_local_tell(ngx_queue_t *told);


static ngx_str_t  ngx_http_zk_lock_local_name = ngx_string("zk_lock_local");

/* the zone of this worker's cycle, its slot, its waiters */
static ngx_slab_pool_t               *ngx_http_zk_lock_local_pool;
static ngx_http_zk_lock_local_shm_t  *ngx_http_zk_lock_local_shm;
static ngx_uint_t                     ngx_http_zk_lock_local_slot;
static ngx_queue_t                    ngx_http_zk_lock_local_waiters;
static ngx_event_t                    ngx_http_zk_lock_local_event;
static ngx_uint_t                    *ngx_http_zk_lock_local_warned;


/* one entry per lock of the metrics, n of them */

ngx_int_t
ngx_http_zk_lock_local_init(ngx_conf_t *cf, ngx_uint_t n,
    ngx_shm_zone_t **zone)
{
    size_t  size;

    size = sizeof(ngx_http_zk_lock_local_shm_t)
           + n * sizeof(ngx_http_zk_lock_local_entry_t);

    size = (size / ngx_pagesize + 8) * (ngx_pagesize + sizeof(ngx_slab_page_t));

    *zone = ngx_shared_memory_add(cf, &ngx_http_zk_lock_local_name, size,
                                  &ngx_http_zk_lock_local_name);
    if (*zone == NULL) {
        return NGX_ERROR;
    }

    /* as the metrics' zone: the entries are those of this configuration */

    (*zone)->init = ngx_http_zk_lock_local_init_zone;
    (*zone)->data = (void *) n;
    (*zone)->noreuse = 1;

    return NGX_OK;
}


static ngx_int_t
ngx_http_zk_lock_local_init_zone(ngx_shm_zone_t *shm_zone, void *data)
{
    ngx_uint_t                     n;
    ngx_slab_pool_t               *shpool;
    ngx_http_zk_lock_local_shm_t  *shm;

    shpool = (ngx_slab_pool_t *) shm_zone->shm.addr;
    n = (ngx_uint_t) shm_zone->data;

    shm = ngx_slab_calloc(shpool, sizeof(ngx_http_zk_lock_local_shm_t)
                                  + n * sizeof(ngx_http_zk_lock_local_entry_t));
    if (shm == NULL) {
        return NGX_ERROR;
    }

    shm->n = n;
    shpool->data = shm;

    return NGX_OK;
}


/* a worker starts: the leases counted in its slot are a dead one's */

ngx_int_t
ngx_http_zk_lock_local_worker(ngx_cycle_t *cycle, ngx_shm_zone_t *zone)
{
    ngx_uint_t                     i;
    ngx_http_zk_lock_local_shm_t  *shm;

    ngx_queue_init(&ngx_http_zk_lock_local_waiters);

    ngx_http_zk_lock_local_event.handler = ngx_http_zk_lock_local_poll;
    ngx_http_zk_lock_local_event.log = cycle->log;
    ngx_http_zk_lock_local_event.cancelable = 1;

    if (zone == NULL) {
        return NGX_OK;
    }

    ngx_http_zk_lock_local_pool = (ngx_slab_pool_t *) zone->shm.addr;
    shm = ngx_http_zk_lock_local_pool->data;

    ngx_http_zk_lock_local_shm = shm;
    ngx_http_zk_lock_local_slot = ngx_worker % NGX_HTTP_ZK_LOCK_LOCAL_SLOTS;

    ngx_http_zk_lock_local_warned = ngx_pcalloc(cycle->pool,
                                                shm->n * sizeof(ngx_uint_t));
    if (ngx_http_zk_lock_local_warned == NULL) {
        return NGX_ERROR;
    }

    ngx_shmtx_lock(&ngx_http_zk_lock_local_pool->mutex);

    for (i = 0; i < shm->n; i++) {
        shm->entries[i].held[ngx_http_zk_lock_local_slot] = 0;
    }

    ngx_shmtx_unlock(&ngx_http_zk_lock_local_pool->mutex);

    return NGX_OK;
}


/*
 * NGX_OK: it holds; NGX_AGAIN: it waits, and its handler is called once
 * it holds; NGX_BUSY: too many wait for this lock in this instance.
 */

ngx_int_t
ngx_http_zk_lock_local_take(ngx_http_zk_lock_local_t *l)
{
    ngx_uint_t                       granted;
    ngx_http_zk_lock_local_entry_t  *e;

    if (ngx_http_zk_lock_local_shm == NULL) {
        return NGX_ERROR;
    }

    e = &ngx_http_zk_lock_local_shm->entries[l->index];

    ngx_shmtx_lock(&ngx_http_zk_lock_local_pool->mutex);

    ngx_http_zk_lock_local_skip(e);

    if (e->next - e->head >= NGX_HTTP_ZK_LOCK_LOCAL_RING) {
        ngx_shmtx_unlock(&ngx_http_zk_lock_local_pool->mutex);
        return NGX_BUSY;
    }

    l->ticket = e->next++;
    e->ring[l->ticket % NGX_HTTP_ZK_LOCK_LOCAL_RING] = ngx_pid;

    granted = ngx_http_zk_lock_local_grant(l);

    ngx_shmtx_unlock(&ngx_http_zk_lock_local_pool->mutex);

    if (granted) {
        return NGX_OK;
    }

    l->waiting = 1;
    ngx_queue_insert_tail(&ngx_http_zk_lock_local_waiters, &l->queue);

    if (!ngx_http_zk_lock_local_event.timer_set) {
        ngx_add_timer(&ngx_http_zk_lock_local_event,
                      NGX_HTTP_ZK_LOCK_LOCAL_POLL);
    }

    return NGX_AGAIN;
}


/* held, or waiting: given back, or given up */

void
ngx_http_zk_lock_local_leave(ngx_http_zk_lock_local_t *l)
{
    ngx_http_zk_lock_local_entry_t  *e;

    if (!l->held && !l->waiting) {
        return;
    }

    e = &ngx_http_zk_lock_local_shm->entries[l->index];

    ngx_shmtx_lock(&ngx_http_zk_lock_local_pool->mutex);

    if (l->held) {
        e->held[ngx_http_zk_lock_local_slot]--;
        l->held = 0;

    } else {
        e->ring[l->ticket % NGX_HTTP_ZK_LOCK_LOCAL_RING] = 0;
        ngx_http_zk_lock_local_skip(e);
        ngx_queue_remove(&l->queue);
        l->waiting = 0;
    }

    ngx_shmtx_unlock(&ngx_http_zk_lock_local_pool->mutex);

    /* the next in line may be here */

    if (!ngx_queue_empty(&ngx_http_zk_lock_local_waiters)
        && !ngx_http_zk_lock_local_event.posted)
    {
        ngx_post_event(&ngx_http_zk_lock_local_event, &ngx_posted_events);
    }
}


/* under the mutex: the first in line takes a lease if one is free */

static ngx_uint_t
ngx_http_zk_lock_local_grant(ngx_http_zk_lock_local_t *l)
{
    ngx_uint_t                       i, held;
    ngx_http_zk_lock_local_entry_t  *e;

    e = &ngx_http_zk_lock_local_shm->entries[l->index];

    if (l->ticket != e->head) {
        return 0;
    }

    held = 0;

    for (i = 0; i < NGX_HTTP_ZK_LOCK_LOCAL_SLOTS; i++) {
        held += e->held[i];
    }

    if (held >= l->n) {
        return 0;
    }

    e->held[ngx_http_zk_lock_local_slot]++;
    e->ring[l->ticket % NGX_HTTP_ZK_LOCK_LOCAL_RING] = 0;
    e->head++;

    ngx_http_zk_lock_local_skip(e);

    l->held = 1;

    return 1;
}


/* under the mutex: past the tickets given up, or of a worker gone */

static void
ngx_http_zk_lock_local_skip(ngx_http_zk_lock_local_entry_t *e)
{
    ngx_pid_t  pid;

    while (e->head != e->next) {
        pid = e->ring[e->head % NGX_HTTP_ZK_LOCK_LOCAL_RING];

        if (pid != 0 && (pid == ngx_pid || kill(pid, 0) == 0
                         || ngx_errno != NGX_ESRCH))
        {
            return;
        }

        e->ring[e->head % NGX_HTTP_ZK_LOCK_LOCAL_RING] = 0;
        e->head++;
    }
}


/*
 * The worker's waiters look again, in the order they came; those that
 * hold are told after the loop, as telling one may make others leave.
 */

static void
ngx_http_zk_lock_local_poll(ngx_event_t *ev)
{
    ngx_queue_t                granted, *q, *next;
    ngx_http_zk_lock_local_t  *l;

    ngx_queue_init(&granted);

    for (q = ngx_queue_head(&ngx_http_zk_lock_local_waiters);
         q != ngx_queue_sentinel(&ngx_http_zk_lock_local_waiters);
         q = next)
    {
        next = ngx_queue_next(q);
        l = ngx_queue_data(q, ngx_http_zk_lock_local_t, queue);

        ngx_shmtx_lock(&ngx_http_zk_lock_local_pool->mutex);

        if (ngx_http_zk_lock_local_grant(l)) {
            ngx_queue_remove(q);
            ngx_queue_insert_tail(&granted, q);
            l->waiting = 0;
        }

        ngx_shmtx_unlock(&ngx_http_zk_lock_local_pool->mutex);
    }

    ngx_http_zk_lock_local_tell(&granted);

    if (!ngx_queue_empty(&ngx_http_zk_lock_local_waiters)
        && !ev->timer_set)
    {
        ngx_add_timer(ev, NGX_HTTP_ZK_LOCK_LOCAL_POLL);
    }
}


/*
 * The worker's session is usable again: no local lease is given any more,
 * and every waiter of the worker is told that it has none (l->held is 0),
 * to queue in ZooKeeper instead
 */

void
ngx_http_zk_lock_local_recall(void)
{
    ngx_queue_t                recalled, *q;
    ngx_http_zk_lock_local_t  *l;

    ngx_queue_init(&recalled);

    while (!ngx_queue_empty(&ngx_http_zk_lock_local_waiters)) {
        q = ngx_queue_head(&ngx_http_zk_lock_local_waiters);
        l = ngx_queue_data(q, ngx_http_zk_lock_local_t, queue);

        ngx_http_zk_lock_local_leave(l);
        ngx_queue_insert_tail(&recalled, &l->queue);
    }

    ngx_http_zk_lock_local_tell(&recalled);
}


/* told after the loops, as telling one may make others leave */

static void
ngx_http_zk_lock_local_tell(ngx_queue_t *told)
{
    ngx_queue_t               *q;
    ngx_http_zk_lock_local_t  *l;

    while (!ngx_queue_empty(told)) {
        q = ngx_queue_head(told);
        ngx_queue_remove(q);

        l = ngx_queue_data(q, ngx_http_zk_lock_local_t, queue);
        l->handler(l);
    }
}


/* once per outage (its number, any that changes) per lock and worker */

ngx_uint_t
ngx_http_zk_lock_local_warn(ngx_uint_t index, ngx_uint_t outage)
{
    if (ngx_http_zk_lock_local_warned == NULL
        || ngx_http_zk_lock_local_warned[index] == outage + 1)
    {
        return 0;
    }

    ngx_http_zk_lock_local_warned[index] = outage + 1;

    return 1;
}
