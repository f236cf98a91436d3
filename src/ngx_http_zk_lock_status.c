
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_zk_lock_status.h"
#include "ngx_http_zk_lock_metrics.h"
#include "ngx_zk_lock_stats.h"


/*
 * The status page: the counts of the metrics zone (read, never written
 * here: see ngx_http_zk_lock_metrics.c) and the stream layer's, as JSON
 * or Prometheus text.
 *
 * The page is written into chunks as it goes, sized as written rather
 * than to a bound of the whole (ten times the output with 2 000 locks),
 * and shared by the requests that ask in the same millisecond (one event
 * loop's turn: a burst of scrapes costs one rendering, not one each, and
 * the worker's gated requests do not wait behind them all).  A page lives
 * while a request sends it.
 */

#define NGX_HTTP_ZK_LOCK_CHUNK  65536

/* a line of Prometheus text, but for the lock's name (escaped: 2x) */
#define NGX_HTTP_ZK_LOCK_LINE(m)  (256 + 2 * (m)->name.len)

/* fair=: the flows that hold the most, in a lock's JSON */
#define NGX_HTTP_ZK_LOCK_TOP_JSON  (16 + NGX_ZK_LOCK_FAIR_TOP * 96)

/* priority=: a lock's classes in its JSON */
#define NGX_HTTP_ZK_LOCK_CLASSES_JSON                                    \
    (16 + NGX_ZK_LOCK_CLASS_MAX * (NGX_ZK_LOCK_CLASS_NAME + 96))

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


static ngx_int_t ngx_http_zk_lock_status_handler(ngx_http_request_t *r);
static ngx_int_t ngx_http_zk_lock_status_send(ngx_http_request_t *r,
    ngx_http_zk_lock_page_t *page);
static ngx_http_zk_lock_page_t *ngx_http_zk_lock_status_render(
    ngx_http_request_t *r, ngx_uint_t prometheus);
static u_char *ngx_http_zk_lock_status_room(ngx_http_zk_lock_out_t *o,
    u_char *p, size_t need);
static void ngx_http_zk_lock_status_unref(void *data);
static u_char *ngx_http_zk_lock_status_json_workers(
    ngx_http_zk_lock_out_t *o, u_char *p, ngx_http_zk_lock_counts_t *c);
static u_char *ngx_http_zk_lock_status_json(ngx_http_zk_lock_out_t *o,
    u_char *p, ngx_http_zk_lock_counts_t *c);
static u_char *ngx_http_zk_lock_status_prometheus(ngx_http_zk_lock_out_t *o,
    u_char *p, ngx_http_zk_lock_counts_t *c);
static u_char *ngx_http_zk_lock_status_prom_workers(
    ngx_http_zk_lock_out_t *o, u_char *p, ngx_http_zk_lock_counts_t *c);
static u_char *ngx_http_zk_lock_status_prom_gauges(ngx_http_zk_lock_out_t *o,
    u_char *p, ngx_http_zk_lock_counts_t *c, ngx_uint_t which);
static u_char *ngx_http_zk_lock_status_prom_leases(ngx_http_zk_lock_out_t *o,
    u_char *p, ngx_http_zk_lock_counts_t *c);
static u_char *ngx_http_zk_lock_status_fair_json(u_char *p,
    ngx_http_zk_lock_counts_t *c, ngx_uint_t i);
static ngx_zk_lock_classes_t *ngx_http_zk_lock_status_classes(void);
static u_char *ngx_http_zk_lock_status_classes_json(u_char *p,
    ngx_zk_lock_classes_t *cl, ngx_zk_lock_fair_load_t *load);
static u_char *ngx_http_zk_lock_status_prom_classes(
    ngx_http_zk_lock_out_t *o, u_char *p, ngx_http_zk_lock_counts_t *c);
static u_char *ngx_http_zk_lock_status_class(u_char *p, ngx_uint_t k,
    ngx_str_t *name, ngx_zk_lock_fair_load_t *load);
static u_char *ngx_http_zk_lock_status_prom_fair(ngx_http_zk_lock_out_t *o,
    u_char *p, ngx_http_zk_lock_counts_t *c);
static u_char *ngx_http_zk_lock_status_prom_kept(ngx_http_zk_lock_out_t *o,
    u_char *p, ngx_http_zk_lock_counts_t *c);
static u_char *ngx_http_zk_lock_status_prom_requests(
    ngx_http_zk_lock_out_t *o, u_char *p, ngx_http_zk_lock_counts_t *c);
static u_char *ngx_http_zk_lock_status_prom_histogram(
    ngx_http_zk_lock_out_t *o, u_char *p, ngx_http_zk_lock_counts_t *c);
static u_char *ngx_http_zk_lock_status_prom_top(ngx_http_zk_lock_out_t *o,
    u_char *p, ngx_http_zk_lock_counts_t *c);
static u_char *ngx_http_zk_lock_status_top_json(u_char *p,
    ngx_zk_lock_fair_top_t *top, ngx_uint_t n);
static u_char *ngx_http_zk_lock_status_layer_fair(ngx_http_zk_lock_out_t *o,
    u_char *p, ngx_zk_lock_stats_t *st, char *family, ngx_uint_t claim);
static u_char *ngx_http_zk_lock_status_layer_json(ngx_http_zk_lock_out_t *o,
    u_char *p, ngx_zk_lock_stats_t *st);
static u_char *ngx_http_zk_lock_status_layer_prom(ngx_http_zk_lock_out_t *o,
    u_char *p, ngx_zk_lock_stats_t *st, char *family, ngx_int_t which);
static u_char *ngx_http_zk_lock_status_series(u_char *p, char *family,
    ngx_http_zk_lock_metric_t *m);
static u_char *ngx_http_zk_lock_status_bound(u_char *p,
    ngx_http_zk_lock_counts_t *c, ngx_uint_t j);
static u_char *ngx_http_zk_lock_status_escape(u_char *p, ngx_str_t *s);


static ngx_str_t  ngx_http_zk_lock_build_info = ngx_string(
    "# HELP zk_lock_build_info The module's version and build.\n"
    "# TYPE zk_lock_build_info gauge\n"
    "zk_lock_build_info{version=\"" NGX_ZK_LOCK_VERSION "\",build=\""
    NGX_ZK_LOCK_BUILD "\"} 1\n");

/* the other layer whose locks the page shows, from the core's counters */
static ngx_str_t  ngx_http_zk_lock_stream = ngx_string("stream");

/* the last page written, JSON and Prometheus */
static ngx_http_zk_lock_page_t  *ngx_http_zk_lock_pages[2];


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
    clcf->handler = ngx_http_zk_lock_status_handler;

    return NGX_CONF_OK;
}


static ngx_int_t
ngx_http_zk_lock_status_handler(ngx_http_request_t *r)
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
        page = ngx_http_zk_lock_status_render(r, prometheus);
        if (page == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        if (ngx_http_zk_lock_pages[prometheus]) {
            ngx_http_zk_lock_status_unref(ngx_http_zk_lock_pages[prometheus]);
        }

        ngx_http_zk_lock_pages[prometheus] = page;
    }

    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (cln == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    cln->handler = ngx_http_zk_lock_status_unref;
    cln->data = page;
    page->refs++;

    if (prometheus) {
        ngx_str_set(&r->headers_out.content_type,
                    "text/plain; version=0.0.4; charset=utf-8");

    } else {
        ngx_str_set(&r->headers_out.content_type, "application/json");
    }

    return ngx_http_zk_lock_status_send(r, page);
}


/* the request's own buffers on the page's memory */

static ngx_int_t
ngx_http_zk_lock_status_send(ngx_http_request_t *r,
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
ngx_http_zk_lock_status_render(ngx_http_request_t *r, ngx_uint_t prometheus)
{
    u_char                     *p;
    ngx_pool_t                 *pool;
    ngx_chain_t                *cl;
    ngx_http_zk_lock_out_t      o;
    ngx_http_zk_lock_page_t    *page;
    ngx_http_zk_lock_counts_t  *c;

    static ngx_http_zk_lock_shm_t     none;
    static ngx_array_t                no_names;
    static ngx_http_zk_lock_counts_t  no_counts = { &none, &no_names, NULL, 0 };

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

    /*
     * No HTTP lock (stream locks only, or no lock yet): no worker slots
     * and no entries, but a page all the same, with the version and the
     * build, so that a scrape set up before the first lock does not fail
     */

    c = ngx_http_zk_lock_metrics_counts();

    if (c == NULL) {
        c = &no_counts;
    }

    if (prometheus) {
        p = ngx_http_zk_lock_status_prometheus(&o, NULL, c);

    } else {
        p = ngx_http_zk_lock_status_json(&o, NULL, c);
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
ngx_http_zk_lock_status_room(ngx_http_zk_lock_out_t *o, u_char *p,
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
ngx_http_zk_lock_status_unref(void *data)
{
    ngx_http_zk_lock_page_t  *page = data;

    if (--page->refs == 0) {
        ngx_destroy_pool(page->pool);
    }
}


/* at exit: the pages kept for the next scrapes of the same millisecond */

void
ngx_http_zk_lock_status_exit(void)
{
    ngx_uint_t  i;

    for (i = 0; i < 2; i++) {
        if (ngx_http_zk_lock_pages[i]) {
            ngx_http_zk_lock_status_unref(ngx_http_zk_lock_pages[i]);
            ngx_http_zk_lock_pages[i] = NULL;
        }
    }
}


/* the JSON page's head: the version, then each worker's session */

static u_char *
ngx_http_zk_lock_status_json_workers(ngx_http_zk_lock_out_t *o, u_char *p,
    ngx_http_zk_lock_counts_t *c)
{
    ngx_uint_t                i, n;
    ngx_http_zk_lock_slot_t  *slot;

    p = ngx_http_zk_lock_status_room(o, p, 256);
    if (p == NULL) {
        return NULL;
    }

    p = ngx_sprintf(p, "{\"version\":\"" NGX_ZK_LOCK_VERSION "\","
                    "\"build\":\"" NGX_ZK_LOCK_BUILD "\",\"workers\":[");
    n = 0;

    for (i = 0; i < c->shm->nslots; i++) {
        slot = &c->shm->slots[i];

        if (slot->pid == 0) {
            continue;
        }

        p = ngx_http_zk_lock_status_room(o, p, 512 + NGX_HTTP_ZK_LOCK_SERVER);
        if (p == NULL) {
            return NULL;
        }

        p = ngx_sprintf(p, "%s{\"worker\":%ui,\"pid\":%uA,\"connected\":%s,"
                        "\"session\":\"0x%xA\",\"server\":\"%s\","
                        "\"session_timeout_ms\":%uA,"
                        "\"reconnects\":%uA,\"expired\":%uA,"
                        "\"jeopardies\":%uA}",
                        n++ ? "," : "", i, slot->pid,
                        slot->connected ? "true" : "false", slot->session_id,
                        slot->server[0] ? slot->server : (u_char *) "",
                        slot->timeout, slot->reconnects, slot->expired,
                        slot->jeopardies);
    }

    return p;
}


static u_char *
ngx_http_zk_lock_status_json(ngx_http_zk_lock_out_t *o, u_char *p,
    ngx_http_zk_lock_counts_t *c)
{
    ngx_uint_t                     i, j;
    ngx_http_zk_lock_stat_t       *st;
    ngx_http_zk_lock_metric_t     *m;
    ngx_http_zk_lock_histogram_t   h;

    p = ngx_http_zk_lock_status_json_workers(o, p, c);
    if (p == NULL) {
        return NULL;
    }

    p = ngx_sprintf(p, "],\"locks\":[");

    m = c->names->elts;

    for (i = 0; i < c->names->nelts; i++) {
        p = ngx_http_zk_lock_status_room(o, p, 1024 + 2 * m[i].name.len
                                     + (c->nbuckets + 1) * 48
                                     + NGX_HTTP_ZK_LOCK_TOP_JSON
                                     + NGX_HTTP_ZK_LOCK_CLASSES_JSON);
        if (p == NULL) {
            return NULL;
        }

        st = ngx_http_zk_lock_metrics_stat(c->shm, i);
        ngx_http_zk_lock_metrics_histogram(c, i, &h);

        p = ngx_sprintf(p, "%s{\"path\":\"", i ? "," : "");
        p = ngx_http_zk_lock_status_escape(p, &m[i].name);

        p = ngx_sprintf(p, "\",\"type\":\"%s\"",
                        ngx_zk_lock_types[m[i].type].label);

        /* readers have no bound among themselves */

        if (m[i].type != NGX_HTTP_ZK_LOCK_RWLOCK_READ) {
            p = ngx_sprintf(p, ",\"leases\":%ui",
                            ngx_http_zk_lock_metrics_leases_of(c, i));
        }

        if (m[i].fair) {
            p = ngx_http_zk_lock_status_fair_json(p, c, i);
        }

        p = ngx_sprintf(p, ",\"held\":%A,\"waiting\":%A,"
                        "\"acquired\":%uA,\"timeouts\":%uA,"
                        "\"unreachable\":%uA,\"errors\":%uA,"
                        "\"bypassed\":%uA,\"rejected\":%uA,\"lost\":%uA,"
                        "\"jeopardy\":%uA,\"revoked\":%uA,\"local\":%uA,"
                        "\"kept\":%A,"
                        "\"reused\":%uA,\"given_back\":%uA,"
                        "\"dry_run\":%uA,\"acquired_dry_run\":%uA,"
                        "\"waited_dry_run\":%uA,"
                        "\"wait\":{\"count\":%uA,\"sum_ms\":%uA,"
                        "\"buckets\":{",
                        ngx_http_zk_lock_metrics_gauge(c, i,
                                              NGX_HTTP_ZK_LOCK_HELD_GAUGE),
                        ngx_http_zk_lock_metrics_gauge(c, i,
                                              NGX_HTTP_ZK_LOCK_WAITING_GAUGE),
                        st->total[NGX_HTTP_ZK_LOCK_EV_ACQUIRED],
                        st->total[NGX_HTTP_ZK_LOCK_EV_TIMEOUT],
                        st->total[NGX_HTTP_ZK_LOCK_EV_UNREACHABLE],
                        st->total[NGX_HTTP_ZK_LOCK_EV_ERROR],
                        st->total[NGX_HTTP_ZK_LOCK_EV_BYPASSED],
                        st->total[NGX_HTTP_ZK_LOCK_EV_REJECTED],
                        st->total[NGX_HTTP_ZK_LOCK_EV_LOST],
                        st->total[NGX_HTTP_ZK_LOCK_EV_JEOPARDY],
                        st->total[NGX_HTTP_ZK_LOCK_EV_REVOKED],
                        st->total[NGX_HTTP_ZK_LOCK_EV_LOCAL],
                        ngx_http_zk_lock_metrics_gauge(c, i,
                                                 NGX_HTTP_ZK_LOCK_KEPT_GAUGE),
                        st->total[NGX_HTTP_ZK_LOCK_EV_REUSED],
                        st->total[NGX_HTTP_ZK_LOCK_EV_GIVEN_BACK],
                        st->total[NGX_HTTP_ZK_LOCK_EV_DRY_RUN],
                        st->total[NGX_HTTP_ZK_LOCK_EV_DRY_ACQUIRED],
                        st->total[NGX_HTTP_ZK_LOCK_EV_DRY_WAITED],
                        h.cum[c->nbuckets], h.sum);

        for (j = 0; j <= c->nbuckets; j++) {
            p = ngx_sprintf(p, "%s\"", j ? "," : "");
            p = ngx_http_zk_lock_status_bound(p, c, j);
            p = ngx_sprintf(p, "\":%uA", h.cum[j]);
        }

        p = ngx_sprintf(p, "}}}");
    }

    p = ngx_http_zk_lock_status_room(o, p, 16);
    if (p == NULL) {
        return NULL;
    }

    p = ngx_sprintf(p, "]");

    p = ngx_http_zk_lock_status_layer_json(o, p,
                           ngx_zk_lock_stats_find((ngx_cycle_t *) ngx_cycle,
                                                  &ngx_http_zk_lock_stream));
    if (p == NULL) {
        return NULL;
    }

    return ngx_sprintf(p, "}\n");
}


static u_char *
ngx_http_zk_lock_status_prometheus(ngx_http_zk_lock_out_t *o, u_char *p,
    ngx_http_zk_lock_counts_t *c)
{
    ngx_uint_t  i;

    p = ngx_http_zk_lock_status_room(o, p, ngx_http_zk_lock_build_info.len);
    if (p == NULL) {
        return NULL;
    }

    p = ngx_cpymem(p, ngx_http_zk_lock_build_info.data,
                   ngx_http_zk_lock_build_info.len);

    p = ngx_http_zk_lock_status_prom_workers(o, p, c);
    if (p == NULL) {
        return NULL;
    }

    p = ngx_http_zk_lock_status_prom_leases(o, p, c);
    if (p == NULL) {
        return NULL;
    }

    for (i = NGX_HTTP_ZK_LOCK_HELD_GAUGE; i <= NGX_HTTP_ZK_LOCK_KEPT_GAUGE;
         i++)
    {
        p = ngx_http_zk_lock_status_prom_gauges(o, p, c, i);
        if (p == NULL) {
            return NULL;
        }
    }

    p = ngx_http_zk_lock_status_prom_requests(o, p, c);
    if (p == NULL) {
        return NULL;
    }

    p = ngx_http_zk_lock_status_prom_kept(o, p, c);
    if (p == NULL) {
        return NULL;
    }

    p = ngx_http_zk_lock_status_prom_fair(o, p, c);
    if (p == NULL) {
        return NULL;
    }

    return ngx_http_zk_lock_status_prom_histogram(o, p, c);
}


/*
 * A worker is labelled by its index, not its pid: a pid would start new
 * series at every reload and respawn
 */

static u_char *
ngx_http_zk_lock_status_prom_workers(ngx_http_zk_lock_out_t *o, u_char *p,
    ngx_http_zk_lock_counts_t *c)
{
    ngx_uint_t                i, k;
    ngx_atomic_uint_t         v;
    ngx_http_zk_lock_slot_t  *slot;

    static struct {
        char                 *metric;
        char                 *type;
        char                 *help;
        size_t                offset;
        ngx_uint_t            ms;         /* shown as seconds */
    } workers[] = {
        { "zk_lock_session_connected", "gauge",
          "Whether the worker's ZooKeeper session is connected.",
          offsetof(ngx_http_zk_lock_slot_t, connected), 0 },
        { "zk_lock_session_timeout_seconds", "gauge",
          "The session timeout in force, as the server granted it "
          "(0 until connected).",
          offsetof(ngx_http_zk_lock_slot_t, timeout), 1 },
        { "zk_lock_session_reconnects_total", "counter",
          "Connections of the worker's session lost and made again.",
          offsetof(ngx_http_zk_lock_slot_t, reconnects), 0 },
        { "zk_lock_session_expirations_total", "counter",
          "Sessions of the worker that expired.",
          offsetof(ngx_http_zk_lock_slot_t, expired), 0 },
        { "zk_lock_session_jeopardy_total", "counter",
          "Times the worker's session went unheard from so long that it "
          "could expire: its locks were let go.",
          offsetof(ngx_http_zk_lock_slot_t, jeopardies), 0 }
    };

    for (k = 0; k < sizeof(workers) / sizeof(workers[0]); k++) {
        p = ngx_http_zk_lock_status_room(o, p, 512);
        if (p == NULL) {
            return NULL;
        }

        p = ngx_sprintf(p, "# HELP %s %s\n# TYPE %s %s\n",
                        workers[k].metric, workers[k].help,
                        workers[k].metric, workers[k].type);

        for (i = 0; i < c->shm->nslots; i++) {
            slot = &c->shm->slots[i];

            if (slot->pid == 0) {
                continue;
            }

            v = *(ngx_atomic_t *) ((u_char *) slot + workers[k].offset);

            p = ngx_http_zk_lock_status_room(o, p, 256);
            if (p == NULL) {
                return NULL;
            }

            p = ngx_sprintf(p, "%s{worker=\"%ui\"} ", workers[k].metric, i);

            if (workers[k].ms) {
                p = ngx_sprintf(p, "%uA.%03uA\n", v / 1000, v % 1000);

            } else {
                p = ngx_sprintf(p, "%uA\n", v);
            }
        }
    }

    return p;
}


static u_char *
ngx_http_zk_lock_status_prom_gauges(ngx_http_zk_lock_out_t *o, u_char *p,
    ngx_http_zk_lock_counts_t *c, ngx_uint_t which)
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

    p = ngx_http_zk_lock_status_room(o, p, 512);
    if (p == NULL) {
        return NULL;
    }

    p = ngx_sprintf(p, "# HELP %s %s\n# TYPE %s gauge\n",
                    gauges[which].metric, gauges[which].help,
                    gauges[which].metric);

    m = c->names->elts;

    for (i = 0; i < c->names->nelts; i++) {
        p = ngx_http_zk_lock_status_room(o, p, NGX_HTTP_ZK_LOCK_LINE(&m[i]));
        if (p == NULL) {
            return NULL;
        }

        p = ngx_http_zk_lock_status_series(p, gauges[which].metric, &m[i]);
        p = ngx_sprintf(p, "} %A\n",
                        ngx_http_zk_lock_metrics_gauge(c, i, which));
    }

    if (which == NGX_HTTP_ZK_LOCK_KEPT_GAUGE) {
        return p;
    }

    /* the core's gauges are held and waiting, in this order too */

    return ngx_http_zk_lock_status_layer_prom(o, p,
                           ngx_zk_lock_stats_find((ngx_cycle_t *) ngx_cycle,
                                                  &ngx_http_zk_lock_stream),
                           gauges[which].metric, which);
}


/* fair=: the flows an instance's pool serves, and the instance's claim */

static u_char *
ngx_http_zk_lock_status_prom_fair(ngx_http_zk_lock_out_t *o, u_char *p,
    ngx_http_zk_lock_counts_t *c)
{
    ngx_uint_t                  i, k;
    ngx_atomic_int_t            n;
    ngx_http_zk_lock_metric_t  *m;

    static struct {
        char                 *metric;
        char                 *help;
        ngx_uint_t            which;
    } gauges[] = {
        { "zk_lock_fair_flows",
          "Flows (fair=) with a request waiting or running in the pool.",
          NGX_HTTP_ZK_LOCK_FLOWS_GAUGE },
        { "zk_lock_fair_claim",
          "The instance's claim on the path's leases, in flows (fair=).",
          NGX_HTTP_ZK_LOCK_CLAIM_GAUGE }
    };

    m = c->names->elts;

    for (k = 0; k < 2; k++) {
        p = ngx_http_zk_lock_status_room(o, p, 512);
        if (p == NULL) {
            return NULL;
        }

        p = ngx_sprintf(p, "# HELP %s %s\n# TYPE %s gauge\n",
                        gauges[k].metric, gauges[k].help, gauges[k].metric);

        for (i = 0; i < c->names->nelts; i++) {
            if (!m[i].fair) {
                continue;
            }

            p = ngx_http_zk_lock_status_room(o, p,
                                             NGX_HTTP_ZK_LOCK_LINE(&m[i]));
            if (p == NULL) {
                return NULL;
            }

            n = ngx_http_zk_lock_metrics_gauge(c, i, gauges[k].which);

            p = ngx_http_zk_lock_status_series(p, gauges[k].metric, &m[i]);
            p = (k == 0) ? ngx_sprintf(p, "} %A\n", n)
                         : ngx_sprintf(p, "} %A.%03A\n", n / 1000, n % 1000);
        }

        p = ngx_http_zk_lock_status_layer_fair(o, p,
                           ngx_zk_lock_stats_find((ngx_cycle_t *) ngx_cycle,
                                                  &ngx_http_zk_lock_stream),
                           gauges[k].metric, k);
        if (p == NULL) {
            return NULL;
        }
    }

    p = ngx_http_zk_lock_status_prom_top(o, p, c);

    return (p == NULL) ? NULL
                       : ngx_http_zk_lock_status_prom_classes(o, p, c);
}


/* fair=: a lock's ,"fair":{...}: its flows, claim, classes and top */

static u_char *
ngx_http_zk_lock_status_fair_json(u_char *p, ngx_http_zk_lock_counts_t *c,
    ngx_uint_t i)
{
    ngx_atomic_int_t            claim;
    ngx_zk_lock_classes_t      *classes;
    ngx_zk_lock_fair_top_t      top[NGX_ZK_LOCK_FAIR_TOP];
    ngx_zk_lock_fair_load_t     load[NGX_ZK_LOCK_CLASS_MAX];
    ngx_http_zk_lock_metric_t  *m;

    m = c->names->elts;

    claim = ngx_http_zk_lock_metrics_gauge(c, i, NGX_HTTP_ZK_LOCK_CLAIM_GAUGE);

    p = ngx_sprintf(p, ",\"fair\":{\"flows\":%A,\"claim\":%A.%03A",
                    ngx_http_zk_lock_metrics_gauge(c, i,
                                              NGX_HTTP_ZK_LOCK_FLOWS_GAUGE),
                    claim / 1000, claim % 1000);

    classes = ngx_http_zk_lock_status_classes();

    if (m[i].priority && classes) {
        ngx_http_zk_lock_metrics_loads(c, i, load);
        p = ngx_http_zk_lock_status_classes_json(p, classes, load);
    }

    return ngx_http_zk_lock_status_top_json(p, top,
                                    ngx_http_zk_lock_metrics_top(c, i, top));
}


/* priority=: the HTTP configuration's classes, NULL for none */

static ngx_zk_lock_classes_t *
ngx_http_zk_lock_status_classes(void)
{
    ngx_http_zk_lock_main_conf_t  *lmcf;

    lmcf = ngx_http_cycle_get_module_main_conf(ngx_cycle,
                                               ngx_http_zk_lock_module);

    return (lmcf && lmcf->zk.classes.n) ? &lmcf->zk.classes : NULL;
}


/* priority=: ,"classes":[...] in a lock's "fair" object */

static u_char *
ngx_http_zk_lock_status_classes_json(u_char *p, ngx_zk_lock_classes_t *cl,
    ngx_zk_lock_fair_load_t *load)
{
    ngx_uint_t  k;

    p = ngx_sprintf(p, ",\"classes\":[");

    for (k = 0; k < cl->n; k++) {
        /* a class's name is letters, digits, "_" and "-": nothing to escape */
        p = ngx_sprintf(p, "%s{\"class\":\"%V\",\"held\":%uD,"
                        "\"waiting\":%uD,\"part\":%uD.%03uD}",
                        k ? "," : "", &cl->class[k].name, load[k].held,
                        load[k].waiting, load[k].part / 1000,
                        load[k].part % 1000);
    }

    return ngx_sprintf(p, "]");
}


/*
 * priority=: each class's requests served and waiting, and its part of
 * the instance's leases, for every lock with priority=, in either layer
 */

static u_char *
ngx_http_zk_lock_status_prom_classes(ngx_http_zk_lock_out_t *o, u_char *p,
    ngx_http_zk_lock_counts_t *c)
{
    ngx_uint_t                  i, j, k;
    ngx_zk_lock_stats_t        *st;
    ngx_zk_lock_classes_t      *cl, *scl;
    ngx_zk_lock_fair_load_t     load[NGX_ZK_LOCK_CLASS_MAX];
    ngx_zk_lock_stats_name_t   *sn;
    ngx_http_zk_lock_metric_t  *m;

    static char  *family[] = {
        "zk_lock_class_held", "zk_lock_class_waiting", "zk_lock_class_part"
    };

    static char  *help[] = {
        "Requests of a priority class that hold a lease.",
        "Requests of a priority class that wait for a lease.",
        "A priority class's part of the instance's leases."
    };

    cl = ngx_http_zk_lock_status_classes();
    st = ngx_zk_lock_stats_find((ngx_cycle_t *) ngx_cycle,
                                &ngx_http_zk_lock_stream);
    scl = st ? st->classes : NULL;

    if (cl == NULL && scl == NULL) {
        return p;
    }

    m = c->names->elts;
    sn = scl ? st->names->elts : NULL;

    for (k = 0; k < 3; k++) {
        p = ngx_http_zk_lock_status_room(o, p, 512);
        if (p == NULL) {
            return NULL;
        }

        p = ngx_sprintf(p, "# HELP %s %s\n# TYPE %s gauge\n", family[k],
                        help[k], family[k]);

        for (i = 0; cl && i < c->names->nelts; i++) {
            if (!m[i].priority) {
                continue;
            }

            ngx_http_zk_lock_metrics_loads(c, i, load);

            for (j = 0; j < cl->n; j++) {
                p = ngx_http_zk_lock_status_room(o, p,
                                             NGX_HTTP_ZK_LOCK_LINE(&m[i])
                                             + NGX_ZK_LOCK_CLASS_NAME);
                if (p == NULL) {
                    return NULL;
                }

                p = ngx_http_zk_lock_status_series(p, family[k], &m[i]);
                p = ngx_http_zk_lock_status_class(p, k, &cl->class[j].name,
                                                  &load[j]);
            }
        }

        for (i = 0; scl && i < st->names->nelts; i++) {
            if (!sn[i].priority) {
                continue;
            }

            ngx_zk_lock_stats_loads(st, i, load);

            for (j = 0; j < scl->n; j++) {
                p = ngx_http_zk_lock_status_room(o, p, 256
                                                 + 2 * sn[i].name.len
                                                 + NGX_ZK_LOCK_CLASS_NAME);
                if (p == NULL) {
                    return NULL;
                }

                p = ngx_sprintf(p, "%s{path=\"", family[k]);
                p = ngx_http_zk_lock_status_escape(p, &sn[i].name);
                p = ngx_sprintf(p, "\",type=\"%s\",layer=\"%V\"",
                                ngx_zk_lock_types[sn[i].type].label,
                                &st->layer);
                p = ngx_http_zk_lock_status_class(p, k, &scl->class[j].name,
                                                  &load[j]);
            }
        }
    }

    return p;
}


/* a class's series ends: 0, held; 1, waiting; 2, its part in leases */

static u_char *
ngx_http_zk_lock_status_class(u_char *p, ngx_uint_t k, ngx_str_t *name,
    ngx_zk_lock_fair_load_t *load)
{
    if (k == 2) {
        return ngx_sprintf(p, ",class=\"%V\"} %uD.%03uD\n", name,
                           load->part / 1000, load->part % 1000);
    }

    return ngx_sprintf(p, ",class=\"%V\"} %uD\n", name,
                       k ? load->waiting : load->held);
}


/*
 * fair=: the flows that hold the most leases of each lock, by their hash
 * (at most TOP series a lock, whose labels change as the flows do)
 */

static u_char *
ngx_http_zk_lock_status_prom_top(ngx_http_zk_lock_out_t *o, u_char *p,
    ngx_http_zk_lock_counts_t *c)
{
    ngx_uint_t                  i, j, k, n;
    ngx_zk_lock_stats_t        *st;
    ngx_zk_lock_fair_top_t      top[NGX_ZK_LOCK_FAIR_TOP];
    ngx_zk_lock_stats_name_t   *sn;
    ngx_http_zk_lock_metric_t  *m;

    static char  *family[] = {
        "zk_lock_fair_flow_held", "zk_lock_fair_flow_waiting"
    };

    m = c->names->elts;
    st = ngx_zk_lock_stats_find((ngx_cycle_t *) ngx_cycle,
                                &ngx_http_zk_lock_stream);

    for (k = 0; k < 2; k++) {
        p = ngx_http_zk_lock_status_room(o, p, 512);
        if (p == NULL) {
            return NULL;
        }

        p = ngx_sprintf(p, "# HELP %s Requests of a flow (fair=, by its "
                        "hash) that %s, for the flows that hold the "
                        "most.\n# TYPE %s gauge\n", family[k],
                        k ? "wait for a lease" : "hold a lease", family[k]);

        for (i = 0; i < c->names->nelts; i++) {
            if (!m[i].fair) {
                continue;
            }

            n = ngx_http_zk_lock_metrics_top(c, i, top);

            for (j = 0; j < n; j++) {
                p = ngx_http_zk_lock_status_room(o, p,
                                             NGX_HTTP_ZK_LOCK_LINE(&m[i]));
                if (p == NULL) {
                    return NULL;
                }

                p = ngx_http_zk_lock_status_series(p, family[k], &m[i]);
                p = ngx_sprintf(p, ",flow=\"%016xL\"} %uD\n", top[j].id,
                                k ? top[j].waiting : top[j].held);
            }
        }

        sn = st ? st->names->elts : NULL;

        for (i = 0; st && i < st->names->nelts; i++) {
            if (!sn[i].fair) {
                continue;
            }

            n = ngx_zk_lock_stats_top(st, i, top);

            for (j = 0; j < n; j++) {
                p = ngx_http_zk_lock_status_room(o, p,
                                                 256 + 2 * sn[i].name.len);
                if (p == NULL) {
                    return NULL;
                }

                p = ngx_sprintf(p, "%s{path=\"", family[k]);
                p = ngx_http_zk_lock_status_escape(p, &sn[i].name);
                p = ngx_sprintf(p, "\",type=\"%s\",layer=\"%V\","
                                "flow=\"%016xL\"} %uD\n",
                                ngx_zk_lock_types[sn[i].type].label,
                                &st->layer, top[j].id,
                                k ? top[j].waiting : top[j].held);
            }
        }
    }

    return p;
}


/* the stream layer's fair= locks: 0, their flows; 1, the claims */

static u_char *
ngx_http_zk_lock_status_layer_fair(ngx_http_zk_lock_out_t *o, u_char *p,
    ngx_zk_lock_stats_t *st, char *family, ngx_uint_t claim)
{
    ngx_uint_t                 i;
    ngx_atomic_int_t           n;
    ngx_zk_lock_stats_name_t  *name;

    if (st == NULL) {
        return p;
    }

    name = st->names->elts;

    for (i = 0; i < st->names->nelts; i++) {
        if (!name[i].fair) {
            continue;
        }

        p = ngx_http_zk_lock_status_room(o, p, 256 + 2 * name[i].name.len);
        if (p == NULL) {
            return NULL;
        }

        p = ngx_sprintf(p, "%s{path=\"", family);
        p = ngx_http_zk_lock_status_escape(p, &name[i].name);
        p = ngx_sprintf(p, "\",type=\"%s\",layer=\"%V\"",
                        ngx_zk_lock_types[name[i].type].label, &st->layer);

        if (claim) {
            n = ngx_zk_lock_stats_sum(st, i, NGX_ZK_LOCK_STATS_CLAIM);
            p = ngx_sprintf(p, "} %A.%03A\n", n / 1000, n % 1000);

        } else {
            p = ngx_sprintf(p, "} %A\n",
                            ngx_zk_lock_stats_sum(st, i,
                                                  NGX_ZK_LOCK_STATS_FLOWS));
        }
    }

    return p;
}


/*
 * The leases a lock grants at once, fleet-wide: a mutex's and a writer's
 * 1, a semaphore's as configured or as read from ZooKeeper.  Readers are
 * bounded by writers only: no series.
 */

static u_char *
ngx_http_zk_lock_status_prom_leases(ngx_http_zk_lock_out_t *o, u_char *p,
    ngx_http_zk_lock_counts_t *c)
{
    ngx_uint_t                  i;
    ngx_http_zk_lock_metric_t  *m;

    p = ngx_http_zk_lock_status_room(o, p, 512);
    if (p == NULL) {
        return NULL;
    }

    p = ngx_sprintf(p, "# HELP zk_lock_leases Leases the lock grants at "
                    "once, across the fleet: the count in force.\n"
                    "# TYPE zk_lock_leases gauge\n");

    m = c->names->elts;

    for (i = 0; i < c->names->nelts; i++) {
        if (m[i].type == NGX_HTTP_ZK_LOCK_RWLOCK_READ) {
            continue;
        }

        p = ngx_http_zk_lock_status_room(o, p, NGX_HTTP_ZK_LOCK_LINE(&m[i]));
        if (p == NULL) {
            return NULL;
        }

        p = ngx_http_zk_lock_status_series(p, "zk_lock_leases", &m[i]);
        p = ngx_sprintf(p, "} %ui\n",
                        ngx_http_zk_lock_metrics_leases_of(c, i));
    }

    return p;
}


/* kept leases: a subset of the acquired, and what they cost others */

static u_char *
ngx_http_zk_lock_status_prom_kept(ngx_http_zk_lock_out_t *o, u_char *p,
    ngx_http_zk_lock_counts_t *c)
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

    m = c->names->elts;

    for (k = 0; k < sizeof(counters) / sizeof(counters[0]); k++) {
        p = ngx_http_zk_lock_status_room(o, p, 512);
        if (p == NULL) {
            return NULL;
        }

        p = ngx_sprintf(p, "# HELP %s %s\n# TYPE %s counter\n",
                        counters[k].metric, counters[k].help,
                        counters[k].metric);

        for (i = 0; i < c->names->nelts; i++) {
            p = ngx_http_zk_lock_status_room(o, p,
                                              NGX_HTTP_ZK_LOCK_LINE(&m[i]));
            if (p == NULL) {
                return NULL;
            }

            p = ngx_http_zk_lock_status_series(p, counters[k].metric, &m[i]);
            p = ngx_sprintf(p, "} %uA\n",
                            ngx_http_zk_lock_metrics_stat(c->shm, i)
                                ->total[counters[k].event]);
        }
    }

    return p;
}


static u_char *
ngx_http_zk_lock_status_prom_requests(ngx_http_zk_lock_out_t *o, u_char *p,
    ngx_http_zk_lock_counts_t *c)
{
    ngx_uint_t                  i, j;
    ngx_http_zk_lock_metric_t  *m;

    static struct {
        char                 *result;
        ngx_uint_t            event;
    } results[] = {
        { "acquired", NGX_HTTP_ZK_LOCK_EV_ACQUIRED },
        { "timeout", NGX_HTTP_ZK_LOCK_EV_TIMEOUT },
        { "unreachable", NGX_HTTP_ZK_LOCK_EV_UNREACHABLE },
        { "error", NGX_HTTP_ZK_LOCK_EV_ERROR },
        { "bypassed", NGX_HTTP_ZK_LOCK_EV_BYPASSED },
        { "rejected", NGX_HTTP_ZK_LOCK_EV_REJECTED },
        { "lost", NGX_HTTP_ZK_LOCK_EV_LOST },
        { "jeopardy", NGX_HTTP_ZK_LOCK_EV_JEOPARDY },
        { "revoked", NGX_HTTP_ZK_LOCK_EV_REVOKED },
        { "local", NGX_HTTP_ZK_LOCK_EV_LOCAL },
        { "dry_run", NGX_HTTP_ZK_LOCK_EV_DRY_RUN },
        { "acquired_dry_run", NGX_HTTP_ZK_LOCK_EV_DRY_ACQUIRED },
        { "waited_dry_run", NGX_HTTP_ZK_LOCK_EV_DRY_WAITED }
    };

    p = ngx_http_zk_lock_status_room(o, p, 512);
    if (p == NULL) {
        return NULL;
    }

    p = ngx_sprintf(p, "# HELP zk_lock_requests_total Requests at the lock, "
                    "by result.\n# TYPE zk_lock_requests_total counter\n");

    m = c->names->elts;

    for (i = 0; i < c->names->nelts; i++) {
        p = ngx_http_zk_lock_status_room(o, p, NGX_HTTP_ZK_LOCK_LINE(&m[i])
                                        * sizeof(results) / sizeof(results[0]));
        if (p == NULL) {
            return NULL;
        }

        for (j = 0; j < sizeof(results) / sizeof(results[0]); j++) {
            p = ngx_http_zk_lock_status_series(p, "zk_lock_requests_total",
                                                &m[i]);
            p = ngx_sprintf(p, ",result=\"%s\"} %uA\n", results[j].result,
                            ngx_http_zk_lock_metrics_stat(c->shm, i)
                                ->total[results[j].event]);
        }
    }

    return ngx_http_zk_lock_status_layer_prom(o, p,
                           ngx_zk_lock_stats_find((ngx_cycle_t *) ngx_cycle,
                                                  &ngx_http_zk_lock_stream),
                           "zk_lock_requests_total", -1);
}


static u_char *
ngx_http_zk_lock_status_prom_histogram(ngx_http_zk_lock_out_t *o, u_char *p,
    ngx_http_zk_lock_counts_t *c)
{
    ngx_uint_t                     i, j;
    ngx_http_zk_lock_metric_t     *m;
    ngx_http_zk_lock_histogram_t   h;

    p = ngx_http_zk_lock_status_room(o, p, 512);
    if (p == NULL) {
        return NULL;
    }

    p = ngx_sprintf(p, "# HELP zk_lock_wait_seconds Time waited for the lock "
                    "by the requests that got it.\n"
                    "# TYPE zk_lock_wait_seconds histogram\n");

    m = c->names->elts;

    for (i = 0; i < c->names->nelts; i++) {
        p = ngx_http_zk_lock_status_room(o, p, NGX_HTTP_ZK_LOCK_LINE(&m[i])
                                        * (c->nbuckets + 3));
        if (p == NULL) {
            return NULL;
        }

        ngx_http_zk_lock_metrics_histogram(c, i, &h);

        for (j = 0; j <= c->nbuckets; j++) {
            p = ngx_http_zk_lock_status_series(p,
                                                "zk_lock_wait_seconds_bucket",
                                                &m[i]);
            p = ngx_sprintf(p, ",le=\"");
            p = ngx_http_zk_lock_status_bound(p, c, j);
            p = ngx_sprintf(p, "\"} %uA\n", h.cum[j]);
        }

        p = ngx_http_zk_lock_status_series(p, "zk_lock_wait_seconds_sum",
                                            &m[i]);
        p = ngx_sprintf(p, "} %uA.%03uA\n", h.sum / 1000, h.sum % 1000);

        p = ngx_http_zk_lock_status_series(p, "zk_lock_wait_seconds_count",
                                            &m[i]);
        p = ngx_sprintf(p, "} %uA\n", h.cum[c->nbuckets]);
    }

    return p;
}


/* fair=: ,"top":[...]}, the end of a lock's "fair" object */

static u_char *
ngx_http_zk_lock_status_top_json(u_char *p, ngx_zk_lock_fair_top_t *top,
    ngx_uint_t n)
{
    ngx_uint_t  i;

    p = ngx_sprintf(p, ",\"top\":[");

    for (i = 0; i < n; i++) {
        p = ngx_sprintf(p, "%s{\"flow\":\"%016xL\",\"held\":%uD,"
                        "\"waiting\":%uD,\"weight\":%uD}",
                        i ? "," : "", top[i].id, top[i].held,
                        top[i].waiting, top[i].weight);
    }

    return ngx_sprintf(p, "]}");
}


/*
 * The locks of the stream layer, from the core's counters: "stream" in
 * the JSON, layer="stream" in Prometheus, where the series of a path are
 * summed across layers as the lock itself counts them
 */

static u_char *
ngx_http_zk_lock_status_layer_json(ngx_http_zk_lock_out_t *o, u_char *p,
    ngx_zk_lock_stats_t *st)
{
    ngx_uint_t                 i, j;
    ngx_atomic_int_t           claim;
    ngx_zk_lock_fair_top_t     top[NGX_ZK_LOCK_FAIR_TOP];
    ngx_zk_lock_fair_load_t    load[NGX_ZK_LOCK_CLASS_MAX];
    ngx_zk_lock_stats_name_t  *n;

    if (st == NULL) {
        return p;
    }

    p = ngx_sprintf(p, ",\"%V\":[", &st->layer);
    n = st->names->elts;

    for (i = 0; i < st->names->nelts; i++) {
        p = ngx_http_zk_lock_status_room(o, p, 512 + 2 * n[i].name.len
                                               + NGX_HTTP_ZK_LOCK_TOP_JSON
                                               + NGX_HTTP_ZK_LOCK_CLASSES_JSON);
        if (p == NULL) {
            return NULL;
        }

        p = ngx_sprintf(p, "%s{\"path\":\"", i ? "," : "");
        p = ngx_http_zk_lock_status_escape(p, &n[i].name);
        p = ngx_sprintf(p, "\",\"type\":\"%s\",\"held\":%A,\"waiting\":%A",
                        ngx_zk_lock_types[n[i].type].label,
                        ngx_zk_lock_stats_sum(st, i, NGX_ZK_LOCK_STATS_HELD),
                        ngx_zk_lock_stats_sum(st, i,
                                              NGX_ZK_LOCK_STATS_WAITING));

        if (n[i].fair) {
            claim = ngx_zk_lock_stats_sum(st, i, NGX_ZK_LOCK_STATS_CLAIM);
            p = ngx_sprintf(p, ",\"fair\":{\"flows\":%A,"
                            "\"claim\":%A.%03A",
                            ngx_zk_lock_stats_sum(st, i,
                                                  NGX_ZK_LOCK_STATS_FLOWS),
                            claim / 1000, claim % 1000);

            if (n[i].priority && st->classes) {
                ngx_zk_lock_stats_loads(st, i, load);
                p = ngx_http_zk_lock_status_classes_json(p, st->classes,
                                                         load);
            }

            p = ngx_http_zk_lock_status_top_json(p, top,
                                           ngx_zk_lock_stats_top(st, i, top));
        }

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
ngx_http_zk_lock_status_layer_prom(ngx_http_zk_lock_out_t *o, u_char *p,
    ngx_zk_lock_stats_t *st, char *family, ngx_int_t which)
{
    ngx_uint_t                 i, j;
    ngx_zk_lock_stats_name_t  *n;

    if (st == NULL) {
        return p;
    }

    n = st->names->elts;

    for (i = 0; i < st->names->nelts; i++) {
        p = ngx_http_zk_lock_status_room(o, p, (256 + 2 * n[i].name.len)
                                                * NGX_ZK_LOCK_STATS_N);
        if (p == NULL) {
            return NULL;
        }

        for (j = 0; j < (which == -1 ? NGX_ZK_LOCK_STATS_N : 1); j++) {
            p = ngx_sprintf(p, "%s{path=\"", family);
            p = ngx_http_zk_lock_status_escape(p, &n[i].name);
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
ngx_http_zk_lock_status_series(u_char *p, char *family,
    ngx_http_zk_lock_metric_t *m)
{
    p = ngx_sprintf(p, "%s{path=\"", family);
    p = ngx_http_zk_lock_status_escape(p, &m->name);

    return ngx_sprintf(p, "\",type=\"%s\"",
                       ngx_zk_lock_types[m->type].label);
}


/* bucket j's bound in seconds, as Prometheus writes it: "0.005", "2.5" */

static u_char *
ngx_http_zk_lock_status_bound(u_char *p, ngx_http_zk_lock_counts_t *c,
    ngx_uint_t j)
{
    ngx_msec_t  ms, frac;

    if (j == c->nbuckets) {
        return ngx_cpymem(p, "+Inf", 4);
    }

    ms = c->bounds[j];
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
ngx_http_zk_lock_status_escape(u_char *p, ngx_str_t *s)
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
