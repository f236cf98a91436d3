
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_stream.h>

#include "ngx_stream_zk_lock_handler.h"
#include "ngx_stream_zk_lock_variables.h"
#include "ngx_zk_lock_recipe.h"
#include "ngx_zk_lock_semv2.h"
#include "ngx_zk_lock_take.h"
#include "ngx_zk_lock_stats.h"


/*
 * A connection at its locks, in the preaccess phase:
 *
 *   start --> take lock 1 .. n, in the order of their paths
 *               |  held at once (a kept lease): the next
 *               |  else: WAITING, its timer set; the phase is left
 *               v
 *   told HELD -> the next lock ... all held: DONE, the phases go on
 *   told FAILED, timer, the client gone -> all given back, the session
 *               finalized (503; 499 for a client gone, as in "http")
 *
 * Once DONE, the locks are held until the connection's pool goes, however
 * the session ends; a lock lost while held cuts the connection under
 * "zk_lock_lost abort".
 */


#define NGX_STREAM_ZK_LOCK_CLIENT_CLOSED  499
#define NGX_STREAM_ZK_LOCK_INFO_LEN       256

#define ngx_stream_zk_lock_directive(hold)                                   \
    ngx_zk_lock_types[(hold)->spec->lock.type].directive


static ngx_int_t ngx_stream_zk_lock_handler_start(ngx_stream_session_t *s,
    ngx_stream_zk_lock_srv_conf_t *sscf);
static ngx_int_t ngx_stream_zk_lock_handler_eval(ngx_stream_session_t *s,
    ngx_stream_zk_lock_ctx_t *ctx, ngx_array_t *locks);
static ngx_uint_t ngx_stream_zk_lock_handler_full(
    ngx_stream_zk_lock_ctx_t *ctx);
static ngx_int_t ngx_stream_zk_lock_handler_take(
    ngx_stream_zk_lock_ctx_t *ctx);
static void ngx_stream_zk_lock_handler_told(ngx_zk_lock_node_t *node);
static void ngx_stream_zk_lock_handler_failed(ngx_stream_zk_lock_ctx_t *ctx,
    ngx_stream_zk_lock_hold_t *hold, int error);
static void ngx_stream_zk_lock_handler_lost(ngx_stream_zk_lock_ctx_t *ctx,
    ngx_stream_zk_lock_hold_t *hold);
static void ngx_stream_zk_lock_handler_timeout(ngx_event_t *ev);
static void ngx_stream_zk_lock_handler_end(ngx_stream_zk_lock_ctx_t *ctx,
    ngx_stream_zk_lock_result_e result, ngx_int_t status);
static void ngx_stream_zk_lock_handler_unwait(ngx_stream_zk_lock_ctx_t *ctx);
static void ngx_stream_zk_lock_handler_result(ngx_stream_zk_lock_ctx_t *ctx,
    ngx_stream_zk_lock_hold_t *hold, ngx_stream_zk_lock_result_e result);
static void ngx_stream_zk_lock_handler_held(ngx_stream_zk_lock_ctx_t *ctx,
    ngx_stream_zk_lock_hold_t *hold);
static void ngx_stream_zk_lock_handler_drop(ngx_stream_zk_lock_ctx_t *ctx,
    ngx_stream_zk_lock_hold_t *hold);
static void ngx_stream_zk_lock_handler_give_back(
    ngx_stream_zk_lock_ctx_t *ctx);
static ngx_int_t ngx_stream_zk_lock_handler_watch(ngx_connection_t *c);
static ngx_uint_t ngx_stream_zk_lock_handler_gone(ngx_connection_t *c);
static void ngx_stream_zk_lock_handler_cut(ngx_connection_t *c);
static ngx_int_t ngx_stream_zk_lock_handler_cmp(const void *one,
    const void *two);
static void ngx_stream_zk_lock_handler_cleanup(void *data);


/* the connections of this worker that wait for a lock */
static ngx_uint_t  ngx_stream_zk_lock_nwaiting;


ngx_int_t
ngx_stream_zk_lock_handler(ngx_stream_session_t *s)
{
    ngx_int_t                       rc;
    ngx_connection_t               *c;
    ngx_stream_zk_lock_ctx_t       *ctx;
    ngx_stream_zk_lock_hold_t      *hold;
    ngx_stream_zk_lock_srv_conf_t  *sscf;

    sscf = ngx_stream_get_module_srv_conf(s, ngx_stream_zk_lock_module);

    if (sscf->locks == NULL) {
        return NGX_DECLINED;
    }

    c = s->connection;
    ctx = ngx_stream_get_module_ctx(s, ngx_stream_zk_lock_module);

    if (ctx == NULL) {
        rc = ngx_stream_zk_lock_handler_start(s, sscf);

        if (rc == NGX_AGAIN && ngx_stream_zk_lock_handler_watch(c) != NGX_OK)
        {
            return NGX_ERROR;
        }

        return rc;
    }

    if (ctx->done) {
        return NGX_DECLINED;
    }

    /* woken while waiting: by the client's bytes, which wait, or its close */

    if (!ngx_stream_zk_lock_handler_gone(c)) {
        return (ngx_stream_zk_lock_handler_watch(c) == NGX_OK) ? NGX_AGAIN
                                                              : NGX_ERROR;
    }

    hold = &ctx->holds[ctx->next];

    ngx_log_error(NGX_LOG_INFO, c->log, 0,
                  "client closed the connection while waiting for "
                  "%s \"%V\"", ngx_stream_zk_lock_directive(hold),
                  &hold->path);

    ngx_stream_zk_lock_handler_unwait(ctx);
    ngx_stream_zk_lock_handler_give_back(ctx);
    ngx_stream_zk_lock_handler_result(ctx, hold, NGX_STREAM_ZK_LOCK_GONE);

    return NGX_STREAM_ZK_LOCK_CLIENT_CLOSED;
}


static ngx_int_t
ngx_stream_zk_lock_handler_start(ngx_stream_session_t *s,
    ngx_stream_zk_lock_srv_conf_t *sscf)
{
    ngx_int_t                        rc;
    ngx_connection_t                *c;
    ngx_pool_cleanup_t              *cln;
    ngx_zk_lock_session_t           *zs;
    ngx_stream_zk_lock_ctx_t        *ctx;
    ngx_stream_zk_lock_main_conf_t  *smcf;

    c = s->connection;
    smcf = ngx_stream_get_module_main_conf(s, ngx_stream_zk_lock_module);
    zs = smcf->session;

    ctx = ngx_pcalloc(c->pool, sizeof(ngx_stream_zk_lock_ctx_t));
    if (ctx == NULL) {
        return NGX_ERROR;
    }

    cln = ngx_pool_cleanup_add(c->pool, 0);
    if (cln == NULL) {
        return NGX_ERROR;
    }

    cln->handler = ngx_stream_zk_lock_handler_cleanup;
    cln->data = ctx;

    ctx->session = s;
    ctx->timer.handler = ngx_stream_zk_lock_handler_timeout;
    ctx->timer.data = ctx;
    ctx->timer.log = c->log;

    ngx_stream_set_ctx(s, ctx, ngx_stream_zk_lock_module);

    rc = ngx_stream_zk_lock_handler_eval(s, ctx, sscf->locks);

    if (rc == NGX_ERROR) {
        return NGX_ERROR;
    }

    if (rc == NGX_DECLINED) {
        /* ctx->next: the lock whose path or weight is invalid */
        ngx_stream_zk_lock_handler_result(ctx, &ctx->holds[ctx->next],
                                          NGX_STREAM_ZK_LOCK_REJECTED);
        return NGX_STREAM_BAD_REQUEST;
    }

    /*
     * zk_lock_fail open: no waiting when ZooKeeper is known to be out of
     * reach; closed: none either, the connection is refused at once
     */

    if (ngx_zk_lock_session_gone(zs) || (zs->down && sscf->fail_open)) {
        ngx_log_error(NGX_LOG_ERR, c->log, 0,
                      "%s \"%V\" %s: no zookeeper connection",
                      ngx_stream_zk_lock_directive(&ctx->holds[0]),
                      &ctx->holds[0].path,
                      sscf->fail_open ? "bypassed" : "refused");

        if (sscf->fail_open) {
            ngx_stream_zk_lock_handler_result(ctx, &ctx->holds[0],
                                              NGX_STREAM_ZK_LOCK_BYPASSED);
            ctx->done = 1;
            return NGX_DECLINED;
        }

        ngx_stream_zk_lock_handler_result(ctx, &ctx->holds[0],
                                          NGX_STREAM_ZK_LOCK_ERROR);
        return NGX_STREAM_SERVICE_UNAVAILABLE;
    }

    if (ngx_stream_zk_lock_handler_full(ctx)) {
        ngx_stream_zk_lock_handler_result(ctx, &ctx->holds[ctx->next],
                                          NGX_STREAM_ZK_LOCK_REJECTED);
        return NGX_STREAM_SERVICE_UNAVAILABLE;
    }

    ctx->started = ngx_current_msec;

    return ngx_stream_zk_lock_handler_take(ctx);
}


/* the paths and weights of the connection's locks, sorted by path */

static ngx_int_t
ngx_stream_zk_lock_handler_eval(ngx_stream_session_t *s,
    ngx_stream_zk_lock_ctx_t *ctx, ngx_array_t *locks)
{
    ngx_int_t                        rc;
    ngx_uint_t                       i, top;
    ngx_stream_zk_lock_spec_t       *spec;
    ngx_stream_zk_lock_hold_t       *hold;
    ngx_stream_zk_lock_main_conf_t  *smcf;

    smcf = ngx_stream_get_module_main_conf(s, ngx_stream_zk_lock_module);

    ctx->nholds = locks->nelts;
    ctx->holds = ngx_pcalloc(s->connection->pool,
                             locks->nelts * sizeof(ngx_stream_zk_lock_hold_t));
    if (ctx->holds == NULL) {
        return NGX_ERROR;
    }

    spec = locks->elts;

    /* "/zookeeper" is the server's own, unless below a chroot */
    top = (smcf->zk.chroot.len == 0);

    for (i = 0; i < locks->nelts; i++) {
        hold = &ctx->holds[i];
        hold->spec = &spec[i];
        ctx->next = i;

        rc = ngx_stream_zk_lock_variables_path(s, &spec[i], top, &hold->path);
        if (rc != NGX_OK) {
            return rc;
        }

        rc = ngx_stream_zk_lock_variables_weight(s, &spec[i], &hold->weight);
        if (rc != NGX_OK) {
            return rc;
        }
    }

    ctx->next = 0;

    /* in one order in every worker, as in "http": no two wait for each other */

    ngx_sort(ctx->holds, ctx->nholds, sizeof(ngx_stream_zk_lock_hold_t),
             ngx_stream_zk_lock_handler_cmp);

    return NGX_OK;
}


/* zk_lock_max_waiting, and max_waiting= of a lock */

static ngx_uint_t
ngx_stream_zk_lock_handler_full(ngx_stream_zk_lock_ctx_t *ctx)
{
    ngx_uint_t                       i, n;
    ngx_connection_t                *c;
    ngx_zk_lock_session_t           *zs;
    ngx_stream_zk_lock_hold_t       *hold;
    ngx_stream_zk_lock_main_conf_t  *smcf;

    c = ctx->session->connection;
    smcf = ngx_stream_get_module_main_conf(ctx->session,
                                           ngx_stream_zk_lock_module);
    zs = smcf->session;

    n = smcf->max_waiting ? smcf->max_waiting : ngx_cycle->connection_n;

    if (ngx_stream_zk_lock_nwaiting >= n) {
        ngx_log_error(NGX_LOG_ERR, c->log, 0,
                      "%s \"%V\" refused: %ui connections wait in the "
                      "worker (zk_lock_max_waiting)",
                      ngx_stream_zk_lock_directive(&ctx->holds[0]),
                      &ctx->holds[0].path, ngx_stream_zk_lock_nwaiting);
        return 1;
    }

    for (i = 0; i < ctx->nholds; i++) {
        hold = &ctx->holds[i];

        if (hold->spec->lock.max_waiting == 0) {
            continue;
        }

        n = hold->spec->lock.v2 ? ngx_zk_lock_semv2_waiting(zs, &hold->path)
                                : ngx_zk_lock_waiting(zs, &hold->path);

        if (n >= hold->spec->lock.max_waiting) {
            ctx->next = i;

            ngx_log_error(NGX_LOG_ERR, c->log, 0,
                          "%s \"%V\" refused: %ui connections wait for it "
                          "in the worker (max_waiting)",
                          ngx_stream_zk_lock_directive(hold), &hold->path, n);
            return 1;
        }
    }

    return 0;
}


/*
 * The locks from ctx->next on: NGX_DECLINED once all are held, NGX_AGAIN
 * while one is waited for
 */

static ngx_int_t
ngx_stream_zk_lock_handler_take(ngx_stream_zk_lock_ctx_t *ctx)
{
    u_char                          *p;
    ngx_str_t                        info;
    ngx_msec_t                       timeout;
    ngx_connection_t                *c;
    ngx_zk_lock_node_t              *node;
    ngx_stream_zk_lock_hold_t       *hold;
    ngx_stream_zk_lock_srv_conf_t   *sscf;
    ngx_stream_zk_lock_main_conf_t  *smcf;

    c = ctx->session->connection;
    sscf = ngx_stream_get_module_srv_conf(ctx->session,
                                          ngx_stream_zk_lock_module);
    smcf = ngx_stream_get_module_main_conf(ctx->session,
                                           ngx_stream_zk_lock_module);

    /* who holds it, for an operator who reads the node */

    p = ngx_pnalloc(c->pool, NGX_STREAM_ZK_LOCK_INFO_LEN);
    if (p == NULL) {
        return NGX_ERROR;
    }

    info.data = p;
    info.len = ngx_slprintf(p, p + NGX_STREAM_ZK_LOCK_INFO_LEN,
                            "%V pid %P since %V stream %V",
                            &ngx_cycle->hostname, ngx_pid,
                            &ngx_cached_http_log_iso8601, &c->addr_text)
               - p;

    for ( /* void */ ; ctx->next < ctx->nholds; ctx->next++) {
        hold = &ctx->holds[ctx->next];

        timeout = (hold->spec->lock.timeout != NGX_CONF_UNSET_MSEC)
                  ? hold->spec->lock.timeout : sscf->timeout;

        node = ngx_zk_lock_take(smcf->session, &hold->spec->lock,
                                &hold->path, hold->weight, &info,
                                timeout == 0,
                                ngx_stream_zk_lock_handler_told, NULL, ctx,
                                c->log);
        if (node == NULL) {
            return NGX_ERROR;
        }

        hold->node = node;

        if (node->state == NGX_ZK_LOCK_HELD) {
            /* a lease that the worker kept: no wait, no ZooKeeper call */
            ngx_stream_zk_lock_handler_held(ctx, hold);
            continue;
        }

        /* a try (timeout=0) waits for the first listing, at most this */

        if (timeout == 0) {
            timeout = smcf->zk.session_timeout;
        }

        ctx->waiting = 1;
        ngx_stream_zk_lock_nwaiting++;
        ngx_add_timer(&ctx->timer, timeout);

        ngx_zk_lock_stats_gauge(smcf->stats, hold->spec->stat,
                                NGX_ZK_LOCK_STATS_WAITING, 1);

        ngx_log_debug2(NGX_LOG_DEBUG_STREAM, c->log, 0,
                       "%s \"%V\": waiting",
                       ngx_stream_zk_lock_directive(hold), &hold->path);

        return NGX_AGAIN;
    }

    ctx->done = 1;
    ctx->result = NGX_STREAM_ZK_LOCK_ACQUIRED;
    ctx->wait_time = ngx_current_msec - ctx->started;

    return NGX_DECLINED;
}


/* a node's news: the one waited for, or one that was held */

static void
ngx_stream_zk_lock_handler_told(ngx_zk_lock_node_t *node)
{
    ngx_int_t                   rc;
    ngx_uint_t                  i;
    ngx_stream_zk_lock_ctx_t   *ctx;
    ngx_stream_zk_lock_hold_t  *hold;

    ctx = node->data;

    for (i = 0; i < ctx->nholds; i++) {
        if (ctx->holds[i].node == node) {
            break;
        }
    }

    if (i == ctx->nholds) {
        return;
    }

    hold = &ctx->holds[i];

    if (!ctx->waiting || i != ctx->next) {
        ngx_stream_zk_lock_handler_lost(ctx, hold);
        return;
    }

    /* a node that came to hold in jeopardy is not had */

    if (node->state != NGX_ZK_LOCK_HELD
        || node->error == NGX_ZK_LOCK_JEOPARDY)
    {
        ngx_stream_zk_lock_handler_failed(ctx, hold, node->error);
        return;
    }

    ngx_stream_zk_lock_handler_unwait(ctx);
    ngx_stream_zk_lock_handler_held(ctx, hold);
    ctx->next++;

    rc = ngx_stream_zk_lock_handler_take(ctx);

    if (rc == NGX_AGAIN) {
        return;
    }

    if (rc == NGX_ERROR) {
        ngx_stream_zk_lock_handler_end(ctx, NGX_STREAM_ZK_LOCK_ERROR,
                                       NGX_STREAM_INTERNAL_SERVER_ERROR);
        return;
    }

    ngx_log_error(NGX_LOG_INFO, ctx->session->connection->log, 0,
                  "%s \"%V\" acquired after %Mms",
                  ngx_stream_zk_lock_directive(hold), &hold->path,
                  ctx->wait_time);

    ngx_stream_core_run_phases(ctx->session);
}


/* the wait failed: ZooKeeper said no, or a try found the lock taken */

static void
ngx_stream_zk_lock_handler_failed(ngx_stream_zk_lock_ctx_t *ctx,
    ngx_stream_zk_lock_hold_t *hold, int error)
{
    ngx_log_t                      *log;
    ngx_stream_zk_lock_srv_conf_t  *sscf;

    log = ctx->session->connection->log;
    sscf = ngx_stream_get_module_srv_conf(ctx->session,
                                          ngx_stream_zk_lock_module);

    ngx_stream_zk_lock_handler_unwait(ctx);

    if (error == NGX_ZK_LOCK_BUSY) {
        ngx_log_error(sscf->log_level, log, 0,
                      "%s \"%V\" not acquired: taken",
                      ngx_stream_zk_lock_directive(hold), &hold->path);

        ngx_stream_zk_lock_handler_end(ctx, NGX_STREAM_ZK_LOCK_TIMEOUT,
                                       NGX_STREAM_SERVICE_UNAVAILABLE);
        return;
    }

    if (sscf->fail_open && ngx_zk_lock_session_error(error)) {
        ngx_log_error(NGX_LOG_ERR, log, 0,
                      "%s \"%V\" bypassed: %s",
                      ngx_stream_zk_lock_directive(hold), &hold->path,
                      zerror(error));

        ngx_stream_zk_lock_handler_give_back(ctx);
        ngx_stream_zk_lock_handler_result(ctx, hold,
                                          NGX_STREAM_ZK_LOCK_BYPASSED);
        ctx->done = 1;

        ngx_stream_core_run_phases(ctx->session);
        return;
    }

    if (error == NGX_ZK_LOCK_REVOKED) {
        ngx_log_error(NGX_LOG_WARN, log, 0,
                      "%s \"%V\" revoked while waiting",
                      ngx_stream_zk_lock_directive(hold), &hold->path);

        ngx_stream_zk_lock_handler_end(ctx, NGX_STREAM_ZK_LOCK_REVOKED,
                                       NGX_STREAM_SERVICE_UNAVAILABLE);
        return;
    }

    ngx_log_error(NGX_LOG_ERR, log, 0,
                  "%s \"%V\" failed (%d: %s)",
                  ngx_stream_zk_lock_directive(hold), &hold->path,
                  error, zerror(error));

    ngx_stream_zk_lock_handler_end(ctx, NGX_STREAM_ZK_LOCK_ERROR,
                                   NGX_STREAM_SERVICE_UNAVAILABLE);
}


/*
 * A held lock is gone, or may be: the session went unheard (jeopardy),
 * expired, or Curator's Revoker asked for it
 */

static void
ngx_stream_zk_lock_handler_lost(ngx_stream_zk_lock_ctx_t *ctx,
    ngx_stream_zk_lock_hold_t *hold)
{
    int                             error;
    ngx_uint_t                      abort, level;
    ngx_connection_t               *c;
    ngx_stream_zk_lock_srv_conf_t  *sscf;

    c = ctx->session->connection;
    sscf = ngx_stream_get_module_srv_conf(ctx->session,
                                          ngx_stream_zk_lock_module);
    error = hold->node->error;
    abort = sscf->lost_abort || error == NGX_ZK_LOCK_REVOKED;

    if (error == NGX_ZK_LOCK_JEOPARDY && !abort) {

        /*
         * zk_lock_lost finish: the connection goes on, and while the
         * session lives nobody else may have the lock; its node goes
         * when the connection ends, or with the session
         */

        ngx_log_error(NGX_LOG_ERR, c->log, 0,
                      "%s \"%V\" lost while held: no word from zookeeper, "
                      "the session may expire, its node is kept until "
                      "the connection ends",
                      ngx_stream_zk_lock_directive(hold), &hold->path);

        ngx_stream_zk_lock_handler_result(ctx, hold, NGX_STREAM_ZK_LOCK_LOST);
        return;
    }

    level = (error == NGX_ZK_LOCK_REVOKED) ? NGX_LOG_WARN : NGX_LOG_ERR;

    ngx_log_error(level, c->log, 0, "%s \"%V\" %s while held%s",
                  ngx_stream_zk_lock_directive(hold), &hold->path,
                  error == NGX_ZK_LOCK_REVOKED ? "revoked" : "lost",
                  abort ? ", closing the connection" : "");

    ngx_stream_zk_lock_handler_drop(ctx, hold);
    ngx_stream_zk_lock_handler_result(ctx, hold,
                                      (error == NGX_ZK_LOCK_REVOKED)
                                      ? NGX_STREAM_ZK_LOCK_REVOKED
                                      : NGX_STREAM_ZK_LOCK_LOST);

    if (!abort) {
        return;
    }

    if (!ctx->done) {
        /* still waiting for a later lock: nothing runs upstream yet */
        ngx_stream_zk_lock_handler_unwait(ctx);
        ngx_stream_zk_lock_handler_give_back(ctx);
        ngx_stream_finalize_session(ctx->session,
                                    NGX_STREAM_SERVICE_UNAVAILABLE);
        return;
    }

    ngx_stream_zk_lock_handler_cut(c);
}


static void
ngx_stream_zk_lock_handler_timeout(ngx_event_t *ev)
{
    ngx_log_t                       *log;
    ngx_stream_zk_lock_ctx_t        *ctx;
    ngx_stream_zk_lock_hold_t       *hold;
    ngx_stream_zk_lock_srv_conf_t   *sscf;
    ngx_stream_zk_lock_main_conf_t  *smcf;

    ctx = ev->data;
    hold = &ctx->holds[ctx->next];
    log = ctx->session->connection->log;

    sscf = ngx_stream_get_module_srv_conf(ctx->session,
                                          ngx_stream_zk_lock_module);
    smcf = ngx_stream_get_module_main_conf(ctx->session,
                                           ngx_stream_zk_lock_module);

    ngx_stream_zk_lock_handler_unwait(ctx);

    if (smcf->session->connected) {
        ngx_log_error(sscf->log_level, log, 0,
                      "%s \"%V\" not acquired in %Mms",
                      ngx_stream_zk_lock_directive(hold), &hold->path,
                      ctx->wait_time);

        ngx_stream_zk_lock_handler_end(ctx, NGX_STREAM_ZK_LOCK_TIMEOUT,
                                       NGX_STREAM_SERVICE_UNAVAILABLE);
        return;
    }

    ngx_log_error(NGX_LOG_ERR, log, 0,
                  "%s \"%V\" not acquired in %Mms: no zookeeper connection",
                  ngx_stream_zk_lock_directive(hold), &hold->path,
                  ctx->wait_time);

    if (sscf->fail_open) {
        ngx_stream_zk_lock_handler_give_back(ctx);
        ngx_stream_zk_lock_handler_result(ctx, hold,
                                          NGX_STREAM_ZK_LOCK_BYPASSED);
        ctx->done = 1;

        ngx_stream_core_run_phases(ctx->session);
        return;
    }

    ngx_stream_zk_lock_handler_end(ctx, NGX_STREAM_ZK_LOCK_ERROR,
                                   NGX_STREAM_SERVICE_UNAVAILABLE);
}


/* the wait ends without the locks: the connection is closed */

static void
ngx_stream_zk_lock_handler_end(ngx_stream_zk_lock_ctx_t *ctx,
    ngx_stream_zk_lock_result_e result, ngx_int_t status)
{
    ngx_stream_zk_lock_handler_give_back(ctx);
    ngx_stream_zk_lock_handler_result(ctx, &ctx->holds[ctx->next], result);

    ngx_stream_finalize_session(ctx->session, status);
}


static void
ngx_stream_zk_lock_handler_unwait(ngx_stream_zk_lock_ctx_t *ctx)
{
    ngx_stream_zk_lock_main_conf_t  *smcf;

    if (!ctx->waiting) {
        return;
    }

    ctx->waiting = 0;
    ngx_stream_zk_lock_nwaiting--;
    ctx->wait_time = ngx_current_msec - ctx->started;

    smcf = ngx_stream_get_module_main_conf(ctx->session,
                                           ngx_stream_zk_lock_module);

    ngx_zk_lock_stats_gauge(smcf->stats, ctx->holds[ctx->next].spec->stat,
                            NGX_ZK_LOCK_STATS_WAITING, -1);

    if (ctx->timer.timer_set) {
        ngx_del_timer(&ctx->timer);
    }
}


static void
ngx_stream_zk_lock_handler_give_back(ngx_stream_zk_lock_ctx_t *ctx)
{
    ngx_uint_t  i;

    for (i = 0; i < ctx->nholds; i++) {
        ngx_stream_zk_lock_handler_drop(ctx, &ctx->holds[i]);
    }
}


/* a lock held, or waited for, is let go: counted no more as held */

static void
ngx_stream_zk_lock_handler_drop(ngx_stream_zk_lock_ctx_t *ctx,
    ngx_stream_zk_lock_hold_t *hold)
{
    ngx_stream_zk_lock_main_conf_t  *smcf;

    if (hold->counted) {
        hold->counted = 0;

        smcf = ngx_stream_get_module_main_conf(ctx->session,
                                               ngx_stream_zk_lock_module);

        ngx_zk_lock_stats_gauge(smcf->stats, hold->spec->stat,
                                NGX_ZK_LOCK_STATS_HELD, -1);
    }

    if (hold->node) {
        ngx_zk_lock_release(hold->node);
        hold->node = NULL;
    }
}


static void
ngx_stream_zk_lock_handler_held(ngx_stream_zk_lock_ctx_t *ctx,
    ngx_stream_zk_lock_hold_t *hold)
{
    ngx_stream_zk_lock_main_conf_t  *smcf;

    smcf = ngx_stream_get_module_main_conf(ctx->session,
                                           ngx_stream_zk_lock_module);

    hold->counted = 1;

    ngx_zk_lock_stats_gauge(smcf->stats, hold->spec->stat,
                            NGX_ZK_LOCK_STATS_HELD, 1);
    ngx_zk_lock_stats_count(smcf->stats, hold->spec->stat,
                            NGX_ZK_LOCK_STATS_ACQUIRED);
}


/* $zk_lock_status, and the count of the lock it happened at */

static void
ngx_stream_zk_lock_handler_result(ngx_stream_zk_lock_ctx_t *ctx,
    ngx_stream_zk_lock_hold_t *hold, ngx_stream_zk_lock_result_e result)
{
    ngx_stream_zk_lock_main_conf_t  *smcf;

    smcf = ngx_stream_get_module_main_conf(ctx->session,
                                           ngx_stream_zk_lock_module);

    ctx->result = result;

    /* the results in the order of the core's counts, after "none" */
    ngx_zk_lock_stats_count(smcf->stats, hold->spec->stat, result - 1);
}


/*
 * The client's close is heard while it waits: epoll arms a stream
 * connection's read event only when asked.  A level-triggered method
 * would wake the worker again and again while the client's bytes wait
 * unread: it listens only while there are none.
 */

static ngx_int_t
ngx_stream_zk_lock_handler_watch(ngx_connection_t *c)
{
    ngx_event_t  *rev;

    rev = c->read;

    if (ngx_event_flags & NGX_USE_CLEAR_EVENT) {
        return rev->active ? NGX_OK
                           : ngx_add_event(rev, NGX_READ_EVENT,
                                           NGX_CLEAR_EVENT);
    }

    if (rev->ready) {
        return rev->active ? ngx_del_event(rev, NGX_READ_EVENT, 0) : NGX_OK;
    }

    return ngx_handle_read_event(rev, 0);
}


/*
 * The client closed, or reset, while its bytes wait: a peek tells, as
 * ngx_http_test_reading() does; a close behind bytes is seen by epoll
 */

static ngx_uint_t
ngx_stream_zk_lock_handler_gone(ngx_connection_t *c)
{
    u_char     buf[1];
    ssize_t    n;
    ngx_err_t  err;

#if (NGX_HAVE_EPOLLRDHUP)

    if ((ngx_event_flags & NGX_USE_EPOLL_EVENT) && ngx_use_epoll_rdhup
        && c->read->pending_eof)
    {
        return 1;
    }

#endif

    n = recv(c->fd, buf, 1, MSG_PEEK);

    if (n > 0) {
        return 0;
    }

    if (n == -1) {
        err = ngx_socket_errno;

        if (err == NGX_EAGAIN || err == NGX_EINTR) {
            return 0;
        }
    }

    return 1;
}


/*
 * zk_lock_lost abort: the connection is cut the way a client's close
 * cuts it, by whatever handles its events (proxy_pass closes upstream
 * too); finalizing it from here would leave the upstream open
 */

static void
ngx_stream_zk_lock_handler_cut(ngx_connection_t *c)
{
    if (ngx_shutdown_socket(c->fd, SHUT_RDWR) == -1) {
        ngx_connection_error(c, ngx_socket_errno,
                             ngx_shutdown_socket_n " failed");
    }

    c->read->ready = 1;

    if (!c->read->posted) {
        ngx_post_event(c->read, &ngx_posted_events);
    }
}


static ngx_int_t
ngx_stream_zk_lock_handler_cmp(const void *one, const void *two)
{
    const ngx_stream_zk_lock_hold_t  *a = one;
    const ngx_stream_zk_lock_hold_t  *b = two;

    ngx_int_t  rc;

    rc = ngx_memn2cmp(a->path.data, b->path.data, a->path.len, b->path.len);

    if (rc == 0) {
        rc = (ngx_int_t) b->spec->lock.type - (ngx_int_t) a->spec->lock.type;
    }

    return rc;
}


/* the connection's pool goes, however the session ended: so do its nodes */

static void
ngx_stream_zk_lock_handler_cleanup(void *data)
{
    ngx_stream_zk_lock_ctx_t  *ctx = data;

    ngx_stream_zk_lock_handler_unwait(ctx);
    ngx_stream_zk_lock_handler_give_back(ctx);
}
