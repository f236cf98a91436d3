
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#ifndef _NGX_ZK_LOCK_POOL_H_INCLUDED_
#define _NGX_ZK_LOCK_POOL_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>

#include "ngx_zk_lock_recipe.h"
#include "ngx_zk_lock_params.h"
#include "ngx_zk_lock_share.h"
#include "ngx_zk_lock_fair.h"
#include "ngx_zk_lock_board.h"


/*
 * A worker's pool of kept leases on a path (keep=), as ngx_zk_lock_keep.c
 * moves them and ngx_zk_lock_weigh.c weighs them in the fleet: private to
 * those two.
 *
 * A lease (its node's moves are the recipe's, see recipe.h):
 *
 *             held                a request ends
 *   QUEUED ----------> BUSY <-----------------------+
 *     |         (a ticket waits)  | ^               |
 *     |                           | | a request     |
 *     |          held             v | comes         |
 *     +----------------------->  IDLE --------------+
 *     | no ticket waits             |
 *     |                             | keep passed, or the grace while
 *     v                             v another waits; or over the share,
 *   failed: the tickets fail      given back (its node deleted)
 *
 *   BUSY, IDLE --its node lost (the session expired)--> dropped: its
 *       request is told as a holder is
 *   IDLE --the session may expire (jeopardy)--> given back
 *   BUSY --jeopardy--> its request is told, and the lease is given back
 *       when the request ends, not kept
 *   BUSY, lent to an owner that keeps it between its requests (a sibling
 *       worker's, zk_sessions) --wanted back (see lent())--> recalled: its
 *       owner ends it at once if idle, else at the end of its request
 *   BUSY (a read lock's) --another request--> BUSY, one more rider; it
 *       is BUSY until its last rider ends, and closed to new ones once a
 *       writer has waited for it and it has served for a quantum
 */


/*
 * A lease over the worker's share serves its requests for this long before
 * it goes back, ms: writes on a path stay below 2 x leases a quantum
 */
#define NGX_ZK_LOCK_KEEP_QUANTUM  600


typedef enum {
    NGX_ZK_LOCK_KEEP_QUEUED = 0,   /* its node waits in ZooKeeper */
    NGX_ZK_LOCK_KEEP_BUSY,         /* a request runs on it */
    NGX_ZK_LOCK_KEEP_IDLE          /* held, kept for the next one */
} ngx_zk_lock_keep_e;


typedef struct {
    ngx_queue_t                   queue;      /* in pool->leases */
    ngx_zk_lock_pool_t           *pool;
    ngx_zk_lock_node_t           *node;
    ngx_queue_t                   riders;     /* BUSY: its requests' tickets */
    ngx_uint_t                    busy;       /* riders: 1, but read locks' */
    ngx_zk_lock_keep_e            state;
    ngx_uint_t                    doomed;     /* a waiter watches it */
    uint32_t                      watcher;    /* that waiter's node */
    ngx_msec_t                    watched;    /* ... watches it since */
    ngx_uint_t                    excess;     /* beyond a lowered count */
    ngx_uint_t                    closed;     /* a read lock's: no riders */
    ngx_event_t                   timer;      /* IDLE: keep, or the grace */
    ngx_msec_t                    since;      /* IDLE since */
    ngx_msec_t                    held_at;    /* its node came to hold */
} ngx_zk_lock_lease_t;


struct ngx_zk_lock_pool_s {
    ngx_zk_lock_t                *lock;
    ngx_zk_lock_kind_e            kind;       /* LEASE, or READ: shared */
    ngx_queue_t                   leases;     /* the idle first, see idle() */
    ngx_queue_t                   tickets;    /* waiting, in arrival order */
    ngx_uint_t                    ntickets;   /* alive, waiting or not */
    ngx_uint_t                    leases_n;   /* unless the counter says */
    ngx_zk_lock_counter_t        *counter;
    ngx_msec_t                    keep;
    ngx_event_t                   linger;     /* queued, nobody waits */
    ngx_event_t                   patience;   /* for leases recalled */
    ngx_event_t                   stall;      /* at its share, see stall() */
    ngx_event_t                   starve;     /* a watcher's wait, doom() */
    ngx_event_t                   weigh;      /* fair=: weigh_handler() */
    ngx_uint_t                    recalled;   /* lent, recalled, not back */
    ngx_uint_t                    transient;  /* levels from variables */
    ngx_zk_lock_params_t         *tag;        /* its owner's, for reports */

    ngx_uint_t                    held;       /* BUSY and IDLE */
    ngx_uint_t                    idle;
    ngx_uint_t                    queued;
    ngx_uint_t                    near;       /* one of the first waiters */
    ngx_uint_t                    far;        /* ... or far behind them */
    ngx_uint_t                    many;       /* leases: more than one */
    ngx_uint_t                    cap;        /* priority=: held at most,
                                                 its seats; 0: none */

    ngx_zk_lock_share_t           share;      /* from the last listing */
    ngx_zk_lock_fair_t            fair;       /* fair=: its tickets' flows */
    ngx_zk_lock_board_t          *board;      /* ... and the fleet's */
};


#endif /* _NGX_ZK_LOCK_POOL_H_INCLUDED_ */
