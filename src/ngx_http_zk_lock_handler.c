
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_zk_lock_handler.h"
#include "ngx_http_zk_lock_recipe.h"


#define NGX_HTTP_ZK_LOCK_NONE  ((ngx_uint_t) -1)


/* a lock the client request holds or waits for */

typedef struct {
    ngx_str_t                     path;
    ngx_http_zk_lock_spec_t      *spec;
    ngx_http_zk_lock_node_t      *node;
} ngx_http_zk_lock_hold_t;


/*
 * One per client request: the main request owns the locks, so that its
 * subrequests and internal redirects find them held.
 */

typedef struct {
    ngx_array_t                   holds;      /* ngx_http_zk_lock_hold_t */
    ngx_uint_t                    waiting;    /* index in holds */
    ngx_http_request_t           *request;    /* the one that waits */
    ngx_array_t                  *blocked;    /* others of the same client */
    ngx_event_t                   timer;
    ngx_msec_t                    started;
    ngx_int_t                     status;     /* answer to the waiter */
} ngx_http_zk_lock_ctx_t;


static ngx_http_zk_lock_ctx_t *ngx_http_zk_lock_get_ctx(ngx_http_request_t *r);
static ngx_http_zk_lock_ctx_t *ngx_http_zk_lock_create_ctx(
    ngx_http_request_t *r);
static ngx_int_t ngx_http_zk_lock_eval_path(ngx_http_request_t *r,
    ngx_http_zk_lock_spec_t *spec, ngx_str_t *path);
static ngx_uint_t ngx_http_zk_lock_holds(ngx_http_zk_lock_ctx_t *ctx,
    ngx_str_t *path);
static ngx_int_t ngx_http_zk_lock_wait(ngx_http_request_t *r,
    ngx_http_zk_lock_ctx_t *ctx, ngx_http_zk_lock_spec_t *spec,
    ngx_str_t *path);
static ngx_int_t ngx_http_zk_lock_block(ngx_http_request_t *r,
    ngx_http_zk_lock_ctx_t *ctx);
static void ngx_http_zk_lock_notify(ngx_http_zk_lock_node_t *node);
static void ngx_http_zk_lock_timeout_handler(ngx_event_t *ev);
static void ngx_http_zk_lock_done(ngx_http_zk_lock_ctx_t *ctx, ngx_int_t rc,
    int error);
static void ngx_http_zk_lock_resume(ngx_http_zk_lock_ctx_t *ctx);
static void ngx_http_zk_lock_cleanup(void *data);


static const char  *ngx_http_zk_lock_type_name[] = {
    "", "zk_mutex", "zk_semaphore"
};


ngx_int_t
ngx_http_zk_lock_handler(ngx_http_request_t *r)
{
    ngx_int_t                     rc;
    ngx_str_t                     path;
    ngx_uint_t                    i;
    ngx_http_zk_lock_ctx_t       *ctx;
    ngx_http_zk_lock_spec_t      *spec;
    ngx_http_zk_lock_loc_conf_t  *llcf;

    llcf = ngx_http_get_module_loc_conf(r, ngx_http_zk_lock_module);

    if (llcf->locks == NULL) {
        return NGX_DECLINED;
    }

    ctx = ngx_http_zk_lock_get_ctx(r);

    if (ctx) {
        if (ctx->waiting != NGX_HTTP_ZK_LOCK_NONE) {

            if (ctx->request == r) {
                return NGX_AGAIN;
            }

            return ngx_http_zk_lock_block(r, ctx);
        }

        if (ctx->status && ctx->request == r) {
            rc = ctx->status;
            ctx->status = 0;
            return rc;
        }
    }

    spec = llcf->locks->elts;

    for (i = 0; i < llcf->locks->nelts; i++) {

        rc = ngx_http_zk_lock_eval_path(r, &spec[i], &path);
        if (rc != NGX_OK) {
            return rc;
        }

        if (ctx && ngx_http_zk_lock_holds(ctx, &path)) {
            /* re-entry: a subrequest or an internal redirect */
            continue;
        }

        if (ctx == NULL) {
            ctx = ngx_http_zk_lock_create_ctx(r);
            if (ctx == NULL) {
                return NGX_HTTP_INTERNAL_SERVER_ERROR;
            }
        }

        return ngx_http_zk_lock_wait(r, ctx, &spec[i], &path);
    }

    return NGX_DECLINED;
}


/*
 * Internal redirects clear r->ctx; the context is then found again through
 * its pool cleanup, as the realip module does.
 */

static ngx_http_zk_lock_ctx_t *
ngx_http_zk_lock_get_ctx(ngx_http_request_t *r)
{
    ngx_pool_cleanup_t      *cln;
    ngx_http_zk_lock_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r->main, ngx_http_zk_lock_module);

    if (ctx) {
        return ctx;
    }

    for (cln = r->main->pool->cleanup; cln; cln = cln->next) {
        if (cln->handler == ngx_http_zk_lock_cleanup) {
            ctx = cln->data;
            ngx_http_set_ctx(r->main, ctx, ngx_http_zk_lock_module);
            return ctx;
        }
    }

    return NULL;
}


static ngx_http_zk_lock_ctx_t *
ngx_http_zk_lock_create_ctx(ngx_http_request_t *r)
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

    ctx->timer.handler = ngx_http_zk_lock_timeout_handler;
    ctx->timer.data = ctx;

    cln->handler = ngx_http_zk_lock_cleanup;

    ngx_http_set_ctx(r->main, ctx, ngx_http_zk_lock_module);

    return ctx;
}


/*
 * A path is a list of segments; a segment that comes from variables is
 * checked here, so that a value cannot add levels ("/", "..") or bytes
 * ZooKeeper refuses.
 */

static ngx_int_t
ngx_http_zk_lock_eval_path(ngx_http_request_t *r,
    ngx_http_zk_lock_spec_t *spec, ngx_str_t *path)
{
    u_char                     *p;
    size_t                      len;
    ngx_str_t                  *v;
    ngx_uint_t                  i, n;
    const char                 *err;
    ngx_http_complex_value_t   *cv;

    cv = spec->segments->elts;
    n = spec->segments->nelts;

    v = ngx_palloc(r->pool, n * sizeof(ngx_str_t));
    if (v == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    len = 0;

    for (i = 0; i < n; i++) {

        if (ngx_http_complex_value(r, &cv[i], &v[i]) != NGX_OK) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        if (cv[i].lengths) {
            err = ngx_http_zk_lock_check_segment(&v[i], i == 0);

            if (err) {
                ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                              "%s path \"%V\": segment %ui is %s",
                              ngx_http_zk_lock_type_name[spec->type],
                              &spec->name, i + 1, err);
                return NGX_HTTP_BAD_REQUEST;
            }
        }

        len += 1 + v[i].len;
    }

    if (len > NGX_HTTP_ZK_LOCK_MAX_PATH) {
        ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                      "%s path \"%V\" is longer than %d bytes",
                      ngx_http_zk_lock_type_name[spec->type],
                      &spec->name, NGX_HTTP_ZK_LOCK_MAX_PATH);
        return NGX_HTTP_BAD_REQUEST;
    }

    p = ngx_pnalloc(r->pool, len);
    if (p == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    path->data = p;
    path->len = len;

    for (i = 0; i < n; i++) {
        *p++ = '/';
        p = ngx_cpymem(p, v[i].data, v[i].len);
    }

    return NGX_OK;
}


static ngx_uint_t
ngx_http_zk_lock_holds(ngx_http_zk_lock_ctx_t *ctx, ngx_str_t *path)
{
    ngx_uint_t                i;
    ngx_http_zk_lock_hold_t  *hold;

    hold = ctx->holds.elts;

    for (i = 0; i < ctx->holds.nelts; i++) {
        if (hold[i].path.len == path->len
            && ngx_strncmp(hold[i].path.data, path->data, path->len) == 0)
        {
            return 1;
        }
    }

    return 0;
}


static ngx_int_t
ngx_http_zk_lock_wait(ngx_http_request_t *r, ngx_http_zk_lock_ctx_t *ctx,
    ngx_http_zk_lock_spec_t *spec, ngx_str_t *path)
{
    ngx_msec_t                     timeout;
    ngx_http_zk_lock_hold_t       *hold;
    ngx_http_zk_lock_loc_conf_t   *llcf;
    ngx_http_zk_lock_main_conf_t  *lmcf;

    lmcf = ngx_http_get_module_main_conf(r, ngx_http_zk_lock_module);
    llcf = ngx_http_get_module_loc_conf(r, ngx_http_zk_lock_module);

    if (lmcf->session == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    hold = ngx_array_push(&ctx->holds);
    if (hold == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    hold->path = *path;
    hold->spec = spec;
    hold->node = ngx_http_zk_lock_acquire(lmcf->session, path, spec->leases,
                                          ngx_http_zk_lock_notify, ctx,
                                          r->connection->log);

    if (hold->node == NULL) {
        ctx->holds.nelts--;
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "%s \"%V\" leases:%ui: waiting",
                   ngx_http_zk_lock_type_name[spec->type], path,
                   spec->leases);

    timeout = (spec->timeout != NGX_CONF_UNSET_MSEC) ? spec->timeout
                                                     : llcf->timeout;

    ctx->waiting = ctx->holds.nelts - 1;
    ctx->request = r;
    ctx->status = 0;
    ctx->started = ngx_current_msec;

    ctx->timer.log = r->connection->log;
    ngx_add_timer(&ctx->timer, timeout);

    /* as limit_req's delay: notice a client that goes away meanwhile */

    r->read_event_handler = ngx_http_test_reading;
    r->write_event_handler = ngx_http_request_empty_handler;

    return NGX_AGAIN;
}


/*
 * Another request of the same client request (a parallel subrequest) waits
 * until the pending acquisition ends, then runs its phases again.
 */

static ngx_int_t
ngx_http_zk_lock_block(ngx_http_request_t *r, ngx_http_zk_lock_ctx_t *ctx)
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

    r->read_event_handler = ngx_http_test_reading;
    r->write_event_handler = ngx_http_request_empty_handler;

    return NGX_AGAIN;
}


static void
ngx_http_zk_lock_notify(ngx_http_zk_lock_node_t *node)
{
    ngx_uint_t                i;
    ngx_http_zk_lock_ctx_t   *ctx;
    ngx_http_zk_lock_hold_t  *hold;

    ctx = node->data;
    hold = ctx->holds.elts;

    if (ctx->waiting != NGX_HTTP_ZK_LOCK_NONE
        && hold[ctx->waiting].node == node)
    {
        ngx_http_zk_lock_done(ctx,
                              node->state == NGX_HTTP_ZK_LOCK_HELD
                              ? NGX_OK : NGX_ERROR,
                              node->error);
        return;
    }

    /* a lock that was held is gone with its session */

    for (i = 0; i < ctx->holds.nelts; i++) {
        if (hold[i].node != node) {
            continue;
        }

        ngx_log_error(NGX_LOG_WARN, ctx->request->connection->log, 0,
                      "%s \"%V\" lost while held (%d: %s)",
                      ngx_http_zk_lock_type_name[hold[i].spec->type],
                      &hold[i].path, node->error, zerror(node->error));

        ngx_http_zk_lock_release(node);
        hold[i].node = NULL;
    }
}


static void
ngx_http_zk_lock_timeout_handler(ngx_event_t *ev)
{
    ngx_http_zk_lock_done(ev->data, NGX_DECLINED, 0);
}


static void
ngx_http_zk_lock_done(ngx_http_zk_lock_ctx_t *ctx, ngx_int_t rc, int error)
{
    ngx_msec_t                    waited;
    ngx_http_request_t           *r;
    ngx_http_zk_lock_hold_t      *hold;
    ngx_http_zk_lock_loc_conf_t  *llcf;

    r = ctx->request;
    hold = (ngx_http_zk_lock_hold_t *) ctx->holds.elts + ctx->waiting;
    llcf = ngx_http_get_module_loc_conf(r, ngx_http_zk_lock_module);

    if (ctx->timer.timer_set) {
        ngx_del_timer(&ctx->timer);
    }

    ctx->waiting = NGX_HTTP_ZK_LOCK_NONE;
    waited = ngx_current_msec - ctx->started;

    if (rc == NGX_OK) {
        ngx_log_debug3(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                       "%s \"%V\" acquired after %Mms",
                       ngx_http_zk_lock_type_name[hold->spec->type],
                       &hold->path, waited);

    } else {

        if (rc == NGX_DECLINED) {
            ngx_log_error(llcf->log_level, r->connection->log, 0,
                          "%s \"%V\" not acquired in %Mms",
                          ngx_http_zk_lock_type_name[hold->spec->type],
                          &hold->path, waited);

        } else {
            ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                          "%s \"%V\" failed (%d: %s)",
                          ngx_http_zk_lock_type_name[hold->spec->type],
                          &hold->path, error, zerror(error));
        }

        ngx_http_zk_lock_release(hold->node);

        /* the one waited for is always the last one */
        ctx->holds.nelts--;

        ctx->status = llcf->status;
    }

    ngx_http_zk_lock_resume(ctx);
}


static void
ngx_http_zk_lock_resume(ngx_http_zk_lock_ctx_t *ctx)
{
    ngx_uint_t           i;
    ngx_connection_t    *c;
    ngx_http_request_t  *r, **blocked;

    r = ctx->request;
    c = r->connection;

    r->read_event_handler = ngx_http_block_reading;
    r->write_event_handler = ngx_http_core_run_phases;

    (void) ngx_http_post_request(r, NULL);

    if (ctx->blocked) {
        blocked = ctx->blocked->elts;

        for (i = 0; i < ctx->blocked->nelts; i++) {
            blocked[i]->read_event_handler = ngx_http_block_reading;
            blocked[i]->write_event_handler = ngx_http_core_run_phases;
            (void) ngx_http_post_request(blocked[i], NULL);
        }

        ctx->blocked->nelts = 0;
    }

    ngx_http_run_posted_requests(c);
}


/* the client request is over, however it ended */

static void
ngx_http_zk_lock_cleanup(void *data)
{
    ngx_http_zk_lock_ctx_t  *ctx = data;

    ngx_uint_t                i;
    ngx_http_zk_lock_hold_t  *hold;

    if (ctx->timer.timer_set) {
        ngx_del_timer(&ctx->timer);
    }

    hold = ctx->holds.elts;

    for (i = 0; i < ctx->holds.nelts; i++) {
        if (hold[i].node) {
            ngx_http_zk_lock_release(hold[i].node);
            hold[i].node = NULL;
        }
    }
}
