
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>

#include "ngx_zk_lock_params.h"
#include "ngx_zk_lock_local.h"


#define NGX_ZK_LOCK_LOCAL_RING   128    /* tickets waiting, per lock */
#define NGX_ZK_LOCK_LOCAL_POLL   20     /* ms */
#define NGX_ZK_LOCK_LOCAL_SIZE   (1024 * 1024)  /* the zone, at least */


/* a lock in the zone, for as long as the zone lasts, or recycled */

typedef struct {
    ngx_queue_t                   queue;      /* the zone's entries */
    ngx_uint_t                    type;       /* 0: free, to be recycled */
    ngx_str_t                     name;       /* the path as configured */
    ngx_uint_t                    serial;     /* a new one when recycled */
    ngx_uint_t                    load;       /* the last configuration */
    ngx_uint_t                    next;       /* the ticket to give */
    ngx_uint_t                    head;       /* the first one to serve */
    ngx_pid_t                     ring[NGX_ZK_LOCK_LOCAL_RING];
    ngx_uint_t                    nleases;
    ngx_pid_t                    *leases;     /* the holders; 0: free */
    unsigned                      nomem:1;    /* said once */
} ngx_zk_lock_local_entry_t;


typedef struct {
    ngx_queue_t                   entries;
    ngx_uint_t                    loads;      /* configurations, counted */
    ngx_uint_t                    serial;     /* the last given */
} ngx_zk_lock_local_shm_t;


/* a lock of a configuration, of any layer, and where it is in the zone */

typedef struct {
    ngx_uint_t                    type;
    ngx_str_t                     name;       /* the path as configured */
    ngx_zk_lock_local_entry_t    *entry;      /* NULL: the zone was full */
    ngx_uint_t                    serial;     /* the entry's, when found */
} ngx_zk_lock_local_lock_t;


/* a configuration's locks: a lock's index is its place here */

typedef struct {
    ngx_array_t                   locks;      /* ngx_zk_lock_local_lock_t */
} ngx_zk_lock_local_ctx_t;


static size_t ngx_zk_lock_local_size(ngx_array_t *locks);
static ngx_int_t ngx_zk_lock_local_init_zone(ngx_shm_zone_t *shm_zone,
    void *data);
static ngx_zk_lock_local_entry_t *ngx_zk_lock_local_find(
    ngx_zk_lock_local_shm_t *sh, ngx_zk_lock_local_lock_t *m);
static ngx_zk_lock_local_entry_t *ngx_zk_lock_local_make(
    ngx_slab_pool_t *shpool, ngx_zk_lock_local_lock_t *m);
static ngx_uint_t ngx_zk_lock_local_retire(ngx_slab_pool_t *shpool,
    ngx_log_t *log);
static void ngx_zk_lock_local_forget(ngx_zk_lock_local_entry_t *e,
    ngx_pid_t pid);
static ngx_zk_lock_local_entry_t *ngx_zk_lock_local_entry(
    ngx_uint_t index);
static ngx_uint_t ngx_zk_lock_local_grant(ngx_zk_lock_local_t *l);
static ngx_uint_t ngx_zk_lock_local_held(
    ngx_zk_lock_local_entry_t *e, ngx_uint_t check, ngx_uint_t *free);
static ngx_int_t ngx_zk_lock_local_grow(ngx_zk_lock_local_entry_t *e,
    ngx_uint_t n);
static ngx_uint_t ngx_zk_lock_local_alive(ngx_pid_t pid);
static void ngx_zk_lock_local_skip(ngx_zk_lock_local_entry_t *e);
static void ngx_zk_lock_local_poll(ngx_event_t *ev);
static void ngx_zk_lock_local_tell(ngx_queue_t *told);


static ngx_str_t  ngx_zk_lock_local_name = ngx_string("zk_lock_local");

/* the zone of this worker's cycle, where its locks are, its waiters */
static ngx_slab_pool_t               *ngx_zk_lock_local_pool;
static ngx_zk_lock_local_ctx_t  *ngx_zk_lock_local_ctx;
static ngx_queue_t                    ngx_zk_lock_local_waiters;
static ngx_event_t                    ngx_zk_lock_local_event;
static ngx_connection_t               ngx_zk_lock_local_dumb;
static ngx_uint_t                    *ngx_zk_lock_local_warned;


/*
 * A lock of a layer, by its type and its path as configured: its index.
 * The layers of a configuration share one zone, so that a path locked in
 * "http" and in "stream" has one bound of local leases in the instance.
 */

ngx_int_t
ngx_zk_lock_local_add(ngx_conf_t *cf, ngx_uint_t type, ngx_str_t *name,
    ngx_shm_zone_t **zone)
{
    size_t                     size;
    ngx_uint_t                 i;
    ngx_zk_lock_local_ctx_t   *ctx;
    ngx_zk_lock_local_lock_t  *lock;

    *zone = ngx_shared_memory_add(cf, &ngx_zk_lock_local_name, 0,
                                  &ngx_zk_lock_local_name);
    if (*zone == NULL) {
        return NGX_ERROR;
    }

    ctx = (*zone)->data;

    if (ctx == NULL) {
        ctx = ngx_pcalloc(cf->pool, sizeof(ngx_zk_lock_local_ctx_t));
        if (ctx == NULL) {
            return NGX_ERROR;
        }

        if (ngx_array_init(&ctx->locks, cf->pool, 4,
                           sizeof(ngx_zk_lock_local_lock_t))
            != NGX_OK)
        {
            return NGX_ERROR;
        }

        (*zone)->init = ngx_zk_lock_local_init_zone;
        (*zone)->data = ctx;
    }

    lock = ctx->locks.elts;

    for (i = 0; i < ctx->locks.nelts; i++) {
        if (lock[i].type == type
            && lock[i].name.len == name->len
            && ngx_strncmp(lock[i].name.data, name->data, name->len) == 0)
        {
            return i;
        }
    }

    lock = ngx_array_push(&ctx->locks);
    if (lock == NULL) {
        return NGX_ERROR;
    }

    ngx_memzero(lock, sizeof(ngx_zk_lock_local_lock_t));
    lock->type = type;
    lock->name = *name;

    /*
     * A zone of the same size is taken over at a reload, with the leases
     * held and the tickets waiting in it: so the size changes only when
     * the locks outgrow it, by doubling
     */

    size = NGX_ZK_LOCK_LOCAL_SIZE;

    while (size < ngx_zk_lock_local_size(&ctx->locks)) {
        size *= 2;
    }

    (*zone)->shm.size = size;

    return ctx->locks.nelts - 1;
}


/*
 * Room for twice the locks, for locks that a reload removes (their
 * entries stay) and for the leases: an entry takes a slab chunk of the
 * next power of two, a page's descriptor comes with each page
 */

static size_t
ngx_zk_lock_local_size(ngx_array_t *locks)
{
    size_t                     size;
    ngx_uint_t                 i;
    ngx_zk_lock_local_lock_t  *m;

    size = 16 * ngx_pagesize;
    m = locks->elts;

    for (i = 0; i < locks->nelts; i++) {
        size += 2 * (2 * sizeof(ngx_zk_lock_local_entry_t)
                     + 2 * m[i].name.len + 64);
    }

    return size + size / ngx_pagesize * sizeof(ngx_slab_page_t);
}


/*
 * In the master, at every configuration: the entries of its locks, found
 * or made.  A zone taken over from the previous configuration is in use
 * by the old workers meanwhile, hence the mutex.
 */

static ngx_int_t
ngx_zk_lock_local_init_zone(ngx_shm_zone_t *shm_zone, void *data)
{
    ngx_uint_t                  i, retired;
    ngx_slab_pool_t            *shpool;
    ngx_zk_lock_local_ctx_t    *ctx;
    ngx_zk_lock_local_shm_t    *sh;
    ngx_zk_lock_local_lock_t   *m;
    ngx_zk_lock_local_entry_t  *e;

    ctx = shm_zone->data;
    shpool = (ngx_slab_pool_t *) shm_zone->shm.addr;

    if (data == NULL) {
        sh = ngx_slab_calloc(shpool, sizeof(ngx_zk_lock_local_shm_t));
        if (sh == NULL) {
            return NGX_ERROR;
        }

        ngx_queue_init(&sh->entries);
        shpool->data = sh;

        /* the module says which lock gets no room */
        shpool->log_nomem = 0;
    }

    sh = shpool->data;
    m = ctx->locks.elts;
    retired = 0;

    ngx_shmtx_lock(&shpool->mutex);

    sh->loads++;

    /* the locks kept first, so that those removed can be told apart */

    for (i = 0; i < ctx->locks.nelts; i++) {
        e = ngx_zk_lock_local_find(sh, &m[i]);

        if (e != NULL) {
            e->load = sh->loads;
            m[i].entry = e;
        }
    }

    for (i = 0; i < ctx->locks.nelts; i++) {
        if (m[i].entry != NULL) {
            continue;
        }

        e = ngx_zk_lock_local_make(shpool, &m[i]);

        if (e == NULL && !retired) {
            retired = 1;

            if (ngx_zk_lock_local_retire(shpool, shm_zone->shm.log)) {
                e = ngx_zk_lock_local_make(shpool, &m[i]);
            }
        }

        if (e == NULL) {
            ngx_log_error(NGX_LOG_ERR, shm_zone->shm.log, 0,
                          "zk_lock: no room in the \"%V\" zone for %s "
                          "\"%V\": it gets no local lease",
                          &shm_zone->shm.name,
                          ngx_zk_lock_types[m[i].type].directive,
                          &m[i].name);
            continue;
        }

        m[i].entry = e;
    }

    for (i = 0; i < ctx->locks.nelts; i++) {
        if (m[i].entry != NULL) {
            m[i].serial = m[i].entry->serial;
        }
    }

    ngx_shmtx_unlock(&shpool->mutex);

    return NGX_OK;
}


/* under the mutex */

static ngx_zk_lock_local_entry_t *
ngx_zk_lock_local_find(ngx_zk_lock_local_shm_t *sh,
    ngx_zk_lock_local_lock_t *m)
{
    ngx_queue_t                *q;
    ngx_zk_lock_local_entry_t  *e;

    for (q = ngx_queue_head(&sh->entries);
         q != ngx_queue_sentinel(&sh->entries);
         q = ngx_queue_next(q))
    {
        e = ngx_queue_data(q, ngx_zk_lock_local_entry_t, queue);

        if (e->type == m->type
            && e->name.len == m->name.len
            && ngx_strncmp(e->name.data, m->name.data, m->name.len) == 0)
        {
            return e;
        }
    }

    return NULL;
}


/* under the mutex: a free entry recycled, or a new one */

static ngx_zk_lock_local_entry_t *
ngx_zk_lock_local_make(ngx_slab_pool_t *shpool,
    ngx_zk_lock_local_lock_t *m)
{
    u_char                     *name;
    ngx_queue_t                *q;
    ngx_zk_lock_local_shm_t    *sh;
    ngx_zk_lock_local_entry_t  *e;

    sh = shpool->data;

    name = ngx_slab_alloc_locked(shpool, m->name.len);
    if (name == NULL) {
        return NULL;
    }

    e = NULL;

    for (q = ngx_queue_head(&sh->entries);
         q != ngx_queue_sentinel(&sh->entries);
         q = ngx_queue_next(q))
    {
        e = ngx_queue_data(q, ngx_zk_lock_local_entry_t, queue);

        if (e->type == 0) {
            break;
        }

        e = NULL;
    }

    if (e == NULL) {
        e = ngx_slab_calloc_locked(shpool,
                                   sizeof(ngx_zk_lock_local_entry_t));
        if (e == NULL) {
            ngx_slab_free_locked(shpool, name);
            return NULL;
        }

        ngx_queue_insert_tail(&sh->entries, &e->queue);
    }

    ngx_memcpy(name, m->name.data, m->name.len);

    e->type = m->type;
    e->name.len = m->name.len;
    e->name.data = name;
    e->serial = ++sh->serial;
    e->load = sh->loads;

    return e;
}


/*
 * Under the mutex, when the zone is full: the entries of locks that this
 * configuration no longer has and that nobody alive holds or waits for
 * are freed.  An old worker that still knows such an entry sees a new
 * serial there, and its requests get no local lease.
 */

static ngx_uint_t
ngx_zk_lock_local_retire(ngx_slab_pool_t *shpool, ngx_log_t *log)
{
    ngx_uint_t                  i, retired, free;
    ngx_queue_t                *q;
    ngx_zk_lock_local_shm_t    *sh;
    ngx_zk_lock_local_entry_t  *e;

    sh = shpool->data;
    retired = 0;

    for (q = ngx_queue_head(&sh->entries);
         q != ngx_queue_sentinel(&sh->entries);
         q = ngx_queue_next(q))
    {
        e = ngx_queue_data(q, ngx_zk_lock_local_entry_t, queue);

        if (e->type == 0 || e->load == sh->loads) {
            continue;
        }

        ngx_zk_lock_local_skip(e);

        if (e->head != e->next || ngx_zk_lock_local_held(e, 1, &free)) {
            continue;
        }

        ngx_slab_free_locked(shpool, e->name.data);

        if (e->leases) {
            ngx_slab_free_locked(shpool, e->leases);
        }

        e->type = 0;
        ngx_str_null(&e->name);
        e->serial = ++sh->serial;
        e->next = 0;
        e->head = 0;
        e->nleases = 0;
        e->leases = NULL;
        e->nomem = 0;

        for (i = 0; i < NGX_ZK_LOCK_LOCAL_RING; i++) {
            e->ring[i] = 0;
        }

        retired++;
    }

    ngx_log_debug1(NGX_LOG_DEBUG_CORE, log, 0,
                   "zk_lock local: %ui entries of removed locks freed",
                   retired);

    return retired;
}


/*
 * A worker starts.  Nothing is cleared: the leases of the workers that
 * are gone no longer count once seen gone, those of the old workers of a
 * reload still do.  Only a pid that is this worker's own was a dead
 * process's that had the same pid.
 */

ngx_int_t
ngx_zk_lock_local_worker(ngx_cycle_t *cycle, ngx_shm_zone_t *zone)
{
    ngx_uint_t                  n;
    ngx_queue_t                *q;
    ngx_zk_lock_local_shm_t    *sh;
    ngx_zk_lock_local_entry_t  *e;

    /* each layer starts it: once */

    if (ngx_zk_lock_local_event.handler == NULL) {
        ngx_queue_init(&ngx_zk_lock_local_waiters);

        /* the debug log of a timer names its event's connection, by fd */

        ngx_zk_lock_local_dumb.fd = (ngx_socket_t) -1;
        ngx_zk_lock_local_event.data = &ngx_zk_lock_local_dumb;
        ngx_zk_lock_local_event.handler = ngx_zk_lock_local_poll;
        ngx_zk_lock_local_event.log = cycle->log;
        ngx_zk_lock_local_event.cancelable = 1;
    }

    if (zone == NULL || ngx_zk_lock_local_ctx == zone->data) {
        return NGX_OK;
    }

    ngx_zk_lock_local_pool = (ngx_slab_pool_t *) zone->shm.addr;
    ngx_zk_lock_local_ctx = zone->data;

    n = ngx_zk_lock_local_ctx->locks.nelts;

    ngx_zk_lock_local_warned = ngx_pcalloc(cycle->pool,
                                           n * sizeof(ngx_uint_t));
    if (ngx_zk_lock_local_warned == NULL) {
        return NGX_ERROR;
    }

    sh = ngx_zk_lock_local_pool->data;

    ngx_shmtx_lock(&ngx_zk_lock_local_pool->mutex);

    for (q = ngx_queue_head(&sh->entries);
         q != ngx_queue_sentinel(&sh->entries);
         q = ngx_queue_next(q))
    {
        e = ngx_queue_data(q, ngx_zk_lock_local_entry_t, queue);
        ngx_zk_lock_local_forget(e, ngx_pid);
    }

    ngx_shmtx_unlock(&ngx_zk_lock_local_pool->mutex);

    return NGX_OK;
}


/* under the mutex: the tickets and leases of pid, a process gone */

static void
ngx_zk_lock_local_forget(ngx_zk_lock_local_entry_t *e,
    ngx_pid_t pid)
{
    ngx_uint_t  i;

    for (i = 0; i < NGX_ZK_LOCK_LOCAL_RING; i++) {
        if (e->ring[i] == pid) {
            e->ring[i] = 0;
        }
    }

    for (i = 0; i < e->nleases; i++) {
        if (e->leases[i] == pid) {
            e->leases[i] = 0;
        }
    }
}


/* under the mutex: the lock's entry, NULL if it has none (the zone full) */

static ngx_zk_lock_local_entry_t *
ngx_zk_lock_local_entry(ngx_uint_t index)
{
    ngx_zk_lock_local_lock_t  *lock;

    lock = (ngx_zk_lock_local_lock_t *) ngx_zk_lock_local_ctx->locks.elts
           + index;

    if (lock->entry == NULL || lock->entry->serial != lock->serial) {
        return NULL;
    }

    return lock->entry;
}


/*
 * NGX_OK: it holds; NGX_AGAIN: it waits, and its handler is called once
 * it holds; NGX_BUSY: too many wait for this lock in this instance.
 */

ngx_int_t
ngx_zk_lock_local_take(ngx_zk_lock_local_t *l)
{
    ngx_uint_t                  granted;
    ngx_zk_lock_local_entry_t  *e;

    if (ngx_zk_lock_local_ctx == NULL) {
        return NGX_ERROR;
    }

    granted = 0;

    ngx_shmtx_lock(&ngx_zk_lock_local_pool->mutex);

    /* a lock with no room in the zone: its requests wait, and time out */

    e = ngx_zk_lock_local_entry(l->index);

    if (e != NULL) {
        ngx_zk_lock_local_skip(e);

        if (e->next - e->head >= NGX_ZK_LOCK_LOCAL_RING) {
            ngx_shmtx_unlock(&ngx_zk_lock_local_pool->mutex);
            return NGX_BUSY;
        }

        l->ticket = e->next++;
        e->ring[l->ticket % NGX_ZK_LOCK_LOCAL_RING] = ngx_pid;

        granted = ngx_zk_lock_local_grant(l);
    }

    ngx_shmtx_unlock(&ngx_zk_lock_local_pool->mutex);

    if (granted) {
        return NGX_OK;
    }

    l->waiting = 1;
    ngx_queue_insert_tail(&ngx_zk_lock_local_waiters, &l->queue);

    if (!ngx_zk_lock_local_event.timer_set) {
        ngx_add_timer(&ngx_zk_lock_local_event,
                      NGX_ZK_LOCK_LOCAL_POLL);
    }

    return NGX_AGAIN;
}


/* held, or waiting: given back, or given up */

void
ngx_zk_lock_local_leave(ngx_zk_lock_local_t *l)
{
    ngx_zk_lock_local_entry_t  *e;

    if (l->telling) {
        /* on a list of those to be told: not to be told once gone */
        ngx_queue_remove(&l->queue);
        l->telling = 0;
    }

    if (!l->held && !l->waiting) {
        return;
    }

    ngx_shmtx_lock(&ngx_zk_lock_local_pool->mutex);

    e = ngx_zk_lock_local_entry(l->index);

    if (l->held) {
        if (e != NULL && l->lease < e->nleases
            && e->leases[l->lease] == ngx_pid)
        {
            e->leases[l->lease] = 0;
        }

        l->held = 0;

    } else {
        if (e != NULL) {
            e->ring[l->ticket % NGX_ZK_LOCK_LOCAL_RING] = 0;
            ngx_zk_lock_local_skip(e);
        }

        ngx_queue_remove(&l->queue);
        l->waiting = 0;
    }

    ngx_shmtx_unlock(&ngx_zk_lock_local_pool->mutex);

    /* the next in line may be here */

    if (!ngx_queue_empty(&ngx_zk_lock_local_waiters)
        && !ngx_zk_lock_local_event.posted)
    {
        ngx_post_event(&ngx_zk_lock_local_event, &ngx_posted_events);
    }
}


/*
 * Under the mutex: the first in line takes a lease if fewer than its n
 * are held, whoever holds them: a lock's n may differ between locations,
 * and between the old workers of a reload and the new ones
 */

static ngx_uint_t
ngx_zk_lock_local_grant(ngx_zk_lock_local_t *l)
{
    ngx_uint_t                  free;
    ngx_zk_lock_local_entry_t  *e;

    e = ngx_zk_lock_local_entry(l->index);

    if (e == NULL || l->ticket != e->head) {
        return 0;
    }

    /* the holders are looked at (kill()) only when they seem too many */

    if (ngx_zk_lock_local_held(e, 0, &free) >= l->n
        && ngx_zk_lock_local_held(e, 1, &free) >= l->n)
    {
        return 0;
    }

    if (free == e->nleases && ngx_zk_lock_local_grow(e, l->n) != NGX_OK) {
        return 0;
    }

    e->leases[free] = ngx_pid;
    e->ring[l->ticket % NGX_ZK_LOCK_LOCAL_RING] = 0;
    e->head++;

    ngx_zk_lock_local_skip(e);

    l->lease = free;
    l->held = 1;

    return 1;
}


/*
 * Under the mutex: the leases held, and the first free one (nleases if
 * none); with check, those of a process gone are freed first
 */

static ngx_uint_t
ngx_zk_lock_local_held(ngx_zk_lock_local_entry_t *e,
    ngx_uint_t check, ngx_uint_t *free)
{
    ngx_uint_t  i, held;

    held = 0;
    *free = e->nleases;

    for (i = 0; i < e->nleases; i++) {
        if (e->leases[i] != 0 && check
            && !ngx_zk_lock_local_alive(e->leases[i]))
        {
            e->leases[i] = 0;
        }

        if (e->leases[i] != 0) {
            held++;

        } else if (*free == e->nleases) {
            *free = i;
        }
    }

    return held;
}


/*
 * Under the mutex: every lease is held, fewer than n: room for more, as
 * many as held again, up to n; the places of those held stay
 */

static ngx_int_t
ngx_zk_lock_local_grow(ngx_zk_lock_local_entry_t *e, ngx_uint_t n)
{
    ngx_uint_t  size;
    ngx_pid_t  *leases;

    size = ngx_min(ngx_max(2 * e->nleases, 4), n);

    leases = ngx_slab_calloc_locked(ngx_zk_lock_local_pool,
                                    size * sizeof(ngx_pid_t));
    if (leases == NULL) {
        if (!e->nomem) {
            e->nomem = 1;
            ngx_log_error(NGX_LOG_ERR, ngx_cycle->log, 0,
                          "zk_lock: no room in the \"%V\" zone for %ui "
                          "local leases of %s \"%V\"",
                          &ngx_zk_lock_local_name, size,
                          ngx_zk_lock_types[e->type].directive,
                          &e->name);
        }

        return NGX_ERROR;
    }

    if (e->leases) {
        ngx_memcpy(leases, e->leases, e->nleases * sizeof(ngx_pid_t));
        ngx_slab_free_locked(ngx_zk_lock_local_pool, e->leases);
    }

    e->leases = leases;
    e->nleases = size;

    return NGX_OK;
}


static ngx_uint_t
ngx_zk_lock_local_alive(ngx_pid_t pid)
{
    return pid == ngx_pid || kill(pid, 0) == 0 || ngx_errno != NGX_ESRCH;
}


/* under the mutex: past the tickets given up, or of a worker gone */

static void
ngx_zk_lock_local_skip(ngx_zk_lock_local_entry_t *e)
{
    ngx_pid_t  pid;

    while (e->head != e->next) {
        pid = e->ring[e->head % NGX_ZK_LOCK_LOCAL_RING];

        if (pid != 0 && ngx_zk_lock_local_alive(pid)) {
            return;
        }

        e->ring[e->head % NGX_ZK_LOCK_LOCAL_RING] = 0;
        e->head++;
    }
}


/*
 * The worker's waiters look again, in the order they came; those that
 * hold are told after the loop, as telling one may make others leave.
 */

static void
ngx_zk_lock_local_poll(ngx_event_t *ev)
{
    ngx_queue_t           granted, *q, *next;
    ngx_zk_lock_local_t  *l;

    ngx_queue_init(&granted);

    for (q = ngx_queue_head(&ngx_zk_lock_local_waiters);
         q != ngx_queue_sentinel(&ngx_zk_lock_local_waiters);
         q = next)
    {
        next = ngx_queue_next(q);
        l = ngx_queue_data(q, ngx_zk_lock_local_t, queue);

        ngx_shmtx_lock(&ngx_zk_lock_local_pool->mutex);

        if (ngx_zk_lock_local_grant(l)) {
            ngx_queue_remove(q);
            ngx_queue_insert_tail(&granted, q);
            l->telling = 1;
            l->waiting = 0;
        }

        ngx_shmtx_unlock(&ngx_zk_lock_local_pool->mutex);
    }

    ngx_zk_lock_local_tell(&granted);

    if (!ngx_queue_empty(&ngx_zk_lock_local_waiters)
        && !ev->timer_set)
    {
        ngx_add_timer(ev, NGX_ZK_LOCK_LOCAL_POLL);
    }
}


/*
 * A worker's session is usable again: no local lease is given any more
 * to those that wait through it (their owner), and each is told that it
 * has none (l->held is 0), to queue in ZooKeeper instead
 */

void
ngx_zk_lock_local_recall(void *owner)
{
    ngx_queue_t           recalled, *q, *next;
    ngx_zk_lock_local_t  *l;

    ngx_queue_init(&recalled);

    for (q = ngx_queue_head(&ngx_zk_lock_local_waiters);
         q != ngx_queue_sentinel(&ngx_zk_lock_local_waiters);
         q = next)
    {
        next = ngx_queue_next(q);
        l = ngx_queue_data(q, ngx_zk_lock_local_t, queue);

        if (l->owner != owner) {
            continue;
        }

        ngx_zk_lock_local_leave(l);
        ngx_queue_insert_tail(&recalled, &l->queue);
        l->telling = 1;
    }

    ngx_zk_lock_local_tell(&recalled);
}


/* told after the loops, as telling one may make others leave */

static void
ngx_zk_lock_local_tell(ngx_queue_t *told)
{
    ngx_queue_t          *q;
    ngx_zk_lock_local_t  *l;

    /*
     * Telling one may end other requests (those of its connection that
     * were posted): one that ends leaves the list, see local_leave()
     */

    while (!ngx_queue_empty(told)) {
        q = ngx_queue_head(told);
        ngx_queue_remove(q);

        l = ngx_queue_data(q, ngx_zk_lock_local_t, queue);
        l->telling = 0;
        l->handler(l);
    }
}


/* once per outage (its number, any that changes) per lock and worker */

ngx_uint_t
ngx_zk_lock_local_warn(ngx_uint_t index, ngx_uint_t outage)
{
    if (ngx_zk_lock_local_warned == NULL
        || ngx_zk_lock_local_warned[index] == outage + 1)
    {
        return 0;
    }

    ngx_zk_lock_local_warned[index] = outage + 1;

    return 1;
}
