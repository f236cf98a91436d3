
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_zk_lock_prom.h"


/*
 * The status page as Prometheus text (the text format 0.0.4): the counts
 * of the metrics zone (see ngx_http_zk_lock_metrics.c) and of the stream
 * layer, a family of series at a time, each labelled by the lock's path
 * and type.  The stream layer's locks have layer="stream" too, and a
 * path's series are summed across layers as the lock itself counts them.
 * The status page (ngx_http_zk_lock_status.c) calls this for the text and
 * shares it between the requests of a millisecond; the page's chunks are
 * ngx_http_zk_lock_out.c's.
 */

/* a line of Prometheus text, but for the lock's name (escaped: 2x) */
#define NGX_HTTP_ZK_LOCK_LINE(m)  (256 + 2 * (m)->name.len)


static u_char *ngx_http_zk_lock_prom_workers(ngx_http_zk_lock_out_t *o,
    u_char *p, ngx_http_zk_lock_counts_t *c);
static u_char *ngx_http_zk_lock_prom_gauges(ngx_http_zk_lock_out_t *o,
    u_char *p, ngx_http_zk_lock_counts_t *c, ngx_uint_t which);
static u_char *ngx_http_zk_lock_prom_leases(ngx_http_zk_lock_out_t *o,
    u_char *p, ngx_http_zk_lock_counts_t *c);
static u_char *ngx_http_zk_lock_prom_classes(ngx_http_zk_lock_out_t *o,
    u_char *p, ngx_http_zk_lock_counts_t *c);
static u_char *ngx_http_zk_lock_prom_class(u_char *p, ngx_uint_t k,
    ngx_str_t *name, ngx_zk_lock_fair_load_t *load);
static u_char *ngx_http_zk_lock_prom_fair(ngx_http_zk_lock_out_t *o,
    u_char *p, ngx_http_zk_lock_counts_t *c);
static u_char *ngx_http_zk_lock_prom_kept(ngx_http_zk_lock_out_t *o,
    u_char *p, ngx_http_zk_lock_counts_t *c);
static u_char *ngx_http_zk_lock_prom_requests(ngx_http_zk_lock_out_t *o,
    u_char *p, ngx_http_zk_lock_counts_t *c);
static u_char *ngx_http_zk_lock_prom_histogram(ngx_http_zk_lock_out_t *o,
    u_char *p, ngx_http_zk_lock_counts_t *c);
static u_char *ngx_http_zk_lock_prom_top(ngx_http_zk_lock_out_t *o,
    u_char *p, ngx_http_zk_lock_counts_t *c);
static u_char *ngx_http_zk_lock_prom_layer_fair(ngx_http_zk_lock_out_t *o,
    u_char *p, ngx_zk_lock_stats_t *st, char *family, ngx_uint_t claim);
static u_char *ngx_http_zk_lock_prom_layer(ngx_http_zk_lock_out_t *o,
    u_char *p, ngx_zk_lock_stats_t *st, char *family, ngx_int_t which);
static u_char *ngx_http_zk_lock_prom_series(u_char *p, char *family,
    ngx_http_zk_lock_metric_t *m);
static u_char *ngx_http_zk_lock_prom_layer_series(u_char *p, char *family,
    ngx_zk_lock_stats_t *st, ngx_zk_lock_stats_name_t *n);


static ngx_str_t  ngx_http_zk_lock_build_info = ngx_string(
    "# HELP zk_lock_build_info The module's version and build.\n"
    "# TYPE zk_lock_build_info gauge\n"
    "zk_lock_build_info{version=\"" NGX_ZK_LOCK_VERSION "\",build=\""
    NGX_ZK_LOCK_BUILD "\"} 1\n");


/* the text from p (NULL: nothing written yet); NULL without memory */

u_char *
ngx_http_zk_lock_prom_write(ngx_http_zk_lock_out_t *o, u_char *p,
    ngx_http_zk_lock_counts_t *c)
{
    ngx_uint_t  i;

    p = ngx_http_zk_lock_out_room(o, p, ngx_http_zk_lock_build_info.len);
    if (p == NULL) {
        return NULL;
    }

    p = ngx_cpymem(p, ngx_http_zk_lock_build_info.data,
                   ngx_http_zk_lock_build_info.len);

    p = ngx_http_zk_lock_prom_workers(o, p, c);
    if (p == NULL) {
        return NULL;
    }

    p = ngx_http_zk_lock_prom_leases(o, p, c);
    if (p == NULL) {
        return NULL;
    }

    for (i = NGX_HTTP_ZK_LOCK_HELD_GAUGE; i <= NGX_HTTP_ZK_LOCK_KEPT_GAUGE;
         i++)
    {
        p = ngx_http_zk_lock_prom_gauges(o, p, c, i);
        if (p == NULL) {
            return NULL;
        }
    }

    p = ngx_http_zk_lock_prom_requests(o, p, c);
    if (p == NULL) {
        return NULL;
    }

    p = ngx_http_zk_lock_prom_kept(o, p, c);
    if (p == NULL) {
        return NULL;
    }

    p = ngx_http_zk_lock_prom_fair(o, p, c);
    if (p == NULL) {
        return NULL;
    }

    return ngx_http_zk_lock_prom_histogram(o, p, c);
}


/*
 * A worker is labelled by its index, not its pid: a pid would start new
 * series at every reload and respawn
 */

static u_char *
ngx_http_zk_lock_prom_workers(ngx_http_zk_lock_out_t *o, u_char *p,
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
        p = ngx_http_zk_lock_out_room(o, p, 512);
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

            p = ngx_http_zk_lock_out_room(o, p, 256);
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
ngx_http_zk_lock_prom_gauges(ngx_http_zk_lock_out_t *o, u_char *p,
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

    p = ngx_http_zk_lock_out_room(o, p, 512);
    if (p == NULL) {
        return NULL;
    }

    p = ngx_sprintf(p, "# HELP %s %s\n# TYPE %s gauge\n",
                    gauges[which].metric, gauges[which].help,
                    gauges[which].metric);

    m = c->names->elts;

    for (i = 0; i < c->names->nelts; i++) {
        p = ngx_http_zk_lock_out_room(o, p, NGX_HTTP_ZK_LOCK_LINE(&m[i]));
        if (p == NULL) {
            return NULL;
        }

        p = ngx_http_zk_lock_prom_series(p, gauges[which].metric, &m[i]);
        p = ngx_sprintf(p, "} %A\n",
                        ngx_http_zk_lock_metrics_gauge(c, i, which));
    }

    if (which == NGX_HTTP_ZK_LOCK_KEPT_GAUGE) {
        return p;
    }

    /* the core's gauges are held and waiting, in this order too */

    return ngx_http_zk_lock_prom_layer(o, p, ngx_http_zk_lock_out_stream(),
                                       gauges[which].metric, which);
}


/* fair=: the flows an instance's pool serves, and the instance's claim */

static u_char *
ngx_http_zk_lock_prom_fair(ngx_http_zk_lock_out_t *o, u_char *p,
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
        p = ngx_http_zk_lock_out_room(o, p, 512);
        if (p == NULL) {
            return NULL;
        }

        p = ngx_sprintf(p, "# HELP %s %s\n# TYPE %s gauge\n",
                        gauges[k].metric, gauges[k].help, gauges[k].metric);

        for (i = 0; i < c->names->nelts; i++) {
            if (!m[i].fair) {
                continue;
            }

            p = ngx_http_zk_lock_out_room(o, p, NGX_HTTP_ZK_LOCK_LINE(&m[i]));
            if (p == NULL) {
                return NULL;
            }

            n = ngx_http_zk_lock_metrics_gauge(c, i, gauges[k].which);

            p = ngx_http_zk_lock_prom_series(p, gauges[k].metric, &m[i]);
            p = (k == 0) ? ngx_sprintf(p, "} %A\n", n)
                         : ngx_sprintf(p, "} %A.%03A\n", n / 1000, n % 1000);
        }

        p = ngx_http_zk_lock_prom_layer_fair(o, p,
                                             ngx_http_zk_lock_out_stream(),
                                             gauges[k].metric, k);
        if (p == NULL) {
            return NULL;
        }
    }

    p = ngx_http_zk_lock_prom_top(o, p, c);

    return (p == NULL) ? NULL : ngx_http_zk_lock_prom_classes(o, p, c);
}


/*
 * priority=: each class's requests served and waiting, and its part of
 * the instance's leases, for every lock with priority=, in either layer
 */

static u_char *
ngx_http_zk_lock_prom_classes(ngx_http_zk_lock_out_t *o, u_char *p,
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

    cl = ngx_http_zk_lock_out_classes();
    st = ngx_http_zk_lock_out_stream();
    scl = st ? st->classes : NULL;

    if (cl == NULL && scl == NULL) {
        return p;
    }

    m = c->names->elts;
    sn = scl ? st->names->elts : NULL;

    for (k = 0; k < 3; k++) {
        p = ngx_http_zk_lock_out_room(o, p, 512);
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
                p = ngx_http_zk_lock_out_room(o, p,
                                              NGX_HTTP_ZK_LOCK_LINE(&m[i])
                                              + NGX_ZK_LOCK_CLASS_NAME);
                if (p == NULL) {
                    return NULL;
                }

                p = ngx_http_zk_lock_prom_series(p, family[k], &m[i]);
                p = ngx_http_zk_lock_prom_class(p, k, &cl->class[j].name,
                                                &load[j]);
            }
        }

        for (i = 0; scl && i < st->names->nelts; i++) {
            if (!sn[i].priority) {
                continue;
            }

            ngx_zk_lock_stats_loads(st, i, load);

            for (j = 0; j < scl->n; j++) {
                p = ngx_http_zk_lock_out_room(o, p, 256
                                              + 2 * sn[i].name.len
                                              + NGX_ZK_LOCK_CLASS_NAME);
                if (p == NULL) {
                    return NULL;
                }

                p = ngx_http_zk_lock_prom_layer_series(p, family[k], st,
                                                       &sn[i]);
                p = ngx_http_zk_lock_prom_class(p, k, &scl->class[j].name,
                                                &load[j]);
            }
        }
    }

    return p;
}


/* a class's series ends: 0, held; 1, waiting; 2, its part in leases */

static u_char *
ngx_http_zk_lock_prom_class(u_char *p, ngx_uint_t k, ngx_str_t *name,
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
ngx_http_zk_lock_prom_top(ngx_http_zk_lock_out_t *o, u_char *p,
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
    st = ngx_http_zk_lock_out_stream();

    for (k = 0; k < 2; k++) {
        p = ngx_http_zk_lock_out_room(o, p, 512);
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
                p = ngx_http_zk_lock_out_room(o, p,
                                              NGX_HTTP_ZK_LOCK_LINE(&m[i]));
                if (p == NULL) {
                    return NULL;
                }

                p = ngx_http_zk_lock_prom_series(p, family[k], &m[i]);
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
                p = ngx_http_zk_lock_out_room(o, p,
                                              256 + 2 * sn[i].name.len);
                if (p == NULL) {
                    return NULL;
                }

                p = ngx_http_zk_lock_prom_layer_series(p, family[k], st,
                                                       &sn[i]);
                p = ngx_sprintf(p, ",flow=\"%016xL\"} %uD\n", top[j].id,
                                k ? top[j].waiting : top[j].held);
            }
        }
    }

    return p;
}


/* the stream layer's fair= locks: 0, their flows; 1, the claims */

static u_char *
ngx_http_zk_lock_prom_layer_fair(ngx_http_zk_lock_out_t *o, u_char *p,
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

        p = ngx_http_zk_lock_out_room(o, p, 256 + 2 * name[i].name.len);
        if (p == NULL) {
            return NULL;
        }

        p = ngx_http_zk_lock_prom_layer_series(p, family, st, &name[i]);

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
ngx_http_zk_lock_prom_leases(ngx_http_zk_lock_out_t *o, u_char *p,
    ngx_http_zk_lock_counts_t *c)
{
    ngx_uint_t                  i;
    ngx_http_zk_lock_metric_t  *m;

    p = ngx_http_zk_lock_out_room(o, p, 512);
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

        p = ngx_http_zk_lock_out_room(o, p, NGX_HTTP_ZK_LOCK_LINE(&m[i]));
        if (p == NULL) {
            return NULL;
        }

        p = ngx_http_zk_lock_prom_series(p, "zk_lock_leases", &m[i]);
        p = ngx_sprintf(p, "} %ui\n",
                        ngx_http_zk_lock_metrics_leases_of(c, i));
    }

    return p;
}


/* kept leases: a subset of the acquired, and what they cost others */

static u_char *
ngx_http_zk_lock_prom_kept(ngx_http_zk_lock_out_t *o, u_char *p,
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
        p = ngx_http_zk_lock_out_room(o, p, 512);
        if (p == NULL) {
            return NULL;
        }

        p = ngx_sprintf(p, "# HELP %s %s\n# TYPE %s counter\n",
                        counters[k].metric, counters[k].help,
                        counters[k].metric);

        for (i = 0; i < c->names->nelts; i++) {
            p = ngx_http_zk_lock_out_room(o, p, NGX_HTTP_ZK_LOCK_LINE(&m[i]));
            if (p == NULL) {
                return NULL;
            }

            p = ngx_http_zk_lock_prom_series(p, counters[k].metric, &m[i]);
            p = ngx_sprintf(p, "} %uA\n",
                            ngx_http_zk_lock_metrics_stat(c->shm, i)
                                ->total[counters[k].event]);
        }
    }

    return p;
}


static u_char *
ngx_http_zk_lock_prom_requests(ngx_http_zk_lock_out_t *o, u_char *p,
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

    p = ngx_http_zk_lock_out_room(o, p, 512);
    if (p == NULL) {
        return NULL;
    }

    p = ngx_sprintf(p, "# HELP zk_lock_requests_total Requests at the lock, "
                    "by result.\n# TYPE zk_lock_requests_total counter\n");

    m = c->names->elts;

    for (i = 0; i < c->names->nelts; i++) {
        p = ngx_http_zk_lock_out_room(o, p, NGX_HTTP_ZK_LOCK_LINE(&m[i])
                                      * sizeof(results) / sizeof(results[0]));
        if (p == NULL) {
            return NULL;
        }

        for (j = 0; j < sizeof(results) / sizeof(results[0]); j++) {
            p = ngx_http_zk_lock_prom_series(p, "zk_lock_requests_total",
                                             &m[i]);
            p = ngx_sprintf(p, ",result=\"%s\"} %uA\n", results[j].result,
                            ngx_http_zk_lock_metrics_stat(c->shm, i)
                                ->total[results[j].event]);
        }
    }

    return ngx_http_zk_lock_prom_layer(o, p, ngx_http_zk_lock_out_stream(),
                                       "zk_lock_requests_total", -1);
}


static u_char *
ngx_http_zk_lock_prom_histogram(ngx_http_zk_lock_out_t *o, u_char *p,
    ngx_http_zk_lock_counts_t *c)
{
    ngx_uint_t                     i, j;
    ngx_http_zk_lock_metric_t     *m;
    ngx_http_zk_lock_histogram_t   h;

    p = ngx_http_zk_lock_out_room(o, p, 512);
    if (p == NULL) {
        return NULL;
    }

    p = ngx_sprintf(p, "# HELP zk_lock_wait_seconds Time waited for the lock "
                    "by the requests that got it.\n"
                    "# TYPE zk_lock_wait_seconds histogram\n");

    m = c->names->elts;

    for (i = 0; i < c->names->nelts; i++) {
        p = ngx_http_zk_lock_out_room(o, p, NGX_HTTP_ZK_LOCK_LINE(&m[i])
                                      * (c->nbuckets + 3));
        if (p == NULL) {
            return NULL;
        }

        ngx_http_zk_lock_metrics_histogram(c, i, &h);

        for (j = 0; j <= c->nbuckets; j++) {
            p = ngx_http_zk_lock_prom_series(p, "zk_lock_wait_seconds_bucket",
                                             &m[i]);
            p = ngx_sprintf(p, ",le=\"");
            p = ngx_http_zk_lock_out_bound(p, c, j);
            p = ngx_sprintf(p, "\"} %uA\n", h.cum[j]);
        }

        p = ngx_http_zk_lock_prom_series(p, "zk_lock_wait_seconds_sum",
                                         &m[i]);
        p = ngx_sprintf(p, "} %uA.%03uA\n", h.sum / 1000, h.sum % 1000);

        p = ngx_http_zk_lock_prom_series(p, "zk_lock_wait_seconds_count",
                                         &m[i]);
        p = ngx_sprintf(p, "} %uA\n", h.cum[c->nbuckets]);
    }

    return p;
}


/*
 * The locks of the stream layer, from the core's counters, with
 * layer="stream"; which: a gauge (held, waiting), or -1: the results'
 * counters
 */

static u_char *
ngx_http_zk_lock_prom_layer(ngx_http_zk_lock_out_t *o, u_char *p,
    ngx_zk_lock_stats_t *st, char *family, ngx_int_t which)
{
    ngx_uint_t                 i, j;
    ngx_zk_lock_stats_name_t  *n;

    if (st == NULL) {
        return p;
    }

    n = st->names->elts;

    for (i = 0; i < st->names->nelts; i++) {
        p = ngx_http_zk_lock_out_room(o, p, (256 + 2 * n[i].name.len)
                                            * NGX_ZK_LOCK_STATS_N);
        if (p == NULL) {
            return NULL;
        }

        for (j = 0; j < (which == -1 ? NGX_ZK_LOCK_STATS_N : 1); j++) {
            p = ngx_http_zk_lock_prom_layer_series(p, family, st, &n[i]);

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
ngx_http_zk_lock_prom_series(u_char *p, char *family,
    ngx_http_zk_lock_metric_t *m)
{
    p = ngx_sprintf(p, "%s{path=\"", family);
    p = ngx_http_zk_lock_out_escape(p, &m->name);

    return ngx_sprintf(p, "\",type=\"%s\"",
                       ngx_zk_lock_types[m->type].label);
}


/* the same for a lock of another layer (stream's), with its label */

static u_char *
ngx_http_zk_lock_prom_layer_series(u_char *p, char *family,
    ngx_zk_lock_stats_t *st, ngx_zk_lock_stats_name_t *n)
{
    p = ngx_sprintf(p, "%s{path=\"", family);
    p = ngx_http_zk_lock_out_escape(p, &n->name);

    return ngx_sprintf(p, "\",type=\"%s\",layer=\"%V\"",
                       ngx_zk_lock_types[n->type].label, &st->layer);
}
