
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_zk_lock_status.h"
#include "ngx_http_zk_lock_metrics.h"
#include "ngx_http_zk_lock_out.h"
#include "ngx_http_zk_lock_prom.h"
#include "ngx_zk_lock_stats.h"


/*
 * The status page: the counts of the metrics zone (read, never written
 * here: see ngx_http_zk_lock_metrics.c) and the stream layer's, as JSON,
 * here, or as Prometheus text (ngx_http_zk_lock_prom.c), in chunks written
 * as it goes (ngx_http_zk_lock_out.c).
 *
 * A page is shared by the requests that ask in the same millisecond (one
 * event loop's turn: a burst of scrapes costs one rendering, not one each,
 * and the worker's gated requests do not wait behind them all).  A page
 * lives while a request sends it.
 */

/* fair=: the flows that hold the most, in a lock's JSON */
#define NGX_HTTP_ZK_LOCK_TOP_JSON  (16 + NGX_ZK_LOCK_FAIR_TOP * 96)

/* priority=: a lock's classes in its JSON */
#define NGX_HTTP_ZK_LOCK_CLASSES_JSON                                    \
    (16 + NGX_ZK_LOCK_CLASS_MAX * (NGX_ZK_LOCK_CLASS_NAME + 96))

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
static void ngx_http_zk_lock_status_unref(void *data);
static u_char *ngx_http_zk_lock_status_json_workers(
    ngx_http_zk_lock_out_t *o, u_char *p, ngx_http_zk_lock_counts_t *c);
static u_char *ngx_http_zk_lock_status_json(ngx_http_zk_lock_out_t *o,
    u_char *p, ngx_http_zk_lock_counts_t *c);
static u_char *ngx_http_zk_lock_status_fair_json(u_char *p,
    ngx_http_zk_lock_counts_t *c, ngx_uint_t i);
static u_char *ngx_http_zk_lock_status_classes_json(u_char *p,
    ngx_zk_lock_classes_t *cl, ngx_zk_lock_fair_load_t *load);
static u_char *ngx_http_zk_lock_status_top_json(u_char *p,
    ngx_zk_lock_fair_top_t *top, ngx_uint_t n);
static u_char *ngx_http_zk_lock_status_layer_json(ngx_http_zk_lock_out_t *o,
    u_char *p, ngx_zk_lock_stats_t *st);


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

    ngx_http_zk_lock_out_init(&o, pool);

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
        p = ngx_http_zk_lock_prom_write(&o, NULL, c);

    } else {
        p = ngx_http_zk_lock_status_json(&o, NULL, c);
    }

    if (p == NULL) {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "zk lock status page: no memory for the page");
        ngx_destroy_pool(pool);
        return NULL;
    }

    page->pool = pool;
    page->size = ngx_http_zk_lock_out_end(&o, p);
    page->out = o.first;
    page->at = ngx_current_msec;
    page->refs = 1;

    return page;
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

    p = ngx_http_zk_lock_out_room(o, p, 256);
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

        p = ngx_http_zk_lock_out_room(o, p, 512 + NGX_HTTP_ZK_LOCK_SERVER);
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
        p = ngx_http_zk_lock_out_room(o, p, 1024 + 2 * m[i].name.len
                                      + (c->nbuckets + 1) * 48
                                      + NGX_HTTP_ZK_LOCK_TOP_JSON
                                      + NGX_HTTP_ZK_LOCK_CLASSES_JSON);
        if (p == NULL) {
            return NULL;
        }

        st = ngx_http_zk_lock_metrics_stat(c->shm, i);
        ngx_http_zk_lock_metrics_histogram(c, i, &h);

        p = ngx_sprintf(p, "%s{\"path\":\"", i ? "," : "");
        p = ngx_http_zk_lock_out_escape(p, &m[i].name);

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
            p = ngx_http_zk_lock_out_bound(p, c, j);
            p = ngx_sprintf(p, "\":%uA", h.cum[j]);
        }

        p = ngx_sprintf(p, "}}}");
    }

    p = ngx_http_zk_lock_out_room(o, p, 16);
    if (p == NULL) {
        return NULL;
    }

    p = ngx_sprintf(p, "]");

    p = ngx_http_zk_lock_status_layer_json(o, p,
                                           ngx_http_zk_lock_out_stream());
    if (p == NULL) {
        return NULL;
    }

    return ngx_sprintf(p, "}\n");
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

    classes = ngx_http_zk_lock_out_classes();

    if (m[i].priority && classes) {
        ngx_http_zk_lock_metrics_loads(c, i, load);
        p = ngx_http_zk_lock_status_classes_json(p, classes, load);
    }

    return ngx_http_zk_lock_status_top_json(p, top,
                                    ngx_http_zk_lock_metrics_top(c, i, top));
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
 * The locks of the stream layer, from the core's counters, under "stream"
 * (in Prometheus text, with layer="stream": ngx_http_zk_lock_prom.c)
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
        p = ngx_http_zk_lock_out_room(o, p, 512 + 2 * n[i].name.len
                                      + NGX_HTTP_ZK_LOCK_TOP_JSON
                                      + NGX_HTTP_ZK_LOCK_CLASSES_JSON);
        if (p == NULL) {
            return NULL;
        }

        p = ngx_sprintf(p, "%s{\"path\":\"", i ? "," : "");
        p = ngx_http_zk_lock_out_escape(p, &n[i].name);
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
