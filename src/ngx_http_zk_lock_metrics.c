
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_zk_lock_metrics.h"
#include "ngx_zk_lock_session.h"


/*
 * Every worker has its own session; what they do is added up in a shared
 * memory zone, so that one scrape of any worker sees the whole instance.
 * There is one entry per lock path as configured and type (variables
 * unexpanded: a bounded set of names; directives that share both share
 * the entry, as Prometheus wants one series per label set), and one slot
 * per worker.  Each worker writes only its own slot's gauges; totals are
 * atomic.  This file counts; the status page reads the zone and renders
 * it (ngx_http_zk_lock_status.c), and is never called from here.
 */

#define NGX_HTTP_ZK_LOCK_SLOTS        64  /* when worker_processes comes late */


static ngx_int_t ngx_http_zk_lock_metrics_init_buckets(ngx_conf_t *cf,
    ngx_http_zk_lock_main_conf_t *lmcf);
static size_t ngx_http_zk_lock_metrics_size(ngx_uint_t nslots,
    ngx_uint_t nstats, ngx_uint_t nbuckets);
static ngx_int_t ngx_http_zk_lock_metrics_init_zone(ngx_shm_zone_t *shm_zone,
    void *data);


/*
 * The wait-time histogram's bounds without zk_lock_histogram_buckets, ms;
 * they go on as 1, 2.5, 5 times a power of ten up to the longest timeout
 * of a lock, where waits end (see init_buckets())
 */
static ngx_msec_t  ngx_http_zk_lock_default_bounds[] = {
    1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000
};

/* the zone of the current cycle, mapped in every worker, and its bounds */
static ngx_http_zk_lock_counts_t  ngx_http_zk_lock_counts;
static ngx_uint_t                 ngx_http_zk_lock_slot;

static ngx_str_t  ngx_http_zk_lock_zone_name = ngx_string("zk_lock");


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

    ngx_http_zk_lock_counts.shm = shm;
    ngx_http_zk_lock_counts.names = lmcf->metrics;
    ngx_http_zk_lock_counts.bounds = lmcf->buckets->elts;
    ngx_http_zk_lock_counts.nbuckets = lmcf->buckets->nelts;
    ngx_http_zk_lock_slot = ngx_worker % shm->nslots;

    ngx_memzero(&shm->slots[ngx_http_zk_lock_slot],
                sizeof(ngx_http_zk_lock_slot_t));

    shm->slots[ngx_http_zk_lock_slot].pid = ngx_pid;

    for (i = 0; i < lmcf->metrics->nelts; i++) {
        g = &shm->gauges[i * shm->nslots + ngx_http_zk_lock_slot];
        g->held = 0;
        g->waiting = 0;
        g->kept = 0;
        g->flows = 0;
        g->claim = 0;
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

    shm = ngx_http_zk_lock_counts.shm;

    if (shm == NULL) {
        return;
    }

    st = ngx_http_zk_lock_metrics_stat(shm, spec->index);
    g = &shm->gauges[spec->index * shm->nslots + ngx_http_zk_lock_slot];

    /*
     * waits and releases move the worker's gauges only: no total of
     * theirs is shown, and a locked add on a line the workers share
     * costs every request
     */

    switch (event) {

    case NGX_HTTP_ZK_LOCK_EV_WAIT:
        g->waiting++;
        return;

    case NGX_HTTP_ZK_LOCK_EV_UNWAIT:
        g->waiting--;
        return;

    case NGX_HTTP_ZK_LOCK_EV_RELEASED:
        g->held--;
        return;

    default:
        break;
    }

    (void) ngx_atomic_fetch_add(&st->total[event], 1);

    switch (event) {

    case NGX_HTTP_ZK_LOCK_EV_ACQUIRED:
        g->held++;

        for (i = 0; i < ngx_http_zk_lock_counts.nbuckets; i++) {
            if (waited <= ngx_http_zk_lock_counts.bounds[i]) {
                break;
            }
        }

        (void) ngx_atomic_fetch_add(&st->buckets[i], 1);
        (void) ngx_atomic_fetch_add(&st->wait_sum, waited);
        return;

    case NGX_HTTP_ZK_LOCK_EV_LOCAL:
        g->held++;
        return;

    default: /* TIMEOUT, ERROR, BYPASSED, REJECTED, LOST, REVOKED, REUSED,
                GIVEN_BACK, DRY_RUN, DRY_ACQUIRED, DRY_WAITED, JEOPARDY,
                UNREACHABLE: counts */
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

    shm = ngx_http_zk_lock_counts.shm;

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


/*
 * fair=: the flows of the worker's pool, and its instance's claim; with
 * priority=, its classes
 */

void
ngx_http_zk_lock_metrics_fair(ngx_zk_lock_params_t *lp, ngx_uint_t flows,
    ngx_uint_t claim, void *top, ngx_uint_t ntop, void *classes,
    ngx_uint_t nclasses)
{
    ngx_http_zk_lock_spec_t  *spec = (ngx_http_zk_lock_spec_t *) lp;

    ngx_http_zk_lock_shm_t     *shm;
    ngx_http_zk_lock_gauges_t  *g;

    shm = ngx_http_zk_lock_counts.shm;

    if (shm == NULL) {
        return;
    }

    g = &shm->gauges[spec->index * shm->nslots + ngx_http_zk_lock_slot];
    g->flows = flows;
    g->claim = claim;

    ngx_zk_lock_fair_top_set(g->top, top, ntop);

    ngx_memzero(g->loads, sizeof(g->loads));

    if (nclasses) {
        ngx_memcpy(g->loads, classes,
                   nclasses * sizeof(ngx_zk_lock_fair_load_t));
    }
}


/* priority=: each class's load, summed over the workers */

void
ngx_http_zk_lock_metrics_loads(ngx_http_zk_lock_counts_t *c, ngx_uint_t i,
    ngx_zk_lock_fair_load_t *load)
{
    ngx_uint_t                  k;
    ngx_http_zk_lock_gauges_t  *g;

    ngx_memzero(load, NGX_ZK_LOCK_CLASS_MAX * sizeof(ngx_zk_lock_fair_load_t));

    g = &c->shm->gauges[i * c->shm->nslots];

    for (k = 0; k < c->shm->nslots; k++) {
        ngx_zk_lock_fair_loads_add(load, g[k].loads);
    }
}


/* fair=: the flows that hold the most, of all the workers */

ngx_uint_t
ngx_http_zk_lock_metrics_top(ngx_http_zk_lock_counts_t *c, ngx_uint_t i,
    ngx_zk_lock_fair_top_t *top)
{
    ngx_uint_t                  k, n;
    ngx_http_zk_lock_gauges_t  *g;

    g = &c->shm->gauges[i * c->shm->nslots];
    n = 0;

    for (k = 0; k < c->shm->nslots; k++) {
        n = ngx_zk_lock_fair_top_add(top, n, g[k].top);
    }

    return n;
}


void
ngx_http_zk_lock_metrics_session(ngx_zk_lock_session_t *s)
{
    const char               *server;
    ngx_http_zk_lock_slot_t  *slot;

    if (ngx_http_zk_lock_counts.shm == NULL) {
        return;
    }

    slot = &ngx_http_zk_lock_counts.shm->slots[ngx_http_zk_lock_slot];

    slot->connected = s->connected;
    slot->reconnects = s->reconnects;
    slot->expired = s->generation ? s->generation - 1 : 0;
    slot->jeopardies = s->jeopardies;

    /*
     * The timeout in force is the one the server granted, within its
     * bounds (2 to 20 ticks by default), not zk_session_timeout: it says
     * when holders are let go and when the session expires
     */

    slot->timeout = s->negotiated;

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
    ngx_http_zk_lock_counts_t  *c;
    ngx_http_zk_lock_metric_t  *m;

    c = &ngx_http_zk_lock_counts;

    if (c->shm == NULL) {
        return;
    }

    m = c->names->elts;

    for (i = 0; i < c->names->nelts; i++) {
        if (m[i].counter.len
            && ngx_strncmp(m[i].counter.data, path, m[i].counter.len) == 0
            && path[m[i].counter.len] == '\0')
        {
            ngx_http_zk_lock_metrics_stat(c->shm, i)->leases = value;
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


/* the zone as the status page reads it: NULL before a worker maps one */

ngx_http_zk_lock_counts_t *
ngx_http_zk_lock_metrics_counts(void)
{
    if (ngx_http_zk_lock_counts.shm == NULL) {
        return NULL;
    }

    return &ngx_http_zk_lock_counts;
}


/* the sum of the workers' gauges (a late decrement may make one negative) */

ngx_atomic_int_t
ngx_http_zk_lock_metrics_gauge(ngx_http_zk_lock_counts_t *c, ngx_uint_t i,
    ngx_uint_t which)
{
    ngx_uint_t                  k;
    ngx_atomic_int_t            n;
    ngx_http_zk_lock_gauges_t  *g;

    g = &c->shm->gauges[i * c->shm->nslots];
    n = 0;

    for (k = 0; k < c->shm->nslots; k++) {
        switch (which) {

        case NGX_HTTP_ZK_LOCK_WAITING_GAUGE:
            n += (ngx_atomic_int_t) g[k].waiting;
            break;

        case NGX_HTTP_ZK_LOCK_KEPT_GAUGE:
            n += (ngx_atomic_int_t) g[k].kept;
            break;

        case NGX_HTTP_ZK_LOCK_FLOWS_GAUGE:
            n += (ngx_atomic_int_t) g[k].flows;
            break;

        case NGX_HTTP_ZK_LOCK_CLAIM_GAUGE:
            n += (ngx_atomic_int_t) g[k].claim;
            break;

        default: /* HELD */
            n += (ngx_atomic_int_t) g[k].held;
        }
    }

    return n > 0 ? n : 0;
}


/* the count read from ZooKeeper, else the one configured */

ngx_uint_t
ngx_http_zk_lock_metrics_leases_of(ngx_http_zk_lock_counts_t *c, ngx_uint_t i)
{
    ngx_atomic_uint_t           n;
    ngx_http_zk_lock_metric_t  *m;

    m = c->names->elts;
    n = m[i].counter.len ? ngx_http_zk_lock_metrics_stat(c->shm, i)->leases
                         : 0;

    return n ? (ngx_uint_t) n : m[i].leases;
}


/*
 * The buckets are read once, and the count is the last of them: other
 * workers count on meanwhile, and a count read apart from the buckets
 * could differ from the +Inf bucket in the same scrape
 */

void
ngx_http_zk_lock_metrics_histogram(ngx_http_zk_lock_counts_t *c, ngx_uint_t i,
    ngx_http_zk_lock_histogram_t *h)
{
    ngx_uint_t                j;
    ngx_atomic_uint_t         cum;
    ngx_http_zk_lock_stat_t  *st;

    st = ngx_http_zk_lock_metrics_stat(c->shm, i);
    h->sum = st->wait_sum;
    cum = 0;

    for (j = 0; j <= c->nbuckets; j++) {
        cum += st->buckets[j];
        h->cum[j] = cum;
    }
}
