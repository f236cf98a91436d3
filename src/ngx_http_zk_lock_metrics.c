
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_zk_lock_metrics.h"
#include "ngx_zk_lock_session.h"
#include "ngx_zk_lock_stats.h"


/*
 * Every worker has its own session; what they do is added up in a shared
 * memory zone, so that one scrape of any worker sees the whole instance.
 * There is one entry per lock path as configured and type (variables
 * unexpanded: a bounded set of names; directives that share both share
 * the entry, as Prometheus wants one series per label set), and one slot
 * per worker.  Each worker writes only its own slot's gauges; totals are
 * atomic.
 */

#define NGX_HTTP_ZK_LOCK_SLOTS        64  /* when worker_processes comes late */
#define NGX_HTTP_ZK_LOCK_MAX_BUCKETS  32  /* as vts's histogram buckets */
#define NGX_HTTP_ZK_LOCK_SERVER       64


typedef struct {
    ngx_atomic_t                  pid;
    ngx_atomic_t                  connected;
    ngx_atomic_t                  reconnects;
    ngx_atomic_t                  expired;
    ngx_atomic_t                  jeopardies;
    ngx_atomic_t                  session_id;
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
} ngx_http_zk_lock_gauges_t;


#define NGX_HTTP_ZK_LOCK_HELD_GAUGE     0
#define NGX_HTTP_ZK_LOCK_WAITING_GAUGE  1
#define NGX_HTTP_ZK_LOCK_KEPT_GAUGE     2


/* in the zone: the slots, the entries, then the gauges [entry][slot] */
typedef struct {
    ngx_uint_t                    nslots;
    size_t                        stat_size;
    ngx_http_zk_lock_slot_t      *slots;
    u_char                       *stats;
    ngx_http_zk_lock_gauges_t    *gauges;
} ngx_http_zk_lock_shm_t;


/*
 * The status page is written into chunks as it goes, sized as written
 * rather than to a bound of the whole (ten times the output with 2 000
 * locks), and shared by the requests that ask in the same millisecond
 * (one event loop's turn: a burst of scrapes costs one rendering, not one
 * each, and the worker's gated requests do not wait behind them all).  A
 * page lives while a request sends it.
 */

#define NGX_HTTP_ZK_LOCK_CHUNK  65536

/* a line of Prometheus text, but for the lock's name (escaped: 2x) */
#define NGX_HTTP_ZK_LOCK_LINE(m)  (256 + 2 * (m)->name.len)

typedef struct {
    ngx_pool_t                   *pool;
    ngx_chain_t                  *first;
    ngx_chain_t                 **last;
    ngx_buf_t                    *buf;
} ngx_http_zk_lock_out_t;

typedef struct {
    ngx_pool_t                   *pool;       /* its chunks */
    ngx_chain_t                  *out;
    off_t                         size;
    ngx_msec_t                    at;         /* written at */
    ngx_uint_t                    refs;       /* the cache's, the senders' */
} ngx_http_zk_lock_page_t;


#define ngx_http_zk_lock_metrics_stat(shm, i)                                 \
    ((ngx_http_zk_lock_stat_t *) ((shm)->stats + (i) * (shm)->stat_size))


/* one scrape's reading of a histogram: _count is its +Inf bucket */
typedef struct {
    ngx_atomic_uint_t             cum[NGX_HTTP_ZK_LOCK_MAX_BUCKETS + 1];
    ngx_atomic_uint_t             sum;
} ngx_http_zk_lock_histogram_t;


static ngx_int_t ngx_http_zk_lock_metrics_init_buckets(ngx_conf_t *cf,
    ngx_http_zk_lock_main_conf_t *lmcf);
static size_t ngx_http_zk_lock_metrics_size(ngx_uint_t nslots,
    ngx_uint_t nstats, ngx_uint_t nbuckets);
static ngx_int_t ngx_http_zk_lock_metrics_init_zone(ngx_shm_zone_t *shm_zone,
    void *data);
static ngx_int_t ngx_http_zk_lock_metrics_status_handler(ngx_http_request_t *r);
static u_char *ngx_http_zk_lock_metrics_json(ngx_http_zk_lock_out_t *o,
    u_char *p, ngx_http_zk_lock_shm_t *shm, ngx_array_t *names);
static u_char *ngx_http_zk_lock_metrics_json_workers(
    ngx_http_zk_lock_out_t *o, u_char *p, ngx_http_zk_lock_shm_t *shm);
static u_char *ngx_http_zk_lock_metrics_prometheus(ngx_http_zk_lock_out_t *o,
    u_char *p, ngx_http_zk_lock_shm_t *shm, ngx_array_t *names);
static u_char *ngx_http_zk_lock_metrics_prom_workers(
    ngx_http_zk_lock_out_t *o, u_char *p, ngx_http_zk_lock_shm_t *shm);
static u_char *ngx_http_zk_lock_metrics_prom_gauges(ngx_http_zk_lock_out_t *o,
    u_char *p, ngx_http_zk_lock_shm_t *shm, ngx_array_t *names,
    ngx_uint_t which);
static u_char *ngx_http_zk_lock_metrics_prom_leases(ngx_http_zk_lock_out_t *o,
    u_char *p, ngx_http_zk_lock_shm_t *shm, ngx_array_t *names);
static u_char *ngx_http_zk_lock_metrics_prom_kept(ngx_http_zk_lock_out_t *o,
    u_char *p, ngx_http_zk_lock_shm_t *shm, ngx_array_t *names);
static u_char *ngx_http_zk_lock_metrics_prom_requests(
    ngx_http_zk_lock_out_t *o, u_char *p, ngx_http_zk_lock_shm_t *shm,
    ngx_array_t *names);
static u_char *ngx_http_zk_lock_metrics_prom_histogram(
    ngx_http_zk_lock_out_t *o, u_char *p, ngx_http_zk_lock_shm_t *shm,
    ngx_array_t *names);
static u_char *ngx_http_zk_lock_metrics_room(ngx_http_zk_lock_out_t *o,
    u_char *p, size_t need);
static ngx_http_zk_lock_page_t *ngx_http_zk_lock_metrics_render(
    ngx_http_request_t *r, ngx_uint_t prometheus);
static void ngx_http_zk_lock_metrics_unref(void *data);
static ngx_int_t ngx_http_zk_lock_metrics_send(ngx_http_request_t *r,
    ngx_http_zk_lock_page_t *page);
static u_char *ngx_http_zk_lock_metrics_layer_json(ngx_http_zk_lock_out_t *o,
    u_char *p, ngx_zk_lock_stats_t *st);
static u_char *ngx_http_zk_lock_metrics_layer_prom(ngx_http_zk_lock_out_t *o,
    u_char *p, ngx_zk_lock_stats_t *st, char *family, ngx_int_t which);
static u_char *ngx_http_zk_lock_metrics_series(u_char *p, char *family,
    ngx_http_zk_lock_metric_t *m);
static void ngx_http_zk_lock_metrics_read_histogram(ngx_http_zk_lock_stat_t *st,
    ngx_http_zk_lock_histogram_t *h);
static u_char *ngx_http_zk_lock_metrics_bound(u_char *p, ngx_uint_t j);
static ngx_uint_t ngx_http_zk_lock_metrics_leases_of(
    ngx_http_zk_lock_shm_t *shm, ngx_http_zk_lock_metric_t *m, ngx_uint_t i);
static u_char *ngx_http_zk_lock_metrics_escape(u_char *p, ngx_str_t *s);
static ngx_atomic_int_t ngx_http_zk_lock_metrics_gauge(
    ngx_http_zk_lock_shm_t *shm, ngx_uint_t i, ngx_uint_t which);


/*
 * The wait-time histogram's bounds without zk_lock_histogram_buckets, ms;
 * they go on as 1, 2.5, 5 times a power of ten up to the longest timeout
 * of a lock, where waits end (see init_buckets())
 */
static ngx_msec_t  ngx_http_zk_lock_default_bounds[] = {
    1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000
};

/* the zone of the current cycle, mapped in every worker */
static ngx_http_zk_lock_shm_t  *ngx_http_zk_lock_shm;
static ngx_array_t             *ngx_http_zk_lock_names;
static ngx_uint_t               ngx_http_zk_lock_slot;

/* the bounds of the cycle's histograms, ms */
static ngx_msec_t              *ngx_http_zk_lock_bounds;
static ngx_uint_t               ngx_http_zk_lock_nbuckets;

static ngx_str_t  ngx_http_zk_lock_build_info = ngx_string(
    "# HELP zk_lock_build_info The module's version and build.\n"
    "# TYPE zk_lock_build_info gauge\n"
    "zk_lock_build_info{version=\"" NGX_ZK_LOCK_VERSION "\",build=\""
    NGX_ZK_LOCK_BUILD "\"} 1\n");

static ngx_str_t  ngx_http_zk_lock_zone_name = ngx_string("zk_lock");

/* the other layer whose locks the page shows, from the core's counters */
static ngx_str_t  ngx_http_zk_lock_stream = ngx_string("stream");

/* the last page written, JSON and Prometheus */
static ngx_http_zk_lock_page_t  *ngx_http_zk_lock_pages[2];


ngx_int_t
ngx_http_zk_lock_metrics_init(ngx_conf_t *cf,
    ngx_http_zk_lock_main_conf_t *lmcf)
{
    size_t            size;
    ngx_uint_t        pages;
    ngx_shm_zone_t   *zone;
    ngx_core_conf_t  *ccf;

    /*
     * A slot per worker: worker_processes is known here unless it comes
     * after the http block, and then a slot may serve several workers
     */

    ccf = (ngx_core_conf_t *) ngx_get_conf(cf->cycle->conf_ctx,
                                           ngx_core_module);

    lmcf->slots = (ccf->worker_processes != NGX_CONF_UNSET)
                  ? (ngx_uint_t) ngx_max(ccf->worker_processes, 1)
                  : NGX_HTTP_ZK_LOCK_SLOTS;

    if (ngx_http_zk_lock_metrics_init_buckets(cf, lmcf) != NGX_OK) {
        return NGX_ERROR;
    }

    size = ngx_http_zk_lock_metrics_size(lmcf->slots, lmcf->metrics->nelts,
                                         lmcf->buckets->nelts);

    /*
     * The slab pool at the start of the zone keeps a descriptor for each
     * page and rounds the block up to whole pages; its header and the
     * alignment of the first page take a few pages more
     */

    pages = (size + ngx_pagesize - 1) / ngx_pagesize + 8;

    zone = ngx_shared_memory_add(cf, &ngx_http_zk_lock_zone_name,
                                 pages * (ngx_pagesize
                                          + sizeof(ngx_slab_page_t)),
                                 &ngx_http_zk_lock_module);
    if (zone == NULL) {
        return NGX_ERROR;
    }

    /*
     * A fresh zone for every configuration: the entries of a reloaded one
     * are other directives, and the old workers still count in theirs
     */

    zone->init = ngx_http_zk_lock_metrics_init_zone;
    zone->data = lmcf;
    zone->noreuse = 1;

    lmcf->zone = zone;

    return NGX_OK;
}


/*
 * Without zk_lock_histogram_buckets: the default bounds, and more until
 * one reaches the longest timeout of a lock, so that the quantiles of
 * long waits are not all read as the last finite bound
 */

static ngx_int_t
ngx_http_zk_lock_metrics_init_buckets(ngx_conf_t *cf,
    ngx_http_zk_lock_main_conf_t *lmcf)
{
    ngx_uint_t   i, n;
    ngx_msec_t   bound, *b;

    if (lmcf->buckets) {
        return NGX_OK;
    }

    n = sizeof(ngx_http_zk_lock_default_bounds) / sizeof(ngx_msec_t);

    lmcf->buckets = ngx_array_create(cf->pool, n + 8, sizeof(ngx_msec_t));
    if (lmcf->buckets == NULL) {
        return NGX_ERROR;
    }

    for (i = 0; i < n; i++) {
        b = ngx_array_push(lmcf->buckets);
        if (b == NULL) {
            return NGX_ERROR;
        }

        *b = ngx_http_zk_lock_default_bounds[i];
    }

    bound = ngx_http_zk_lock_default_bounds[n - 1];

    while (bound < lmcf->max_timeout
           && lmcf->buckets->nelts < NGX_HTTP_ZK_LOCK_MAX_BUCKETS)
    {
        /* 10 s, 25 s, 50 s, 100 s: times 2.5 after a power of ten */

        for (n = bound; n % 10 == 0; n /= 10) { /* void */ }

        bound = (n == 1) ? bound / 2 * 5 : bound * 2;

        b = ngx_array_push(lmcf->buckets);
        if (b == NULL) {
            return NGX_ERROR;
        }

        *b = bound;
    }

    return NGX_OK;
}


static size_t
ngx_http_zk_lock_metrics_size(ngx_uint_t nslots, ngx_uint_t nstats,
    ngx_uint_t nbuckets)
{
    return sizeof(ngx_http_zk_lock_shm_t)
           + nslots * sizeof(ngx_http_zk_lock_slot_t)
           + nstats * (offsetof(ngx_http_zk_lock_stat_t, buckets)
                       + (nbuckets + 1) * sizeof(ngx_atomic_t))
           + nstats * nslots * sizeof(ngx_http_zk_lock_gauges_t);
}


static ngx_int_t
ngx_http_zk_lock_metrics_init_zone(ngx_shm_zone_t *shm_zone, void *data)
{
    size_t                         size;
    ngx_uint_t                     nstats;
    ngx_slab_pool_t               *shpool;
    ngx_http_zk_lock_shm_t        *shm;
    ngx_http_zk_lock_main_conf_t  *lmcf;

    lmcf = shm_zone->data;
    shpool = (ngx_slab_pool_t *) shm_zone->shm.addr;
    nstats = lmcf->metrics->nelts;

    size = ngx_http_zk_lock_metrics_size(lmcf->slots, nstats,
                                         lmcf->buckets->nelts);

    /* the slab's own "no memory" would name neither the module nor why */

    shpool->log_nomem = 0;

    shm = ngx_slab_calloc(shpool, size);
    if (shm == NULL) {
        ngx_log_error(NGX_LOG_EMERG, shm_zone->shm.log, 0,
                      "zk_lock: the metrics of %ui lock paths and %ui "
                      "workers need %uz bytes, more than the \"%V\" zone "
                      "of %uz bytes has", nstats, lmcf->slots, size,
                      &shm_zone->shm.name, shm_zone->shm.size);
        return NGX_ERROR;
    }

    shm->nslots = lmcf->slots;
    shm->stat_size = offsetof(ngx_http_zk_lock_stat_t, buckets)
                     + (lmcf->buckets->nelts + 1) * sizeof(ngx_atomic_t);
    shm->slots = (ngx_http_zk_lock_slot_t *) &shm[1];
    shm->stats = (u_char *) &shm->slots[shm->nslots];
    shm->gauges = (ngx_http_zk_lock_gauges_t *)
                      (shm->stats + nstats * shm->stat_size);

    shpool->data = shm;

    return NGX_OK;
}


/* at worker start: this worker's slot, cleared of a dead predecessor's */

void
ngx_http_zk_lock_metrics_worker(void)
{
    ngx_uint_t                     i;
    ngx_http_zk_lock_shm_t        *shm;
    ngx_http_zk_lock_gauges_t     *g;
    ngx_http_zk_lock_main_conf_t  *lmcf;

    lmcf = ngx_http_cycle_get_module_main_conf(ngx_cycle,
                                               ngx_http_zk_lock_module);

    if (lmcf == NULL || lmcf->zone == NULL) {
        return;
    }

    shm = ((ngx_slab_pool_t *) lmcf->zone->shm.addr)->data;

    ngx_http_zk_lock_shm = shm;
    ngx_http_zk_lock_names = lmcf->metrics;
    ngx_http_zk_lock_slot = ngx_worker % shm->nslots;
    ngx_http_zk_lock_bounds = lmcf->buckets->elts;
    ngx_http_zk_lock_nbuckets = lmcf->buckets->nelts;

    ngx_memzero(&shm->slots[ngx_http_zk_lock_slot],
                sizeof(ngx_http_zk_lock_slot_t));

    shm->slots[ngx_http_zk_lock_slot].pid = ngx_pid;

    for (i = 0; i < lmcf->metrics->nelts; i++) {
        g = &shm->gauges[i * shm->nslots + ngx_http_zk_lock_slot];
        g->held = 0;
        g->waiting = 0;
        g->kept = 0;
    }
}


/* at exit: the pages kept for the next scrapes of the same millisecond */

void
ngx_http_zk_lock_metrics_exit(void)
{
    ngx_uint_t  i;

    for (i = 0; i < 2; i++) {
        if (ngx_http_zk_lock_pages[i]) {
            ngx_http_zk_lock_metrics_unref(ngx_http_zk_lock_pages[i]);
            ngx_http_zk_lock_pages[i] = NULL;
        }
    }
}


void
ngx_http_zk_lock_metrics_count(ngx_http_zk_lock_spec_t *spec,
    ngx_http_zk_lock_event_e event, ngx_msec_t waited)
{
    ngx_uint_t                  i;
    ngx_http_zk_lock_shm_t     *shm;
    ngx_http_zk_lock_stat_t    *st;
    ngx_http_zk_lock_gauges_t  *g;

    shm = ngx_http_zk_lock_shm;

    if (shm == NULL) {
        return;
    }

    st = ngx_http_zk_lock_metrics_stat(shm, spec->index);
    g = &shm->gauges[spec->index * shm->nslots + ngx_http_zk_lock_slot];

    (void) ngx_atomic_fetch_add(&st->total[event], 1);

    switch (event) {

    case NGX_HTTP_ZK_LOCK_EV_WAIT:
        g->waiting++;
        return;

    case NGX_HTTP_ZK_LOCK_EV_ACQUIRED:
        g->held++;

        for (i = 0; i < ngx_http_zk_lock_nbuckets; i++) {
            if (waited <= ngx_http_zk_lock_bounds[i]) {
                break;
            }
        }

        (void) ngx_atomic_fetch_add(&st->buckets[i], 1);
        (void) ngx_atomic_fetch_add(&st->wait_sum, waited);
        return;

    case NGX_HTTP_ZK_LOCK_EV_LOCAL:
        g->held++;
        return;

    case NGX_HTTP_ZK_LOCK_EV_UNWAIT:
        g->waiting--;
        return;

    case NGX_HTTP_ZK_LOCK_EV_RELEASED:
        g->held--;
        return;

    default: /* TIMEOUT, ERROR, BYPASSED, REJECTED, LOST, REVOKED, REUSED,
                GIVEN_BACK, DRY_RUN, DRY_ACQUIRED, DRY_WAITED: counts */
        return;
    }
}


/* what a pool of kept leases reports (see keep.c): "tag" is its spec */

void
ngx_http_zk_lock_metrics_keep(ngx_zk_lock_params_t *lp, ngx_int_t idle,
    ngx_uint_t given_back)
{
    ngx_http_zk_lock_spec_t  *spec = (ngx_http_zk_lock_spec_t *) lp;

    ngx_http_zk_lock_shm_t     *shm;
    ngx_http_zk_lock_stat_t    *st;
    ngx_http_zk_lock_gauges_t  *g;

    shm = ngx_http_zk_lock_shm;

    if (shm == NULL) {
        return;
    }

    st = ngx_http_zk_lock_metrics_stat(shm, spec->index);
    g = &shm->gauges[spec->index * shm->nslots + ngx_http_zk_lock_slot];
    g->kept += idle;

    if (given_back) {
        (void) ngx_atomic_fetch_add(&st->total[NGX_HTTP_ZK_LOCK_EV_GIVEN_BACK],
                                    given_back);
    }
}


void
ngx_http_zk_lock_metrics_session(ngx_zk_lock_session_t *s)
{
    const char               *server;
    ngx_http_zk_lock_slot_t  *slot;

    if (ngx_http_zk_lock_shm == NULL) {
        return;
    }

    slot = &ngx_http_zk_lock_shm->slots[ngx_http_zk_lock_slot];

    slot->connected = s->connected;
    slot->reconnects = s->reconnects;
    slot->expired = s->generation ? s->generation - 1 : 0;
    slot->jeopardies = s->jeopardies;

    if (s->connected && s->zh) {
        slot->session_id = (ngx_atomic_uint_t) zoo_client_id(s->zh)->client_id;
        server = zoo_get_current_server(s->zh);

        (void) ngx_cpystrn(slot->server, (u_char *) (server ? server : "?"),
                           NGX_HTTP_ZK_LOCK_SERVER);

    } else if (s->brokered) {
        /* zk_sessions: its locks are taken through a sibling's session */
        (void) ngx_cpystrn(slot->server, (u_char *) "broker",
                           NGX_HTTP_ZK_LOCK_SERVER);
    }
}


/*
 * A lease count read from ZooKeeper (leases=zk:), by any worker with a
 * session: a scrape shows the count in force without asking ZooKeeper,
 * in workers that read none themselves too (zk_sessions).  0: the node
 * is missing or invalid, and leases_default applies.
 */

void
ngx_http_zk_lock_metrics_leases(u_char *path, ngx_uint_t value)
{
    ngx_uint_t                  i;
    ngx_http_zk_lock_metric_t  *m;

    if (ngx_http_zk_lock_shm == NULL) {
        return;
    }

    m = ngx_http_zk_lock_names->elts;

    for (i = 0; i < ngx_http_zk_lock_names->nelts; i++) {
        if (m[i].counter.len
            && ngx_strncmp(m[i].counter.data, path, m[i].counter.len) == 0
            && path[m[i].counter.len] == '\0')
        {
            ngx_http_zk_lock_metrics_stat(ngx_http_zk_lock_shm, i)->leases =
                                                                        value;
        }
    }
}


/* the longest a request may wait at the location's locks (merged) */

void
ngx_http_zk_lock_metrics_timeouts(ngx_conf_t *cf,
    ngx_http_zk_lock_loc_conf_t *llcf)
{
    ngx_uint_t                     i;
    ngx_msec_t                     timeout;
    ngx_http_zk_lock_spec_t       *spec;
    ngx_http_zk_lock_main_conf_t  *lmcf;

    if (llcf->locks == NULL) {
        return;
    }

    lmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_zk_lock_module);
    spec = llcf->locks->elts;

    for (i = 0; i < llcf->locks->nelts; i++) {
        timeout = (spec[i].lock.timeout != NGX_CONF_UNSET_MSEC)
                  ? spec[i].lock.timeout : llcf->timeout;

        lmcf->max_timeout = ngx_max(lmcf->max_timeout, timeout);
    }
}


/*
 * zk_lock_histogram_buckets <time> ...: the finite bounds of the wait
 * histograms, ascending, as nginx times ("250ms", "10s") or as decimal
 * seconds ("0.25"), as vts and Prometheus write them; +Inf is implied
 */

char *
ngx_http_zk_lock_metrics_buckets(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_zk_lock_main_conf_t *lmcf = conf;

    ngx_int_t    n;
    ngx_str_t   *value;
    ngx_uint_t   i;
    ngx_msec_t  *b;

    if (lmcf->buckets) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (cf->args->nelts - 1 > NGX_HTTP_ZK_LOCK_MAX_BUCKETS) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"%V\" has %ui buckets, more than %d",
                           &cmd->name, cf->args->nelts - 1,
                           NGX_HTTP_ZK_LOCK_MAX_BUCKETS);
        return NGX_CONF_ERROR;
    }

    lmcf->buckets = ngx_array_create(cf->pool, cf->args->nelts - 1,
                                     sizeof(ngx_msec_t));
    if (lmcf->buckets == NULL) {
        return NGX_CONF_ERROR;
    }

    for (i = 1; i < cf->args->nelts; i++) {

        if (value[i].len == 4 && ngx_strcmp(value[i].data, "+Inf") == 0) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "bucket \"+Inf\" in \"%V\": it is always "
                               "there, after the last one given",
                               &cmd->name);
            return NGX_CONF_ERROR;
        }

        if (ngx_strlchr(value[i].data, value[i].data + value[i].len, '.')) {
            n = ngx_atofp(value[i].data, value[i].len, 3);

        } else {
            n = ngx_parse_time(&value[i], 0);
        }

        if (n == NGX_ERROR) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "invalid bucket \"%V\" in \"%V\": a time "
                               "(\"250ms\", \"10s\") or seconds to the "
                               "millisecond (\"0.25\") expected",
                               &value[i], &cmd->name);
            return NGX_CONF_ERROR;
        }

        b = ngx_array_push(lmcf->buckets);
        if (b == NULL) {
            return NGX_CONF_ERROR;
        }

        *b = (ngx_msec_t) n;

        if (i > 1 && *b <= b[-1]) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "bucket \"%V\" in \"%V\" is not above "
                               "\"%V\" before it: the buckets must ascend",
                               &value[i], &cmd->name, &value[i - 1]);
            return NGX_CONF_ERROR;
        }
    }

    return NGX_CONF_OK;
}


/* zk_lock_status_page [json|prometheus] */

char *
ngx_http_zk_lock_status_page(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_zk_lock_loc_conf_t *llcf = conf;

    ngx_str_t                 *value;
    ngx_http_core_loc_conf_t  *clcf;

    if (llcf->status_page) {
        return "is duplicate";
    }

    value = cf->args->elts;
    llcf->status_page = 1;

    if (cf->args->nelts == 2) {
        if (ngx_strcmp(value[1].data, "prometheus") == 0) {
            llcf->status_page = 2;

        } else if (ngx_strcmp(value[1].data, "json") != 0) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "invalid format \"%V\", must be \"json\" or "
                               "\"prometheus\"", &value[1]);
            return NGX_CONF_ERROR;
        }
    }

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);
    clcf->handler = ngx_http_zk_lock_metrics_status_handler;

    return NGX_CONF_OK;
}


static ngx_int_t
ngx_http_zk_lock_metrics_status_handler(ngx_http_request_t *r)
{
    ngx_int_t                      rc;
    ngx_str_t                      format;
    ngx_uint_t                     prometheus;
    ngx_pool_cleanup_t            *cln;
    ngx_http_zk_lock_page_t       *page;
    ngx_http_zk_lock_loc_conf_t   *llcf;

    if (!(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD))) {
        return NGX_HTTP_NOT_ALLOWED;
    }

    rc = ngx_http_discard_request_body(r);
    if (rc != NGX_OK) {
        return rc;
    }

    if (ngx_http_zk_lock_shm == NULL
        && ngx_zk_lock_stats_find((ngx_cycle_t *) ngx_cycle,
                                  &ngx_http_zk_lock_stream)
           == NULL)
    {
        return NGX_HTTP_NOT_FOUND;
    }

    llcf = ngx_http_get_module_loc_conf(r, ngx_http_zk_lock_module);
    prometheus = (llcf->status_page == 2);

    if (ngx_http_arg(r, (u_char *) "format", 6, &format) == NGX_OK) {
        if (format.len == 10
            && ngx_strncmp(format.data, "prometheus", 10) == 0)
        {
            prometheus = 1;

        } else if (format.len == 4 && ngx_strncmp(format.data, "json", 4) == 0)
        {
            prometheus = 0;

        } else {
            return NGX_HTTP_BAD_REQUEST;
        }
    }

    page = ngx_http_zk_lock_pages[prometheus];

    if (page == NULL || page->at != ngx_current_msec) {
        page = ngx_http_zk_lock_metrics_render(r, prometheus);
        if (page == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        if (ngx_http_zk_lock_pages[prometheus]) {
            ngx_http_zk_lock_metrics_unref(ngx_http_zk_lock_pages[prometheus]);
        }

        ngx_http_zk_lock_pages[prometheus] = page;
    }

    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (cln == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    cln->handler = ngx_http_zk_lock_metrics_unref;
    cln->data = page;
    page->refs++;

    if (prometheus) {
        ngx_str_set(&r->headers_out.content_type,
                    "text/plain; version=0.0.4; charset=utf-8");

    } else {
        ngx_str_set(&r->headers_out.content_type, "application/json");
    }

    return ngx_http_zk_lock_metrics_send(r, page);
}


/* the request's own buffers on the page's memory */

static ngx_int_t
ngx_http_zk_lock_metrics_send(ngx_http_request_t *r,
    ngx_http_zk_lock_page_t *page)
{
    ngx_int_t     rc;
    ngx_buf_t    *b;
    ngx_chain_t  *out, *cl, *pc, **ll;

    r->headers_out.content_type_len = r->headers_out.content_type.len;
    r->headers_out.status = NGX_HTTP_OK;
    r->headers_out.content_length_n = page->size;

    rc = ngx_http_send_header(r);

    if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) {
        return rc;
    }

    b = NULL;
    out = NULL;
    ll = &out;

    for (pc = page->out; pc; pc = pc->next) {
        b = ngx_calloc_buf(r->pool);
        if (b == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        b->pos = pc->buf->pos;
        b->last = pc->buf->last;
        b->memory = 1;

        cl = ngx_alloc_chain_link(r->pool);
        if (cl == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        cl->buf = b;
        *ll = cl;
        ll = &cl->next;
    }

    *ll = NULL;

    if (out == NULL) {
        return ngx_http_send_special(r, NGX_HTTP_LAST);
    }

    b->last_buf = (r == r->main) ? 1 : 0;
    b->last_in_chain = 1;

    return ngx_http_output_filter(r, out);
}


/* the page as it is now */

static ngx_http_zk_lock_page_t *
ngx_http_zk_lock_metrics_render(ngx_http_request_t *r, ngx_uint_t prometheus)
{
    u_char                   *p;
    ngx_pool_t               *pool;
    ngx_array_t              *names;
    ngx_chain_t              *cl;
    ngx_http_zk_lock_out_t    o;
    ngx_http_zk_lock_shm_t   *shm;
    ngx_http_zk_lock_page_t  *page;

    static ngx_http_zk_lock_shm_t  none;
    static ngx_array_t             no_names;

    pool = ngx_create_pool(NGX_DEFAULT_POOL_SIZE, ngx_cycle->log);
    if (pool == NULL) {
        return NULL;
    }

    page = ngx_pcalloc(pool, sizeof(ngx_http_zk_lock_page_t));
    if (page == NULL) {
        ngx_destroy_pool(pool);
        return NULL;
    }

    o.pool = pool;
    o.first = NULL;
    o.last = &o.first;
    o.buf = NULL;

    /* only stream locks: no worker slots, no HTTP lock */

    shm = ngx_http_zk_lock_shm ? ngx_http_zk_lock_shm : &none;
    names = ngx_http_zk_lock_names ? ngx_http_zk_lock_names : &no_names;

    if (prometheus) {
        p = ngx_http_zk_lock_metrics_prometheus(&o, NULL, shm, names);

    } else {
        p = ngx_http_zk_lock_metrics_json(&o, NULL, shm, names);
    }

    if (p == NULL) {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "zk lock status page: no memory for the page");
        ngx_destroy_pool(pool);
        return NULL;
    }

    o.buf->last = p;

    page->pool = pool;
    page->out = o.first;
    page->at = ngx_current_msec;
    page->refs = 1;

    for (cl = o.first; cl; cl = cl->next) {
        page->size += cl->buf->last - cl->buf->pos;
    }

    return page;
}


/*
 * Room for "need" bytes at p: in the chunk being written, or in a new one
 * (NULL without memory); p NULL: none written yet
 */

static u_char *
ngx_http_zk_lock_metrics_room(ngx_http_zk_lock_out_t *o, u_char *p,
    size_t need)
{
    ngx_buf_t    *b;
    ngx_chain_t  *cl;

    if (o->buf) {
        o->buf->last = p;

        if ((size_t) (o->buf->end - p) >= need) {
            return p;
        }
    }

    b = ngx_create_temp_buf(o->pool, ngx_max(need, NGX_HTTP_ZK_LOCK_CHUNK));
    if (b == NULL) {
        return NULL;
    }

    cl = ngx_alloc_chain_link(o->pool);
    if (cl == NULL) {
        return NULL;
    }

    cl->buf = b;
    cl->next = NULL;
    *o->last = cl;
    o->last = &cl->next;
    o->buf = b;

    return b->last;
}


/* a sender is done with the page, or the cache is: the last frees it */

static void
ngx_http_zk_lock_metrics_unref(void *data)
{
    ngx_http_zk_lock_page_t  *page = data;

    if (--page->refs == 0) {
        ngx_destroy_pool(page->pool);
    }
}


/* the sum of the workers' gauges (a late decrement may make one negative) */

static ngx_atomic_int_t
ngx_http_zk_lock_metrics_gauge(ngx_http_zk_lock_shm_t *shm, ngx_uint_t i,
    ngx_uint_t which)
{
    ngx_uint_t                  k;
    ngx_atomic_int_t            n;
    ngx_http_zk_lock_gauges_t  *g;

    g = &shm->gauges[i * shm->nslots];
    n = 0;

    for (k = 0; k < shm->nslots; k++) {
        n += (ngx_atomic_int_t) (which == NGX_HTTP_ZK_LOCK_KEPT_GAUGE
                                 ? g[k].kept
                                 : which == NGX_HTTP_ZK_LOCK_WAITING_GAUGE
                                 ? g[k].waiting : g[k].held);
    }

    return n > 0 ? n : 0;
}


/* the JSON page's head: the version, then each worker's session */

static u_char *
ngx_http_zk_lock_metrics_json_workers(ngx_http_zk_lock_out_t *o, u_char *p,
    ngx_http_zk_lock_shm_t *shm)
{
    ngx_uint_t                i, n;
    ngx_http_zk_lock_slot_t  *slot;

    p = ngx_http_zk_lock_metrics_room(o, p, 256);
    if (p == NULL) {
        return NULL;
    }

    p = ngx_sprintf(p, "{\"version\":\"" NGX_ZK_LOCK_VERSION "\","
                    "\"build\":\"" NGX_ZK_LOCK_BUILD "\",\"workers\":[");
    n = 0;

    for (i = 0; i < shm->nslots; i++) {
        slot = &shm->slots[i];

        if (slot->pid == 0) {
            continue;
        }

        p = ngx_http_zk_lock_metrics_room(o, p, 256 + NGX_HTTP_ZK_LOCK_SERVER);
        if (p == NULL) {
            return NULL;
        }

        p = ngx_sprintf(p, "%s{\"worker\":%ui,\"pid\":%uA,\"connected\":%s,"
                        "\"session\":\"0x%xA\",\"server\":\"%s\","
                        "\"reconnects\":%uA,\"expired\":%uA,"
                        "\"jeopardies\":%uA}",
                        n++ ? "," : "", i, slot->pid,
                        slot->connected ? "true" : "false", slot->session_id,
                        slot->server[0] ? slot->server : (u_char *) "",
                        slot->reconnects, slot->expired, slot->jeopardies);
    }

    return p;
}


static u_char *
ngx_http_zk_lock_metrics_json(ngx_http_zk_lock_out_t *o, u_char *p,
    ngx_http_zk_lock_shm_t *shm, ngx_array_t *names)
{
    ngx_uint_t                     i, j;
    ngx_http_zk_lock_stat_t       *st;
    ngx_http_zk_lock_metric_t     *m;
    ngx_http_zk_lock_histogram_t   h;

    p = ngx_http_zk_lock_metrics_json_workers(o, p, shm);
    if (p == NULL) {
        return NULL;
    }

    p = ngx_sprintf(p, "],\"locks\":[");

    m = names->elts;

    for (i = 0; i < names->nelts; i++) {
        p = ngx_http_zk_lock_metrics_room(o, p, 1024 + 2 * m[i].name.len
                                     + (ngx_http_zk_lock_nbuckets + 1) * 48);
        if (p == NULL) {
            return NULL;
        }

        st = ngx_http_zk_lock_metrics_stat(shm, i);
        ngx_http_zk_lock_metrics_read_histogram(st, &h);

        p = ngx_sprintf(p, "%s{\"path\":\"", i ? "," : "");
        p = ngx_http_zk_lock_metrics_escape(p, &m[i].name);

        p = ngx_sprintf(p, "\",\"type\":\"%s\"",
                        ngx_zk_lock_types[m[i].type].label);

        /* readers have no bound among themselves */

        if (m[i].type != NGX_HTTP_ZK_LOCK_RWLOCK_READ) {
            p = ngx_sprintf(p, ",\"leases\":%ui",
                            ngx_http_zk_lock_metrics_leases_of(shm, m, i));
        }

        p = ngx_sprintf(p, ",\"held\":%A,\"waiting\":%A,"
                        "\"acquired\":%uA,\"timeouts\":%uA,\"errors\":%uA,"
                        "\"bypassed\":%uA,\"rejected\":%uA,\"lost\":%uA,"
                        "\"revoked\":%uA,\"local\":%uA,\"kept\":%A,"
                        "\"reused\":%uA,\"given_back\":%uA,"
                        "\"dry_run\":%uA,\"acquired_dry_run\":%uA,"
                        "\"waited_dry_run\":%uA,"
                        "\"wait\":{\"count\":%uA,\"sum_ms\":%uA,"
                        "\"buckets\":{",
                        ngx_http_zk_lock_metrics_gauge(shm, i,
                                              NGX_HTTP_ZK_LOCK_HELD_GAUGE),
                        ngx_http_zk_lock_metrics_gauge(shm, i,
                                              NGX_HTTP_ZK_LOCK_WAITING_GAUGE),
                        st->total[NGX_HTTP_ZK_LOCK_EV_ACQUIRED],
                        st->total[NGX_HTTP_ZK_LOCK_EV_TIMEOUT],
                        st->total[NGX_HTTP_ZK_LOCK_EV_ERROR],
                        st->total[NGX_HTTP_ZK_LOCK_EV_BYPASSED],
                        st->total[NGX_HTTP_ZK_LOCK_EV_REJECTED],
                        st->total[NGX_HTTP_ZK_LOCK_EV_LOST],
                        st->total[NGX_HTTP_ZK_LOCK_EV_REVOKED],
                        st->total[NGX_HTTP_ZK_LOCK_EV_LOCAL],
                        ngx_http_zk_lock_metrics_gauge(shm, i,
                                                 NGX_HTTP_ZK_LOCK_KEPT_GAUGE),
                        st->total[NGX_HTTP_ZK_LOCK_EV_REUSED],
                        st->total[NGX_HTTP_ZK_LOCK_EV_GIVEN_BACK],
                        st->total[NGX_HTTP_ZK_LOCK_EV_DRY_RUN],
                        st->total[NGX_HTTP_ZK_LOCK_EV_DRY_ACQUIRED],
                        st->total[NGX_HTTP_ZK_LOCK_EV_DRY_WAITED],
                        h.cum[ngx_http_zk_lock_nbuckets], h.sum);

        for (j = 0; j <= ngx_http_zk_lock_nbuckets; j++) {
            p = ngx_sprintf(p, "%s\"", j ? "," : "");
            p = ngx_http_zk_lock_metrics_bound(p, j);
            p = ngx_sprintf(p, "\":%uA", h.cum[j]);
        }

        p = ngx_sprintf(p, "}}}");
    }

    p = ngx_http_zk_lock_metrics_room(o, p, 16);
    if (p == NULL) {
        return NULL;
    }

    p = ngx_sprintf(p, "]");

    p = ngx_http_zk_lock_metrics_layer_json(o, p,
                           ngx_zk_lock_stats_find((ngx_cycle_t *) ngx_cycle,
                                                  &ngx_http_zk_lock_stream));
    if (p == NULL) {
        return NULL;
    }

    return ngx_sprintf(p, "}\n");
}


static u_char *
ngx_http_zk_lock_metrics_prometheus(ngx_http_zk_lock_out_t *o, u_char *p,
    ngx_http_zk_lock_shm_t *shm, ngx_array_t *names)
{
    ngx_uint_t  i;

    p = ngx_http_zk_lock_metrics_room(o, p, ngx_http_zk_lock_build_info.len);
    if (p == NULL) {
        return NULL;
    }

    p = ngx_cpymem(p, ngx_http_zk_lock_build_info.data,
                   ngx_http_zk_lock_build_info.len);

    p = ngx_http_zk_lock_metrics_prom_workers(o, p, shm);
    if (p == NULL) {
        return NULL;
    }

    p = ngx_http_zk_lock_metrics_prom_leases(o, p, shm, names);
    if (p == NULL) {
        return NULL;
    }

    for (i = NGX_HTTP_ZK_LOCK_HELD_GAUGE; i <= NGX_HTTP_ZK_LOCK_KEPT_GAUGE;
         i++)
    {
        p = ngx_http_zk_lock_metrics_prom_gauges(o, p, shm, names, i);
        if (p == NULL) {
            return NULL;
        }
    }

    p = ngx_http_zk_lock_metrics_prom_requests(o, p, shm, names);
    if (p == NULL) {
        return NULL;
    }

    p = ngx_http_zk_lock_metrics_prom_kept(o, p, shm, names);
    if (p == NULL) {
        return NULL;
    }

    return ngx_http_zk_lock_metrics_prom_histogram(o, p, shm, names);
}


/*
 * A worker is labelled by its index, not its pid: a pid would start new
 * series at every reload and respawn
 */

static u_char *
ngx_http_zk_lock_metrics_prom_workers(ngx_http_zk_lock_out_t *o, u_char *p,
    ngx_http_zk_lock_shm_t *shm)
{
    ngx_uint_t                i, k;
    ngx_atomic_uint_t         v;
    ngx_http_zk_lock_slot_t  *slot;

    static struct {
        char                 *metric;
        char                 *type;
        char                 *help;
        size_t                offset;
    } workers[] = {
        { "zk_lock_session_connected", "gauge",
          "Whether the worker's ZooKeeper session is connected.",
          offsetof(ngx_http_zk_lock_slot_t, connected) },
        { "zk_lock_session_reconnects_total", "counter",
          "Connections of the worker's session lost and made again.",
          offsetof(ngx_http_zk_lock_slot_t, reconnects) },
        { "zk_lock_session_expirations_total", "counter",
          "Sessions of the worker that expired.",
          offsetof(ngx_http_zk_lock_slot_t, expired) },
        { "zk_lock_session_jeopardy_total", "counter",
          "Times the worker's session went unheard from so long that it "
          "could expire: its locks were let go.",
          offsetof(ngx_http_zk_lock_slot_t, jeopardies) }
    };

    for (k = 0; k < sizeof(workers) / sizeof(workers[0]); k++) {
        p = ngx_http_zk_lock_metrics_room(o, p, 512);
        if (p == NULL) {
            return NULL;
        }

        p = ngx_sprintf(p, "# HELP %s %s\n# TYPE %s %s\n",
                        workers[k].metric, workers[k].help,
                        workers[k].metric, workers[k].type);

        for (i = 0; i < shm->nslots; i++) {
            slot = &shm->slots[i];

            if (slot->pid == 0) {
                continue;
            }

            v = *(ngx_atomic_t *) ((u_char *) slot + workers[k].offset);

            p = ngx_http_zk_lock_metrics_room(o, p, 256);
            if (p == NULL) {
                return NULL;
            }

            p = ngx_sprintf(p, "%s{worker=\"%ui\"} %uA\n",
                            workers[k].metric, i, v);
        }
    }

    return p;
}


static u_char *
ngx_http_zk_lock_metrics_prom_gauges(ngx_http_zk_lock_out_t *o, u_char *p,
    ngx_http_zk_lock_shm_t *shm, ngx_array_t *names, ngx_uint_t which)
{
    ngx_uint_t                  i;
    ngx_http_zk_lock_metric_t  *m;

    static struct {
        char                 *metric;
        char                 *help;
    } gauges[] = {
        { "zk_lock_held", "Requests that hold the lock." },
        { "zk_lock_waiting", "Requests that wait for the lock." },
        { "zk_lock_kept", "Leases that workers keep idle (keep=)." }
    };

    p = ngx_http_zk_lock_metrics_room(o, p, 512);
    if (p == NULL) {
        return NULL;
    }

    p = ngx_sprintf(p, "# HELP %s %s\n# TYPE %s gauge\n",
                    gauges[which].metric, gauges[which].help,
                    gauges[which].metric);

    m = names->elts;

    for (i = 0; i < names->nelts; i++) {
        p = ngx_http_zk_lock_metrics_room(o, p, NGX_HTTP_ZK_LOCK_LINE(&m[i]));
        if (p == NULL) {
            return NULL;
        }

        p = ngx_http_zk_lock_metrics_series(p, gauges[which].metric, &m[i]);
        p = ngx_sprintf(p, "} %A\n",
                        ngx_http_zk_lock_metrics_gauge(shm, i, which));
    }

    if (which == NGX_HTTP_ZK_LOCK_KEPT_GAUGE) {
        return p;
    }

    /* the core's gauges are held and waiting, in this order too */

    return ngx_http_zk_lock_metrics_layer_prom(o, p,
                           ngx_zk_lock_stats_find((ngx_cycle_t *) ngx_cycle,
                                                  &ngx_http_zk_lock_stream),
                           gauges[which].metric, which);
}


/*
 * The leases a lock grants at once, fleet-wide: a mutex's and a writer's
 * 1, a semaphore's as configured or as read from ZooKeeper.  Readers are
 * bounded by writers only: no series.
 */

static u_char *
ngx_http_zk_lock_metrics_prom_leases(ngx_http_zk_lock_out_t *o, u_char *p,
    ngx_http_zk_lock_shm_t *shm, ngx_array_t *names)
{
    ngx_uint_t                  i;
    ngx_http_zk_lock_metric_t  *m;

    p = ngx_http_zk_lock_metrics_room(o, p, 512);
    if (p == NULL) {
        return NULL;
    }

    p = ngx_sprintf(p, "# HELP zk_lock_leases Leases the lock grants at "
                    "once, across the fleet: the count in force.\n"
                    "# TYPE zk_lock_leases gauge\n");

    m = names->elts;

    for (i = 0; i < names->nelts; i++) {
        if (m[i].type == NGX_HTTP_ZK_LOCK_RWLOCK_READ) {
            continue;
        }

        p = ngx_http_zk_lock_metrics_room(o, p, NGX_HTTP_ZK_LOCK_LINE(&m[i]));
        if (p == NULL) {
            return NULL;
        }

        p = ngx_http_zk_lock_metrics_series(p, "zk_lock_leases", &m[i]);
        p = ngx_sprintf(p, "} %ui\n",
                        ngx_http_zk_lock_metrics_leases_of(shm, m, i));
    }

    return p;
}


/* the count read from ZooKeeper, else the one configured */

static ngx_uint_t
ngx_http_zk_lock_metrics_leases_of(ngx_http_zk_lock_shm_t *shm,
    ngx_http_zk_lock_metric_t *m, ngx_uint_t i)
{
    ngx_atomic_uint_t  n;

    n = m[i].counter.len ? ngx_http_zk_lock_metrics_stat(shm, i)->leases : 0;

    return n ? (ngx_uint_t) n : m[i].leases;
}


/* kept leases: a subset of the acquired, and what they cost others */

static u_char *
ngx_http_zk_lock_metrics_prom_kept(ngx_http_zk_lock_out_t *o, u_char *p,
    ngx_http_zk_lock_shm_t *shm, ngx_array_t *names)
{
    ngx_uint_t                  i, k;
    ngx_http_zk_lock_metric_t  *m;

    static struct {
        char                 *metric;
        char                 *help;
        ngx_uint_t            event;
    } counters[] = {
        { "zk_lock_kept_reused_total",
          "Requests that ran at once on a lease their worker kept.",
          NGX_HTTP_ZK_LOCK_EV_REUSED },
        { "zk_lock_kept_given_back_total",
          "Kept leases given back because another participant waited.",
          NGX_HTTP_ZK_LOCK_EV_GIVEN_BACK }
    };

    m = names->elts;

    for (k = 0; k < sizeof(counters) / sizeof(counters[0]); k++) {
        p = ngx_http_zk_lock_metrics_room(o, p, 512);
        if (p == NULL) {
            return NULL;
        }

        p = ngx_sprintf(p, "# HELP %s %s\n# TYPE %s counter\n",
                        counters[k].metric, counters[k].help,
                        counters[k].metric);

        for (i = 0; i < names->nelts; i++) {
            p = ngx_http_zk_lock_metrics_room(o, p,
                                              NGX_HTTP_ZK_LOCK_LINE(&m[i]));
            if (p == NULL) {
                return NULL;
            }

            p = ngx_http_zk_lock_metrics_series(p, counters[k].metric, &m[i]);
            p = ngx_sprintf(p, "} %uA\n",
                            ngx_http_zk_lock_metrics_stat(shm, i)
                                ->total[counters[k].event]);
        }
    }

    return p;
}


static u_char *
ngx_http_zk_lock_metrics_prom_requests(ngx_http_zk_lock_out_t *o, u_char *p,
    ngx_http_zk_lock_shm_t *shm, ngx_array_t *names)
{
    ngx_uint_t                  i, j;
    ngx_http_zk_lock_metric_t  *m;

    static struct {
        char                 *result;
        ngx_uint_t            event;
    } results[] = {
        { "acquired", NGX_HTTP_ZK_LOCK_EV_ACQUIRED },
        { "timeout", NGX_HTTP_ZK_LOCK_EV_TIMEOUT },
        { "error", NGX_HTTP_ZK_LOCK_EV_ERROR },
        { "bypassed", NGX_HTTP_ZK_LOCK_EV_BYPASSED },
        { "rejected", NGX_HTTP_ZK_LOCK_EV_REJECTED },
        { "lost", NGX_HTTP_ZK_LOCK_EV_LOST },
        { "revoked", NGX_HTTP_ZK_LOCK_EV_REVOKED },
        { "local", NGX_HTTP_ZK_LOCK_EV_LOCAL },
        { "dry_run", NGX_HTTP_ZK_LOCK_EV_DRY_RUN },
        { "acquired_dry_run", NGX_HTTP_ZK_LOCK_EV_DRY_ACQUIRED },
        { "waited_dry_run", NGX_HTTP_ZK_LOCK_EV_DRY_WAITED }
    };

    p = ngx_http_zk_lock_metrics_room(o, p, 512);
    if (p == NULL) {
        return NULL;
    }

    p = ngx_sprintf(p, "# HELP zk_lock_requests_total Requests at the lock, "
                    "by result.\n# TYPE zk_lock_requests_total counter\n");

    m = names->elts;

    for (i = 0; i < names->nelts; i++) {
        p = ngx_http_zk_lock_metrics_room(o, p, NGX_HTTP_ZK_LOCK_LINE(&m[i])
                                        * sizeof(results) / sizeof(results[0]));
        if (p == NULL) {
            return NULL;
        }

        for (j = 0; j < sizeof(results) / sizeof(results[0]); j++) {
            p = ngx_http_zk_lock_metrics_series(p, "zk_lock_requests_total",
                                                &m[i]);
            p = ngx_sprintf(p, ",result=\"%s\"} %uA\n", results[j].result,
                            ngx_http_zk_lock_metrics_stat(shm, i)
                                ->total[results[j].event]);
        }
    }

    return ngx_http_zk_lock_metrics_layer_prom(o, p,
                           ngx_zk_lock_stats_find((ngx_cycle_t *) ngx_cycle,
                                                  &ngx_http_zk_lock_stream),
                           "zk_lock_requests_total", -1);
}


static u_char *
ngx_http_zk_lock_metrics_prom_histogram(ngx_http_zk_lock_out_t *o, u_char *p,
    ngx_http_zk_lock_shm_t *shm, ngx_array_t *names)
{
    ngx_uint_t                     i, j;
    ngx_http_zk_lock_metric_t     *m;
    ngx_http_zk_lock_histogram_t   h;

    p = ngx_http_zk_lock_metrics_room(o, p, 512);
    if (p == NULL) {
        return NULL;
    }

    p = ngx_sprintf(p, "# HELP zk_lock_wait_seconds Time waited for the lock "
                    "by the requests that got it.\n"
                    "# TYPE zk_lock_wait_seconds histogram\n");

    m = names->elts;

    for (i = 0; i < names->nelts; i++) {
        p = ngx_http_zk_lock_metrics_room(o, p, NGX_HTTP_ZK_LOCK_LINE(&m[i])
                                        * (ngx_http_zk_lock_nbuckets + 3));
        if (p == NULL) {
            return NULL;
        }

        ngx_http_zk_lock_metrics_read_histogram(
                                   ngx_http_zk_lock_metrics_stat(shm, i), &h);

        for (j = 0; j <= ngx_http_zk_lock_nbuckets; j++) {
            p = ngx_http_zk_lock_metrics_series(p,
                                                "zk_lock_wait_seconds_bucket",
                                                &m[i]);
            p = ngx_sprintf(p, ",le=\"");
            p = ngx_http_zk_lock_metrics_bound(p, j);
            p = ngx_sprintf(p, "\"} %uA\n", h.cum[j]);
        }

        p = ngx_http_zk_lock_metrics_series(p, "zk_lock_wait_seconds_sum",
                                            &m[i]);
        p = ngx_sprintf(p, "} %uA.%03uA\n", h.sum / 1000, h.sum % 1000);

        p = ngx_http_zk_lock_metrics_series(p, "zk_lock_wait_seconds_count",
                                            &m[i]);
        p = ngx_sprintf(p, "} %uA\n", h.cum[ngx_http_zk_lock_nbuckets]);
    }

    return p;
}


/*
 * The locks of the stream layer, from the core's counters: "stream" in
 * the JSON, layer="stream" in Prometheus, where the series of a path are
 * summed across layers as the lock itself counts them
 */

static u_char *
ngx_http_zk_lock_metrics_layer_json(ngx_http_zk_lock_out_t *o, u_char *p,
    ngx_zk_lock_stats_t *st)
{
    ngx_uint_t                 i, j;
    ngx_zk_lock_stats_name_t  *n;

    if (st == NULL) {
        return p;
    }

    p = ngx_sprintf(p, ",\"%V\":[", &st->layer);
    n = st->names->elts;

    for (i = 0; i < st->names->nelts; i++) {
        p = ngx_http_zk_lock_metrics_room(o, p, 512 + 2 * n[i].name.len);
        if (p == NULL) {
            return NULL;
        }

        p = ngx_sprintf(p, "%s{\"path\":\"", i ? "," : "");
        p = ngx_http_zk_lock_metrics_escape(p, &n[i].name);
        p = ngx_sprintf(p, "\",\"type\":\"%s\",\"held\":%A,\"waiting\":%A",
                        ngx_zk_lock_types[n[i].type].label,
                        ngx_zk_lock_stats_sum(st, i, NGX_ZK_LOCK_STATS_HELD),
                        ngx_zk_lock_stats_sum(st, i,
                                              NGX_ZK_LOCK_STATS_WAITING));

        for (j = 0; j < NGX_ZK_LOCK_STATS_N; j++) {
            p = ngx_sprintf(p, ",\"%s\":%uA", ngx_zk_lock_stats_results[j],
                            ngx_zk_lock_stats_total(st, i, j));
        }

        *p++ = '}';
    }

    return ngx_sprintf(p, "]");
}


/* which: a gauge (held, waiting), or -1: the results' counters */

static u_char *
ngx_http_zk_lock_metrics_layer_prom(ngx_http_zk_lock_out_t *o, u_char *p,
    ngx_zk_lock_stats_t *st, char *family, ngx_int_t which)
{
    ngx_uint_t                 i, j;
    ngx_zk_lock_stats_name_t  *n;

    if (st == NULL) {
        return p;
    }

    n = st->names->elts;

    for (i = 0; i < st->names->nelts; i++) {
        p = ngx_http_zk_lock_metrics_room(o, p, (256 + 2 * n[i].name.len)
                                                * NGX_ZK_LOCK_STATS_N);
        if (p == NULL) {
            return NULL;
        }

        for (j = 0; j < (which == -1 ? NGX_ZK_LOCK_STATS_N : 1); j++) {
            p = ngx_sprintf(p, "%s{path=\"", family);
            p = ngx_http_zk_lock_metrics_escape(p, &n[i].name);
            p = ngx_sprintf(p, "\",type=\"%s\",layer=\"%V\"",
                            ngx_zk_lock_types[n[i].type].label, &st->layer);

            if (which == -1) {
                p = ngx_sprintf(p, ",result=\"%s\"} %uA\n",
                                ngx_zk_lock_stats_results[j],
                                ngx_zk_lock_stats_total(st, i, j));

            } else {
                p = ngx_sprintf(p, "} %A\n",
                                ngx_zk_lock_stats_sum(st, i, which));
            }
        }
    }

    return p;
}


/* "family{path=...,type=...": the caller adds labels and the value */

static u_char *
ngx_http_zk_lock_metrics_series(u_char *p, char *family,
    ngx_http_zk_lock_metric_t *m)
{
    p = ngx_sprintf(p, "%s{path=\"", family);
    p = ngx_http_zk_lock_metrics_escape(p, &m->name);

    return ngx_sprintf(p, "\",type=\"%s\"",
                       ngx_zk_lock_types[m->type].label);
}


/*
 * The buckets are read once, and the count is the last of them: other
 * workers count on meanwhile, and a count read apart from the buckets
 * could differ from the +Inf bucket in the same scrape
 */

static void
ngx_http_zk_lock_metrics_read_histogram(ngx_http_zk_lock_stat_t *st,
    ngx_http_zk_lock_histogram_t *h)
{
    ngx_uint_t         j;
    ngx_atomic_uint_t  cum;

    h->sum = st->wait_sum;
    cum = 0;

    for (j = 0; j <= ngx_http_zk_lock_nbuckets; j++) {
        cum += st->buckets[j];
        h->cum[j] = cum;
    }
}


/* bucket j's bound in seconds, as Prometheus writes it: "0.005", "2.5" */

static u_char *
ngx_http_zk_lock_metrics_bound(u_char *p, ngx_uint_t j)
{
    ngx_msec_t  ms, frac;

    if (j == ngx_http_zk_lock_nbuckets) {
        return ngx_cpymem(p, "+Inf", 4);
    }

    ms = ngx_http_zk_lock_bounds[j];
    frac = ms % 1000;

    if (frac == 0) {
        return ngx_sprintf(p, "%M", ms / 1000);
    }

    if (frac % 100 == 0) {
        return ngx_sprintf(p, "%M.%M", ms / 1000, frac / 100);
    }

    if (frac % 10 == 0) {
        return ngx_sprintf(p, "%M.%02M", ms / 1000, frac / 10);
    }

    return ngx_sprintf(p, "%M.%03M", ms / 1000, frac);
}


/* for a JSON string and a Prometheus label value alike */

static u_char *
ngx_http_zk_lock_metrics_escape(u_char *p, ngx_str_t *s)
{
    u_char      c;
    ngx_uint_t  i;

    for (i = 0; i < s->len; i++) {
        c = s->data[i];

        if (c == '"' || c == '\\') {
            *p++ = '\\';
            *p++ = c;

        } else if (c < 0x20) {
            p = ngx_sprintf(p, "\\n");

        } else {
            *p++ = c;
        }
    }

    return p;
}
