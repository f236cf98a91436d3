
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>

#include "ngx_zk_lock_keep.h"
#include "ngx_zk_lock_weigh.h"


/*
 * Kept leases (zk_semaphore keep=<time>, protocol v1; zk_mutex keep=<time>
 * is the same with one lease, and so passes the mutex between the
 * instance's requests for a quantum: lock cohorting).  The nodes are
 * Curator's, "_c_<uuid>-lock-<seq>", and a node holds a lease while fewer
 * than "leases" children come before it, as ever; what changes is who
 * owns a node.  A worker's nodes on the path belong to its pool, not to
 * its requests: a request gets a ticket, and the ticket a lease that the
 * pool holds, at once when one is idle, else in arrival order once one
 * is freed or queued one holds (weighted fair between flows with fair=,
 * see ngx_zk_lock_fair.c).  When its request ends the lease stays in
 * the pool, idle, until the next request or until "keep" has passed
 * without one; then its node is deleted.  So a request on a kept lease
 * costs ZooKeeper nothing, and the bound is as exact as Curator's: a
 * request runs on a node that holds, and no two run on the same one.
 *
 * Fair shares.  Every listing of a path where the worker holds leases
 * sets a watch on its children (path_list(), keep_hear()), so that the
 * worker hears of any other participant that queues, and sees the queue;
 * one that holds none only waits, and hears too while its node is one of
 * the first 4 x "leases" waiters (keep_hear()); the more participants, the
 * more paced (keep_listed()).  The nodes of an
 * nginx share the first 8 hex digits of their UUID, drawn by its master,
 * and those of a worker the first 18 (session_uuid()), so instances and
 * workers are told apart, a Curator client's node as an instance of its
 * own.  A participant with a node beyond the first "leases" waits, and
 * wants more; one without waits for nothing, and has what it wants.  The
 * fair share is max-min, between instances and then between the workers
 * of each: the level L at which those that want more would get L each,
 * the others what they hold.  While anybody else waits:
 *
 *   - a lease idle for longer than a grace (NGX_ZK_LOCK_KEEP_GRACE,
 *     a client's pause between two requests) is given back at once;
 *   - a lease whose request ends is given back when the worker holds more
 *     than L rounded up, or more than L rounded down while a participant
 *     waits that has fewer than that (or none, whatever L): the one that
 *     is owed a lease gets it in turn, as the queue is first come first
 *     served, and from then on the shares stay put, with no ZooKeeper
 *     write, as long as the demand does;
 *   - at most one node of the worker queues: its requests wait behind it
 *     in the worker, so that a participant that queues after it waits for
 *     one node per worker at most.
 *
 * Without others waiting, the worker queues as many nodes as its requests
 * need and the last listing showed free leases, and grows at once.
 *
 * With priority=, the instances are weighed by what their classes'
 * claims give them, and a worker holds no more than its seats of the
 * classes' parts, so that reserved seats stay idle (see weigh.c);
 * inside it, the classes are served weighted fair by their parts
 * (fair.c).
 *
 * A read lock's pool (zk_rwlock read keep=) has no shares: readers share,
 * so a lease of its takes any number of requests at once (its riders),
 * one node serves them all, and the only participant that waits for it is
 * a writer; see assign_read() and boards().
 *
 * A lease's states: the diagram is in ngx_zk_lock_pool.h.
 */


/* a lease idle for less than this is between a client's requests, ms */
#define NGX_ZK_LOCK_KEEP_GRACE   10

/*
 * Tickets wait this long for the leases recalled from the owners that
 * keep them (zk_sessions' siblings) before nodes queue, ms: an idle one
 * comes back within a round trip, a busy one says so at once
 */
#define NGX_ZK_LOCK_KEEP_PATIENCE  100

/*
 * A node queued for requests that a lease freed in the worker served
 * instead waits this long for more, ms: two clients on one lease would
 * otherwise create and delete a node for every request
 */
#define NGX_ZK_LOCK_KEEP_LINGER  NGX_ZK_LOCK_KEEP_GRACE

/*
 * A waiter this many times "leases" places back or further, of a pool that
 * holds none, watches a window rather than hear, see hear()
 */
#define NGX_ZK_LOCK_KEEP_FAR  4

/* participants that list a path at the full pace, see listed() */
#define NGX_ZK_LOCK_KEEP_LISTERS  16


/*
 * A path built from a request that nobody uses now: its leases are kept
 * only for a client's pause, not for "keep" (see check())
 */
#define ngx_zk_lock_keep_unused(pool)                                    \
    ((pool)->transient && (pool)->held == (pool)->idle                   \
     && (pool)->lock->tickets == 0)


static ngx_zk_lock_pool_t *ngx_zk_lock_keep_pool(
    ngx_zk_lock_session_t *s, ngx_str_t *path, ngx_zk_lock_kind_e kind,
    ngx_uint_t leases, ngx_zk_lock_counter_t *counter, ngx_msec_t keep,
    ngx_uint_t transient);
static ngx_int_t ngx_zk_lock_keep_queue(ngx_zk_lock_session_t *s,
    ngx_str_t *path, ngx_zk_lock_pool_t *pool, ngx_uint_t leases,
    ngx_zk_lock_counter_t *counter);
static ngx_zk_lock_node_t *ngx_zk_lock_keep_ticket(
    ngx_zk_lock_pool_t *pool, ngx_zk_lock_notify_pt notify,
    ngx_zk_lock_notify_pt recall, void *data, ngx_log_t *log);
static void ngx_zk_lock_keep_admit(ngx_zk_lock_pool_t *pool,
    ngx_zk_lock_node_t *ticket, ngx_uint_t tell);
static ngx_zk_lock_lease_t *ngx_zk_lock_keep_ready(
    ngx_zk_lock_pool_t *pool);
static void ngx_zk_lock_keep_refill(ngx_zk_lock_pool_t *pool);
static ngx_uint_t ngx_zk_lock_keep_stall(ngx_zk_lock_pool_t *pool);
static void ngx_zk_lock_keep_timer(ngx_zk_lock_pool_t *pool,
    ngx_event_t *ev, ngx_event_handler_pt handler, ngx_log_t *log);
static void ngx_zk_lock_keep_timers_stop(ngx_zk_lock_pool_t *pool);
static void ngx_zk_lock_keep_node_notify(ngx_zk_lock_node_t *node);
static void ngx_zk_lock_keep_assign(ngx_zk_lock_lease_t *lease);
static void ngx_zk_lock_keep_assign_read(ngx_zk_lock_lease_t *lease,
    ngx_uint_t fresh);
static ngx_uint_t ngx_zk_lock_keep_boards(ngx_zk_lock_lease_t *lease);
static void ngx_zk_lock_keep_next(ngx_zk_lock_lease_t *lease,
    ngx_uint_t reused);
static void ngx_zk_lock_keep_grant(ngx_zk_lock_lease_t *lease,
    ngx_zk_lock_node_t *ticket, ngx_uint_t reused);
static void ngx_zk_lock_keep_idle(ngx_zk_lock_lease_t *lease);
static ngx_uint_t ngx_zk_lock_keep_lent(ngx_zk_lock_pool_t *pool);
static void ngx_zk_lock_keep_refill_handler(ngx_event_t *ev);
static void ngx_zk_lock_keep_recall(ngx_zk_lock_node_t *ticket);
static void ngx_zk_lock_keep_check(ngx_zk_lock_lease_t *lease);
static void ngx_zk_lock_keep_settle(ngx_zk_lock_pool_t *pool);
static void ngx_zk_lock_keep_check_idle(ngx_zk_lock_pool_t *pool);
static void ngx_zk_lock_keep_timer_handler(ngx_event_t *ev);
static void ngx_zk_lock_keep_give_back(ngx_zk_lock_lease_t *lease,
    ngx_uint_t demand);
static void ngx_zk_lock_keep_jeopardy(ngx_zk_lock_lease_t *lease);
static void ngx_zk_lock_keep_drop(ngx_zk_lock_lease_t *lease);
static void ngx_zk_lock_keep_fail(ngx_zk_lock_pool_t *pool,
    int error);
static void ngx_zk_lock_keep_unqueue(ngx_zk_lock_pool_t *pool);
static void ngx_zk_lock_keep_linger(ngx_zk_lock_pool_t *pool);
static void ngx_zk_lock_keep_linger_handler(ngx_event_t *ev);
static void ngx_zk_lock_keep_over(ngx_zk_lock_pool_t *pool);
static void ngx_zk_lock_keep_release(ngx_zk_lock_node_t *ticket);
static void ngx_zk_lock_keep_tell(ngx_zk_lock_node_t *ticket);
static void ngx_zk_lock_keep_tell_handler(ngx_event_t *ev);
static void ngx_zk_lock_keep_hear(ngx_zk_lock_pool_t *pool);
static void ngx_zk_lock_keep_near(ngx_zk_lock_pool_t *pool,
    ngx_zk_lock_child_t *children, ngx_uint_t n, ngx_uint_t leases);
static void ngx_zk_lock_keep_gc(ngx_zk_lock_pool_t *pool);
static void ngx_zk_lock_keep_free(ngx_zk_lock_t *lock);
static void ngx_zk_lock_keep_listed_read(ngx_zk_lock_pool_t *pool,
    ngx_zk_lock_child_t *children, ngx_uint_t n);
static void ngx_zk_lock_keep_excess(ngx_zk_lock_pool_t *pool,
    ngx_zk_lock_child_t *children, ngx_uint_t n, ngx_uint_t leases);


static ngx_zk_lock_keeper_t  ngx_zk_lock_keeper = {
    ngx_zk_lock_keep_release,
    ngx_zk_lock_keep_free
};


void
ngx_zk_lock_keep_init(void)
{
    ngx_zk_lock_recipe_keeper(&ngx_zk_lock_keeper);
}


/* the layer of the directive that made the pool counts its kept leases */

static void
ngx_zk_lock_keep_report(ngx_zk_lock_params_t *lp, ngx_int_t idle,
    ngx_uint_t given_back)
{
    if (lp->report) {
        lp->report(lp, idle, given_back);
    }
}


/*
 * A request's ticket: HELD at once on an idle lease, else waiting for
 * one (its owner is told, as of a node)
 */

ngx_zk_lock_node_t *
ngx_zk_lock_keep_acquire(ngx_zk_lock_session_t *s, ngx_str_t *path,
    ngx_zk_lock_kind_e kind, ngx_uint_t leases,
    ngx_zk_lock_counter_t *counter, ngx_msec_t keep,
    ngx_uint_t transient, ngx_zk_lock_params_t *tag, ngx_zk_lock_flow_t *flow,
    ngx_zk_lock_notify_pt notify, ngx_zk_lock_notify_pt recall, void *data,
    ngx_log_t *log)
{
    ngx_int_t                  rc;
    ngx_zk_lock_pool_t        *pool;
    ngx_zk_lock_node_t        *ticket;

    pool = ngx_zk_lock_keep_pool(s, path, kind, leases, counter, keep,
                                 transient);
    if (pool == NULL) {
        return NULL;
    }

    pool->keep = keep;
    pool->tag = tag;

    ticket = ngx_zk_lock_keep_ticket(pool, notify, recall, data, log);
    if (ticket == NULL) {
        ngx_zk_lock_keep_gc(pool);
        return NULL;
    }

    if (flow && tag && tag->priority.len && pool->fair.classes == NULL) {
        pool->fair.classes = tag->classes;
    }

    rc = flow ? ngx_zk_lock_fair_join(&pool->fair, ticket, flow,
                                      ngx_zk_lock_weigh_fair_max(pool, tag))
              : NGX_OK;

    if (rc == NGX_ERROR) {
        ngx_free(ticket);
        pool->ntickets--;
        ngx_zk_lock_keep_gc(pool);
        return NULL;
    }

    if (flow && pool->board == NULL) {
        /* none: the instance is one flow to the others */
        pool->board = ngx_zk_lock_board(s, path, pool->fair.classes);

        if (pool->board) {
            ngx_add_timer(&pool->weigh, NGX_ZK_LOCK_KEEP_QUANTUM);
        }

    } else if (pool->board && pool->fair.classes) {
        /* a directive with priority= after one without, on the path */
        ngx_zk_lock_board_classify(pool->board, pool->fair.classes);
    }

    if (flow && pool->board && pool->fair.classes) {
        ngx_zk_lock_weigh_back(pool, ticket);
    }

    if (rc == NGX_OK) {
        /* else it waits for its flow's cap, see fair_leave() */
        ngx_zk_lock_keep_admit(pool, ticket, 0);
    }

    return ticket;
}


/*
 * A ticket takes its place in the pool: an idle lease, or it waits.  Its
 * owner is told of a lease granted unless it asks now ("tell" 0: it sees
 * the ticket HELD).
 */

static void
ngx_zk_lock_keep_admit(ngx_zk_lock_pool_t *pool, ngx_zk_lock_node_t *ticket,
    ngx_uint_t tell)
{
    ngx_zk_lock_lease_t  *lease;

    lease = ngx_zk_lock_keep_ready(pool);

    if (lease) {
        ngx_zk_lock_keep_grant(lease, ticket, 1);

        if (tell) {
            ngx_zk_lock_keep_tell(ticket);
        }

        return;
    }

    ngx_queue_insert_tail(&pool->tickets, &ticket->queue);
    pool->lock->tickets++;

    /*
     * a lease lent and idle comes back within a round trip on a socket:
     * no node queues for it meanwhile (a create and a delete); a read
     * lock's that is lent is closed, and serves nobody else
     */

    if (pool->kind != NGX_ZK_LOCK_READ
        && ngx_zk_lock_keep_lent(pool) && !pool->patience.timer_set)
    {
        ngx_add_timer(&pool->patience, NGX_ZK_LOCK_KEEP_PATIENCE);
    }

    ngx_zk_lock_keep_refill(pool);
}


/*
 * A lease that can take a request now: the idle leases come first, the
 * one idle last at the head (it is taken, and the others are let go after
 * "keep"); a read lock's lease takes any number of riders
 */

static ngx_zk_lock_lease_t *
ngx_zk_lock_keep_ready(ngx_zk_lock_pool_t *pool)
{
    ngx_queue_t          *q;
    ngx_zk_lock_lease_t  *lease;

    for (q = ngx_queue_head(&pool->leases);
         q != ngx_queue_sentinel(&pool->leases);
         q = ngx_queue_next(q))
    {
        lease = ngx_queue_data(q, ngx_zk_lock_lease_t, queue);

        if (pool->kind == NGX_ZK_LOCK_READ) {

            if (ngx_zk_lock_keep_boards(lease)) {
                return lease;
            }

            continue;
        }

        if (lease->state != NGX_ZK_LOCK_KEEP_IDLE) {
            return NULL;
        }

        if (lease->node->state == NGX_ZK_LOCK_HELD) {
            return lease;
        }
    }

    return NULL;
}


/* the worker's pool on the path; made with its first node */

static ngx_zk_lock_pool_t *
ngx_zk_lock_keep_pool(ngx_zk_lock_session_t *s, ngx_str_t *path,
    ngx_zk_lock_kind_e kind, ngx_uint_t leases,
    ngx_zk_lock_counter_t *counter, ngx_msec_t keep, ngx_uint_t transient)
{
    ngx_zk_lock_t       *lock;
    ngx_zk_lock_pool_t  *pool;

    lock = ngx_zk_lock_path_find(s, path->data, path->len);

    if (lock && lock->pool) {

        if (lock->pool->kind != kind) {
            /* two paths from variables that name one node: not one pool */
            ngx_log_error(NGX_LOG_ERR, &s->log, 0,
                          "\"%V\" is kept as a read lock and as a "
                          "mutex or semaphore at once", path);
            return NULL;
        }

        return lock->pool;
    }

    pool = ngx_calloc(sizeof(ngx_zk_lock_pool_t), &s->log);
    if (pool == NULL) {
        return NULL;
    }

    ngx_queue_init(&pool->leases);
    ngx_queue_init(&pool->tickets);
    ngx_zk_lock_fair_init(&pool->fair);
    pool->kind = kind;
    pool->leases_n = leases;
    pool->counter = counter;
    pool->keep = keep;
    pool->transient = transient;
    pool->share.ours = s->ours;
    pool->share.free = 1;

    ngx_zk_lock_keep_timer(pool, &pool->linger,
                           ngx_zk_lock_keep_linger_handler, &s->log);
    ngx_zk_lock_keep_timer(pool, &pool->patience,
                           ngx_zk_lock_keep_refill_handler, &s->log);
    ngx_zk_lock_keep_timer(pool, &pool->stall,
                           ngx_zk_lock_keep_refill_handler, &s->log);
    ngx_zk_lock_keep_timer(pool, &pool->starve,
                           ngx_zk_lock_weigh_starve_handler, &s->log);
    ngx_zk_lock_keep_timer(pool, &pool->weigh,
                           ngx_zk_lock_weigh_handler, &s->log);

    /* the lock is made, or found, by the pool's first node */

    if (ngx_zk_lock_keep_queue(s, path, pool, leases, counter)
        != NGX_OK)
    {
        ngx_free(pool);
        return NULL;
    }

    return pool;
}


/* one more node of the pool queues */

static ngx_int_t
ngx_zk_lock_keep_queue(ngx_zk_lock_session_t *s, ngx_str_t *path,
    ngx_zk_lock_pool_t *pool, ngx_uint_t leases,
    ngx_zk_lock_counter_t *counter)
{
    u_char                    *p;
    ngx_str_t                  info;
    ngx_zk_lock_lease_t       *lease;
    u_char                     buf[256];

    lease = ngx_calloc(sizeof(ngx_zk_lock_lease_t), &s->log);
    if (lease == NULL) {
        return NGX_ERROR;
    }

    /* the node's data tells an operator whose it is, and that it is kept */

    p = ngx_snprintf(buf, sizeof(buf), "%V pid %P since %V kept for "
                     "%Mms idle", &ngx_cycle->hostname, ngx_pid,
                     &ngx_cached_http_log_iso8601, pool->keep);
    info.data = buf;
    info.len = p - buf;

    /* a read lock's waits for writers only: it hears while it holds */

    pool->many = (leases > 1 && pool->kind != NGX_ZK_LOCK_READ);

    if (pool->lock && pool->many) {
        /* the listing behind its create sets the watch, see hear() */
        pool->lock->hear = 1;
    }

    lease->node = ngx_zk_lock_acquire(s, path, pool->kind,
                                      leases, 1, counter, &info,
                                      pool->transient,
                                      ngx_zk_lock_keep_node_notify,
                                      lease, &s->log);
    if (lease->node == NULL) {
        ngx_free(lease);
        return NGX_ERROR;
    }

    lease->node->pooled = 1;
    lease->pool = pool;
    ngx_queue_init(&lease->riders);
    lease->state = NGX_ZK_LOCK_KEEP_QUEUED;
    lease->timer.handler = ngx_zk_lock_keep_timer_handler;
    lease->timer.data = lease;
    lease->timer.log = &s->log;
    lease->timer.cancelable = 1;

    if (pool->lock == NULL) {
        pool->lock = lease->node->lock;
        pool->lock->pool = pool;
        pool->lock->keep = 1;
        pool->lock->refs++;
    }

    ngx_queue_insert_tail(&pool->leases, &lease->queue);
    pool->queued++;
    ngx_zk_lock_keep_hear(pool);

    if (pool->share.free) {
        pool->share.free--;
    }

    return NGX_OK;
}


static ngx_zk_lock_node_t *
ngx_zk_lock_keep_ticket(ngx_zk_lock_pool_t *pool,
    ngx_zk_lock_notify_pt notify, ngx_zk_lock_notify_pt recall,
    void *data, ngx_log_t *log)
{
    ngx_zk_lock_node_t  *ticket;

    ticket = ngx_calloc(sizeof(ngx_zk_lock_node_t), log);
    if (ticket == NULL) {
        return NULL;
    }

    ticket->lock = pool->lock;
    ticket->state = NGX_ZK_LOCK_PARKED;
    ticket->kind = pool->kind;
    ticket->leases = pool->leases_n;
    ticket->weight = 1;
    ticket->ticket = 1;
    ticket->notify = notify;
    ticket->recall = recall;
    ticket->data = data;
    ticket->log = log;
    ticket->notify_event.handler = ngx_zk_lock_keep_tell_handler;
    ticket->notify_event.data = ticket;
    ticket->notify_event.log = &pool->lock->session->log;
    ticket->asked = ngx_current_msec;

    pool->ntickets++;

    return ticket;
}


/*
 * Nodes queue for the tickets that wait: one at a time while others wait
 * too, else as many as the last listing showed free leases
 */

static void
ngx_zk_lock_keep_refill(ngx_zk_lock_pool_t *pool)
{
    ngx_str_t                    path;
    ngx_uint_t                   want, tickets;
    ngx_zk_lock_t               *lock;
    ngx_zk_lock_session_t       *s;

    lock = pool->lock;
    s = lock->session;

    path.data = lock->path;
    path.len = lock->sn.str.len;

    tickets = lock->tickets;

    if (pool->patience.timer_set) {
        /* those the leases recalled will serve */
        tickets -= ngx_min(tickets, pool->recalled);
    }

    /* ngx_min() and ngx_max() are macros: no conditional in them */
    want = (pool->share.others || pool->kind == NGX_ZK_LOCK_READ)
           ? 1 : ngx_max(pool->share.free, 1);
    want = ngx_min(tickets, want);

    if (pool->cap
        && !ngx_zk_lock_fair_reserved(&pool->fair, &pool->tickets))
    {
        /* priority=: reserved seats idle, see weigh.c */
        want = (pool->held < pool->cap)
               ? ngx_min(want, pool->cap - pool->held) : 0;
    }

    ngx_log_debug5(NGX_LOG_DEBUG_HTTP, &s->log, 0,
                   "zk lock: \"%s\" keeps %ui, %ui idle, %ui queued for "
                   "%ui waiting", lock->path, pool->held, pool->idle,
                   pool->queued, lock->tickets);

    if (want && pool->queued == 0 && ngx_zk_lock_keep_stall(pool)) {
        return;
    }

    while (pool->queued < want) {
        if (ngx_zk_lock_keep_queue(s, &path, pool, pool->leases_n,
                                   pool->counter)
            != NGX_OK)
        {
            if (pool->queued == 0) {
                ngx_zk_lock_keep_fail(pool, ZSYSTEMERROR);
            }

            return;
        }
    }
}


/*
 * At its share, with no lease free, the worker's own leases are likely to
 * serve its waiting requests before a node queued now would hold: it
 * queues one only for a request that has waited for the patience (at 32
 * nginx of 2 clients each on 32 leases, a node queued at once for the
 * second client, and deleted unused 10 ms later, made 0.14 to 0.37
 * ZooKeeper writes a request).  Not a read lock's: its held lease is
 * closed.
 */

static ngx_uint_t
ngx_zk_lock_keep_stall(ngx_zk_lock_pool_t *pool)
{
    ngx_msec_t           waited;
    ngx_zk_lock_node_t  *ticket;

    if (pool->kind == NGX_ZK_LOCK_READ
        || pool->held == 0 || pool->held < pool->share.ceil || pool->share.free
        || ngx_queue_empty(&pool->tickets))
    {
        return 0;
    }

    ticket = ngx_queue_data(ngx_queue_head(&pool->tickets),
                            ngx_zk_lock_node_t, queue);

    waited = ngx_current_msec - ticket->asked;

    if (waited >= NGX_ZK_LOCK_KEEP_PATIENCE) {
        return 0;
    }

    if (!pool->stall.timer_set) {
        ngx_add_timer(&pool->stall, NGX_ZK_LOCK_KEEP_PATIENCE - waited);
    }

    return 1;
}


/* one of the pool's own timers */

static void
ngx_zk_lock_keep_timer(ngx_zk_lock_pool_t *pool, ngx_event_t *ev,
    ngx_event_handler_pt handler, ngx_log_t *log)
{
    ev->handler = handler;
    ev->data = pool;
    ev->log = log;
    ev->cancelable = 1;
}


/* the pool goes (gc(), or the worker exits: free()): so do its timers */

static void
ngx_zk_lock_keep_timers_stop(ngx_zk_lock_pool_t *pool)
{
    ngx_event_t  *ev[5];
    ngx_uint_t    i;

    ev[0] = &pool->linger;
    ev[1] = &pool->patience;
    ev[2] = &pool->stall;
    ev[3] = &pool->starve;
    ev[4] = &pool->weigh;

    for (i = 0; i < 5; i++) {
        if (ev[i]->timer_set) {
            ngx_del_timer(ev[i]);
        }
    }
}


/* a node of the pool is told: it holds, or it is lost */

static void
ngx_zk_lock_keep_node_notify(ngx_zk_lock_node_t *node)
{
    ngx_zk_lock_pool_t   *pool;
    ngx_zk_lock_lease_t  *lease;

    lease = node->data;
    pool = lease->pool;

    if (node->error == NGX_ZK_LOCK_JEOPARDY) {
        ngx_zk_lock_keep_jeopardy(lease);
        ngx_zk_lock_keep_gc(pool);
        return;
    }

    if (node->state == NGX_ZK_LOCK_HELD) {

        if (lease->state == NGX_ZK_LOCK_KEEP_QUEUED) {
            pool->queued--;
            pool->held++;
            ngx_zk_lock_keep_hear(pool);
            ngx_zk_lock_keep_assign(lease);
            ngx_zk_lock_keep_refill(pool);
            ngx_zk_lock_keep_gc(pool);
        }

        return;
    }

    ngx_zk_lock_keep_drop(lease);
    ngx_zk_lock_keep_gc(pool);
}


/*
 * A lease is free: its node has come to hold, or its request ended.  The
 * request that waits longest in the worker gets it, and a node that comes
 * to hold always serves the request it was queued for: handing it back
 * before that would only queue it again, a create and a delete per round
 * trip and nobody served (when leases are fewer than the participants
 * that want them, every share is below one lease).  A node queued counts
 * toward the share when somebody is owed a lease: it will hold before a
 * participant that queued after it, and a lease ended while it waits (two
 * requests that end together, the listing in between not heard yet) must
 * go back for the one owed.  A share that is not a whole number of leases
 * (8 over 6 instances: 2, 2, 1, 1, 1, 1) rotates: a worker at the share
 * rounded up gives one back, a quantum at a time, while another that
 * wants more holds it rounded down.  Over its share, or
 * watched by a waiter that holds nothing (a Curator client waits for that
 * node alone), the worker gives a lease back instead, at the end of a
 * request once the lease has served for a quantum, or when it has idled
 * for the grace (see check()): a lease changes hands at most once a
 * quantum while the worker's demand lasts, which bounds the writes on the
 * path whatever the request rate, and the shares even out over a few
 * quanta as the queue is first come first served.  An exiting worker
 * serves the requests it still has, and gives back what they do not
 * need; a lease beyond a lowered count is never granted again.
 */

static void
ngx_zk_lock_keep_assign(ngx_zk_lock_lease_t *lease)
{
    ngx_uint_t                fresh, wanted, exiting, keep;
    ngx_zk_lock_pool_t       *pool;
    ngx_zk_lock_share_t      *sh;

    pool = lease->pool;
    sh = &pool->share;

    fresh = (lease->state == NGX_ZK_LOCK_KEEP_QUEUED);

    if (fresh) {
        lease->held_at = ngx_current_msec;
    }

    if (pool->kind == NGX_ZK_LOCK_READ) {
        ngx_zk_lock_keep_assign_read(lease, fresh);
        return;
    }

    wanted = !ngx_queue_empty(&pool->tickets)
             && lease->node->state == NGX_ZK_LOCK_HELD;

    exiting = ngx_exiting || ngx_terminate || ngx_quit;

    if (lease->excess) {
        /* the count was lowered below its place: Curator's overshoot */
        keep = 0;

    } else if (exiting) {
        /* the workers that replace this one need what it does not */
        keep = wanted;

    } else if (lease->doomed
               || (sh->others
                   && (pool->held > sh->ceil
                       || (sh->owed && pool->held + pool->queued > sh->floor)
                       || (sh->lagging && sh->ceil > sh->floor
                           && pool->held >= sh->ceil))))
    {
        /*
         * within its quantum, it serves on, or idles for the grace: a
         * client's next request on its connection is a millisecond away
         */
        keep = fresh || ngx_current_msec - lease->held_at
                        < NGX_ZK_LOCK_KEEP_QUANTUM;

    } else {
        keep = 1;
    }

    if (!keep) {
        ngx_log_debug4(NGX_LOG_DEBUG_HTTP, &pool->lock->session->log, 0,
                       "zk lock: \"%s\" gives a lease back: holds %ui, "
                       "its share %ui-%ui", pool->lock->path, pool->held,
                       pool->share.floor, pool->share.ceil);

        ngx_zk_lock_keep_give_back(lease, !exiting);
        return;
    }

    if (wanted) {
        ngx_zk_lock_keep_next(lease, !fresh);

        if (pool->lock->tickets == 0) {
            /* served by a lease freed: the nodes queued for it wait */
            ngx_zk_lock_keep_linger(pool);
        }

        return;
    }

    ngx_zk_lock_keep_idle(lease);
}


/*
 * A read lock's lease (zk_rwlock read keep=): readers share it, so every
 * request that waits boards it once it holds.  While a writer waits it
 * serves those that come for a quantum since it came to hold, then
 * closes (see boards()): the readers that come later queue a node behind
 * the writer, first come first served, and the lease goes back once its
 * last rider is done.  The writer so waits for a quantum and the longest
 * read at most, and readers make no ZooKeeper call while none waits.
 */

static void
ngx_zk_lock_keep_assign_read(ngx_zk_lock_lease_t *lease, ngx_uint_t fresh)
{
    ngx_zk_lock_pool_t  *pool;

    pool = lease->pool;

    if (lease->node->state != NGX_ZK_LOCK_HELD
        || (!fresh && (ngx_exiting || ngx_terminate || ngx_quit
                       || !ngx_zk_lock_keep_boards(lease))))
    {
        ngx_zk_lock_keep_give_back(lease, pool->share.others);
        return;
    }

    while (!ngx_queue_empty(&pool->tickets)) {
        ngx_zk_lock_keep_next(lease, !fresh);
    }

    if (lease->busy) {
        /* the nodes queued for them wait for more, see linger() */
        ngx_zk_lock_keep_linger(pool);
        return;
    }

    ngx_zk_lock_keep_idle(lease);
}


/*
 * A read lock's lease takes another rider while it holds, unless a
 * writer has waited for it and it has served for a quantum: then it is
 * closed for good
 */

static ngx_uint_t
ngx_zk_lock_keep_boards(ngx_zk_lock_lease_t *lease)
{
    if (lease->state == NGX_ZK_LOCK_KEEP_QUEUED
        || lease->node->state != NGX_ZK_LOCK_HELD
        || lease->node->error == NGX_ZK_LOCK_JEOPARDY
        || lease->closed)
    {
        return 0;
    }

    if (lease->pool->share.others
        && ngx_current_msec - lease->held_at >= NGX_ZK_LOCK_KEEP_QUANTUM)
    {
        lease->closed = 1;
        return 0;
    }

    return 1;
}


/* the request that has waited longest in the worker gets the lease */

static void
ngx_zk_lock_keep_next(ngx_zk_lock_lease_t *lease, ngx_uint_t reused)
{
    ngx_zk_lock_pool_t   *pool;
    ngx_zk_lock_node_t   *ticket;

    pool = lease->pool;

    /* first come, first served; or by flow (fair=) */

    if (ngx_queue_empty(&pool->fair.flows)) {
        ticket = ngx_queue_data(ngx_queue_head(&pool->tickets),
                                ngx_zk_lock_node_t, queue);

    } else {
        ticket = ngx_zk_lock_fair_next(&pool->fair, &pool->tickets);
    }

    ngx_queue_remove(&ticket->queue);
    pool->lock->tickets--;

    ngx_zk_lock_keep_grant(lease, ticket, reused);
    ngx_zk_lock_keep_tell(ticket);
}


/* the ticket holds: it shows its lease's node, the token included */

static void
ngx_zk_lock_keep_grant(ngx_zk_lock_lease_t *lease,
    ngx_zk_lock_node_t *ticket, ngx_uint_t reused)
{
    ngx_zk_lock_pool_t  *pool;
    ngx_zk_lock_node_t  *node;

    if (lease->state == NGX_ZK_LOCK_KEEP_IDLE) {
        lease->pool->idle--;
        ngx_zk_lock_keep_report(lease->pool->tag, -1, 0);

        if (lease->timer.timer_set) {
            ngx_del_timer(&lease->timer);
        }
    }

    node = lease->node;
    pool = lease->pool;

    /* a lease held before this request: no ZooKeeper call made for it */
    ticket->reused = reused;

    lease->state = NGX_ZK_LOCK_KEEP_BUSY;
    lease->busy++;
    ngx_queue_insert_tail(&lease->riders, &ticket->queue);

    ngx_queue_remove(&lease->queue);
    ngx_queue_insert_tail(&pool->leases, &lease->queue);

    ticket->kept = lease;
    ticket->state = NGX_ZK_LOCK_HELD;

    ngx_zk_lock_fair_start(&pool->fair, ticket);
    ticket->seq = node->seq;
    ticket->czxid = node->czxid;
    ticket->name_len = node->name_len;
    ngx_memcpy(ticket->name, node->name, sizeof(node->name));

    /* to come back at the end of its request, whoever owns it */

    if (pool->kind == NGX_ZK_LOCK_READ) {
        if (pool->share.others || ngx_exiting) {
            ngx_zk_lock_keep_recall(ticket);
        }

    } else if (lease->doomed || lease->excess || pool->share.others
               || pool->lock->tickets || ngx_exiting)
    {
        ngx_zk_lock_keep_recall(ticket);
    }
}


/*
 * A lent ticket (zk_sessions: a sibling worker's) may be kept by its owner
 * between its requests, and the pool sees none of them end: its owner is
 * asked for it back whenever the pool would decide at a request's end,
 * that is while somebody else waits, in ZooKeeper or in the pool, and
 * when the lease is to go (see assign()); one recalled per ticket that
 * waits here, all for anybody else.  The owner gives it back at once if
 * it is idle, else when its request ends.
 */

static ngx_uint_t
ngx_zk_lock_keep_lent(ngx_zk_lock_pool_t *pool)
{
    ngx_uint_t                 waiting, wanted;
    ngx_queue_t               *q, *r;
    ngx_zk_lock_node_t        *ticket;
    ngx_zk_lock_lease_t       *lease;

    waiting = pool->lock->tickets;
    pool->recalled = 0;

    for (q = ngx_queue_head(&pool->leases);
         q != ngx_queue_sentinel(&pool->leases);
         q = ngx_queue_next(q))
    {
        lease = ngx_queue_data(q, ngx_zk_lock_lease_t, queue);

        if (lease->state != NGX_ZK_LOCK_KEEP_BUSY) {
            continue;
        }

        for (r = ngx_queue_head(&lease->riders);
             r != ngx_queue_sentinel(&lease->riders);
             r = ngx_queue_next(r))
        {
            ticket = ngx_queue_data(r, ngx_zk_lock_node_t, queue);

            if (ticket->recall == NULL) {
                continue;
            }

            if (ticket->recalled) {
                waiting -= (waiting > 0);
                pool->recalled++;
                continue;
            }

            /* a read lock's riders do not keep others from boarding */

            wanted = (pool->kind == NGX_ZK_LOCK_READ)
                     ? pool->share.others || lease->closed
                     : waiting || pool->share.others || lease->doomed
                       || lease->excess;

            if (wanted) {
                waiting -= (waiting > 0);
                pool->recalled++;
                ngx_zk_lock_keep_recall(ticket);
            }
        }
    }

    return pool->recalled;
}


/*
 * A lease recalled is busy with its owner's request: the tickets that
 * wait for it do not wait on, nodes queue for them
 */

void
ngx_zk_lock_keep_late(ngx_zk_lock_node_t *ticket)
{
    ngx_zk_lock_pool_t  *pool;

    pool = ticket->lock->pool;

    if (ticket->state == NGX_ZK_LOCK_HELD && pool->patience.timer_set) {
        ngx_del_timer(&pool->patience);
        ngx_zk_lock_keep_refill(pool);
    }
}


/*
 * The leases recalled did not all come back at once, or the requests
 * waited for the worker's own leases for the patience: nodes queue
 */

static void
ngx_zk_lock_keep_refill_handler(ngx_event_t *ev)
{
    ngx_zk_lock_pool_t  *pool;

    pool = ev->data;

    ngx_zk_lock_keep_refill(pool);
}


static void
ngx_zk_lock_keep_recall(ngx_zk_lock_node_t *ticket)
{
    if (ticket->recall && !ticket->recalled) {
        ticket->recalled = 1;
        ticket->recall(ticket);
    }
}


static void
ngx_zk_lock_keep_idle(ngx_zk_lock_lease_t *lease)
{
    ngx_zk_lock_pool_t  *pool;

    pool = lease->pool;

    lease->state = NGX_ZK_LOCK_KEEP_IDLE;
    lease->since = ngx_current_msec;

    pool->idle++;
    ngx_zk_lock_keep_report(pool->tag, 1, 0);

    /* the last idle first: the one idle longest is the one let go */
    ngx_queue_remove(&lease->queue);
    ngx_queue_insert_head(&pool->leases, &lease->queue);

    ngx_zk_lock_keep_check(lease);
    ngx_zk_lock_keep_settle(pool);
}


/*
 * A path built from a request that nobody uses any more: the leases that
 * went idle while another was busy, or while a request waited, were to be
 * kept for "keep", and go after the grace too (see check()).  Whatever
 * ended the last use: a lease idle, or given back, a ticket gone.
 */

static void
ngx_zk_lock_keep_settle(ngx_zk_lock_pool_t *pool)
{
    if (ngx_zk_lock_keep_unused(pool)) {
        ngx_zk_lock_keep_check_idle(pool);
    }
}


/* each idle lease, the idle first: given back, or its timer set again */

static void
ngx_zk_lock_keep_check_idle(ngx_zk_lock_pool_t *pool)
{
    ngx_queue_t          *q, *next;
    ngx_zk_lock_lease_t  *lease;

    for (q = ngx_queue_head(&pool->leases);
         q != ngx_queue_sentinel(&pool->leases);
         q = next)
    {
        next = ngx_queue_next(q);
        lease = ngx_queue_data(q, ngx_zk_lock_lease_t, queue);

        if (lease->state != NGX_ZK_LOCK_KEEP_IDLE) {
            break;
        }

        ngx_zk_lock_keep_check(lease);
    }
}


/*
 * An idle lease is given back once it has been idle for "keep", or for
 * the grace while somebody else waits; else its timer is set for that
 */

static void
ngx_zk_lock_keep_check(ngx_zk_lock_lease_t *lease)
{
    ngx_msec_t                idle, limit;
    ngx_zk_lock_pool_t       *pool;

    pool = lease->pool;

    limit = ngx_min(pool->keep, NGX_ZK_LOCK_KEEP_GRACE);

    /*
     * a path built from a request is kept only while it is in use: one
     * used once would pin its node, its containers, a watch and the pool
     * for "keep", per value
     */

    if (!pool->share.others && !ngx_zk_lock_keep_unused(pool)) {
        limit = pool->keep;
    }

    idle = ngx_current_msec - lease->since;

    /* watched by a waiter, it goes at once, once it has had its quantum */

    if (idle >= limit || lease->excess
        || (lease->doomed && ngx_current_msec - lease->held_at
                             >= NGX_ZK_LOCK_KEEP_QUANTUM))
    {
        ngx_zk_lock_keep_give_back(lease, pool->share.others);
        return;
    }

    ngx_add_timer(&lease->timer, limit - idle);
}


static void
ngx_zk_lock_keep_timer_handler(ngx_event_t *ev)
{
    ngx_zk_lock_pool_t   *pool;
    ngx_zk_lock_lease_t  *lease;

    lease = ev->data;
    pool = lease->pool;

    if (lease->state == NGX_ZK_LOCK_KEEP_IDLE) {
        ngx_zk_lock_keep_check(lease);
        ngx_zk_lock_keep_gc(pool);
    }
}


/* the lease's node is deleted; "demand": for somebody else who waits */

static void
ngx_zk_lock_keep_give_back(ngx_zk_lock_lease_t *lease,
    ngx_uint_t demand)
{
    ngx_zk_lock_pool_t  *pool;

    pool = lease->pool;

    if (lease->state == NGX_ZK_LOCK_KEEP_IDLE) {
        pool->idle--;
        ngx_zk_lock_keep_report(pool->tag, -1, 0);
    }

    if (lease->timer.timer_set) {
        ngx_del_timer(&lease->timer);
    }

    if (demand) {
        ngx_zk_lock_keep_report(pool->tag, 0, 1);
    }

    pool->held--;
    ngx_zk_lock_keep_hear(pool);

    ngx_queue_remove(&lease->queue);
    ngx_zk_lock_release(lease->node);
    ngx_free(lease);
}


/*
 * The session of a held lease may expire unheard of (see
 * recipe_jeopardy()): a lease that no request runs on goes back at once;
 * the request on a busy one is told as a holder is, and its lease goes
 * back when the request ends, not to another request
 */

static void
ngx_zk_lock_keep_jeopardy(ngx_zk_lock_lease_t *lease)
{
    ngx_queue_t         *q;
    ngx_zk_lock_pool_t  *pool;
    ngx_zk_lock_node_t  *ticket;

    pool = lease->pool;

    switch (lease->state) {

    case NGX_ZK_LOCK_KEEP_BUSY:

        for (q = ngx_queue_head(&lease->riders);
             q != ngx_queue_sentinel(&lease->riders);
             q = ngx_queue_next(q))
        {
            ticket = ngx_queue_data(q, ngx_zk_lock_node_t, queue);
            ticket->error = NGX_ZK_LOCK_JEOPARDY;
            ngx_zk_lock_keep_tell(ticket);
        }

        return;

    case NGX_ZK_LOCK_KEEP_QUEUED:
        /* it came to hold in jeopardy: not a lease to run on */
        pool->queued--;
        pool->held++;
        ngx_zk_lock_keep_give_back(lease, 0);
        ngx_zk_lock_keep_refill(pool);
        return;

    default: /* IDLE */
        ngx_zk_lock_keep_give_back(lease, 0);
    }
}


/*
 * The node of a lease failed: its
 * request is told as a holder is; a queued one fails the tickets that
 * wait, as their own nodes would have failed them
 */

static void
ngx_zk_lock_keep_drop(ngx_zk_lock_lease_t *lease)
{
    ngx_queue_t         *q;
    ngx_zk_lock_pool_t  *pool;
    ngx_zk_lock_node_t  *node, *ticket;

    pool = lease->pool;
    node = lease->node;

    switch (lease->state) {

    case NGX_ZK_LOCK_KEEP_QUEUED:
        pool->queued--;

        if (pool->queued == 0) {
            ngx_zk_lock_keep_fail(pool, node->error);
        }

        break;

    case NGX_ZK_LOCK_KEEP_BUSY:
        pool->held--;

        while (!ngx_queue_empty(&lease->riders)) {
            q = ngx_queue_head(&lease->riders);
            ngx_queue_remove(q);

            ticket = ngx_queue_data(q, ngx_zk_lock_node_t, queue);
            ticket->kept = NULL;
            ticket->state = NGX_ZK_LOCK_FAILED;
            ticket->error = node->error;
            ngx_zk_lock_keep_tell(ticket);
        }

        break;

    default: /* IDLE */
        pool->held--;
        pool->idle--;
        ngx_zk_lock_keep_report(pool->tag, -1, 0);
    }

    if (lease->timer.timer_set) {
        ngx_del_timer(&lease->timer);
    }

    ngx_zk_lock_keep_hear(pool);

    ngx_queue_remove(&lease->queue);
    ngx_zk_lock_release(node);
    ngx_free(lease);
}


static void
ngx_zk_lock_keep_fail(ngx_zk_lock_pool_t *pool, int error)
{
    ngx_queue_t              *q;
    ngx_zk_lock_node_t       *ticket;

    while (!ngx_queue_empty(&pool->tickets)) {
        q = ngx_queue_head(&pool->tickets);
        ngx_queue_remove(q);
        pool->lock->tickets--;

        ticket = ngx_queue_data(q, ngx_zk_lock_node_t, queue);
        ticket->state = NGX_ZK_LOCK_FAILED;
        ticket->error = error;
        ngx_zk_lock_keep_tell(ticket);
    }
}


/* no request waits any more: neither do the nodes queued for them */

static void
ngx_zk_lock_keep_unqueue(ngx_zk_lock_pool_t *pool)
{
    ngx_queue_t               *q, *nq;
    ngx_zk_lock_lease_t       *lease;

    for (q = ngx_queue_head(&pool->leases);
         q != ngx_queue_sentinel(&pool->leases);
         q = nq)
    {
        nq = ngx_queue_next(q);
        lease = ngx_queue_data(q, ngx_zk_lock_lease_t, queue);

        if (lease->state == NGX_ZK_LOCK_KEEP_QUEUED
            && lease->node->state != NGX_ZK_LOCK_HELD)
        {
            pool->queued--;
            ngx_queue_remove(q);
            ngx_zk_lock_release(lease->node);
            ngx_free(lease);
        }
    }
}


/* the nodes queued for nobody go, unless a request comes meanwhile */

static void
ngx_zk_lock_keep_linger(ngx_zk_lock_pool_t *pool)
{
    if (pool->queued && !pool->linger.timer_set) {
        ngx_add_timer(&pool->linger, NGX_ZK_LOCK_KEEP_LINGER);
    }
}


static void
ngx_zk_lock_keep_linger_handler(ngx_event_t *ev)
{
    ngx_zk_lock_pool_t  *pool;

    pool = ev->data;

    if (pool->lock->tickets == 0) {
        ngx_zk_lock_keep_unqueue(pool);
        ngx_zk_lock_keep_gc(pool);
    }
}


/* the request is done with its ticket (see recipe release()) */

static void
ngx_zk_lock_keep_release(ngx_zk_lock_node_t *ticket)
{
    ngx_uint_t            capped;
    ngx_zk_lock_pool_t   *pool;
    ngx_zk_lock_node_t   *next;
    ngx_zk_lock_lease_t  *lease;

    pool = ticket->lock->pool;

    if (ticket->notify_event.posted) {
        ngx_delete_posted_event(&ticket->notify_event);
    }

    /* its flow pays before the lease serves the next */
    capped = ticket->capped;
    next = ngx_zk_lock_fair_leave(&pool->fair, ticket);

    switch (ticket->state) {

    case NGX_ZK_LOCK_PARKED:
        if (capped) {
            /* it waited in its flow, not in the pool: see fair_leave() */
            break;
        }

        ngx_queue_remove(&ticket->queue);
        pool->lock->tickets--;

        if (pool->lock->tickets == 0) {
            ngx_zk_lock_keep_linger(pool);
        }

        break;

    case NGX_ZK_LOCK_HELD:
        lease = ticket->kept;
        ngx_queue_remove(&ticket->queue);

        if (--lease->busy) {
            /* a read lock's other riders run on */

        } else if (lease->node->error == NGX_ZK_LOCK_JEOPARDY
                   || (ticket->spent && pool->lock->tickets == 0))
        {
            /* not kept: in jeopardy, or kept by its owner for "keep" */
            ngx_zk_lock_keep_give_back(lease, 0);

        } else {
            ngx_zk_lock_keep_assign(lease);
        }

        ngx_zk_lock_keep_refill(pool);
        break;

    default: /* FAILED */
        break;
    }

    if (next) {
        /* one more of the flow within its cap */
        ngx_zk_lock_keep_admit(pool, next, 1);
    }

    ngx_free(ticket);

    pool->ntickets--;
    ngx_zk_lock_keep_settle(pool);
    ngx_zk_lock_keep_gc(pool);
}


static void
ngx_zk_lock_keep_tell(ngx_zk_lock_node_t *ticket)
{
    if (!ticket->notify_event.posted) {
        ngx_post_event(&ticket->notify_event, &ngx_posted_events);
    }
}


static void
ngx_zk_lock_keep_tell_handler(ngx_event_t *ev)
{
    ngx_zk_lock_node_t  *ticket;

    ticket = ev->data;

    if (ticket->notify) {
        ticket->notify(ticket);
    }
}


/*
 * A pool hears of every change on the path (a children watch on every
 * listing, see path_list()) while it holds leases, to see who else waits,
 * and while its queued node is one of the first 4 x "leases" waiters, to
 * see that node come forward: its listings tell that node when it holds,
 * and the node watches no node ahead (wait_watches()).  Listings are
 * paced, at most one a pace that grows with the participants (listed()),
 * but for the path's first waiter and for a pool that holds none and
 * waits among the first 2 x "leases" (eager): paced, one instance whose
 * last lease went back while the queue was full waited up to 6 s at 32
 * nginx on 32 leases, in 2 runs of 3.  Further back, a waiter watches
 * its window, which holds only waiters until they hold: a change costs at
 * most 4 x "leases" paced listings and "leases" watches, however many
 * instances wait (a cap of 8 over 100 nginx).  Closer, windows cost more
 * than listings: at 32 nginx on 32 leases a deletion fired up to "leases"
 * of them, 5 watch events and 5 watches set again a write.
 *
 * A pool that queues a node hears before that node's first listing, lest
 * the listing set a window; one that starts to hear lists once more after
 * a listing on its way (which sets no watch); one that stops lists once
 * more, to watch its window.
 */

static void
ngx_zk_lock_keep_hear(ngx_zk_lock_pool_t *pool)
{
    ngx_zk_lock_t  *lock;

    lock = pool->lock;
    lock->eager = (pool->held == 0 && pool->near);

    if (pool->held == 0 && !(pool->queued && pool->many && !pool->far)) {
        if (lock->hear) {
            lock->hear = 0;

            if (pool->queued) {
                ngx_zk_lock_path_relist(lock);
            }
        }

    } else if (!lock->hear) {
        /* after a listing on its way, which sets no watch */
        lock->hear = 1;
        ngx_zk_lock_path_ask(lock);
    }
}


/* where the first queued node of the pool waits: near the front, or far */

static void
ngx_zk_lock_keep_near(ngx_zk_lock_pool_t *pool,
    ngx_zk_lock_child_t *children, ngx_uint_t n, ngx_uint_t leases)
{
    uint32_t               seq;
    ngx_uint_t             i;
    ngx_queue_t           *q;
    ngx_zk_lock_lease_t   *lease;

    seq = NGX_ZK_LOCK_SEQ_NONE;

    for (q = ngx_queue_head(&pool->leases);
         q != ngx_queue_sentinel(&pool->leases);
         q = ngx_queue_next(q))
    {
        lease = ngx_queue_data(q, ngx_zk_lock_lease_t, queue);

        if (lease->state == NGX_ZK_LOCK_KEEP_QUEUED
            && lease->node->state == NGX_ZK_LOCK_WAITING
            && lease->node->seq < seq)
        {
            seq = lease->node->seq;
        }
    }

    /* a mutex's waiter watches one node: nothing to save */

    i = (seq == NGX_ZK_LOCK_SEQ_NONE)
        ? n : ngx_zk_lock_listing_find(children, n, seq);

    pool->many = (leases > 1);
    pool->near = (leases > 1 && i < 2 * leases);
    pool->far = (i < n && i >= NGX_ZK_LOCK_KEEP_FAR * leases);

    ngx_zk_lock_keep_hear(pool);
}


/* a pool with no lease and no ticket goes, and lets its lock go */

static void
ngx_zk_lock_keep_gc(ngx_zk_lock_pool_t *pool)
{
    ngx_zk_lock_t  *lock;

    if (!ngx_queue_empty(&pool->leases) || pool->ntickets) {
        return;
    }

    ngx_zk_lock_keep_timers_stop(pool);

    if (pool->board) {
        ngx_zk_lock_board_leave(pool->board);

        if (pool->tag && pool->tag->fair_report) {
            pool->tag->fair_report(pool->tag, 0, 0, NULL, 0, NULL, 0);
        }
    }

    lock = pool->lock;
    lock->pool = NULL;
    lock->keep = 0;
    lock->hear = 0;
    lock->eager = 0;
    lock->refs--;

    ngx_free(pool);

    ngx_zk_lock_path_gc(lock);
}


/* the worker exits: its nodes go with the session, the recipe frees them */

static void
ngx_zk_lock_keep_free(ngx_zk_lock_t *lock)
{
    ngx_queue_t               *q;
    ngx_zk_lock_pool_t        *pool;
    ngx_zk_lock_lease_t       *lease;

    pool = lock->pool;

    while (!ngx_queue_empty(&pool->leases)) {
        q = ngx_queue_head(&pool->leases);
        ngx_queue_remove(q);

        lease = ngx_queue_data(q, ngx_zk_lock_lease_t, queue);

        if (lease->timer.timer_set) {
            ngx_del_timer(&lease->timer);
        }

        ngx_free(lease);
    }

    ngx_zk_lock_keep_timers_stop(pool);

    lock->pool = NULL;
    lock->refs--;

    ngx_free(pool);
}


/*
 * A listing of a path where the worker keeps leases: who else waits, and
 * the fair shares (see above; share.c computes them)
 */

void
ngx_zk_lock_keep_listed(ngx_zk_lock_t *lock,
    ngx_zk_lock_child_t *children, ngx_uint_t n)
{
    ngx_uint_t                 np, leases;
    ngx_zk_lock_pool_t        *pool;
    ngx_zk_lock_part_t        *parts;

    pool = lock->pool;

    if (pool == NULL || n == 0) {
        return;
    }

    if (pool->kind == NGX_ZK_LOCK_READ) {
        ngx_zk_lock_keep_listed_read(pool, children, n);
        return;
    }

    /* the participants, then their demands */

    parts = ngx_alloc(n * sizeof(ngx_zk_lock_part_t)
                      + (n + 1) * sizeof(ngx_zk_lock_claim_t),
                      &lock->session->log);
    if (parts == NULL) {
        return;
    }

    leases = pool->leases_n;

    if (pool->counter && pool->counter->value) {
        leases = pool->counter->value;
    }

    pool->share.leases = leases;
    pool->share.demand = lock->tickets
                         ? NGX_MAX_UINT32_VALUE
                         : 1000 * (pool->held - pool->idle);

    np = ngx_zk_lock_share_parts(&pool->share, children, n, parts);

    if (pool->board) {
        ngx_zk_lock_weigh_shares(pool, leases);
    }

    /*
     * Each participant that hears lists the path again at a change, at
     * most once a pace (path_heard()): 100 ms up to LISTERS participants,
     * then growing with them, so that the listings of the path, and the
     * cost of a change, stay about the same up to 96 of them, where it
     * reaches a quantum (what a lease over its share serves anyway).  The
     * first waiters are not paced.
     */

    lock->pace = ngx_min(ngx_max(NGX_ZK_LOCK_PATH_HEAR * np
                                 / NGX_ZK_LOCK_KEEP_LISTERS,
                                 NGX_ZK_LOCK_PATH_HEAR),
                         NGX_ZK_LOCK_KEEP_QUANTUM);

    ngx_zk_lock_share(&pool->share, parts, np,
                      (ngx_zk_lock_claim_t *) (void *) &parts[n]);

    if (pool->board) {
        ngx_zk_lock_weigh_claim(pool);
    }
    ngx_zk_lock_weigh_doom(pool, children, n, leases, parts, np);

    ngx_free(parts);

    ngx_zk_lock_keep_excess(pool, children, n, leases);
    ngx_zk_lock_keep_over(pool);
    ngx_zk_lock_keep_lent(pool);
    ngx_zk_lock_keep_near(pool, children, n, leases);

    if (!pool->share.others) {
        ngx_zk_lock_keep_gc(pool);
        return;
    }

    /* the listing's completion holds the lock meanwhile */

    ngx_zk_lock_keep_check_idle(pool);

    ngx_zk_lock_keep_gc(pool);
}


/*
 * A read lock's pool: readers share, so the only other participant that
 * waits for its lease is a writer, who is in the listing
 */

static void
ngx_zk_lock_keep_listed_read(ngx_zk_lock_pool_t *pool,
    ngx_zk_lock_child_t *children, ngx_uint_t n)
{
    ngx_uint_t  i;

    pool->share.others = 0;

    for (i = 0; i < n && children[i].seq < NGX_ZK_LOCK_SEQ_WRAPPED; i++) {
        if (children[i].write) {
            pool->share.others = 1;
            break;
        }
    }

    ngx_zk_lock_keep_lent(pool);

    if (pool->share.others) {
        ngx_zk_lock_keep_check_idle(pool);
    }

    ngx_zk_lock_keep_gc(pool);
}


/*
 * A count lowered below a lease's place: the lease is no longer one of
 * the first "leases" children, and is never granted again; an idle one
 * goes back now, a busy one when its request ends (the overshoot lasts as
 * long as the requests already running, as with Curator)
 */

static void
ngx_zk_lock_keep_excess(ngx_zk_lock_pool_t *pool,
    ngx_zk_lock_child_t *children, ngx_uint_t n, ngx_uint_t leases)
{
    ngx_uint_t                 i;
    ngx_queue_t               *q, *nq;
    ngx_zk_lock_lease_t       *lease;

    if (pool->held == 0) {
        return;
    }

    for (q = ngx_queue_head(&pool->leases);
         q != ngx_queue_sentinel(&pool->leases);
         q = nq)
    {
        nq = ngx_queue_next(q);
        lease = ngx_queue_data(q, ngx_zk_lock_lease_t, queue);

        if (lease->state == NGX_ZK_LOCK_KEEP_QUEUED) {
            continue;
        }

        for (i = leases; i < n; i++) {
            if (children[i].seq == lease->node->seq
                && ngx_zk_lock_session_ours(pool->lock->session,
                                            children[i].name))
            {
                lease->excess = 1;
                break;
            }
        }

        if (lease->excess && lease->state == NGX_ZK_LOCK_KEEP_IDLE) {
            ngx_zk_lock_keep_give_back(lease, 0);
        }
    }
}


/*
 * priority=: the leases over the worker's cap (see weigh.c) go as
 * those over the path's count do, at once if idle, else at their
 * request's end; a node that queues at the cap goes at once, lest it
 * take a lease that a class coming back waits for
 */

static void
ngx_zk_lock_keep_over(ngx_zk_lock_pool_t *pool)
{
    ngx_uint_t                 over;
    ngx_queue_t               *q, *nq;
    ngx_zk_lock_lease_t       *lease;

    if (pool->cap == 0
        || ngx_zk_lock_fair_reserved(&pool->fair, &pool->tickets))
    {
        return;
    }

    if (pool->queued && pool->held >= pool->cap) {
        ngx_zk_lock_keep_unqueue(pool);
    }

    if (pool->held <= pool->cap) {
        return;
    }

    over = pool->held - pool->cap;

    for (q = ngx_queue_head(&pool->leases);
         q != ngx_queue_sentinel(&pool->leases) && over;
         q = nq)
    {
        nq = ngx_queue_next(q);
        lease = ngx_queue_data(q, ngx_zk_lock_lease_t, queue);

        if (lease->state == NGX_ZK_LOCK_KEEP_QUEUED) {
            continue;
        }

        over--;

        if (lease->excess) {
            continue;
        }

        lease->excess = 1;

        if (lease->state == NGX_ZK_LOCK_KEEP_IDLE) {
            ngx_zk_lock_keep_give_back(lease, 0);
        }
    }
}
