
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#ifndef _NGX_ZK_LOCK_STATS_H_INCLUDED_
#define _NGX_ZK_LOCK_STATS_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>

#include "ngx_zk_lock_fair.h"


/*
 * A layer's counters of its locks, in a shared memory zone of their own
 * that another layer's status page may read (the stream locks show on
 * the HTTP module's page): found by the zone's tag, not by a call into
 * the layer that counts.
 */

/* how a participant's wait or hold ended */
typedef enum {
    NGX_ZK_LOCK_STATS_ACQUIRED = 0,
    NGX_ZK_LOCK_STATS_TIMEOUT,
    NGX_ZK_LOCK_STATS_ERROR,
    NGX_ZK_LOCK_STATS_BYPASSED,
    NGX_ZK_LOCK_STATS_REJECTED,
    NGX_ZK_LOCK_STATS_LOST,
    NGX_ZK_LOCK_STATS_REVOKED,
    NGX_ZK_LOCK_STATS_GONE,         /* the client left while waiting */
    NGX_ZK_LOCK_STATS_LOCAL,        /* a local lease (zk_lock_fail local=) */
    NGX_ZK_LOCK_STATS_JEOPARDY,     /* let go: zookeeper went silent */
    NGX_ZK_LOCK_STATS_UNREACHABLE   /* timed out: zookeeper was silent */
} ngx_zk_lock_stats_result_e;

#define NGX_ZK_LOCK_STATS_N  (NGX_ZK_LOCK_STATS_UNREACHABLE + 1)

#define NGX_ZK_LOCK_STATS_HELD     0
#define NGX_ZK_LOCK_STATS_WAITING  1
#define NGX_ZK_LOCK_STATS_FLOWS    2      /* fair=: set, not added to */
#define NGX_ZK_LOCK_STATS_CLAIM    3
#define NGX_ZK_LOCK_STATS_GAUGES   4


/* a lock as configured: its path, before variables, and its type */
typedef struct {
    ngx_str_t                     name;
    ngx_uint_t                    type;       /* NGX_ZK_LOCK_MUTEX... */
    unsigned                      fair:1;     /* a directive has fair= */
    unsigned                      priority:1; /* ... has priority= */
} ngx_zk_lock_stats_name_t;


typedef struct {
    ngx_str_t                     layer;      /* the label: "stream" */
    ngx_array_t                  *names;      /* ngx_zk_lock_stats_name_t */
    ngx_uint_t                    nslots;     /* of workers */
    ngx_shm_zone_t               *zone;
    ngx_uint_t                    slot;       /* this worker's */
    ngx_zk_lock_classes_t        *classes;    /* the layer's, for the page */
} ngx_zk_lock_stats_t;


ngx_int_t ngx_zk_lock_stats_add(ngx_conf_t *cf, ngx_array_t **names,
    ngx_str_t *name, ngx_uint_t type);
ngx_zk_lock_stats_t *ngx_zk_lock_stats_zone(ngx_conf_t *cf,
    ngx_str_t *layer, ngx_array_t *names);
void ngx_zk_lock_stats_worker(ngx_zk_lock_stats_t *st);
void ngx_zk_lock_stats_count(ngx_zk_lock_stats_t *st, ngx_uint_t i,
    ngx_zk_lock_stats_result_e result);
void ngx_zk_lock_stats_gauge(ngx_zk_lock_stats_t *st, ngx_uint_t i,
    ngx_uint_t which, ngx_int_t delta);
void ngx_zk_lock_stats_set(ngx_zk_lock_stats_t *st, ngx_uint_t i,
    ngx_uint_t which, ngx_uint_t value);
void ngx_zk_lock_stats_top_set(ngx_zk_lock_stats_t *st, ngx_uint_t i,
    ngx_zk_lock_fair_top_t *top, ngx_uint_t n);
ngx_uint_t ngx_zk_lock_stats_top(ngx_zk_lock_stats_t *st, ngx_uint_t i,
    ngx_zk_lock_fair_top_t *top);
void ngx_zk_lock_stats_loads_set(ngx_zk_lock_stats_t *st, ngx_uint_t i,
    ngx_zk_lock_fair_load_t *load, ngx_uint_t n);
void ngx_zk_lock_stats_loads(ngx_zk_lock_stats_t *st, ngx_uint_t i,
    ngx_zk_lock_fair_load_t *load);

ngx_zk_lock_stats_t *ngx_zk_lock_stats_find(ngx_cycle_t *cycle,
    ngx_str_t *layer);
ngx_atomic_uint_t ngx_zk_lock_stats_total(ngx_zk_lock_stats_t *st,
    ngx_uint_t i, ngx_zk_lock_stats_result_e result);
ngx_atomic_int_t ngx_zk_lock_stats_sum(ngx_zk_lock_stats_t *st,
    ngx_uint_t i, ngx_uint_t which);


extern char  *ngx_zk_lock_stats_results[];


#endif /* _NGX_ZK_LOCK_STATS_H_INCLUDED_ */
