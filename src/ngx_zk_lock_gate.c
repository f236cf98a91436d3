
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>

#include "ngx_zk_lock_gate.h"
#include "ngx_zk_lock_semv2.h"
#include "ngx_zk_lock_take.h"


static ngx_uint_t ngx_zk_lock_gate_full(ngx_zk_lock_gate_t *gate);
static ngx_int_t ngx_zk_lock_gate_take(ngx_zk_lock_gate_t *gate);
static void ngx_zk_lock_gate_told(ngx_zk_lock_node_t *node);
static void ngx_zk_lock_gate_failed(ngx_zk_lock_gate_t *gate,
    ngx_zk_lock_gate_hold_t *hold, int error);
static void ngx_zk_lock_gate_lost(ngx_zk_lock_gate_t *gate,
    ngx_zk_lock_gate_hold_t *hold);
static void ngx_zk_lock_gate_timeout(ngx_event_t *ev);
static void ngx_zk_lock_gate_end(ngx_zk_lock_gate_t *gate,
    ngx_zk_lock_gate_result_e result);
static void ngx_zk_lock_gate_unwait(ngx_zk_lock_gate_t *gate);
static void ngx_zk_lock_gate_result(ngx_zk_lock_gate_t *gate,
    ngx_zk_lock_gate_hold_t *hold, ngx_zk_lock_gate_result_e result);
static void ngx_zk_lock_gate_held(ngx_zk_lock_gate_t *gate,
    ngx_zk_lock_gate_hold_t *hold);
static void ngx_zk_lock_gate_drop(ngx_zk_lock_gate_t *gate,
    ngx_zk_lock_gate_hold_t *hold);
static void ngx_zk_lock_gate_give_back(ngx_zk_lock_gate_t *gate);


/*
 * NGX_OK: all held at once, or let through (done); NGX_AGAIN: waiting,
 * the handler is called at the end; NGX_DECLINED: refused at once, the
 * result says why
 */

ngx_int_t
ngx_zk_lock_gate_start(ngx_zk_lock_gate_t *gate)
{
    ngx_zk_lock_session_t    *s;
    ngx_zk_lock_gate_hold_t  *hold;

    s = gate->session;
    hold = &gate->holds[0];

    gate->timer.handler = ngx_zk_lock_gate_timeout;
    gate->timer.data = gate;
    gate->timer.log = gate->log;

    /*
     * zk_lock_fail open: no waiting when ZooKeeper is known to be out of
     * reach; closed: none either, the participant is refused at once
     */

    if (ngx_zk_lock_session_gone(s) || (s->down && gate->fail_open)) {
        ngx_log_error(NGX_LOG_ERR, gate->log, 0,
                      "%s \"%V\" %s: no zookeeper connection",
                      ngx_zk_lock_gate_directive(hold), &hold->path,
                      gate->fail_open ? "bypassed" : "refused");

        if (gate->fail_open) {
            ngx_zk_lock_gate_result(gate, hold, NGX_ZK_LOCK_GATE_BYPASSED);
            gate->done = 1;
            return NGX_OK;
        }

        ngx_zk_lock_gate_result(gate, hold, NGX_ZK_LOCK_GATE_ERROR);
        return NGX_DECLINED;
    }

    if (ngx_zk_lock_gate_full(gate)) {
        ngx_zk_lock_gate_result(gate, &gate->holds[gate->next],
                                NGX_ZK_LOCK_GATE_REJECTED);
        return NGX_DECLINED;
    }

    gate->started = ngx_current_msec;

    return ngx_zk_lock_gate_take(gate);
}


/* the worker's queue (zk_lock_max_waiting), and a lock's (max_waiting=) */

static ngx_uint_t
ngx_zk_lock_gate_full(ngx_zk_lock_gate_t *gate)
{
    ngx_uint_t                i, n;
    ngx_zk_lock_gate_hold_t  *hold;

    n = gate->max_waiting ? gate->max_waiting : ngx_cycle->connection_n;

    if (*gate->nwaiting >= n) {
        ngx_log_error(NGX_LOG_ERR, gate->log, 0,
                      "%s \"%V\" refused: %ui wait in the worker "
                      "(zk_lock_max_waiting)",
                      ngx_zk_lock_gate_directive(&gate->holds[0]),
                      &gate->holds[0].path, *gate->nwaiting);
        return 1;
    }

    for (i = 0; i < gate->nholds; i++) {
        hold = &gate->holds[i];

        if (hold->lock->max_waiting == 0) {
            continue;
        }

        n = hold->lock->v2 ? ngx_zk_lock_semv2_waiting(gate->session,
                                                       &hold->path)
                           : ngx_zk_lock_waiting(gate->session, &hold->path);

        if (n >= hold->lock->max_waiting) {
            gate->next = i;

            ngx_log_error(NGX_LOG_ERR, gate->log, 0,
                          "%s \"%V\" refused: %ui wait for it in the "
                          "worker (max_waiting)",
                          ngx_zk_lock_gate_directive(hold), &hold->path, n);
            return 1;
        }
    }

    return 0;
}


/* the locks from gate->next on */

static ngx_int_t
ngx_zk_lock_gate_take(ngx_zk_lock_gate_t *gate)
{
    ngx_msec_t                timeout;
    ngx_zk_lock_node_t       *node;
    ngx_zk_lock_gate_hold_t  *hold;

    for ( /* void */ ; gate->next < gate->nholds; gate->next++) {
        hold = &gate->holds[gate->next];

        timeout = (hold->lock->timeout != NGX_CONF_UNSET_MSEC)
                  ? hold->lock->timeout : gate->timeout;

        node = ngx_zk_lock_take(gate->session, hold->lock, &hold->path,
                                hold->weight, &gate->info, timeout == 0,
                                ngx_zk_lock_gate_told, NULL, gate,
                                gate->log);
        if (node == NULL) {
            return NGX_ERROR;
        }

        hold->node = node;

        if (node->state == NGX_ZK_LOCK_HELD) {
            /* a lease that the worker kept: no wait, no ZooKeeper call */
            ngx_zk_lock_gate_held(gate, hold);
            continue;
        }

        /* a try (timeout=0) waits for the first listing, at most this */

        if (timeout == 0) {
            timeout = gate->session->timeout;
        }

        gate->waiting = 1;
        (*gate->nwaiting)++;
        ngx_add_timer(&gate->timer, timeout);

        ngx_zk_lock_stats_gauge(gate->stats, hold->stat,
                                NGX_ZK_LOCK_STATS_WAITING, 1);

        ngx_log_debug2(NGX_LOG_DEBUG_CORE, gate->log, 0,
                       "%s \"%V\": waiting",
                       ngx_zk_lock_gate_directive(hold), &hold->path);

        return NGX_AGAIN;
    }

    gate->done = 1;
    gate->result = NGX_ZK_LOCK_GATE_ACQUIRED;
    gate->wait_time = ngx_current_msec - gate->started;

    return NGX_OK;
}


/* a node's news: the one waited for, or one that was held */

static void
ngx_zk_lock_gate_told(ngx_zk_lock_node_t *node)
{
    ngx_int_t                 rc;
    ngx_uint_t                i;
    ngx_zk_lock_gate_t       *gate;
    ngx_zk_lock_gate_hold_t  *hold;

    gate = node->data;

    for (i = 0; i < gate->nholds; i++) {
        if (gate->holds[i].node == node) {
            break;
        }
    }

    if (i == gate->nholds) {
        return;
    }

    hold = &gate->holds[i];

    if (!gate->waiting || i != gate->next) {
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
    ngx_zk_lock_gate_held(gate, hold);
    gate->next++;

    rc = ngx_zk_lock_gate_take(gate);

    if (rc == NGX_AGAIN) {
        return;
    }

    if (rc == NGX_ERROR) {
        ngx_zk_lock_gate_end(gate, NGX_ZK_LOCK_GATE_ERROR);
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
    ngx_zk_lock_gate_unwait(gate);

    if (error == NGX_ZK_LOCK_BUSY) {
        ngx_log_error(gate->log_level, gate->log, 0,
                      "%s \"%V\" not acquired: taken",
                      ngx_zk_lock_gate_directive(hold), &hold->path);

        ngx_zk_lock_gate_end(gate, NGX_ZK_LOCK_GATE_TIMEOUT);
        return;
    }

    if (gate->fail_open && ngx_zk_lock_session_error(error)) {
        ngx_log_error(NGX_LOG_ERR, gate->log, 0,
                      "%s \"%V\" bypassed: %s",
                      ngx_zk_lock_gate_directive(hold), &hold->path,
                      zerror(error));

        ngx_zk_lock_gate_give_back(gate);
        ngx_zk_lock_gate_result(gate, hold, NGX_ZK_LOCK_GATE_BYPASSED);
        gate->done = 1;

        gate->handler(gate);
        return;
    }

    if (error == NGX_ZK_LOCK_REVOKED) {
        ngx_log_error(NGX_LOG_WARN, gate->log, 0,
                      "%s \"%V\" revoked while waiting",
                      ngx_zk_lock_gate_directive(hold), &hold->path);

        ngx_zk_lock_gate_end(gate, NGX_ZK_LOCK_GATE_REVOKED);
        return;
    }

    ngx_log_error(NGX_LOG_ERR, gate->log, 0,
                  "%s \"%V\" failed (%d: %s)",
                  ngx_zk_lock_gate_directive(hold), &hold->path,
                  error, zerror(error));

    ngx_zk_lock_gate_end(gate, NGX_ZK_LOCK_GATE_ERROR);
}


/*
 * A held lock is gone, or may be: the session went unheard (jeopardy),
 * expired, or Curator's Revoker asked for it
 */

static void
ngx_zk_lock_gate_lost(ngx_zk_lock_gate_t *gate, ngx_zk_lock_gate_hold_t *hold)
{
    int         error;
    ngx_uint_t  abort, level;

    error = hold->node->error;
    abort = gate->lost_abort || error == NGX_ZK_LOCK_REVOKED;

    if (error == NGX_ZK_LOCK_JEOPARDY && !abort) {

        /*
         * zk_lock_lost finish: the participant goes on, and while the
         * session lives nobody else may have the lock; its node goes
         * when the participant ends, or with the session
         */

        ngx_log_error(NGX_LOG_ERR, gate->log, 0,
                      "%s \"%V\" lost while held: no word from zookeeper, "
                      "the session may expire, its node is kept until "
                      "it is let go",
                      ngx_zk_lock_gate_directive(hold), &hold->path);

        ngx_zk_lock_gate_result(gate, hold, NGX_ZK_LOCK_GATE_LOST);
        return;
    }

    level = (error == NGX_ZK_LOCK_REVOKED) ? NGX_LOG_WARN : NGX_LOG_ERR;

    ngx_log_error(level, gate->log, 0, "%s \"%V\" %s while held%s",
                  ngx_zk_lock_gate_directive(hold), &hold->path,
                  error == NGX_ZK_LOCK_REVOKED ? "revoked" : "lost",
                  abort ? ", closing the connection" : "");

    ngx_zk_lock_gate_drop(gate, hold);
    ngx_zk_lock_gate_result(gate, hold, (error == NGX_ZK_LOCK_REVOKED)
                                        ? NGX_ZK_LOCK_GATE_REVOKED
                                        : NGX_ZK_LOCK_GATE_LOST);
    if (!abort) {
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


static void
ngx_zk_lock_gate_timeout(ngx_event_t *ev)
{
    ngx_zk_lock_gate_t       *gate;
    ngx_zk_lock_gate_hold_t  *hold;

    gate = ev->data;
    hold = &gate->holds[gate->next];

    ngx_zk_lock_gate_unwait(gate);

    if (gate->session->connected) {
        ngx_log_error(gate->log_level, gate->log, 0,
                      "%s \"%V\" not acquired in %Mms",
                      ngx_zk_lock_gate_directive(hold), &hold->path,
                      gate->wait_time);

        ngx_zk_lock_gate_end(gate, NGX_ZK_LOCK_GATE_TIMEOUT);
        return;
    }

    ngx_log_error(NGX_LOG_ERR, gate->log, 0,
                  "%s \"%V\" not acquired in %Mms: no zookeeper connection",
                  ngx_zk_lock_gate_directive(hold), &hold->path,
                  gate->wait_time);

    if (gate->fail_open) {
        ngx_zk_lock_gate_give_back(gate);
        ngx_zk_lock_gate_result(gate, hold, NGX_ZK_LOCK_GATE_BYPASSED);
        gate->done = 1;

        gate->handler(gate);
        return;
    }

    ngx_zk_lock_gate_end(gate, NGX_ZK_LOCK_GATE_ERROR);
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
    (*gate->nwaiting)--;
    gate->wait_time = ngx_current_msec - gate->started;

    ngx_zk_lock_stats_gauge(gate->stats, gate->holds[gate->next].stat,
                            NGX_ZK_LOCK_STATS_WAITING, -1);

    if (gate->timer.timer_set) {
        ngx_del_timer(&gate->timer);
    }
}


/* $zk_lock_status, and the count of the lock it happened at */

static void
ngx_zk_lock_gate_result(ngx_zk_lock_gate_t *gate,
    ngx_zk_lock_gate_hold_t *hold, ngx_zk_lock_gate_result_e result)
{
    gate->result = result;

    /* the results in the order of the core's counts, after "none" */
    ngx_zk_lock_stats_count(gate->stats, hold->stat, result - 1);
}


static void
ngx_zk_lock_gate_held(ngx_zk_lock_gate_t *gate,
    ngx_zk_lock_gate_hold_t *hold)
{
    hold->counted = 1;

    ngx_zk_lock_stats_gauge(gate->stats, hold->stat,
                            NGX_ZK_LOCK_STATS_HELD, 1);
    ngx_zk_lock_stats_count(gate->stats, hold->stat,
                            NGX_ZK_LOCK_STATS_ACQUIRED);
}


/* a lock held, or waited for, is let go: counted no more as held */

static void
ngx_zk_lock_gate_drop(ngx_zk_lock_gate_t *gate,
    ngx_zk_lock_gate_hold_t *hold)
{
    if (hold->counted) {
        hold->counted = 0;
        ngx_zk_lock_stats_gauge(gate->stats, hold->stat,
                                NGX_ZK_LOCK_STATS_HELD, -1);
    }

    if (hold->node) {
        ngx_zk_lock_release(hold->node);
        hold->node = NULL;
    }
}


static void
ngx_zk_lock_gate_give_back(ngx_zk_lock_gate_t *gate)
{
    ngx_uint_t  i;

    for (i = 0; i < gate->nholds; i++) {
        ngx_zk_lock_gate_drop(gate, &gate->holds[i]);
    }
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
