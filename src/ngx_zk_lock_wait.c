
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>

#include "ngx_zk_lock_wait.h"
#include "ngx_zk_lock_keep.h"


/*
 * How this worker's waiters learn that they hold: every participant of a
 * lock finds its index among the children of a listing sorted by sequence
 * number, and holds below its lease count; the waiters watch the nodes
 * ahead of them, count each deletion heard of, and hold once fewer than
 * their lease count are left, without a listing when they can (see
 * ngx_zk_lock_wait_gone()).  The recipe (recipe.c) makes the moves:
 * this file decides them.
 */


/* lease counts told apart when choosing the nodes to watch */
#define NGX_ZK_LOCK_MAX_KINDS      8

/*
 * A listing longer than NGX_ZK_LOCK_DEEP is a deep queue, where a
 * worker watches the nodes at its head, see path_window(), up to MAX_SPAN of
 * them; the queue stays deep until a quarter of that is left, lest it list
 * at each handoff of its tail.  Not a setting: the tests build the module
 * once more with -DNGX_ZK_LOCK_DEEP=0, which makes every queue deep,
 * to run the deep-queue paths under every scenario (see README, Layout).
 */
#ifndef NGX_ZK_LOCK_DEEP
#define NGX_ZK_LOCK_DEEP           64
#endif
#define NGX_ZK_LOCK_MAX_SPAN       8


/* the first waiter of this worker with a lease count, in a listing */

typedef struct {
    ngx_uint_t                    leases;
    ngx_uint_t                    index;
    ngx_zk_lock_node_t           *node;
} ngx_zk_lock_first_t;


/* a listing, as wait_listed() places the nodes of this worker in it */

typedef struct {
    ngx_zk_lock_child_t          *children;
    ngx_uint_t                    n;
    ngx_uint_t                    first_write;
    ngx_uint_t                    span;       /* the most leases waited for */
    ngx_uint_t                    nfirsts;
    ngx_zk_lock_first_t           firsts[NGX_ZK_LOCK_MAX_KINDS];

    unsigned                      reads:1;    /* readers wait */
    unsigned                      deferred:1; /* a deep queue's late nodes */
} ngx_zk_lock_placing_t;


static void ngx_zk_lock_wait_listed(ngx_zk_lock_t *lock,
    const struct String_vector *strings, ngx_uint_t id);
static ngx_int_t ngx_zk_lock_wait_parse(ngx_zk_lock_t *lock,
    const struct String_vector *strings, ngx_zk_lock_placing_t *pl);
static void ngx_zk_lock_wait_place(ngx_zk_lock_t *lock,
    ngx_zk_lock_node_t *node, ngx_zk_lock_placing_t *pl);
static void ngx_zk_lock_wait_behind(ngx_zk_lock_t *lock,
    ngx_zk_lock_node_t *node, ngx_zk_lock_placing_t *pl,
    ngx_uint_t i, ngx_uint_t leases);
static void ngx_zk_lock_wait_watches(ngx_zk_lock_t *lock,
    ngx_zk_lock_placing_t *pl);
static void ngx_zk_lock_wait_gone(ngx_zk_lock_t *lock, uint32_t seq);
static void ngx_zk_lock_wait_promote(ngx_zk_lock_node_t *node);
static void ngx_zk_lock_wait_self(ngx_zk_lock_node_t *node);
static void ngx_zk_lock_wait_self_done(int rc, const struct Stat *stat,
    const void *data);
static ngx_zk_lock_node_t *ngx_zk_lock_wait_own(
    ngx_zk_lock_t *lock, uint32_t seq);
static void ngx_zk_lock_wait_self_deleted(ngx_zk_lock_node_t *node);


/* what a lock path tells: a listing, a node gone (see recipe_handler()) */

ngx_zk_lock_owner_t  ngx_zk_lock_wait_owner = {
    ngx_zk_lock_wait_listed,
    ngx_zk_lock_wait_gone,
    ngx_zk_lock_recipe_vetted
};


/* a watch fired: the session's watch handler */

void
ngx_zk_lock_wait_event(ngx_zk_lock_session_t *s, int type,
    const char *path)
{
    u_char                   *p;
    uint32_t                  seq;
    ngx_zk_lock_t            *lock;
    ngx_zk_lock_node_t       *node;

    if (ngx_zk_lock_counter_watch(s, path) == NGX_OK) {
        return;
    }

    /* a fair= board's: its path may be a lock's too */
    ngx_zk_lock_board_watch(s, type, path);

    if (type == ZOO_CHILD_EVENT) {
        /* a children watch is set on the lock itself */
        p = (u_char *) path + ngx_strlen(path);

    } else {
        /* a data watch on a child; its parent is the lock */
        p = (u_char *) strrchr(path, '/');

        if (p == NULL || p == (u_char *) path) {
            return;
        }
    }

    lock = ngx_zk_lock_path_find(s, (u_char *) path,
                                        p - (u_char *) path);

    if (lock == NULL) {
        return;
    }

    if (type == ZOO_CHILD_EVENT) {
        ngx_zk_lock_path_heard(lock);
        return;
    }

    seq = ngx_zk_lock_listing_seq(p + 1, ngx_strlen(p + 1));

    if (ngx_zk_lock_session_ours(s, p + 1)) {

        /* not one being deleted by us: the delete's reply counts it */

        node = ngx_zk_lock_wait_own(lock, seq);

        if (node == NULL) {
            return;
        }

        if (type == ZOO_DELETED_EVENT) {
            ngx_zk_lock_wait_self_deleted(node);

        } else if (type == ZOO_CHANGED_EVENT) {
            /* its data: perhaps a revocation, see recipe_changed() */
            ngx_zk_lock_recipe_changed(node);
        }

        return;
    }

    /* a watch fires once */

    ngx_zk_lock_path_unwatch(lock, seq);

    if (type == ZOO_DELETED_EVENT) {
        ngx_zk_lock_wait_gone(lock, seq);

    } else {
        ngx_zk_lock_path_relist(lock);
    }
}


/*
 * The heart of the recipe.  Every participant of this worker finds its
 * index among the children sorted by sequence number: below its lease count
 * it holds the lock.  For the waiters, the worker watches the "leases" nodes
 * just ahead of its first waiter: only the deletion of one of those can make
 * any of its waiters a holder (deletions further ahead leave that window as
 * it is, deletions behind do not matter), so no lease stays idle, and no
 * waiter watches the whole list.  With one lease this is Curator's "watch
 * the predecessor", which a write lock is.  A read lock is held while no
 * write lock's node comes first; readers watch that first writer.  Each
 * waiter keeps its index, so that a deletion can be counted without a
 * listing (see wait_gone()), and only a listing sent after its create counts
 * for it.
 */

static void
ngx_zk_lock_wait_listed(ngx_zk_lock_t *lock,
    const struct String_vector *strings, ngx_uint_t id)
{
    ngx_queue_t                *q, *nq;
    ngx_zk_lock_node_t         *node;
    ngx_zk_lock_placing_t       pl;

    if (ngx_zk_lock_wait_parse(lock, strings, &pl) != NGX_OK) {
        return;
    }

    for (q = ngx_queue_head(&lock->nodes);
         q != ngx_queue_sentinel(&lock->nodes);
         q = nq)
    {
        nq = ngx_queue_next(q);
        node = ngx_queue_data(q, ngx_zk_lock_node_t, queue);

        if (node->state == NGX_ZK_LOCK_LOST
            && ngx_zk_lock_recipe_adopt(node, pl.children, pl.n) != NGX_OK)
        {
            continue;
        }

        if (node->list_id > id) {
            /* created after this listing was asked for */

            if (node->deferred
                && (node->state == NGX_ZK_LOCK_CREATING
                    || node->state == NGX_ZK_LOCK_WAITING))
            {
                pl.deferred = 1;
                pl.span = ngx_max(pl.span,
                                  ngx_zk_lock_recipe_needed(node));
            }

            continue;
        }

        if (node->state == NGX_ZK_LOCK_WAITING
            || node->state == NGX_ZK_LOCK_HELD)
        {
            ngx_zk_lock_wait_place(lock, node, &pl);
        }
    }

    ngx_zk_lock_wait_watches(lock, &pl);

    if (lock->pool) {
        /* who else waits, and the fair shares of kept leases */
        ngx_zk_lock_keep_listed(lock, pl.children, pl.n);
    }

    if (pl.children) {
        ngx_free(pl.children);
    }
}


/* the children of a listing, sorted and kept */

static ngx_int_t
ngx_zk_lock_wait_parse(ngx_zk_lock_t *lock,
    const struct String_vector *strings, ngx_zk_lock_placing_t *pl)
{
    u_char  *name;

    ngx_memzero(pl, sizeof(ngx_zk_lock_placing_t));

    pl->n = strings->count;

    if (pl->n) {
        pl->children = ngx_alloc(pl->n * sizeof(ngx_zk_lock_child_t),
                                 &lock->session->log);
        if (pl->children == NULL) {
            return NGX_ERROR;
        }
    }

    pl->first_write = ngx_zk_lock_listing_sort(pl->children,
                                               strings->data, pl->n);

    name = ngx_zk_lock_listing_wrapped(pl->children, pl->n);

    if (name) {
        ngx_zk_lock_recipe_wrapped(lock, name);
        goto failed;
    }

    if (ngx_zk_lock_listing_keep(&lock->listing, pl->children, pl->n,
                                 &lock->session->log)
        != NGX_OK)
    {
        /* the counts stay those of the last listing, as the one kept */
        goto failed;
    }

    return NGX_OK;

failed:

    if (pl->children) {
        ngx_free(pl->children);
    }

    return NGX_ERROR;
}


/* one node of this worker in the listing: it holds, fails or waits */

static void
ngx_zk_lock_wait_place(ngx_zk_lock_t *lock,
    ngx_zk_lock_node_t *node, ngx_zk_lock_placing_t *pl)
{
    ngx_int_t                  i;
    ngx_uint_t                 leases;
    ngx_zk_lock_child_t       *children;

    children = pl->children;
    i = ngx_zk_lock_listing_index(children, pl->n, node->seq,
                                  node->name);
    leases = ngx_zk_lock_recipe_leases(node);

    ngx_log_debug4(NGX_LOG_DEBUG_HTTP, node->log, 0,
                   "zk lock: \"%s/%s\" index:%i leases:%ui",
                   lock->path, node->name, i, leases);

    if (i == NGX_ERROR) {

        if (node->state == NGX_ZK_LOCK_HELD) {
            ngx_log_error(NGX_LOG_WARN, node->log, 0,
                          "zookeeper node \"%s/%s\" vanished: "
                          "lock lost", lock->path, node->name);
        }

        ngx_zk_lock_recipe_node_fail(node, ZNONODE);
        return;
    }

    if (node->state == NGX_ZK_LOCK_HELD) {
        return;
    }

    switch (node->kind) {

    case NGX_ZK_LOCK_COUNT:

        /* the listing has set the children watch */

        if (pl->n <= leases) {
            ngx_zk_lock_recipe_node_held(node);

        } else {
            (void) ngx_zk_lock_recipe_busy(node);
        }

        return;

    case NGX_ZK_LOCK_READ:

        /*
         * Readers wait for the first writer: when it goes, whether it
         * held the lock or gave up, each reader looks again
         */

        if ((ngx_uint_t) i < pl->first_write) {
            ngx_zk_lock_recipe_node_held(node);

        } else if (!ngx_zk_lock_recipe_busy(node)) {
            node->ahead = children[i].writes;
            pl->reads = 1;
            ngx_zk_lock_wait_self(node);
        }

        return;

    default:

        if ((ngx_uint_t) i < leases) {
            ngx_zk_lock_recipe_node_held(node);

        } else if (!ngx_zk_lock_recipe_busy(node)) {
            ngx_zk_lock_wait_behind(lock, node, pl, i, leases);
        }

        return;
    }
}


/* a waiter behind the first "leases" nodes: what to watch for it */

static void
ngx_zk_lock_wait_behind(ngx_zk_lock_t *lock,
    ngx_zk_lock_node_t *node, ngx_zk_lock_placing_t *pl,
    ngx_uint_t i, ngx_uint_t leases)
{
    ngx_uint_t                 j, k;
    ngx_zk_lock_first_t       *f;

    node->ahead = i;
    node->covered = 0;
    pl->span = ngx_max(pl->span, leases);
    ngx_zk_lock_wait_self(node);

    if (pl->children[i - 1].len < sizeof(node->pred)) {
        (void) ngx_cpystrn(node->pred, pl->children[i - 1].name,
                           sizeof(node->pred));
    } else {
        node->pred[0] = '\0';
    }

    /* the first waiter of each lease count */

    for (j = 0; j < pl->nfirsts; j++) {
        f = &pl->firsts[j];

        if (f->leases == leases) {
            if (i < f->index) {
                f->index = i;
                f->node = node;
            }

            return;
        }
    }

    if (pl->nfirsts < NGX_ZK_LOCK_MAX_KINDS) {
        f = &pl->firsts[pl->nfirsts++];
        f->leases = leases;
        f->index = i;
        f->node = node;
        return;
    }

    /* not worth a bigger table: this one watches for itself */

    for (k = i - leases; k < i; k++) {
        ngx_zk_lock_path_watch(lock, pl->children[k].name);
    }
}


/*
 * For each lease count, the nodes ahead of its first waiter: when they
 * are all the nodes ahead of it, the deletion of any makes it a holder,
 * see wait_gone().  In a deep queue, the head of the queue instead.
 */

static void
ngx_zk_lock_wait_watches(ngx_zk_lock_t *lock,
    ngx_zk_lock_placing_t *pl)
{
    ngx_uint_t                 j, k;
    ngx_zk_lock_first_t       *f;

    ngx_zk_lock_path_unwatch_gone(lock, pl->children, pl->n);

    lock->span = pl->span;
    lock->reads = pl->reads;
    lock->first = 0;
    lock->deep = (pl->n > (lock->deep ? NGX_ZK_LOCK_DEEP / 4
                                      : NGX_ZK_LOCK_DEEP)
                  && !lock->count && !lock->keep
                  && pl->span <= NGX_ZK_LOCK_MAX_SPAN);

    if (lock->deep) {
        ngx_zk_lock_path_window(lock);
        return;
    }

    if (pl->deferred) {
        /* no longer a deep queue: they need a listing of their own */
        lock->wanted = 1;
    }

    for (j = 0; j < pl->nfirsts; j++) {
        f = &pl->firsts[j];

        if (lock->hear) {
            /*
             * A waiter of a pool that hears of every change: the pool's
             * listings tell it when it holds (keep_hear()), and it
             * watches no node.  The path's first waiter lists at once at
             * a change, not paced (path_heard()).  Watches on the nodes
             * ahead would be another set at each listing, as the queue
             * moves, and each would fire in turn.
             */
            f->node->covered = 0;
            lock->first |= (f->index == f->leases);
            continue;
        }

        f->node->covered = (f->index == f->leases);

        for (k = f->index - f->leases; k < f->index; k++) {
            ngx_zk_lock_path_watch(lock, pl->children[k].name);
        }
    }

    if (pl->reads) {
        ngx_zk_lock_path_watch(lock, pl->children[pl->first_write].name);
    }
}


/*
 * A node is gone: a watch fired, this worker deleted its own, or a watch
 * found it gone.  Nodes can only leave the queue ahead of a waiter (new
 * ones queue behind it), so a waiter's count of nodes ahead, taken from its
 * last listing and lowered by each deletion heard of since, never falls
 * below the truth.  A deletion counts only for a node of that listing that
 * was not counted yet: ZooKeeper sends the event or the delete's reply
 * before the reply to any listing that no longer shows the node, and a
 * node created after the listing comes after every node that it counted.
 *
 * When the count falls below the lease count, the waiter holds the lock
 * without a listing: the common handoff, where the node watched was the
 * holder.  A "covered" waiter, all of whose nodes ahead are watched, waits
 * for the next deletion.  Otherwise a mutex's first waiter watches the node
 * that was just ahead of it, and the rest is left to a listing.
 */

static void
ngx_zk_lock_wait_gone(ngx_zk_lock_t *lock, uint32_t seq)
{
    u_char                    *name;
    ngx_uint_t                 write, relist;
    ngx_queue_t               *q;
    ngx_zk_lock_node_t        *node, *first;
    ngx_zk_lock_entry_t       *e;

    e = ngx_zk_lock_listing_remove(&lock->listing, seq);

    if (e == NULL) {
        /*
         * Counted already, or created after the last listing, and so
         * behind every waiter that the listing counted for
         */
        return;
    }

    name = ngx_zk_lock_listing_name(&lock->listing, e);
    write = e->write;
    relist = 0;
    first = NULL;

    for (q = ngx_queue_head(&lock->nodes);
         q != ngx_queue_sentinel(&lock->nodes);
         q = ngx_queue_next(q))
    {
        node = ngx_queue_data(q, ngx_zk_lock_node_t, queue);

        if (node->state != NGX_ZK_LOCK_WAITING
            || node->kind == NGX_ZK_LOCK_COUNT
            || node->ahead == NGX_ZK_LOCK_UNKNOWN
            || node->seq <= seq
            || (node->kind == NGX_ZK_LOCK_READ && !write))
        {
            continue;
        }

        node->ahead--;

        if (node->ahead < ngx_zk_lock_recipe_needed(node)) {
            ngx_log_debug2(NGX_LOG_DEBUG_HTTP, node->log, 0,
                           "zk lock: \"%s/%s\" holds: the last one ahead "
                           "is gone", lock->path, node->name);

            ngx_zk_lock_wait_promote(node);
            continue;
        }

        ngx_zk_lock_wait_self(node);

        if (node->covered || lock->deep) {
            /* the others ahead of it are watched too, or will be */
            continue;
        }

        if (lock->hear && node->kind != NGX_ZK_LOCK_READ) {
            /* its pool's listings tell it, see wait_watches() */
            continue;
        }

        if (node->kind == NGX_ZK_LOCK_READ
            || ngx_zk_lock_recipe_leases(node) > 1
            || node->pred[0] == '\0'
            || ngx_strcmp(node->pred, name) == 0)
        {
            relist = 1;
            continue;
        }

        if (first == NULL || node->seq < first->seq) {
            first = node;
        }
    }

    if (lock->deep) {
        ngx_zk_lock_path_window(lock);

    } else if (relist) {
        ngx_zk_lock_path_relist(lock);

    } else if (first) {
        /* the others behind it are covered by its watch, as before */
        ngx_zk_lock_path_watch(lock, first->pred);
    }
}


/*
 * Without a listing, a waiter does not see its own node go, if someone
 * else deletes it: so a waiter one deletion away from holding watches its
 * own node (ZooKeeper tells of that deletion before any later one), and it
 * holds only once that watch is known to be set
 */

static void
ngx_zk_lock_wait_promote(ngx_zk_lock_node_t *node)
{
    if (node->self == NGX_ZK_LOCK_SELF_SET) {
        ngx_zk_lock_recipe_node_held(node);
        return;
    }

    node->promote = 1;
    ngx_zk_lock_wait_self(node);
}


static void
ngx_zk_lock_wait_self(ngx_zk_lock_node_t *node)
{
    int                          rc;
    ngx_zk_lock_t               *lock;
    ngx_zk_lock_session_t       *s;
    u_char                       buf[NGX_ZK_LOCK_BUF_LEN];

    if (node->self != NGX_ZK_LOCK_SELF_NONE
        || (node->ahead > ngx_zk_lock_recipe_needed(node)
            && !node->promote))
    {
        return;
    }

    lock = node->lock;
    s = lock->session;

    (void) ngx_zk_lock_path_child(buf, lock, node->name);

    ngx_zk_lock_session_batch(s);

    rc = zoo_awexists(s->zh, (char *) buf, ngx_zk_lock_session_watcher,
                      s, ngx_zk_lock_wait_self_done, node);

    if (rc != ZOK) {
        ngx_log_error(NGX_LOG_ERR, node->log, 0,
                      "zoo_awexists(\"%s\") failed (%d: %s)",
                      buf, rc, zerror(rc));
        return;
    }

    node->self = NGX_ZK_LOCK_SELF_SENT;
    node->pending++;
}


static void
ngx_zk_lock_wait_self_done(int rc, const struct Stat *stat,
    const void *data)
{
    ngx_zk_lock_node_t  *node = (ngx_zk_lock_node_t *) data;

    node->pending--;

    if (node->lock->session->exiting) {
        return;
    }

    if (rc == ZOK) {
        node->self = NGX_ZK_LOCK_SELF_SET;

    } else {
        /* ZNONODE: see wait_self_deleted(); else listed again on reconnect */
        node->self = NGX_ZK_LOCK_SELF_NONE;
    }

    if (node->state != NGX_ZK_LOCK_WAITING) {
        node->promote = 0;
        ngx_zk_lock_recipe_node_gc(node);
        return;
    }

    if (rc == ZNONODE) {
        ngx_zk_lock_wait_self_deleted(node);
        return;
    }

    if (node->promote && rc == ZOK) {
        node->promote = 0;
        ngx_zk_lock_recipe_node_held(node);
    }
}


/* a node of this worker that waits or holds */

static ngx_zk_lock_node_t *
ngx_zk_lock_wait_own(ngx_zk_lock_t *lock, uint32_t seq)
{
    ngx_queue_t              *q;
    ngx_zk_lock_node_t       *node;

    for (q = ngx_queue_head(&lock->nodes);
         q != ngx_queue_sentinel(&lock->nodes);
         q = ngx_queue_next(q))
    {
        node = ngx_queue_data(q, ngx_zk_lock_node_t, queue);

        if (node->seq == seq
            && (node->state == NGX_ZK_LOCK_WAITING
                || node->state == NGX_ZK_LOCK_HELD))
        {
            return node;
        }
    }

    return NULL;
}


/* someone else deleted a node of this worker */

static void
ngx_zk_lock_wait_self_deleted(ngx_zk_lock_node_t *node)
{
    ngx_log_error(NGX_LOG_WARN, node->log, 0,
                  "zookeeper node \"%s/%s\" vanished%s", node->lock->path,
                  node->name, node->state == NGX_ZK_LOCK_HELD
                              ? ": lock lost" : "");

    node->promote = 0;
    ngx_zk_lock_recipe_node_fail(node, ZNONODE);

    /* who was behind it learns from a listing when it went */
    ngx_zk_lock_path_relist(node->lock);
}
