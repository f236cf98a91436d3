
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>

#include "ngx_zk_lock_gate.h"
#include "ngx_zk_lock_get.h"


static ngx_uint_t ngx_zk_lock_gate_full(ngx_zk_lock_gate_t *gate);
static ngx_int_t ngx_zk_lock_gate_take(ngx_zk_lock_gate_t *gate);
static ngx_msec_t ngx_zk_lock_gate_timeout_of(ngx_zk_lock_gate_t *gate,
    ngx_zk_lock_gate_hold_t *hold);
static ngx_int_t ngx_zk_lock_gate_queue(ngx_zk_lock_gate_t *gate,
    ngx_zk_lock_gate_hold_t *hold, ngx_msec_t timeout);
static ngx_int_t ngx_zk_lock_gate_local(ngx_zk_lock_gate_t *gate,
    ngx_zk_lock_gate_hold_t *hold);
static void ngx_zk_lock_gate_granted(ngx_zk_lock_local_t *l);
static void ngx_zk_lock_gate_local_held(ngx_zk_lock_gate_t *gate,
    ngx_zk_lock_gate_hold_t *hold);
static void ngx_zk_lock_gate_to_local(ngx_zk_lock_gate_t *gate,
    ngx_zk_lock_gate_hold_t *hold);
static void ngx_zk_lock_gate_arm(ngx_zk_lock_gate_t *gate,
    ngx_zk_lock_gate_hold_t *hold, ngx_msec_t left);
static void ngx_zk_lock_gate_told(ngx_zk_lock_node_t *node);
static void ngx_zk_lock_gate_next(ngx_zk_lock_gate_t *gate,
    ngx_zk_lock_gate_hold_t *hold);
static void ngx_zk_lock_gate_go(ngx_zk_lock_gate_t *gate,
    ngx_zk_lock_gate_hold_t *hold);
static ngx_int_t ngx_zk_lock_gate_unreached(ngx_zk_lock_gate_t *gate,
    ngx_zk_lock_gate_hold_t *hold);
static ngx_uint_t ngx_zk_lock_gate_long(ngx_zk_lock_gate_t *gate,
    ngx_zk_lock_gate_hold_t *hold);
static void ngx_zk_lock_gate_rewind(ngx_zk_lock_gate_t *gate,
    ngx_zk_lock_gate_hold_t *hold);
static void ngx_zk_lock_gate_failed(ngx_zk_lock_gate_t *gate,
    ngx_zk_lock_gate_hold_t *hold, int error);
static ngx_uint_t ngx_zk_lock_gate_reask(ngx_zk_lock_gate_t *gate,
    ngx_zk_lock_gate_hold_t *hold, int error);
static void ngx_zk_lock_gate_lost(ngx_zk_lock_gate_t *gate,
    ngx_zk_lock_gate_hold_t *hold);
static void ngx_zk_lock_gate_timeout(ngx_event_t *ev);
static void ngx_zk_lock_gate_expired(ngx_zk_lock_gate_t *gate,
    ngx_zk_lock_gate_hold_t *hold);
static void ngx_zk_lock_gate_bypass(ngx_zk_lock_gate_t *gate,
    ngx_zk_lock_gate_hold_t *hold);
static void ngx_zk_lock_gate_end(ngx_zk_lock_gate_t *gate,
    ngx_zk_lock_gate_result_e result);
static void ngx_zk_lock_gate_unwait(ngx_zk_lock_gate_t *gate);
static void ngx_zk_lock_gate_result(ngx_zk_lock_gate_t *gate,
    ngx_zk_lock_gate_hold_t *hold, ngx_zk_lock_gate_result_e result);
static void ngx_zk_lock_gate_held(ngx_zk_lock_gate_t *gate,
    ngx_zk_lock_gate_hold_t *hold, ngx_zk_lock_gate_result_e how);
static void ngx_zk_lock_gate_remember(ngx_zk_lock_gate_t *gate,
    ngx_zk_lock_gate_hold_t *hold);
static void ngx_zk_lock_gate_drop(ngx_zk_lock_gate_t *gate,
    ngx_zk_lock_gate_hold_t *hold);
static void ngx_zk_lock_gate_give_back(ngx_zk_lock_gate_t *gate);
static void ngx_zk_lock_gate_count(ngx_zk_lock_gate_t *gate,
    ngx_zk_lock_gate_hold_t *hold, ngx_zk_lock_gate_result_e event,
    ngx_msec_t waited);
static void ngx_zk_lock_gate_news_handler(ngx_event_t *ev);
static u_char *ngx_zk_lock_gate_outage(ngx_zk_lock_session_t *s, u_char *buf,
    size_t len);
static void ngx_zk_lock_gate_localize(ngx_zk_lock_gate_waiters_t *w);


/*
 * NGX_OK: all held at once, or let through (done); NGX_AGAIN: waiting,
 * the handler is called at the end; NGX_DECLINED: refused at once, the
 * result says why
 */

ngx_int_t
ngx_zk_lock_gate_start(ngx_zk_lock_gate_t *gate)
{
    ngx_int_t                 rc;
    ngx_zk_lock_session_t    *s;
    ngx_zk_lock_gate_hold_t  *hold;

    s = gate->session;
    hold = &gate->holds[0];

    gate->timer.handler = ngx_zk_lock_gate_timeout;
    gate->timer.data = gate;
    gate->timer.log = gate->log;

    /*
     * zk_lock_fail open: no waiting when ZooKeeper is known to be out of
     * reach; closed: none either, the participant is refused at once;
     * local=<n>: a local lease, once the leases held through ZooKeeper no
     * longer count (a session that only lost its connection still blocks
     * others with its nodes: the participant waits in ZooKeeper's queue)
     */

    if (!(gate->fail_local && ngx_zk_lock_session_gone(s))
        && (ngx_zk_lock_session_gone(s) || (s->down && gate->fail_open)))
    {
        /*
         * a worker that ZooKeeper refuses a session (maxClientCnxns) asks
         * a sibling's broker first: refused only if none takes the ask
         */

        if (!(s->siblings && ngx_zk_lock_session_none(s))) {
            return ngx_zk_lock_gate_unreached(gate, hold);
        }

        gate->elsewhere = 1;
    }

    if (ngx_zk_lock_gate_full(gate)) {
        ngx_zk_lock_gate_result(gate, &gate->holds[gate->next],
                                NGX_ZK_LOCK_GATE_REJECTED);
        return NGX_DECLINED;
    }

    gate->started = ngx_current_msec;

    rc = ngx_zk_lock_gate_take(gate);

    gate->elsewhere = 0;

    if (rc == NGX_ABORT) {
        return ngx_zk_lock_gate_unreached(gate, hold);
    }

    if (rc == NGX_DECLINED) {
        ngx_zk_lock_gate_give_back(gate);
        ngx_zk_lock_gate_result(gate, &gate->holds[gate->next],
                                NGX_ZK_LOCK_GATE_REJECTED);
    }

    return rc;
}


/* the worker's queue (zk_lock_max_waiting) */

static ngx_uint_t
ngx_zk_lock_gate_full(ngx_zk_lock_gate_t *gate)
{
    ngx_uint_t  n;

    n = gate->max_waiting ? gate->max_waiting : ngx_cycle->connection_n;

    if (gate->waiters->n >= n) {
        ngx_log_error(gate->log_level, gate->log, 0,
                      "%s \"%V\" rejected: too many %ss waiting "
                      "(%ui in the worker, zk_lock_max_waiting)",
                      ngx_zk_lock_gate_directive(&gate->holds[0]),
                      &gate->holds[0].path, gate->noun, gate->waiters->n);
        return 1;
    }

    return 0;
}


/* no zookeeper connection: refused, or let through (zk_lock_fail open) */

static ngx_int_t
ngx_zk_lock_gate_unreached(ngx_zk_lock_gate_t *gate,
    ngx_zk_lock_gate_hold_t *hold)
{
    u_char  out[NGX_ZK_LOCK_GATE_OUTAGE_LEN];

    ngx_log_error(NGX_LOG_ERR, gate->log, 0,
                  "%s \"%V\" %s: no zookeeper connection%s",
                  ngx_zk_lock_gate_directive(hold), &hold->path,
                  gate->fail_open ? "bypassed" : "refused",
                  ngx_zk_lock_gate_outage(gate->session, out, sizeof(out)));

    if (gate->fail_open) {
        ngx_zk_lock_gate_result(gate, hold, NGX_ZK_LOCK_GATE_BYPASSED);
        gate->done = 1;
        return NGX_OK;
    }

    ngx_zk_lock_gate_result(gate, hold, NGX_ZK_LOCK_GATE_ERROR);
    return NGX_DECLINED;
}


/*
 * A lock's queue (max_waiting=), checked before each lock is asked for,
 * the second as the first: a participant that holds the first waits for
 * the second behind others as anybody does
 */

static ngx_uint_t
ngx_zk_lock_gate_long(ngx_zk_lock_gate_t *gate, ngx_zk_lock_gate_hold_t *hold)
{
    ngx_uint_t  n;

    if (hold->lock->max_waiting == 0) {
        return 0;
    }

    n = ngx_zk_lock_get_waiting(gate->session, hold->lock, &hold->path,
                                hold->weight);

    if (n < hold->lock->max_waiting) {
        return 0;
    }

    ngx_log_error(gate->log_level, gate->log, 0,
                  "%s \"%V\" rejected: too many %ss waiting "
                  "(%ui for it in the worker, max_waiting)",
                  ngx_zk_lock_gate_directive(hold), &hold->path,
                  gate->noun, n);

    return 1;
}


/*
 * The locks from gate->next on: NGX_OK, all held; NGX_AGAIN, waiting;
 * NGX_DECLINED, too many wait for one (max_waiting=, or a local lease);
 * NGX_ERROR
 */

static ngx_int_t
ngx_zk_lock_gate_take(ngx_zk_lock_gate_t *gate)
{
    ngx_int_t                 rc;
    ngx_msec_t                timeout;
    ngx_zk_lock_gate_hold_t  *hold;

    for ( /* void */ ; gate->next < gate->nholds; gate->next++) {
        hold = &gate->holds[gate->next];
        timeout = ngx_zk_lock_gate_timeout_of(gate, hold);
        gate->since = ngx_current_msec;

        if (gate->fail_local && ngx_zk_lock_session_gone(gate->session)) {
            rc = ngx_zk_lock_gate_local(gate, hold);

        } else if (ngx_zk_lock_gate_long(gate, hold)) {
            rc = NGX_DECLINED;

        } else {
            rc = ngx_zk_lock_gate_queue(gate, hold, timeout);
        }

        if (rc == NGX_OK) {
            continue;
        }

        if (rc != NGX_AGAIN) {
            return rc;
        }

        ngx_zk_lock_gate_arm(gate, hold, timeout);

        return NGX_AGAIN;
    }

    gate->done = 1;
    gate->result = gate->local ? NGX_ZK_LOCK_GATE_LOCAL
                               : NGX_ZK_LOCK_GATE_ACQUIRED;

    if (gate->local && gate->session->outage.out) {
        gate->session->outage.through++;
    }
    gate->wait_time = ngx_current_msec - gate->started;

    return NGX_OK;
}


static ngx_msec_t
ngx_zk_lock_gate_timeout_of(ngx_zk_lock_gate_t *gate,
    ngx_zk_lock_gate_hold_t *hold)
{
    return (hold->lock->timeout != NGX_CONF_UNSET_MSEC) ? hold->lock->timeout
                                                        : gate->timeout;
}


/* a node in ZooKeeper's queue: NGX_OK, held at once (a kept lease) */

static ngx_int_t
ngx_zk_lock_gate_queue(ngx_zk_lock_gate_t *gate,
    ngx_zk_lock_gate_hold_t *hold, ngx_msec_t timeout)
{
    ngx_zk_lock_node_t  *node;
    ngx_zk_lock_get_pt   get;

    get = hold->reasked ? ngx_zk_lock_get_own : ngx_zk_lock_get;

    node = get(gate->session, hold->lock, &hold->path, hold->weight,
               hold->flow.id ? &hold->flow : NULL, &gate->info,
               timeout == 0, ngx_zk_lock_gate_told, gate, gate->log);
    if (node == NULL) {
        return NGX_ERROR;
    }

    if (gate->elsewhere) {
        gate->elsewhere = 0;

        if (node->state == NGX_ZK_LOCK_FAILED) {
            /* no sibling's broker took it either: refused as at the start */
            ngx_zk_lock_release(node);
            return NGX_ABORT;
        }
    }

    hold->node = node;

    if (node->state != NGX_ZK_LOCK_HELD) {
        return NGX_AGAIN;
    }

    /* a lease that the worker kept: no wait, no ZooKeeper call */

    ngx_zk_lock_gate_held(gate, hold, NGX_ZK_LOCK_GATE_ACQUIRED);
    ngx_zk_lock_gate_count(gate, hold, NGX_ZK_LOCK_GATE_REUSED, 0);

    return NGX_OK;
}


/* zk_lock_fail local=<n>: a lease of the instance, at once or in turn */

static ngx_int_t
ngx_zk_lock_gate_local(ngx_zk_lock_gate_t *gate, ngx_zk_lock_gate_hold_t *hold)
{
    ngx_int_t             rc;
    ngx_zk_lock_local_t  *l;

    l = &hold->local;

    l->n = gate->fail_local;
    l->handler = ngx_zk_lock_gate_granted;
    l->data = gate;
    l->owner = gate->session;

    rc = ngx_zk_lock_local_take(l);

    if (rc == NGX_OK) {
        ngx_zk_lock_gate_local_held(gate, hold);
        return NGX_OK;
    }

    if (rc == NGX_AGAIN) {
        return NGX_AGAIN;
    }

    ngx_log_error(gate->log_level, gate->log, 0,
                  "%s \"%V\" rejected: too many %ss waiting for a local "
                  "lease", ngx_zk_lock_gate_directive(hold), &hold->path,
                  gate->noun);

    return NGX_DECLINED;
}


/*
 * A local lease came to the participant that waits for it, or the
 * session is usable again and none will (l->held is 0): the rest of the
 * wait is in ZooKeeper's queue
 */

static void
ngx_zk_lock_gate_granted(ngx_zk_lock_local_t *l)
{
    ngx_int_t                 rc;
    ngx_zk_lock_gate_t       *gate;
    ngx_zk_lock_gate_hold_t  *hold;

    gate = l->data;
    hold = &gate->holds[gate->next];

    if (l->held) {
        ngx_zk_lock_gate_unwait(gate);
        ngx_zk_lock_gate_local_held(gate, hold);
        ngx_zk_lock_gate_next(gate, hold);
        return;
    }

    rc = ngx_zk_lock_gate_queue(gate, hold,
                                ngx_zk_lock_gate_timeout_of(gate, hold));

    if (rc == NGX_AGAIN) {
        return;
    }

    ngx_zk_lock_gate_unwait(gate);

    if (rc == NGX_ERROR) {
        ngx_zk_lock_gate_end(gate, NGX_ZK_LOCK_GATE_ERROR);
        return;
    }

    ngx_zk_lock_gate_next(gate, hold);
}


static void
ngx_zk_lock_gate_local_held(ngx_zk_lock_gate_t *gate,
    ngx_zk_lock_gate_hold_t *hold)
{
    ngx_zk_lock_session_t  *s;

    s = gate->session;

    if (ngx_zk_lock_local_warn(hold->local.index,
                               s->generation + s->reconnects))
    {
        ngx_log_error(NGX_LOG_ERR, gate->log, 0,
                      "%s \"%V\" passed with a local lease: no zookeeper "
                      "connection", ngx_zk_lock_gate_directive(hold),
                      &hold->path);
    }

    gate->local = 1;
    ngx_zk_lock_gate_held(gate, hold, NGX_ZK_LOCK_GATE_LOCAL);
}


/*
 * zk_lock_fail local=<n>, for a participant that waited in ZooKeeper's
 * queue (unwaited): the session is gone, a local lease instead, for the
 * rest of its timeout
 */

static void
ngx_zk_lock_gate_to_local(ngx_zk_lock_gate_t *gate,
    ngx_zk_lock_gate_hold_t *hold)
{
    ngx_int_t   rc;
    ngx_msec_t  timeout, waited;
    u_char      out[NGX_ZK_LOCK_GATE_OUTAGE_LEN];

    timeout = ngx_zk_lock_gate_timeout_of(gate, hold);
    waited = ngx_current_msec - gate->since;

    if (hold->node) {
        ngx_zk_lock_release(hold->node);
        hold->node = NULL;
    }

    if (ngx_zk_lock_session_gone(gate->session)) {
        rc = ngx_zk_lock_gate_local(gate, hold);

    } else if (waited < timeout) {

        /*
         * the session expired and a new one is being made, or the
         * connection is only lost: no local lease beside the leases
         * held through ZooKeeper, the rest of the wait is in its queue
         */

        rc = ngx_zk_lock_gate_queue(gate, hold, timeout);

    } else {
        rc = NGX_ERROR;
    }

    if (rc == NGX_OK) {
        ngx_zk_lock_gate_next(gate, hold);
        return;
    }

    if (rc == NGX_AGAIN && waited < timeout) {
        ngx_zk_lock_gate_arm(gate, hold, timeout - waited);
        return;
    }

    ngx_log_error(NGX_LOG_ERR, gate->log, 0,
                  "%s \"%V\" not acquired in %Mms: no zookeeper connection, "
                  "no local lease%s", ngx_zk_lock_gate_directive(hold),
                  &hold->path, waited,
                  ngx_zk_lock_gate_outage(gate->session, out, sizeof(out)));

    ngx_zk_lock_gate_end(gate, (rc == NGX_DECLINED) ? NGX_ZK_LOCK_GATE_REJECTED
                                                    : NGX_ZK_LOCK_GATE_ERROR);
}


/*
 * The participant waits for holds[next], for what is left of its wait.  A
 * try (left 0: timeout=0) is answered by the first listing that shows its
 * node, and bounded by the session's timeout in case ZooKeeper never
 * answers; a worker that is still making its first connection (a reload
 * under traffic) is waited for the same way, one known to be cut off is
 * not.
 */

static void
ngx_zk_lock_gate_arm(ngx_zk_lock_gate_t *gate, ngx_zk_lock_gate_hold_t *hold,
    ngx_msec_t left)
{
    if (left == 0 && !gate->session->down) {
        left = gate->session->timeout;
    }

    gate->waiting = 1;
    gate->waiters->n++;
    ngx_queue_insert_tail(&gate->waiters->queue, &gate->queue);
    ngx_add_timer(&gate->timer, left);

    ngx_zk_lock_gate_count(gate, hold, NGX_ZK_LOCK_GATE_WAIT, 0);

    ngx_log_debug2(NGX_LOG_DEBUG_CORE, gate->log, 0,
                   "%s \"%V\": waiting",
                   ngx_zk_lock_gate_directive(hold), &hold->path);
}


/* a node's news: the one waited for, or one that was held */

static void
ngx_zk_lock_gate_told(ngx_zk_lock_node_t *node)
{
    ngx_zk_lock_gate_t       *gate;
    ngx_zk_lock_gate_hold_t  *hold;

    gate = node->data;
    hold = ngx_zk_lock_gate_find(gate, node);

    if (hold == NULL) {
        return;
    }

    if (!gate->waiting || hold != &gate->holds[gate->next]) {
        ngx_zk_lock_gate_lost(gate, hold);
        return;
    }

    /* a node that came to hold in jeopardy is not had */

    if (node->state != NGX_ZK_LOCK_HELD
        || node->error == NGX_ZK_LOCK_JEOPARDY)
    {
        ngx_zk_lock_gate_failed(gate, hold, node->error);
        return;
    }

    ngx_zk_lock_gate_unwait(gate);
    ngx_zk_lock_gate_held(gate, hold, NGX_ZK_LOCK_GATE_ACQUIRED);

    if (node->reused) {
        /* handed over in the worker: another's kept lease */
        ngx_zk_lock_gate_count(gate, hold, NGX_ZK_LOCK_GATE_REUSED, 0);
    }

    ngx_zk_lock_gate_next(gate, hold);
}


/* the participant's hold of a node, if the node is still its own */

ngx_zk_lock_gate_hold_t *
ngx_zk_lock_gate_find(ngx_zk_lock_gate_t *gate, ngx_zk_lock_node_t *node)
{
    ngx_uint_t  i;

    for (i = 0; i < gate->nholds; i++) {
        if (gate->holds[i].node == node) {
            return &gate->holds[i];
        }
    }

    return NULL;
}


/* the lock waited for is held: the others after it, and the end */

static void
ngx_zk_lock_gate_next(ngx_zk_lock_gate_t *gate, ngx_zk_lock_gate_hold_t *hold)
{
    gate->next++;

    ngx_zk_lock_gate_go(gate, hold);
}


/* the locks from gate->next on; hold: the last one had, for the log */

static void
ngx_zk_lock_gate_go(ngx_zk_lock_gate_t *gate, ngx_zk_lock_gate_hold_t *hold)
{
    ngx_int_t  rc;

    rc = ngx_zk_lock_gate_take(gate);

    if (rc == NGX_AGAIN) {
        return;
    }

    if (rc != NGX_OK) {
        ngx_zk_lock_gate_end(gate, (rc == NGX_DECLINED)
                                   ? NGX_ZK_LOCK_GATE_REJECTED
                                   : NGX_ZK_LOCK_GATE_ERROR);
        return;
    }

    ngx_log_error(NGX_LOG_INFO, gate->log, 0,
                  "%s \"%V\" acquired after %Mms",
                  ngx_zk_lock_gate_directive(hold), &hold->path,
                  gate->wait_time);

    gate->handler(gate);
}


/* the wait failed: ZooKeeper said no, or a try found the lock taken */

static void
ngx_zk_lock_gate_failed(ngx_zk_lock_gate_t *gate,
    ngx_zk_lock_gate_hold_t *hold, int error)
{
    ngx_zk_lock_node_t  *node;
    u_char               out[NGX_ZK_LOCK_GATE_OUTAGE_LEN];

    ngx_zk_lock_gate_unwait(gate);

    if (error == NGX_ZK_LOCK_BUSY) {
        ngx_zk_lock_gate_expired(gate, hold);
        return;
    }

    if (ngx_zk_lock_gate_reask(gate, hold, error)) {
        return;
    }

    if (gate->fail_local
        && (ngx_zk_lock_session_error(error)
            || error == NGX_ZK_LOCK_JEOPARDY))
    {
        ngx_zk_lock_gate_to_local(gate, hold);
        return;
    }

    if (gate->fail_open && ngx_zk_lock_session_error(error)) {
        ngx_log_error(NGX_LOG_ERR, gate->log, 0,
                      "%s \"%V\" bypassed after %Mms: %s%s",
                      ngx_zk_lock_gate_directive(hold), &hold->path,
                      gate->wait_time, zerror(error),
                      ngx_zk_lock_gate_outage(gate->session, out,
                                              sizeof(out)));

        ngx_zk_lock_gate_bypass(gate, hold);
        return;
    }

    gate->error = error;
    node = hold->node;

    switch (error) {

    case NGX_ZK_LOCK_REVOKED:
        ngx_log_error(NGX_LOG_WARN, gate->log, 0,
                      "%s \"%V\" revoked while waiting: node \"%s/%s\"",
                      ngx_zk_lock_gate_directive(hold), &hold->path,
                      ngx_zk_lock_node_path(node), node->name);

        ngx_zk_lock_gate_end(gate, NGX_ZK_LOCK_GATE_REVOKED);
        return;

    case NGX_ZK_LOCK_FOREIGN:
        ngx_log_error(NGX_LOG_INFO, gate->log, 0,
                      "%s \"%V\" refused: its variable names a node that "
                      "is no lock's (ephemeral, or with data)",
                      ngx_zk_lock_gate_directive(hold), &hold->path);
        break;

    default:
        ngx_log_error(NGX_LOG_ERR, gate->log, 0,
                      "%s \"%V\" failed (%d: %s)%s",
                      ngx_zk_lock_gate_directive(hold), &hold->path,
                      error, zerror(error),
                      ngx_zk_lock_session_advice(error));
    }

    ngx_zk_lock_gate_end(gate, NGX_ZK_LOCK_GATE_ERROR);
}


/*
 * A lock asked of a sibling's broker (worker 0's kept leases), which could
 * not take it for want of a session: it said "n", its session gone since
 * the ask was queued in its backlog, or its node failed with a session's
 * error before it held.  A worker with a session of its own takes the
 * lock through it instead, for what is left of the wait: asked again, the
 * broker may take the ask into its backlog before it stops listening, and
 * say "n" once more.  Before, the request failed with a connection loss
 * while the worker's own session was fine.
 */

static ngx_uint_t
ngx_zk_lock_gate_reask(ngx_zk_lock_gate_t *gate,
    ngx_zk_lock_gate_hold_t *hold, int error)
{
    ngx_int_t               rc;
    ngx_msec_t              timeout, waited;
    ngx_zk_lock_node_t     *node;
    ngx_zk_lock_session_t  *s;

    s = gate->session;
    node = hold->node;

    if (node == NULL || node->remote_path == NULL || hold->reasked
        || s->brokered || ngx_zk_lock_session_gone(s)
        || !(node->declined || ngx_zk_lock_session_error(error)))
    {
        return 0;
    }

    timeout = ngx_zk_lock_gate_timeout_of(gate, hold);
    waited = ngx_current_msec - gate->since;

    if (timeout && waited >= timeout) {
        return 0;
    }

    ngx_log_error(NGX_LOG_INFO, gate->log, 0,
                  "%s \"%V\": the broker asked has no session, taken "
                  "through the worker's own", ngx_zk_lock_gate_directive(hold),
                  &hold->path);

    hold->reasked = 1;
    hold->node = NULL;
    ngx_zk_lock_release(node);

    rc = ngx_zk_lock_gate_queue(gate, hold, timeout);

    if (rc == NGX_OK) {
        ngx_zk_lock_gate_next(gate, hold);
        return 1;
    }

    if (rc != NGX_AGAIN) {
        return 0;
    }

    ngx_zk_lock_gate_arm(gate, hold, timeout ? timeout - waited : 0);
    return 1;
}


/*
 * A held lock is gone, or may be: the session went unheard (jeopardy),
 * expired, or Curator's Revoker asked for it (the participant is cut
 * off, whatever zk_lock_lost says)
 */

static void
ngx_zk_lock_gate_lost(ngx_zk_lock_gate_t *gate, ngx_zk_lock_gate_hold_t *hold)
{
    int                  error;
    ngx_uint_t           abort;
    ngx_zk_lock_node_t  *node;

    node = hold->node;
    error = node->error;
    abort = gate->lost_abort || error == NGX_ZK_LOCK_REVOKED;

    switch (error) {

    case NGX_ZK_LOCK_REVOKED:
        ngx_log_error(NGX_LOG_WARN, gate->log, 0,
                      "%s \"%V\" revoked while held: node \"%s/%s\", %s",
                      ngx_zk_lock_gate_directive(hold), &hold->path,
                      ngx_zk_lock_node_path(node), node->name, gate->cut);
        break;

    case NGX_ZK_LOCK_JEOPARDY:
        if (abort) {
            ngx_log_error(NGX_LOG_ERR, gate->log, 0,
                          "%s \"%V\" lost while held: no word from "
                          "zookeeper, the session may expire, %s",
                          ngx_zk_lock_gate_directive(hold), &hold->path,
                          gate->cut);
            break;
        }

        /*
         * zk_lock_lost finish: the participant goes on, and while the
         * session lives nobody else may have the lock; its node goes
         * when the participant ends, or with the session
         */

        ngx_log_error(NGX_LOG_ERR, gate->log, 0,
                      "%s \"%V\" lost while held: no word from zookeeper, "
                      "the session may expire, its node is kept until "
                      "the %s ends",
                      ngx_zk_lock_gate_directive(hold), &hold->path,
                      gate->noun);

        ngx_zk_lock_gate_result(gate, hold, NGX_ZK_LOCK_GATE_JEOPARDY);
        return;

    default:
        ngx_log_error(NGX_LOG_ERR, gate->log, 0,
                      "%s \"%V\" lost while held (%d: %s)%s%s",
                      ngx_zk_lock_gate_directive(hold), &hold->path,
                      error, zerror(error), abort ? ", " : "",
                      abort ? gate->cut : "");
    }

    /* the node may be freed */

    ngx_zk_lock_gate_drop(gate, hold);
    ngx_zk_lock_gate_result(gate, hold,
                            (error == NGX_ZK_LOCK_REVOKED)
                            ? NGX_ZK_LOCK_GATE_REVOKED
                            : (error == NGX_ZK_LOCK_JEOPARDY)
                              ? NGX_ZK_LOCK_GATE_JEOPARDY
                              : NGX_ZK_LOCK_GATE_LOST);
    if (!abort) {
        if (!gate->done) {
            ngx_zk_lock_gate_rewind(gate, hold);
        }

        return;
    }

    if (gate->done) {
        gate->lost(gate);
        return;
    }

    /* still waiting for a later lock: the wait ends with the loss */

    ngx_zk_lock_gate_unwait(gate);
    ngx_zk_lock_gate_give_back(gate);

    gate->handler(gate);
}


/*
 * zk_lock_lost finish, while a later lock is waited for: the participant
 * has not gone on yet, and goes on with all its locks or none.  The lock
 * lost is taken again, and those after it let go and taken again after
 * it, in the order every participant takes them, so that none waits for
 * another that waits for it.
 */

static void
ngx_zk_lock_gate_rewind(ngx_zk_lock_gate_t *gate,
    ngx_zk_lock_gate_hold_t *hold)
{
    ngx_uint_t  i;

    ngx_log_error(NGX_LOG_WARN, gate->log, 0,
                  "%s \"%V\" lost before the %s went on: taken again",
                  ngx_zk_lock_gate_directive(hold), &hold->path, gate->noun);

    ngx_zk_lock_gate_unwait(gate);

    for (i = hold - gate->holds + 1; i < gate->nholds; i++) {
        ngx_zk_lock_gate_drop(gate, &gate->holds[i]);
    }

    gate->next = hold - gate->holds;

    ngx_zk_lock_gate_go(gate, &gate->holds[gate->nholds - 1]);
}


static void
ngx_zk_lock_gate_timeout(ngx_event_t *ev)
{
    ngx_zk_lock_gate_t  *gate;

    gate = ev->data;

    ngx_zk_lock_gate_unwait(gate);
    ngx_zk_lock_gate_expired(gate, &gate->holds[gate->next]);
}


/* the wait is over (unwaited) without the lock: its timeout, or a try's */

static void
ngx_zk_lock_gate_expired(ngx_zk_lock_gate_t *gate,
    ngx_zk_lock_gate_hold_t *hold)
{
    ngx_uint_t              silent, reached;
    ngx_zk_lock_session_t  *s;
    u_char                  out[NGX_ZK_LOCK_GATE_OUTAGE_LEN];

    s = gate->session;

    /* a server that answers nothing is out of reach, a hang as a refusal */
    silent = s->connected && ngx_zk_lock_session_silent(s);

    /* a worker that has no session waits through a sibling's, connected */
    reached = s->connected || (s->siblings && ngx_zk_lock_session_none(s));

    if (reached && !silent) {
        ngx_log_error(gate->log_level, gate->log, 0,
                      "%s \"%V\" not acquired in %Mms",
                      ngx_zk_lock_gate_directive(hold), &hold->path,
                      gate->wait_time);

        ngx_zk_lock_gate_end(gate, NGX_ZK_LOCK_GATE_TIMEOUT);
        return;
    }

    /* the lines below refer to the outage (and a hang begins one) */

    (void) ngx_zk_lock_gate_outage(s, out, sizeof(out));

    if (silent && !gate->fail_open) {

        /*
         * not the cap: ZooKeeper could not answer; its leases still
         * count, so no local lease either, before the jeopardy
         */

        ngx_log_error(NGX_LOG_ERR, gate->log, 0,
                      "%s \"%V\" not acquired in %Mms: no answer from "
                      "zookeeper%s", ngx_zk_lock_gate_directive(hold),
                      &hold->path, gate->wait_time, out);

        ngx_zk_lock_gate_end(gate, NGX_ZK_LOCK_GATE_UNREACHABLE);
        return;
    }

    if (gate->fail_local && hold->node) {
        ngx_zk_lock_gate_to_local(gate, hold);
        return;
    }

    if (gate->fail_open) {
        ngx_log_error(NGX_LOG_ERR, gate->log, 0,
                      "%s \"%V\" bypassed after %Mms: %s%s",
                      ngx_zk_lock_gate_directive(hold), &hold->path,
                      gate->wait_time,
                      silent ? "no answer from zookeeper"
                             : "no zookeeper connection", out);

        ngx_zk_lock_gate_bypass(gate, hold);
        return;
    }

    ngx_log_error(NGX_LOG_ERR, gate->log, 0,
                  "%s \"%V\" not acquired in %Mms: no zookeeper "
                  "connection%s", ngx_zk_lock_gate_directive(hold),
                  &hold->path, gate->wait_time, out);

    ngx_zk_lock_gate_end(gate, NGX_ZK_LOCK_GATE_ERROR);
}


/* zk_lock_fail open, once waiting: let through, none of its locks held */

static void
ngx_zk_lock_gate_bypass(ngx_zk_lock_gate_t *gate,
    ngx_zk_lock_gate_hold_t *hold)
{
    ngx_zk_lock_gate_give_back(gate);
    ngx_zk_lock_gate_result(gate, hold, NGX_ZK_LOCK_GATE_BYPASSED);
    gate->done = 1;

    gate->handler(gate);
}


/* the wait ends without the locks */

static void
ngx_zk_lock_gate_end(ngx_zk_lock_gate_t *gate,
    ngx_zk_lock_gate_result_e result)
{
    ngx_zk_lock_gate_give_back(gate);
    ngx_zk_lock_gate_result(gate, &gate->holds[gate->next], result);

    gate->handler(gate);
}


/* refused before it asks: the path or weight of lock i is invalid */

void
ngx_zk_lock_gate_refuse(ngx_zk_lock_gate_t *gate, ngx_uint_t i)
{
    ngx_zk_lock_gate_result(gate, &gate->holds[i], NGX_ZK_LOCK_GATE_REJECTED);
}


/* the participant left while it waited */

void
ngx_zk_lock_gate_cancel(ngx_zk_lock_gate_t *gate)
{
    ngx_zk_lock_gate_hold_t  *hold;

    hold = &gate->holds[gate->next];

    ngx_zk_lock_gate_unwait(gate);
    ngx_zk_lock_gate_give_back(gate);
    ngx_zk_lock_gate_result(gate, hold, NGX_ZK_LOCK_GATE_GONE);
}


/* the participant ends, however: so do its nodes */

void
ngx_zk_lock_gate_done(ngx_zk_lock_gate_t *gate)
{
    ngx_zk_lock_gate_unwait(gate);
    ngx_zk_lock_gate_give_back(gate);
}


static void
ngx_zk_lock_gate_unwait(ngx_zk_lock_gate_t *gate)
{
    if (!gate->waiting) {
        return;
    }

    gate->waiting = 0;
    gate->waiters->n--;
    ngx_queue_remove(&gate->queue);
    gate->wait_time = ngx_current_msec - gate->started;

    ngx_zk_lock_gate_count(gate, &gate->holds[gate->next],
                           NGX_ZK_LOCK_GATE_UNWAIT,
                           ngx_current_msec - gate->since);

    if (gate->timer.timer_set) {
        ngx_del_timer(&gate->timer);
    }
}


/* $zk_lock_status, and the count of the lock it happened at */

static void
ngx_zk_lock_gate_result(ngx_zk_lock_gate_t *gate,
    ngx_zk_lock_gate_hold_t *hold, ngx_zk_lock_gate_result_e result)
{
    ngx_zk_lock_outage_t  *o;

    gate->result = result;

    ngx_zk_lock_gate_count(gate, hold, result, 0);

    /* what the outage did, said at its end */

    o = &gate->session->outage;

    if (!o->out) {
        return;
    }

    switch (result) {

    case NGX_ZK_LOCK_GATE_ERROR:
        o->refused++;
        break;

    case NGX_ZK_LOCK_GATE_TIMEOUT:
    case NGX_ZK_LOCK_GATE_UNREACHABLE:
        o->timed_out++;
        break;

    case NGX_ZK_LOCK_GATE_BYPASSED:
        o->through++;
        break;

    default:
        break;
    }
}


/*
 * The outage a participant's line refers to, "" if none: ", zookeeper
 * unreachable for 3.1s", the time since it began, as its own line says
 */

static u_char *
ngx_zk_lock_gate_outage(ngx_zk_lock_session_t *s, u_char *buf, size_t len)
{
    u_char      *p;
    ngx_msec_t   out;

    out = ngx_zk_lock_outage_for(s);

    if (out == 0) {
        buf[0] = '\0';
        return buf;
    }

    p = ngx_snprintf(buf, len - 1, " (zookeeper unreachable for %M.%Ms)",
                     out / 1000, out % 1000 / 100);
    *p = '\0';

    return buf;
}


/* through ZooKeeper (acquired), or a local lease */

static void
ngx_zk_lock_gate_held(ngx_zk_lock_gate_t *gate, ngx_zk_lock_gate_hold_t *hold,
    ngx_zk_lock_gate_result_e how)
{
    hold->counted = 1;

    if (hold->node) {
        ngx_zk_lock_gate_remember(gate, hold);
    }

    ngx_zk_lock_gate_count(gate, hold, how, ngx_current_msec - gate->since);
}


/*
 * A node held stays in the participant's variables ($zk_lock_node,
 * $zk_lock_token) for its whole life, also once lost with its session:
 * the access log then has the token that the upstream was given
 */

static void
ngx_zk_lock_gate_remember(ngx_zk_lock_gate_t *gate,
    ngx_zk_lock_gate_hold_t *hold)
{
    u_char              *p, *path;
    size_t               n, len;
    ngx_zk_lock_node_t  *node;

    node = hold->node;
    path = ngx_zk_lock_node_path(node);
    n = ngx_strlen(path);
    len = n + 1 + node->name_len;

    p = ngx_pnalloc(gate->pool, len);
    if (p == NULL) {
        /* the variables go without it */
        return;
    }

    /* copied, not printed: this runs for every lock a participant gets */

    hold->held.data = p;
    p = ngx_cpymem(p, path, n);
    *p++ = '/';
    ngx_memcpy(p, node->name, node->name_len);
    hold->held.len = len;
    hold->token = node->czxid;
}


/*
 * The nodes a participant holds or held, as $zk_lock_node (full paths)
 * or $zk_lock_token (tokens), separated by spaces: the length, then the
 * text after what is at start..p
 */

size_t
ngx_zk_lock_gate_held_len(ngx_zk_lock_gate_t *gate, ngx_uint_t token)
{
    size_t      len;
    ngx_uint_t  i;

    len = 0;

    for (i = 0; i < gate->nholds; i++) {
        if (gate->holds[i].held.len) {
            len += (token ? NGX_INT64_LEN : gate->holds[i].held.len) + 1;
        }
    }

    return len;
}


u_char *
ngx_zk_lock_gate_held_nodes(ngx_zk_lock_gate_t *gate, ngx_uint_t token,
    u_char *p, u_char *start)
{
    ngx_uint_t                i;
    ngx_zk_lock_gate_hold_t  *hold;

    for (i = 0; i < gate->nholds; i++) {
        hold = &gate->holds[i];

        if (hold->held.len == 0) {
            continue;
        }

        if (p != start) {
            *p++ = ' ';
        }

        /* the fencing token: the node's czxid */

        p = token ? ngx_sprintf(p, "%L", hold->token)
                  : ngx_cpymem(p, hold->held.data, hold->held.len);
    }

    return p;
}


/* a lock held, or waited for, is let go: counted no more as held */

static void
ngx_zk_lock_gate_drop(ngx_zk_lock_gate_t *gate,
    ngx_zk_lock_gate_hold_t *hold)
{
    if (hold->counted) {
        hold->counted = 0;
        ngx_zk_lock_gate_count(gate, hold, NGX_ZK_LOCK_GATE_RELEASED, 0);
    }

    if (hold->node) {
        ngx_zk_lock_release(hold->node);
        hold->node = NULL;
    }

    ngx_zk_lock_local_leave(&hold->local);
}


static void
ngx_zk_lock_gate_give_back(ngx_zk_lock_gate_t *gate)
{
    ngx_uint_t  i;

    for (i = 0; i < gate->nholds; i++) {
        ngx_zk_lock_gate_drop(gate, &gate->holds[i]);

        /* a participant that did not get all its locks shows none */

        if (!gate->done) {
            ngx_str_null(&gate->holds[i].held);
        }
    }
}


/*
 * The layer's own counts, if it keeps them (HTTP's metrics), and the
 * core's (a stream status): how many hold and wait, and the results in
 * the order of the core's counts, after "none"
 */

static void
ngx_zk_lock_gate_count(ngx_zk_lock_gate_t *gate,
    ngx_zk_lock_gate_hold_t *hold, ngx_zk_lock_gate_result_e event,
    ngx_msec_t waited)
{
    if (gate->count) {
        gate->count(gate, hold, event, waited);
    }

    if (gate->stats == NULL) {
        return;
    }

    switch (event) {

    case NGX_ZK_LOCK_GATE_WAIT:
    case NGX_ZK_LOCK_GATE_UNWAIT:
        ngx_zk_lock_stats_gauge(gate->stats, hold->stat,
                                NGX_ZK_LOCK_STATS_WAITING,
                                (event == NGX_ZK_LOCK_GATE_WAIT) ? 1 : -1);
        return;

    case NGX_ZK_LOCK_GATE_RELEASED:
        ngx_zk_lock_stats_gauge(gate->stats, hold->stat,
                                NGX_ZK_LOCK_STATS_HELD, -1);
        return;

    case NGX_ZK_LOCK_GATE_NONE:
    case NGX_ZK_LOCK_GATE_REUSED:
        return;

    case NGX_ZK_LOCK_GATE_ACQUIRED:
    case NGX_ZK_LOCK_GATE_LOCAL:
        ngx_zk_lock_stats_gauge(gate->stats, hold->stat,
                                NGX_ZK_LOCK_STATS_HELD, 1);
        break;

    default:
        break;
    }

    ngx_zk_lock_stats_count(gate->stats, hold->stat, event - 1);
}


/*
 * The order in which a participant takes its locks, the same in every
 * worker of the fleet, so that no two wait for each other: by path, and
 * a writer before a reader of the same path
 */

ngx_int_t
ngx_zk_lock_gate_cmp(const void *one, const void *two)
{
    const ngx_zk_lock_gate_hold_t  *a = one;
    const ngx_zk_lock_gate_hold_t  *b = two;

    ngx_int_t  rc;

    rc = ngx_memn2cmp(a->path.data, b->path.data, a->path.len, b->path.len);

    if (rc == 0) {
        rc = (ngx_int_t) b->lock->type - (ngx_int_t) a->lock->type;
    }

    return rc;
}


/* a layer's waiters, in a worker: those its session's news moves */

void
ngx_zk_lock_gate_waiters(ngx_zk_lock_gate_waiters_t *w,
    ngx_zk_lock_session_t *s, ngx_log_t *log)
{
    ngx_queue_init(&w->queue);

    w->n = 0;
    w->session = s;
    w->event.handler = ngx_zk_lock_gate_news_handler;
    w->event.data = w;
    w->event.log = log;
}


/*
 * The session is usable again (connected, heard from): no local lease is
 * given any more, and those that wait for one queue in ZooKeeper instead.
 * Or it may have expired unheard of (jeopardy): those that wait in
 * ZooKeeper's queue where zk_lock_fail local=<n> applies take a local
 * lease instead, for the rest of their timeout.  From an event, not from
 * inside the session's completions.
 */

void
ngx_zk_lock_gate_news(ngx_zk_lock_gate_waiters_t *w)
{
    if (w->event.handler && !w->event.posted) {
        ngx_post_event(&w->event, &ngx_posted_events);
    }
}


static void
ngx_zk_lock_gate_news_handler(ngx_event_t *ev)
{
    ngx_zk_lock_gate_waiters_t  *w;

    w = ev->data;

    if (ngx_zk_lock_session_usable(w->session)) {
        ngx_zk_lock_local_recall(w->session);

    } else if (ngx_zk_lock_session_gone(w->session)) {
        ngx_zk_lock_gate_localize(w);
    }
}


static void
ngx_zk_lock_gate_localize(ngx_zk_lock_gate_waiters_t *w)
{
    ngx_queue_t               moving, *q;
    ngx_zk_lock_gate_t       *gate;
    ngx_zk_lock_gate_hold_t  *hold;

    if (ngx_queue_empty(&w->queue)) {
        return;
    }

    /* to_local() may put one back: the list is taken first */

    ngx_queue_init(&moving);
    ngx_queue_add(&moving, &w->queue);
    ngx_queue_init(&w->queue);

    while (!ngx_queue_empty(&moving)) {
        q = ngx_queue_head(&moving);
        ngx_queue_remove(q);
        ngx_queue_insert_tail(&w->queue, q);

        gate = ngx_queue_data(q, ngx_zk_lock_gate_t, queue);
        hold = &gate->holds[gate->next];

        if (!gate->fail_local || hold->node == NULL) {
            continue;
        }

        ngx_zk_lock_gate_unwait(gate);
        ngx_zk_lock_gate_to_local(gate, hold);
    }
}


/*
 * The session's handlers where a layer's waiters hear its news: s->data
 * is the layer's waiters
 */

void
ngx_zk_lock_gate_connected(ngx_zk_lock_session_t *s)
{
    ngx_zk_lock_recipe_connected(s);
    ngx_zk_lock_gate_news(s->data);
}


/* holders are told, and waiters where local leases apply take them */

void
ngx_zk_lock_gate_jeopardy(ngx_zk_lock_session_t *s)
{
    ngx_zk_lock_recipe_jeopardy(s);
    ngx_zk_lock_gate_news(s->data);
}


void
ngx_zk_lock_gate_heard(ngx_zk_lock_session_t *s)
{
    ngx_zk_lock_gate_news(s->data);
}


/* a layer checks the core that serves it before it configures anything */

ngx_int_t
ngx_zk_lock_gate_built(ngx_conf_t *cf, char *version, size_t abi)
{
    if (ngx_strcmp(version, NGX_ZK_LOCK_VERSION) == 0
        && abi == NGX_ZK_LOCK_ABI)
    {
        return NGX_OK;
    }

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "zk_lock: a module of version %s is loaded with the "
                       "core of another build (version %s): load the HTTP "
                       "and stream modules of one build",
                       version, NGX_ZK_LOCK_VERSION);

    return NGX_ERROR;
}


uint64_t
ngx_zk_lock_gate_flow(ngx_zk_lock_gate_t *gate)
{
    ngx_uint_t  i;

    for (i = 0; i < gate->nholds; i++) {
        if (gate->holds[i].flow.id) {
            return gate->holds[i].flow.id;
        }
    }

    return 0;
}
