
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>

#include "ngx_zk_lock_broker.h"
#include "ngx_zk_lock_take.h"


/*
 * A worker's ask, from reading it to the end of its node:
 *
 *  accepted        whole          taken
 *  ---------> READING --------> ASKED -------> (the node's moves, each told)
 *     |          |                |
 *     |          | bad, or closed | closed by the worker
 *     v          v                v
 *  "n", closed: closed         released, closed
 *  no session
 *
 * The broker listens only while its session is usable (reach()): one
 * refused by ZooKeeper, or in jeopardy, takes no ask, and its siblings ask
 * another broker.
 *
 * A kept lease lent to the worker (see ngx_zk_lock_remote.c) is
 * recalled with "r\n" when the pool wants it back, and when this worker
 * exits; the worker answers "b\n" if a request runs on it (it comes back
 * when the request ends), and says "e\n" before it closes one that it
 * kept for "keep" unused.
 */


/* a broker keeps the worker alive while it holds for others, ms */
#define NGX_ZK_LOCK_BROKER_ALIVE  86400000

/* the trust in the session is told this often, a part of its timeout */
#define NGX_ZK_LOCK_BROKER_BEATS  8


struct ngx_zk_lock_broker_s {
    ngx_zk_lock_session_t        *session;
    ngx_array_t                  *specs;      /* the layer's, by their id */
    ngx_str_t                     layer;      /* names the sockets */
    ngx_uint_t                    generation;
    ngx_connection_t             *listener;   /* while the session is usable */
    ngx_queue_t                   asks;
    ngx_event_t                   beater;
};


typedef struct {
    ngx_queue_t                   queue;      /* in the broker's asks */
    ngx_zk_lock_broker_t         *broker;
    ngx_connection_t             *conn;
    ngx_zk_lock_node_t           *node;       /* once asked */
    size_t                        len;        /* read */
    size_t                        want;       /* the whole ask, once known */
    u_char                        buf[NGX_ZK_LOCK_BROKER_HEAD
                                      + NGX_ZK_LOCK_MAX_PATH
                                      + NGX_ZK_LOCK_BROKER_INFO];
} ngx_zk_lock_ask_t;


static ngx_int_t ngx_zk_lock_broker_listen(ngx_zk_lock_broker_t *b);
static void ngx_zk_lock_broker_reach(ngx_zk_lock_session_t *s);
static void ngx_zk_lock_broker_accept(ngx_event_t *ev);
static void ngx_zk_lock_broker_read(ngx_event_t *rev);
static ngx_int_t ngx_zk_lock_broker_ask(ngx_zk_lock_ask_t *ask);
static ngx_int_t ngx_zk_lock_broker_tell(ngx_zk_lock_ask_t *ask);
static void ngx_zk_lock_broker_told(ngx_zk_lock_node_t *node);
static void ngx_zk_lock_broker_recall(ngx_zk_lock_node_t *node);
static void ngx_zk_lock_broker_heard(ngx_zk_lock_ask_t *ask,
    u_char *p, ssize_t n);
static ngx_int_t ngx_zk_lock_broker_exiting(ngx_zk_lock_ask_t *ask);
static u_char *ngx_zk_lock_broker_trust(ngx_zk_lock_broker_t *b, u_char *p);
static void ngx_zk_lock_broker_beat(ngx_event_t *ev);
static void ngx_zk_lock_broker_alive(ngx_event_t *wev);
static void ngx_zk_lock_broker_close(ngx_zk_lock_ask_t *ask);


/* the master's, drawn once and kept across reloads: see broker_addr() */
static uint64_t                     ngx_zk_lock_broker_tokens[2];


/*
 * In the master, at configuration: the token that names its brokers.
 * A master's pid names nothing for sure: the masters of containers that
 * share a network namespace (docker --network host, the containers of a
 * Kubernetes pod) are each PID 1, and share the abstract unix sockets too.
 */

ngx_int_t
ngx_zk_lock_broker_token(ngx_log_t *log)
{
    if (ngx_zk_lock_broker_tokens[0] | ngx_zk_lock_broker_tokens[1]) {
        return NGX_OK;
    }

    return ngx_zk_lock_session_random(log, ngx_zk_lock_broker_tokens,
                                      sizeof(ngx_zk_lock_broker_tokens));
}


/*
 * "\0ngx_zk_lock/<token>/<layer>/<configuration>/<worker>": a reload's
 * workers do not meet the old ones', nor another nginx's, nor the other
 * layer's (built in, both layers share the token)
 */

socklen_t
ngx_zk_lock_broker_addr(struct sockaddr_un *sun, ngx_str_t *layer,
    ngx_uint_t generation, ngx_uint_t slot)
{
    u_char  *p;

    ngx_memzero(sun, sizeof(struct sockaddr_un));
    sun->sun_family = AF_UNIX;

    p = ngx_snprintf((u_char *) sun->sun_path + 1, sizeof(sun->sun_path) - 1,
                     "ngx_zk_lock/%016uxL%016uxL/%V/%ui/%ui",
                     ngx_zk_lock_broker_tokens[0],
                     ngx_zk_lock_broker_tokens[1], layer, generation, slot);

    return (socklen_t) (p - (u_char *) sun);
}


/*
 * What an ask is for: the configuration (its session's instance, drawn
 * by the master for each) and the directive's lock, as configured
 */

uint32_t
ngx_zk_lock_broker_sign(ngx_zk_lock_session_t *s, ngx_zk_lock_params_t *lp)
{
    uint32_t   crc;
    uintptr_t  lock[6];

    lock[0] = s->instance;
    lock[1] = lp->id;
    lock[2] = lp->type;
    lock[3] = lp->leases;
    lock[4] = lp->keep;
    lock[5] = lp->v2 | (lp->revocable << 1);

    ngx_crc32_init(crc);
    ngx_crc32_update(&crc, (u_char *) lock, sizeof(lock));
    ngx_crc32_update(&crc, lp->name.data, lp->name.len);
    ngx_crc32_update(&crc, lp->counter.data, lp->counter.len);
    ngx_crc32_final(crc);

    return crc;
}


ngx_int_t
ngx_zk_lock_broker_init(ngx_cycle_t *cycle, ngx_zk_lock_session_t *s,
    ngx_array_t *specs, ngx_str_t *layer, ngx_uint_t generation)
{
    ngx_zk_lock_broker_t  *b;

    b = ngx_pcalloc(cycle->pool, sizeof(ngx_zk_lock_broker_t));
    if (b == NULL) {
        return NGX_ERROR;
    }

    b->session = s;
    b->specs = specs;
    b->layer = *layer;
    b->generation = generation;
    ngx_queue_init(&b->asks);

    if (ngx_zk_lock_broker_listen(b) != NGX_OK) {
        return NGX_ERROR;
    }

    if (b->listener == NULL) {
        return NGX_OK;
    }

    s->broker = b;
    s->reach_handler = ngx_zk_lock_broker_reach;

    /*
     * the debug log of a timer names its event's connection (one closed
     * stays readable, among the cycle's connections)
     */
    b->beater.data = b->listener;
    b->beater.handler = ngx_zk_lock_broker_beat;
    b->beater.log = &s->log;
    b->beater.cancelable = 1;
    ngx_zk_lock_broker_beat(&b->beater);

    return NGX_OK;
}


/*
 * The broker's name, listened on while its session can take locks: the
 * asks of siblings go to another broker, at once, while it has none
 * (ZooKeeper refused it, maxClientCnxns), or it may have expired
 */

static ngx_int_t
ngx_zk_lock_broker_listen(ngx_zk_lock_broker_t *b)
{
    socklen_t               len;
    ngx_socket_t            fd;
    ngx_connection_t       *c;
    struct sockaddr_un      sun;
    ngx_zk_lock_session_t  *s;

    s = b->session;

    fd = ngx_socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd == (ngx_socket_t) -1) {
        ngx_log_error(NGX_LOG_ALERT, &s->log, ngx_socket_errno,
                      ngx_socket_n " for the zk_sessions broker failed");
        return NGX_ERROR;
    }

    len = ngx_zk_lock_broker_addr(&sun, &b->layer, b->generation,
                                  ngx_worker);

    /*
     * The name is free unless another process of this nginx has it: a
     * worker that died in this slot took its socket with it
     */

    if (bind(fd, (struct sockaddr *) &sun, len) == -1
        || listen(fd, NGX_LISTEN_BACKLOG) == -1
        || ngx_nonblocking(fd) == -1)
    {
        ngx_log_error(NGX_LOG_ALERT, &s->log, ngx_socket_errno,
                      "zk_sessions broker of worker %ui cannot listen, "
                      "its siblings ask another", ngx_worker);
        (void) ngx_close_socket(fd);
        return NGX_OK;
    }

    c = ngx_get_connection(fd, &s->log);
    if (c == NULL) {
        (void) ngx_close_socket(fd);
        return NGX_ERROR;
    }

    c->data = b;
    c->log = &s->log;
    c->read->log = c->log;
    c->read->handler = ngx_zk_lock_broker_accept;

    /* a listening socket: left open at exit, as nginx's own are */
    c->read->accept = 1;

    if (ngx_add_event(c->read, NGX_READ_EVENT, 0) != NGX_OK) {
        ngx_close_connection(c);
        return NGX_ERROR;
    }

    b->listener = c;

    return NGX_OK;
}


/*
 * The session is gone, or back: the broker stops listening, or listens
 * again.  The asks it holds stay: their nodes go by the session's news.
 */

static void
ngx_zk_lock_broker_reach(ngx_zk_lock_session_t *s)
{
    ngx_connection_t      *c;
    ngx_zk_lock_broker_t  *b;

    b = s->broker;
    c = b->listener;

    if (ngx_zk_lock_session_gone(s) && c) {

        /* those already waiting to be accepted are told to look elsewhere */
        ngx_zk_lock_broker_accept(c->read);

        ngx_close_connection(c);
        b->listener = NULL;

        ngx_log_error(NGX_LOG_INFO, &s->log, 0,
                      "zk_sessions broker of worker %ui takes no asks "
                      "while its session is out of reach", ngx_worker);
        return;
    }

    if (!ngx_zk_lock_session_gone(s) && c == NULL && !s->exiting
        && !ngx_exiting && !ngx_terminate && !ngx_quit)
    {
        if (ngx_zk_lock_broker_listen(b) == NGX_OK && b->listener) {
            ngx_log_error(NGX_LOG_INFO, &s->log, 0,
                          "zk_sessions broker of worker %ui takes asks "
                          "again", ngx_worker);
        }
    }
}


int64_t
ngx_zk_lock_broker_clock(void)
{
    struct timespec  ts;

    (void) clock_gettime(CLOCK_MONOTONIC, &ts);

    return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}


static void
ngx_zk_lock_broker_accept(ngx_event_t *ev)
{
    ngx_err_t                err;
    ngx_socket_t             fd;
    ngx_connection_t        *lc, *c;
    ngx_zk_lock_ask_t       *ask;
    ngx_zk_lock_broker_t    *b;

    lc = ev->data;
    b = lc->data;

    for ( ;; ) {
        fd = accept(lc->fd, NULL, NULL);

        if (fd == (ngx_socket_t) -1) {
            err = ngx_socket_errno;

            if (err != NGX_EAGAIN && err != NGX_ECONNABORTED) {
                ngx_log_error(NGX_LOG_ERR, lc->log, err,
                              "zk_sessions broker: accept() failed");
            }

            return;
        }

        if (ngx_zk_lock_session_gone(b->session)) {
            /* "n": no session to take it with, the worker asks another */
            (void) send(fd, "n\n", 2, 0);
            (void) ngx_close_socket(fd);
            continue;
        }

        ask = NULL;
        c = NULL;

        if (ngx_nonblocking(fd) != -1) {
            ask = ngx_calloc(sizeof(ngx_zk_lock_ask_t), lc->log);
        }

        if (ask) {
            c = ngx_get_connection(fd, lc->log);
        }

        if (c == NULL) {
            /* the worker sees its ask closed: as if no broker were there */
            ngx_free(ask);
            (void) ngx_close_socket(fd);
            continue;
        }

        ask->conn = c;
        ask->broker = b;
        ngx_queue_insert_tail(&b->asks, &ask->queue);
        c->data = ask;
        c->log = lc->log;
        c->read->log = c->log;
        c->write->log = c->log;
        c->read->handler = ngx_zk_lock_broker_read;
        c->write->handler = ngx_zk_lock_broker_alive;

        /* not cancelable: an exiting broker holds on for its askers */
        ngx_add_timer(c->write, NGX_ZK_LOCK_BROKER_ALIVE);

        ngx_zk_lock_broker_read(c->read);
    }
}


static void
ngx_zk_lock_broker_read(ngx_event_t *rev)
{
    u_char                   sink[64];
    ssize_t                  n;
    ngx_err_t                err;
    ngx_connection_t        *c;
    ngx_zk_lock_ask_t       *ask;

    c = rev->data;
    ask = c->data;

    if (c->close && ngx_zk_lock_broker_exiting(ask) != NGX_OK) {
        /* worker_shutdown_timeout has passed */
        ngx_zk_lock_broker_close(ask);
        return;
    }

    for ( ;; ) {
        if (ask->node) {
            /* nothing more comes but the end of the ask */
            n = recv(c->fd, sink, sizeof(sink), 0);

        } else {
            n = recv(c->fd, ask->buf + ask->len,
                     sizeof(ask->buf) - ask->len, 0);
        }

        if (n == 0) {
            ngx_zk_lock_broker_close(ask);
            return;
        }

        if (n == -1) {
            err = ngx_socket_errno;

            if (err == NGX_EAGAIN) {
                break;
            }

            ngx_zk_lock_broker_close(ask);
            return;
        }

        if (ask->node) {
            ngx_zk_lock_broker_heard(ask, sink, n);
            continue;
        }

        ask->len += n;

        if (ngx_zk_lock_broker_ask(ask) != NGX_OK) {
            ngx_zk_lock_broker_close(ask);
            return;
        }
    }

    if (ngx_handle_read_event(rev, 0) != NGX_OK) {
        ngx_zk_lock_broker_close(ask);
    }
}


/*
 * The ask, once whole, is taken: NGX_ERROR for a bad one, and for one that
 * cannot be told of its lease; the caller closes it
 */

static ngx_int_t
ngx_zk_lock_broker_ask(ngx_zk_lock_ask_t *ask)
{
    u_char                    *p, *last, *f[9];
    ngx_int_t                  v[9];
    ngx_str_t                  path, info;
    ngx_uint_t                 i;
    ngx_zk_lock_flow_t         flow;
    ngx_zk_lock_broker_t      *b;
    ngx_zk_lock_params_t     **specs;

    b = ask->broker;
    last = ask->buf + ask->len;

    p = ngx_strlchr(ask->buf, last, '\n');

    if (p == NULL) {
        return (ask->len < NGX_ZK_LOCK_BROKER_HEAD) ? NGX_OK : NGX_ERROR;
    }

    /* nine numbers, separated by spaces, the sign and the flow in hex */

    f[0] = ask->buf;

    for (i = 1; i < 9; i++) {
        f[i] = ngx_strlchr(f[i - 1], p, ' ');
        if (f[i] == NULL) {
            return NGX_ERROR;
        }

        f[i]++;
    }

    for (i = 0; i < 9; i++) {
        v[i] = (i == 0 || i == 4)
               ? ngx_hextoi(f[i], f[i + 1] - 1 - f[i])
               : ngx_atoi(f[i], ((i < 8) ? f[i + 1] - 1 : p) - f[i]);

        if (v[i] == NGX_ERROR) {
            return NGX_ERROR;
        }
    }

    if (b->specs == NULL || (ngx_uint_t) v[1] >= b->specs->nelts
        || v[2] == 0 || v[5] > NGX_ZK_LOCK_FAIR_WEIGHT_MAX
        || (v[4] != 0) != (v[5] != 0)
        || v[6] >= NGX_ZK_LOCK_CLASS_MAX
        || v[7] == 0 || v[7] > NGX_ZK_LOCK_MAX_PATH
        || v[8] > NGX_ZK_LOCK_BROKER_INFO)
    {
        return NGX_ERROR;
    }

    specs = b->specs->elts;

    if ((uint32_t) v[0] != ngx_zk_lock_broker_sign(b->session, specs[v[1]])) {
        ngx_log_error(NGX_LOG_ERR, ask->conn->log, 0,
                      "zk_sessions broker: an ask for a lock that is not "
                      "this configuration's, refused");
        return NGX_ERROR;
    }

    if (last < p + 1 + v[7] + v[8]) {
        return NGX_OK;
    }

    path.data = p + 1;
    path.len = v[7];
    info.data = path.data + path.len;
    info.len = v[8];

    flow.id = v[4];
    flow.weight = v[5];
    flow.cls = v[6];

    ask->node = ngx_zk_lock_take(b->session,
                                 specs[v[1]], &path, v[2],
                                 flow.id ? &flow : NULL, &info, v[3],
                                 ngx_zk_lock_broker_told,
                                 ngx_zk_lock_broker_recall, ask,
                                 ask->conn->log);
    if (ask->node == NULL) {
        return NGX_ERROR;
    }

    /* a lease lent: recalled once this worker exits, see exiting() */
    ask->conn->idle = ask->node->ticket;

    if (ask->node->state == NGX_ZK_LOCK_HELD) {
        /* a lease that the broker kept, to a worker that may be gone */
        return ngx_zk_lock_broker_tell(ask);
    }

    return NGX_OK;
}


/* the node moved: the worker is told; one that cannot be, lets it go */

static void
ngx_zk_lock_broker_told(ngx_zk_lock_node_t *node)
{
    ngx_zk_lock_ask_t  *ask;

    ask = node->data;

    if (ngx_zk_lock_broker_tell(ask) != NGX_OK) {
        ngx_zk_lock_broker_close(ask);
    }
}


/* NGX_ERROR: the worker cannot be told, and the caller closes the ask */

static ngx_int_t
ngx_zk_lock_broker_tell(ngx_zk_lock_ask_t *ask)
{
    u_char                   line[2 * NGX_ZK_LOCK_BROKER_LINE], *p;
    ssize_t                  n;
    ngx_err_t                err;
    ngx_uint_t               level;
    ngx_zk_lock_node_t      *node;

    node = ask->node;

    p = ngx_snprintf(line, NGX_ZK_LOCK_BROKER_LINE,
                     NGX_ZK_LOCK_BROKER_TELL,
                     (int) node->state, node->error, node->seq, node->czxid,
                     (int) node->reused,
                     node->name_len ? node->name : (u_char *) "-");

    if (node->state == NGX_ZK_LOCK_HELD) {
        p = ngx_zk_lock_broker_trust(ask->broker, p);
    }

    /* a few bytes to a socket that reads them: it has room, or is gone */

    n = send(ask->conn->fd, line, p - line, 0);

    if (n == p - line) {
        return NGX_OK;
    }

    /* a worker whose request ended (its client went) closed it first */

    err = ngx_socket_errno;
    level = (err == NGX_EPIPE || err == NGX_ECONNRESET) ? NGX_LOG_INFO
                                                        : NGX_LOG_ERR;

    ngx_log_error(level, ask->conn->log, err,
                  "zk_sessions broker: a worker cannot be told of its "
                  "node \"%s\", released", node->name);

    return NGX_ERROR;
}


/* what the worker says of a lease lent to it */

static void
ngx_zk_lock_broker_heard(ngx_zk_lock_ask_t *ask, u_char *p,
    ssize_t n)
{
    for ( /* void */ ; n; p++, n--) {

        switch (*p) {

        case 'b':
            /* recalled while a request runs on it: not back at once */
            ngx_zk_lock_take_late(ask->node);
            break;

        case 'e':
            /* kept for "keep", unused */
            ask->node->spent = 1;
            break;

        default:
            break;
        }
    }
}


/* "h <deadline>": until when the session may be trusted, if at all */

static u_char *
ngx_zk_lock_broker_trust(ngx_zk_lock_broker_t *b, u_char *p)
{
    ngx_msec_t  trust;

    trust = ngx_zk_lock_session_trust(b->session);

    if (trust == 0) {
        return p;
    }

    return ngx_sprintf(p, NGX_ZK_LOCK_BROKER_TRUST,
                       ngx_zk_lock_broker_clock() + (int64_t) trust);
}


static void
ngx_zk_lock_broker_beat(ngx_event_t *ev)
{
    u_char                   line[NGX_ZK_LOCK_BROKER_LINE], *p;
    ngx_msec_t               every;
    ngx_queue_t             *q;
    ngx_zk_lock_ask_t       *ask;
    ngx_zk_lock_broker_t    *b;

    b = (ngx_zk_lock_broker_t *)
            ((u_char *) ev - offsetof(ngx_zk_lock_broker_t, beater));

    p = ngx_zk_lock_broker_trust(b, line);

    for (q = ngx_queue_head(&b->asks);
         p != line && q != ngx_queue_sentinel(&b->asks);
         q = ngx_queue_next(q))
    {
        ask = ngx_queue_data(q, ngx_zk_lock_ask_t, queue);

        if (ask->node && ask->node->state == NGX_ZK_LOCK_HELD) {
            /* one that cannot take it is seen by read() */
            (void) send(ask->conn->fd, line, p - line, 0);
        }
    }

    every = b->session->negotiated
            / NGX_ZK_LOCK_BROKER_BEATS;

    ngx_add_timer(ev, ngx_max(every, 100));
}


/* a few bytes to a socket that reads them: one gone is seen by read() */

static void
ngx_zk_lock_broker_recall(ngx_zk_lock_node_t *node)
{
    ngx_zk_lock_ask_t  *ask;

    ask = node->data;

    (void) send(ask->conn->fd, "r\n", 2, 0);
}


/*
 * This worker exits (ngx_close_idle_connections()): a lease lent is
 * recalled, and its ask stays until the worker gives it back
 */

static ngx_int_t
ngx_zk_lock_broker_exiting(ngx_zk_lock_ask_t *ask)
{
    ngx_connection_t  *c;

    c = ask->conn;

    if (c->error || !c->idle) {
        return NGX_DECLINED;
    }

    c->close = 0;
    c->idle = 0;

    if (!ask->node->recalled) {
        ask->node->recalled = 1;
        ngx_zk_lock_broker_recall(ask->node);
    }

    return NGX_OK;
}


static void
ngx_zk_lock_broker_alive(ngx_event_t *wev)
{
    if (wev->timedout) {
        wev->timedout = 0;
        ngx_add_timer(wev, NGX_ZK_LOCK_BROKER_ALIVE);
    }
}


static void
ngx_zk_lock_broker_close(ngx_zk_lock_ask_t *ask)
{
    if (ask->node) {
        ngx_zk_lock_release(ask->node);
        ask->node = NULL;
    }

    ngx_queue_remove(&ask->queue);
    ngx_close_connection(ask->conn);
    ngx_free(ask);
}
