
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_zk_lock_handler.h"
#include "ngx_zk_lock_recipe.h"
#include "ngx_zk_lock_get.h"
#include "ngx_http_zk_lock_eval.h"
#include "ngx_http_zk_lock_metrics.h"


#define NGX_HTTP_ZK_LOCK_NONE      ((ngx_uint_t) -1)



static ngx_http_zk_lock_ctx_t *ngx_http_zk_lock_handler_get_ctx(
    ngx_http_request_t *r);
static ngx_http_zk_lock_ctx_t *ngx_http_zk_lock_handler_create_ctx(
    ngx_http_request_t *r);
static ngx_int_t ngx_http_zk_lock_handler_holding(ngx_http_zk_lock_ctx_t *ctx,
    ngx_http_request_t *r, ngx_http_zk_lock_hold_t *want);
static ngx_int_t ngx_http_zk_lock_handler_wait(ngx_http_request_t *r,
    ngx_http_zk_lock_ctx_t *ctx, ngx_http_zk_lock_hold_t *want);
static ngx_zk_lock_node_t *ngx_http_zk_lock_handler_step(
    ngx_http_request_t *r, ngx_http_zk_lock_ctx_t *ctx,
    ngx_http_zk_lock_hold_t *hold, ngx_str_t *path, ngx_uint_t try,
    ngx_zk_lock_notify_pt notify);
static ngx_int_t ngx_http_zk_lock_handler_dry(ngx_http_request_t *r,
    ngx_http_zk_lock_ctx_t *ctx, ngx_http_zk_lock_hold_t *want);
static void ngx_http_zk_lock_handler_dry_told(ngx_zk_lock_node_t *node);
static void ngx_http_zk_lock_handler_await(ngx_http_request_t *r,
    ngx_http_zk_lock_ctx_t *ctx, ngx_msec_t timeout);
static ngx_int_t ngx_http_zk_lock_handler_local(ngx_http_request_t *r,
    ngx_http_zk_lock_ctx_t *ctx, ngx_http_zk_lock_hold_t *want,
    ngx_http_zk_lock_hold_t *hold);
static ngx_http_zk_lock_hold_t *ngx_http_zk_lock_handler_push(
    ngx_http_request_t *r, ngx_http_zk_lock_ctx_t *ctx,
    ngx_http_zk_lock_hold_t *want);
static ngx_int_t ngx_http_zk_lock_handler_take_local(
    ngx_http_zk_lock_ctx_t *ctx, ngx_http_zk_lock_hold_t *hold,
    ngx_uint_t n);
static ngx_msec_t ngx_http_zk_lock_handler_unwait(
    ngx_http_zk_lock_ctx_t *ctx);
static void ngx_http_zk_lock_handler_local_granted(
    ngx_zk_lock_local_t *l);
static void ngx_http_zk_lock_handler_local_held(ngx_http_zk_lock_ctx_t *ctx,
    ngx_http_zk_lock_hold_t *hold, ngx_msec_t waited);
static void ngx_http_zk_lock_handler_to_local(ngx_http_zk_lock_ctx_t *ctx,
    ngx_http_zk_lock_hold_t *hold, ngx_msec_t waited);
static void ngx_http_zk_lock_handler_fail_late(ngx_http_zk_lock_ctx_t *ctx,
    ngx_http_zk_lock_hold_t *hold, ngx_msec_t waited, const char *why);
static ngx_int_t ngx_http_zk_lock_handler_refused(ngx_http_request_t *r,
    ngx_http_zk_lock_ctx_t *ctx);
static ngx_int_t ngx_http_zk_lock_handler_block(ngx_http_request_t *r,
    ngx_http_zk_lock_ctx_t *ctx);
static void ngx_http_zk_lock_handler_suspend(ngx_http_request_t *r);
static void ngx_http_zk_lock_handler_test_writing(ngx_http_request_t *r);
static ngx_int_t ngx_http_zk_lock_handler_client_gone(ngx_http_request_t *r);
static ngx_int_t ngx_http_zk_lock_handler_full(ngx_http_request_t *r,
    ngx_http_zk_lock_hold_t *want);
static ngx_int_t ngx_http_zk_lock_handler_overweight(ngx_http_request_t *r,
    ngx_http_zk_lock_hold_t *want);
static ngx_int_t ngx_http_zk_lock_handler_reject(ngx_http_request_t *r,
    ngx_http_zk_lock_ctx_t *ctx, ngx_http_zk_lock_hold_t *want);
static void ngx_http_zk_lock_handler_told(ngx_zk_lock_node_t *node);
static ngx_uint_t ngx_http_zk_lock_handler_lost(ngx_http_zk_lock_ctx_t *ctx,
    ngx_http_zk_lock_hold_t *hold);
static void ngx_http_zk_lock_handler_lost_count(ngx_http_zk_lock_ctx_t *ctx,
    ngx_http_zk_lock_hold_t *hold, ngx_http_zk_lock_event_e gone);
static ngx_msec_t ngx_http_zk_lock_handler_spec_timeout(
    ngx_http_zk_lock_loc_conf_t *llcf, ngx_http_zk_lock_spec_t *spec);
static void ngx_http_zk_lock_handler_timeout_handler(ngx_event_t *ev);
static void ngx_http_zk_lock_handler_done(ngx_http_zk_lock_ctx_t *ctx,
    ngx_int_t rc, int error);
static void ngx_http_zk_lock_handler_rewait(ngx_http_zk_lock_ctx_t *ctx,
    ngx_http_zk_lock_hold_t *hold, ngx_msec_t left);
static void ngx_http_zk_lock_handler_queue(ngx_http_zk_lock_ctx_t *ctx,
    ngx_http_zk_lock_hold_t *hold);
static void ngx_http_zk_lock_handler_session_handler(ngx_event_t *ev);
static void ngx_http_zk_lock_handler_localize(void);
static void ngx_http_zk_lock_handler_bypassed(ngx_http_zk_lock_ctx_t *ctx,
    ngx_http_zk_lock_hold_t *want);
static void ngx_http_zk_lock_handler_give_back(ngx_http_zk_lock_ctx_t *ctx);
static void ngx_http_zk_lock_handler_resume(ngx_http_zk_lock_ctx_t *ctx);
static void ngx_http_zk_lock_handler_cleanup(void *data);
static void ngx_http_zk_lock_handler_drop(ngx_http_zk_lock_hold_t *hold);


/* a lock's place in the local leases (zk_lock_fail local=) */
#define ngx_http_zk_lock_local_index(lmcf, hold)                             \
    (((ngx_http_zk_lock_metric_t *) (lmcf)->metrics->elts)                   \
     [(hold)->spec->index].local)


/* the requests of this worker that wait for a lock: ngx_http_zk_lock_ctx_t */
static ngx_uint_t  ngx_http_zk_lock_nwaiting;
static ngx_queue_t  ngx_http_zk_lock_waiters =
    { &ngx_http_zk_lock_waiters, &ngx_http_zk_lock_waiters };

/* posted when the worker's session is usable again, or gone */
static ngx_event_t  ngx_http_zk_lock_handler_event;


ngx_int_t
ngx_http_zk_lock_handler(ngx_http_request_t *r)
{
    ngx_int_t                     rc;
    ngx_uint_t                    i, n;
    ngx_http_zk_lock_ctx_t       *ctx;
    ngx_http_zk_lock_hold_t      *want;
    ngx_http_zk_lock_spec_t      *spec;
    ngx_http_zk_lock_loc_conf_t  *llcf;

    llcf = ngx_http_get_module_loc_conf(r, ngx_http_zk_lock_module);

    if (llcf->locks == NULL) {
        return NGX_DECLINED;
    }

    ctx = ngx_http_zk_lock_handler_get_ctx(r);

    if (ctx) {
        if (ctx->refused) {
            rc = ngx_http_zk_lock_handler_refused(r, ctx);
            if (rc != NGX_DECLINED) {
                return rc;
            }
        }

        if (ctx->waiting != NGX_HTTP_ZK_LOCK_NONE) {

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
    }

    spec = llcf->locks->elts;
    n = llcf->locks->nelts;

    want = ngx_pcalloc(r->pool, n * sizeof(ngx_http_zk_lock_hold_t));
    if (want == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    for (i = 0; i < n; i++) {
        want[i].spec = &spec[i];

        rc = ngx_http_zk_lock_eval(r, &spec[i], &want[i]);
        if (rc != NGX_OK) {
            return rc;
        }
    }

    /*
     * One global order, whatever the order of the directives: two
     * locations that take the same locks cannot wait for each other
     */

    if (n > 1) {
        ngx_sort(want, n, sizeof(ngx_http_zk_lock_hold_t),
                 ngx_http_zk_lock_eval_cmp);
    }

    for (i = 0; i < n; i++) {

        if (ctx) {
            switch (ngx_http_zk_lock_handler_holding(ctx, r, &want[i])) {

            case NGX_OK:
                /* already taken, or re-entry: a subrequest, a redirect */
                continue;

            case NGX_BUSY:
                ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                              "%s \"%V\" with reentrant=off is already "
                              "held by this request",
                              ngx_http_zk_lock_directive(want[i].spec),
                              &want[i].path);
                return NGX_HTTP_INTERNAL_SERVER_ERROR;

            case NGX_ABORT:
                return NGX_HTTP_INTERNAL_SERVER_ERROR;

            default:
                break;
            }
        }

        if (ctx == NULL) {
            ctx = ngx_http_zk_lock_handler_create_ctx(r);
            if (ctx == NULL) {
                return NGX_HTTP_INTERNAL_SERVER_ERROR;
            }
        }

        if (ctx->pass_conf != llcf) {
            ctx->pass_conf = llcf;
            ctx->pass++;
        }

        /* NGX_DONE: taken at once, locally, and on to the next one */

        rc = ngx_http_zk_lock_handler_wait(r, ctx, &want[i]);
        if (rc != NGX_DONE) {
            return rc;
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

    if (ngx_array_init(&ctx->holds, r->main->pool, 2,
                       sizeof(ngx_http_zk_lock_hold_t))
        != NGX_OK)
    {
        return NULL;
    }

    ctx->waiting = NGX_HTTP_ZK_LOCK_NONE;
    ctx->main = r->main;

    ctx->timer.handler = ngx_http_zk_lock_handler_timeout_handler;
    ctx->timer.data = ctx;

    cln->handler = ngx_http_zk_lock_handler_cleanup;

    ngx_http_set_ctx(r->main, ctx, ngx_http_zk_lock_module);

    return ctx;
}


/*
 * Re-entry is by path and recipe: the same kind of node, protocol and
 * number of leases; the owner of a write lock has the read lock on the same
 * path as well.  A lock taken with reentrant=off cannot be taken again
 * (Curator's InterProcessSemaphoreMutex would wait for itself): NGX_BUSY.
 * Another recipe on the nodes of a lock the request holds (a mutex where
 * it holds a semaphore, the write lock where it holds the read lock) would
 * wait behind the request's own node until its timeout: NGX_ABORT.  The
 * v2 protocol's nodes are below the path, apart from v1's: another lock.
 */

static ngx_int_t
ngx_http_zk_lock_handler_holding(ngx_http_zk_lock_ctx_t *ctx,
    ngx_http_request_t *r, ngx_http_zk_lock_hold_t *want)
{
    ngx_uint_t                    i;
    ngx_zk_lock_kind_e            a, b;
    ngx_http_zk_lock_hold_t      *hold;
    ngx_http_zk_lock_spec_t      *have;
    ngx_http_zk_lock_loc_conf_t  *llcf;

    hold = ctx->holds.elts;
    b = ngx_zk_lock_types[want->spec->lock.type].kind;

    for (i = 0; i < ctx->holds.nelts; i++) {
        have = hold[i].spec;

        if (hold[i].path.len != want->path.len
            || ngx_strncmp(hold[i].path.data, want->path.data,
                           want->path.len)
               != 0
            || have->lock.v2 != want->spec->lock.v2)
        {
            continue;
        }

        if (hold[i].dry) {
            /* counted once; a location that enforces the lock takes it */
            llcf = ngx_http_get_module_loc_conf(r, ngx_http_zk_lock_module);

            if (llcf->dry_run) {
                return NGX_OK;
            }

            continue;
        }

        if (hold[i].bypassed || hold[i].local) {
            return NGX_OK;
        }

        if (hold[i].node == NULL) {
            /* lost with its session: no longer held, taken anew */
            continue;
        }

        a = ngx_zk_lock_types[have->lock.type].kind;

        if (!(a == b && have->lock.leases == want->spec->lock.leases
              && have->lock.counter.len == want->spec->lock.counter.len
              && ngx_strncmp(have->lock.counter.data,
                             want->spec->lock.counter.data,
                             have->lock.counter.len)
                 == 0)
            && !(a == NGX_ZK_LOCK_WRITE && b == NGX_ZK_LOCK_READ))
        {
            ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                          "%s \"%V\" is another lock on the nodes of %s "
                          "\"%V\", which this request holds",
                          ngx_http_zk_lock_directive(want->spec),
                          &want->path, ngx_http_zk_lock_directive(have),
                          &hold[i].path);
            return NGX_ABORT;
        }

        if (!want->spec->lock.reentrant
            && (hold[i].request != r || hold[i].epoch != ctx->epoch))
        {
            return NGX_BUSY;
        }

        return NGX_OK;
    }

    return NGX_DECLINED;
}




static ngx_int_t
ngx_http_zk_lock_handler_wait(ngx_http_request_t *r,
    ngx_http_zk_lock_ctx_t *ctx, ngx_http_zk_lock_hold_t *want)
{
    ngx_msec_t                     timeout;
    ngx_http_zk_lock_hold_t       *hold;
    ngx_http_zk_lock_spec_t       *spec;
    ngx_http_zk_lock_loc_conf_t   *llcf;
    ngx_http_zk_lock_main_conf_t  *lmcf;

    lmcf = ngx_http_get_module_main_conf(r, ngx_http_zk_lock_module);
    llcf = ngx_http_get_module_loc_conf(r, ngx_http_zk_lock_module);

    if (lmcf->session == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    spec = want->spec;

    if (llcf->dry_run) {
        return ngx_http_zk_lock_handler_dry(r, ctx, want);
    }

    /*
     * zk_lock_fail open: no waiting when ZooKeeper is known to be out of
     * reach; a worker that is still making its first connection is not
     */

    if (lmcf->session->down && llcf->fail_open) {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "%s \"%V\" bypassed: no zookeeper connection",
                      ngx_http_zk_lock_directive(spec), &want->path);

        ctx->result = NGX_HTTP_ZK_LOCK_EV_BYPASSED;
        ngx_http_zk_lock_metrics_count(spec, NGX_HTTP_ZK_LOCK_EV_BYPASSED, 0);
        ngx_http_zk_lock_handler_bypassed(ctx, want);

        return NGX_DECLINED;
    }

    if (ngx_http_zk_lock_handler_full(r, want)) {
        return ngx_http_zk_lock_handler_reject(r, ctx, want);
    }

    if (ngx_http_zk_lock_handler_overweight(r, want)) {
        ngx_http_zk_lock_handler_give_back(ctx);
        ctx->result = NGX_HTTP_ZK_LOCK_EV_REJECTED;
        ngx_http_zk_lock_metrics_count(spec, NGX_HTTP_ZK_LOCK_EV_REJECTED, 0);
        return llcf->status;
    }

    hold = ngx_http_zk_lock_handler_push(r, ctx, want);
    if (hold == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    /*
     * local=<n>: only when the leases held through ZooKeeper no longer
     * count; a session that only lost its connection still blocks others
     * with its nodes, and a request waits for it in ZooKeeper's queue
     */

    if (llcf->fail_local && ngx_zk_lock_session_gone(lmcf->session)) {
        return ngx_http_zk_lock_handler_local(r, ctx, want, hold);
    }

    timeout = ngx_http_zk_lock_handler_spec_timeout(llcf, spec);

    hold->node = ngx_http_zk_lock_handler_step(r, ctx, hold, &hold->path,
                                               timeout == 0,
                                               ngx_http_zk_lock_handler_told);
    if (hold->node == NULL) {
        ctx->holds.nelts--;
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (hold->node->state == NGX_ZK_LOCK_HELD) {
        /* a lease that the worker kept: no wait, no ZooKeeper call */

        ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                       "%s \"%V\": a kept lease",
                       ngx_http_zk_lock_directive(spec), &hold->path);

        ctx->result = NGX_HTTP_ZK_LOCK_EV_ACQUIRED;
        ctx->wait_time = 0;
        hold->counted = 1;
        ngx_http_zk_lock_metrics_count(spec, NGX_HTTP_ZK_LOCK_EV_WAIT, 0);
        ngx_http_zk_lock_metrics_count(spec, NGX_HTTP_ZK_LOCK_EV_ACQUIRED, 0);
        ngx_http_zk_lock_metrics_count(spec, NGX_HTTP_ZK_LOCK_EV_REUSED, 0);

        return NGX_DONE;
    }

    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "%s \"%V\" leases:%ui: waiting",
                   ngx_http_zk_lock_directive(spec), &hold->path,
                   spec->lock.leases);

    if (timeout == 0) {

        /*
         * a try: answered by the first listing that shows its node (see
         * ngx_zk_lock_try()), and bounded by the session's timeout
         * in case ZooKeeper never answers; a worker that is still making
         * its first connection (a reload under traffic) is waited for
         * the same way, one known to be cut off is not
         */

        timeout = lmcf->session->down ? 0 : lmcf->zk.session_timeout;
    }

    ngx_http_zk_lock_handler_await(r, ctx, timeout);

    return NGX_AGAIN;
}


/* the request waits for its last hold, up to "timeout" */

static void
ngx_http_zk_lock_handler_await(ngx_http_request_t *r,
    ngx_http_zk_lock_ctx_t *ctx, ngx_msec_t timeout)
{
    ngx_http_zk_lock_hold_t  *hold;

    hold = ctx->holds.elts;

    ctx->request = r;
    ctx->status = 0;
    ctx->timer.log = r->connection->log;

    ngx_http_zk_lock_handler_rewait(ctx, &hold[ctx->holds.nelts - 1],
                                    timeout);

    ngx_http_zk_lock_handler_suspend(r);
}


/*
 * zk_lock_fail local=<n>: no usable session, and a lease of the instance
 * instead (see ngx_zk_lock_local.c), at once or in turn.  NGX_DONE:
 * taken at once.
 */

static ngx_int_t
ngx_http_zk_lock_handler_local(ngx_http_request_t *r,
    ngx_http_zk_lock_ctx_t *ctx, ngx_http_zk_lock_hold_t *want,
    ngx_http_zk_lock_hold_t *hold)
{
    ngx_int_t                     rc;
    ngx_msec_t                    timeout;
    ngx_http_zk_lock_loc_conf_t  *llcf;

    llcf = ngx_http_get_module_loc_conf(r, ngx_http_zk_lock_module);

    rc = ngx_http_zk_lock_handler_take_local(ctx, hold, llcf->fail_local);

    if (rc == NGX_OK) {
        ngx_http_zk_lock_handler_local_held(ctx, hold, 0);
        return NGX_DONE;
    }

    if (rc == NGX_AGAIN) {
        timeout = ngx_http_zk_lock_handler_spec_timeout(llcf, hold->spec);
        ngx_http_zk_lock_handler_await(r, ctx, timeout);
        return NGX_AGAIN;
    }

    /* too many wait: the hold goes with the location's others */

    return ngx_http_zk_lock_handler_reject(r, ctx, want);
}


/* the request's place in a lock, to be taken */

static ngx_http_zk_lock_hold_t *
ngx_http_zk_lock_handler_push(ngx_http_request_t *r,
    ngx_http_zk_lock_ctx_t *ctx, ngx_http_zk_lock_hold_t *want)
{
    ngx_http_zk_lock_hold_t      *hold;
    ngx_http_zk_lock_loc_conf_t  *llcf;

    llcf = ngx_http_get_module_loc_conf(r, ngx_http_zk_lock_module);

    hold = ngx_array_push(&ctx->holds);
    if (hold == NULL) {
        return NULL;
    }

    *hold = *want;
    hold->node = NULL;
    hold->local = NULL;
    hold->pass = ctx->pass;
    hold->request = r;
    hold->epoch = ctx->epoch;
    hold->abort = llcf->lost_abort;

    return hold;
}


static ngx_int_t
ngx_http_zk_lock_handler_take_local(ngx_http_zk_lock_ctx_t *ctx,
    ngx_http_zk_lock_hold_t *hold, ngx_uint_t n)
{
    ngx_zk_lock_local_t           *l;
    ngx_http_zk_lock_main_conf_t  *lmcf;

    lmcf = ngx_http_get_module_main_conf(ctx->main, ngx_http_zk_lock_module);

    l = ngx_pcalloc(ctx->main->pool, sizeof(ngx_zk_lock_local_t));
    if (l == NULL) {
        return NGX_ERROR;
    }

    l->index = ngx_http_zk_lock_local_index(lmcf, hold);
    l->owner = lmcf->session;
    l->n = n;
    l->handler = ngx_http_zk_lock_handler_local_granted;
    l->data = ctx;

    hold->local = l;

    return ngx_zk_lock_local_take(l);
}


/* a request's wait ends, however: how long it was */

static ngx_msec_t
ngx_http_zk_lock_handler_unwait(ngx_http_zk_lock_ctx_t *ctx)
{
    ngx_msec_t  waited;

    if (ctx->timer.timer_set) {
        ngx_del_timer(&ctx->timer);
    }

    ctx->waiting = NGX_HTTP_ZK_LOCK_NONE;
    ngx_http_zk_lock_nwaiting--;
    ngx_queue_remove(&ctx->queue);
    waited = ngx_current_msec - ctx->started;
    ctx->wait_time += waited;

    return waited;
}


/*
 * A local lease came to a waiting request, or the worker's session is
 * usable again and none will (l->held is 0): the request waits in
 * ZooKeeper's queue for the rest of its timeout
 */

static void
ngx_http_zk_lock_handler_local_granted(ngx_zk_lock_local_t *l)
{
    ngx_msec_t                waited;
    ngx_http_zk_lock_ctx_t   *ctx;
    ngx_http_zk_lock_hold_t  *hold;

    ctx = l->data;
    hold = (ngx_http_zk_lock_hold_t *) ctx->holds.elts + ctx->waiting;

    if (!l->held) {
        hold->local = NULL;
        ngx_http_zk_lock_handler_queue(ctx, hold);
        return;
    }

    waited = ngx_http_zk_lock_handler_unwait(ctx);

    ngx_http_zk_lock_metrics_count(hold->spec, NGX_HTTP_ZK_LOCK_EV_UNWAIT, 0);
    ngx_http_zk_lock_handler_local_held(ctx, hold, waited);

    ctx->status = 0;
    ngx_http_zk_lock_handler_resume(ctx);
}


static void
ngx_http_zk_lock_handler_local_held(ngx_http_zk_lock_ctx_t *ctx,
    ngx_http_zk_lock_hold_t *hold, ngx_msec_t waited)
{
    ngx_http_request_t            *r;
    ngx_http_zk_lock_main_conf_t  *lmcf;

    r = hold->request;
    lmcf = ngx_http_get_module_main_conf(r, ngx_http_zk_lock_module);

    if (ngx_zk_lock_local_warn(ngx_http_zk_lock_local_index(lmcf, hold),
                                    lmcf->session->generation
                                    + lmcf->session->reconnects))
    {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "%s \"%V\" passed with a local lease: no zookeeper "
                      "connection", ngx_http_zk_lock_directive(hold->spec),
                      &hold->path);
    }

    ctx->result = NGX_HTTP_ZK_LOCK_EV_LOCAL;
    ngx_http_zk_lock_metrics_count(hold->spec, NGX_HTTP_ZK_LOCK_EV_LOCAL,
                                   waited);
}


/* the request's node in a lock, to wait for, whichever way it comes */

static ngx_zk_lock_node_t *
ngx_http_zk_lock_handler_step(ngx_http_request_t *r,
    ngx_http_zk_lock_ctx_t *ctx, ngx_http_zk_lock_hold_t *hold,
    ngx_str_t *path, ngx_uint_t try, ngx_zk_lock_notify_pt notify)
{
    ngx_str_t                      info;
    ngx_http_zk_lock_main_conf_t  *lmcf;

    lmcf = ngx_http_get_module_main_conf(r, ngx_http_zk_lock_module);

    if (ngx_http_zk_lock_eval_info(r, &info) != NGX_OK) {
        return NULL;
    }

    return ngx_zk_lock_get(lmcf->session, &hold->spec->lock, path,
                           hold->weight, &info, try, notify, ctx,
                           r->connection->log);
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

static ngx_int_t
ngx_http_zk_lock_handler_dry(ngx_http_request_t *r,
    ngx_http_zk_lock_ctx_t *ctx, ngx_http_zk_lock_hold_t *want)
{
    u_char                        *p;
    ngx_str_t                      path;
    ngx_http_zk_lock_hold_t       *hold;
    ngx_http_zk_lock_main_conf_t  *lmcf;

    lmcf = ngx_http_get_module_main_conf(r, ngx_http_zk_lock_module);

    hold = ngx_http_zk_lock_handler_push(r, ctx, want);
    if (hold == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    hold->dry = 1;

    ctx->result = NGX_HTTP_ZK_LOCK_EV_DRY_RUN;
    ngx_http_zk_lock_metrics_count(want->spec, NGX_HTTP_ZK_LOCK_EV_DRY_RUN, 0);

    if (lmcf->session->down) {
        /* nothing to try: what the lock would have done is not known */
        return NGX_DONE;
    }

    path.len = want->path.len + sizeof(".dry-run") - 1;
    path.data = ngx_pnalloc(r->pool, path.len);
    if (path.data == NULL) {
        return NGX_DONE;
    }

    p = ngx_cpymem(path.data, want->path.data, want->path.len);
    ngx_memcpy(p, ".dry-run", sizeof(".dry-run") - 1);

    hold->node = ngx_http_zk_lock_handler_step(r, ctx, hold, &path, 1,
                                           ngx_http_zk_lock_handler_dry_told);

    return NGX_DONE;
}


/* a shadow node is told: the lock would have held, or would have waited */

static void
ngx_http_zk_lock_handler_dry_told(ngx_zk_lock_node_t *node)
{
    ngx_uint_t                    i;
    ngx_http_zk_lock_ctx_t       *ctx;
    ngx_http_zk_lock_hold_t      *hold;
    ngx_http_zk_lock_loc_conf_t  *llcf;

    ctx = node->data;
    hold = ctx->holds.elts;

    for (i = 0; i < ctx->holds.nelts; i++) {
        if (hold[i].node == node) {
            break;
        }
    }

    if (i == ctx->holds.nelts) {
        return;
    }

    if (node->state == NGX_ZK_LOCK_HELD && node->error == 0) {
        ctx->result = NGX_HTTP_ZK_LOCK_EV_DRY_ACQUIRED;
        ngx_http_zk_lock_metrics_count(hold[i].spec,
                                       NGX_HTTP_ZK_LOCK_EV_DRY_ACQUIRED, 0);
        return;
    }

    /* would wait; or lost, or failed: nothing more to learn from it */

    if (node->error == NGX_ZK_LOCK_BUSY) {
        llcf = ctx->pass_conf;

        ngx_log_error(llcf->log_level, ctx->main->connection->log, 0,
                      "%s \"%V\" would have waited, dry run",
                      ngx_http_zk_lock_directive(hold[i].spec),
                      &hold[i].path);

        ctx->result = NGX_HTTP_ZK_LOCK_EV_DRY_WAITED;
        ngx_http_zk_lock_metrics_count(hold[i].spec,
                                       NGX_HTTP_ZK_LOCK_EV_DRY_WAITED, 0);
    }

    hold[i].node = NULL;
    ngx_zk_lock_release(node);
}


static ngx_msec_t
ngx_http_zk_lock_handler_spec_timeout(ngx_http_zk_lock_loc_conf_t *llcf,
    ngx_http_zk_lock_spec_t *spec)
{
    return (spec->lock.timeout != NGX_CONF_UNSET_MSEC) ? spec->lock.timeout
                                                  : llcf->timeout;
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
 * max_waiting counts the requests of this worker that wait on the path
 * (for Curator's semaphore v2: on its mutex and for a lease), so that the
 * check costs no ZooKeeper call; zk_lock_max_waiting all of them
 */

static ngx_int_t
ngx_http_zk_lock_handler_full(ngx_http_request_t *r,
    ngx_http_zk_lock_hold_t *want)
{
    ngx_uint_t                     n;
    ngx_http_zk_lock_main_conf_t  *lmcf;

    lmcf = ngx_http_get_module_main_conf(r, ngx_http_zk_lock_module);

    /*
     * By default as many as the worker has connections: a waiter is a
     * request, and one HTTP/2 connection carries up to 128 of them
     */

    n = lmcf->max_waiting ? lmcf->max_waiting : ngx_cycle->connection_n;

    if (ngx_http_zk_lock_nwaiting >= n) {
        return 1;
    }

    if (want->spec->lock.max_waiting == 0) {
        return 0;
    }

    n = ngx_zk_lock_get_waiting(lmcf->session, &want->spec->lock,
                                &want->path, want->weight);

    return n >= want->spec->lock.max_waiting;
}


/*
 * A weight above the lease count read from ZooKeeper could not hold until
 * the count grows, and its nodes would stand in the queue ahead of
 * everybody else meanwhile: the status at once, no node
 */

static ngx_int_t
ngx_http_zk_lock_handler_overweight(ngx_http_request_t *r,
    ngx_http_zk_lock_hold_t *want)
{
    ngx_uint_t                     leases;
    ngx_http_zk_lock_spec_t       *spec;
    ngx_zk_lock_counter_t         *c;
    ngx_http_zk_lock_main_conf_t  *lmcf;

    spec = want->spec;

    lmcf = ngx_http_get_module_main_conf(r, ngx_http_zk_lock_module);

    /* a worker without a session reads no count: its broker's queue waits */

    if (want->weight == 1 || spec->lock.counter.len == 0
        || lmcf->session->brokered)
    {
        return 0;
    }

    c = ngx_zk_lock_counter(lmcf->session, &spec->lock.counter);

    leases = (c && c->value) ? c->value : spec->lock.leases;

    if (want->weight <= leases) {
        return 0;
    }

    ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                  "%s \"%V\" rejected: weight %ui is more than the %ui "
                  "leases of \"%V\"", ngx_http_zk_lock_directive(spec),
                  &want->path, want->weight, leases, &spec->lock.counter);

    return 1;
}


/* the queue is full: no node, the status at once, and when to come back */

static ngx_int_t
ngx_http_zk_lock_handler_reject(ngx_http_request_t *r,
    ngx_http_zk_lock_ctx_t *ctx, ngx_http_zk_lock_hold_t *want)
{
    time_t                        sec;
    ngx_table_elt_t              *h;
    ngx_http_zk_lock_loc_conf_t  *llcf;

    llcf = ngx_http_get_module_loc_conf(r, ngx_http_zk_lock_module);

    ngx_log_error(llcf->log_level, r->connection->log, 0,
                  "%s \"%V\" rejected: too many requests waiting",
                  ngx_http_zk_lock_directive(want->spec), &want->path);

    ngx_http_zk_lock_handler_give_back(ctx);
    ctx->result = NGX_HTTP_ZK_LOCK_EV_REJECTED;
    ngx_http_zk_lock_metrics_count(want->spec, NGX_HTTP_ZK_LOCK_EV_REJECTED, 0);

    if (llcf->status == NGX_HTTP_TOO_MANY_REQUESTS
        || llcf->status == NGX_HTTP_SERVICE_UNAVAILABLE)
    {
        h = ngx_list_push(&r->headers_out.headers);
        if (h == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        /* a waiter's time: by then the queue has moved */

        sec = ngx_http_zk_lock_handler_spec_timeout(llcf, want->spec) / 1000;

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
    }

    return llcf->status;
}


static void
ngx_http_zk_lock_handler_told(ngx_zk_lock_node_t *node)
{
    ngx_uint_t                i, abort;
    ngx_connection_t         *c;
    ngx_http_zk_lock_ctx_t   *ctx;
    ngx_http_zk_lock_hold_t  *hold, *w;

    ctx = node->data;
    hold = ctx->holds.elts;

    if (ctx->waiting != NGX_HTTP_ZK_LOCK_NONE) {
        w = &hold[ctx->waiting];

        if (node == w->node) {

            /* a node that came to hold in jeopardy is not had */

            if (node->state == NGX_ZK_LOCK_HELD
                && node->error != NGX_ZK_LOCK_JEOPARDY)
            {
                ngx_http_zk_lock_handler_done(ctx, NGX_OK, 0);

            } else {
                ngx_http_zk_lock_handler_done(ctx, NGX_ERROR, node->error);
            }

            return;
        }
    }

    /* a lock that was held is gone */

    abort = 0;

    for (i = 0; i < ctx->holds.nelts; i++) {
        if (hold[i].node == node) {
            abort |= ngx_http_zk_lock_handler_lost(ctx, &hold[i]);
        }
    }

    if (abort) {

        /*
         * zk_lock_lost abort: the request is cut off the way a client
         * abort cuts it off, by whatever handles the request's events
         * (an upstream finalizes with 499, a write fails); finalizing it
         * from here would free it under the upstream's own cleanup
         */

        c = ctx->main->connection;
        c->error = 1;

        if (!c->read->posted) {
            ngx_post_event(c->read, &ngx_posted_events);
        }

        if (!c->write->posted) {
            ngx_post_event(c->write, &ngx_posted_events);
        }
    }
}


static void
ngx_http_zk_lock_handler_timeout_handler(ngx_event_t *ev)
{
    ngx_http_zk_lock_handler_done(ev->data, NGX_DECLINED, 0);
}


/*
 * A held lock is gone: revoked (the request is cut off, whatever
 * zk_lock_lost says), its session expired, or it may expire unheard of
 * (see session_probe_handler()).  Returns whether to abort the request.
 */

static ngx_uint_t
ngx_http_zk_lock_handler_lost(ngx_http_zk_lock_ctx_t *ctx,
    ngx_http_zk_lock_hold_t *hold)
{
    int                       error;
    ngx_log_t                *log;
    ngx_uint_t                abort;
    ngx_zk_lock_node_t       *node;
    ngx_http_zk_lock_event_e  gone;

    node = hold->node;
    error = node->error;
    log = ctx->main->connection->log;
    abort = hold->abort;
    gone = NGX_HTTP_ZK_LOCK_EV_LOST;

    switch (error) {

    case NGX_ZK_LOCK_REVOKED:
        ngx_log_error(NGX_LOG_WARN, log, 0,
                      "%s \"%V\" revoked while held: node \"%s/%s\", "
                      "aborting the request",
                      ngx_http_zk_lock_directive(hold->spec), &hold->path,
                      ngx_zk_lock_node_path(node), node->name);

        abort = 1;
        gone = NGX_HTTP_ZK_LOCK_EV_RELEASED;
        break;

    case NGX_ZK_LOCK_JEOPARDY:
        ngx_log_error(NGX_LOG_ERR, log, 0,
                      "%s \"%V\" lost while held: no word from zookeeper, "
                      "the session may expire%s",
                      ngx_http_zk_lock_directive(hold->spec), &hold->path,
                      abort ? ", aborting the request"
                            : ", its node is kept until the request ends");

        if (!abort) {

            /*
             * zk_lock_lost finish: the request goes on, and while the
             * session lives nobody else may have the lock; its node goes
             * when the request ends, or with the session
             */

            ngx_http_zk_lock_handler_lost_count(ctx, hold, gone);
            return 0;
        }

        break;

    default:
        ngx_log_error(NGX_LOG_ERR, log, 0,
                      "%s \"%V\" lost while held (%d: %s)%s",
                      ngx_http_zk_lock_directive(hold->spec), &hold->path,
                      error, zerror(error),
                      abort ? ", aborting the request" : "");
    }

    /* it may be freed */

    ngx_zk_lock_release(node);
    hold->node = NULL;

    ngx_http_zk_lock_handler_lost_count(ctx, hold, gone);

    if (error == NGX_ZK_LOCK_REVOKED) {
        ngx_http_zk_lock_metrics_count(hold->spec,
                                       NGX_HTTP_ZK_LOCK_EV_REVOKED, 0);
        ctx->result = NGX_HTTP_ZK_LOCK_EV_REVOKED;
    }

    return abort;
}


static void
ngx_http_zk_lock_handler_lost_count(ngx_http_zk_lock_ctx_t *ctx,
    ngx_http_zk_lock_hold_t *hold, ngx_http_zk_lock_event_e gone)
{
    if (hold->counted) {
        hold->counted = 0;
        ngx_http_zk_lock_metrics_count(hold->spec, gone, 0);
    }

    ctx->result = NGX_HTTP_ZK_LOCK_EV_LOST;
}


static void
ngx_http_zk_lock_handler_done(ngx_http_zk_lock_ctx_t *ctx, ngx_int_t rc,
    int error)
{
    ngx_msec_t                     waited;
    ngx_http_request_t            *r;
    ngx_http_zk_lock_hold_t       *hold;
    ngx_http_zk_lock_loc_conf_t   *llcf;
    ngx_http_zk_lock_main_conf_t  *lmcf;

    r = ctx->request;
    hold = (ngx_http_zk_lock_hold_t *) ctx->holds.elts + ctx->waiting;
    llcf = ngx_http_get_module_loc_conf(r, ngx_http_zk_lock_module);

    if (rc == NGX_ERROR && error == NGX_ZK_LOCK_BUSY) {
        rc = NGX_DECLINED;      /* a try that found the lock taken */
    }

    waited = ngx_http_zk_lock_handler_unwait(ctx);

    lmcf = ngx_http_get_module_main_conf(r, ngx_http_zk_lock_module);

    if (rc == NGX_OK) {
        ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                      "%s \"%V\" acquired after %Mms",
                      ngx_http_zk_lock_directive(hold->spec),
                      &hold->path, waited);

        ctx->result = NGX_HTTP_ZK_LOCK_EV_ACQUIRED;
        hold->counted = 1;
        ngx_http_zk_lock_metrics_count(hold->spec,
                                       NGX_HTTP_ZK_LOCK_EV_ACQUIRED, waited);

        if (hold->node->reused) {
            /* handed over in the worker: another request's kept lease */
            ngx_http_zk_lock_metrics_count(hold->spec,
                                           NGX_HTTP_ZK_LOCK_EV_REUSED, 0);
        }

    } else if (hold->local == NULL
               && (llcf->fail_open || llcf->fail_local)
               && (rc == NGX_DECLINED ? !lmcf->session->connected
                                      : ngx_zk_lock_session_error(error)))
    {
        ngx_http_zk_lock_handler_fail_late(ctx, hold, waited,
                                           rc == NGX_DECLINED
                                           ? "no zookeeper connection"
                                           : zerror(error));
        return;

    } else {

        if (rc == NGX_DECLINED && lmcf->session->connected) {
            ngx_log_error(llcf->log_level, r->connection->log, 0,
                          "%s \"%V\" not acquired in %Mms",
                          ngx_http_zk_lock_directive(hold->spec),
                          &hold->path, waited);

            ctx->result = NGX_HTTP_ZK_LOCK_EV_TIMEOUT;
            ngx_http_zk_lock_metrics_count(hold->spec,
                                           NGX_HTTP_ZK_LOCK_EV_TIMEOUT, 0);

        } else if (rc == NGX_DECLINED) {
            ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                          "%s \"%V\" not acquired in %Mms: "
                          "no zookeeper connection",
                          ngx_http_zk_lock_directive(hold->spec),
                          &hold->path, waited);

            ctx->result = NGX_HTTP_ZK_LOCK_EV_ERROR;
            ngx_http_zk_lock_metrics_count(hold->spec,
                                           NGX_HTTP_ZK_LOCK_EV_ERROR, 0);

        } else if (error == NGX_ZK_LOCK_FOREIGN) {
            ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                          "%s \"%V\" refused: its variable names a node "
                          "that is no lock's (ephemeral, or with data)",
                          ngx_http_zk_lock_directive(hold->spec),
                          &hold->path);

            ctx->result = NGX_HTTP_ZK_LOCK_EV_ERROR;
            ngx_http_zk_lock_metrics_count(hold->spec,
                                           NGX_HTTP_ZK_LOCK_EV_ERROR, 0);

        } else if (error == NGX_ZK_LOCK_REVOKED) {
            ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                          "%s \"%V\" revoked while waiting: node \"%s/%s\"",
                          ngx_http_zk_lock_directive(hold->spec), &hold->path,
                          ngx_zk_lock_node_path(hold->node),
                          hold->node->name);

            ctx->result = NGX_HTTP_ZK_LOCK_EV_REVOKED;
            ngx_http_zk_lock_metrics_count(hold->spec,
                                           NGX_HTTP_ZK_LOCK_EV_UNWAIT, 0);
            ngx_http_zk_lock_metrics_count(hold->spec,
                                           NGX_HTTP_ZK_LOCK_EV_REVOKED, 0);

        } else {
            ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                          "%s \"%V\" failed (%d: %s)",
                          ngx_http_zk_lock_directive(hold->spec),
                          &hold->path, error, zerror(error));

            ctx->result = NGX_HTTP_ZK_LOCK_EV_ERROR;
            ngx_http_zk_lock_metrics_count(hold->spec,
                                           NGX_HTTP_ZK_LOCK_EV_ERROR, 0);
        }

        ngx_http_zk_lock_handler_give_back(ctx);

        ctx->status = (error == NGX_ZK_LOCK_FOREIGN)
                      ? NGX_HTTP_BAD_REQUEST : (ngx_int_t) llcf->status;
    }

    ngx_http_zk_lock_handler_resume(ctx);
}


/*
 * A request that waited for ZooKeeper has no usable session: zk_lock_fail
 * open lets it through, local=<n> gives it a local lease
 */

static void
ngx_http_zk_lock_handler_fail_late(ngx_http_zk_lock_ctx_t *ctx,
    ngx_http_zk_lock_hold_t *hold, ngx_msec_t waited, const char *why)
{
    ngx_http_request_t           *r;
    ngx_http_zk_lock_hold_t       bypass;
    ngx_http_zk_lock_loc_conf_t  *llcf;

    r = ctx->request;
    llcf = ngx_http_get_module_loc_conf(r, ngx_http_zk_lock_module);

    if (llcf->fail_local) {
        ngx_http_zk_lock_handler_to_local(ctx, hold, waited);
        return;
    }

    ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                  "%s \"%V\" bypassed after %Mms: %s",
                  ngx_http_zk_lock_directive(hold->spec), &hold->path,
                  waited, why);

    ngx_http_zk_lock_metrics_count(hold->spec, NGX_HTTP_ZK_LOCK_EV_UNWAIT, 0);
    ngx_http_zk_lock_metrics_count(hold->spec, NGX_HTTP_ZK_LOCK_EV_BYPASSED, 0);

    bypass = *hold;
    ngx_http_zk_lock_handler_give_back(ctx);
    ngx_http_zk_lock_handler_bypassed(ctx, &bypass);

    ctx->result = NGX_HTTP_ZK_LOCK_EV_BYPASSED;
    ctx->status = NGX_DECLINED;

    ngx_http_zk_lock_handler_resume(ctx);
}


/*
 * zk_lock_fail local=<n>, for a request that waited for ZooKeeper: the
 * session is gone, a local lease instead, for the rest of its timeout
 */

static void
ngx_http_zk_lock_handler_to_local(ngx_http_zk_lock_ctx_t *ctx,
    ngx_http_zk_lock_hold_t *hold, ngx_msec_t waited)
{
    ngx_int_t                      rc;
    ngx_msec_t                     timeout;
    ngx_http_request_t            *r;
    ngx_http_zk_lock_loc_conf_t   *llcf;
    ngx_http_zk_lock_main_conf_t  *lmcf;

    r = ctx->request;
    llcf = ngx_http_get_module_loc_conf(r, ngx_http_zk_lock_module);
    lmcf = ngx_http_get_module_main_conf(r, ngx_http_zk_lock_module);
    timeout = ngx_http_zk_lock_handler_spec_timeout(llcf, hold->spec);

    ngx_http_zk_lock_metrics_count(hold->spec, NGX_HTTP_ZK_LOCK_EV_UNWAIT, 0);

    if (hold->node) {
        ngx_zk_lock_release(hold->node);
        hold->node = NULL;
    }

    if (!ngx_zk_lock_session_gone(lmcf->session)) {

        /*
         * the session expired and a new one is being made, or the
         * connection is only lost: no local lease beside the leases
         * held through ZooKeeper, the rest of the wait is in its queue
         */

        if (waited < timeout) {
            ngx_http_zk_lock_handler_rewait(ctx, hold, timeout - waited);
            ngx_http_zk_lock_handler_queue(ctx, hold);
            return;
        }

        rc = NGX_DECLINED;

    } else {
        rc = ngx_http_zk_lock_handler_take_local(ctx, hold,
                                                 llcf->fail_local);
    }

    if (rc == NGX_OK) {
        ngx_http_zk_lock_handler_local_held(ctx, hold, waited);
        ctx->status = 0;
        ngx_http_zk_lock_handler_resume(ctx);
        return;
    }

    if (rc == NGX_AGAIN && waited < timeout) {
        ngx_http_zk_lock_handler_rewait(ctx, hold, timeout - waited);
        return;
    }

    ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                  "%s \"%V\" not acquired in %Mms: no zookeeper connection, "
                  "no local lease", ngx_http_zk_lock_directive(hold->spec),
                  &hold->path, waited);

    ctx->result = NGX_HTTP_ZK_LOCK_EV_ERROR;
    ngx_http_zk_lock_metrics_count(hold->spec, NGX_HTTP_ZK_LOCK_EV_ERROR, 0);

    ngx_http_zk_lock_handler_give_back(ctx);
    ctx->status = llcf->status;
    ngx_http_zk_lock_handler_resume(ctx);
}


/*
 * The request's wait starts, or starts again for what is left of its
 * timeout
 */

static void
ngx_http_zk_lock_handler_rewait(ngx_http_zk_lock_ctx_t *ctx,
    ngx_http_zk_lock_hold_t *hold, ngx_msec_t left)
{
    ctx->waiting = hold - (ngx_http_zk_lock_hold_t *) ctx->holds.elts;
    ctx->started = ngx_current_msec;
    ngx_add_timer(&ctx->timer, left);

    ngx_http_zk_lock_nwaiting++;
    ngx_queue_insert_tail(&ngx_http_zk_lock_waiters, &ctx->queue);
    ngx_http_zk_lock_metrics_count(hold->spec, NGX_HTTP_ZK_LOCK_EV_WAIT, 0);
}


/* a waiting request, with no node and no local lease, queues in ZooKeeper */

static void
ngx_http_zk_lock_handler_queue(ngx_http_zk_lock_ctx_t *ctx,
    ngx_http_zk_lock_hold_t *hold)
{
    ngx_uint_t                    try;
    ngx_http_zk_lock_loc_conf_t  *llcf;

    llcf = ctx->pass_conf;
    try = (ngx_http_zk_lock_handler_spec_timeout(llcf, hold->spec) == 0);

    hold->node = ngx_http_zk_lock_handler_step(ctx->request, ctx, hold,
                                               &hold->path, try,
                                               ngx_http_zk_lock_handler_told);

    if (hold->node == NULL) {
        ngx_http_zk_lock_handler_done(ctx, NGX_ERROR, ZSYSTEMERROR);
        return;
    }

    if (hold->node->state == NGX_ZK_LOCK_HELD) {
        /* a kept lease, at once */
        ngx_http_zk_lock_handler_done(ctx, NGX_OK, 0);
    }
}


/*
 * The worker's session is usable again (connected, heard from): no local
 * lease is given any more, and the requests that wait for one in this
 * worker queue in ZooKeeper instead.  Or it may have expired unheard of
 * (jeopardy): the requests that wait in ZooKeeper's queue where
 * zk_lock_fail local=<n> applies take a local lease instead, for the rest
 * of their timeout, as those that come now do.  From an event, not from
 * inside the session's completions.
 */

void
ngx_http_zk_lock_handler_session(ngx_zk_lock_session_t *s)
{
    ngx_event_t  *ev;

    ev = &ngx_http_zk_lock_handler_event;

    ev->handler = ngx_http_zk_lock_handler_session_handler;
    ev->data = s;
    ev->log = &s->log;

    if (!ev->posted) {
        ngx_post_event(ev, &ngx_posted_events);
    }
}


static void
ngx_http_zk_lock_handler_session_handler(ngx_event_t *ev)
{
    ngx_zk_lock_session_t  *s;

    s = ev->data;

    if (ngx_zk_lock_session_usable(s)) {
        ngx_zk_lock_local_recall(s);

    } else if (ngx_zk_lock_session_gone(s)) {
        ngx_http_zk_lock_handler_localize();
    }
}


static void
ngx_http_zk_lock_handler_localize(void)
{
    ngx_queue_t                   moving, *q;
    ngx_msec_t                    waited;
    ngx_http_zk_lock_ctx_t       *ctx;
    ngx_http_zk_lock_hold_t      *hold;
    ngx_http_zk_lock_loc_conf_t  *llcf;

    /* to_local() may put a request back: the list is taken first */

    ngx_queue_init(&moving);

    while (!ngx_queue_empty(&ngx_http_zk_lock_waiters)) {
        q = ngx_queue_head(&ngx_http_zk_lock_waiters);
        ngx_queue_remove(q);
        ngx_queue_insert_tail(&moving, q);
    }

    while (!ngx_queue_empty(&moving)) {
        q = ngx_queue_head(&moving);
        ngx_queue_remove(q);
        ngx_queue_insert_tail(&ngx_http_zk_lock_waiters, q);

        ctx = ngx_queue_data(q, ngx_http_zk_lock_ctx_t, queue);
        hold = (ngx_http_zk_lock_hold_t *) ctx->holds.elts + ctx->waiting;
        llcf = ngx_http_get_module_loc_conf(ctx->request,
                                            ngx_http_zk_lock_module);

        if (hold->local || !llcf->fail_local) {
            continue;
        }

        waited = ngx_http_zk_lock_handler_unwait(ctx);
        ngx_http_zk_lock_handler_to_local(ctx, hold, waited);
    }
}


/*
 * A lock let through unlocked (zk_lock_fail open) stays in the request's
 * list as such: an internal redirect to it is neither held back nor
 * counted again
 */

static void
ngx_http_zk_lock_handler_bypassed(ngx_http_zk_lock_ctx_t *ctx,
    ngx_http_zk_lock_hold_t *want)
{
    ngx_http_zk_lock_hold_t  *hold;

    hold = ngx_array_push(&ctx->holds);
    if (hold == NULL) {
        return;
    }

    *hold = *want;
    hold->node = NULL;
    hold->pass = ctx->pass;
    hold->counted = 0;
    hold->bypassed = 1;
}


/*
 * One lock of a location could not be had: the others that location took
 * are given back, in reverse order, as Curator's InterProcessMultiLock does
 */

static void
ngx_http_zk_lock_handler_give_back(ngx_http_zk_lock_ctx_t *ctx)
{
    ngx_http_zk_lock_hold_t  *hold;

    hold = ctx->holds.elts;

    /* they were taken last: they are at the end */

    while (ctx->holds.nelts
           && hold[ctx->holds.nelts - 1].pass == ctx->pass)
    {
        ngx_http_zk_lock_handler_drop(&hold[--ctx->holds.nelts]);
    }
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


/* the client request is over, however it ended */

static void
ngx_http_zk_lock_handler_cleanup(void *data)
{
    ngx_http_zk_lock_ctx_t  *ctx = data;

    ngx_uint_t                i;
    ngx_http_zk_lock_hold_t  *hold;

    if (ctx->timer.timer_set) {
        ngx_del_timer(&ctx->timer);
    }

    hold = ctx->holds.elts;

    if (ctx->waiting != NGX_HTTP_ZK_LOCK_NONE) {
        ngx_http_zk_lock_nwaiting--;
        ngx_queue_remove(&ctx->queue);
        ngx_http_zk_lock_metrics_count(hold[ctx->waiting].spec,
                                       NGX_HTTP_ZK_LOCK_EV_UNWAIT, 0);
    }

    for (i = 0; i < ctx->holds.nelts; i++) {
        ngx_http_zk_lock_handler_drop(&hold[i]);
    }
}


static void
ngx_http_zk_lock_handler_drop(ngx_http_zk_lock_hold_t *hold)
{
    if (hold->counted) {
        hold->counted = 0;
        ngx_http_zk_lock_metrics_count(hold->spec,
                                       NGX_HTTP_ZK_LOCK_EV_RELEASED, 0);
    }

    if (hold->node) {
        ngx_zk_lock_release(hold->node);
        hold->node = NULL;
    }

    if (hold->local) {
        ngx_zk_lock_local_leave(hold->local);
        hold->local = NULL;
    }
}
