
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>

#include "ngx_zk_lock_weigh.h"


/*
 * A pool of kept leases in the fleet: what the worker tells the others of
 * its flows and classes (fair=, priority=: its claim and demands, on the
 * path's board, board.c), how the instances are weighed at a listing
 * (share.c), with priority= the classes' parts and the worker's seats
 * (class.c, board.c), and which of its leases a waiter that holds none
 * watches (Curator's, see doom()).  keep.c calls it at a listing, as a
 * request comes, and a quantum apart; it moves no lease itself: the seats
 * it sets (the pool's cap) and the leases it marks doomed are keep.c's to
 * give back.
 */


/* leases marked in one listing for the waiters that watch them */
#define NGX_ZK_LOCK_WEIGH_DOOMED  16


static void ngx_zk_lock_weigh_classes(ngx_zk_lock_pool_t *pool,
    ngx_uint_t leases);
static void ngx_zk_lock_weigh_unknowing(ngx_zk_lock_pool_t *pool,
    ngx_zk_lock_child_t *children, ngx_uint_t n, ngx_uint_t leases);
static void ngx_zk_lock_weigh_watched(ngx_zk_lock_pool_t *pool,
    ngx_zk_lock_lease_t *lease, uint32_t watcher);


/*
 * A listing weighs the instances: fair=, by the flows they serve, this
 * one by its claim as the others read it, so that all count alike; with
 * priority=, by what their classes' claims give them, and this worker
 * holds no more than its seats
 */

void
ngx_zk_lock_weigh_shares(ngx_zk_lock_pool_t *pool, ngx_uint_t leases)
{
    pool->share.weight = ngx_zk_lock_board_mine(pool->board);
    pool->share.weigh = ngx_zk_lock_board_claim;
    pool->share.weigh_data = pool->board;

    if (pool->fair.classes) {
        ngx_zk_lock_weigh_classes(pool, leases);
    }
}


/*
 * priority=: the classes' parts of the leases across the fleet (board.c,
 * class.c), and so this worker's, which weighs it in share.c: the sum of
 * its classes' claims, each worth its class's part over the class's
 * claims.  The worker takes no more than that (its seats, see
 * board_seats()), lest others' borrowing take a class's reserved seats
 * while they are idle, but for the requests of such a class that nobody
 * claimed yet (see fair_reserved()): it comes back.
 */

static void
ngx_zk_lock_weigh_classes(ngx_zk_lock_pool_t *pool, ngx_uint_t leases)
{
    uint64_t                    extra, now;
    ngx_uint_t                  k;
    ngx_zk_lock_fair_class_t   *c;
    ngx_zk_lock_board_fleet_t   fl;

    ngx_zk_lock_board_classes(pool->board, (uint64_t) leases * 1000, &fl);

    extra = 0;

    for (k = 0; k < pool->fair.classes->n; k++) {
        c = &pool->fair.cls[k];

        /*
         * a class that comes back to seats reserved for it takes them at
         * once; once the fleet weighs its claims, its part is in the
         * workers' weights, and so in their caps
         */
        c->reserved = ((fl.a.reserved >> k) & 1) && fl.claims[k] == 0;

        if (fl.claims[k] == 0) {
            /*
             * nobody claims it yet: its nominal part, so that its first
             * requests here are not served behind a class that has its
             * part already, and the instance weighs what it wants of it
             */
            now = 1000 * (uint64_t) c->alive;

            c->level = 0;
            c->target = fl.a.nominal[k];
            extra += ngx_min(c->target, ngx_max((uint64_t) c->demand, now));
            continue;
        }

        /* a flow's level, thousandths of leases; our part of the class */
        c->level = fl.a.alloc[k] * NGX_ZK_LOCK_SHARE_FLOW / fl.claims[k];
        c->target = fl.a.alloc[k] * fl.mine[k] / fl.claims[k];
    }

    /* our claims weighed as the others weigh them, see board_seats() */
    pool->share.weight = (ngx_uint_t)
        ngx_min(ngx_zk_lock_board_worth(pool->board) + extra,
                NGX_ZK_LOCK_SHARE_WEIGHT_MAX);
    pool->cap = ngx_zk_lock_board_seats(pool->board, extra);
}


/*
 * fair=: the level a flow gets, for the next window's claim, and the
 * claim told to the others while the path is contended (none of
 * ZooKeeper otherwise)
 */

void
ngx_zk_lock_weigh_claim(ngx_zk_lock_pool_t *pool)
{
    ngx_uint_t                  k, claim, now;
    ngx_zk_lock_fair_class_t   *c;
    ngx_zk_lock_board_class_t   cls;

    if (!pool->share.others && !pool->lock->tickets) {
        /* the level of the last contention stays the estimate */
        return;
    }

    pool->fair.level = pool->share.level;

    claim = ngx_zk_lock_fair_claim(&pool->fair);

    if (pool->fair.classes == NULL) {
        ngx_zk_lock_board_post(pool->board, claim, NULL);
        return;
    }

    ngx_memzero(&cls, sizeof(ngx_zk_lock_board_class_t));

    for (k = 0; k < pool->fair.classes->n; k++) {
        c = &pool->fair.cls[k];

        /*
         * a class that comes back wants its requests now, not a window
         * on: all of them, those waiting for their flow's fair_max= too,
         * as weigh_back() counts them (else a request that found the
         * class behind asked a listing that posted nothing, each time)
         */
        now = 1000 * c->alive;

        cls.claim[k] = c->claim;
        cls.demand[k] = ngx_zk_lock_class_back(c->demand, now) ? now
                                                                : c->demand;
    }

    ngx_zk_lock_board_post(pool->board, claim, &cls);
}


/*
 * priority=: a class that comes back to this worker, past what the others
 * were told of it, is told now, and the seats are weighed again at the
 * listing asked for: while kept leases move no node, nothing else lists
 * the path before the weigh timer, a quantum away (a class back after a
 * pause of 3 s had its part of 7 after 0.3 to 0.8 s)
 */

void
ngx_zk_lock_weigh_back(ngx_zk_lock_pool_t *pool, ngx_zk_lock_node_t *ticket)
{
    ngx_uint_t  k, alive;

    alive = ngx_zk_lock_fair_alive(&pool->fair, ticket, &k);

    if (ngx_zk_lock_board_behind(pool->board, k, 1000 * (uint64_t) alive)) {
        ngx_zk_lock_weigh_claim(pool);
        ngx_zk_lock_path_ask(pool->lock);
    }
}


/*
 * The claims are weighed, and ours told, at a listing of the path; while
 * it is contended, one a quantum at least.  Shares that hold still (each
 * at its level, nobody short) move no node and so list nothing, and a
 * claim made after the last change would wait for the next one: two
 * nginx split 4 leases 2 and 2 for a whole run, the quiet tenants of one
 * at 65% of their rate.
 */

void
ngx_zk_lock_weigh_handler(ngx_event_t *ev)
{
    ngx_uint_t                n, nc;
    ngx_zk_lock_pool_t       *pool;
    ngx_zk_lock_fair_top_t    top[NGX_ZK_LOCK_FAIR_TOP];
    ngx_zk_lock_fair_load_t   load[NGX_ZK_LOCK_CLASS_MAX];

    pool = ev->data;

    if (pool->lock->tickets || pool->share.others) {
        ngx_zk_lock_path_relist(pool->lock);
    }

    /* the layer's gauges: the claim as the others read it */

    if (pool->tag && pool->tag->fair_report) {
        n = ngx_zk_lock_fair_top(&pool->fair, top);
        nc = ngx_zk_lock_fair_loads(&pool->fair, &pool->tickets, load);

        pool->tag->fair_report(pool->tag, pool->fair.nflows,
                               ngx_zk_lock_board_mine(pool->board), top, n,
                               load, nc);
    }

    ngx_add_timer(ev, NGX_ZK_LOCK_KEEP_QUANTUM);
}


/* fair_max=: a number of leases, or a part of the count */

ngx_uint_t
ngx_zk_lock_weigh_fair_max(ngx_zk_lock_pool_t *pool, ngx_zk_lock_params_t *lp)
{
    ngx_uint_t  leases;

    if (lp == NULL || lp->fair_max_pct == 0) {
        return lp ? lp->fair_max : 0;
    }

    leases = (pool->counter && pool->counter->value)
             ? pool->counter->value : pool->leases_n;

    return ngx_max(leases * lp->fair_max_pct / 100, 1);
}


/*
 * Curator's semaphore waits for the node "leases" places ahead of its own
 * to go, and for no other: a lease freed elsewhere leaves it waiting, and
 * a kept lease may stay for as long as there is load.  So a lease of this
 * worker that a waiter with no lease at all watches so (a Curator client,
 * or a worker that has none) goes back as soon as no request runs on it,
 * once that waiter has watched it for a quantum.  Not at once: a worker
 * of nginx that waits hears of every lease freed ahead of it, and is
 * served by the lease in transit or by one over its holder's share; one
 * that gave its lease back to such a waiter and queued again would doom
 * another holder's at once, and so on: a lease moving at every request
 * end, 0.04 to 0.17 writes a request at 32 nginx on 32 leases instead of
 * 0.015, in 4 of 11 runs of t/bench/scale.pl.
 */

void
ngx_zk_lock_weigh_doom(ngx_zk_lock_pool_t *pool,
    ngx_zk_lock_child_t *children, ngx_uint_t n, ngx_uint_t leases,
    ngx_zk_lock_part_t *parts, ngx_uint_t np)
{
    ngx_uint_t                 i, found;
    ngx_queue_t               *q;
    ngx_zk_lock_part_t         key, *p;
    ngx_zk_lock_lease_t       *lease;
    ngx_zk_lock_child_t       *w;

    ngx_zk_lock_weigh_unknowing(pool, children, n, leases);

    found = 0;

    for (i = leases;
         i < n && children[i].seq < NGX_ZK_LOCK_SEQ_WRAPPED
         && found < NGX_ZK_LOCK_WEIGH_DOOMED;
         i++)
    {
        if (ngx_zk_lock_session_ours(pool->lock->session,
                                     children[i].name))
        {
            continue;
        }

        key.name = children[i].name;
        key.len = ngx_zk_lock_share_prefix(&children[i]);

        p = bsearch(&key, parts, np, sizeof(ngx_zk_lock_part_t),
                    ngx_zk_lock_share_part_cmp);

        w = &children[i - leases];

        if (p == NULL || p->held
            || !ngx_zk_lock_session_ours(pool->lock->session, w->name))
        {
            continue;
        }

        for (q = ngx_queue_head(&pool->leases);
             q != ngx_queue_sentinel(&pool->leases);
             q = ngx_queue_next(q))
        {
            lease = ngx_queue_data(q, ngx_zk_lock_lease_t, queue);

            if (lease->node->seq == w->seq
                && lease->state != NGX_ZK_LOCK_KEEP_QUEUED)
            {
                ngx_zk_lock_weigh_watched(pool, lease, children[i].seq);
                found++;
                break;
            }
        }
    }
}


/* the lease is watched by a waiter that holds nothing: see doom() */

static void
ngx_zk_lock_weigh_watched(ngx_zk_lock_pool_t *pool,
    ngx_zk_lock_lease_t *lease, uint32_t watcher)
{
    ngx_msec_t  waited;

    if (lease->watcher != watcher || lease->watched == 0) {
        lease->watcher = watcher;
        lease->watched = ngx_current_msec;
    }

    waited = ngx_current_msec - lease->watched;

    if (waited >= NGX_ZK_LOCK_KEEP_QUANTUM) {
        lease->doomed = 1;
        return;
    }

    /* nothing may change on the path meanwhile: it is listed again then */

    if (!pool->starve.timer_set) {
        ngx_add_timer(&pool->starve, NGX_ZK_LOCK_KEEP_QUANTUM - waited);
    }
}


/*
 * A waiter that watched a lease of this worker may hold now without
 * knowing it: a lease ahead of it went, not the one that it watches, and
 * Curator's learns only of that one (or at its timeout: t/keep.t once saw
 * a Curator client hold for 20 s, unknowing, under load).  Its lease
 * goes back a quantum after that waiter came to watch it, as if it still
 * waited.
 */

static void
ngx_zk_lock_weigh_unknowing(ngx_zk_lock_pool_t *pool,
    ngx_zk_lock_child_t *children, ngx_uint_t n, ngx_uint_t leases)
{
    ngx_uint_t                 i;
    ngx_queue_t               *q;
    ngx_zk_lock_lease_t       *lease;

    for (q = ngx_queue_head(&pool->leases);
         q != ngx_queue_sentinel(&pool->leases);
         q = ngx_queue_next(q))
    {
        lease = ngx_queue_data(q, ngx_zk_lock_lease_t, queue);

        if (lease->state == NGX_ZK_LOCK_KEEP_QUEUED || lease->watched == 0
            || lease->doomed)
        {
            continue;
        }

        i = ngx_zk_lock_listing_find(children, n, lease->watcher);

        if (i == n || children[i].seq != lease->watcher) {
            /* that waiter went */
            lease->watched = 0;
            continue;
        }

        if (i < leases) {
            ngx_zk_lock_weigh_watched(pool, lease, lease->watcher);
        }
    }
}


void
ngx_zk_lock_weigh_starve_handler(ngx_event_t *ev)
{
    ngx_zk_lock_pool_t  *pool;

    pool = ev->data;

    if (pool->held) {
        ngx_zk_lock_path_relist(pool->lock);
    }
}
