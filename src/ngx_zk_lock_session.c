
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>
#include <poll.h>

#include "ngx_zk_lock_version.h"
#include "ngx_zk_lock_session.h"


/* responses handled per read event before yielding to other events */
#define NGX_ZK_LOCK_READ_BATCH  64

/*
 * Reconnect backoff: after one round through all hosts, attempts are
 * spaced by a random delay in [d/2, d], d doubling from BACKOFF_MIN up to
 * BACKOFF_MAX (and at most a third of the session timeout, so that a
 * session the ensemble still keeps is not lost to our own waiting).
 */
#define NGX_ZK_LOCK_BACKOFF_MIN  100
#define NGX_ZK_LOCK_BACKOFF_MAX  2000

/* how long an exiting worker waits for the answers to its last requests */
#define NGX_ZK_LOCK_DRAIN  1000

/*
 * Jeopardy: the server may expire the session a session timeout after it
 * last heard from the worker, and the worker hears of it only once it gets
 * through again.  Holders are let go a MARGIN-th of the timeout before the
 * earliest expiry; probes, PROBES per timeout, keep that point ahead.
 */
#define NGX_ZK_LOCK_PROBES  6
#define NGX_ZK_LOCK_MARGIN  4

/* the client's repeated log lines: how many told apart, for how long */
#define NGX_ZK_LOCK_ZLOG_SEEN   4
#define NGX_ZK_LOCK_ZLOG_QUIET  10


static ngx_int_t ngx_zk_lock_session_start(ngx_zk_lock_session_t *s);
static void ngx_zk_lock_session_update(ngx_zk_lock_session_t *s);
static void ngx_zk_lock_session_uncork(ngx_zk_lock_session_t *s);
static void ngx_zk_lock_session_drain(ngx_zk_lock_session_t *s);
static void ngx_zk_lock_session_drained(int rc, const struct Stat *stat,
    const void *data);
static void ngx_zk_lock_session_auth_done(int rc, const void *data);
static void ngx_zk_lock_session_attempt(ngx_zk_lock_session_t *s);
static ngx_msec_t ngx_zk_lock_session_backoff(
    ngx_zk_lock_session_t *s);
static void ngx_zk_lock_session_next_server(ngx_zk_lock_session_t *s);
static ngx_uint_t ngx_zk_lock_session_cycle_to(
    ngx_zk_lock_session_t *s, u_char *server);
static ngx_int_t ngx_zk_lock_session_wrap(ngx_zk_lock_session_t *s,
    int fd);
static void ngx_zk_lock_session_unwrap(ngx_zk_lock_session_t *s);
static ngx_int_t ngx_zk_lock_session_stat(ngx_zk_lock_session_t *s,
    int fd, struct stat *st);
static ngx_int_t ngx_zk_lock_session_arm(ngx_event_t *ev, ngx_uint_t on,
    ngx_int_t event);
static void ngx_zk_lock_session_read_handler(ngx_event_t *rev);
static void ngx_zk_lock_session_write_handler(ngx_event_t *wev);
static int ngx_zk_lock_session_process(ngx_zk_lock_session_t *s,
    int events);
static void ngx_zk_lock_session_event(ngx_zk_lock_session_t *s,
    ngx_event_t *ev, ngx_event_handler_pt handler);
static void ngx_zk_lock_session_timer_handler(ngx_event_t *ev);
static void ngx_zk_lock_session_probe_handler(ngx_event_t *ev);
static void ngx_zk_lock_session_probe(ngx_zk_lock_session_t *s);
static void ngx_zk_lock_session_probed(int rc, const struct Stat *stat,
    const void *data);
static void ngx_zk_lock_session_renew_handler(ngx_event_t *ev);
static void ngx_zk_lock_session_resolved(ngx_zk_lock_hosts_t *h);
static void ngx_zk_lock_session_failed(ngx_zk_lock_session_t *s);
static void ngx_zk_lock_session_tell(ngx_zk_lock_session_t *s,
    ngx_zk_lock_session_pt handler);
static void ngx_zk_lock_session_state(ngx_zk_lock_session_t *s,
    int state);
static void ngx_zk_lock_session_granted(ngx_zk_lock_session_t *s);
static void ngx_zk_lock_session_zlog(const char *message);
static ngx_uint_t ngx_zk_lock_session_zlog_repeated(const char *text,
    size_t len);
static u_char *ngx_zk_lock_session_log_error(ngx_log_t *log, u_char *buf,
    size_t len);


/*
 * The client's log callback has no context argument; a worker has exactly
 * one session, so its log is kept here.
 */
static ngx_log_t  *ngx_zk_lock_session_log;

/* the session whose client is running: its log lines are about it */
static ngx_zk_lock_session_t  *ngx_zk_lock_session_in;


ngx_int_t
ngx_zk_lock_session_init(ngx_cycle_t *cycle,
    ngx_zk_lock_session_t *s)
{
    s->log = *cycle->log;
    s->log.handler = ngx_zk_lock_session_log_error;
    s->log.data = s;
    s->log.action = "talking to zookeeper";
    ngx_zk_lock_session_log = &s->log;

    /* after an upgrade and a reload, this tells which module a worker has */

    ngx_log_error(NGX_LOG_NOTICE, cycle->log, 0,
                  "zk_lock %s (build %s), zk_session_timeout %Mms",
                  NGX_ZK_LOCK_VERSION, NGX_ZK_LOCK_BUILD, s->timeout);

    s->hosts->handler = ngx_zk_lock_session_resolved;
    s->hosts->data = s;
    s->hosts->log = &s->log;

    if (ngx_zk_lock_hosts_seed(s->hosts) == NGX_ERROR) {
        return NGX_ERROR;
    }

    s->nhosts = s->hosts->list ? s->hosts->naddrs : 1;

    ngx_rbtree_init(&s->locks, &s->sentinel, ngx_str_rbtree_insert_value);
    ngx_queue_init(&s->all);
    ngx_queue_init(&s->counters);
    ngx_queue_init(&s->boards);

    ngx_zk_lock_session_event(s, &s->timer,
                              ngx_zk_lock_session_timer_handler);
    ngx_zk_lock_session_event(s, &s->update,
                              ngx_zk_lock_session_timer_handler);
    ngx_zk_lock_session_event(s, &s->probe,
                              ngx_zk_lock_session_probe_handler);
    ngx_zk_lock_session_event(s, &s->renew,
                              ngx_zk_lock_session_renew_handler);

    /*
     * Node names carry a UUID so that a node whose create reply was lost
     * can be found again; workers across the fleet must never draw the
     * same ones, hence a key from the kernel rather than from ngx_random()
     */

    if (ngx_zk_lock_session_random(cycle->log, s->uuid_key,
                                   sizeof(s->uuid_key))
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    /*
     * Its first 8 hex digits are the nginx instance's, drawn by the master
     * (see session_instance()): the workers of one nginx share them, so
     * that others can tell instances apart (see keep.c)
     */

    s->uuid_key[0] = ((uint64_t) s->instance << 32)
                     | (s->uuid_key[0] & 0xffffffff);

    /* the part of the UUID that all the nodes of this worker share */

    ngx_zk_lock_session_uuid(s, s->ours + 3);
    ngx_memcpy(s->ours, "_c_", 3);

    /*
     * A worker without a session of its own (zk_sessions) takes its locks
     * through a sibling's: it counts as connected, and the sibling's
     * faults reach its requests as their nodes' (see remote.c)
     */

    if (s->brokered) {
        s->connected = 1;
        s->live = 1;

        if (s->state_handler) {
            s->state_handler(s);
        }

        return NGX_OK;
    }

    /* the client's informational lines are many: only with debug logging */

    zoo_set_debug_level(cycle->log->log_level >= NGX_LOG_DEBUG
                        ? ZOO_LOG_LEVEL_INFO : ZOO_LOG_LEVEL_WARN);

    /* out of use until connected: said if that takes long */

    ngx_zk_lock_outage_init(s);
    ngx_zk_lock_outage_begin(s, ngx_current_msec);

    if (ngx_zk_lock_session_start(s) != NGX_OK) {
        ngx_add_timer(&s->renew, s->timeout);
    }

    /*
     * Started from addresses already known (those of the last worker, or
     * literal ones beside names): the names are asked all the same, so
     * that one that has moved is followed, and the answers kept
     */

    if (s->zh && s->hosts->resolver) {
        (void) ngx_zk_lock_hosts_resolve(s->hosts);
    }

    return NGX_OK;
}


/* one of the session's timers */

static void
ngx_zk_lock_session_event(ngx_zk_lock_session_t *s, ngx_event_t *ev,
    ngx_event_handler_pt handler)
{
    ev->handler = handler;
    ev->data = s;
    ev->log = &s->log;
    ev->cancelable = 1;
}


void
ngx_zk_lock_session_close(ngx_zk_lock_session_t *s)
{
    s->exiting = 1;

    if (s->conn) {
        if (s->corked) {
            ngx_zk_lock_session_uncork(s);
        }

        ngx_zk_lock_session_unwrap(s);
    }

    if (s->zh && zoo_state(s->zh) == ZOO_CONNECTED_STATE) {
        ngx_zk_lock_session_drain(s);
    }

    if (s->zh) {

        /*
         * Closing the session tells the server to drop this worker's
         * ephemeral nodes at once, instead of after the session timeout.
         * The call waits for the server's answer, bounded by the client (a
         * few seconds at most), which only a worker that exits can afford.
         */

        ngx_log_error(NGX_LOG_INFO, &s->log, 0,
                      "closing zookeeper session 0x%xL",
                      (int64_t) zoo_client_id(s->zh)->client_id);

        (void) zookeeper_close(s->zh);
        s->zh = NULL;
    }

    if (s->close_handler) {
        s->close_handler(s);
    }
}


/*
 * zookeeper_close() sends the closeSession, reads one reply and closes the
 * socket: replies still unread make the kernel reset the connection, and
 * ZooKeeper then drops what it has not answered yet, the last deletes and
 * the closeSession itself, so that the worker's nodes stay until its
 * session expires.  An exists() sent last is answered last (a session's
 * requests are answered in order): once it is, nothing is left in flight
 * but the closeSession.  The completions of an exiting worker make no new
 * requests.  This blocks, as zookeeper_close() itself does, only at exit.
 */

static void
ngx_zk_lock_session_drain(ngx_zk_lock_session_t *s)
{
    int             fd, interest, rc, events, n;
    ngx_msec_t      start, left, wait;
    struct pollfd   pfd;
    struct timeval  tv;

    s->drained = 0;

    if (zoo_aexists(s->zh, "/", 0, ngx_zk_lock_session_drained, s)
        != ZOK)
    {
        return;
    }

    ngx_time_update();
    start = ngx_current_msec;

    while (!s->drained) {

        ngx_time_update();
        left = NGX_ZK_LOCK_DRAIN - (ngx_current_msec - start);

        if ((ngx_msec_int_t) left <= 0) {
            ngx_log_error(NGX_LOG_INFO, &s->log, 0,
                          "zookeeper requests still unanswered at exit");
            return;
        }

        rc = zookeeper_interest(s->zh, &fd, &interest, &tv);

        if (rc != ZOK || fd == -1) {
            return;
        }

        wait = (ngx_msec_t) tv.tv_sec * 1000 + tv.tv_usec / 1000;

        pfd.fd = fd;
        pfd.events = ((interest & ZOOKEEPER_READ) ? POLLIN : 0)
                     | ((interest & ZOOKEEPER_WRITE) ? POLLOUT : 0);
        pfd.revents = 0;

        n = poll(&pfd, 1, (int) ngx_min(left, wait));

        if (n == -1 && ngx_errno != NGX_EINTR) {
            return;
        }

        events = 0;

        if (pfd.revents & (POLLIN|POLLERR|POLLHUP)) {
            events |= ZOOKEEPER_READ;
        }

        if (pfd.revents & POLLOUT) {
            events |= ZOOKEEPER_WRITE;
        }

        rc = ngx_zk_lock_session_process(s, events);

        if (rc != ZOK && rc != ZNOTHING) {
            return;
        }
    }
}


static void
ngx_zk_lock_session_drained(int rc, const struct Stat *stat,
    const void *data)
{
    ngx_zk_lock_session_t  *s = (ngx_zk_lock_session_t *) data;

    s->drained = 1;
}


/*
 * Called before a request is made.  The client sends every request at once,
 * as two writes (its length, then its body) on a socket without Nagle's
 * algorithm: six small packets for the create, listing and delete of a
 * gated request.  The socket is corked until the update that is posted
 * here, at the end of this event loop iteration, so that the requests made
 * meanwhile leave together.  The update also makes sure that what the
 * client could not send goes out with the next write event.
 */

void
ngx_zk_lock_session_batch(ngx_zk_lock_session_t *s)
{
    int  on;

    if (!s->corked && s->connected && s->conn) {
        on = 1;

        if (setsockopt(s->conn->fd, IPPROTO_TCP, TCP_CORK, &on, sizeof(int))
            == 0)
        {
            s->corked = 1;
        }
    }

    if (!s->update.posted) {
        ngx_post_event(&s->update, &ngx_posted_events);
    }
}


static void
ngx_zk_lock_session_uncork(ngx_zk_lock_session_t *s)
{
    int  off;

    s->corked = 0;

    /*
     * A socket the client has closed meanwhile has nothing to send, and
     * its number may already belong to another connection
     */

    if (s->conn == NULL || s->zh == NULL
        || zoo_state(s->zh) != ZOO_CONNECTED_STATE)
    {
        return;
    }

    off = 0;

    if (setsockopt(s->conn->fd, IPPROTO_TCP, TCP_CORK, &off, sizeof(int))
        == -1)
    {
        ngx_log_error(NGX_LOG_ALERT, &s->log, ngx_socket_errno,
                      "setsockopt(TCP_CORK) failed");
    }
}


/* at configuration, in the master: the instance's part of the UUIDs */

ngx_int_t
ngx_zk_lock_session_instance(ngx_log_t *log,
    ngx_zk_lock_session_t *s)
{
    return ngx_zk_lock_session_random(log, &s->instance,
                                      sizeof(s->instance));
}


/* bytes from the kernel: what two hosts, or two containers, never share */

ngx_int_t
ngx_zk_lock_session_random(ngx_log_t *log, void *buf, size_t len)
{
    ssize_t   n;
    ngx_fd_t  fd;

    fd = ngx_open_file("/dev/urandom", NGX_FILE_RDONLY, NGX_FILE_OPEN, 0);
    if (fd == NGX_INVALID_FILE) {
        ngx_log_error(NGX_LOG_EMERG, log, ngx_errno,
                      ngx_open_file_n " \"/dev/urandom\" failed");
        return NGX_ERROR;
    }

    n = read(fd, buf, len);

    if (n != (ssize_t) len) {
        ngx_log_error(NGX_LOG_EMERG, log, ngx_errno,
                      "read(\"/dev/urandom\") failed");
        (void) ngx_close_file(fd);
        return NGX_ERROR;
    }

    (void) ngx_close_file(fd);

    return NGX_OK;
}


void
ngx_zk_lock_session_uuid(ngx_zk_lock_session_t *s, u_char *buf)
{
    uint64_t  hi, lo;

    /* a random per-worker key and a counter, in the form of a version 4 */

    hi = s->uuid_key[0];
    lo = s->uuid_key[1] ^ (++s->uuid_seq * 0x9e3779b97f4a7c15ULL);

    hi = (hi & ~0xf000ULL) | 0x4000ULL;
    lo = (lo & ~(3ULL << 62)) | (2ULL << 62);

    ngx_sprintf(buf, "%08xD-%04xD-%04xD-%04xD-%012xL",
                (uint32_t) (hi >> 32), (uint32_t) (hi >> 16) & 0xffff,
                (uint32_t) hi & 0xffff, (uint32_t) (lo >> 48),
                lo & 0xffffffffffffULL);
}


/* a node name of this worker: it learns of their deletion by itself */

ngx_uint_t
ngx_zk_lock_session_ours(ngx_zk_lock_session_t *s, u_char *name)
{
    return ngx_strncmp(name, s->ours, NGX_ZK_LOCK_OURS_LEN) == 0;
}


static ngx_int_t
ngx_zk_lock_session_start(ngx_zk_lock_session_t *s)
{
    int  rc;

    if (s->hosts->list == NULL) {
        /* names only, none resolved yet: see session_resolved() */
        return ngx_zk_lock_hosts_resolve(s->hosts);
    }

    ngx_zk_lock_session_in = s;

    s->zh = zookeeper_init2((char *) s->hosts->list,
                            ngx_zk_lock_session_watcher,
                            (int) s->timeout, NULL, s, 0,
                            ngx_zk_lock_session_zlog);

    if (s->zh == NULL) {
        ngx_log_error(NGX_LOG_ALERT, &s->log, ngx_errno,
                      "zookeeper_init() failed");
        return NGX_ERROR;
    }

    s->stale = 0;

    /* the client keeps the credentials, and sends them on every connect */

    if (s->auth.len) {
        rc = zoo_add_auth(s->zh, "digest", (char *) s->auth.data,
                          (int) s->auth.len, ngx_zk_lock_session_auth_done,
                          s);
        if (rc != ZOK) {
            ngx_log_error(NGX_LOG_ALERT, &s->log, 0,
                          "zoo_add_auth() failed (%d: %s)", rc, zerror(rc));
        }
    }

    /*
     * By default the client resolves the host names again on every call
     * to zookeeper_interest(); only do it when it has to reconnect
     */

    (void) zoo_set_servers_resolution_delay(s->zh, -1);

    s->generation++;

    ngx_log_debug2(NGX_LOG_DEBUG_EVENT, &s->log, 0,
                   "zk lock: session start, generation %ui, timeout %M",
                   s->generation, s->timeout);

    ngx_zk_lock_session_update(s);

    return NGX_OK;
}


static void
ngx_zk_lock_session_auth_done(int rc, const void *data)
{
    ngx_zk_lock_session_t  *s = (ngx_zk_lock_session_t *) data;

    if (rc != ZOK) {
        ngx_log_error(NGX_LOG_ERR, &s->log, 0,
                      "zookeeper digest authentication failed (%d: %s)",
                      rc, zerror(rc));
        return;
    }

    ngx_log_debug0(NGX_LOG_DEBUG_EVENT, &s->log, 0,
                   "zk lock: digest authentication done");
}


/*
 * Asks the client what it waits for (socket, read/write, a deadline) and
 * makes nginx wait for the same.  Called after everything that may have
 * changed the client's state.
 */

static void
ngx_zk_lock_session_update(ngx_zk_lock_session_t *s)
{
    int             fd, interest, rc;
    ngx_msec_t      timer;
    ngx_uint_t      attempt;
    struct stat     st;
    struct timeval  tv;
    u_char          last[NGX_SOCKADDR_STRLEN + 1];

    if (s->corked) {
        ngx_zk_lock_session_uncork(s);
    }

    if (s->zh == NULL || s->exiting) {
        return;
    }

    attempt = 0;
    ngx_zk_lock_session_in = s;

    if (!s->connected) {

        if (s->conn
            && ngx_zk_lock_session_stat(s, s->conn->fd, &st) != NGX_OK)
        {
            /* the client has closed the socket of a failed attempt */
            ngx_zk_lock_session_unwrap(s);
            ngx_zk_lock_session_failed(s);
        }

        if (s->conn == NULL) {

            /*
             * Without a socket the client connects from
             * zookeeper_interest(), at once: this is where reconnects
             * are spaced out
             */

            timer = s->next_attempt - ngx_current_msec;

            if (s->attempts && (ngx_msec_int_t) timer > 0) {
                ngx_add_timer(&s->timer, timer);
                return;
            }

            ngx_zk_lock_session_attempt(s);

            ngx_memcpy(last, s->last_server, sizeof(last));
            ngx_zk_lock_session_next_server(s);
            attempt = 1;
        }
    }

    rc = zookeeper_interest(s->zh, &fd, &interest, &tv);

    if (is_unrecoverable(s->zh)) {

        /* the socket is already closed; the watcher posted the renewal */

        if (s->conn) {
            ngx_zk_lock_session_unwrap(s);
        }

        return;
    }

    if (rc != ZOK) {
        /* the client has dropped the connection; it reconnects by itself */
        ngx_log_debug1(NGX_LOG_DEBUG_EVENT, &s->log, 0,
                       "zk lock: zookeeper_interest() rc:%d", rc);
    }

    ngx_log_debug3(NGX_LOG_DEBUG_EVENT, &s->log, 0,
                   "zk lock: interest fd:%d i:%d tv:%l", fd, interest,
                   (long) (tv.tv_sec * 1000 + tv.tv_usec / 1000));

    if (attempt && rc != ZOK) {
        ngx_zk_lock_session_failed(s);
    }

    if (attempt && rc == ZOK && fd == -1) {

        /*
         * the client's own pause after a round through all servers: it
         * tried none, the next attempt goes to the same server
         */

        ngx_memcpy(s->last_server, last, sizeof(last));
    }

    if (ngx_zk_lock_session_wrap(s, fd) != NGX_OK) {
        interest = 0;
        tv.tv_sec = 1;
        tv.tv_usec = 0;
    }

    if (s->conn) {
        if (ngx_zk_lock_session_arm(s->conn->read,
                                    interest & ZOOKEEPER_READ,
                                    NGX_READ_EVENT)
            != NGX_OK
            || ngx_zk_lock_session_arm(s->conn->write,
                                       interest & ZOOKEEPER_WRITE,
                                       NGX_WRITE_EVENT)
               != NGX_OK)
        {
            ngx_zk_lock_session_unwrap(s);
        }
    }

    timer = (ngx_msec_t) tv.tv_sec * 1000 + tv.tv_usec / 1000;

    /*
     * a timer armed at 0 from a timer's handler expires again in the same
     * pass of ngx_event_expire_timers(): the worker would never leave it
     */

    ngx_add_timer(&s->timer, ngx_max(timer, 1));
}


static void
ngx_zk_lock_session_attempt(ngx_zk_lock_session_t *s)
{
    s->next_attempt = ngx_current_msec + ngx_zk_lock_session_backoff(s);
    s->attempts++;

    if (s->hosts->resolver && s->attempts % s->nhosts == 0) {
        /* a round has failed: perhaps the names have moved */
        (void) ngx_zk_lock_hosts_resolve(s->hosts);
    }
}


static ngx_msec_t
ngx_zk_lock_session_backoff(ngx_zk_lock_session_t *s)
{
    ngx_uint_t      n;
    ngx_msec_t      d, max;
    ngx_msec_int_t  left;

    if (s->attempts < s->nhosts) {
        return 0;
    }

    n = ngx_min(s->attempts - s->nhosts, 8);

    /* never below the floor, whatever the timeout: no timer re-armed at 0 */

    max = ngx_min((ngx_msec_t) NGX_ZK_LOCK_BACKOFF_MAX, s->timeout / 3);
    max = ngx_max(max, (ngx_msec_t) NGX_ZK_LOCK_BACKOFF_MIN);
    d = ngx_min((ngx_msec_t) NGX_ZK_LOCK_BACKOFF_MIN << n, max);

    /* randomised, so that a fleet does not reconnect in step */

    d = d / 2 + (ngx_msec_t) ngx_random() % (d / 2 + 1);

    /*
     * A live session must be heard from before its holders are let go
     * (see probe_handler()): as that moment nears, attempts come closer,
     * so that a server that refuses for less than about half the session
     * timeout (a restart) cuts nobody
     */

    if (s->live && !s->jeopardy && s->negotiated) {
        left = (ngx_msec_int_t) (s->heard + s->negotiated
                                 - s->negotiated / NGX_ZK_LOCK_MARGIN
                                 - ngx_current_msec);

        if (left > 0 && d > (ngx_msec_t) left / 2) {
            d = ngx_max((ngx_msec_t) left / 2,
                        (ngx_msec_t) NGX_ZK_LOCK_BACKOFF_MIN);
        }
    }

    ngx_log_debug2(NGX_LOG_DEBUG_EVENT, &s->log, 0,
                   "zk lock: connection attempt %ui, next in %M",
                   s->attempts + 1, d);

    return d;
}


/*
 * ZOOKEEPER-2466: after a failed attempt the client advances its cursor in
 * the server list twice (in handle_error() and in zookeeper_interest()), so
 * with an even number of servers it only ever tries half of them, and may
 * never reach the one that is up.  Before each attempt the cursor is put
 * back where it should be: the attempt goes to the server that follows the
 * one tried last.
 */

static void
ngx_zk_lock_session_next_server(ngx_zk_lock_session_t *s)
{
    ngx_uint_t   i, n;

    /* a worker's first attempt goes where the client shuffled it */

    if (s->last_server[0]) {
        (void) ngx_zk_lock_session_cycle_to(s, s->last_server);
    }

    /* the one after: the next attempt's server */

    zoo_cycle_next_server(s->zh);

    (void) ngx_cpystrn(s->last_server,
                       (u_char *) zoo_get_current_server(s->zh),
                       sizeof(s->last_server));

    /* once around to learn the number of servers, then to just before it */

    n = ngx_zk_lock_session_cycle_to(s, s->last_server);

    for (i = 1; i < n; i++) {
        zoo_cycle_next_server(s->zh);
    }

    ngx_log_debug2(NGX_LOG_DEBUG_EVENT, &s->log, 0,
                   "zk lock: connecting to %s of %ui", s->last_server, n);
}


/*
 * Cycles until the client's current server is the given one: the number
 * of steps, from 1 to the number of servers, or 0 if it is not listed
 */

static ngx_uint_t
ngx_zk_lock_session_cycle_to(ngx_zk_lock_session_t *s,
    u_char *server)
{
    ngx_uint_t  i;

    for (i = 1; i <= 64; i++) {
        zoo_cycle_next_server(s->zh);

        if (ngx_strcmp(zoo_get_current_server(s->zh), server) == 0) {
            return i;
        }
    }

    return 0;
}


/*
 * The client opens a new socket for every connection attempt and closes it
 * itself on errors; by the time it hands back a descriptor, the one nginx
 * watched may be closed, and its number may even have been reused for the
 * new socket.  The socket's inode tells them apart.
 */

static ngx_int_t
ngx_zk_lock_session_wrap(ngx_zk_lock_session_t *s, int fd)
{
    struct stat        st;
    ngx_connection_t  *c;
    ngx_int_t          rc;

    /*
     * The socket can only change through a state other than connected:
     * the client closes it, and connects again from zookeeper_interest(),
     * in an update of its own.  This spares an fstat() per update.
     */

    if (s->conn && s->conn->fd == fd
        && zoo_state(s->zh) == ZOO_CONNECTED_STATE && s->verified)
    {
        return NGX_OK;
    }

    rc = (fd == -1) ? NGX_DECLINED : ngx_zk_lock_session_stat(s, fd, &st);

    s->verified = (rc == NGX_OK || rc == NGX_BUSY)
                  && zoo_state(s->zh) == ZOO_CONNECTED_STATE;

    if (rc == NGX_DECLINED) {
        fd = -1;
    }

    c = s->conn;

    if (c) {
        if (rc == NGX_OK && c->fd == fd) {
            return NGX_OK;
        }

        ngx_zk_lock_session_unwrap(s);
    }

    if (fd == -1) {
        return NGX_OK;
    }

    c = ngx_get_connection(fd, &s->log);
    if (c == NULL) {
        return NGX_ERROR;
    }

    c->data = s;
    c->log = &s->log;
    c->read->log = &s->log;
    c->write->log = &s->log;
    c->read->handler = ngx_zk_lock_session_read_handler;
    c->write->handler = ngx_zk_lock_session_write_handler;

    s->conn = c;
    s->dev = st.st_dev;
    s->ino = st.st_ino;

    ngx_log_debug1(NGX_LOG_DEBUG_EVENT, &s->log, 0,
                   "zk lock: watching socket %d", fd);

    return NGX_OK;
}


/*
 * NGX_OK: fd is the socket being watched; NGX_DECLINED: fd is closed;
 * NGX_BUSY: fd is open, but is not (or no longer) that socket
 */

static ngx_int_t
ngx_zk_lock_session_stat(ngx_zk_lock_session_t *s, int fd,
    struct stat *st)
{
    if (fstat(fd, st) == -1) {

        /*
         * When a connection times out, zookeeper_interest() hands back the
         * socket it has just closed
         */

        if (ngx_errno != NGX_EBADF) {
            ngx_log_error(NGX_LOG_ALERT, &s->log, ngx_errno,
                          "fstat(%d) failed", fd);
        }

        return NGX_DECLINED;
    }

    if (s->conn && s->conn->fd == fd
        && st->st_dev == s->dev && st->st_ino == s->ino)
    {
        return NGX_OK;
    }

    return NGX_BUSY;
}


static void
ngx_zk_lock_session_unwrap(ngx_zk_lock_session_t *s)
{
    ngx_connection_t  *c;

    c = s->conn;
    s->conn = NULL;
    s->corked = 0;

    ngx_log_debug1(NGX_LOG_DEBUG_EVENT, &s->log, 0,
                   "zk lock: dropping socket %d", c->fd);

    /*
     * The client owns the socket and closes it itself, which removes it
     * from epoll; NGX_CLOSE_EVENT only updates nginx's bookkeeping
     */

    if (c->read->active) {
        (void) ngx_del_event(c->read, NGX_READ_EVENT, NGX_CLOSE_EVENT);
    }

    if (c->write->active) {
        (void) ngx_del_event(c->write, NGX_WRITE_EVENT, NGX_CLOSE_EVENT);
    }

    if (c->read->posted) {
        ngx_delete_posted_event(c->read);
    }

    if (c->write->posted) {
        ngx_delete_posted_event(c->write);
    }

    ngx_free_connection(c);
    c->fd = (ngx_socket_t) -1;
}


/*
 * Level-triggered: the client reads one response per zookeeper_process()
 * call, so data may be left in the socket after a read event.  It says
 * ZNOTHING once the socket is drained.
 */

static ngx_int_t
ngx_zk_lock_session_arm(ngx_event_t *ev, ngx_uint_t on, ngx_int_t event)
{
    if (on && !ev->active) {
        return ngx_add_event(ev, event, NGX_LEVEL_EVENT);
    }

    if (!on && ev->active) {
        return ngx_del_event(ev, event, 0);
    }

    return NGX_OK;
}


static void
ngx_zk_lock_session_read_handler(ngx_event_t *rev)
{
    int                          rc;
    ngx_uint_t                   i;
    ngx_connection_t            *c;
    ngx_zk_lock_session_t       *s;

    c = rev->data;
    s = c->data;

    for (i = 0; i < NGX_ZK_LOCK_READ_BATCH; i++) {

        rc = ngx_zk_lock_session_process(s, ZOOKEEPER_READ);

        if (rc != ZOK || s->conn != c || s->zh == NULL) {
            break;
        }
    }

    ngx_zk_lock_session_update(s);
}


static void
ngx_zk_lock_session_write_handler(ngx_event_t *wev)
{
    ngx_connection_t            *c;
    ngx_zk_lock_session_t       *s;

    c = wev->data;
    s = c->data;

    ngx_zk_lock_session_process(s, ZOOKEEPER_WRITE);
    ngx_zk_lock_session_update(s);
}


static int
ngx_zk_lock_session_process(ngx_zk_lock_session_t *s, int events)
{
    int  rc;

    if (s->zh == NULL) {
        return ZINVALIDSTATE;
    }

    /* completions and watches run from here */

    ngx_zk_lock_session_in = s;

    rc = zookeeper_process(s->zh, events);

    if (rc != ZOK && rc != ZNOTHING) {
        ngx_log_debug1(NGX_LOG_DEBUG_EVENT, &s->log, 0,
                       "zk lock: zookeeper_process() rc:%d", rc);
    }

    return rc;
}


static void
ngx_zk_lock_session_timer_handler(ngx_event_t *ev)
{
    ngx_zk_lock_session_update(ev->data);
}


static void
ngx_zk_lock_session_renew_handler(ngx_event_t *ev)
{
    ngx_zk_lock_session_t  *s;

    s = ev->data;

    if (s->exiting) {
        return;
    }

    if (s->conn) {
        ngx_zk_lock_session_unwrap(s);
    }

    if (s->timer.timer_set) {
        ngx_del_timer(&s->timer);
    }

    if (s->zh) {
        /* not connected: this does not wait for the server */
        (void) zookeeper_close(s->zh);
        s->zh = NULL;
    }

    if (ngx_zk_lock_session_start(s) != NGX_OK) {
        ngx_add_timer(&s->renew, s->timeout);
    }
}


/*
 * The names of zk_hosts have been resolved by nginx's resolver: a session
 * waiting for its first addresses starts, one reconnecting is given the
 * new ones, one connected is given them when it next reconnects.
 */

static void
ngx_zk_lock_session_resolved(ngx_zk_lock_hosts_t *h)
{
    int                          rc;
    u_char                      *chroot;
    ngx_zk_lock_session_t       *s;

    s = h->data;

    if (s->exiting) {
        return;
    }

    if (h->list == NULL) {
        /* none has resolved yet: asked again, as a failed start is */

        ngx_zk_lock_session_failed(s);

        (void) ngx_snprintf(s->outage.cause, NGX_ZK_LOCK_CAUSE_LEN,
                            "no address for zk_hosts from the resolver%Z");

        if (!s->renew.timer_set) {
            ngx_add_timer(&s->renew, NGX_ZK_LOCK_BACKOFF_MAX);
        }

        return;
    }

    s->nhosts = h->naddrs;

    if (s->zh == NULL) {
        if (ngx_zk_lock_session_start(s) != NGX_OK) {
            ngx_add_timer(&s->renew, s->timeout);
        }

        return;
    }

    /* once connected, the client would drop a connection to move */

    s->stale |= h->changed;

    if (!s->stale || s->connected) {
        return;
    }

    s->stale = 0;

    ngx_log_error(NGX_LOG_INFO, &s->log, 0,
                  "zk_hosts \"%V\" now resolve to \"%s\"", &h->text, h->list);

    /* the client takes no chroot here */

    chroot = h->list + ngx_strlen(h->list) - h->chroot.len;
    *chroot = '\0';

    rc = zoo_set_servers(s->zh, (char *) h->list);

    if (h->chroot.len) {
        *chroot = '/';
    }

    if (rc != ZOK) {
        ngx_log_error(NGX_LOG_ERR, &s->log, 0,
                      "zoo_set_servers() failed (%d: %s)", rc, zerror(rc));
    }
}


/*
 * Holders must let go before the server can give their locks away, even
 * when the worker cannot reach it (a partition leaves the socket open and
 * silent: the client notices after two thirds of the timeout, the expiry
 * only once it gets through again).  The server cannot expire the session
 * before a timeout after it last heard from the worker, which is at the
 * latest when a request it answered was sent: past that minus a margin,
 * the session is in jeopardy and its owner lets its holders go.  A blip
 * shorter than the margin, such as a leader's failover, cuts nobody.
 */

static void
ngx_zk_lock_session_probe_handler(ngx_event_t *ev)
{
    ngx_msec_t                   limit, next, silent;
    ngx_zk_lock_session_t       *s;

    s = ev->data;

    if (s->exiting || s->zh == NULL || !s->live) {
        return;
    }

    limit = s->negotiated - s->negotiated / NGX_ZK_LOCK_MARGIN;
    silent = ngx_current_msec - s->heard;

    if (ngx_zk_lock_session_silent(s)) {
        ngx_zk_lock_outage_begin(s, s->heard);
    }

    if (silent >= limit) {

        if (!s->jeopardy) {
            s->jeopardy = 1;
            s->jeopardies++;

            ngx_log_error(NGX_LOG_ERR, &s->log, 0,
                          "no word from zookeeper for %Mms, 3/4 of the "
                          "session timeout (%Mms): session 0x%xL may "
                          "expire, so its locks are let go now (counted "
                          "\"jeopardy\"), and taken again once zookeeper "
                          "answers, in this session or, if it expired, in "
                          "a new one; check the servers' health (a hang, a "
                          "long GC pause, a full disk) and the network to "
                          "them", silent, s->negotiated,
                          (int64_t) zoo_client_id(s->zh)->client_id);
        }

        /* and again while it lasts: a watch event may make a holder */

        ngx_zk_lock_session_tell(s, s->jeopardy_handler);
    }

    if (s->connected && !s->probing) {
        ngx_zk_lock_session_probe(s);
    }

    next = s->negotiated / NGX_ZK_LOCK_PROBES;

    if (!s->jeopardy && limit - silent < next) {
        next = limit - silent;
    }

    ngx_add_timer(ev, ngx_max(next, 1));
}


/*
 * How long the session's holders may go on holding without another word
 * from the server, ms (see probe_handler()): 0 once in jeopardy
 */

ngx_msec_t
ngx_zk_lock_session_trust(ngx_zk_lock_session_t *s)
{
    ngx_msec_t  limit, silent;

    if (s->exiting || s->zh == NULL || !s->live || s->jeopardy) {
        return 0;
    }

    limit = s->negotiated - s->negotiated / NGX_ZK_LOCK_MARGIN;
    silent = ngx_current_msec - s->heard;

    return (silent < limit) ? limit - silent : 0;
}


static void
ngx_zk_lock_session_probe(ngx_zk_lock_session_t *s)
{
    ngx_zk_lock_session_batch(s);

    if (zoo_aexists(s->zh, "/", 0, ngx_zk_lock_session_probed, s)
        != ZOK)
    {
        return;
    }

    s->probing = 1;
    s->probe_sent = ngx_current_msec;
}


static void
ngx_zk_lock_session_probed(int rc, const struct Stat *stat,
    const void *data)
{
    ngx_zk_lock_session_t  *s = (ngx_zk_lock_session_t *) data;

    s->probing = 0;

    /* an answer, not the client's own error (connection loss, closing) */

    if (s->exiting || (rc != ZOK && rc != ZNONODE)) {
        return;
    }

    s->heard = s->probe_sent;

    if (s->connected) {
        ngx_zk_lock_outage_end(s);
    }

    if (s->jeopardy) {
        s->jeopardy = 0;

        ngx_log_error(NGX_LOG_INFO, &s->log, 0,
                      "zookeeper session 0x%xL is heard from again",
                      (int64_t) zoo_client_id(s->zh)->client_id);

        ngx_zk_lock_session_tell(s, s->heard_handler);
    }
}


/* the session's watcher, and the watcher of every node watch */

void
ngx_zk_lock_session_watcher(zhandle_t *zh, int type, int state,
    const char *path, void *ctx)
{
    ngx_zk_lock_session_t  *s = ctx;

    if (s->exiting || zh != s->zh) {
        return;
    }

    if (type == ZOO_SESSION_EVENT) {
        ngx_zk_lock_session_state(s, state);
        return;
    }

    ngx_log_debug2(NGX_LOG_DEBUG_EVENT, &s->log, 0,
                   "zk lock: watch event %d on \"%s\"", type, path);

    if (path && path[0] == '/' && s->watch_handler) {
        s->watch_handler(s, type, path);
    }
}


static void
ngx_zk_lock_session_state(ngx_zk_lock_session_t *s, int state)
{
    const char  *server;

    if (state == ZOO_CONNECTED_STATE) {

        if (s->connected) {
            return;
        }

        s->connected = 1;
        s->down = 0;
        s->attempts = 0;
        server = zoo_get_current_server(s->zh);

        s->negotiated = (ngx_msec_t) zoo_recv_timeout(s->zh);

        if (!s->live) {
            /* a new session: nothing of it is older than this */
            s->live = 1;
            s->heard = ngx_current_msec;
        }

        if (!s->probing) {
            ngx_zk_lock_session_probe(s);
        }

        if (!s->probe.timer_set) {
            ngx_add_timer(&s->probe,
                          s->negotiated / NGX_ZK_LOCK_PROBES);
        }

        ngx_log_error(NGX_LOG_INFO, &s->log, 0,
                      "zookeeper session 0x%xL connected to %s",
                      (int64_t) zoo_client_id(s->zh)->client_id,
                      server ? server : "?");

        ngx_zk_lock_session_granted(s);

        /* a session that was silent is usable once it answers: probed() */

        if (!ngx_zk_lock_session_silent(s)) {
            ngx_zk_lock_outage_end(s);
        }

        ngx_zk_lock_session_tell(s, s->connect_handler);
        return;
    }

    if (state == ZOO_CONNECTING_STATE || state == ZOO_ASSOCIATING_STATE) {

        if (s->connected) {
            s->connected = 0;
            s->down = 1;
            s->reconnects++;

            ngx_log_error(NGX_LOG_WARN, &s->log, 0,
                          "zookeeper connection lost, reconnecting");

            ngx_zk_lock_outage_begin(s, ngx_current_msec);

            ngx_zk_lock_session_tell(s, NULL);
        }

        return;
    }

    if (state == ZOO_EXPIRED_SESSION_STATE || state == ZOO_AUTH_FAILED_STATE) {
        s->connected = 0;
        s->live = 0;
        s->jeopardy = 0;

        ngx_zk_lock_outage_begin(s, ngx_current_msec);

        ngx_log_error(NGX_LOG_ERR, &s->log, 0,
                      "zookeeper session 0x%xL %s, starting a new one",
                      (int64_t) zoo_client_id(s->zh)->client_id,
                      state == ZOO_EXPIRED_SESSION_STATE
                      ? "expired" : "failed authentication");

        ngx_zk_lock_session_tell(s, s->expire_handler);

        /* the handle cannot be closed from inside zookeeper_process() */

        if (!s->renew.posted) {
            ngx_post_event(&s->renew, &ngx_posted_events);
        }
    }
}


/*
 * The server bounds the timeout (by its minSessionTimeout and
 * maxSessionTimeout, 2 and 20 ticks unless set): a cut one is said once
 * in a worker, as the holders let go at 3/4 of the granted one
 */

static void
ngx_zk_lock_session_granted(ngx_zk_lock_session_t *s)
{
    if (s->negotiated == s->timeout || s->cut) {
        return;
    }

    s->cut = 1;

    ngx_log_error(NGX_LOG_WARN, &s->log, 0,
                  "zk_session_timeout %Mms: zookeeper granted %Mms, "
                  "within its minSessionTimeout and maxSessionTimeout",
                  s->timeout, s->negotiated);
}


/*
 * An attempt to connect failed: with no session yet (or since the last
 * expired), the worker has none now, and its broker's siblings must
 * look elsewhere (see ngx_zk_lock_session_none())
 */

static void
ngx_zk_lock_session_failed(ngx_zk_lock_session_t *s)
{
    if (s->down) {
        return;
    }

    s->down = 1;

    if (!s->live) {
        ngx_zk_lock_session_tell(s, NULL);
    }
}


/* the owner hears of every change of state, and then of this one */

static void
ngx_zk_lock_session_tell(ngx_zk_lock_session_t *s,
    ngx_zk_lock_session_pt handler)
{
    if (s->state_handler) {
        s->state_handler(s);
    }

    if (s->reach_handler) {
        s->reach_handler(s);
    }

    if (handler) {
        handler(s);
    }
}


static void
ngx_zk_lock_session_zlog(const char *message)
{
    size_t       len;
    ngx_uint_t   level;
    const char  *p;

    if (ngx_zk_lock_session_log == NULL) {
        return;
    }

    /* "<time>:<pid>(<tid>):ZOO_<LEVEL>@<function>@<line>: <text>" */

    level = NGX_LOG_INFO;

    p = ngx_strstr(message, ":ZOO_");

    if (p) {
        p += sizeof(":ZOO_") - 1;

        if (ngx_strncmp(p, "ERROR", 5) == 0) {
            level = NGX_LOG_ERR;

        } else if (ngx_strncmp(p, "WARN", 4) == 0) {
            level = NGX_LOG_WARN;

        } else if (ngx_strncmp(p, "DEBUG", 5) == 0) {
            level = NGX_LOG_DEBUG;
        }

        p = ngx_strstr(p, ": ");
        if (p) {
            message = p + 2;
        }

        /*
         * The client's socket errors ("errno=112(Host is down)" for a
         * server that closed, "errno=116(Stale file handle)" for an
         * expired session, ...) are the connection's loss, which the
         * session logs in its own words: no error of themselves
         */

        if (level == NGX_LOG_ERR && ngx_strstr(message, "errno=")) {
            level = NGX_LOG_WARN;
        }
    }

    len = ngx_strlen(message);

    while (len && (message[len - 1] == '\n' || message[len - 1] == '\r')) {
        len--;
    }

    if (level <= NGX_LOG_WARN && ngx_zk_lock_session_in) {
        ngx_zk_lock_outage_cause(ngx_zk_lock_session_in, message, len);
    }

    if (level != NGX_LOG_DEBUG
        && ngx_zk_lock_session_zlog_repeated(message, len))
    {
        return;
    }

    ngx_log_error(level, ngx_zk_lock_session_log, 0,
                  "zookeeper client: %*s", len, message);
}


/*
 * While a server is down the client repeats the same complaints on every
 * connection attempt, several times a second: each is logged once per
 * NGX_ZK_LOCK_ZLOG_QUIET seconds.
 */

static ngx_uint_t
ngx_zk_lock_session_zlog_repeated(const char *text, size_t len)
{
    time_t       now;
    uint32_t     hash;
    ngx_uint_t   i;

    static uint32_t    hashes[NGX_ZK_LOCK_ZLOG_SEEN];
    static time_t      seen[NGX_ZK_LOCK_ZLOG_SEEN];
    static ngx_uint_t  next;

    hash = ngx_crc32_short((u_char *) text, len);
    now = ngx_time();

    for (i = 0; i < NGX_ZK_LOCK_ZLOG_SEEN; i++) {
        if (hashes[i] == hash && now - seen[i] < NGX_ZK_LOCK_ZLOG_QUIET) {
            return 1;
        }
    }

    hashes[next] = hash;
    seen[next] = now;
    next = (next + 1) % NGX_ZK_LOCK_ZLOG_SEEN;

    return 0;
}


static u_char *
ngx_zk_lock_session_log_error(ngx_log_t *log, u_char *buf, size_t len)
{
    u_char                      *p;
    ngx_zk_lock_session_t       *s;

    p = buf;

    if (log->action) {
        p = ngx_snprintf(buf, len, " while %s", log->action);
        len -= p - buf;
        buf = p;
    }

    s = log->data;

    p = ngx_snprintf(buf, len, ", zookeeper: %V", &s->hosts->text);

    return p;
}


/*
 * What an error means to the operator, after zerror()'s words: ZNOAUTH's
 * "not authenticated" says nothing of the ACL that denies the worker.
 * zk_acl is checked by nginx -t, but not the nodes made by others, nor
 * the address that an "ip:" entry names.
 */

const char *
ngx_zk_lock_session_advice(int error)
{
    if (error != ZNOAUTH) {
        return "";
    }

    return ": the ACL of the lock path or of a parent denies this nginx "
           "(its zk_auth, world:anyone, or its address for ip:) the \"c\", "
           "\"d\" or \"r\" permission; read the ACLs with zkCli.sh "
           "getAcl, fix them with setAcl (or fix zk_auth), and remove with "
           "zkCli.sh deleteall a node that nginx made with an ACL it cannot "
           "use";
}


/* errors that say nothing of a lock, only that the session is unusable */

ngx_int_t
ngx_zk_lock_session_error(int error)
{
    switch (error) {

    case ZCONNECTIONLOSS:
    case ZOPERATIONTIMEOUT:
    case ZSESSIONEXPIRED:
    case ZSESSIONMOVED:
    case ZINVALIDSTATE:
    case ZCLOSING:
    case ZAUTHFAILED:
        return 1;

    default:
        return 0;
    }
}
