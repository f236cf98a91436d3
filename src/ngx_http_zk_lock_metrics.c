
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_zk_lock_metrics.h"
#include "ngx_http_zk_lock_session.h"


/*
 * Every worker has its own session; what they do is added up in a shared
 * memory zone, so that one scrape of any worker sees the whole instance.
 * There is one entry per lock directive, named by its path as configured
 * (variables unexpanded: a bounded set of names), and one slot per worker.
 * Each worker writes only its own slot's gauges; totals are atomic.
 */

#define NGX_HTTP_ZK_LOCK_SLOTS     64
#define NGX_HTTP_ZK_LOCK_BUCKETS   12
#define NGX_HTTP_ZK_LOCK_SERVER    64


typedef struct {
    ngx_atomic_t                  pid;
    ngx_atomic_t                  connected;
    ngx_atomic_t                  reconnects;
    ngx_atomic_t                  expired;
    ngx_atomic_t                  session_id;
    u_char                        server[NGX_HTTP_ZK_LOCK_SERVER];
} ngx_http_zk_lock_slot_t;


typedef struct {
    ngx_atomic_t                  held[NGX_HTTP_ZK_LOCK_SLOTS];
    ngx_atomic_t                  waiting[NGX_HTTP_ZK_LOCK_SLOTS];
    ngx_atomic_t                  total[NGX_HTTP_ZK_LOCK_M_LOST + 1];
    ngx_atomic_t                  wait_sum;   /* ms */
    ngx_atomic_t                  buckets[NGX_HTTP_ZK_LOCK_BUCKETS + 1];
} ngx_http_zk_lock_stat_t;


typedef struct {
    ngx_http_zk_lock_slot_t       slots[NGX_HTTP_ZK_LOCK_SLOTS];
    ngx_http_zk_lock_stat_t       stats[1];
} ngx_http_zk_lock_shm_t;


static ngx_int_t ngx_http_zk_lock_metrics_init_zone(ngx_shm_zone_t *shm_zone,
    void *data);
static ngx_int_t ngx_http_zk_lock_status_handler(ngx_http_request_t *r);
static u_char *ngx_http_zk_lock_json(u_char *p, ngx_http_zk_lock_shm_t *shm,
    ngx_array_t *names);
static u_char *ngx_http_zk_lock_prometheus(u_char *p,
    ngx_http_zk_lock_shm_t *shm, ngx_array_t *names);
static u_char *ngx_http_zk_lock_escape(u_char *p, ngx_str_t *s);
static ngx_atomic_int_t ngx_http_zk_lock_gauge(ngx_atomic_t *v);


/* wait-time histogram bounds, ms */
static ngx_msec_t  ngx_http_zk_lock_bounds[NGX_HTTP_ZK_LOCK_BUCKETS] = {
    1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000
};

static char  *ngx_http_zk_lock_bound_names[NGX_HTTP_ZK_LOCK_BUCKETS] = {
    "0.001", "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1",
    "2.5", "5", "10"
};

static char  *ngx_http_zk_lock_kinds[] = {
    "", "mutex", "semaphore", "read", "write"
};

/* the zone of the current cycle, mapped in every worker */
static ngx_http_zk_lock_shm_t  *ngx_http_zk_lock_shm;
static ngx_array_t             *ngx_http_zk_lock_names;
static ngx_uint_t               ngx_http_zk_lock_slot;

static ngx_str_t  ngx_http_zk_lock_zone_name = ngx_string("zk_lock");


ngx_int_t
ngx_http_zk_lock_metrics_init(ngx_conf_t *cf,
    ngx_http_zk_lock_main_conf_t *lmcf)
{
    size_t           size;
    ngx_shm_zone_t  *zone;

    /* nginx puts a slab pool at the start of a zone: room for it too */

    size = sizeof(ngx_http_zk_lock_shm_t)
           + lmcf->metrics->nelts * sizeof(ngx_http_zk_lock_stat_t);

    zone = ngx_shared_memory_add(cf, &ngx_http_zk_lock_zone_name,
                                 ngx_align(size, ngx_pagesize)
                                 + 8 * ngx_pagesize,
                                 &ngx_http_zk_lock_module);
    if (zone == NULL) {
        return NGX_ERROR;
    }

    /*
     * A fresh zone for every configuration: the entries of a reloaded one
     * are other directives, and the old workers still count in theirs
     */

    zone->init = ngx_http_zk_lock_metrics_init_zone;
    zone->data = lmcf->metrics;
    zone->noreuse = 1;

    lmcf->zone = zone;

    return NGX_OK;
}


static ngx_int_t
ngx_http_zk_lock_metrics_init_zone(ngx_shm_zone_t *shm_zone, void *data)
{
    size_t            size;
    ngx_array_t      *metrics;
    ngx_slab_pool_t  *shpool;

    metrics = shm_zone->data;
    shpool = (ngx_slab_pool_t *) shm_zone->shm.addr;

    size = sizeof(ngx_http_zk_lock_shm_t)
           + metrics->nelts * sizeof(ngx_http_zk_lock_stat_t);

    shpool->data = ngx_slab_calloc(shpool, size);
    if (shpool->data == NULL) {
        return NGX_ERROR;
    }

    return NGX_OK;
}


/* at worker start: this worker's slot, cleared of a dead predecessor's */

void
ngx_http_zk_lock_metrics_worker(void)
{
    ngx_uint_t                     i;
    ngx_http_zk_lock_stat_t       *st;
    ngx_http_zk_lock_main_conf_t  *lmcf;

    lmcf = ngx_http_cycle_get_module_main_conf(ngx_cycle,
                                               ngx_http_zk_lock_module);

    if (lmcf == NULL || lmcf->zone == NULL) {
        return;
    }

    ngx_http_zk_lock_shm = ((ngx_slab_pool_t *) lmcf->zone->shm.addr)->data;
    ngx_http_zk_lock_names = lmcf->metrics;
    ngx_http_zk_lock_slot = ngx_worker % NGX_HTTP_ZK_LOCK_SLOTS;

    ngx_memzero(&ngx_http_zk_lock_shm->slots[ngx_http_zk_lock_slot],
                sizeof(ngx_http_zk_lock_slot_t));

    ngx_http_zk_lock_shm->slots[ngx_http_zk_lock_slot].pid = ngx_pid;

    for (i = 0; i < lmcf->metrics->nelts; i++) {
        st = &ngx_http_zk_lock_shm->stats[i];
        st->held[ngx_http_zk_lock_slot] = 0;
        st->waiting[ngx_http_zk_lock_slot] = 0;
    }
}


void
ngx_http_zk_lock_metrics_count(ngx_http_zk_lock_spec_t *spec,
    ngx_http_zk_lock_event_e event, ngx_msec_t waited)
{
    ngx_uint_t                i, slot;
    ngx_http_zk_lock_stat_t  *st;

    if (ngx_http_zk_lock_shm == NULL) {
        return;
    }

    st = &ngx_http_zk_lock_shm->stats[spec->index];
    slot = ngx_http_zk_lock_slot;

    (void) ngx_atomic_fetch_add(&st->total[event], 1);

    switch (event) {

    case NGX_HTTP_ZK_LOCK_M_WAIT:
        st->waiting[slot]++;
        return;

    case NGX_HTTP_ZK_LOCK_M_ACQUIRED:
        st->waiting[slot]--;
        st->held[slot]++;

        for (i = 0; i < NGX_HTTP_ZK_LOCK_BUCKETS; i++) {
            if (waited <= ngx_http_zk_lock_bounds[i]) {
                break;
            }
        }

        (void) ngx_atomic_fetch_add(&st->buckets[i], 1);
        (void) ngx_atomic_fetch_add(&st->wait_sum, waited);
        return;

    case NGX_HTTP_ZK_LOCK_M_UNWAIT:
    case NGX_HTTP_ZK_LOCK_M_TIMEOUT:
    case NGX_HTTP_ZK_LOCK_M_ERROR:
        st->waiting[slot]--;
        return;

    case NGX_HTTP_ZK_LOCK_M_RELEASED:
    case NGX_HTTP_ZK_LOCK_M_LOST:
        st->held[slot]--;
        return;

    default: /* BYPASSED, REJECTED: counted only */
        return;
    }
}


void
ngx_http_zk_lock_metrics_session(ngx_http_zk_lock_session_t *s)
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

    if (s->connected && s->zh) {
        slot->session_id = (ngx_atomic_uint_t) zoo_client_id(s->zh)->client_id;
        server = zoo_get_current_server(s->zh);

        (void) ngx_cpystrn(slot->server, (u_char *) (server ? server : "?"),
                           NGX_HTTP_ZK_LOCK_SERVER);
    }
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
    clcf->handler = ngx_http_zk_lock_status_handler;

    return NGX_CONF_OK;
}


static ngx_int_t
ngx_http_zk_lock_status_handler(ngx_http_request_t *r)
{
    size_t                         size;
    ngx_int_t                      rc;
    ngx_str_t                      format;
    ngx_buf_t                     *b;
    ngx_uint_t                     i, prometheus;
    ngx_chain_t                    out;
    ngx_http_zk_lock_metric_t     *m;
    ngx_http_zk_lock_loc_conf_t   *llcf;

    if (!(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD))) {
        return NGX_HTTP_NOT_ALLOWED;
    }

    rc = ngx_http_discard_request_body(r);
    if (rc != NGX_OK) {
        return rc;
    }

    if (ngx_http_zk_lock_shm == NULL) {
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

    /* a bound: names escaped at most 2x, each line shorter than 512 */

    size = NGX_HTTP_ZK_LOCK_SLOTS * 5 * 512 + 4096;
    m = ngx_http_zk_lock_names->elts;

    for (i = 0; i < ngx_http_zk_lock_names->nelts; i++) {
        size += (NGX_HTTP_ZK_LOCK_BUCKETS + 16) * (2 * m[i].name.len + 512);
    }

    b = ngx_create_temp_buf(r->pool, size);
    if (b == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (prometheus) {
        b->last = ngx_http_zk_lock_prometheus(b->last, ngx_http_zk_lock_shm,
                                              ngx_http_zk_lock_names);
        ngx_str_set(&r->headers_out.content_type,
                    "text/plain; version=0.0.4; charset=utf-8");

    } else {
        b->last = ngx_http_zk_lock_json(b->last, ngx_http_zk_lock_shm,
                                        ngx_http_zk_lock_names);
        ngx_str_set(&r->headers_out.content_type, "application/json");
    }

    r->headers_out.content_type_len = r->headers_out.content_type.len;
    r->headers_out.status = NGX_HTTP_OK;
    r->headers_out.content_length_n = b->last - b->pos;

    b->last_buf = (r == r->main) ? 1 : 0;
    b->last_in_chain = 1;

    rc = ngx_http_send_header(r);

    if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) {
        return rc;
    }

    out.buf = b;
    out.next = NULL;

    return ngx_http_output_filter(r, &out);
}


/* the sum of the workers' gauges (a late decrement may make one negative) */

static ngx_atomic_int_t
ngx_http_zk_lock_gauge(ngx_atomic_t *v)
{
    ngx_uint_t        i;
    ngx_atomic_int_t  n;

    n = 0;

    for (i = 0; i < NGX_HTTP_ZK_LOCK_SLOTS; i++) {
        n += (ngx_atomic_int_t) v[i];
    }

    return n > 0 ? n : 0;
}


static u_char *
ngx_http_zk_lock_json(u_char *p, ngx_http_zk_lock_shm_t *shm,
    ngx_array_t *names)
{
    ngx_uint_t                 i, j, n;
    ngx_atomic_uint_t          cum;
    ngx_http_zk_lock_metric_t *m;
    ngx_http_zk_lock_slot_t  *slot;
    ngx_http_zk_lock_stat_t  *st;

    p = ngx_sprintf(p, "{\"workers\":[");
    n = 0;

    for (i = 0; i < NGX_HTTP_ZK_LOCK_SLOTS; i++) {
        slot = &shm->slots[i];

        if (slot->pid == 0) {
            continue;
        }

        p = ngx_sprintf(p, "%s{\"worker\":%ui,\"pid\":%uA,\"connected\":%s,"
                        "\"session\":\"0x%xA\",\"server\":\"%s\","
                        "\"reconnects\":%uA,\"expired\":%uA}",
                        n++ ? "," : "", i, slot->pid,
                        slot->connected ? "true" : "false", slot->session_id,
                        slot->server[0] ? slot->server : (u_char *) "",
                        slot->reconnects, slot->expired);
    }

    p = ngx_sprintf(p, "],\"locks\":[");

    m = names->elts;

    for (i = 0; i < names->nelts; i++) {
        st = &shm->stats[i];

        p = ngx_sprintf(p, "%s{\"path\":\"", i ? "," : "");
        p = ngx_http_zk_lock_escape(p, &m[i].name);

        p = ngx_sprintf(p, "\",\"type\":\"%s\",\"held\":%A,\"waiting\":%A,"
                        "\"acquired\":%uA,\"timeouts\":%uA,\"errors\":%uA,"
                        "\"bypassed\":%uA,\"rejected\":%uA,\"lost\":%uA,"
                        "\"wait\":{\"count\":%uA,\"sum_ms\":%uA,"
                        "\"buckets\":{",
                        ngx_http_zk_lock_kinds[m[i].type],
                        ngx_http_zk_lock_gauge(st->held),
                        ngx_http_zk_lock_gauge(st->waiting),
                        st->total[NGX_HTTP_ZK_LOCK_M_ACQUIRED],
                        st->total[NGX_HTTP_ZK_LOCK_M_TIMEOUT],
                        st->total[NGX_HTTP_ZK_LOCK_M_ERROR],
                        st->total[NGX_HTTP_ZK_LOCK_M_BYPASSED],
                        st->total[NGX_HTTP_ZK_LOCK_M_REJECTED],
                        st->total[NGX_HTTP_ZK_LOCK_M_LOST],
                        st->total[NGX_HTTP_ZK_LOCK_M_ACQUIRED],
                        st->wait_sum);

        cum = 0;

        for (j = 0; j <= NGX_HTTP_ZK_LOCK_BUCKETS; j++) {
            cum += st->buckets[j];
            p = ngx_sprintf(p, "%s\"%s\":%uA", j ? "," : "",
                            j < NGX_HTTP_ZK_LOCK_BUCKETS
                            ? ngx_http_zk_lock_bound_names[j] : "+Inf",
                            cum);
        }

        p = ngx_sprintf(p, "}}}");
    }

    return ngx_sprintf(p, "]}\n");
}


static u_char *
ngx_http_zk_lock_prometheus(u_char *p, ngx_http_zk_lock_shm_t *shm,
    ngx_array_t *names)
{
    ngx_uint_t                 i, j, k;
    ngx_atomic_uint_t          cum, v;
    ngx_http_zk_lock_metric_t *m;
    ngx_http_zk_lock_slot_t  *slot;
    ngx_http_zk_lock_stat_t  *st;

    static struct {
        char                 *metric;
        char                 *type;
        char                 *help;
    } workers[] = {
        { "zk_lock_session_connected", "gauge",
          "Whether the worker's ZooKeeper session is connected." },
        { "zk_lock_session_reconnects_total", "counter",
          "Connections of the worker's session lost and made again." },
        { "zk_lock_session_expirations_total", "counter",
          "Sessions of the worker that expired." }
    };

    static struct {
        char                 *result;
        ngx_uint_t            event;
    } results[] = {
        { "acquired", NGX_HTTP_ZK_LOCK_M_ACQUIRED },
        { "timeout", NGX_HTTP_ZK_LOCK_M_TIMEOUT },
        { "error", NGX_HTTP_ZK_LOCK_M_ERROR },
        { "bypassed", NGX_HTTP_ZK_LOCK_M_BYPASSED },
        { "rejected", NGX_HTTP_ZK_LOCK_M_REJECTED },
        { "lost", NGX_HTTP_ZK_LOCK_M_LOST }
    };

    for (k = 0; k < 3; k++) {
        p = ngx_sprintf(p, "# HELP %s %s\n# TYPE %s %s\n",
                        workers[k].metric, workers[k].help,
                        workers[k].metric, workers[k].type);

        for (i = 0; i < NGX_HTTP_ZK_LOCK_SLOTS; i++) {
            slot = &shm->slots[i];

            if (slot->pid == 0) {
                continue;
            }

            v = (k == 0) ? slot->connected
                         : (k == 1) ? slot->reconnects : slot->expired;

            p = ngx_sprintf(p, "%s{worker=\"%ui\",pid=\"%uA\"} %uA\n",
                            workers[k].metric, i, slot->pid, v);
        }
    }

    m = names->elts;

    /* gauges, then counters, then the histogram: one family at a time */

    for (k = 0; k < 4; k++) {

        switch (k) {
        case 0:
            p = ngx_sprintf(p, "# HELP zk_lock_held Requests that hold the "
                            "lock.\n# TYPE zk_lock_held gauge\n");
            break;
        case 1:
            p = ngx_sprintf(p, "# HELP zk_lock_waiting Requests that wait "
                            "for the lock.\n# TYPE zk_lock_waiting gauge\n");
            break;
        case 2:
            p = ngx_sprintf(p, "# HELP zk_lock_requests_total Requests at "
                            "the lock, by result.\n"
                            "# TYPE zk_lock_requests_total counter\n");
            break;
        default:
            p = ngx_sprintf(p, "# HELP zk_lock_wait_seconds Time waited for "
                            "the lock by the requests that got it.\n"
                            "# TYPE zk_lock_wait_seconds histogram\n");
        }

        for (i = 0; i < names->nelts; i++) {
            st = &shm->stats[i];

            if (k < 2) {
                p = ngx_sprintf(p, "zk_lock_%s{path=\"",
                                k == 0 ? "held" : "waiting");
                p = ngx_http_zk_lock_escape(p, &m[i].name);
                p = ngx_sprintf(p, "\",type=\"%s\"} %A\n",
                                ngx_http_zk_lock_kinds[m[i].type],
                                ngx_http_zk_lock_gauge(k == 0 ? st->held
                                                              : st->waiting));
                continue;
            }

            if (k == 2) {
                for (j = 0; j < sizeof(results) / sizeof(results[0]); j++) {
                    p = ngx_sprintf(p, "zk_lock_requests_total{path=\"");
                    p = ngx_http_zk_lock_escape(p, &m[i].name);
                    p = ngx_sprintf(p, "\",type=\"%s\",result=\"%s\"} %uA\n",
                                    ngx_http_zk_lock_kinds[m[i].type],
                                    results[j].result,
                                    st->total[results[j].event]);
                }

                continue;
            }

            cum = 0;

            for (j = 0; j <= NGX_HTTP_ZK_LOCK_BUCKETS; j++) {
                cum += st->buckets[j];
                p = ngx_sprintf(p, "zk_lock_wait_seconds_bucket{path=\"");
                p = ngx_http_zk_lock_escape(p, &m[i].name);
                p = ngx_sprintf(p, "\",type=\"%s\",le=\"%s\"} %uA\n",
                                ngx_http_zk_lock_kinds[m[i].type],
                                j < NGX_HTTP_ZK_LOCK_BUCKETS
                                ? ngx_http_zk_lock_bound_names[j] : "+Inf",
                                cum);
            }

            p = ngx_sprintf(p, "zk_lock_wait_seconds_sum{path=\"");
            p = ngx_http_zk_lock_escape(p, &m[i].name);
            p = ngx_sprintf(p, "\",type=\"%s\"} %uA.%03uA\n",
                            ngx_http_zk_lock_kinds[m[i].type],
                            st->wait_sum / 1000, st->wait_sum % 1000);

            p = ngx_sprintf(p, "zk_lock_wait_seconds_count{path=\"");
            p = ngx_http_zk_lock_escape(p, &m[i].name);
            p = ngx_sprintf(p, "\",type=\"%s\"} %uA\n",
                            ngx_http_zk_lock_kinds[m[i].type],
                            st->total[NGX_HTTP_ZK_LOCK_M_ACQUIRED]);
        }
    }

    return p;
}


/* for a JSON string and a Prometheus label value alike */

static u_char *
ngx_http_zk_lock_escape(u_char *p, ngx_str_t *s)
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
