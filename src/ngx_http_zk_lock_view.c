
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_zk_lock_module.h"
#include "ngx_zk_lock_session.h"
#include "ngx_zk_lock_listing.h"
#include "ngx_zk_lock_counter.h"
#include "ngx_zk_lock_recipe.h"
#include "ngx_zk_lock_params.h"
#include "ngx_zk_lock_share.h"
#include "ngx_http_zk_lock_view.h"


/*
 * The fleet view reads each lock's children and their data from ZooKeeper,
 * through the worker's session, into a snapshot that the worker owns: one
 * read at a time, at most one a second, shared by every request that asks
 * meanwhile.  A request that finds the snapshot old waits for the read in
 * progress (bounded), and a read that ends wakes the requests still
 * waiting; one gone meanwhile has unlinked itself from its pool's cleanup.
 */


/* the children whose data is read, per path, in the order of the queue */
#define NGX_HTTP_ZK_LOCK_VIEW_MAX       100

/* the bytes of a node's data shown: the module writes at most 256 */
#define NGX_HTTP_ZK_LOCK_VIEW_DATA      512

/* the buffers the answer is written into, and a line of fixed text */
#define NGX_HTTP_ZK_LOCK_VIEW_CHUNK     4096
#define NGX_HTTP_ZK_LOCK_VIEW_LINE      256

/* a snapshot younger than this is served as it is, ms */
#define NGX_HTTP_ZK_LOCK_VIEW_EVERY     1000

/* how long a request waits for a read, then gets the last snapshot, ms */
#define NGX_HTTP_ZK_LOCK_VIEW_WAIT      3000

/* the shadow path of a lock in zk_lock_dry_run, see handler_dry() */
#define NGX_HTTP_ZK_LOCK_VIEW_DRY       ".dry-run"

/* fair=: the instances' claims beside a lock (board.c) */
#define NGX_HTTP_ZK_LOCK_VIEW_BOARD     ".fair"


typedef struct ngx_http_zk_lock_view_snap_s  ngx_http_zk_lock_view_snap_t;
typedef struct ngx_http_zk_lock_view_lock_s  ngx_http_zk_lock_view_lock_t;


/* a participant's node, as listed */

typedef struct {
    ngx_http_zk_lock_view_lock_t  *lock;
    ngx_str_t                      name;
    ngx_str_t                      data;      /* its first bytes */
    size_t                         size;      /* of all its data */
    int64_t                        ctime;     /* ms, from its stat */
    int64_t                        granted;   /* ms, by this worker's recipe */
    int64_t                        since;     /* ms: holds, or waits, since */
    uint32_t                       seq;
    ngx_uint_t                     writes;    /* write nodes ahead */
    unsigned                       write:1;
    unsigned                       read:1;    /* its data answered */
    unsigned                       gone:1;    /* deleted since listed */
    unsigned                       holds:1;   /* by the recipe's rule */
    unsigned                       exact:1;   /* "since" is its grant */
} ngx_http_zk_lock_view_child_t;


/* fair=: an instance's claim, as its node on the board says */

typedef struct {
    ngx_http_zk_lock_view_lock_t  *lock;
    u_char                         name[NGX_ZK_LOCK_OURS_LEN];
    ngx_int_t                      claim;     /* thousandths; -1: unread */
} ngx_http_zk_lock_view_claim_t;


/* a lock path, as read */

struct ngx_http_zk_lock_view_lock_s {
    ngx_http_zk_lock_view_snap_t   *snap;
    ngx_str_t                       path;     /* null-terminated */
    size_t                          base;     /* of path, before a suffix */
    const char                     *type;
    ngx_uint_t                      leases;
    ngx_uint_t                      total;    /* participants listed */
    ngx_uint_t                      n;        /* of them, read */
    ngx_http_zk_lock_view_child_t  *children;
    ngx_uint_t                      shadow;   /* its dry run's: index + 1 */
    ngx_http_zk_lock_view_claim_t  *claims;   /* fair=: the board's */
    ngx_uint_t                      nclaims;
    int                             rc;       /* of the listing */
    unsigned                        rw:1;     /* the read/write rule */
    unsigned                        live:1;   /* not configured literally */
    unsigned                        dry:1;    /* a shadow: see shadows() */
    unsigned                        fair:1;   /* its board is read too */
};


struct ngx_http_zk_lock_view_snap_s {
    ngx_pool_t                     *pool;     /* the snapshot's memory */
    ngx_array_t                     locks;    /* view_lock_t */
    ngx_uint_t                      pending;  /* answers to come */
    time_t                          time;     /* when it was read */
    int64_t                         msec;     /* when it was complete, ms */
    unsigned                        failed:1; /* an answer was no answer */
};


/* the worker's */

typedef struct {
    ngx_http_zk_lock_view_snap_t   *current;  /* the last complete one */
    ngx_http_zk_lock_view_snap_t   *next;     /* being read */
    ngx_msec_t                      done;     /* when current was */
    ngx_uint_t                      reads;    /* complete ones */
    ngx_queue_t                     waiters;  /* view_ctx_t */
    ngx_http_zk_lock_main_conf_t   *lmcf;
} ngx_http_zk_lock_view_t;


/*
 * The answer, written into a chain of buffers from the request's pool
 * that grows as it fills: no estimate of its size to hold
 */

typedef struct {
    ngx_pool_t                     *pool;
    ngx_log_t                      *log;
    ngx_chain_t                    *out;
    ngx_chain_t                   **last;     /* the next link goes there */
    ngx_buf_t                      *buf;      /* being written */
    unsigned                        failed:1;
} ngx_http_zk_lock_view_writer_t;


/* a request waiting for a read */

typedef struct {
    ngx_queue_t                     queue;    /* in view.waiters */
    ngx_http_request_t             *request;
    ngx_event_t                     event;    /* woken, or its timer */
    unsigned                        queued:1;
    unsigned                        stale:1;  /* the read took too long */
} ngx_http_zk_lock_view_ctx_t;


static ngx_int_t ngx_http_zk_lock_view_handler(ngx_http_request_t *r);
static ngx_int_t ngx_http_zk_lock_view_refresh(ngx_zk_lock_session_t *s);
static ngx_int_t ngx_http_zk_lock_view_literals(
    ngx_http_zk_lock_view_snap_t *snap, ngx_zk_lock_session_t *s);
static ngx_int_t ngx_http_zk_lock_view_live(
    ngx_http_zk_lock_view_snap_t *snap, ngx_zk_lock_session_t *s);
static void ngx_http_zk_lock_view_split(ngx_zk_lock_t *zl,
    ngx_zk_lock_node_t *node, ngx_str_t *name, const char **suffix);
static const char *ngx_http_zk_lock_view_type(ngx_str_t *name,
    ngx_uint_t live, const char *guess);
static ngx_uint_t ngx_http_zk_lock_view_match(ngx_str_t *pattern,
    ngx_str_t *path);
static ngx_int_t ngx_http_zk_lock_view_shadows(
    ngx_http_zk_lock_view_snap_t *snap);
static ngx_int_t ngx_http_zk_lock_view_add(ngx_http_zk_lock_view_snap_t *snap,
    ngx_str_t *path, const char *suffix, const char *type, ngx_uint_t leases,
    ngx_uint_t rw, ngx_uint_t live);
static ngx_uint_t ngx_http_zk_lock_view_known(
    ngx_http_zk_lock_view_snap_t *snap, u_char *path);
static void ngx_http_zk_lock_view_listed(int rc,
    const struct String_vector *strings, const void *data);
static ngx_int_t ngx_http_zk_lock_view_board(ngx_zk_lock_session_t *s,
    ngx_http_zk_lock_view_lock_t *lock);
static void ngx_http_zk_lock_view_board_listed(int rc,
    const struct String_vector *strings, const void *data);
static void ngx_http_zk_lock_view_board_data(int rc, const char *value,
    int value_len, const struct Stat *stat, const void *data);
static void ngx_http_zk_lock_view_board_json(
    ngx_http_zk_lock_view_writer_t *w, ngx_http_zk_lock_view_lock_t *lock);
static ngx_int_t ngx_http_zk_lock_view_claim(
    ngx_http_zk_lock_view_child_t *child);
static void ngx_http_zk_lock_view_data(int rc, const char *value,
    int value_len, const struct Stat *stat, const void *data);
static void ngx_http_zk_lock_view_granted(ngx_http_zk_lock_view_lock_t *lock,
    ngx_zk_lock_session_t *s);
static void ngx_http_zk_lock_view_answered(ngx_http_zk_lock_view_snap_t *snap);
static void ngx_http_zk_lock_view_ages(ngx_http_zk_lock_view_snap_t *snap,
    ngx_http_zk_lock_view_snap_t *prev);
static void ngx_http_zk_lock_view_aged(ngx_http_zk_lock_view_child_t *child,
    ngx_http_zk_lock_view_lock_t *was, int64_t then);
static ngx_uint_t ngx_http_zk_lock_view_holds(
    ngx_http_zk_lock_view_lock_t *lock, ngx_uint_t i);
static void ngx_http_zk_lock_view_wake(ngx_event_t *ev);
static void ngx_http_zk_lock_view_cleanup(void *data);
static ngx_int_t ngx_http_zk_lock_view_send(ngx_http_request_t *r,
    ngx_uint_t stale);
static ngx_int_t ngx_http_zk_lock_view_send_html(ngx_http_request_t *r);
static ngx_int_t ngx_http_zk_lock_view_out(ngx_http_request_t *r,
    ngx_chain_t *out, ngx_str_t *type);
static void ngx_http_zk_lock_view_json(ngx_http_zk_lock_view_writer_t *w,
    ngx_http_zk_lock_view_snap_t *snap, ngx_uint_t stale);
static void ngx_http_zk_lock_view_lock_json(ngx_http_zk_lock_view_writer_t *w,
    ngx_http_zk_lock_view_lock_t *lock);
static void ngx_http_zk_lock_view_nodes_json(
    ngx_http_zk_lock_view_writer_t *w, ngx_http_zk_lock_view_lock_t *lock);
static void ngx_http_zk_lock_view_node_json(ngx_http_zk_lock_view_writer_t *w,
    ngx_http_zk_lock_view_child_t *child);
static const char *ngx_http_zk_lock_view_state(ngx_zk_lock_session_t *s);
static u_char *ngx_http_zk_lock_view_room(ngx_http_zk_lock_view_writer_t *w,
    size_t n);
static void ngx_http_zk_lock_view_printf(ngx_http_zk_lock_view_writer_t *w,
    const char *fmt, ...);
static void ngx_http_zk_lock_view_text(ngx_http_zk_lock_view_writer_t *w,
    u_char *src, size_t len, ngx_uint_t cut);
static ngx_int_t ngx_http_zk_lock_view_utf8(u_char *p, size_t n,
    size_t *len);


/* the node data the module writes, see eval_info() and keep_queue() */

typedef struct {
    ngx_str_t                       host;
    ngx_int_t                       pid;
    ngx_str_t                       since;
    ngx_str_t                       method;
    ngx_str_t                       uri;
    ngx_str_t                       kept;     /* "<n>ms" */
} ngx_http_zk_lock_view_info_t;

static ngx_int_t ngx_http_zk_lock_view_parse(ngx_str_t *data,
    ngx_http_zk_lock_view_info_t *info);


static ngx_http_zk_lock_view_t  ngx_http_zk_lock_view;


static ngx_str_t  ngx_http_zk_lock_view_page;


/* zk_lock_fleet_view [html|json] */

char *
ngx_http_zk_lock_fleet_view(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_zk_lock_loc_conf_t *llcf = conf;

    ngx_str_t                 *value;
    ngx_http_core_loc_conf_t  *clcf;

    if (llcf->fleet_view) {
        return "is duplicate";
    }

    value = cf->args->elts;
    llcf->fleet_view = NGX_HTTP_ZK_LOCK_VIEW_HTML;

    if (cf->args->nelts == 2) {
        if (ngx_strcmp(value[1].data, "json") == 0) {
            llcf->fleet_view = NGX_HTTP_ZK_LOCK_VIEW_JSON;

        } else if (ngx_strcmp(value[1].data, "html") != 0) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "invalid format \"%V\", must be \"html\" or "
                               "\"json\"", &value[1]);
            return NGX_CONF_ERROR;
        }
    }

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);
    clcf->handler = ngx_http_zk_lock_view_handler;

    return NGX_CONF_OK;
}


static ngx_int_t
ngx_http_zk_lock_view_handler(ngx_http_request_t *r)
{
    ngx_int_t                      rc;
    ngx_str_t                      format;
    ngx_uint_t                     html;
    ngx_pool_cleanup_t            *cln;
    ngx_http_zk_lock_view_t       *view;
    ngx_zk_lock_session_t         *s;
    ngx_http_zk_lock_view_ctx_t   *ctx;
    ngx_http_zk_lock_loc_conf_t   *llcf;

    if (!(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD))) {
        return NGX_HTTP_NOT_ALLOWED;
    }

    rc = ngx_http_discard_request_body(r);
    if (rc != NGX_OK) {
        return rc;
    }

    llcf = ngx_http_get_module_loc_conf(r, ngx_http_zk_lock_module);
    html = (llcf->fleet_view == NGX_HTTP_ZK_LOCK_VIEW_HTML);

    if (ngx_http_arg(r, (u_char *) "format", 6, &format) == NGX_OK) {
        if (format.len == 4 && ngx_strncmp(format.data, "html", 4) == 0) {
            html = 1;

        } else if (format.len == 4 && ngx_strncmp(format.data, "json", 4) == 0)
        {
            html = 0;

        } else {
            return NGX_HTTP_BAD_REQUEST;
        }
    }

    /* the page reads the JSON itself, from the same location */

    if (html) {
        return ngx_http_zk_lock_view_send_html(r);
    }

    view = &ngx_http_zk_lock_view;

    if (view->lmcf == NULL) {
        view->lmcf = ngx_http_get_module_main_conf(r, ngx_http_zk_lock_module);
        ngx_queue_init(&view->waiters);
    }

    s = view->lmcf->session;

    /* no session to read through: what is known, at once */

    if (s == NULL || s->brokered || s->exiting
        || !ngx_zk_lock_session_usable(s))
    {
        return ngx_http_zk_lock_view_send(r, 1);
    }

    if (view->current
        && ngx_current_msec - view->done < NGX_HTTP_ZK_LOCK_VIEW_EVERY)
    {
        return ngx_http_zk_lock_view_send(r, 0);
    }

    if (view->next == NULL) {
        if (ngx_http_zk_lock_view_refresh(s) != NGX_OK) {
            return ngx_http_zk_lock_view_send(r, 1);
        }

        if (view->next == NULL) {
            /* nothing was asked of ZooKeeper: done already */
            return ngx_http_zk_lock_view_send(r, 0);
        }
    }

    /* waits for the read in progress */

    ctx = ngx_pcalloc(r->pool, sizeof(ngx_http_zk_lock_view_ctx_t));
    if (ctx == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (cln == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ctx->request = r;
    ctx->event.handler = ngx_http_zk_lock_view_wake;
    ctx->event.data = ctx;
    ctx->event.log = r->connection->log;

    /*
     * The cleanup unlinks a request that goes while it waits: a client
     * that closes, a worker that ends it.  The timer is not cancelable:
     * a worker shutting down gracefully answers the request first.
     */

    cln->handler = ngx_http_zk_lock_view_cleanup;
    cln->data = ctx;

    ngx_queue_insert_tail(&view->waiters, &ctx->queue);
    ctx->queued = 1;

    ngx_add_timer(&ctx->event, NGX_HTTP_ZK_LOCK_VIEW_WAIT);

    if (!r->discard_body) {
        /* to hear of a client that closes while it waits */
        r->read_event_handler = ngx_http_test_reading;
    }

    r->main->count++;

    return NGX_DONE;
}


/*
 * A new snapshot: every literal path configured, and the paths from
 * variables that requests of this worker use now; first the list, so
 * that the answers can point into it, then the listings.
 */

static ngx_int_t
ngx_http_zk_lock_view_refresh(ngx_zk_lock_session_t *s)
{
    int                            rc;
    ngx_uint_t                     i;
    ngx_pool_t                    *pool;
    ngx_http_zk_lock_view_t       *view;
    ngx_http_zk_lock_view_lock_t  *lock;
    ngx_http_zk_lock_view_snap_t  *snap;

    view = &ngx_http_zk_lock_view;

    pool = ngx_create_pool(4096, &s->log);
    if (pool == NULL) {
        return NGX_ERROR;
    }

    snap = ngx_pcalloc(pool, sizeof(ngx_http_zk_lock_view_snap_t));
    if (snap == NULL) {
        goto failed;
    }

    snap->pool = pool;
    snap->time = ngx_time();

    if (ngx_array_init(&snap->locks, pool, 8,
                       sizeof(ngx_http_zk_lock_view_lock_t))
        != NGX_OK)
    {
        goto failed;
    }

    if (ngx_http_zk_lock_view_literals(snap, s) != NGX_OK
        || ngx_http_zk_lock_view_live(snap, s) != NGX_OK
        || ngx_http_zk_lock_view_shadows(snap) != NGX_OK)
    {
        goto failed;
    }

    /* the list is complete: the answers may now point into it */

    ngx_zk_lock_session_batch(s);

    lock = snap->locks.elts;

    for (i = 0; i < snap->locks.nelts; i++) {
        lock[i].snap = snap;

        rc = zoo_aget_children(s->zh, (char *) lock[i].path.data, 0,
                               ngx_http_zk_lock_view_listed, &lock[i]);

        if (rc != ZOK) {
            ngx_log_error(NGX_LOG_ERR, &s->log, 0,
                          "zoo_aget_children(\"%V\") failed (%d: %s)",
                          &lock[i].path, rc, zerror(rc));
            lock[i].rc = rc;
            snap->failed = 1;
            continue;
        }

        snap->pending++;

        if (lock[i].fair && ngx_http_zk_lock_view_board(s, &lock[i])
                            != NGX_OK)
        {
            snap->failed = 1;
        }
    }

    view->next = snap;

    if (snap->pending == 0) {
        ngx_http_zk_lock_view_answered(snap);
    }

    return NGX_OK;

failed:

    ngx_destroy_pool(pool);
    return NGX_ERROR;
}


/* the locks of literal paths, as configured */

static ngx_int_t
ngx_http_zk_lock_view_literals(ngx_http_zk_lock_view_snap_t *snap,
    ngx_zk_lock_session_t *s)
{
    ngx_int_t                      rc;
    ngx_uint_t                     i, leases;
    const char                    *type;
    ngx_http_zk_lock_view_t       *view;
    ngx_http_zk_lock_literal_t    *lit;
    ngx_zk_lock_counter_t         *counter;
    ngx_http_zk_lock_view_lock_t  *lock;

    view = &ngx_http_zk_lock_view;

    lit = view->lmcf->literals ? view->lmcf->literals->elts : NULL;

    for (i = 0; lit && i < view->lmcf->literals->nelts; i++) {

        /* the count as the fleet shares it, the default while unknown */

        leases = lit[i].leases;

        if (lit[i].counter.len) {
            counter = ngx_zk_lock_counter(s, &lit[i].counter);

            if (counter && counter->value) {
                leases = counter->value;
            }
        }

        if (lit[i].rw) {
            rc = ngx_http_zk_lock_view_add(snap, &lit[i].name, NULL,
                                           "rwlock", 0, 1, 0);

        } else if (lit[i].v2) {
            rc = ngx_http_zk_lock_view_add(snap, &lit[i].name, "/leases",
                                           "semaphore v2", leases, 0, 0);
            if (rc == NGX_OK) {
                /* its queue to create a lease: Curator's internal mutex */
                rc = ngx_http_zk_lock_view_add(snap, &lit[i].name, "/locks",
                                               "semaphore v2 mutex", 1, 0, 0);
            }

        } else {
            /* the directive's name: a semaphore may have one lease */

            type = (leases == 1 && lit[i].counter.len == 0)
                   ? "mutex" : "semaphore";
            type = ngx_http_zk_lock_view_type(&lit[i].name, 0, type);

            rc = ngx_http_zk_lock_view_add(snap, &lit[i].name, NULL, type,
                                           leases, 0, 0);

            if (rc == NGX_OK && lit[i].fair) {
                lock = snap->locks.elts;
                lock[snap->locks.nelts - 1].fair = 1;
            }
        }

        if (rc != NGX_OK) {
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


/*
 * The paths built from variables that live in this worker; a shadow path
 * of a dry run as its lock's, whose listing shows the shadow's nodes
 */

static ngx_int_t
ngx_http_zk_lock_view_live(ngx_http_zk_lock_view_snap_t *snap,
    ngx_zk_lock_session_t *s)
{
    u_char                   *p;
    ngx_str_t                 name, path;
    ngx_uint_t                leases, rw;
    ngx_queue_t              *q;
    const char               *type, *suffix;
    ngx_zk_lock_t            *zl;
    ngx_zk_lock_node_t       *node;

    for (q = ngx_queue_head(&s->all);
         q != ngx_queue_sentinel(&s->all);
         q = ngx_queue_next(q))
    {
        zl = ngx_queue_data(q, ngx_zk_lock_t, queue);

        if (ngx_queue_empty(&zl->nodes)) {
            continue;
        }

        /* the recipe is the one of its nodes: one per path */

        node = ngx_queue_data(ngx_queue_head(&zl->nodes),
                              ngx_zk_lock_node_t, queue);

        ngx_http_zk_lock_view_split(zl, node, &name, &suffix);

        /* the lock's path: its own, or the one its shadow stands for */

        path.len = name.len + (suffix ? ngx_strlen(suffix) : 0);
        path.data = ngx_pnalloc(snap->pool, path.len + 1);
        if (path.data == NULL) {
            return NGX_ERROR;
        }

        p = ngx_sprintf(path.data, "%V%s", &name, suffix ? suffix : "");
        *p = '\0';

        if (ngx_http_zk_lock_view_known(snap, path.data)) {
            continue;
        }

        leases = ngx_zk_lock_recipe_leases(node);
        rw = (node->kind == NGX_ZK_LOCK_READ
              || node->kind == NGX_ZK_LOCK_WRITE);

        if (rw) {
            type = "rwlock";

        } else if (node->kind == NGX_ZK_LOCK_COUNT) {
            type = "semaphore v2";

        } else {
            type = ngx_http_zk_lock_view_type(&name, 1,
                                              (leases == 1) ? "mutex"
                                                            : "semaphore");
        }

        if (ngx_http_zk_lock_view_add(snap, &name, suffix, type, leases, rw,
                                      1)
            != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


/*
 * A path of this worker's as "<name>[<suffix>]", the lock's name without
 * the shadow's ".dry-run": the suffix of a semaphore v2's leases, which
 * its kind tells, and of the queue of its internal mutex in a dry run;
 * else none (that queue is shown as a lock of its own otherwise)
 */

static void
ngx_http_zk_lock_view_split(ngx_zk_lock_t *zl, ngx_zk_lock_node_t *node,
    ngx_str_t *name, const char **suffix)
{
    size_t  n;

    name->data = zl->path;
    name->len = ngx_strlen(zl->path);
    *suffix = NULL;

    n = sizeof("/leases") - 1;

    if (node->kind == NGX_ZK_LOCK_COUNT && name->len > n
        && ngx_strcmp(name->data + name->len - n, "/leases") == 0)
    {
        name->len -= n;
        *suffix = "/leases";
    }

    n = sizeof(NGX_HTTP_ZK_LOCK_VIEW_DRY "/locks") - 1;

    if (node->kind == NGX_ZK_LOCK_LEASE && name->len > n
        && ngx_strcmp(name->data + name->len - n,
                      NGX_HTTP_ZK_LOCK_VIEW_DRY "/locks") == 0)
    {
        name->len -= sizeof("/locks") - 1;
        *suffix = "/locks";
    }

    n = sizeof(NGX_HTTP_ZK_LOCK_VIEW_DRY) - 1;

    if (name->len > n
        && ngx_strncmp(name->data + name->len - n, NGX_HTTP_ZK_LOCK_VIEW_DRY,
                       n) == 0)
    {
        name->len -= n;
    }
}


/*
 * The directive's type of a lock (zk_mutex or zk_semaphore, which the
 * recipe does not tell apart with one lease) as configured: a literal
 * path's own; a live path's from the directive whose path it fits, if
 * one type fits; else "guess", the recipe's
 */

static const char *
ngx_http_zk_lock_view_type(ngx_str_t *name, ngx_uint_t live,
    const char *guess)
{
    ngx_uint_t                     i, type, fits;
    ngx_zk_lock_params_t         **lp;
    ngx_http_zk_lock_main_conf_t  *lmcf;

    lmcf = ngx_http_zk_lock_view.lmcf;

    if (lmcf->specs == NULL) {
        return guess;
    }

    lp = lmcf->specs->elts;
    type = 0;

    for (i = 0; i < lmcf->specs->nelts; i++) {

        if (lp[i]->v2
            || (lp[i]->type != NGX_ZK_LOCK_MUTEX
                && lp[i]->type != NGX_ZK_LOCK_SEMAPHORE))
        {
            continue;
        }

        if (live) {
            fits = lp[i]->transient
                   && ngx_http_zk_lock_view_match(&lp[i]->name, name);

        } else {
            fits = !lp[i]->transient && lp[i]->name.len == name->len
                   && ngx_strncmp(lp[i]->name.data, name->data, name->len)
                      == 0;
        }

        if (!fits) {
            continue;
        }

        if (type && type != lp[i]->type) {
            return guess;
        }

        type = lp[i]->type;
    }

    return (type == 0) ? guess
                       : (type == NGX_ZK_LOCK_MUTEX) ? "mutex" : "semaphore";
}


/*
 * Whether a path fits a directive's path with variables: as many levels
 * (a value cannot add one, see eval_path()), the same literal ones, and
 * each from variables with the text before its first "$"
 */

static ngx_uint_t
ngx_http_zk_lock_view_match(ngx_str_t *pattern, ngx_str_t *path)
{
    u_char  *p, *q, *pe, *qe, *plast, *qlast, *dollar;

    p = pattern->data;
    plast = p + pattern->len;
    q = path->data;
    qlast = q + path->len;

    while (p < plast && q < qlast) {
        pe = ngx_strlchr(p + 1, plast, '/');
        pe = pe ? pe : plast;
        qe = ngx_strlchr(q + 1, qlast, '/');
        qe = qe ? qe : qlast;

        dollar = ngx_strlchr(p, pe, '$');

        if (dollar) {
            if (qe - q < dollar - p || ngx_strncmp(p, q, dollar - p) != 0) {
                return 0;
            }

        } else if (pe - p != qe - q || ngx_strncmp(p, q, pe - p) != 0) {
            return 0;
        }

        p = pe;
        q = qe;
    }

    return (p == plast && q == qlast);
}


/*
 * The shadow path of each lock, "<name>.dry-run<suffix>", where the
 * requests in zk_lock_dry_run across the fleet make their nodes: listed
 * with the lock, and shown under it
 */

static ngx_int_t
ngx_http_zk_lock_view_shadows(ngx_http_zk_lock_view_snap_t *snap)
{
    u_char                        *p, *suffix;
    size_t                         len;
    ngx_str_t                      name;
    ngx_uint_t                     i, n;
    ngx_http_zk_lock_view_lock_t  *lock, *shadow;

    n = snap->locks.nelts;

    for (i = 0; i < n; i++) {

        /* the array moves as it grows */

        lock = snap->locks.elts;

        len = lock[i].path.len + sizeof(NGX_HTTP_ZK_LOCK_VIEW_DRY);

        name.data = ngx_pnalloc(snap->pool, len);
        if (name.data == NULL) {
            return NGX_ERROR;
        }

        suffix = lock[i].path.data + lock[i].base;

        p = ngx_cpymem(name.data, lock[i].path.data, lock[i].base);
        p = ngx_cpymem(p, NGX_HTTP_ZK_LOCK_VIEW_DRY,
                       sizeof(NGX_HTTP_ZK_LOCK_VIEW_DRY) - 1);
        name.len = p - name.data;

        p = ngx_cpymem(p, suffix, lock[i].path.len - lock[i].base);
        *p = '\0';

        /* a lock of its own by that name is shown as one */

        if (ngx_http_zk_lock_view_known(snap, name.data)) {
            continue;
        }

        if (ngx_http_zk_lock_view_add(snap, &name, (char *) suffix,
                                      lock[i].type, lock[i].leases,
                                      lock[i].rw, lock[i].live)
            != NGX_OK)
        {
            return NGX_ERROR;
        }

        lock = snap->locks.elts;
        shadow = &lock[snap->locks.nelts - 1];

        shadow->dry = 1;
        lock[i].shadow = snap->locks.nelts;
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_zk_lock_view_add(ngx_http_zk_lock_view_snap_t *snap, ngx_str_t *path,
    const char *suffix, const char *type, ngx_uint_t leases, ngx_uint_t rw,
    ngx_uint_t live)
{
    size_t                         len;
    ngx_http_zk_lock_view_lock_t  *lock;

    lock = ngx_array_push(&snap->locks);
    if (lock == NULL) {
        return NGX_ERROR;
    }

    ngx_memzero(lock, sizeof(ngx_http_zk_lock_view_lock_t));

    len = suffix ? ngx_strlen(suffix) : 0;

    lock->path.data = ngx_pnalloc(snap->pool, path->len + len + 1);
    if (lock->path.data == NULL) {
        return NGX_ERROR;
    }

    lock->path.len = ngx_sprintf(lock->path.data, "%V%s", path,
                                 suffix ? suffix : "")
                     - lock->path.data;
    lock->path.data[lock->path.len] = '\0';

    lock->base = path->len;
    lock->type = type;
    lock->leases = leases;
    lock->rw = rw;
    lock->live = live;

    return NGX_OK;
}


static ngx_uint_t
ngx_http_zk_lock_view_known(ngx_http_zk_lock_view_snap_t *snap, u_char *path)
{
    ngx_uint_t                     i;
    ngx_http_zk_lock_view_lock_t  *lock;

    lock = snap->locks.elts;

    for (i = 0; i < snap->locks.nelts; i++) {
        if (ngx_strcmp(lock[i].path.data, path) == 0) {
            return 1;
        }
    }

    return 0;
}


static void
ngx_http_zk_lock_view_listed(int rc, const struct String_vector *strings,
    const void *data)
{
    ngx_http_zk_lock_view_lock_t *lock = (ngx_http_zk_lock_view_lock_t *) data;

    int                             erc;
    u_char                         *p;
    ngx_uint_t                      i, n;
    ngx_zk_lock_child_t            *sorted;
    ngx_zk_lock_session_t          *s;
    ngx_http_zk_lock_view_snap_t   *snap;
    ngx_http_zk_lock_view_child_t  *child;
    u_char                          buf[NGX_ZK_LOCK_BUF_LEN + 16];

    snap = lock->snap;
    s = ngx_http_zk_lock_view.lmcf->session;

    snap->pending--;

    if (s->exiting) {
        return;
    }

    lock->rc = rc;

    if (rc == ZNONODE || (rc == ZOK && (strings == NULL || !strings->count)))
    {
        /* nobody there */
        lock->rc = ZOK;
        goto done;
    }

    if (rc != ZOK) {
        snap->failed = 1;
        goto done;
    }

    n = strings->count;

    sorted = ngx_alloc(n * sizeof(ngx_zk_lock_child_t), &s->log);
    if (sorted == NULL) {
        snap->failed = 1;
        goto done;
    }

    /* in the order of the queue, as Curator sorts: others last */

    (void) ngx_zk_lock_listing_sort(sorted, strings->data, n);

    for (i = 0; i < n; i++) {
        if (sorted[i].seq == NGX_ZK_LOCK_SEQ_NONE) {
            break;
        }
    }

    lock->total = i;
    lock->n = ngx_min(i, NGX_HTTP_ZK_LOCK_VIEW_MAX);

    lock->children = ngx_pcalloc(snap->pool,
                            lock->n * sizeof(ngx_http_zk_lock_view_child_t));

    if (lock->n && lock->children == NULL) {
        ngx_free(sorted);
        snap->failed = 1;
        goto done;
    }

    ngx_zk_lock_session_batch(s);

    for (i = 0; i < lock->n; i++) {
        child = &lock->children[i];

        child->lock = lock;
        child->seq = sorted[i].seq;
        child->write = sorted[i].write ? 1 : 0;
        child->writes = sorted[i].writes;

        child->name.data = ngx_pnalloc(snap->pool, sorted[i].len + 1);
        if (child->name.data == NULL) {
            snap->failed = 1;
            continue;
        }

        child->name.len = sorted[i].len;
        ngx_memcpy(child->name.data, sorted[i].name, sorted[i].len);
        child->name.data[child->name.len] = '\0';

        p = ngx_snprintf(buf, sizeof(buf) - 1, "%V/%V", &lock->path,
                         &child->name);
        *p = '\0';

        erc = zoo_aget(s->zh, (char *) buf, 0, ngx_http_zk_lock_view_data,
                       child);

        if (erc != ZOK) {
            snap->failed = 1;
            continue;
        }

        snap->pending++;
    }

    ngx_free(sorted);

    ngx_http_zk_lock_view_granted(lock, s);

done:

    if (snap->pending == 0) {
        ngx_http_zk_lock_view_answered(snap);
    }
}


/*
 * fair=: the board beside the lock, "<path>.fair", a node per instance
 * whose data is its claim (see ngx_zk_lock_board.c): listed and read
 * with the lock, its claims shown with the lock and on each node
 */

static ngx_int_t
ngx_http_zk_lock_view_board(ngx_zk_lock_session_t *s,
    ngx_http_zk_lock_view_lock_t *lock)
{
    int      rc;
    u_char  *p, buf[NGX_ZK_LOCK_BUF_LEN + 16];

    if (lock->path.len + sizeof(NGX_HTTP_ZK_LOCK_VIEW_BOARD) > sizeof(buf)) {
        return NGX_ERROR;
    }

    p = ngx_cpymem(buf, lock->path.data, lock->path.len);
    ngx_memcpy(p, NGX_HTTP_ZK_LOCK_VIEW_BOARD,
               sizeof(NGX_HTTP_ZK_LOCK_VIEW_BOARD));

    rc = zoo_aget_children(s->zh, (char *) buf, 0,
                           ngx_http_zk_lock_view_board_listed, lock);

    if (rc != ZOK) {
        ngx_log_error(NGX_LOG_ERR, &s->log, 0,
                      "zoo_aget_children(\"%s\") failed (%d: %s)",
                      buf, rc, zerror(rc));
        return NGX_ERROR;
    }

    lock->snap->pending++;

    return NGX_OK;
}


static void
ngx_http_zk_lock_view_board_listed(int rc,
    const struct String_vector *strings, const void *data)
{
    ngx_http_zk_lock_view_lock_t *lock = (ngx_http_zk_lock_view_lock_t *) data;

    int                             erc;
    u_char                         *p;
    ngx_uint_t                      i, n;
    ngx_zk_lock_session_t          *s;
    ngx_http_zk_lock_view_snap_t   *snap;
    ngx_http_zk_lock_view_claim_t  *claim;
    u_char                          buf[NGX_ZK_LOCK_BUF_LEN + 64];

    snap = lock->snap;
    s = ngx_http_zk_lock_view.lmcf->session;

    snap->pending--;

    if (s->exiting) {
        return;
    }

    if (rc != ZOK || strings == NULL || strings->count <= 0) {
        /* no board (ZNONODE): nobody claims, not a failure */
        snap->failed |= (rc != ZOK && rc != ZNONODE);
        goto done;
    }

    n = ngx_min((ngx_uint_t) strings->count, NGX_HTTP_ZK_LOCK_VIEW_MAX);

    lock->claims = ngx_pcalloc(snap->pool,
                               n * sizeof(ngx_http_zk_lock_view_claim_t));
    if (lock->claims == NULL) {
        snap->failed = 1;
        goto done;
    }

    ngx_zk_lock_session_batch(s);

    for (i = 0; i < (ngx_uint_t) strings->count && lock->nclaims < n; i++) {

        /* an instance's node is named by its worker's prefix; others not */

        if (ngx_strlen(strings->data[i]) != NGX_ZK_LOCK_OURS_LEN) {
            continue;
        }

        claim = &lock->claims[lock->nclaims++];
        claim->lock = lock;
        claim->claim = -1;
        ngx_memcpy(claim->name, strings->data[i], NGX_ZK_LOCK_OURS_LEN);

        p = ngx_snprintf(buf, sizeof(buf) - 1, "%V%s/%*s", &lock->path,
                         NGX_HTTP_ZK_LOCK_VIEW_BOARD,
                         (size_t) NGX_ZK_LOCK_OURS_LEN, claim->name);
        *p = '\0';

        erc = zoo_aget(s->zh, (char *) buf, 0,
                       ngx_http_zk_lock_view_board_data, claim);

        if (erc != ZOK) {
            snap->failed = 1;
            continue;
        }

        snap->pending++;
    }

done:

    if (snap->pending == 0) {
        ngx_http_zk_lock_view_answered(snap);
    }
}


static void
ngx_http_zk_lock_view_board_data(int rc, const char *value, int value_len,
    const struct Stat *stat, const void *data)
{
    ngx_http_zk_lock_view_claim_t *claim =
                                        (ngx_http_zk_lock_view_claim_t *) data;

    u_char                        *end;
    ngx_http_zk_lock_view_snap_t  *snap;

    snap = claim->lock->snap;

    snap->pending--;

    if (ngx_http_zk_lock_view.lmcf->session->exiting) {
        return;
    }

    if (rc == ZOK && value && value_len > 0) {
        /*
         * a number, and with priority= its classes after a space (not
         * shown); anybody's other data is no claim (-1)
         */
        end = ngx_strlchr((u_char *) value, (u_char *) value + value_len,
                          ' ');
        claim->claim = ngx_atoi((u_char *) value,
                                end ? end - (u_char *) value : value_len);

    } else if (rc != ZOK && rc != ZNONODE) {
        snap->failed = 1;
    }

    if (snap->pending == 0) {
        ngx_http_zk_lock_view_answered(snap);
    }
}


static void
ngx_http_zk_lock_view_data(int rc, const char *value, int value_len,
    const struct Stat *stat, const void *data)
{
    ngx_http_zk_lock_view_child_t *child =
                                        (ngx_http_zk_lock_view_child_t *) data;

    size_t                         len;
    ngx_http_zk_lock_view_snap_t  *snap;

    snap = child->lock->snap;

    snap->pending--;

    if (ngx_http_zk_lock_view.lmcf->session->exiting) {
        return;
    }

    if (rc == ZOK) {
        child->read = 1;

        if (stat) {
            child->ctime = stat->ctime;
        }

        if (value && value_len > 0) {
            /* up to 1 MB, anybody's: the first bytes are enough to show */

            child->size = value_len;
            len = ngx_min((size_t) value_len, NGX_HTTP_ZK_LOCK_VIEW_DATA);

            child->data.data = ngx_pnalloc(snap->pool, len);
            if (child->data.data) {
                ngx_memcpy(child->data.data, value, len);
                child->data.len = len;
            }
        }

    } else if (rc == ZNONODE) {
        /* released between the listing and this read */
        child->gone = 1;

    } else {
        snap->failed = 1;
    }

    if (snap->pending == 0) {
        ngx_http_zk_lock_view_answered(snap);
    }
}


/*
 * The nodes of this worker that hold there: when the recipe granted each
 * (ZooKeeper keeps no such time).  A weighted participant's other nodes
 * were granted with it.
 */

static void
ngx_http_zk_lock_view_granted(ngx_http_zk_lock_view_lock_t *lock,
    ngx_zk_lock_session_t *s)
{
    u_char                         *name;
    ngx_uint_t                      i, j;
    ngx_queue_t                    *q;
    ngx_zk_lock_t                  *zl;
    ngx_zk_lock_node_t             *node;
    ngx_http_zk_lock_view_child_t  *child;

    zl = ngx_zk_lock_path_find(s, lock->path.data, lock->path.len);
    if (zl == NULL) {
        return;
    }

    for (q = ngx_queue_head(&zl->nodes);
         q != ngx_queue_sentinel(&zl->nodes);
         q = ngx_queue_next(q))
    {
        node = ngx_queue_data(q, ngx_zk_lock_node_t, queue);

        if (node->state != NGX_ZK_LOCK_HELD || node->granted == 0) {
            continue;
        }

        for (i = 0; i < lock->n; i++) {
            child = &lock->children[i];

            if (child->name.data == NULL) {
                continue;
            }

            for (j = 0; j <= node->npassengers; j++) {
                name = (j == 0) ? node->name : node->passengers[j - 1].name;

                if (ngx_strcmp(child->name.data, name) == 0) {
                    child->granted = node->granted;
                }
            }
        }
    }
}


/*
 * The read is over: a complete one replaces the snapshot; one that lost
 * answers (the connection went) is dropped, and the last stays.  Either
 * way the requests that waited are answered, each from its own event.
 */

static void
ngx_http_zk_lock_view_answered(ngx_http_zk_lock_view_snap_t *snap)
{
    ngx_uint_t                    failed;
    ngx_queue_t                  *q;
    ngx_http_zk_lock_view_t      *view;
    ngx_http_zk_lock_view_ctx_t  *ctx;

    view = &ngx_http_zk_lock_view;
    view->next = NULL;

    /* a failed snapshot is freed at once: what the waiters need, first */

    failed = snap->failed;

    if (failed) {
        ngx_destroy_pool(snap->pool);

    } else {
        ngx_http_zk_lock_view_ages(snap, view->current);

        if (view->current) {
            ngx_destroy_pool(view->current->pool);
        }

        view->current = snap;
        view->done = ngx_current_msec;
        view->reads++;
    }

    while (!ngx_queue_empty(&view->waiters)) {
        q = ngx_queue_head(&view->waiters);
        ngx_queue_remove(q);

        ctx = ngx_queue_data(q, ngx_http_zk_lock_view_ctx_t, queue);
        ctx->queued = 0;
        ctx->stale = failed;

        if (ctx->event.timer_set) {
            ngx_del_timer(&ctx->event);
        }

        ngx_post_event(&ctx->event, &ngx_posted_events);
    }
}


/*
 * Since when each node of a complete snapshot holds, or waits.  A waiter
 * waits since its node was made.  A holder of this worker holds since
 * its recipe's grant.  Of another holder (another worker's, another
 * nginx's, a Curator client's) ZooKeeper tells only when its node was
 * made: it holds since then at the earliest, or since the last snapshot
 * of this worker that saw it wait, a bound kept from one snapshot to the
 * next as a grant is.
 */

static void
ngx_http_zk_lock_view_ages(ngx_http_zk_lock_view_snap_t *snap,
    ngx_http_zk_lock_view_snap_t *prev)
{
    ngx_uint_t                      i, j;
    ngx_time_t                     *tp;
    ngx_http_zk_lock_view_lock_t   *lock, *old, *was;
    ngx_http_zk_lock_view_child_t  *child;

    tp = ngx_timeofday();
    snap->msec = (int64_t) tp->sec * 1000 + tp->msec;

    lock = snap->locks.elts;
    old = prev ? prev->locks.elts : NULL;

    for (i = 0; i < snap->locks.nelts; i++) {

        was = NULL;

        for (j = 0; old && j < prev->locks.nelts; j++) {
            if (ngx_strcmp(old[j].path.data, lock[i].path.data) == 0) {
                was = &old[j];
                break;
            }
        }

        for (j = 0; j < lock[i].n; j++) {
            child = &lock[i].children[j];
            child->holds = ngx_http_zk_lock_view_holds(&lock[i], j);

            ngx_http_zk_lock_view_aged(child, was, prev ? prev->msec : 0);
        }
    }
}


static void
ngx_http_zk_lock_view_aged(ngx_http_zk_lock_view_child_t *child,
    ngx_http_zk_lock_view_lock_t *was, int64_t then)
{
    ngx_uint_t                      i;
    ngx_http_zk_lock_view_child_t  *old;

    child->since = child->ctime;

    if (!child->holds) {
        return;
    }

    if (child->granted) {
        child->since = child->granted;
        child->exact = 1;
        return;
    }

    for (i = 0; was && child->name.data && i < was->n; i++) {
        old = &was->children[i];

        if (old->seq != child->seq || old->name.data == NULL
            || ngx_strcmp(old->name.data, child->name.data) != 0)
        {
            continue;
        }

        if (old->holds && old->since) {
            child->since = old->since;
            child->exact = old->exact;

        } else if (!old->holds && child->since && then > child->since) {
            /* it waited then */
            child->since = then;
        }

        return;
    }
}


/*
 * Curator's rules: a writer holds when first, a reader when no writer is
 * ahead; a lease among the first "leases" nodes
 */

static ngx_uint_t
ngx_http_zk_lock_view_holds(ngx_http_zk_lock_view_lock_t *lock, ngx_uint_t i)
{
    ngx_http_zk_lock_view_child_t  *child;

    child = &lock->children[i];

    if (lock->rw) {
        return child->write ? (i == 0) : (child->writes == 0);
    }

    return (i < lock->leases);
}


static void
ngx_http_zk_lock_view_wake(ngx_event_t *ev)
{
    ngx_http_zk_lock_view_ctx_t *ctx = ev->data;

    ngx_connection_t    *c;
    ngx_http_request_t  *r;

    r = ctx->request;
    c = r->connection;

    if (ctx->queued) {
        /* the timer: the read took too long, the last snapshot is served */
        ngx_queue_remove(&ctx->queue);
        ctx->queued = 0;
        ctx->stale = 1;
    }

    ngx_http_set_log_request(c->log, r);

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, c->log, 0,
                   "zk lock view: answered, stale:%ui",
                   (ngx_uint_t) ctx->stale);

    ngx_http_finalize_request(r, ngx_http_zk_lock_view_send(r, ctx->stale));
    ngx_http_run_posted_requests(c);
}


static void
ngx_http_zk_lock_view_cleanup(void *data)
{
    ngx_http_zk_lock_view_ctx_t *ctx = data;

    if (ctx->queued) {
        ngx_queue_remove(&ctx->queue);
        ctx->queued = 0;
    }

    if (ctx->event.timer_set) {
        ngx_del_timer(&ctx->event);
    }

    if (ctx->event.posted) {
        ngx_delete_posted_event(&ctx->event);
    }
}


/* the worker exits, its session is closed: no answer is to come */

void
ngx_http_zk_lock_view_exit(void)
{
    ngx_http_zk_lock_view_t  *view;

    view = &ngx_http_zk_lock_view;

    if (view->next && view->next->pending == 0) {
        ngx_destroy_pool(view->next->pool);
        view->next = NULL;
    }

    if (view->current) {
        ngx_destroy_pool(view->current->pool);
        view->current = NULL;
    }
}


static ngx_int_t
ngx_http_zk_lock_view_send(ngx_http_request_t *r, ngx_uint_t stale)
{
    ngx_str_t                       type;
    ngx_http_zk_lock_view_writer_t  w;

    ngx_memzero(&w, sizeof(ngx_http_zk_lock_view_writer_t));

    w.pool = r->pool;
    w.log = r->connection->log;
    w.last = &w.out;

    ngx_http_zk_lock_view_json(&w, ngx_http_zk_lock_view.current, stale);

    if (w.failed) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_str_set(&type, "application/json");

    return ngx_http_zk_lock_view_out(r, w.out, &type);
}


static ngx_int_t
ngx_http_zk_lock_view_send_html(ngx_http_request_t *r)
{
    ngx_buf_t    *b;
    ngx_str_t     type;
    ngx_chain_t   out;

    b = ngx_calloc_buf(r->pool);
    if (b == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    b->pos = ngx_http_zk_lock_view_page.data;
    b->last = b->pos + ngx_http_zk_lock_view_page.len;
    b->memory = 1;

    out.buf = b;
    out.next = NULL;

    ngx_str_set(&type, "text/html; charset=utf-8");

    return ngx_http_zk_lock_view_out(r, &out, &type);
}


/* the whole answer, in memory */

static ngx_int_t
ngx_http_zk_lock_view_out(ngx_http_request_t *r, ngx_chain_t *out,
    ngx_str_t *type)
{
    off_t         len;
    ngx_int_t     rc;
    ngx_chain_t  *cl;

    len = 0;

    for (cl = out; cl; cl = cl->next) {
        len += cl->buf->last - cl->buf->pos;

        if (cl->next == NULL) {
            cl->buf->last_buf = (r == r->main) ? 1 : 0;
            cl->buf->last_in_chain = 1;
        }
    }

    r->headers_out.content_type = *type;
    r->headers_out.content_type_len = type->len;
    r->headers_out.status = NGX_HTTP_OK;
    r->headers_out.content_length_n = len;

    rc = ngx_http_send_header(r);

    if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) {
        return rc;
    }

    return ngx_http_output_filter(r, out);
}


static void
ngx_http_zk_lock_view_json(ngx_http_zk_lock_view_writer_t *w,
    ngx_http_zk_lock_view_snap_t *snap, ngx_uint_t stale)
{
    ngx_uint_t                     i, n;
    ngx_http_zk_lock_view_lock_t  *lock;
    ngx_zk_lock_session_t         *s;

    s = ngx_http_zk_lock_view.lmcf ? ngx_http_zk_lock_view.lmcf->session
                                   : NULL;

    ngx_http_zk_lock_view_printf(w, "{\"version\":\"" NGX_ZK_LOCK_VERSION
                                 "\",\"build\":\"" NGX_ZK_LOCK_BUILD
                                 "\",\"hostname\":\"");
    ngx_http_zk_lock_view_text(w, ngx_cycle->hostname.data,
                               ngx_cycle->hostname.len, 0);

    ngx_http_zk_lock_view_printf(w, "\",\"pid\":%P,\"session\":\"%s\","
                                 "\"stale\":%s,\"max_children\":%d,",
                                 ngx_pid, ngx_http_zk_lock_view_state(s),
                                 (stale || snap == NULL) ? "true" : "false",
                                 NGX_HTTP_ZK_LOCK_VIEW_MAX);

    if (snap == NULL) {
        ngx_http_zk_lock_view_printf(w, "\"reads\":0,\"read_at\":null,"
                                     "\"read_at_ms\":null,"
                                     "\"age_ms\":null,\"locks\":[]}\n");
        return;
    }

    ngx_http_zk_lock_view_printf(w, "\"reads\":%ui,\"read_at\":%T,"
                                 "\"read_at_ms\":%L,"
                                 "\"age_ms\":%M,\"locks\":[",
                                 ngx_http_zk_lock_view.reads, snap->time,
                                 snap->msec,
                                 (ngx_msec_t) (ngx_current_msec
                                               - ngx_http_zk_lock_view.done));

    lock = snap->locks.elts;
    n = 0;

    for (i = 0; i < snap->locks.nelts; i++) {
        if (lock[i].dry) {
            /* shown with its lock */
            continue;
        }

        if (n++) {
            ngx_http_zk_lock_view_printf(w, ",");
        }

        ngx_http_zk_lock_view_lock_json(w, &lock[i]);
    }

    ngx_http_zk_lock_view_printf(w, "]}\n");
}


static void
ngx_http_zk_lock_view_lock_json(ngx_http_zk_lock_view_writer_t *w,
    ngx_http_zk_lock_view_lock_t *lock)
{
    ngx_http_zk_lock_view_lock_t  *shadow;

    ngx_http_zk_lock_view_printf(w, "{\"path\":\"");
    ngx_http_zk_lock_view_text(w, lock->path.data, lock->path.len, 0);
    ngx_http_zk_lock_view_printf(w, "\",\"type\":\"%s\",", lock->type);

    if (lock->rw) {
        ngx_http_zk_lock_view_printf(w, "\"leases\":null,");

    } else {
        ngx_http_zk_lock_view_printf(w, "\"leases\":%ui,", lock->leases);
    }

    ngx_http_zk_lock_view_printf(w, "\"source\":\"%s\",",
                                 lock->live ? "live" : "configured");

    ngx_http_zk_lock_view_nodes_json(w, lock);
    ngx_http_zk_lock_view_board_json(w, lock);

    /* the requests in dry run, on the shadow path, under their lock */

    if (lock->shadow == 0) {
        ngx_http_zk_lock_view_printf(w, ",\"dry_run\":null}");
        return;
    }

    shadow = (ngx_http_zk_lock_view_lock_t *) lock->snap->locks.elts
             + lock->shadow - 1;

    ngx_http_zk_lock_view_printf(w, ",\"dry_run\":{\"path\":\"");
    ngx_http_zk_lock_view_text(w, shadow->path.data, shadow->path.len, 0);
    ngx_http_zk_lock_view_printf(w, "\",");
    ngx_http_zk_lock_view_nodes_json(w, shadow);
    ngx_http_zk_lock_view_printf(w, "}}");
}


/*
 * The nodes of a path, in the order of the queue, with their ages as of
 * the snapshot: how long each has held, or waited
 */

static void
ngx_http_zk_lock_view_nodes_json(ngx_http_zk_lock_view_writer_t *w,
    ngx_http_zk_lock_view_lock_t *lock)
{
    int64_t                         age;
    ngx_uint_t                      i, holders, waiting;
    ngx_http_zk_lock_view_child_t  *child;

    ngx_http_zk_lock_view_printf(w, "\"error\":");

    if (lock->rc != ZOK) {
        ngx_http_zk_lock_view_printf(w, "\"%s\",", zerror(lock->rc));

    } else {
        ngx_http_zk_lock_view_printf(w, "null,");
    }

    ngx_http_zk_lock_view_printf(w, "\"participants\":%ui,\"shown\":%ui,"
                                 "\"truncated\":%s,\"nodes\":[",
                                 lock->total, lock->n,
                                 (lock->n < lock->total) ? "true" : "false");

    holders = 0;
    waiting = 0;

    for (i = 0; i < lock->n; i++) {
        child = &lock->children[i];

        if (child->holds) {
            holders++;

        } else {
            waiting++;
        }

        ngx_http_zk_lock_view_printf(w, "%s{\"position\":%ui,"
                                     "\"state\":\"%s\",\"queue\":%ui,",
                                     i ? "," : "", i + 1,
                                     child->holds ? "holding" : "waiting",
                                     child->holds ? 0 : waiting);

        /* clocks apart (ZooKeeper's, this host's): never below 0 */

        age = lock->snap->msec - child->since;

        if (child->since == 0) {
            ngx_http_zk_lock_view_printf(w, "\"%s_for_ms\":null,",
                                         child->holds ? "held" : "waiting");

        } else {
            ngx_http_zk_lock_view_printf(w, "\"%s_for_ms\":%L,",
                                         child->holds ? "held" : "waiting",
                                         ngx_max(age, 0));
        }

        if (child->holds) {
            ngx_http_zk_lock_view_printf(w, "\"held_for_exact\":%s,",
                                         child->exact ? "true" : "false");
        }

        ngx_http_zk_lock_view_node_json(w, child);
    }

    ngx_http_zk_lock_view_printf(w, "],\"holders\":%ui,\"waiting\":%ui",
                                 holders, waiting);
}


static void
ngx_http_zk_lock_view_node_json(ngx_http_zk_lock_view_writer_t *w,
    ngx_http_zk_lock_view_child_t *child)
{
    ngx_int_t                      claim;
    ngx_uint_t                     cut;
    const char                    *kind;
    ngx_http_zk_lock_view_info_t   info;

    kind = child->write ? "write"
           : ngx_strstr(child->name.data, "__READ__") ? "read"
           : ngx_strstr(child->name.data, "-lease-") ? "lease" : "lock";

    /* fair=: the claim of the node's instance; none for Curator's */

    if (child->lock->fair) {
        claim = ngx_http_zk_lock_view_claim(child);

        if (claim < 0) {
            ngx_http_zk_lock_view_printf(w, "\"claim\":null,");

        } else {
            ngx_http_zk_lock_view_printf(w, "\"claim\":%i.%03i,",
                                         claim / 1000, claim % 1000);
        }
    }

    ngx_http_zk_lock_view_printf(w, "\"node\":\"");
    ngx_http_zk_lock_view_text(w, child->name.data, child->name.len, 0);
    ngx_http_zk_lock_view_printf(w, "\",\"seq\":%uD,\"kind\":\"%s\","
                                 "\"gone\":%s,\"created\":%L,",
                                 child->seq, kind,
                                 child->gone ? "true" : "false",
                                 child->ctime);

    if (!child->read) {
        ngx_http_zk_lock_view_printf(w, "\"client\":null,\"kept\":false}");
        return;
    }

    /* the module writes less than the view keeps: more is not its data */

    cut = (child->size > child->data.len);

    if (cut || ngx_http_zk_lock_view_parse(&child->data, &info) != NGX_OK) {

        /* Curator writes the client's address, or what it was told */

        ngx_http_zk_lock_view_printf(w, "\"client\":\"curator\","
                                     "\"kept\":false,\"data\":\"");
        ngx_http_zk_lock_view_text(w, child->data.data, child->data.len,
                                   cut);
        ngx_http_zk_lock_view_printf(w, "%s\",\"data_bytes\":%uz}",
                                     cut ? "\xe2\x80\xa6" : "", child->size);
        return;
    }

    ngx_http_zk_lock_view_printf(w, "\"client\":\"nginx\",\"kept\":%s,"
                                 "\"host\":\"",
                                 info.kept.len ? "true" : "false");
    ngx_http_zk_lock_view_text(w, info.host.data, info.host.len, 0);
    ngx_http_zk_lock_view_printf(w, "\",\"pid\":%i,\"since\":\"", info.pid);
    ngx_http_zk_lock_view_text(w, info.since.data, info.since.len, 0);

    if (info.kept.len) {
        ngx_http_zk_lock_view_printf(w, "\",\"kept_for\":\"");
        ngx_http_zk_lock_view_text(w, info.kept.data, info.kept.len, 0);
        ngx_http_zk_lock_view_printf(w, "\"}");
        return;
    }

    ngx_http_zk_lock_view_printf(w, "\",\"method\":\"");
    ngx_http_zk_lock_view_text(w, info.method.data, info.method.len, 0);
    ngx_http_zk_lock_view_printf(w, "\",\"uri\":\"");
    ngx_http_zk_lock_view_text(w, info.uri.data, info.uri.len, 0);
    ngx_http_zk_lock_view_printf(w, "\"}");
}


/*
 * fair=: the board's claims, by instance (the prefix of its workers'
 * nodes), in flows
 */

static void
ngx_http_zk_lock_view_board_json(ngx_http_zk_lock_view_writer_t *w,
    ngx_http_zk_lock_view_lock_t *lock)
{
    ngx_uint_t  i;

    if (!lock->fair) {
        return;
    }

    ngx_http_zk_lock_view_printf(w, ",\"fair\":{\"path\":\"");
    ngx_http_zk_lock_view_text(w, lock->path.data, lock->path.len, 0);
    ngx_http_zk_lock_view_printf(w, NGX_HTTP_ZK_LOCK_VIEW_BOARD
                                 "\",\"instances\":[");

    for (i = 0; i < lock->nclaims; i++) {

        /* anybody may make a node there: its name as text, escaped */

        ngx_http_zk_lock_view_printf(w, "%s{\"instance\":\"",
                                     i ? "," : "");
        ngx_http_zk_lock_view_text(w, lock->claims[i].name,
                                   NGX_ZK_LOCK_INSTANCE_LEN, 0);
        ngx_http_zk_lock_view_printf(w, "\",");

        if (lock->claims[i].claim < 0) {
            ngx_http_zk_lock_view_printf(w, "\"claim\":null}");

        } else {
            ngx_http_zk_lock_view_printf(w, "\"claim\":%i.%03i}",
                                         lock->claims[i].claim / 1000,
                                         lock->claims[i].claim % 1000);
        }
    }

    ngx_http_zk_lock_view_printf(w, "]}");
}


/* fair=: the claim of a node's instance, -1 if it has none */

static ngx_int_t
ngx_http_zk_lock_view_claim(ngx_http_zk_lock_view_child_t *child)
{
    ngx_uint_t                     i;
    ngx_http_zk_lock_view_lock_t  *lock;

    lock = child->lock;

    if (child->name.len <= NGX_ZK_LOCK_OURS_LEN
        || ngx_strncmp(child->name.data, "_c_", 3) != 0)
    {
        return -1;
    }

    for (i = 0; i < lock->nclaims; i++) {
        if (ngx_memcmp(lock->claims[i].name, child->name.data,
                       NGX_ZK_LOCK_INSTANCE_LEN)
            == 0)
        {
            return lock->claims[i].claim;
        }
    }

    return -1;
}


/*
 * "<host> pid <pid> since <iso8601> <method> <uri>", or, for a lease a
 * worker keeps, "<host> pid <pid> since <iso8601> kept for <n>ms idle"
 */

static ngx_int_t
ngx_http_zk_lock_view_parse(ngx_str_t *data,
    ngx_http_zk_lock_view_info_t *info)
{
    u_char  *p, *q, *last;

    ngx_memzero(info, sizeof(ngx_http_zk_lock_view_info_t));

    if (data->len == 0) {
        return NGX_DECLINED;
    }

    p = data->data;
    last = p + data->len;

    q = ngx_strlcasestrn(p, last, (u_char *) " pid ", 5 - 1);
    if (q == NULL || q == p) {
        return NGX_DECLINED;
    }

    info->host.data = p;
    info->host.len = q - p;

    p = q + 5;
    q = p;

    while (p < last && *p >= '0' && *p <= '9') {
        p++;
    }

    /* written as a JSON number: "007" is 7, more than ngx_int_t is not */

    info->pid = ngx_atoi(q, p - q);

    if (info->pid == NGX_ERROR
        || last - p < 7 || ngx_strncmp(p, " since ", 7) != 0)
    {
        return NGX_DECLINED;
    }

    p += 7;
    info->since.data = p;

    while (p < last && *p != ' ') {
        p++;
    }

    info->since.len = p - info->since.data;

    if (info->since.len == 0 || p == last) {
        return NGX_DECLINED;
    }

    p++;

    if (last - p > 9 && ngx_strncmp(p, "kept for ", 9) == 0) {
        p += 9;
        q = ngx_strlchr(p, last, ' ');

        info->kept.data = p;
        info->kept.len = (q ? q : last) - p;

        return info->kept.len ? NGX_OK : NGX_DECLINED;
    }

    q = ngx_strlchr(p, last, ' ');
    if (q == NULL || q == p) {
        return NGX_DECLINED;
    }

    info->method.data = p;
    info->method.len = q - p;

    info->uri.data = q + 1;
    info->uri.len = last - (q + 1);

    return NGX_OK;
}


static const char *
ngx_http_zk_lock_view_state(ngx_zk_lock_session_t *s)
{
    if (s == NULL) {
        return "none";
    }

    if (s->brokered) {
        /* zk_sessions: a sibling's session serves this worker */
        return "brokered";
    }

    return ngx_zk_lock_session_usable(s) ? "connected" : "down";
}


/* room for n more bytes: in the buffer being written, or in a new one */

static u_char *
ngx_http_zk_lock_view_room(ngx_http_zk_lock_view_writer_t *w, size_t n)
{
    ngx_buf_t    *b;
    ngx_chain_t  *cl;

    if (w->failed) {
        return NULL;
    }

    if (w->buf && (size_t) (w->buf->end - w->buf->last) >= n) {
        return w->buf->last;
    }

    b = ngx_create_temp_buf(w->pool,
                            ngx_max(n, NGX_HTTP_ZK_LOCK_VIEW_CHUNK));
    if (b == NULL) {
        w->failed = 1;
        return NULL;
    }

    cl = ngx_alloc_chain_link(w->pool);
    if (cl == NULL) {
        w->failed = 1;
        return NULL;
    }

    cl->buf = b;
    cl->next = NULL;

    *w->last = cl;
    w->last = &cl->next;
    w->buf = b;

    return b->last;
}


/*
 * Fixed text with numbers and the module's own names, never data: a line
 * is short, and one that would not fit is a bug, not a shorter answer
 */

static void
ngx_http_zk_lock_view_printf(ngx_http_zk_lock_view_writer_t *w,
    const char *fmt, ...)
{
    u_char   *p, *last;
    va_list   args;

    p = ngx_http_zk_lock_view_room(w, NGX_HTTP_ZK_LOCK_VIEW_LINE);
    if (p == NULL) {
        return;
    }

    last = p + NGX_HTTP_ZK_LOCK_VIEW_LINE;

    va_start(args, fmt);
    p = ngx_vslprintf(p, last, fmt, args);
    va_end(args);

    if (p == last) {
        ngx_log_error(NGX_LOG_ALERT, w->log, 0,
                      "zk lock fleet view: a line does not fit in %d bytes",
                      NGX_HTTP_ZK_LOCK_VIEW_LINE);
        w->failed = 1;
        return;
    }

    w->buf->last = p;
}


/*
 * A JSON string's text from any bytes (a node's data is anybody's), safe
 * in a <script> too: valid UTF-8 as it is; '"' and '\' escaped; control
 * bytes, '<' (no "</script>" nor "<!--") and U+2028, U+2029 (line ends
 * to older JavaScript) as \uXXXX; each invalid sequence as U+FFFD.  With
 * "cut" the text was cut at a byte count: a character cut in half at its
 * end is left out.
 */

static void
ngx_http_zk_lock_view_text(ngx_http_zk_lock_view_writer_t *w, u_char *src,
    size_t len, ngx_uint_t cut)
{
    u_char     *p, *last, *dst;
    size_t      n;
    ngx_int_t   rc;

    static u_char  hex[] = "0123456789abcdef";

    p = src;
    last = src + len;

    while (p < last) {

        /* a byte, or a character, makes 6 bytes at most */

        dst = ngx_http_zk_lock_view_room(w, 6);
        if (dst == NULL) {
            return;
        }

        if (*p >= 0x80) {
            rc = ngx_http_zk_lock_view_utf8(p, last - p, &n);

            if (rc == NGX_AGAIN && cut) {
                return;
            }

            if (rc != NGX_OK) {
                dst = ngx_cpymem(dst, "\xef\xbf\xbd", 3);

            } else if (n == 3 && p[0] == 0xe2 && p[1] == 0x80
                       && (p[2] == 0xa8 || p[2] == 0xa9))
            {
                dst = ngx_cpymem(dst, p[2] == 0xa8 ? "\\u2028" : "\\u2029",
                                 6);

            } else {
                dst = ngx_cpymem(dst, p, n);
            }

            p += n;

        } else if (*p == '"' || *p == '\\') {
            *dst++ = '\\';
            *dst++ = *p++;

        } else if (*p < 0x20 || *p == 0x7f || *p == '<') {
            *dst++ = '\\';
            *dst++ = 'u';
            *dst++ = '0';
            *dst++ = '0';
            *dst++ = hex[*p >> 4];
            *dst++ = hex[*p & 0xf];
            p++;

        } else {
            *dst++ = *p++;
        }

        w->buf->last = dst;
    }
}


/*
 * The UTF-8 character at p, as RFC 3629 has it: no overlong form, no
 * surrogate, nothing above U+10FFFF (ngx_utf8_decode() takes any byte
 * from 0x80 up as a continuation, and surrogates).  NGX_OK and its
 * length; NGX_DECLINED and the length of the invalid sequence, its
 * "maximal subpart" that browsers and Python replace with one U+FFFD;
 * NGX_AGAIN when the n bytes end within a character.
 */

static ngx_int_t
ngx_http_zk_lock_view_utf8(u_char *p, size_t n, size_t *len)
{
    u_char  lo, hi;
    size_t  i, size;

    if (*p < 0xc2 || *p > 0xf4) {
        *len = 1;
        return (*p < 0x80) ? NGX_OK : NGX_DECLINED;
    }

    size = (*p >= 0xf0) ? 4 : (*p >= 0xe0) ? 3 : 2;

    /* the second byte's range rules out the overlongs, and the rest */

    lo = (*p == 0xe0) ? 0xa0 : (*p == 0xf0) ? 0x90 : 0x80;
    hi = (*p == 0xed) ? 0x9f : (*p == 0xf4) ? 0x8f : 0xbf;

    for (i = 1; i < size; i++) {

        if (i == n) {
            *len = i;
            return NGX_AGAIN;
        }

        if (p[i] < lo || p[i] > hi) {
            *len = i;
            return NGX_DECLINED;
        }

        lo = 0x80;
        hi = 0xbf;
    }

    *len = size;

    return NGX_OK;
}


/*
 * The page: no external assets (nor a favicon for the browser to ask
 * for), it reads the JSON from its own location every 2 seconds and draws
 * one table per lock, its requests in dry run under it.  Its one format
 * of a time is an age, as of the read; anybody's text is drawn as text,
 * its control characters escaped, and cut to fit a column (whole in the
 * cell's title).
 */

static ngx_str_t  ngx_http_zk_lock_view_page = ngx_string(
"<!DOCTYPE html>\n"
"<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
"<link rel=\"icon\" href=\"data:,\">\n"
"<title>zk lock fleet view</title>\n"
"<style>\n"
"body{font:14px/1.4 -apple-system,'Segoe UI',Helvetica,Arial,sans-serif;\n"
"margin:0;background:#f4f5f7;color:#222}\n"
"header{background:#1f2d3d;color:#fff;padding:10px 16px}\n"
"header h1{font-size:18px;margin:0 0 4px}\n"
"header .meta span{margin-right:18px}\n"
".up{color:#7ee787}.down{color:#ff7b72;font-weight:bold}\n"
"main{padding:8px 16px}\n"
"section{background:#fff;border:1px solid #d0d7de;border-radius:6px;\n"
"margin:12px 0;padding:8px 12px}\n"
"section h2{font-size:15px;margin:2px 0 6px;font-family:monospace}\n"
"section h2 small{font-family:sans-serif;font-weight:normal;color:#57606a;\n"
"margin-left:10px}\n"
"table{border-collapse:collapse;width:100%;table-layout:fixed}\n"
"th,td{text-align:left;padding:3px 8px;border-bottom:1px solid #eaeef2;\n"
"white-space:nowrap;overflow:hidden;text-overflow:ellipsis}\n"
"th:nth-child(1){width:3%}th:nth-child(2){width:15%}\n"
"th:nth-child(3){width:10%}th:nth-child(4){width:6%}\n"
"th:nth-child(5){width:16%}th:nth-child(6){width:5%}\n"
"th:nth-child(7){width:15%}th:nth-child(8){width:8%}\n"
"th:nth-child(9){width:22%}\n"
"th{background:#f6f8fa;font-weight:600}\n"
"td.node{font-family:monospace;font-size:12px;color:#57606a}\n"
"tr.hold td{background:#dafbe1}\n"
"tr.hold td.state{color:#116329;font-weight:bold}\n"
"tr.wait td.state{color:#9a6700}\n"
"tr.kept td.state{color:#0550ae}\n"
"tr.dry td{background:#f5f0ff}\n"
"tr.dry td.state{color:#8250df;font-weight:normal}\n"
"section.stale{background:#f6f8fa;border-style:dashed}\n"
"tr.stale td{background:#eaeef2;color:#57606a}\n"
"tr.stale td.state{color:#57606a;font-weight:normal}\n"
"p.stale{color:#cf222e;font-weight:bold}\n"
".note{color:#57606a;font-style:italic}\n"
".err{color:#cf222e}\n"
"</style></head>\n"
"<body><header><h1>zk lock fleet view</h1>\n"
"<div class=\"meta\"><span id=\"who\"></span><span id=\"session\"></span>\n"
"<span id=\"read\"></span></div></header>\n"
"<main id=\"locks\"><p class=\"note\">loading&hellip;</p></main>\n"
"<script>\n"
"(function(){\n"
"var url=location.pathname+'?format=json',n=0,\n"
"CTL=/[\\u0000-\\u001f\\u007f-\\u009f\\u2028\\u2029]/,\n"
"COLS=['#','state','for','client','host','pid','request','arrived','node'];\n"
"function el(t,c,x){var e=document.createElement(t);if(c)e.className=c;\n"
"if(x!==undefined&&x!==null)e.textContent=String(x);return e}\n"
"function td(tr,c,x,t){var e=el('td',c,x);if(t&&t!==x)e.title=t;\n"
"tr.appendChild(e)}\n"
"function pad(x){return (x<10?'0':'')+x}\n"
"/* the one format of a time on the page: an age, as of the read */\n"
"function age(ms){if(typeof ms!=='number'||!isFinite(ms))return '';\n"
"if(ms<0)ms=0;\n"
"var s=Math.floor(ms/1000),m=Math.floor(s/60),h=Math.floor(m/60);\n"
"if(ms<10000)return (ms/1000).toFixed(1)+'s';\n"
"if(s<60)return s+'s';\n"
"if(m<60)return m+'m '+pad(s%60)+'s';\n"
"if(h<24)return h+'h '+pad(m%60)+'m';\n"
"return Math.floor(h/24)+'d '+(h%24)+'h'}\n"
"/* anybody's text: control characters as escapes, k characters at most */\n"
"function esc(c){return CTL.test(c)?\n"
"'\\\\u'+('000'+c.charCodeAt(0).toString(16)).slice(-4):c}\n"
"function cut(s,k){var o='',w=0,i,e,x,\n"
"a=Array.from(s===undefined||s===null?'':String(s));\n"
"for(i=0;i<a.length;i++){e=esc(a[i]);x=e===a[i]?1:e.length;\n"
"if(w+x>k)return o+'\\u2026';o+=e;w+=x}\n"
"return o}\n"
"function full(s){return cut(s,Infinity)}\n"
"/* a Curator name, \"_c_<uuid>-<kind><seq>\": the uuid's first group */\n"
"function name(s){var m=/^(_c_[0-9a-f]{8})-[0-9a-f-]{27}(-.*)$/.exec(s);\n"
"return m?m[1]+'\\u2026'+cut(m[2],32):cut(s,40)}\n"
"function row(d,j,dry){\n"
"var hold=d.state==='holding',q='#'+d.queue,st,f,fw='',who='',req='',\n"
"tr=el('tr',(dry?'dry ':'')+(hold?'hold':'wait')+\n"
"(d.kept?' kept':'')+(j.stale?' stale':''));\n"
"if(dry)st=(hold?'would hold':'would wait')+' (dry run)';\n"
"else if(j.stale)st=(hold?'held':'waited '+q)+' (stale)';\n"
"else st=hold?'holds':'waits '+q;\n"
"if(d.kept)st+=' (kept)';if(d.gone)st+=' (gone)';\n"
"f=hold?d.held_for_ms:d.waiting_for_ms;\n"
"if(typeof f==='number')fw=(hold?'held ':'waiting ')+\n"
"(hold&&!d.held_for_exact?'\\u2264 ':'')+age(f);\n"
"if(d.client==='nginx'){who=d.host;\n"
"req=d.kept?'kept for '+d.kept_for+' idle':d.method+' '+d.uri}\n"
"else if(d.client==='curator')who=d.data;\n"
"td(tr,'pos',d.position);td(tr,'state',st);td(tr,'for',fw);\n"
"td(tr,'client',(d.client||'?')+(typeof d.claim==='number'?\n"
"' \\u00b7 claim '+d.claim.toFixed(1):''));\n"
"td(tr,'host',cut(who,40),full(who)+\n"
"(typeof d.data_bytes==='number'?' ('+d.data_bytes+' bytes)':''));\n"
"td(tr,'pid',d.pid||'');td(tr,'req',cut(req,60),full(req));\n"
"/* when its node was made: ZooKeeper's clock, nginx's and Curator's alike */\n"
"td(tr,'arrived',d.created?age(j.read_at_ms-d.created)+' ago':'');\n"
"td(tr,'node',name(d.node),full(d.node));\n"
"return tr}\n"
"function draw(j){\n"
"document.getElementById('who').textContent=\n"
"'nginx '+j.hostname+' pid '+j.pid+' \\u00b7 module '+j.version+\n"
"' (build '+j.build+')';\n"
"var s=document.getElementById('session');\n"
"s.textContent='session: '+j.session+(j.stale?' (stale)':'');\n"
"s.className=j.session==='connected'&&!j.stale?'up':'down';\n"
"document.getElementById('read').textContent=\n"
"typeof j.age_ms==='number'?'read '+age(j.age_ms)+' ago':'never read';\n"
"var m=document.getElementById('locks');m.textContent='';\n"
"if(!j.locks.length)m.appendChild(el('p','note','no lock to show'));\n"
"j.locks.forEach(function(l){\n"
"var sec=el('section',j.stale?'stale':null),\n"
"dry=l.dry_run?l.dry_run.participants:0;\n"
"sec.setAttribute('data-path',l.path);\n"
"var h=el('h2',null,l.path);h.appendChild(el('small',null,l.type+\n"
"(l.leases!==null?', '+l.leases+' lease'+(l.leases===1?'':'s'):'')+\n"
"' \\u00b7 '+l.holders+' holding, '+l.waiting+' waiting'+\n"
"(dry?' \\u00b7 '+dry+' in dry run':'')+\n"
"(l.fair?' \\u00b7 fair=, '+l.fair.instances.length+' instance'+\n"
"(l.fair.instances.length===1?'':'s')+' claiming':'')+\n"
"(l.source==='live'?' \\u00b7 live in this worker':'')));\n"
"sec.appendChild(h);\n"
"if(j.stale)sec.appendChild(el('p','stale','stale: as read '+\n"
"age(j.age_ms)+' ago, '+(j.session==='connected'?\n"
"'the last read failed or took too long':'with the session '+j.session)+\n"
"': who holds and who waits now is not known'));\n"
"if(l.error)sec.appendChild(el('p','err','error: '+l.error));\n"
"if(l.truncated)sec.appendChild(el('p','note','the first '+l.shown+\n"
"' of '+l.participants+' nodes are shown'));\n"
"var t=el('table'),hr=el('tr');\n"
"COLS.forEach(function(x){hr.appendChild(el('th',null,x))});\n"
"t.appendChild(hr);\n"
"l.nodes.forEach(function(d){t.appendChild(row(d,j,false))});\n"
"if(l.dry_run)l.dry_run.nodes.forEach(function(d){\n"
"t.appendChild(row(d,j,true))});\n"
"if(t.rows.length===1){var e=el('tr'),c=el('td','note','nobody');\n"
"c.colSpan=COLS.length;e.appendChild(c);t.appendChild(e)}\n"
"sec.appendChild(t);m.appendChild(sec)});\n"
"document.body.setAttribute('data-draws',String(++n))}\n"
"function tick(){fetch(url,{cache:'no-store'}).then(function(r){\n"
"return r.json()}).then(draw).catch(function(e){\n"
"var s=document.getElementById('session');\n"
"s.textContent='view unreachable: '+e;s.className='down'})\n"
".then(function(){setTimeout(tick,2000)})}\n"
"tick()})();\n"
"</script></body></html>\n");
