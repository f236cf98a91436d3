
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>

#include "ngx_zk_lock_remote.h"
#include "ngx_zk_lock_broker.h"


/*
 * A node held for this worker by a broker's session: the owner sees a
 * node like any other, moved by the broker's lines (PARKED until the
 * first), and released by closing the connection.  No broker to reach
 * (none listens, or each says "n": none has a session) fails it with
 * ZCONNECTIONLOSS, as no session would: the owner goes by zk_lock_fail.
 * A broker that goes (it exited, or crashed) takes its
 * session's nodes along: one held is lost, and the owner goes by
 * zk_lock_lost; one that waited asks again, a broker respawned or
 * another, and waits on for the rest of its owner's timeout, at the back
 * of the queue.
 *
 * A kept lease (keep=) is kept here too: when its request ends, the node
 * and its connection are parked, and the worker's next request on the
 * same lock runs on it with no word to the broker, as on a lease the
 * worker's own session kept.  The broker recalls it when it wants it back
 * (somebody else waits, see keep_lent()): a parked node goes at once, a
 * busy one when its request ends.  Parked for "keep" with no request, it
 * goes with a word that it was not used, so that the broker does not keep
 * it for as long again.
 *
 * A held node is trusted until the time the broker's last word gave (see
 * broker.h): a broker that stalls past it cannot tell that its session
 * may expire, so the owner is told here, as the broker would have told
 * it, and a parked node goes.
 *
 *              held            the request ends
 *   (asked) ----------> BUSY -------------------> PARKED
 *                        ^     (kept, not recalled) |
 *                        |  a request on the lock   |
 *                        +--------------------------+
 *                                                   |
 *        recalled, any word or the end from the     v
 *        broker, "keep" passed, the worker exiting:  released
 */


/* the first pause before a node asks again, doubled up to the last, ms */
#define NGX_ZK_LOCK_REMOTE_RETRY      50
#define NGX_ZK_LOCK_REMOTE_RETRY_MAX  1000

/*
 * A lease of a path built from a request is parked for this long only,
 * ms: between two requests of one client, as worker 0 keeps its own (see
 * keep_check()); a value used once must not pin a node and a socket pair
 * for "keep"
 */
#define NGX_ZK_LOCK_REMOTE_TRANSIENT  10


/* a layer's brokers, as its workers ask them */
struct ngx_zk_lock_remotes_s {
    ngx_str_t                     layer;      /* names the sockets */
    ngx_uint_t                    generation;
    ngx_uint_t                    sessions;   /* workers with one */
    ngx_queue_t                   nodes;
    ngx_queue_t                   parked;
};


typedef struct {
    ngx_zk_lock_node_t            node;       /* first: the owner's view */
    ngx_queue_t                   queue;      /* nodes, or parked */
    ngx_zk_lock_remotes_t        *remotes;
    ngx_connection_t             *conn;
    ngx_uint_t                    id;         /* of the directive */
    ngx_str_t                     ask;        /* to ask again */
    ngx_event_t                   retry;      /* or, PARKED: "keep" */
    ngx_msec_t                    pause;
    ngx_msec_t                    keep;       /* kept between requests */
    ngx_msec_t                    park;       /* parked for, at most */
    int64_t                       deadline;   /* trusted until, HELD */
    ngx_event_t                   trust;
    ngx_uint_t                    next;       /* the broker to ask next */
    unsigned                      parked:1;
    unsigned                      recalled:1;
    unsigned                      own:1;      /* the worker has a session */
    unsigned                      again:1;    /* its broker went */
    size_t                        len;        /* of the line being read */
    u_char                        line[NGX_ZK_LOCK_BROKER_LINE];
} ngx_zk_lock_remote_t;


static ngx_int_t ngx_zk_lock_remote_connect(
    ngx_zk_lock_remote_t *rn);
static ngx_socket_t ngx_zk_lock_remote_ask(ngx_zk_lock_remotes_t *r,
    ngx_uint_t slot, ngx_str_t *ask);
static void ngx_zk_lock_remote_retry(ngx_event_t *ev);
static void ngx_zk_lock_remote_read(ngx_event_t *rev);
static ngx_int_t ngx_zk_lock_remote_line(ngx_zk_lock_remote_t *rn,
    u_char *line, u_char *last);
static void ngx_zk_lock_remote_elsewhere(ngx_zk_lock_remote_t *rn);
static void ngx_zk_lock_remote_gone(ngx_zk_lock_remote_t *rn);
static void ngx_zk_lock_remote_nothing(ngx_event_t *ev);
static void ngx_zk_lock_remote_tell_handler(ngx_event_t *ev);
static void ngx_zk_lock_remote_release(ngx_zk_lock_node_t *node);
static ngx_zk_lock_node_t *ngx_zk_lock_remote_unpark(
    ngx_zk_lock_remotes_t *r, ngx_uint_t id,
    ngx_str_t *path, ngx_zk_lock_notify_pt notify, void *data,
    ngx_log_t *log);
static void ngx_zk_lock_remote_park(ngx_zk_lock_remote_t *rn);
static ngx_int_t ngx_zk_lock_remote_trust(ngx_zk_lock_remote_t *rn,
    u_char *line, u_char *last);
static void ngx_zk_lock_remote_distrust(ngx_event_t *ev);
static void ngx_zk_lock_remote_expire(ngx_event_t *ev);
static void ngx_zk_lock_remote_free(ngx_zk_lock_remote_t *rn);


ngx_int_t
ngx_zk_lock_remote_init(ngx_cycle_t *cycle, ngx_zk_lock_session_t *s,
    ngx_uint_t sessions, ngx_str_t *layer, ngx_uint_t generation)
{
    ngx_zk_lock_remotes_t  *r;

    r = ngx_pcalloc(cycle->pool, sizeof(ngx_zk_lock_remotes_t));
    if (r == NULL) {
        return NGX_ERROR;
    }

    r->layer = *layer;
    r->sessions = sessions;
    r->generation = generation;
    ngx_queue_init(&r->nodes);
    ngx_queue_init(&r->parked);

    s->remotes = r;

    return NGX_OK;
}


ngx_zk_lock_node_t *
ngx_zk_lock_remote_acquire(ngx_zk_lock_session_t *s,
    ngx_zk_lock_params_t *lp, ngx_str_t *path, ngx_uint_t weight,
    ngx_zk_lock_flow_t *flow, ngx_str_t *info, ngx_uint_t try,
    ngx_msec_t keep, ngx_zk_lock_notify_pt notify, void *data,
    ngx_log_t *log)
{
    u_char                     *p;
    ngx_zk_lock_node_t         *node;
    ngx_zk_lock_remote_t       *rn;

    if (keep) {
        node = ngx_zk_lock_remote_unpark(s->remotes, lp->id, path, notify,
                                         data, log);
        if (node) {
            return node;
        }
    }

    rn = ngx_calloc(sizeof(ngx_zk_lock_remote_t) + path->len + 1
                    + NGX_ZK_LOCK_BROKER_HEAD + path->len + info->len,
                    log);
    if (rn == NULL) {
        return NULL;
    }

    rn->remotes = s->remotes;
    rn->id = lp->id;
    rn->own = !s->brokered;
    rn->keep = keep;
    rn->park = lp->transient ? ngx_min(keep, NGX_ZK_LOCK_REMOTE_TRANSIENT)
                             : keep;

    /*
     * the ask, kept: "<sign> <directive> <weight> <try> <flow> <its weight>
     * <its class> <lengths>\n" path info
     */

    rn->ask.data = (u_char *) &rn[1] + path->len + 1;

    p = ngx_snprintf(rn->ask.data, NGX_ZK_LOCK_BROKER_HEAD,
                     NGX_ZK_LOCK_BROKER_ASK, ngx_zk_lock_broker_sign(s, lp),
                     lp->id, weight, try, flow ? flow->id : 0,
                     flow ? flow->weight : 0, flow ? flow->cls : 0,
                     path->len, info->len);
    p = ngx_cpymem(p, path->data, path->len);
    p = ngx_cpymem(p, info->data, info->len);

    rn->ask.len = p - rn->ask.data;

    rn->retry.handler = ngx_zk_lock_remote_retry;
    rn->retry.data = rn;
    rn->retry.log = ngx_cycle->log;
    rn->retry.cancelable = 1;
    rn->pause = NGX_ZK_LOCK_REMOTE_RETRY;

    rn->trust.handler = ngx_zk_lock_remote_distrust;
    rn->trust.data = rn;
    rn->trust.log = ngx_cycle->log;
    rn->trust.cancelable = 1;

    node = &rn->node;
    node->state = NGX_ZK_LOCK_PARKED;
    node->weight = weight;
    node->notify = notify;
    node->data = data;
    node->log = log;
    node->releaser = ngx_zk_lock_remote_release;
    node->remote_path = (u_char *) &rn[1];
    ngx_memcpy(node->remote_path, path->data, path->len);

    node->notify_event.handler = ngx_zk_lock_remote_tell_handler;
    node->notify_event.data = node;
    node->notify_event.log = ngx_cycle->log;

    ngx_queue_insert_tail(&s->remotes->nodes, &rn->queue);

    if (ngx_zk_lock_remote_connect(rn) != NGX_OK) {
        /* FAILED at once: the owner says why */
        ngx_zk_lock_remote_gone(rn);
    }

    return node;
}


/*
 * The worker's own broker first, then the others in turn, from the one
 * after the last asked; for a kept lease, worker 0 first, whose are the
 * instance's (see get_init()).  A broker without a session does not listen,
 * or says "n".  A worker with a session of its own asks only when it has
 * none (ngx_zk_lock_session_none()), or for worker 0's kept leases.
 */

static ngx_int_t
ngx_zk_lock_remote_connect(ngx_zk_lock_remote_t *rn)
{
    ngx_uint_t         n, slot, first;
    ngx_socket_t       fd;
    ngx_connection_t  *c;

    n = rn->remotes->sessions;
    first = ngx_worker;

    if (rn->keep) {
        /* with no zk_sessions, worker 0 alone listens */
        n = ngx_max(n, 1);
        first = 0;
    }

    fd = (ngx_socket_t) -1;

    for ( /* void */ ; rn->next < n; rn->next++) {
        slot = (first + rn->next) % n;

        if (rn->own && slot == ngx_worker) {
            continue;
        }

        fd = ngx_zk_lock_remote_ask(rn->remotes, slot, &rn->ask);
        if (fd != (ngx_socket_t) -1) {
            break;
        }
    }

    if (fd == (ngx_socket_t) -1) {
        return NGX_ERROR;
    }

    rn->next++;

    c = ngx_get_connection(fd, ngx_cycle->log);
    if (c == NULL) {
        (void) ngx_close_socket(fd);
        return NGX_ERROR;
    }

    rn->conn = c;
    rn->len = 0;
    rn->recalled = 0;
    c->data = rn;
    c->read->log = c->log;
    c->write->log = c->log;
    c->read->handler = ngx_zk_lock_remote_read;
    c->write->handler = ngx_zk_lock_remote_nothing;

    if (ngx_handle_read_event(c->read, 0) != NGX_OK) {
        ngx_close_connection(c);
        rn->conn = NULL;
        return NGX_ERROR;
    }

    return NGX_OK;
}


/* a connected socket with the ask sent, or -1 */

static ngx_socket_t
ngx_zk_lock_remote_ask(ngx_zk_lock_remotes_t *r, ngx_uint_t slot,
    ngx_str_t *ask)
{
    ssize_t             n;
    socklen_t           len;
    ngx_socket_t        fd;
    struct sockaddr_un  sun;

    fd = ngx_socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd == (ngx_socket_t) -1) {
        return fd;
    }

    len = ngx_zk_lock_broker_addr(&sun, &r->layer, r->generation, slot);

    /* a full backlog refuses at once (EAGAIN): the next broker is asked */

    if (ngx_nonblocking(fd) == -1
        || connect(fd, (struct sockaddr *) &sun, len) == -1)
    {
        (void) ngx_close_socket(fd);
        return (ngx_socket_t) -1;
    }

    /* a few kilobytes into a fresh socket's buffer: all, or none */

    n = send(fd, ask->data, ask->len, 0);

    if (n != (ssize_t) ask->len) {
        (void) ngx_close_socket(fd);
        return (ngx_socket_t) -1;
    }

    return fd;
}


/* a waiting node whose broker went asks again */

static void
ngx_zk_lock_remote_retry(ngx_event_t *ev)
{
    ngx_zk_lock_remote_t  *rn;

    rn = ev->data;
    rn->next = 0;

    if (ngx_zk_lock_remote_connect(rn) == NGX_OK) {
        rn->pause = NGX_ZK_LOCK_REMOTE_RETRY;
        return;
    }

    rn->pause = ngx_min(rn->pause * 2, NGX_ZK_LOCK_REMOTE_RETRY_MAX);
    ngx_add_timer(&rn->retry, rn->pause);
}


static void
ngx_zk_lock_remote_read(ngx_event_t *rev)
{
    u_char                     *p, *line;
    ssize_t                     n;
    ngx_int_t                   rc;
    ngx_err_t                   err;
    ngx_connection_t           *c;
    ngx_zk_lock_remote_t       *rn;

    c = rev->data;
    rn = c->data;

    if (c->close && rn->parked) {
        /* the worker exits (ngx_close_idle_connections()) */
        ngx_zk_lock_remote_free(rn);
        return;
    }

    if (c->close) {
        /* worker_shutdown_timeout has passed: no asking again */
        ngx_close_connection(c);
        rn->conn = NULL;
        ngx_zk_lock_remote_gone(rn);
        return;
    }

    for ( ;; ) {
        n = recv(c->fd, rn->line + rn->len, sizeof(rn->line) - rn->len, 0);

        if (n == -1) {
            err = ngx_socket_errno;

            if (err == NGX_EAGAIN) {
                break;
            }
        }

        if (n <= 0) {
            ngx_zk_lock_remote_gone(rn);
            return;
        }

        rn->len += n;
        line = rn->line;

        while ((p = ngx_strlchr(line, rn->line + rn->len, '\n')) != NULL) {
            rc = ngx_zk_lock_remote_line(rn, line, p);

            if (rc == NGX_DECLINED) {
                ngx_zk_lock_remote_elsewhere(rn);
                return;
            }

            if (rc != NGX_OK) {
                ngx_zk_lock_remote_gone(rn);
                return;
            }

            line = p + 1;
        }

        rn->len -= line - rn->line;
        ngx_memmove(rn->line, line, rn->len);

        if (rn->len == sizeof(rn->line)) {
            ngx_zk_lock_remote_gone(rn);
            return;
        }
    }

    if (rn->parked
        && (rn->recalled || rn->node.state != NGX_ZK_LOCK_HELD
            || rn->node.error))
    {
        ngx_zk_lock_remote_free(rn);
        return;
    }

    if (ngx_handle_read_event(rev, 0) != NGX_OK) {
        ngx_zk_lock_remote_gone(rn);
    }
}


/* "<state> <error> <seq> <czxid> <reused> <name>": the node as it is */

static ngx_int_t
ngx_zk_lock_remote_line(ngx_zk_lock_remote_t *rn, u_char *line,
    u_char *last)
{
    u_char                   *f[6];
    ngx_int_t                 state, error, reused;
    ngx_uint_t                i;
    ngx_zk_lock_node_t       *node;

    if (last - line == 1 && *line == 'n'
        && rn->node.state == NGX_ZK_LOCK_PARKED)
    {
        /* the broker has no session: another is asked */
        return NGX_DECLINED;
    }

    if (last - line == 1 && *line == 'r') {
        /* recalled: not to be kept once its request ends, said at once */
        rn->recalled = 1;

        if (!rn->parked) {
            (void) send(rn->conn->fd, "b\n", 2, 0);
        }

        return NGX_OK;
    }

    if (*line == 'h') {
        return ngx_zk_lock_remote_trust(rn, line, last);
    }

    f[0] = line;

    for (i = 1; i < 6; i++) {
        f[i] = ngx_strlchr(f[i - 1], last, ' ');
        if (f[i] == NULL) {
            return NGX_ERROR;
        }

        f[i]++;
    }

    /* the error may be negative: ZooKeeper's are */

    state = ngx_atoi(f[0], f[1] - 1 - f[0]);
    error = (*f[1] == '-') ? ngx_atoi(f[1] + 1, f[2] - 2 - f[1])
                           : ngx_atoi(f[1], f[2] - 1 - f[1]);
    reused = ngx_atoi(f[4], f[5] - 1 - f[4]);

    if (state == NGX_ERROR || state > NGX_ZK_LOCK_ORPHAN
        || error == NGX_ERROR || reused == NGX_ERROR
        || (size_t) (last - f[5]) >= 64)
    {
        return NGX_ERROR;
    }

    if (*f[1] == '-') {
        error = -error;
    }

    node = &rn->node;
    node->state = state;
    node->error = (int) error;
    node->reused = reused ? 1 : 0;
    node->seq = (uint32_t) ngx_atoi(f[2], f[3] - 1 - f[2]);
    node->czxid = ngx_atoof(f[3], f[4] - 1 - f[3]);
    /* "-": no name yet */
    node->name_len = (*f[5] == '-') ? 0 : last - f[5];
    ngx_memcpy(node->name, f[5], node->name_len);
    node->name[node->name_len] = '\0';

    if (state != NGX_ZK_LOCK_HELD && rn->trust.timer_set) {
        ngx_del_timer(&rn->trust);
    }

    if (!node->notify_event.posted) {
        ngx_post_event(&node->notify_event, &ngx_posted_events);
    }

    return NGX_OK;
}


/* the broker asked has no session: the next, or none took it */

static void
ngx_zk_lock_remote_elsewhere(ngx_zk_lock_remote_t *rn)
{
    ngx_close_connection(rn->conn);
    rn->conn = NULL;

    if (ngx_zk_lock_remote_connect(rn) == NGX_OK) {
        return;
    }

    if (rn->again) {
        ngx_add_timer(&rn->retry, rn->pause);
        return;
    }

    /* the owner may take it through a session of its own, see gate.c */
    rn->node.declined = 1;

    ngx_zk_lock_remote_gone(rn);
}


/* no broker, or not any more: the node is lost, or asks again */

static void
ngx_zk_lock_remote_gone(ngx_zk_lock_remote_t *rn)
{
    char                     *fmt;
    ngx_uint_t                asked;
    ngx_zk_lock_node_t       *node;

    if (rn->parked) {
        ngx_zk_lock_remote_free(rn);
        return;
    }

    asked = (rn->conn != NULL);

    if (rn->conn) {
        ngx_close_connection(rn->conn);
        rn->conn = NULL;
    }

    node = &rn->node;

    if (node->state == NGX_ZK_LOCK_FAILED) {
        return;
    }

    if (asked && node->state != NGX_ZK_LOCK_HELD) {
        /*
         * own: a worker with a session of its own asked the worker that
         * keeps the instance's leases; else a zk_sessions broker
         */
        fmt = rn->own ? "keep=: the worker that keeps the leases of \"%s\" "
                        "went, asking again"
                      : "zk_sessions: the broker of a node waiting for "
                        "\"%s\" went, asking again";

        ngx_log_error(NGX_LOG_WARN, node->log, 0, fmt, node->remote_path);

        node->state = NGX_ZK_LOCK_PARKED;
        rn->again = 1;
        ngx_add_timer(&rn->retry, rn->pause);
        return;
    }

    node->state = NGX_ZK_LOCK_FAILED;
    node->error = ZCONNECTIONLOSS;

    if (!node->notify_event.posted) {
        ngx_post_event(&node->notify_event, &ngx_posted_events);
    }
}


static void
ngx_zk_lock_remote_nothing(ngx_event_t *ev)
{
}


static void
ngx_zk_lock_remote_tell_handler(ngx_event_t *ev)
{
    ngx_zk_lock_node_t  *node;

    node = ev->data;

    if (node->notify) {
        node->notify(node);
    }
}


/*
 * The owner is done: closing the connection releases the broker's node,
 * unless it is a lease to keep
 */

static void
ngx_zk_lock_remote_release(ngx_zk_lock_node_t *node)
{
    ngx_zk_lock_remote_t  *rn;

    rn = (ngx_zk_lock_remote_t *) node;

    if (rn->keep && !rn->recalled && rn->conn
        && node->state == NGX_ZK_LOCK_HELD && node->error == 0
        && !ngx_exiting && !ngx_terminate && !ngx_quit)
    {
        ngx_zk_lock_remote_park(rn);
        return;
    }

    ngx_zk_lock_remote_free(rn);
}


static void
ngx_zk_lock_remote_free(ngx_zk_lock_remote_t *rn)
{
    ngx_zk_lock_node_t  *node;

    node = &rn->node;

    if (node->notify_event.posted) {
        ngx_delete_posted_event(&node->notify_event);
    }

    if (rn->conn) {
        ngx_close_connection(rn->conn);
    }

    if (rn->retry.timer_set) {
        ngx_del_timer(&rn->retry);
    }

    if (rn->trust.timer_set) {
        ngx_del_timer(&rn->trust);
    }

    ngx_queue_remove(&rn->queue);
    ngx_free(rn);
}


/* a lease parked on the lock: the request runs on it, no word to anybody */

static ngx_zk_lock_node_t *
ngx_zk_lock_remote_unpark(ngx_zk_lock_remotes_t *r, ngx_uint_t id,
    ngx_str_t *path, ngx_zk_lock_notify_pt notify, void *data, ngx_log_t *log)
{
    ngx_queue_t                *q, *pq;
    ngx_zk_lock_node_t         *node;
    ngx_zk_lock_remote_t       *rn;

    for (q = ngx_queue_last(&r->parked);
         q != ngx_queue_sentinel(&r->parked);
         q = pq)
    {
        pq = ngx_queue_prev(q);
        rn = ngx_queue_data(q, ngx_zk_lock_remote_t, queue);
        node = &rn->node;

        if (rn->id != id
            || ngx_strncmp(node->remote_path, path->data, path->len) != 0
            || node->remote_path[path->len] != '\0')
        {
            continue;
        }

        if (rn->deadline <= ngx_zk_lock_broker_clock()) {
            /* its timer is late: not a lease to run on */
            ngx_zk_lock_remote_free(rn);
            continue;
        }

        ngx_queue_remove(q);
        ngx_queue_insert_tail(&r->nodes, q);

        if (rn->retry.timer_set) {
            ngx_del_timer(&rn->retry);
        }

        rn->retry.handler = ngx_zk_lock_remote_retry;
        rn->parked = 0;
        rn->conn->idle = 0;

        node->notify = notify;
        node->data = data;
        node->log = log;
        node->reused = 1;

        return node;
    }

    return NULL;
}


/*
 * the last parked is the first taken: the others go after "keep", or
 * after a client's pause for a path built from a request
 */

static void
ngx_zk_lock_remote_park(ngx_zk_lock_remote_t *rn)
{
    ngx_connection_t         *c;
    ngx_zk_lock_node_t       *node;

    node = &rn->node;

    if (node->notify_event.posted) {
        ngx_delete_posted_event(&node->notify_event);
    }

    node->notify = NULL;
    node->data = NULL;
    node->log = ngx_cycle->log;

    ngx_queue_remove(&rn->queue);
    ngx_queue_insert_tail(&rn->remotes->parked, &rn->queue);

    rn->parked = 1;
    rn->retry.handler = ngx_zk_lock_remote_expire;
    ngx_add_timer(&rn->retry, rn->park);

    /* an exiting worker closes it (ngx_close_idle_connections()) */

    c = rn->conn;
    c->idle = 1;
}


/* "h <deadline>": the broker's session may be trusted until then */

static ngx_int_t
ngx_zk_lock_remote_trust(ngx_zk_lock_remote_t *rn, u_char *line,
    u_char *last)
{
    off_t    deadline;
    int64_t  left;

    if (last - line < 3 || line[1] != ' ') {
        return NGX_ERROR;
    }

    deadline = ngx_atoof(line + 2, last - line - 2);
    if (deadline == NGX_ERROR) {
        return NGX_ERROR;
    }

    rn->deadline = deadline;

    if (rn->node.state == NGX_ZK_LOCK_HELD) {
        left = rn->deadline - ngx_zk_lock_broker_clock();
        ngx_add_timer(&rn->trust, (ngx_msec_t) ngx_max(left, 1));
    }

    return NGX_OK;
}


/*
 * No word from the broker for as long as its session could be trusted: a
 * broker that is alive would have told that its session may expire
 */

static void
ngx_zk_lock_remote_distrust(ngx_event_t *ev)
{
    char                  *fmt;
    ngx_zk_lock_node_t    *node;
    ngx_zk_lock_remote_t  *rn;

    rn = ev->data;
    node = &rn->node;

    if (rn->parked) {
        ngx_zk_lock_remote_free(rn);
        return;
    }

    if (node->state != NGX_ZK_LOCK_HELD || node->error) {
        return;
    }

    fmt = rn->own ? "keep=: no word from the worker that keeps the leases "
                    "of \"%s\", its session may expire"
                  : "zk_sessions: no word from the broker that holds \"%s\", "
                    "its session may expire";

    ngx_log_error(NGX_LOG_ERR, node->log, 0, fmt, node->remote_path);

    node->error = NGX_ZK_LOCK_JEOPARDY;
    rn->recalled = 1;

    if (!node->notify_event.posted) {
        ngx_post_event(&node->notify_event, &ngx_posted_events);
    }
}


static void
ngx_zk_lock_remote_expire(ngx_event_t *ev)
{
    ngx_zk_lock_remote_t  *rn;

    rn = ev->data;

    /* not used for "keep": the broker gives it back, rather than keep it */

    (void) send(rn->conn->fd, "e\n", 2, 0);

    ngx_zk_lock_remote_free(rn);
}


/* the worker's requests that wait for the directive's lock on the path */

ngx_uint_t
ngx_zk_lock_remote_waiting(ngx_zk_lock_session_t *s, ngx_uint_t id,
    ngx_str_t *path)
{
    ngx_uint_t                  n;
    ngx_queue_t                *q;
    ngx_zk_lock_remote_t       *rn;

    n = 0;

    for (q = ngx_queue_head(&s->remotes->nodes);
         q != ngx_queue_sentinel(&s->remotes->nodes);
         q = ngx_queue_next(q))
    {
        rn = ngx_queue_data(q, ngx_zk_lock_remote_t, queue);

        if (rn->id == id
            && rn->node.state != NGX_ZK_LOCK_HELD
            && ngx_strncmp(rn->node.remote_path, path->data, path->len) == 0
            && rn->node.remote_path[path->len] == '\0')
        {
            n++;
        }
    }

    return n;
}
