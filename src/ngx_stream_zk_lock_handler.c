
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_stream.h>

#include "ngx_stream_zk_lock_handler.h"
#include "ngx_stream_zk_lock_variables.h"


/*
 * A connection at its locks, in place of its server's content handler,
 * which it calls once it holds them.  The waits are the core's
 * (ngx_zk_lock_gate.c); the layer keeps what TCP needs:
 *
 *   start: the paths and weights from variables, the gate started
 *     held at once, or let through --> the content handler (proxy_pass)
 *     refused at once --> closed: 503 (400 for a bad path or weight)
 *     waiting --> the client's close is watched
 *   the gate's handler: all held --> the content handler
 *                       not --> closed: 503
 *   the client closes while waiting --> the gate is cancelled: 499
 *   a held lock lost under "zk_lock_lost abort" --> the connection cut
 *   the connection's pool goes, however the session ended --> the nodes
 */


#define NGX_STREAM_ZK_LOCK_CLIENT_CLOSED  499
#define NGX_STREAM_ZK_LOCK_INFO_LEN       256


static ngx_int_t ngx_stream_zk_lock_handler_start(ngx_stream_session_t *s,
    ngx_stream_zk_lock_srv_conf_t *sscf);
static ngx_int_t ngx_stream_zk_lock_handler_eval(ngx_stream_session_t *s,
    ngx_zk_lock_gate_t *gate, ngx_array_t *locks);
static void ngx_stream_zk_lock_handler_end(ngx_zk_lock_gate_t *gate);
static void ngx_stream_zk_lock_handler_cut(ngx_zk_lock_gate_t *gate);
static ngx_int_t ngx_stream_zk_lock_handler_watch(ngx_connection_t *c);
static ngx_uint_t ngx_stream_zk_lock_handler_gone(ngx_connection_t *c);
static void ngx_stream_zk_lock_handler_cleanup(void *data);


void
ngx_stream_zk_lock_handler(ngx_stream_session_t *s)
{
    ngx_int_t                       rc;
    ngx_connection_t               *c;
    ngx_zk_lock_gate_t             *gate;
    ngx_zk_lock_gate_hold_t        *hold;
    ngx_stream_zk_lock_ctx_t       *ctx;
    ngx_stream_zk_lock_srv_conf_t  *sscf;

    c = s->connection;
    sscf = ngx_stream_get_module_srv_conf(s, ngx_stream_zk_lock_module);
    ctx = ngx_stream_get_module_ctx(s, ngx_stream_zk_lock_module);

    if (ctx == NULL) {
        rc = ngx_stream_zk_lock_handler_start(s, sscf);

        if (rc == NGX_AGAIN) {
            if (ngx_stream_zk_lock_handler_watch(c) != NGX_OK) {
                ngx_stream_finalize_session(s,
                                            NGX_STREAM_INTERNAL_SERVER_ERROR);
            }

            return;
        }

        if (rc == NGX_OK) {
            sscf->content(s);
            return;
        }

        ngx_stream_finalize_session(s, (rc == NGX_ERROR)
                                       ? NGX_STREAM_INTERNAL_SERVER_ERROR
                                       : (ngx_uint_t) rc);
        return;
    }

    gate = &ctx->gate;

    if (gate->done) {
        return;
    }

    /* woken while waiting: by the client's bytes, which wait, or its close */

    if (!ngx_stream_zk_lock_handler_gone(c)) {
        if (ngx_stream_zk_lock_handler_watch(c) != NGX_OK) {
            ngx_stream_finalize_session(s, NGX_STREAM_INTERNAL_SERVER_ERROR);
        }

        return;
    }

    hold = &gate->holds[gate->next];

    ngx_log_error(NGX_LOG_INFO, c->log, 0,
                  "client closed the connection while waiting for "
                  "%s \"%V\"", ngx_zk_lock_gate_directive(hold),
                  &hold->path);

    ngx_zk_lock_gate_cancel(gate);

    ngx_stream_finalize_session(s, NGX_STREAM_ZK_LOCK_CLIENT_CLOSED);
}


static ngx_int_t
ngx_stream_zk_lock_handler_start(ngx_stream_session_t *s,
    ngx_stream_zk_lock_srv_conf_t *sscf)
{
    u_char                          *p;
    ngx_int_t                        rc;
    ngx_connection_t                *c;
    ngx_pool_cleanup_t              *cln;
    ngx_zk_lock_gate_t              *gate;
    ngx_stream_zk_lock_ctx_t        *ctx;
    ngx_stream_zk_lock_main_conf_t  *smcf;

    c = s->connection;
    smcf = ngx_stream_get_module_main_conf(s, ngx_stream_zk_lock_module);

    ctx = ngx_pcalloc(c->pool, sizeof(ngx_stream_zk_lock_ctx_t));
    if (ctx == NULL) {
        return NGX_ERROR;
    }

    p = ngx_pnalloc(c->pool, NGX_STREAM_ZK_LOCK_INFO_LEN);
    if (p == NULL) {
        return NGX_ERROR;
    }

    cln = ngx_pool_cleanup_add(c->pool, 0);
    if (cln == NULL) {
        return NGX_ERROR;
    }

    cln->handler = ngx_stream_zk_lock_handler_cleanup;
    cln->data = ctx;

    ctx->session = s;
    ngx_stream_set_ctx(s, ctx, ngx_stream_zk_lock_module);

    gate = &ctx->gate;

    gate->session = smcf->session;
    gate->stats = smcf->stats;
    gate->timeout = sscf->timeout;
    gate->log_level = sscf->log_level;
    gate->max_waiting = smcf->max_waiting;
    gate->waiters = &smcf->waiters;
    gate->fail_open = sscf->fail_open;
    gate->fail_local = sscf->fail_local;
    gate->lost_abort = sscf->lost_abort;
    gate->handler = ngx_stream_zk_lock_handler_end;
    gate->lost = ngx_stream_zk_lock_handler_cut;
    gate->data = ctx;
    gate->log = c->log;
    gate->pool = c->pool;
    gate->noun = "connection";
    gate->cut = "closing the connection";

    /* who holds it, for an operator who reads the node */

    gate->info.data = p;
    gate->info.len = ngx_slprintf(p, p + NGX_STREAM_ZK_LOCK_INFO_LEN,
                                  "%V pid %P since %V stream %V",
                                  &ngx_cycle->hostname, ngx_pid,
                                  &ngx_cached_http_log_iso8601,
                                  &c->addr_text)
                     - p;

    rc = ngx_stream_zk_lock_handler_eval(s, gate, sscf->locks);

    if (rc == NGX_ERROR) {
        return NGX_ERROR;
    }

    if (rc == NGX_DECLINED) {
        /* gate->next: the lock whose path or weight is invalid */
        ngx_zk_lock_gate_refuse(gate, gate->next);
        return NGX_STREAM_BAD_REQUEST;
    }

    rc = ngx_zk_lock_gate_start(gate);

    if (rc == NGX_DECLINED) {
        return NGX_STREAM_SERVICE_UNAVAILABLE;
    }

    return rc;                          /* NGX_OK, NGX_AGAIN, NGX_ERROR */
}


/* the paths and weights of the connection's locks, in the gate's order */

static ngx_int_t
ngx_stream_zk_lock_handler_eval(ngx_stream_session_t *s,
    ngx_zk_lock_gate_t *gate, ngx_array_t *locks)
{
    ngx_int_t                        rc;
    ngx_uint_t                       i, top;
    ngx_zk_lock_gate_hold_t         *hold;
    ngx_stream_zk_lock_spec_t       *spec;
    ngx_stream_zk_lock_main_conf_t  *smcf;

    smcf = ngx_stream_get_module_main_conf(s, ngx_stream_zk_lock_module);

    gate->nholds = locks->nelts;
    gate->holds = ngx_pcalloc(s->connection->pool,
                              locks->nelts * sizeof(ngx_zk_lock_gate_hold_t));
    if (gate->holds == NULL) {
        return NGX_ERROR;
    }

    spec = locks->elts;

    /* "/zookeeper" is the server's own, unless below a chroot */
    top = (smcf->zk.chroot.len == 0);

    for (i = 0; i < locks->nelts; i++) {
        hold = &gate->holds[i];
        hold->lock = &spec[i].lock;
        hold->stat = spec[i].stat;
        hold->local.index = spec[i].local;
        gate->next = i;

        rc = ngx_stream_zk_lock_variables_path(s, &spec[i], top, &hold->path);
        if (rc != NGX_OK) {
            return rc;
        }

        rc = ngx_stream_zk_lock_variables_weight(s, &spec[i], &hold->weight);
        if (rc != NGX_OK) {
            return rc;
        }

        rc = ngx_stream_zk_lock_variables_flow(s, &spec[i], &hold->flow);
        if (rc != NGX_OK) {
            return rc;
        }
    }

    gate->next = 0;

    ngx_sort(gate->holds, gate->nholds, sizeof(ngx_zk_lock_gate_hold_t),
             ngx_zk_lock_gate_cmp);

    return NGX_OK;
}


/* the wait is over: the phases go on, or the connection is closed */

static void
ngx_stream_zk_lock_handler_end(ngx_zk_lock_gate_t *gate)
{
    ngx_stream_zk_lock_ctx_t       *ctx;
    ngx_stream_zk_lock_srv_conf_t  *sscf;

    ctx = gate->data;

    if (gate->done) {
        sscf = ngx_stream_get_module_srv_conf(ctx->session,
                                              ngx_stream_zk_lock_module);
        sscf->content(ctx->session);
        return;
    }

    ngx_stream_finalize_session(ctx->session, NGX_STREAM_SERVICE_UNAVAILABLE);
}


/*
 * zk_lock_lost abort: the connection is cut the way a client's close
 * cuts it, by whatever handles its events (proxy_pass closes upstream
 * too); finalizing it from here would leave the upstream open
 */

static void
ngx_stream_zk_lock_handler_cut(ngx_zk_lock_gate_t *gate)
{
    ngx_connection_t          *c;
    ngx_stream_zk_lock_ctx_t  *ctx;

    ctx = gate->data;
    c = ctx->session->connection;

    if (ngx_shutdown_socket(c->fd, SHUT_RDWR) == -1) {
        ngx_connection_error(c, ngx_socket_errno,
                             ngx_shutdown_socket_n " failed");
    }

    c->read->ready = 1;

    if (!c->read->posted) {
        ngx_post_event(c->read, &ngx_posted_events);
    }
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

    if (c->type != SOCK_STREAM) {
        /* a datagram's session: nothing closes, its socket the listener's */
        return NGX_OK;
    }

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

    if (c->type != SOCK_STREAM) {
        return 0;
    }

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


/* the connection's pool goes, however the session ended: so do its nodes */

static void
ngx_stream_zk_lock_handler_cleanup(void *data)
{
    ngx_stream_zk_lock_ctx_t  *ctx = data;

    if (ctx->gate.holds) {
        ngx_zk_lock_gate_done(&ctx->gate);
    }
}
