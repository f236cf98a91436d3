
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#ifndef _NGX_HTTP_ZK_LOCK_METRICS_H_INCLUDED_
#define _NGX_HTTP_ZK_LOCK_METRICS_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_zk_lock_module.h"
#include "ngx_zk_lock_fair.h"


/*
 * The counts of the HTTP locks and of the workers' sessions, in a shared
 * memory zone: the layers count through the functions below, and the
 * status page (ngx_http_zk_lock_status.c) reads the zone as laid out here
 */

#define NGX_HTTP_ZK_LOCK_MAX_BUCKETS  32  /* as vts's histogram buckets */
#define NGX_HTTP_ZK_LOCK_SERVER       64


/* a worker's session, written by that worker only */
typedef struct {
    ngx_atomic_t                  pid;
    ngx_atomic_t                  connected;
    ngx_atomic_t                  reconnects;
    ngx_atomic_t                  expired;
    ngx_atomic_t                  jeopardies;
    ngx_atomic_t                  session_id;
    ngx_atomic_t                  timeout;    /* ms, granted; 0: none yet */
    u_char                        server[NGX_HTTP_ZK_LOCK_SERVER];
} ngx_http_zk_lock_slot_t;


/* an entry's counts: as many buckets as configured, and +Inf */
typedef struct {
    ngx_atomic_t                  total[NGX_HTTP_ZK_LOCK_EV_N];
    ngx_atomic_t                  wait_sum;   /* ms */
    ngx_atomic_t                  leases;     /* leases=zk: as read; 0: none */
    ngx_atomic_t                  buckets[1];
} ngx_http_zk_lock_stat_t;


/* a worker's gauges of one entry */
typedef struct {
    ngx_atomic_t                  held;
    ngx_atomic_t                  waiting;
    ngx_atomic_t                  kept;       /* idle, see keep.c */
    ngx_atomic_t                  flows;      /* fair=, see fair.c */
    ngx_atomic_t                  claim;      /* ... in thousandths */
    ngx_zk_lock_fair_top_t        top[NGX_ZK_LOCK_FAIR_TOP];
    ngx_zk_lock_fair_load_t       loads[NGX_ZK_LOCK_CLASS_MAX]; /* priority= */
} ngx_http_zk_lock_gauges_t;


#define NGX_HTTP_ZK_LOCK_HELD_GAUGE     0
#define NGX_HTTP_ZK_LOCK_WAITING_GAUGE  1
#define NGX_HTTP_ZK_LOCK_KEPT_GAUGE     2
#define NGX_HTTP_ZK_LOCK_FLOWS_GAUGE    3
#define NGX_HTTP_ZK_LOCK_CLAIM_GAUGE    4


/* in the zone: the slots, the entries, then the gauges [entry][slot] */
typedef struct {
    ngx_uint_t                    nslots;
    size_t                        stat_size;
    ngx_http_zk_lock_slot_t      *slots;
    u_char                       *stats;
    ngx_http_zk_lock_gauges_t    *gauges;
} ngx_http_zk_lock_shm_t;


#define ngx_http_zk_lock_metrics_stat(shm, i)                                 \
    ((ngx_http_zk_lock_stat_t *) ((shm)->stats + (i) * (shm)->stat_size))


/* the zone of the current cycle as this worker maps it, and its entries */
typedef struct {
    ngx_http_zk_lock_shm_t       *shm;
    ngx_array_t                  *names;      /* ngx_http_zk_lock_metric_t */
    ngx_msec_t                   *bounds;     /* of the histograms, ms */
    ngx_uint_t                    nbuckets;   /* finite ones: +Inf after */
} ngx_http_zk_lock_counts_t;


/* one scrape's reading of a histogram: _count is its +Inf bucket */
typedef struct {
    ngx_atomic_uint_t             cum[NGX_HTTP_ZK_LOCK_MAX_BUCKETS + 1];
    ngx_atomic_uint_t             sum;
} ngx_http_zk_lock_histogram_t;


ngx_int_t ngx_http_zk_lock_metrics_init(ngx_conf_t *cf,
    ngx_http_zk_lock_main_conf_t *lmcf);
void ngx_http_zk_lock_metrics_worker(void);
void ngx_http_zk_lock_metrics_count(ngx_http_zk_lock_spec_t *spec,
    ngx_http_zk_lock_event_e event, ngx_msec_t waited);
void ngx_http_zk_lock_metrics_keep(ngx_zk_lock_params_t *lp,
    ngx_int_t idle, ngx_uint_t given_back);
void ngx_http_zk_lock_metrics_fair(ngx_zk_lock_params_t *lp,
    ngx_uint_t flows, ngx_uint_t claim, void *top, ngx_uint_t ntop,
    void *classes, ngx_uint_t nclasses);
void ngx_http_zk_lock_metrics_session(ngx_zk_lock_session_t *s);
void ngx_http_zk_lock_metrics_leases(u_char *path, ngx_uint_t value);
void ngx_http_zk_lock_metrics_timeouts(ngx_conf_t *cf,
    ngx_http_zk_lock_loc_conf_t *llcf);
char *ngx_http_zk_lock_metrics_buckets(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);

/* for the status page */
ngx_http_zk_lock_counts_t *ngx_http_zk_lock_metrics_counts(void);
ngx_atomic_int_t ngx_http_zk_lock_metrics_gauge(ngx_http_zk_lock_counts_t *c,
    ngx_uint_t i, ngx_uint_t which);
ngx_uint_t ngx_http_zk_lock_metrics_leases_of(ngx_http_zk_lock_counts_t *c,
    ngx_uint_t i);
ngx_uint_t ngx_http_zk_lock_metrics_top(ngx_http_zk_lock_counts_t *c,
    ngx_uint_t i, ngx_zk_lock_fair_top_t *top);
void ngx_http_zk_lock_metrics_loads(ngx_http_zk_lock_counts_t *c,
    ngx_uint_t i, ngx_zk_lock_fair_load_t *load);
void ngx_http_zk_lock_metrics_histogram(ngx_http_zk_lock_counts_t *c,
    ngx_uint_t i, ngx_http_zk_lock_histogram_t *h);


#endif /* _NGX_HTTP_ZK_LOCK_METRICS_H_INCLUDED_ */
