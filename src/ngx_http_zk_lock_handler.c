
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_zk_lock_handler.h"
#include "ngx_zk_lock_get.h"
#include "ngx_http_zk_lock_eval.h"
#include "ngx_http_zk_lock_metrics.h"


/*
 * A client request at the locks of a location.  The waits are the
 * core's (ngx_zk_lock_gate.c), one gate for each location that takes
 * locks (a pass); the layer keeps what HTTP needs:
 *
 *   a location's locks, evaluated: those its passes hold are re-entries
 *     none left --> the phases go on
 *     zk_lock_dry_run --> shadow nodes tried, the phases go on
 *     a weight above the leases --> zk_lock_status at once
 *     the pass's gate started:
 *       held at once, or let through --> the phases go on
 *       refused at once --> zk_lock_status (with Retry-After), no node
 *       waiting --> the request suspended; the client request's other
 *                   requests that come meanwhile are blocked behind it
 *   the gate's handler: the request, and those blocked, run their phases
 *     again: on, or the status (those blocked get it too, no wait)
 *   a held lock lost under "zk_lock_lost abort" --> cut off as a client
 *     abort cuts it off
 *   the main request's pool goes, however it ended --> every pass's nodes
 */


static ngx_int_t ngx_http_zk_lock_handler_again(ngx_http_request_t *r,
    ngx_http_zk_lock_ctx_t *ctx);
static ngx_int_t ngx_http_zk_lock_handler_want(ngx_http_request_t *r,
    ngx_http_zk_lock_ctx_t *ctx, ngx_zk_lock_gate_hold_t **holds,
    ngx_uint_t *n);
static ngx_int_t ngx_http_zk_lock_handler_kept(ngx_http_request_t *r,
    ngx_zk_lock_gate_hold_t *want, ngx_uint_t n);
static ngx_http_zk_lock_ctx_t *ngx_http_zk_lock_handler_get_ctx(
    ngx_http_request_t *r);
static ngx_http_zk_lock_ctx_t *ngx_http_zk_lock_handler_create_ctx(
    ngx_http_request_t *r);
static ngx_int_t ngx_http_zk_lock_handler_holding(ngx_http_zk_lock_ctx_t *ctx,
    ngx_http_request_t *r, ngx_zk_lock_gate_hold_t *want);
static ngx_int_t ngx_http_zk_lock_handler_reenter(ngx_http_request_t *r,
    ngx_zk_lock_gate_hold_t *have, ngx_zk_lock_gate_hold_t *want);
static ngx_uint_t ngx_http_zk_lock_handler_same(ngx_zk_lock_gate_hold_t *a,
    ngx_zk_lock_gate_hold_t *b);
static ngx_http_zk_lock_pass_t *ngx_http_zk_lock_handler_pass(
    ngx_http_request_t *r, ngx_http_zk_lock_ctx_t *ctx,
    ngx_zk_lock_gate_hold_t *holds, ngx_uint_t n);
static ngx_int_t ngx_http_zk_lock_handler_start(ngx_http_request_t *r,
    ngx_http_zk_lock_ctx_t *ctx, ngx_http_zk_lock_pass_t *pass);
static void ngx_http_zk_lock_handler_remove(ngx_http_zk_lock_ctx_t *ctx,
    ngx_http_zk_lock_pass_t *pass);
static void ngx_http_zk_lock_handler_dry(ngx_http_zk_lock_pass_t *pass);
static void ngx_http_zk_lock_handler_dry_told(ngx_zk_lock_node_t *node);
static ngx_int_t ngx_http_zk_lock_handler_refused(ngx_http_request_t *r,
    ngx_http_zk_lock_ctx_t *ctx);
static ngx_int_t ngx_http_zk_lock_handler_block(ngx_http_request_t *r,
    ngx_http_zk_lock_ctx_t *ctx);
static void ngx_http_zk_lock_handler_suspend(ngx_http_request_t *r);
static void ngx_http_zk_lock_handler_test_writing(ngx_http_request_t *r);
static ngx_int_t ngx_http_zk_lock_handler_client_gone(ngx_http_request_t *r);
static ngx_int_t ngx_http_zk_lock_handler_overweight(ngx_http_request_t *r,
    ngx_zk_lock_gate_hold_t *want);
static ngx_int_t ngx_http_zk_lock_handler_reject(ngx_http_request_t *r,
    ngx_http_zk_lock_pass_t *pass);
static void ngx_http_zk_lock_handler_end(ngx_zk_lock_gate_t *gate);
static ngx_uint_t ngx_http_zk_lock_handler_lost(ngx_http_zk_lock_ctx_t *ctx);
static void ngx_http_zk_lock_handler_cut(ngx_zk_lock_gate_t *gate);
static void ngx_http_zk_lock_handler_count(ngx_zk_lock_gate_t *gate,
    ngx_zk_lock_gate_hold_t *hold, ngx_zk_lock_gate_result_e event,
    ngx_msec_t waited);
static void ngx_http_zk_lock_handler_resume(ngx_http_zk_lock_ctx_t *ctx);
static void ngx_http_zk_lock_handler_cleanup(void *data);


/* what the metrics count of the gate's events: none, the gate's "gone" */

static ngx_http_zk_lock_event_e  ngx_http_zk_lock_handler_events[] = {
    NGX_HTTP_ZK_LOCK_EV_NONE,
    NGX_HTTP_ZK_LOCK_EV_ACQUIRED,
    NGX_HTTP_ZK_LOCK_EV_TIMEOUT,
    NGX_HTTP_ZK_LOCK_EV_ERROR,
    NGX_HTTP_ZK_LOCK_EV_BYPASSED,
    NGX_HTTP_ZK_LOCK_EV_REJECTED,
    NGX_HTTP_ZK_LOCK_EV_LOST,
    NGX_HTTP_ZK_LOCK_EV_REVOKED,
    NGX_HTTP_ZK_LOCK_EV_NONE,
    NGX_HTTP_ZK_LOCK_EV_LOCAL,
    NGX_HTTP_ZK_LOCK_EV_JEOPARDY,
    NGX_HTTP_ZK_LOCK_EV_UNREACHABLE,
    NGX_HTTP_ZK_LOCK_EV_WAIT,
    NGX_HTTP_ZK_LOCK_EV_UNWAIT,
    NGX_HTTP_ZK_LOCK_EV_REUSED,
    NGX_HTTP_ZK_LOCK_EV_RELEASED
};


ngx_int_t
ngx_http_zk_lock_handler(ngx_http_request_t *r)
{
    ngx_int_t                      rc;
    ngx_uint_t                     i, n;
    ngx_zk_lock_gate_hold_t       *holds;
    ngx_http_zk_lock_ctx_t        *ctx;
    ngx_http_zk_lock_pass_t       *pass;
    ngx_http_zk_lock_loc_conf_t   *llcf;
    ngx_http_zk_lock_main_conf_t  *lmcf;

    llcf = ngx_http_get_module_loc_conf(r, ngx_http_zk_lock_module);

    if (llcf->locks == NULL) {
        return NGX_DECLINED;
    }

    ctx = ngx_http_zk_lock_handler_get_ctx(r);

    if (ctx) {
        rc = ngx_http_zk_lock_handler_again(r, ctx);
        if (rc != NGX_DONE) {
            return rc;
        }
    }

    rc = ngx_http_zk_lock_handler_want(r, ctx, &holds, &n);
    if (rc != NGX_OK) {
        return rc;
    }

    if (n == 0) {
        /* all held already: a subrequest, an internal redirect */
        return NGX_DECLINED;
    }

    lmcf = ngx_http_get_module_main_conf(r, ngx_http_zk_lock_module);

    if (lmcf->session == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (ctx == NULL) {
        ctx = ngx_http_zk_lock_handler_create_ctx(r);
        if (ctx == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }
    }

    pass = ngx_http_zk_lock_handler_pass(r, ctx, holds, n);
    if (pass == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (llcf->dry_run) {
        ngx_http_zk_lock_handler_dry(pass);
        return NGX_DECLINED;
    }

    for (i = 0; i < n; i++) {
        if (ngx_http_zk_lock_handler_overweight(r, &holds[i])) {
            ngx_zk_lock_gate_refuse(&pass->gate, i);
            ngx_http_zk_lock_handler_remove(ctx, pass);
            return llcf->status;
        }
    }

    return ngx_http_zk_lock_handler_start(r, ctx, pass);
}


/*
 * The client request has been here: a wait of one of its requests is
 * on, or has just ended.  NGX_DONE: none, the locks are looked at.
 */

static ngx_int_t
ngx_http_zk_lock_handler_again(ngx_http_request_t *r,
    ngx_http_zk_lock_ctx_t *ctx)
{
    ngx_int_t  rc;

    if (ctx->refused) {
        rc = ngx_http_zk_lock_handler_refused(r, ctx);
        if (rc != NGX_DECLINED) {
            return rc;
        }
    }

    if (ctx->waiting) {

        if (ctx->request == r) {
            return NGX_AGAIN;
        }

        return ngx_http_zk_lock_handler_block(r, ctx);
    }

    if (ngx_http_zk_lock_handler_client_gone(r)) {
        return NGX_HTTP_CLIENT_CLOSED_REQUEST;
    }

    if (ctx->status && ctx->request == r) {
        rc = ctx->status;
        ctx->status = 0;
        return rc;
    }

    return NGX_DONE;
}


/*
 * The location's locks, in one global order whatever the order of the
 * directives (two locations that take the same locks cannot wait for
 * each other), less those the client request holds
 */

static ngx_int_t
ngx_http_zk_lock_handler_want(ngx_http_request_t *r,
    ngx_http_zk_lock_ctx_t *ctx, ngx_zk_lock_gate_hold_t **holds,
    ngx_uint_t *n)
{
    ngx_int_t                      rc;
    ngx_uint_t                     i, k;
    ngx_zk_lock_gate_hold_t       *want;
    ngx_http_zk_lock_spec_t       *spec;
    ngx_http_zk_lock_metric_t     *metric;
    ngx_http_zk_lock_loc_conf_t   *llcf;
    ngx_http_zk_lock_main_conf_t  *lmcf;

    llcf = ngx_http_get_module_loc_conf(r, ngx_http_zk_lock_module);
    lmcf = ngx_http_get_module_main_conf(r, ngx_http_zk_lock_module);

    spec = llcf->locks->elts;
    metric = lmcf->metrics->elts;
    k = llcf->locks->nelts;

    want = ngx_pcalloc(r->main->pool, k * sizeof(ngx_zk_lock_gate_hold_t));
    if (want == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    for (i = 0; i < k; i++) {
        want[i].lock = &spec[i].lock;
        want[i].stat = spec[i].index;
        want[i].local.index = metric[spec[i].index].local;

        rc = ngx_http_zk_lock_eval(r, &spec[i], &want[i]);
        if (rc != NGX_OK) {
            return rc;
        }
    }

    if (k > 1) {
        ngx_sort(want, k, sizeof(ngx_zk_lock_gate_hold_t),
                 ngx_zk_lock_gate_cmp);
    }

    for (i = 0, *n = 0; i < k; i++) {

        rc = ctx ? ngx_http_zk_lock_handler_holding(ctx, r, &want[i])
                 : NGX_DECLINED;

        if (rc == NGX_DECLINED) {
            want[*n] = want[i];
            rc = ngx_http_zk_lock_handler_kept(r, want, *n + 1);
        }

        switch (rc) {

        case NGX_OK:
            /* already taken, or re-entry: a subrequest, a redirect */
            continue;

        case NGX_BUSY:
            ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                          "%s \"%V\" with reentrant=off is already "
                          "held by this request",
                          ngx_zk_lock_gate_directive(&want[i]),
                          &want[i].path);
            return NGX_HTTP_INTERNAL_SERVER_ERROR;

        case NGX_DECLINED:
            (*n)++;
            continue;

        default:
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }
    }

    *holds = want;

    return NGX_OK;
}


/*
 * The last of n wanted is a re-entry of one before it, in the same
 * location: the read lock where the write lock of its path is taken
 */

static ngx_int_t
ngx_http_zk_lock_handler_kept(ngx_http_request_t *r,
    ngx_zk_lock_gate_hold_t *want, ngx_uint_t n)
{
    ngx_uint_t  i;

    for (i = 0; i + 1 < n; i++) {
        if (ngx_http_zk_lock_handler_same(&want[i], &want[n - 1])) {
            return ngx_http_zk_lock_handler_reenter(r, &want[i],
                                                    &want[n - 1]);
        }
    }

    return NGX_DECLINED;
}


/*
 * Internal redirects clear r->ctx; the context is then found again through
 * its pool cleanup, as the realip module does.
 */

ngx_http_zk_lock_ctx_t *
ngx_http_zk_lock_handler_find_ctx(ngx_http_request_t *r, ngx_uint_t *found)
{
    ngx_pool_cleanup_t      *cln;
    ngx_http_zk_lock_ctx_t  *ctx;

    *found = 0;

    ctx = ngx_http_get_module_ctx(r->main, ngx_http_zk_lock_module);

    if (ctx) {
        return ctx;
    }

    for (cln = r->main->pool->cleanup; cln; cln = cln->next) {
        if (cln->handler == ngx_http_zk_lock_handler_cleanup) {
            *found = 1;
            return cln->data;
        }
    }

    return NULL;
}


static ngx_http_zk_lock_ctx_t *
ngx_http_zk_lock_handler_get_ctx(ngx_http_request_t *r)
{
    ngx_uint_t               found;
    ngx_http_zk_lock_ctx_t  *ctx;

    ctx = ngx_http_zk_lock_handler_find_ctx(r, &found);

    if (found) {
        ctx->epoch++;
        ngx_http_set_ctx(r->main, ctx, ngx_http_zk_lock_module);
    }

    return ctx;
}


static ngx_http_zk_lock_ctx_t *
ngx_http_zk_lock_handler_create_ctx(ngx_http_request_t *r)
{
    ngx_pool_cleanup_t      *cln;
    ngx_http_zk_lock_ctx_t  *ctx;

    cln = ngx_pool_cleanup_add(r->main->pool, sizeof(ngx_http_zk_lock_ctx_t));
    if (cln == NULL) {
        return NULL;
    }

    ctx = cln->data;
    ngx_memzero(ctx, sizeof(ngx_http_zk_lock_ctx_t));

    if (ngx_array_init(&ctx->passes, r->main->pool, 2,
                       sizeof(ngx_http_zk_lock_pass_t *))
        != NGX_OK)
    {
        return NULL;
    }

    ctx->main = r->main;

    cln->handler = ngx_http_zk_lock_handler_cleanup;

    ngx_http_set_ctx(r->main, ctx, ngx_http_zk_lock_module);

    return ctx;
}


/*
 * Whether the client request holds the lock already, in one of its
 * passes: NGX_OK, a re-entry; NGX_DECLINED, to be taken; NGX_BUSY, held
 * with reentrant=off by another of its requests (Curator's
 * InterProcessSemaphoreMutex would wait for itself); NGX_ABORT, see
 * reenter()
 */

static ngx_int_t
ngx_http_zk_lock_handler_holding(ngx_http_zk_lock_ctx_t *ctx,
    ngx_http_request_t *r, ngx_zk_lock_gate_hold_t *want)
{
    ngx_int_t                     rc;
    ngx_uint_t                    i, j;
    ngx_zk_lock_gate_t           *gate;
    ngx_zk_lock_gate_hold_t      *hold;
    ngx_http_zk_lock_pass_t     **pass;
    ngx_http_zk_lock_loc_conf_t  *llcf;

    pass = ctx->passes.elts;

    for (i = 0; i < ctx->passes.nelts; i++) {
        gate = &pass[i]->gate;

        for (j = 0; j < gate->nholds; j++) {
            hold = &gate->holds[j];

            if (!ngx_http_zk_lock_handler_same(hold, want)) {
                continue;
            }

            if (pass[i]->dry) {
                /* counted once; a location that enforces it takes it */
                llcf = ngx_http_get_module_loc_conf(r,
                                                    ngx_http_zk_lock_module);
                if (llcf->dry_run) {
                    return NGX_OK;
                }

                continue;
            }

            if ((gate->done && gate->result == NGX_ZK_LOCK_GATE_BYPASSED)
                || hold->local.held)
            {
                /* let through unlocked, or locally: not held back again */
                return NGX_OK;
            }

            if (hold->node == NULL) {
                /* lost with its session: no longer held, taken anew */
                continue;
            }

            rc = ngx_http_zk_lock_handler_reenter(r, hold, want);

            if (rc == NGX_OK && !want->lock->reentrant
                && (pass[i]->request != r || pass[i]->epoch != ctx->epoch))
            {
                return NGX_BUSY;
            }

            return rc;
        }
    }

    return NGX_DECLINED;
}


/*
 * Of two locks on the same nodes (see same()), the second a request takes.
 * Re-entry is by recipe: the same kind of node and number of leases; the
 * owner of a write lock has the read lock on the same path as well.
 * Another recipe on the nodes of a lock the request holds (a mutex where
 * it holds a semaphore, the write lock where it holds the read lock)
 * would wait behind the request's own node until its timeout: NGX_ABORT.
 */

static ngx_int_t
ngx_http_zk_lock_handler_reenter(ngx_http_request_t *r,
    ngx_zk_lock_gate_hold_t *have, ngx_zk_lock_gate_hold_t *want)
{
    ngx_zk_lock_kind_e     a, b;
    ngx_zk_lock_params_t  *h, *w;

    h = have->lock;
    w = want->lock;

    a = ngx_zk_lock_types[h->type].kind;
    b = ngx_zk_lock_types[w->type].kind;

    if ((a == b && h->leases == w->leases
         && h->counter.len == w->counter.len
         && ngx_strncmp(h->counter.data, w->counter.data, h->counter.len)
            == 0)
        || (a == NGX_ZK_LOCK_WRITE && b == NGX_ZK_LOCK_READ))
    {
        return NGX_OK;
    }

    ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                  "%s \"%V\" is another lock on the nodes of %s \"%V\", "
                  "which this request holds",
                  ngx_zk_lock_gate_directive(want), &want->path,
                  ngx_zk_lock_gate_directive(have), &have->path);

    return NGX_ABORT;
}


/*
 * On the same nodes: the same path, and the same protocol (v2's nodes are
 * below the path, apart from v1's: another lock)
 */

static ngx_uint_t
ngx_http_zk_lock_handler_same(ngx_zk_lock_gate_hold_t *a,
    ngx_zk_lock_gate_hold_t *b)
{
    return a->path.len == b->path.len
           && ngx_strncmp(a->path.data, b->path.data, a->path.len) == 0
           && a->lock->v2 == b->lock->v2;
}


/* the locks a location takes together, in a gate of their own */

static ngx_http_zk_lock_pass_t *
ngx_http_zk_lock_handler_pass(ngx_http_request_t *r,
    ngx_http_zk_lock_ctx_t *ctx, ngx_zk_lock_gate_hold_t *holds,
    ngx_uint_t n)
{
    ngx_zk_lock_gate_t            *gate;
    ngx_http_zk_lock_pass_t       *pass, **pp;
    ngx_http_zk_lock_loc_conf_t   *llcf;
    ngx_http_zk_lock_main_conf_t  *lmcf;

    llcf = ngx_http_get_module_loc_conf(r, ngx_http_zk_lock_module);
    lmcf = ngx_http_get_module_main_conf(r, ngx_http_zk_lock_module);

    /* the gate's timer and queue are its own: not in a growing array */

    pass = ngx_pcalloc(r->main->pool, sizeof(ngx_http_zk_lock_pass_t));
    if (pass == NULL) {
        return NULL;
    }

    pass->ctx = ctx;
    pass->conf = llcf;
    pass->request = r;
    pass->epoch = ctx->epoch;

    gate = &pass->gate;

    if (ngx_http_zk_lock_eval_info(r, &gate->info) != NGX_OK) {
        return NULL;
    }

    gate->session = lmcf->session;
    gate->holds = holds;
    gate->nholds = n;
    gate->timeout = llcf->timeout;
    gate->log_level = llcf->log_level;
    gate->max_waiting = lmcf->max_waiting;
    gate->waiters = &lmcf->waiters;
    gate->fail_open = llcf->fail_open;
    gate->fail_local = llcf->fail_local;
    gate->lost_abort = llcf->lost_abort;
    gate->handler = ngx_http_zk_lock_handler_end;
    gate->lost = ngx_http_zk_lock_handler_cut;
    gate->count = ngx_http_zk_lock_handler_count;
    gate->data = pass;
    gate->log = r->connection->log;
    gate->pool = r->main->pool;
    gate->noun = "request";
    gate->cut = "aborting the request";

    pp = ngx_array_push(&ctx->passes);
    if (pp == NULL) {
        return NULL;
    }

    *pp = pass;

    return pass;
}


static ngx_int_t
ngx_http_zk_lock_handler_start(ngx_http_request_t *r,
    ngx_http_zk_lock_ctx_t *ctx, ngx_http_zk_lock_pass_t *pass)
{
    ngx_int_t  rc;

    rc = ngx_zk_lock_gate_start(&pass->gate);

    switch (rc) {

    case NGX_OK:
        ctx->wait_time += pass->gate.wait_time;
        return NGX_DECLINED;

    case NGX_AGAIN:
        ctx->waiting = pass;
        ctx->request = r;
        ctx->status = 0;

        ngx_http_zk_lock_handler_suspend(r);
        return NGX_AGAIN;

    case NGX_DECLINED:
        ngx_http_zk_lock_handler_remove(ctx, pass);
        return ngx_http_zk_lock_handler_reject(r, pass);

    default:
        ngx_http_zk_lock_handler_remove(ctx, pass);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }
}


/* a pass that failed holds nothing: a redirect to it takes it anew */

static void
ngx_http_zk_lock_handler_remove(ngx_http_zk_lock_ctx_t *ctx,
    ngx_http_zk_lock_pass_t *pass)
{
    ngx_uint_t                 i;
    ngx_http_zk_lock_pass_t  **pp;

    ngx_zk_lock_gate_done(&pass->gate);

    pp = ctx->passes.elts;

    for (i = 0; i < ctx->passes.nelts; i++) {
        if (pp[i] == pass) {
            ngx_memmove(&pp[i], &pp[i + 1],
                        (ctx->passes.nelts - i - 1) * sizeof(pass));
            ctx->passes.nelts--;
            return;
        }
    }
}


/*
 * zk_lock_dry_run: the request goes on at once, and a node of its own on
 * a shadow path beside the lock's, "<path>.dry-run" (which Curator
 * clients and the locations that enforce the lock never look at), tries
 * the lock as a try does: one that would hold stays until the request
 * ends, so that the requests in dry run across the fleet count each
 * other; one that would wait goes at once.  What the lock would have done
 * is counted, logged and shown by $zk_lock_status when the listing
 * answers; until then the status is DRY_RUN.
 */

static void
ngx_http_zk_lock_handler_dry(ngx_http_zk_lock_pass_t *pass)
{
    u_char                   *p;
    ngx_str_t                 path;
    ngx_uint_t                i;
    ngx_zk_lock_gate_t       *gate;
    ngx_zk_lock_gate_hold_t  *hold;

    gate = &pass->gate;
    pass->dry = 1;

    for (i = 0; i < gate->nholds; i++) {
        hold = &gate->holds[i];

        pass->ctx->result = NGX_HTTP_ZK_LOCK_EV_DRY_RUN;
        ngx_http_zk_lock_metrics_count(ngx_http_zk_lock_spec(hold),
                                       NGX_HTTP_ZK_LOCK_EV_DRY_RUN, 0);

        if (gate->session->down) {
            /* nothing to try: what the lock would have done is not known */
            continue;
        }

        path.len = hold->path.len + sizeof(".dry-run") - 1;
        path.data = ngx_pnalloc(pass->ctx->main->pool, path.len);
        if (path.data == NULL) {
            continue;
        }

        p = ngx_cpymem(path.data, hold->path.data, hold->path.len);
        ngx_memcpy(p, ".dry-run", sizeof(".dry-run") - 1);

        hold->node = ngx_zk_lock_get(gate->session, hold->lock, &path,
                                     hold->weight, NULL, &gate->info, 1,
                                     ngx_http_zk_lock_handler_dry_told, pass,
                                     gate->log);
    }
}


/* a shadow node is told: the lock would have held, or would have waited */

static void
ngx_http_zk_lock_handler_dry_told(ngx_zk_lock_node_t *node)
{
    ngx_uint_t                leases, ahead;
    ngx_zk_lock_gate_t       *gate;
    ngx_zk_lock_gate_hold_t  *hold;
    ngx_http_zk_lock_pass_t  *pass;

    pass = node->data;
    gate = &pass->gate;
    hold = ngx_zk_lock_gate_find(gate, node);

    if (hold == NULL) {
        return;
    }

    if (node->state == NGX_ZK_LOCK_HELD && node->error == 0) {
        pass->ctx->result = NGX_HTTP_ZK_LOCK_EV_DRY_ACQUIRED;
        ngx_http_zk_lock_metrics_count(ngx_http_zk_lock_spec(hold),
                                       NGX_HTTP_ZK_LOCK_EV_DRY_ACQUIRED, 0);
        return;
    }

    /* would wait; or lost, or failed: nothing more to learn from it */

    if (node->error == NGX_ZK_LOCK_BUSY) {

        /*
         * at the lock's log level, as limit_req_dry_run's lines; how full
         * it was, among the requests in dry run (those that would wait go
         * at once: none waits before another)
         */

        leases = ngx_zk_lock_recipe_needed(node);
        ahead = (node->ahead == NGX_ZK_LOCK_UNKNOWN) ? leases : node->ahead;

        ngx_log_error(pass->conf->log_level, gate->log, 0,
                      "%s \"%V\" would have waited, dry run: %ui of %ui "
                      "lease%s held", ngx_zk_lock_gate_directive(hold),
                      &hold->path, ngx_min(ahead, leases), leases,
                      leases == 1 ? "" : "s");

        pass->ctx->result = NGX_HTTP_ZK_LOCK_EV_DRY_WAITED;
        ngx_http_zk_lock_metrics_count(ngx_http_zk_lock_spec(hold),
                                       NGX_HTTP_ZK_LOCK_EV_DRY_WAITED, 0);
    }

    hold->node = NULL;
    ngx_zk_lock_release(node);
}


/*
 * Another request of the same client request (a parallel subrequest) waits
 * until the pending acquisition ends, then runs its phases again.
 */

static ngx_int_t
ngx_http_zk_lock_handler_block(ngx_http_request_t *r,
    ngx_http_zk_lock_ctx_t *ctx)
{
    ngx_http_request_t  **rp;

    if (ctx->blocked == NULL) {
        ctx->blocked = ngx_array_create(r->main->pool, 2,
                                        sizeof(ngx_http_request_t *));
        if (ctx->blocked == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }
    }

    rp = ngx_array_push(ctx->blocked);
    if (rp == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    *rp = r;

    ngx_http_zk_lock_handler_suspend(r);

    return NGX_AGAIN;
}


/*
 * The wait that blocked it failed: it gets the same answer rather than a
 * wait of its own, or N parallel SSI includes of a taken lock would take
 * N timeouts
 */

static ngx_int_t
ngx_http_zk_lock_handler_refused(ngx_http_request_t *r,
    ngx_http_zk_lock_ctx_t *ctx)
{
    ngx_uint_t            i;
    ngx_http_request_t  **rp;

    rp = ctx->refused->elts;

    for (i = 0; i < ctx->refused->nelts; i++) {
        if (rp[i] == r) {
            rp[i] = rp[--ctx->refused->nelts];
            return ctx->refused_status;
        }
    }

    return NGX_DECLINED;
}


/* as limit_req's delay: notice a client that goes away meanwhile */

static void
ngx_http_zk_lock_handler_suspend(ngx_http_request_t *r)
{
    r->read_event_handler = ngx_http_test_reading;
    r->write_event_handler = ngx_http_zk_lock_handler_test_writing;

    /*
     * An end of stream that came with the request itself has been
     * reported already, and will not be again: a client that sent its
     * request and closed at once would keep its place in the queue
     */

    if (r->connection->read->ready) {
        ngx_post_event(r->connection->read, &ngx_posted_events);
    }
}


/*
 * An HTTP/3 client that cancels a stream with STOP_SENDING only has the
 * stream's write event posted, with an error: ngx_http_test_reading looks
 * at the read event alone, and the request would keep its place in the
 * queue until its timeout
 */

static void
ngx_http_zk_lock_handler_test_writing(ngx_http_request_t *r)
{
    if (!ngx_http_zk_lock_handler_client_gone(r)) {
        return;
    }

    r->connection->error = 1;

    ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                  "client prematurely closed stream while waiting for a lock");

    ngx_http_finalize_request(r, NGX_HTTP_CLIENT_CLOSED_REQUEST);
}


/*
 * Also checked when a request resumes: an event that came while the
 * request was being resumed went to the handlers that run the phases
 */

static ngx_int_t
ngx_http_zk_lock_handler_client_gone(ngx_http_request_t *r)
{
    ngx_connection_t  *c;

    c = r->connection;

    return c->error || c->read->error || c->write->error;
}


/*
 * A weight above the lease count read from ZooKeeper could not hold until
 * the count grows, and its nodes would stand in the queue ahead of
 * everybody else meanwhile: the status at once, no node
 */

static ngx_int_t
ngx_http_zk_lock_handler_overweight(ngx_http_request_t *r,
    ngx_zk_lock_gate_hold_t *want)
{
    ngx_uint_t                     leases;
    ngx_zk_lock_params_t          *lp;
    ngx_zk_lock_counter_t         *c;
    ngx_http_zk_lock_main_conf_t  *lmcf;

    lp = want->lock;

    lmcf = ngx_http_get_module_main_conf(r, ngx_http_zk_lock_module);

    /* a worker without a session reads no count: its broker's queue waits */

    if (want->weight == 1 || lp->counter.len == 0
        || lmcf->session->brokered)
    {
        return 0;
    }

    c = ngx_zk_lock_counter(lmcf->session, &lp->counter);

    leases = (c && c->value) ? c->value : lp->leases;

    if (want->weight <= leases) {
        return 0;
    }

    ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                  "%s \"%V\" rejected: weight %ui is more than the %ui "
                  "leases of \"%V\"", ngx_zk_lock_gate_directive(want),
                  &want->path, want->weight, leases, &lp->counter);

    return 1;
}


/* refused at once: the queue is full, and when to come back */

static ngx_int_t
ngx_http_zk_lock_handler_reject(ngx_http_request_t *r,
    ngx_http_zk_lock_pass_t *pass)
{
    time_t                        sec;
    ngx_msec_t                    timeout;
    ngx_table_elt_t              *h;
    ngx_zk_lock_gate_hold_t      *hold;
    ngx_http_zk_lock_loc_conf_t  *llcf;

    llcf = pass->conf;
    hold = &pass->gate.holds[pass->gate.next];

    if (pass->gate.result != NGX_ZK_LOCK_GATE_REJECTED
        || (llcf->status != NGX_HTTP_TOO_MANY_REQUESTS
            && llcf->status != NGX_HTTP_SERVICE_UNAVAILABLE))
    {
        return llcf->status;
    }

    h = ngx_list_push(&r->headers_out.headers);
    if (h == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    /* a waiter's time: by then the queue has moved */

    timeout = (hold->lock->timeout != NGX_CONF_UNSET_MSEC) ? hold->lock->timeout
                                                           : llcf->timeout;
    sec = timeout / 1000;

    h->value.data = ngx_pnalloc(r->pool, NGX_TIME_T_LEN);
    if (h->value.data == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    h->hash = 1;
#if (nginx_version >= 1023000)
    h->next = NULL;     /* same-name headers are linked since 1.23 */
#endif
    ngx_str_set(&h->key, "Retry-After");
    h->value.len = ngx_sprintf(h->value.data, "%T", ngx_max(sec, 1))
                   - h->value.data;

    return llcf->status;
}


/* the pass's wait is over: its request runs its phases again */

static void
ngx_http_zk_lock_handler_end(ngx_zk_lock_gate_t *gate)
{
    ngx_http_zk_lock_ctx_t   *ctx;
    ngx_http_zk_lock_pass_t  *pass;

    pass = gate->data;
    ctx = pass->ctx;

    ctx->waiting = NULL;
    ctx->wait_time += gate->wait_time;

    if (gate->done) {
        /* a lock of an earlier pass lost meanwhile is taken anew */
        ctx->status = ngx_http_zk_lock_handler_lost(ctx) ? NGX_DONE
                                                         : NGX_DECLINED;

    } else if (gate->result == NGX_ZK_LOCK_GATE_REJECTED) {
        /* a later lock's queue was full (max_waiting=) */
        ctx->status = ngx_http_zk_lock_handler_reject(ctx->request, pass);
        ngx_http_zk_lock_handler_remove(ctx, pass);

    } else {
        ctx->status = (gate->error == NGX_ZK_LOCK_FOREIGN)
                      ? NGX_HTTP_BAD_REQUEST : (ngx_int_t) pass->conf->status;

        ngx_http_zk_lock_handler_remove(ctx, pass);
    }

    ngx_http_zk_lock_handler_resume(ctx);
}


/*
 * A lock that a pass took is gone (zk_lock_lost finish, its node deleted
 * or its session expired) before the request went on: the request runs
 * its phases again, and takes it anew (see holding())
 */

static ngx_uint_t
ngx_http_zk_lock_handler_lost(ngx_http_zk_lock_ctx_t *ctx)
{
    ngx_uint_t                 i, j;
    ngx_zk_lock_gate_t        *gate;
    ngx_zk_lock_gate_hold_t   *hold;
    ngx_http_zk_lock_pass_t  **pass;

    pass = ctx->passes.elts;

    for (i = 0; i < ctx->passes.nelts; i++) {
        gate = &pass[i]->gate;

        if (pass[i]->dry || gate->result == NGX_ZK_LOCK_GATE_BYPASSED) {
            continue;
        }

        for (j = 0; j < gate->nholds; j++) {
            hold = &gate->holds[j];

            if (hold->node == NULL && !hold->local.held) {
                return 1;
            }
        }
    }

    return 0;
}


/*
 * zk_lock_lost abort: the request is cut off the way a client abort cuts
 * it off, by whatever handles the request's events (an upstream
 * finalizes with 499, a write fails); finalizing it from here would free
 * it under the upstream's own cleanup
 */

static void
ngx_http_zk_lock_handler_cut(ngx_zk_lock_gate_t *gate)
{
    ngx_connection_t         *c;
    ngx_http_zk_lock_pass_t  *pass;

    pass = gate->data;
    c = pass->ctx->main->connection;

    c->error = 1;

    if (!c->read->posted) {
        ngx_post_event(c->read, &ngx_posted_events);
    }

    if (!c->write->posted) {
        ngx_post_event(c->write, &ngx_posted_events);
    }
}


/* the metrics, and $zk_lock_status */

static void
ngx_http_zk_lock_handler_count(ngx_zk_lock_gate_t *gate,
    ngx_zk_lock_gate_hold_t *hold, ngx_zk_lock_gate_result_e event,
    ngx_msec_t waited)
{
    ngx_http_zk_lock_event_e  ev;
    ngx_http_zk_lock_pass_t  *pass;

    pass = gate->data;
    ev = ngx_http_zk_lock_handler_events[event];

    if (ev == NGX_HTTP_ZK_LOCK_EV_NONE) {
        return;
    }

    if (event <= NGX_ZK_LOCK_GATE_UNREACHABLE) {
        pass->ctx->result = ev;
    }

    ngx_http_zk_lock_metrics_count(ngx_http_zk_lock_spec(hold), ev, waited);
}


static void
ngx_http_zk_lock_handler_resume(ngx_http_zk_lock_ctx_t *ctx)
{
    ngx_uint_t           i;
    ngx_array_t         *tmp;
    ngx_connection_t    *c;
    ngx_http_request_t  *r, **blocked;

    r = ctx->request;
    c = r->connection;

    r->read_event_handler = ngx_http_block_reading;
    r->write_event_handler = ngx_http_core_run_phases;

    (void) ngx_http_post_request(r, NULL);

    if (ctx->blocked && ctx->blocked->nelts) {
        blocked = ctx->blocked->elts;

        for (i = 0; i < ctx->blocked->nelts; i++) {
            blocked[i]->read_event_handler = ngx_http_block_reading;
            blocked[i]->write_event_handler = ngx_http_core_run_phases;
            (void) ngx_http_post_request(blocked[i], NULL);
        }

        if (ctx->status && ctx->status != NGX_DECLINED) {
            tmp = ctx->refused;
            ctx->refused = ctx->blocked;
            ctx->refused_status = ctx->status;
            ctx->blocked = tmp;
        }

        if (ctx->blocked) {
            ctx->blocked->nelts = 0;
        }
    }

    ngx_http_run_posted_requests(c);
}


/* the client request is over, however it ended: so are its passes */

static void
ngx_http_zk_lock_handler_cleanup(void *data)
{
    ngx_http_zk_lock_ctx_t  *ctx = data;

    ngx_uint_t                 i;
    ngx_http_zk_lock_pass_t  **pass;

    pass = ctx->passes.elts;

    for (i = 0; i < ctx->passes.nelts; i++) {
        ngx_zk_lock_gate_done(&pass[i]->gate);
    }
}
