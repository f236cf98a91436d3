
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#include <ngx_config.h>
#include <ngx_core.h>

#include "ngx_zk_lock_stats.h"


/*
 * The zone: the totals of each lock, then each lock's gauges by worker
 * slot, which only that worker writes (a worker that dies leaves no
 * count behind: its successor clears the slot).  A fresh zone for every
 * configuration, as the HTTP module's metrics: the old workers still
 * count in theirs.
 */

#define NGX_ZK_LOCK_STATS_SLOTS  64   /* when worker_processes comes late */


typedef struct {
    ngx_atomic_t                  total[NGX_ZK_LOCK_STATS_N];
} ngx_zk_lock_stats_total_t;


typedef struct {
    ngx_atomic_t                  gauge[NGX_ZK_LOCK_STATS_GAUGES];
    ngx_zk_lock_fair_top_t        top[NGX_ZK_LOCK_FAIR_TOP];
    ngx_zk_lock_fair_load_t       loads[NGX_ZK_LOCK_CLASS_MAX];
} ngx_zk_lock_stats_gauges_t;


static ngx_int_t ngx_zk_lock_stats_init_zone(ngx_shm_zone_t *shm_zone,
    void *data);


char  *ngx_zk_lock_stats_results[] = {
    "acquired", "timeout", "error", "bypassed", "rejected", "lost",
    "revoked", "gone", "local", "jeopardy", "unreachable"
};


/* the tag of every layer's zone, by which a status page finds them */
static ngx_uint_t  ngx_zk_lock_stats_tag;


#define ngx_zk_lock_stats_totals(st)                                         \
    ((ngx_zk_lock_stats_total_t *)                                           \
         ((ngx_slab_pool_t *) (st)->zone->shm.addr)->data)

#define ngx_zk_lock_stats_gauges(st)                                         \
    ((ngx_zk_lock_stats_gauges_t *)                                          \
         (ngx_zk_lock_stats_totals(st) + (st)->names->nelts))


/* a lock directive's entry, one for each path and type: its index */

ngx_int_t
ngx_zk_lock_stats_add(ngx_conf_t *cf, ngx_array_t **names, ngx_str_t *name,
    ngx_uint_t type)
{
    ngx_uint_t                 i;
    ngx_zk_lock_stats_name_t  *n;

    if (*names == NULL) {
        *names = ngx_array_create(cf->pool, 4,
                                  sizeof(ngx_zk_lock_stats_name_t));
        if (*names == NULL) {
            return NGX_ERROR;
        }
    }

    n = (*names)->elts;

    for (i = 0; i < (*names)->nelts; i++) {
        if (n[i].type == type && n[i].name.len == name->len
            && ngx_strncmp(n[i].name.data, name->data, name->len) == 0)
        {
            return i;
        }
    }

    n = ngx_array_push(*names);
    if (n == NULL) {
        return NGX_ERROR;
    }

    n->name = *name;
    n->type = type;
    n->fair = 0;
    n->priority = 0;

    return i;
}


ngx_zk_lock_stats_t *
ngx_zk_lock_stats_zone(ngx_conf_t *cf, ngx_str_t *layer, ngx_array_t *names)
{
    size_t                size;
    ngx_str_t             zname;
    ngx_uint_t            pages;
    ngx_core_conf_t      *ccf;
    ngx_shm_zone_t       *zone;
    ngx_zk_lock_stats_t  *st;

    st = ngx_pcalloc(cf->pool, sizeof(ngx_zk_lock_stats_t));
    if (st == NULL) {
        return NULL;
    }

    ccf = (ngx_core_conf_t *) ngx_get_conf(cf->cycle->conf_ctx,
                                           ngx_core_module);

    st->layer = *layer;
    st->names = names;
    st->nslots = (ccf->worker_processes != NGX_CONF_UNSET)
                 ? (ngx_uint_t) ngx_max(ccf->worker_processes, 1)
                 : NGX_ZK_LOCK_STATS_SLOTS;

    zname.len = sizeof("zk_lock_") - 1 + layer->len;
    zname.data = ngx_pnalloc(cf->pool, zname.len);
    if (zname.data == NULL) {
        return NULL;
    }

    ngx_sprintf(zname.data, "zk_lock_%V", layer);

    size = names->nelts * (sizeof(ngx_zk_lock_stats_total_t)
                           + st->nslots * sizeof(ngx_zk_lock_stats_gauges_t));

    /* the slab pool's header and page descriptors, as the metrics' zone */
    pages = (size + ngx_pagesize - 1) / ngx_pagesize + 8;

    zone = ngx_shared_memory_add(cf, &zname,
                                 pages * (ngx_pagesize
                                          + sizeof(ngx_slab_page_t)),
                                 &ngx_zk_lock_stats_tag);
    if (zone == NULL) {
        return NULL;
    }

    zone->init = ngx_zk_lock_stats_init_zone;
    zone->data = st;
    zone->noreuse = 1;

    st->zone = zone;

    return st;
}


static ngx_int_t
ngx_zk_lock_stats_init_zone(ngx_shm_zone_t *shm_zone, void *data)
{
    size_t                size;
    ngx_slab_pool_t      *shpool;
    ngx_zk_lock_stats_t  *st;

    st = shm_zone->data;
    shpool = (ngx_slab_pool_t *) shm_zone->shm.addr;

    size = st->names->nelts * (sizeof(ngx_zk_lock_stats_total_t)
                               + st->nslots
                                 * sizeof(ngx_zk_lock_stats_gauges_t));

    shpool->data = ngx_slab_calloc(shpool, size);

    return (shpool->data == NULL) ? NGX_ERROR : NGX_OK;
}


/* at worker start: its slot's gauges start from nothing */

void
ngx_zk_lock_stats_worker(ngx_zk_lock_stats_t *st)
{
    ngx_uint_t                   i;
    ngx_zk_lock_stats_gauges_t  *g;

    st->slot = ngx_worker % st->nslots;
    g = ngx_zk_lock_stats_gauges(st);

    for (i = 0; i < st->names->nelts; i++) {
        ngx_memzero(&g[i * st->nslots + st->slot],
                    sizeof(ngx_zk_lock_stats_gauges_t));
    }
}


void
ngx_zk_lock_stats_count(ngx_zk_lock_stats_t *st, ngx_uint_t i,
    ngx_zk_lock_stats_result_e result)
{
    (void) ngx_atomic_fetch_add(&ngx_zk_lock_stats_totals(st)[i]
                                     .total[result], 1);
}


void
ngx_zk_lock_stats_gauge(ngx_zk_lock_stats_t *st, ngx_uint_t i,
    ngx_uint_t which, ngx_int_t delta)
{
    ngx_zk_lock_stats_gauges_t  *g;

    g = &ngx_zk_lock_stats_gauges(st)[i * st->nslots + st->slot];
    g->gauge[which] += delta;
}


/* fair=: what the worker's pool counted last (see keep.c), as it is */

void
ngx_zk_lock_stats_set(ngx_zk_lock_stats_t *st, ngx_uint_t i,
    ngx_uint_t which, ngx_uint_t value)
{
    ngx_zk_lock_stats_gauges_t  *g;

    g = &ngx_zk_lock_stats_gauges(st)[i * st->nslots + st->slot];
    g->gauge[which] = value;
}


void
ngx_zk_lock_stats_top_set(ngx_zk_lock_stats_t *st, ngx_uint_t i,
    ngx_zk_lock_fair_top_t *top, ngx_uint_t n)
{
    ngx_zk_lock_stats_gauges_t  *g;

    g = &ngx_zk_lock_stats_gauges(st)[i * st->nslots + st->slot];

    ngx_zk_lock_fair_top_set(g->top, top, n);
}


/* fair=: the flows that hold the most, of all the workers */

ngx_uint_t
ngx_zk_lock_stats_top(ngx_zk_lock_stats_t *st, ngx_uint_t i,
    ngx_zk_lock_fair_top_t *top)
{
    ngx_uint_t                   s, n;
    ngx_zk_lock_stats_gauges_t  *g;

    g = &ngx_zk_lock_stats_gauges(st)[i * st->nslots];
    n = 0;

    for (s = 0; s < st->nslots; s++) {
        n = ngx_zk_lock_fair_top_add(top, n, g[s].top);
    }

    return n;
}


/* priority=: a worker's classes, as its pool reported them */

void
ngx_zk_lock_stats_loads_set(ngx_zk_lock_stats_t *st, ngx_uint_t i,
    ngx_zk_lock_fair_load_t *load, ngx_uint_t n)
{
    ngx_zk_lock_stats_gauges_t  *g;

    g = &ngx_zk_lock_stats_gauges(st)[i * st->nslots + st->slot];

    ngx_memzero(g->loads, sizeof(g->loads));

    if (n) {
        ngx_memcpy(g->loads, load, n * sizeof(ngx_zk_lock_fair_load_t));
    }
}


/* priority=: the classes, summed over the workers */

void
ngx_zk_lock_stats_loads(ngx_zk_lock_stats_t *st, ngx_uint_t i,
    ngx_zk_lock_fair_load_t *load)
{
    ngx_uint_t                   s;
    ngx_zk_lock_stats_gauges_t  *g;

    g = &ngx_zk_lock_stats_gauges(st)[i * st->nslots];

    ngx_memzero(load, NGX_ZK_LOCK_CLASS_MAX * sizeof(ngx_zk_lock_fair_load_t));

    for (s = 0; s < st->nslots; s++) {
        ngx_zk_lock_fair_loads_add(load, g[s].loads);
    }
}


/* a layer's counters, for the status page of another */

ngx_zk_lock_stats_t *
ngx_zk_lock_stats_find(ngx_cycle_t *cycle, ngx_str_t *layer)
{
    ngx_uint_t            i;
    ngx_list_part_t      *part;
    ngx_shm_zone_t       *zone;
    ngx_zk_lock_stats_t  *st;

    part = &cycle->shared_memory.part;
    zone = part->elts;

    for (i = 0; /* void */ ; i++) {

        if (i >= part->nelts) {
            if (part->next == NULL) {
                return NULL;
            }

            part = part->next;
            zone = part->elts;
            i = 0;
        }

        if (zone[i].tag != &ngx_zk_lock_stats_tag) {
            continue;
        }

        st = zone[i].data;

        if (st->layer.len == layer->len
            && ngx_strncmp(st->layer.data, layer->data, layer->len) == 0)
        {
            return st;
        }
    }
}


ngx_atomic_uint_t
ngx_zk_lock_stats_total(ngx_zk_lock_stats_t *st, ngx_uint_t i,
    ngx_zk_lock_stats_result_e result)
{
    return ngx_zk_lock_stats_totals(st)[i].total[result];
}


/* a gauge of all the workers: none below 0, as a torn read could show */

ngx_atomic_int_t
ngx_zk_lock_stats_sum(ngx_zk_lock_stats_t *st, ngx_uint_t i,
    ngx_uint_t which)
{
    ngx_uint_t                   s;
    ngx_atomic_int_t             sum;
    ngx_zk_lock_stats_gauges_t  *g;

    g = &ngx_zk_lock_stats_gauges(st)[i * st->nslots];
    sum = 0;

    for (s = 0; s < st->nslots; s++) {
        sum += (ngx_atomic_int_t) g[s].gauge[which];
    }

    return ngx_max(sum, 0);
}
