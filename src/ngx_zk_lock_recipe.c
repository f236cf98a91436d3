
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>

#include "ngx_zk_lock_recipe.h"
#include "ngx_zk_lock_group.h"


#define NGX_ZK_LOCK_MAX_ATTEMPTS   3

#define NGX_ZK_LOCK_UNKNOWN        NGX_MAX_INT_T_VALUE

typedef ngx_uint_t (*ngx_zk_lock_visit_pt)(ngx_zk_lock_node_t *node);


static ngx_zk_lock_node_t *ngx_zk_lock_recipe_new(
    ngx_zk_lock_session_t *s, ngx_str_t *path,
    ngx_zk_lock_kind_e kind, ngx_uint_t leases, ngx_uint_t weight,
    ngx_zk_lock_counter_t *counter, ngx_str_t *info,
    ngx_zk_lock_notify_pt notify, void *data, ngx_log_t *log);
static void ngx_zk_lock_recipe_gate_notify(ngx_zk_lock_node_t *gate);
static void ngx_zk_lock_recipe_visit(ngx_zk_lock_session_t *s,
    ngx_zk_lock_visit_pt visit);
static ngx_uint_t ngx_zk_lock_recipe_reconnect(
    ngx_zk_lock_node_t *node);
static ngx_uint_t ngx_zk_lock_recipe_expire(ngx_zk_lock_node_t *node);
static ngx_uint_t ngx_zk_lock_recipe_let_go(ngx_zk_lock_node_t *node);
static void ngx_zk_lock_recipe_node_state(ngx_zk_lock_node_t *node,
    ngx_zk_lock_state_e state);
static void ngx_zk_lock_recipe_tell(ngx_zk_lock_node_t *node);
static void ngx_zk_lock_recipe_tell_handler(ngx_event_t *ev);
static void ngx_zk_lock_recipe_create(ngx_zk_lock_node_t *node);
static void ngx_zk_lock_recipe_create_done(int rc, const char *value,
    const struct Stat *stat, const void *data);
static void ngx_zk_lock_recipe_created(ngx_zk_lock_node_t *node,
    const char *value, const struct Stat *stat);
static void ngx_zk_lock_recipe_stat(ngx_zk_lock_node_t *node);
static void ngx_zk_lock_recipe_revoke_watch(ngx_zk_lock_node_t *node);
static ngx_uint_t ngx_zk_lock_recipe_answered(
    ngx_zk_lock_node_t *node);
static void ngx_zk_lock_recipe_revoke_done(int rc, const char *value,
    int value_len, const struct Stat *stat, const void *data);
static void ngx_zk_lock_recipe_stat_done(int rc, const struct Stat *stat,
    const void *data);
static ngx_uint_t ngx_zk_lock_recipe_defer(ngx_zk_lock_node_t *node);
static void ngx_zk_lock_recipe_delete(ngx_zk_lock_node_t *node);
static void ngx_zk_lock_recipe_delete_done(int rc, const void *data);
static void ngx_zk_lock_recipe_passenger_done(int rc, const void *data);


/* who makes sense of a lock's listings and deletions, see wait.c */
static ngx_zk_lock_owner_t  *ngx_zk_lock_recipe_owner;

/* who keeps leases for the requests of a path, see keep.c */
static ngx_zk_lock_keeper_t  *ngx_zk_lock_recipe_keeper_of;


#if (NGX_DEBUG)

/* only the debug log names states */

static const char  *ngx_zk_lock_state_name[] = {
    "parked", "creating", "lost", "waiting", "held", "failed",
    "deleting", "orphan"
};

#endif


ngx_zk_lock_node_t *
ngx_zk_lock_acquire(ngx_zk_lock_session_t *s, ngx_str_t *path,
    ngx_zk_lock_kind_e kind, ngx_uint_t leases, ngx_uint_t weight,
    ngx_zk_lock_counter_t *counter, ngx_str_t *info,
    ngx_uint_t transient, ngx_zk_lock_notify_pt notify, void *data,
    ngx_log_t *log)
{
    ngx_zk_lock_node_t  *node;

    node = ngx_zk_lock_recipe_new(s, path, kind, leases, weight,
                                  counter, info, notify, data, log);
    if (node == NULL) {
        return NULL;
    }

    /* known before the first create: see path_vet() */
    ngx_zk_lock_transient(node, transient);

    if (s->connected) {
        ngx_zk_lock_recipe_create(node);

    } else {
        ngx_log_debug1(NGX_LOG_DEBUG_HTTP, node->log, 0,
                       "zk lock: \"%s\" parked until connected",
                       node->lock->path);
    }

    return node;
}


static ngx_zk_lock_node_t *
ngx_zk_lock_recipe_new(ngx_zk_lock_session_t *s, ngx_str_t *path,
    ngx_zk_lock_kind_e kind, ngx_uint_t leases, ngx_uint_t weight,
    ngx_zk_lock_counter_t *counter, ngx_str_t *info,
    ngx_zk_lock_notify_pt notify, void *data, ngx_log_t *log)
{
    ngx_zk_lock_t       *lock;
    ngx_zk_lock_node_t  *node;

    lock = ngx_zk_lock_path_get(s, path,
                                ngx_zk_lock_recipe_owner);
    if (lock == NULL) {
        return NULL;
    }

    /*
     * A node outlives its request when a ZooKeeper reply is still to come,
     * so it is not allocated from the request pool
     */

    node = ngx_calloc(sizeof(ngx_zk_lock_node_t) + info->len, &s->log);
    if (node == NULL) {
        ngx_zk_lock_path_gc(lock);
        return NULL;
    }

    node->info.data = (u_char *) node + sizeof(ngx_zk_lock_node_t);
    node->info.len = info->len;
    ngx_memcpy(node->info.data, info->data, info->len);

    node->lock = lock;
    node->kind = kind;
    node->leases = leases;
    node->weight = weight;
    node->counter = counter;
    node->notify = notify;
    node->data = data;
    node->log = log;
    node->notify_event.handler = ngx_zk_lock_recipe_tell_handler;
    node->notify_event.data = node;
    node->notify_event.log = &s->log;
    node->ahead = NGX_ZK_LOCK_UNKNOWN;

    ngx_zk_lock_session_uuid(s, node->uuid);

    lock->refs++;
    ngx_queue_insert_tail(&lock->nodes, &node->queue);

    if (kind == NGX_ZK_LOCK_COUNT) {
        lock->count = 1;
    }

    return node;
}


/*
 * The owner is done with the node: delete the znode, now or as soon as
 * ZooKeeper allows.  The owner hears nothing more.
 */

void
ngx_zk_lock_release(ngx_zk_lock_node_t *node)
{
    ngx_zk_lock_t  *lock;

    if (node->releaser) {
        node->releaser(node);
        return;
    }

    if (node->ticket) {
        /* a request on a pool of kept leases: the lease is the pool's */
        ngx_zk_lock_recipe_keeper_of->release(node);
        return;
    }

    lock = node->lock;

    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, node->log, 0,
                   "zk lock: release \"%s/%s\" %s", lock->path, node->name,
                   ngx_zk_lock_state_name[node->state]);

    if (node->gate) {
        ngx_zk_lock_release(node->gate);
        node->gate = NULL;
    }

    node->notify = NULL;
    node->data = NULL;
    node->log = &lock->session->log;

    if (node->notify_event.posted) {
        ngx_delete_posted_event(&node->notify_event);
    }

    switch (node->state) {

    case NGX_ZK_LOCK_WAITING:
        node->was_waiting = 1;
        ngx_zk_lock_recipe_delete(node);
        break;

    case NGX_ZK_LOCK_HELD:
        ngx_zk_lock_recipe_delete(node);
        break;

    case NGX_ZK_LOCK_LOST:
        /* the next listing deletes it if the create went through */
        ngx_zk_lock_path_relist(lock);
        break;

    case NGX_ZK_LOCK_CREATING:
        /* the create's completion deletes it */
        break;

    case NGX_ZK_LOCK_DELETING:
    case NGX_ZK_LOCK_ORPHAN:
        /* failed with its znode: the delete is on its way, or will be */
        break;

    default: /* PARKED, FAILED */
        ngx_zk_lock_recipe_node_state(node, NGX_ZK_LOCK_FAILED);
        ngx_zk_lock_recipe_node_gc(node);
        break;
    }
}


/* the lock's path, null-terminated, for the owner's variables */

u_char *
ngx_zk_lock_node_path(ngx_zk_lock_node_t *node)
{
    return node->remote_path ? node->remote_path : node->lock->path;
}


/*
 * Set once at worker start: the module that makes sense of a lock's
 * listings and of its nodes gone, above the recipe (wait.c)
 */

void
ngx_zk_lock_recipe_handler(ngx_zk_lock_owner_t *owner)
{
    ngx_zk_lock_recipe_owner = owner;
}


void
ngx_zk_lock_recipe_keeper(ngx_zk_lock_keeper_t *keeper)
{
    ngx_zk_lock_recipe_keeper_of = keeper;
}


/*
 * The path was built from the request (a segment from variables): the
 * containers made for it would stay until the server reaps them, at most
 * 10000 a minute, and clients that choose new values faster would grow
 * ZooKeeper without bound.  When the path has no node of this worker left,
 * the module's empty containers are deleted, from the lock up to its
 * first variable segment (see path_delete()); a path that
 * another participant creates meanwhile answers its create ZNONODE, which
 * makes it create the path again, as Curator does.
 */

void
ngx_zk_lock_transient(ngx_zk_lock_node_t *node, ngx_uint_t levels)
{
    node->lock->transient = ngx_max(node->lock->transient, levels);
}


/*
 * A try (timeout=0): the node is placed by the first listing that shows
 * it, and fails with NGX_ZK_LOCK_BUSY rather than waits when others
 * come first.  Its answer is never a timer's guess: a node that would be
 * deferred in a deep queue gets a listing of its own.
 */

void
ngx_zk_lock_try(ngx_zk_lock_node_t *node)
{
    node->trying = 1;

    if (node->gate) {
        ngx_zk_lock_try(node->gate);
    }

    if (node->deferred) {
        node->deferred = 0;
        ngx_zk_lock_path_ask(node->lock);
    }
}


/*
 * A node created only once another node, its gate, holds: Curator's
 * semaphore v2 takes a lease while it holds a mutex.  The node has the
 * gate's owner and data; the gate is released when the owner is told of
 * the node, or releases it, and a gate that fails fails the node.
 */

ngx_zk_lock_node_t *
ngx_zk_lock_behind(ngx_zk_lock_node_t *gate, ngx_str_t *path,
    ngx_zk_lock_kind_e kind, ngx_uint_t leases, ngx_uint_t weight,
    ngx_zk_lock_counter_t *counter)
{
    ngx_zk_lock_node_t  *node;

    node = ngx_zk_lock_recipe_new(gate->lock->session, path, kind, leases,
                                  weight, counter, &gate->info,
                                  gate->notify, gate->data, gate->log);
    if (node == NULL) {
        return NULL;
    }

    node->gate = gate;
    gate->notify = ngx_zk_lock_recipe_gate_notify;
    gate->data = node;

    return node;
}


static void
ngx_zk_lock_recipe_gate_notify(ngx_zk_lock_node_t *gate)
{
    int                       error;
    ngx_zk_lock_node_t       *node;

    node = gate->data;

    if (gate->state == NGX_ZK_LOCK_HELD) {
        if (node->state == NGX_ZK_LOCK_PARKED
            && node->lock->session->connected)
        {
            ngx_zk_lock_recipe_create(node);
        }

        return;
    }

    error = gate->error;
    node->gate = NULL;
    ngx_zk_lock_release(gate);

    ngx_zk_lock_recipe_node_fail(node, error);
}


/*
 * Curator's Revocable: the node's data is watched, and "__REVOKE__" written
 * into it (Curator's Revoker.attemptRevoke(), or by hand) asks its owner
 * to let go: the node is deleted and the owner told, waiting or holding.
 */

void
ngx_zk_lock_revocable(ngx_zk_lock_node_t *node)
{
    node->revocable = 1;
}


/* a node of this worker changed: a revocable one reads its data again */

void
ngx_zk_lock_recipe_changed(ngx_zk_lock_node_t *node)
{
    if (node->revocable) {
        ngx_zk_lock_recipe_revoke_watch(node);
    }
}


static void
ngx_zk_lock_recipe_revoke_watch(ngx_zk_lock_node_t *node)
{
    int                          rc;
    ngx_zk_lock_session_t       *s;
    u_char                       buf[NGX_ZK_LOCK_BUF_LEN];

    s = node->lock->session;

    (void) ngx_zk_lock_path_child(buf, node->lock, node->name);

    ngx_zk_lock_session_batch(s);

    rc = zoo_awget(s->zh, (char *) buf, ngx_zk_lock_session_watcher, s,
                   ngx_zk_lock_recipe_revoke_done, node);

    if (rc != ZOK) {
        ngx_log_error(NGX_LOG_ERR, node->log, 0,
                      "zoo_awget(\"%s\") failed (%d: %s)",
                      buf, rc, zerror(rc));
        return;
    }

    node->pending++;
}


/*
 * The reply to a read of a node that waited or held when it was sent:
 * whether it still does, else it is freed if nothing else is to come.
 */

static ngx_uint_t
ngx_zk_lock_recipe_answered(ngx_zk_lock_node_t *node)
{
    node->pending--;

    if (node->lock->session->exiting) {
        return 0;
    }

    if (node->state != NGX_ZK_LOCK_WAITING
        && node->state != NGX_ZK_LOCK_HELD)
    {
        /* released, or failed meanwhile */
        ngx_zk_lock_recipe_node_gc(node);
        return 0;
    }

    return 1;
}


static void
ngx_zk_lock_recipe_revoke_done(int rc, const char *value, int value_len,
    const struct Stat *stat, const void *data)
{
    ngx_zk_lock_node_t  *node = (ngx_zk_lock_node_t *) data;

    if (!ngx_zk_lock_recipe_answered(node)) {
        return;
    }

    if (rc != ZOK || value == NULL || value_len != 10
        || ngx_strncmp(value, "__REVOKE__", 10) != 0)
    {
        /* another change, or gone: a deletion is heard of elsewhere */
        return;
    }

    if (node->state == NGX_ZK_LOCK_WAITING) {
        node->was_waiting = 1;
    }

    node->error = NGX_ZK_LOCK_REVOKED;
    ngx_zk_lock_recipe_delete(node);
    ngx_zk_lock_recipe_tell(node);
}


ngx_uint_t
ngx_zk_lock_recipe_busy(ngx_zk_lock_node_t *node)
{
    if (!node->trying) {
        return 0;
    }

    node->was_waiting = 1;
    node->error = NGX_ZK_LOCK_BUSY;
    ngx_zk_lock_recipe_delete(node);
    ngx_zk_lock_recipe_tell(node);

    return 1;
}


/*
 * The requests of this worker that wait on a lock path behind a holder
 * (max_waiting=): those that a listing placed behind others, and of those
 * still on their way (created, not listed yet), as many as the leases
 * that the worker's own holders leave could not take.  A burst on free
 * leases waits for nobody: HAProxy's maxqueue counts its queue, not its
 * arrivals.
 */

ngx_uint_t
ngx_zk_lock_waiting(ngx_zk_lock_session_t *s, ngx_str_t *path)
{
    ngx_uint_t                n, coming, held, room;
    ngx_queue_t              *q;
    ngx_zk_lock_t            *lock;
    ngx_zk_lock_node_t       *node;

    lock = ngx_zk_lock_path_find(s, path->data, path->len);

    if (lock == NULL) {
        return 0;
    }

    /* a pool's lease waits for its requests, which are counted instead */
    n = lock->tickets;
    coming = 0;
    held = 0;
    room = NGX_MAX_INT_T_VALUE;

    for (q = ngx_queue_head(&lock->nodes);
         q != ngx_queue_sentinel(&lock->nodes);
         q = ngx_queue_next(q))
    {
        node = ngx_queue_data(q, ngx_zk_lock_node_t, queue);

        if (node->notify == NULL || node->pooled
            || (node->gate && node->gate->state != NGX_ZK_LOCK_HELD))
        {
            /* a node behind its gate waits there, and is counted there */
            continue;
        }

        if (node->state == NGX_ZK_LOCK_HELD) {
            held += node->weight;
            continue;
        }

        if (node->state == NGX_ZK_LOCK_WAITING
            && node->ahead != NGX_ZK_LOCK_UNKNOWN)
        {
            n++;
            continue;
        }

        coming++;

        /* readers share: none of them waits for another */

        if (node->kind != NGX_ZK_LOCK_READ) {
            room = ngx_zk_lock_recipe_leases(node);
        }
    }

    room = (room > held) ? room - held : 0;

    return n + ((coming > room) ? coming - room : 0);
}


void
ngx_zk_lock_recipe_connected(ngx_zk_lock_session_t *s)
{
    ngx_zk_lock_counters_connected(s);
    ngx_zk_lock_boards_connected(s);
    ngx_zk_lock_recipe_visit(s, ngx_zk_lock_recipe_reconnect);
}


/*
 * Every ephemeral node of the expired session is gone.  Waiters fail (the
 * owner answers them), holders are told that they lost the lock, and the
 * parked ones wait for the next session.
 */

void
ngx_zk_lock_recipe_expired(ngx_zk_lock_session_t *s)
{
    ngx_queue_t         *q;
    ngx_zk_lock_t       *lock;

    /* the watches went with the session */

    for (q = ngx_queue_head(&s->all);
         q != ngx_queue_sentinel(&s->all);
         q = ngx_queue_next(q))
    {
        lock = ngx_queue_data(q, ngx_zk_lock_t, queue);
        lock->nwatched = 0;

        /* and the nodes of the last listing, with those of the session */
        lock->deep = 0;
    }

    ngx_zk_lock_recipe_visit(s, ngx_zk_lock_recipe_expire);
}


/*
 * The session may expire before the worker can hear of it (see
 * session_probe_handler()): its holders are told now that they may lose
 * their locks.  A holder keeps its node, HELD with the error JEOPARDY:
 * while the session lives nobody else can have the lock, so the node
 * goes when its owner releases it (zk_lock_lost abort does at once), or
 * with the session.  Waiters keep their places: only a live session can
 * make them hold.
 */

void
ngx_zk_lock_recipe_jeopardy(ngx_zk_lock_session_t *s)
{
    ngx_zk_lock_recipe_visit(s, ngx_zk_lock_recipe_let_go);
}


static ngx_uint_t
ngx_zk_lock_recipe_let_go(ngx_zk_lock_node_t *node)
{
    /* a gate's hold is not its owner's, and goes once the owner holds */

    if (node->state != NGX_ZK_LOCK_HELD || node->untold
        || node->notify == NULL
        || node->notify == ngx_zk_lock_recipe_gate_notify
        || node->error == NGX_ZK_LOCK_JEOPARDY)
    {
        return 0;
    }

    node->error = NGX_ZK_LOCK_JEOPARDY;
    ngx_zk_lock_recipe_tell(node);

    return 0;
}


/* a lease count changed: the locks that count on it are evaluated again */

void
ngx_zk_lock_recipe_recount(ngx_zk_lock_session_t *s,
    ngx_zk_lock_counter_t *c)
{
    ngx_queue_t              *lq, *q;
    ngx_zk_lock_t            *lock;
    ngx_zk_lock_node_t       *node;

    for (lq = ngx_queue_head(&s->all);
         lq != ngx_queue_sentinel(&s->all);
         lq = ngx_queue_next(lq))
    {
        lock = ngx_queue_data(lq, ngx_zk_lock_t, queue);

        for (q = ngx_queue_head(&lock->nodes);
             q != ngx_queue_sentinel(&lock->nodes);
             q = ngx_queue_next(q))
        {
            node = ngx_queue_data(q, ngx_zk_lock_node_t, queue);

            if (node->counter == c) {
                ngx_zk_lock_path_relist(lock);
                break;
            }
        }
    }
}


/* the worker exits: no completion is to come, whatever was pending */

void
ngx_zk_lock_recipe_free(ngx_zk_lock_session_t *s)
{
    ngx_queue_t              *lq, *q;
    ngx_zk_lock_t            *lock;
    ngx_zk_lock_node_t       *node;

    while (!ngx_queue_empty(&s->all)) {
        lq = ngx_queue_head(&s->all);
        lock = ngx_queue_data(lq, ngx_zk_lock_t, queue);

        if (lock->pool) {
            ngx_zk_lock_recipe_keeper_of->free(lock);
        }

        while (!ngx_queue_empty(&lock->nodes)) {
            q = ngx_queue_head(&lock->nodes);
            node = ngx_queue_data(q, ngx_zk_lock_node_t, queue);

            if (node->notify_event.posted) {
                ngx_delete_posted_event(&node->notify_event);
            }

            ngx_queue_remove(q);
            ngx_zk_lock_group_free(node);
            ngx_free(node);
        }

        lock->refs = 0;
        ngx_zk_lock_path_gc(lock);
    }

    ngx_zk_lock_counters_free(s);
    ngx_zk_lock_boards_free(s);
}


/* calls "visit" for every node; a lock is listed again if one asks */

static void
ngx_zk_lock_recipe_visit(ngx_zk_lock_session_t *s,
    ngx_zk_lock_visit_pt visit)
{
    ngx_uint_t                relist;
    ngx_queue_t              *q, *nq, *lq, *nlq;
    ngx_zk_lock_t            *lock;
    ngx_zk_lock_node_t       *node;

    for (lq = ngx_queue_head(&s->all);
         lq != ngx_queue_sentinel(&s->all);
         lq = nlq)
    {
        nlq = ngx_queue_next(lq);
        lock = ngx_queue_data(lq, ngx_zk_lock_t, queue);

        /* the lock must survive the loop over its nodes */
        lock->refs++;
        relist = 0;

        for (q = ngx_queue_head(&lock->nodes);
             q != ngx_queue_sentinel(&lock->nodes);
             q = nq)
        {
            nq = ngx_queue_next(q);
            node = ngx_queue_data(q, ngx_zk_lock_node_t, queue);

            relist |= visit(node);
        }

        if (relist) {
            ngx_zk_lock_path_relist(lock);
        }

        lock->refs--;
        ngx_zk_lock_path_gc(lock);
    }
}


/*
 * The node that a path's variable names has been read (path_vet()): the
 * participants parked for it are created, or fail
 */

void
ngx_zk_lock_recipe_vetted(ngx_zk_lock_t *lock)
{
    ngx_queue_t              *q, *nq;
    ngx_zk_lock_node_t       *node;

    if (lock->vet != NGX_ZK_LOCK_VET_OK
        && lock->vet != NGX_ZK_LOCK_VET_FOREIGN)
    {
        return;
    }

    for (q = ngx_queue_head(&lock->nodes);
         q != ngx_queue_sentinel(&lock->nodes);
         q = nq)
    {
        nq = ngx_queue_next(q);
        node = ngx_queue_data(q, ngx_zk_lock_node_t, queue);

        if (node->state == NGX_ZK_LOCK_PARKED
            && lock->session->connected
            && (node->gate == NULL
                || node->gate->state == NGX_ZK_LOCK_HELD))
        {
            ngx_zk_lock_recipe_create(node);
        }
    }
}


/* what the session could not do while it was away, it does now */

static ngx_uint_t
ngx_zk_lock_recipe_reconnect(ngx_zk_lock_node_t *node)
{
    switch (node->state) {

    case NGX_ZK_LOCK_PARKED:
        if (node->gate == NULL
            || node->gate->state == NGX_ZK_LOCK_HELD)
        {
            ngx_zk_lock_recipe_create(node);
        }

        return 0;

    case NGX_ZK_LOCK_ORPHAN:
        ngx_zk_lock_recipe_delete(node);
        return 0;

    case NGX_ZK_LOCK_WAITING:
    case NGX_ZK_LOCK_HELD:
        if (node->czxid == 0) {
            /* an adopted node's token, asked for in vain */
            ngx_zk_lock_recipe_stat(node);
        }

        /* fall through */

    case NGX_ZK_LOCK_LOST:
        /* a watch may have fired or been lost meanwhile */
        return 1;

    default:
        return 0;
    }
}


static ngx_uint_t
ngx_zk_lock_recipe_expire(ngx_zk_lock_node_t *node)
{
    switch (node->state) {

    case NGX_ZK_LOCK_LOST:
    case NGX_ZK_LOCK_WAITING:
    case NGX_ZK_LOCK_HELD:
    case NGX_ZK_LOCK_ORPHAN:
        ngx_zk_lock_recipe_node_fail(node, ZSESSIONEXPIRED);
        return 0;

    default:
        return 0;
    }
}


/* frees a node its owner released, once ZooKeeper has nothing to say */

void
ngx_zk_lock_recipe_node_gc(ngx_zk_lock_node_t *node)
{
    ngx_zk_lock_t  *lock;

    if (node->notify || node->pending
        || node->state != NGX_ZK_LOCK_FAILED)
    {
        return;
    }

    lock = node->lock;

    ngx_queue_remove(&node->queue);
    ngx_zk_lock_group_free(node);
    ngx_free(node);

    lock->refs--;
    ngx_zk_lock_path_gc(lock);
}


/* every move of the diagram beside the enum goes through here */

static void
ngx_zk_lock_recipe_node_state(ngx_zk_lock_node_t *node,
    ngx_zk_lock_state_e state)
{
    ngx_log_debug4(NGX_LOG_DEBUG_HTTP, node->log, 0,
                   "zk lock: \"%s/%s\" %s -> %s", node->lock->path,
                   node->name, ngx_zk_lock_state_name[node->state],
                   ngx_zk_lock_state_name[state]);

    node->state = state;
}


/* the owner is told that it holds the lock */

void
ngx_zk_lock_recipe_node_held(ngx_zk_lock_node_t *node)
{
    ngx_time_t  *tp;

    /* the fleet view shows how long it has held: ZooKeeper cannot say */

    tp = ngx_timeofday();
    node->granted = (int64_t) tp->sec * 1000 + tp->msec;

    ngx_zk_lock_recipe_node_state(node, NGX_ZK_LOCK_HELD);

    if (node->czxid == 0) {
        /* a lost create's node: told once its token is in, see recipe_stat() */
        node->untold = 1;
        return;
    }

    ngx_zk_lock_recipe_tell(node);
}


void
ngx_zk_lock_recipe_node_fail(ngx_zk_lock_node_t *node, int rc)
{
    node->was_held = (node->state == NGX_ZK_LOCK_HELD);
    node->error = rc;
    ngx_zk_lock_recipe_node_state(node, NGX_ZK_LOCK_FAILED);

    if (node->notify) {
        ngx_zk_lock_recipe_tell(node);

    } else {
        ngx_zk_lock_recipe_node_gc(node);
    }
}


/*
 * The owner is told from a posted event, never from inside a completion:
 * completions can run while the owner itself is calling in.
 */

static void
ngx_zk_lock_recipe_tell(ngx_zk_lock_node_t *node)
{
    if (!node->notify_event.posted) {
        ngx_post_event(&node->notify_event, &ngx_posted_events);
    }
}


static void
ngx_zk_lock_recipe_tell_handler(ngx_event_t *ev)
{
    ngx_zk_lock_node_t  *node;

    node = ev->data;

    if (node->gate) {
        /* held or failed: the gate has done its part */
        ngx_zk_lock_release(node->gate);
        node->gate = NULL;
    }

    if (node->notify) {
        node->notify(node);
    }
}


static void
ngx_zk_lock_recipe_create(ngx_zk_lock_node_t *node)
{
    int                          rc;
    u_char                      *p;
    ngx_zk_lock_t               *lock;
    ngx_zk_lock_session_t       *s;
    u_char                       buf[NGX_ZK_LOCK_BUF_LEN];

    lock = node->lock;
    s = lock->session;

    switch (ngx_zk_lock_path_vet(lock)) {

    case NGX_ZK_LOCK_VET_OK:
        break;

    case NGX_ZK_LOCK_VET_FOREIGN:
        ngx_zk_lock_recipe_node_fail(node, NGX_ZK_LOCK_FOREIGN);
        return;

    default:
        /* parked until the path is vetted, see recipe_vetted() */
        return;
    }

    p = ngx_sprintf(buf, "%s/_c_%*s-%s", lock->path,
                    (size_t) NGX_ZK_LOCK_UUID_LEN, node->uuid,
                    ngx_zk_lock_listing_kind(node->kind));
    *p = '\0';

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, node->log, 0,
                   "zk lock: create \"%s\"", buf);

    node->attempts++;
    node->generation = s->generation;

    ngx_zk_lock_session_batch(s);

    /* the create's Stat carries the node's czxid: its fencing token */

    if (node->weight > 1) {
        rc = ngx_zk_lock_group_create(node, buf,
                                      ngx_zk_lock_recipe_create_done);

    } else {
        rc = zoo_acreate2(s->zh, (char *) buf, (char *) node->info.data,
                          (int) node->info.len, s->acl,
                          ZOO_EPHEMERAL_SEQUENTIAL,
                          ngx_zk_lock_recipe_create_done, node);
    }

    if (rc != ZOK) {
        ngx_log_error(NGX_LOG_ERR, node->log, 0,
                      "zookeeper create of \"%s\" failed (%d: %s)",
                      buf, rc, zerror(rc));
        ngx_zk_lock_recipe_node_fail(node, rc);
        return;
    }

    ngx_zk_lock_recipe_node_state(node, NGX_ZK_LOCK_CREATING);
    node->pending++;
    node->ahead = NGX_ZK_LOCK_UNKNOWN;

    /*
     * The listing goes right behind the create: ZooKeeper answers a
     * session's requests in order, so it shows the new node, and acquiring
     * costs one round trip.  When a listing is on its way already, the
     * next one is sent as soon as it is answered, for all the nodes
     * created meanwhile: a burst of requests costs a listing per round
     * trip, not one per request.
     */

    node->list_id = lock->sent + 1;

    if (!ngx_zk_lock_recipe_defer(node)) {
        ngx_zk_lock_path_ask(lock);
    }
}


static void
ngx_zk_lock_recipe_create_done(int rc, const char *value,
    const struct Stat *stat, const void *data)
{
    ngx_zk_lock_node_t  *node = (ngx_zk_lock_node_t *) data;

    ngx_zk_lock_t               *lock;
    ngx_zk_lock_session_t       *s;

    lock = node->lock;
    s = lock->session;

    node->pending--;

    if (s->exiting) {
        return;
    }

    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, node->log, 0,
                   "zk lock: created \"%s\" rc:%d %s",
                   value ? value : "", rc, zerror(rc));

    switch (rc) {

    case ZOK:
        ngx_zk_lock_recipe_created(node, value, stat);
        return;

    case ZNONODE:

        if (lock->denied && node->attempts > 1) {
            /*
             * the parents made before this create (see below) were
             * refused: "no node" would hide why
             */
            rc = ZNOAUTH;
            break;
        }

        if (node->notify && node->attempts < NGX_ZK_LOCK_MAX_ATTEMPTS) {

            /*
             * ZooKeeper runs a session's requests in order: the parents
             * exist by the time the create is retried
             */

            ngx_zk_lock_path_create_parents(lock);
            ngx_zk_lock_recipe_create(node);
            return;
        }

        break;

    case ZCONNECTIONLOSS:
    case ZOPERATIONTIMEOUT:

        /*
         * The node may or may not exist: the listing after reconnecting
         * looks for its uuid (Curator's "protection")
         */

        ngx_zk_lock_recipe_node_state(node, NGX_ZK_LOCK_LOST);
        return;

    default:
        break;
    }

    if (node->notify) {
        ngx_log_error(NGX_LOG_ERR, node->log, 0,
                      "zookeeper create in \"%s\" failed (%d: %s)",
                      lock->path, rc, zerror(rc));
    }

    ngx_zk_lock_recipe_node_fail(node, rc);
}


/* the create answered: the node queues, unless its owner has gone */

static void
ngx_zk_lock_recipe_created(ngx_zk_lock_node_t *node, const char *value,
    const struct Stat *stat)
{
    size_t          len;
    u_char         *name;
    ngx_zk_lock_t  *lock;

    lock = node->lock;

    lock->made = 1;
    name = (u_char *) strrchr(value, '/');
    name = name ? name + 1 : (u_char *) value;
    len = ngx_strlen(name);

    if (len >= sizeof(node->name)) {
        ngx_log_error(NGX_LOG_ALERT, node->log, 0,
                      "unexpected zookeeper node name \"%s\"", value);
        ngx_zk_lock_recipe_node_fail(node, ZAPIERROR);
        return;
    }

    ngx_memcpy(node->name, name, len + 1);
    node->name_len = len;
    node->seq = ngx_zk_lock_listing_seq(name, len);
    node->czxid = stat ? stat->czxid : 0;
    ngx_zk_lock_recipe_node_state(node, NGX_ZK_LOCK_WAITING);

    if (node->notify == NULL) {
        /* released while the create was on its way */
        ngx_zk_lock_recipe_delete(node);
        return;
    }

    if (node->revocable) {
        ngx_zk_lock_recipe_revoke_watch(node);
    }

    if (stat == NULL) {
        /* a group's multi() answers no Stat: see recipe_stat() */
        ngx_zk_lock_recipe_stat(node);
    }

    if (node->seq == NGX_ZK_LOCK_SEQ_WRAPPED) {
        ngx_zk_lock_recipe_wrapped(lock, name);
        return;
    }

    if (node->list_id > lock->sent
        && !ngx_zk_lock_recipe_defer(node))
    {

        /*
         * No listing went after the create, which is answered after the
         * listings sent before it: if this one fails too, the next one
         * does, or the request times out
         */

        (void) ngx_zk_lock_path_list(lock);
    }
}


/*
 * In a deep queue a new node comes after every node of the last listing,
 * whose head the worker watches: it is listed only once few of those are
 * left, see path_window().  Decided again when the create is answered, as a
 * listing may have come meanwhile.
 */

static ngx_uint_t
ngx_zk_lock_recipe_defer(ngx_zk_lock_node_t *node)
{
    ngx_uint_t           needed;
    ngx_zk_lock_t       *lock;

    lock = node->lock;
    needed = ngx_zk_lock_recipe_needed(node);

    node->deferred = (lock->deep && node->kind != NGX_ZK_LOCK_READ
                      && !node->trying
                      && lock->listing.live >= ngx_max(lock->span, needed));

    if (node->deferred) {
        lock->span = ngx_max(lock->span, needed);
    }

    return node->deferred;
}


static void
ngx_zk_lock_recipe_delete(ngx_zk_lock_node_t *node)
{
    int                          rc;
    ngx_zk_lock_t               *lock;
    ngx_zk_lock_session_t       *s;
    u_char                       buf[NGX_ZK_LOCK_BUF_LEN];

    lock = node->lock;
    s = lock->session;

    if (node->generation != s->generation || s->zh == NULL) {
        /* the znode went with its session */
        ngx_zk_lock_recipe_node_state(node, NGX_ZK_LOCK_FAILED);
        ngx_zk_lock_recipe_node_gc(node);
        return;
    }

    if (!s->connected) {
        ngx_zk_lock_recipe_node_state(node, NGX_ZK_LOCK_ORPHAN);
        return;
    }

    (void) ngx_zk_lock_path_child(buf, lock, node->name);

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, node->log, 0,
                   "zk lock: delete \"%s\"", buf);

    ngx_zk_lock_session_batch(s);

    if (node->npassengers) {
        ngx_zk_lock_group_delete(node,
                                 ngx_zk_lock_recipe_passenger_done);
    }

    rc = zoo_adelete(s->zh, (char *) buf, -1,
                     ngx_zk_lock_recipe_delete_done, node);

    if (rc != ZOK) {
        ngx_log_error(NGX_LOG_ERR, node->log, 0,
                      "zoo_adelete(\"%s\") failed (%d: %s)",
                      buf, rc, zerror(rc));
        ngx_zk_lock_recipe_node_state(node, NGX_ZK_LOCK_ORPHAN);
        return;
    }

    ngx_zk_lock_recipe_node_state(node, NGX_ZK_LOCK_DELETING);
    node->pending++;
}


/* a passenger's delete: its node's own delete, answered next, tells */

static void
ngx_zk_lock_recipe_passenger_done(int rc, const void *data)
{
    ngx_zk_lock_node_t  *node = (ngx_zk_lock_node_t *) data;

    node->pending--;

    if (!node->lock->session->exiting) {
        ngx_zk_lock_recipe_node_gc(node);
    }
}


static void
ngx_zk_lock_recipe_delete_done(int rc, const void *data)
{
    ngx_zk_lock_node_t  *node = (ngx_zk_lock_node_t *) data;

    ngx_queue_t              *q;
    ngx_zk_lock_t            *lock;
    ngx_zk_lock_node_t       *other;

    lock = node->lock;

    node->pending--;

    if (lock->session->exiting) {
        return;
    }

    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, node->log, 0,
                   "zk lock: deleted \"%s/%s\" rc:%d",
                   lock->path, node->name, rc);

    if (rc == ZCONNECTIONLOSS || rc == ZOPERATIONTIMEOUT) {
        /* Curator's guaranteed delete: again once reconnected */
        ngx_zk_lock_recipe_node_state(node, NGX_ZK_LOCK_ORPHAN);
        return;
    }

    if (rc != ZOK && rc != ZNONODE && rc != ZSESSIONEXPIRED
        && rc != ZCLOSING)
    {
        ngx_log_error(NGX_LOG_ERR, node->log, 0,
                      "zookeeper delete of \"%s/%s\" failed (%d: %s)",
                      lock->path, node->name, rc, zerror(rc));
    }

    if (rc == ZOK) {
        /* the nodes behind it are not watching it, see path_watch() */
        ngx_zk_lock_group_gone(node);
        lock->owner->gone(lock, node->seq);

    } else if (rc == ZNONODE) {
        /* someone else deleted it: when, the listing tells */
        ngx_zk_lock_path_relist(lock);
    }

    /*
     * A waiter that leaves may have been this worker's first waiter,
     * the one whose predecessors are watched: look again for the next one
     */

    if (node->was_waiting && !lock->deep) {
        for (q = ngx_queue_head(&lock->nodes);
             q != ngx_queue_sentinel(&lock->nodes);
             q = ngx_queue_next(q))
        {
            other = ngx_queue_data(q, ngx_zk_lock_node_t, queue);

            if (other->state == NGX_ZK_LOCK_WAITING && other->notify) {
                ngx_zk_lock_path_relist(lock);
                break;
            }
        }
    }

    ngx_zk_lock_recipe_node_state(node, NGX_ZK_LOCK_FAILED);
    ngx_zk_lock_recipe_node_gc(node);
}


/*
 * The sequence numbers under the path have wrapped: the order of the queue
 * is lost (Curator sorts the new names first, too).  The holders keep the
 * lock; the waiters fail and give their nodes back, until an operator
 * deletes the path, which starts the numbers from 0 again.
 */

void
ngx_zk_lock_recipe_wrapped(ngx_zk_lock_t *lock, u_char *name)
{
    ngx_queue_t              *q, *nq;
    ngx_zk_lock_node_t       *node;

    ngx_log_error(NGX_LOG_ERR, &lock->session->log, 0,
                  "zookeeper sequence numbers under \"%s\" have run past "
                  "2^31 (\"%s\"): no lock can be had there until the path "
                  "is deleted and created again", lock->path, name);

    for (q = ngx_queue_head(&lock->nodes);
         q != ngx_queue_sentinel(&lock->nodes);
         q = nq)
    {
        nq = ngx_queue_next(q);
        node = ngx_queue_data(q, ngx_zk_lock_node_t, queue);

        if (node->state == NGX_ZK_LOCK_WAITING) {
            node->was_waiting = 1;
            node->error = ZBADARGUMENTS;
            ngx_zk_lock_recipe_delete(node);
            ngx_zk_lock_recipe_tell(node);
        }
    }
}





/* the count of nodes ahead below which a waiter holds */

ngx_uint_t
ngx_zk_lock_recipe_needed(ngx_zk_lock_node_t *node)
{
    return (node->kind == NGX_ZK_LOCK_READ)
           ? 1 : ngx_zk_lock_recipe_leases(node);
}


/* a node whose create reply was lost is found by its uuid, or made again */

ngx_int_t
ngx_zk_lock_recipe_adopt(ngx_zk_lock_node_t *node,
    ngx_zk_lock_child_t *children, ngx_uint_t n)
{
    size_t       len;
    ngx_uint_t   i;
    u_char       prefix[sizeof("_c_-") + NGX_ZK_LOCK_UUID_LEN];

    (void) ngx_sprintf(prefix, "_c_%*s-",
                       (size_t) NGX_ZK_LOCK_UUID_LEN, node->uuid);

    if (node->weight > 1) {
        i = ngx_zk_lock_group_adopt(node, children, n, prefix,
                                    sizeof(prefix) - 1);

    } else {
        for (i = 0; i < n; i++) {
            if (ngx_strncmp(children[i].name, prefix, sizeof(prefix) - 1)
                == 0)
            {
                break;
            }
        }
    }

    if (i == n) {
        ngx_log_debug1(NGX_LOG_DEBUG_HTTP, node->log, 0,
                       "zk lock: lost create in \"%s\" did not happen",
                       node->lock->path);

        if (node->notify) {
            node->attempts = 0;
            ngx_zk_lock_recipe_create(node);

        } else {
            ngx_zk_lock_recipe_node_state(node, NGX_ZK_LOCK_FAILED);
            ngx_zk_lock_recipe_node_gc(node);
        }

        return NGX_DECLINED;
    }

    len = children[i].len;

    if (len >= sizeof(node->name)) {
        return NGX_DECLINED;
    }

    ngx_memcpy(node->name, children[i].name, len + 1);
    node->name_len = len;
    node->seq = children[i].seq;
    ngx_zk_lock_recipe_node_state(node, NGX_ZK_LOCK_WAITING);

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, node->log, 0,
                   "zk lock: found lost node \"%s/%s\"",
                   node->lock->path, node->name);

    if (node->notify == NULL) {
        ngx_zk_lock_recipe_delete(node);
        return NGX_DECLINED;
    }

    ngx_zk_lock_recipe_stat(node);

    if (node->revocable) {
        ngx_zk_lock_recipe_revoke_watch(node);
    }

    return NGX_OK;
}


/*
 * A node found by its uuid has no create reply, and so no token: its
 * Stat is asked for, and a holder is told only once it has come.  A node
 * whose token cannot be had fails rather than hold without one.
 */

static void
ngx_zk_lock_recipe_stat(ngx_zk_lock_node_t *node)
{
    int                          rc;
    ngx_zk_lock_session_t       *s;
    u_char                       buf[NGX_ZK_LOCK_BUF_LEN];

    s = node->lock->session;

    (void) ngx_zk_lock_path_child(buf, node->lock, node->name);

    ngx_zk_lock_session_batch(s);

    rc = zoo_aexists(s->zh, (char *) buf, 0,
                     ngx_zk_lock_recipe_stat_done, node);

    if (rc != ZOK) {
        ngx_log_error(NGX_LOG_ERR, node->log, 0,
                      "zoo_aexists(\"%s\") failed (%d: %s)",
                      buf, rc, zerror(rc));
        ngx_zk_lock_recipe_node_fail(node, rc);
        return;
    }

    node->pending++;
}


static void
ngx_zk_lock_recipe_stat_done(int rc, const struct Stat *stat,
    const void *data)
{
    ngx_zk_lock_node_t  *node = (ngx_zk_lock_node_t *) data;

    if (!ngx_zk_lock_recipe_answered(node)) {
        return;
    }

    if (rc == ZCONNECTIONLOSS || rc == ZOPERATIONTIMEOUT) {
        /* asked again once reconnected, see reconnect() */
        return;
    }

    if (rc != ZOK || stat == NULL) {
        ngx_zk_lock_recipe_node_fail(node, rc == ZOK ? ZAPIERROR : rc);
        return;
    }

    node->czxid = stat->czxid;

    if (node->untold) {
        node->untold = 0;
        ngx_zk_lock_recipe_tell(node);
    }
}



ngx_uint_t
ngx_zk_lock_recipe_leases(ngx_zk_lock_node_t *node)
{
    if (node->counter && node->counter->value) {
        return node->counter->value;
    }

    return node->leases;
}






