
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>

#include "ngx_zk_lock_path.h"


/* the chroot's missing parent is logged at most this often, ms */
#define NGX_ZK_LOCK_CHROOT_LOG  10000


/* what ngx_zk_lock_path_utf8() returns for what is not UTF-8 */
#define NGX_ZK_LOCK_BAD_UTF8  0xffffffff


typedef struct {
    ngx_zk_lock_t                *lock;
    uint32_t                      seq;
} ngx_zk_lock_watch_t;


/* an idle path built from a request, deleted level by level */

typedef struct {
    ngx_zk_lock_session_t        *session;
    ngx_uint_t                    levels;     /* still to delete */
    u_char                        path[1];
} ngx_zk_lock_idle_path_t;


static void ngx_zk_lock_path_hearing_handler(ngx_event_t *ev);
static void ngx_zk_lock_path_delete(ngx_zk_lock_t *lock);
static void ngx_zk_lock_path_idle_stat(
    ngx_zk_lock_idle_path_t *idle);
static void ngx_zk_lock_path_idle_read(int rc, const char *value,
    int value_len, const struct Stat *stat, const void *data);
static void ngx_zk_lock_path_deleted(int rc, const void *data);
static void ngx_zk_lock_path_vet_done(int rc, const char *value,
    int value_len, const struct Stat *stat, const void *data);
static void ngx_zk_lock_path_listed(int rc,
    const struct String_vector *strings, const void *data);
static void ngx_zk_lock_path_create_parent(ngx_zk_lock_t *lock,
    u_char *path, int mode);
static void ngx_zk_lock_path_chroot_done(int rc, const char *value,
    const void *data);
static void ngx_zk_lock_path_parent_done(int rc, const char *value,
    const void *data);
static uint32_t ngx_zk_lock_path_utf8(u_char **pp, u_char *last);
static ngx_uint_t ngx_zk_lock_path_watched(ngx_zk_lock_t *lock,
    uint32_t seq);
static void ngx_zk_lock_path_remember(ngx_zk_lock_t *lock, ngx_uint_t i,
    uint32_t seq);
static void ngx_zk_lock_path_watch_done(int rc, const char *value,
    int value_len, const struct Stat *stat, const void *data);


ngx_zk_lock_t *
ngx_zk_lock_path_get(ngx_zk_lock_session_t *s, ngx_str_t *path,
    ngx_zk_lock_owner_t *owner)
{
    ngx_zk_lock_t  *lock;

    lock = ngx_zk_lock_path_find(s, path->data, path->len);
    if (lock) {
        return lock;
    }

    lock = ngx_alloc(offsetof(ngx_zk_lock_t, path) + path->len + 1,
                     &s->log);
    if (lock == NULL) {
        return NULL;
    }

    ngx_memcpy(lock->path, path->data, path->len);
    lock->path[path->len] = '\0';

    lock->sn.str.data = lock->path;
    lock->sn.str.len = path->len;
    lock->sn.node.key = ngx_crc32_short(path->data, path->len);

    lock->session = s;
    lock->owner = owner;
    lock->refs = 0;
    lock->sent = 0;
    lock->answered = 0;
    lock->nwatched = 0;
    lock->watch_room = 0;
    lock->watched = NULL;
    ngx_memzero(&lock->listing, sizeof(ngx_zk_lock_listing_t));
    lock->span = 0;
    lock->count = 0;
    lock->wanted = 0;
    lock->deep = 0;
    lock->reads = 0;
    lock->transient = 0;
    lock->made = 0;
    lock->vet = NGX_ZK_LOCK_VET_NONE;
    lock->pool = NULL;
    lock->tickets = 0;
    lock->keep = 0;
    lock->hear = 0;
    lock->eager = 0;
    lock->first = 0;
    lock->denied = 0;
    lock->heard = 0;
    lock->pace = NGX_ZK_LOCK_PATH_HEAR;
    ngx_memzero(&lock->hearing, sizeof(ngx_event_t));
    ngx_queue_init(&lock->nodes);

    ngx_rbtree_insert(&s->locks, &lock->sn.node);
    ngx_queue_insert_tail(&s->all, &lock->queue);

    return lock;
}


ngx_zk_lock_t *
ngx_zk_lock_path_find(ngx_zk_lock_session_t *s, u_char *path,
    size_t len)
{
    ngx_str_t        key;
    ngx_str_node_t  *sn;

    key.data = path;
    key.len = len;

    sn = ngx_str_rbtree_lookup(&s->locks, &key, ngx_crc32_short(path, len));

    return (ngx_zk_lock_t *) sn;
}


void
ngx_zk_lock_path_gc(ngx_zk_lock_t *lock)
{
    if (lock->refs) {
        return;
    }

    if (lock->transient && lock->made) {
        ngx_zk_lock_path_delete(lock);
    }

    if (lock->hearing.timer_set) {
        ngx_del_timer(&lock->hearing);
    }

    ngx_rbtree_delete(&lock->session->locks, &lock->sn.node);
    ngx_queue_remove(&lock->queue);

    ngx_zk_lock_listing_free(&lock->listing);

    if (lock->watched) {
        ngx_free(lock->watched);
    }

    ngx_free(lock);
}


/*
 * A variable may name any node, a persistent one with data, a lease count,
 * a holder's ephemeral node: only the module's own containers are deleted,
 * those whose data is the module's mark (the server hides which nodes are
 * containers), from the lock up to its first variable segment, each parent
 * once its child is gone, while empty, at the version that was read.  And
 * only once a node of the worker was created there: a failed create
 * proves nothing.  Containers without the mark (Curator's, or made by an
 * older version) are left to the server to reap.
 */

static void
ngx_zk_lock_path_delete(ngx_zk_lock_t *lock)
{
    ngx_zk_lock_session_t    *s;
    ngx_zk_lock_idle_path_t  *idle;

    s = lock->session;

    if (s->exiting || !s->connected) {
        return;
    }

    idle = ngx_alloc(sizeof(ngx_zk_lock_idle_path_t) + lock->sn.str.len,
                     &s->log);
    if (idle == NULL) {
        return;
    }

    idle->session = s;
    idle->levels = lock->transient;
    ngx_memcpy(idle->path, lock->path, lock->sn.str.len + 1);

    ngx_zk_lock_path_idle_stat(idle);
}


static void
ngx_zk_lock_path_idle_stat(ngx_zk_lock_idle_path_t *idle)
{
    int                          rc;
    ngx_zk_lock_session_t       *s;

    s = idle->session;

    if (idle->levels == 0 || idle->path[1] == '\0' || s->exiting) {
        ngx_free(idle);
        return;
    }

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, &s->log, 0,
                   "zk lock: idle \"%s\"", idle->path);

    ngx_zk_lock_session_batch(s);

    rc = zoo_aget(s->zh, (char *) idle->path, 0,
                  ngx_zk_lock_path_idle_read, idle);

    if (rc != ZOK) {
        ngx_log_error(NGX_LOG_ERR, &s->log, 0,
                      "zoo_aget(\"%s\") failed (%d: %s)",
                      idle->path, rc, zerror(rc));
        ngx_free(idle);
    }
}


static void
ngx_zk_lock_path_idle_read(int rc, const char *value, int value_len,
    const struct Stat *stat, const void *data)
{
    ngx_zk_lock_idle_path_t  *idle = (ngx_zk_lock_idle_path_t *) data;

    ngx_zk_lock_session_t  *s;

    s = idle->session;

    if (rc != ZOK || stat == NULL || s->exiting
        || stat->ephemeralOwner != 0 || stat->numChildren != 0
        || value_len != (int) sizeof(NGX_ZK_LOCK_MARK) - 1
        || ngx_strncmp(value, NGX_ZK_LOCK_MARK, value_len) != 0)
    {
        /* gone, in use, or not ours: nor are its parents ours to delete */

        ngx_log_debug3(NGX_LOG_DEBUG_HTTP, &s->log, 0,
                       "zk lock: idle \"%s\" kept rc:%d children:%d",
                       idle->path, rc, stat ? stat->numChildren : -1);
        ngx_free(idle);
        return;
    }

    rc = zoo_adelete(s->zh, (char *) idle->path, stat->version,
                     ngx_zk_lock_path_deleted, idle);

    if (rc != ZOK) {
        ngx_log_error(NGX_LOG_ERR, &s->log, 0,
                      "zoo_adelete(\"%s\") failed (%d: %s)",
                      idle->path, rc, zerror(rc));
        ngx_free(idle);
    }
}


static void
ngx_zk_lock_path_deleted(int rc, const void *data)
{
    ngx_zk_lock_idle_path_t  *idle = (ngx_zk_lock_idle_path_t *) data;

    u_char                      *p;
    ngx_zk_lock_session_t       *s;

    s = idle->session;

    if (rc == ZOK && !s->exiting) {

        /* the parent, which the variable segment may also have made */

        for (p = idle->path + ngx_strlen(idle->path); p > idle->path; p--) {
            if (*p == '/') {
                break;
            }
        }

        *p = '\0';
        idle->levels--;

        ngx_zk_lock_path_idle_stat(idle);
        return;
    }

    /*
     * in use again (ZNOTEMPTY), changed (ZBADVERSION), gone already, or
     * the session with it: all as well
     */

    if (rc != ZOK && rc != ZNOTEMPTY && rc != ZBADVERSION && rc != ZNONODE
        && rc != ZNOAUTH && !ngx_zk_lock_session_error(rc)
        && !s->exiting)
    {
        ngx_log_error(NGX_LOG_ERR, &s->log, 0,
                      "zookeeper delete of the idle lock path \"%s\" failed "
                      "(%d: %s)", idle->path, rc, zerror(rc));
    }

    ngx_free(idle);
}


void
ngx_zk_lock_path_ask(ngx_zk_lock_t *lock)
{
    if (lock->sent == lock->answered) {
        (void) ngx_zk_lock_path_list(lock);

    } else {
        lock->wanted = 1;
    }
}


/*
 * A listing that is on its way does: ZooKeeper sends a watch event or the
 * reply to a delete before the reply to any read that reflects it, so the
 * change that brings us here is in that listing.
 */

void
ngx_zk_lock_path_relist(ngx_zk_lock_t *lock)
{
    if (!lock->session->connected) {
        /* done when the session connects again */
        return;
    }

    if (lock->sent == lock->answered) {
        (void) ngx_zk_lock_path_list(lock);
    }
}


/*
 * The children changed.  A worker that holds kept leases there (keep.c)
 * lists again at most once a pace (lock->pace, which keep.c sets from
 * NGX_ZK_LOCK_PATH_HEAR up as the participants grow): the watch fires
 * once, and the listing that sets it again waits for the end of the
 * pause, so that a queue that moves fast costs each holder a few listings
 * a second, not one per move.  Nor does it list at once at the first
 * change after a pause: a load that starts or stops is a burst of
 * changes, which every holder hears the first of at the same moment; a
 * quarter to half a pace later, drawn, one listing shows them all.  A
 * lease count's watch (semaphore v2, as Curator's) is not delayed, nor is
 * the listing of a pool that only waits near the front (eager, see
 * keep_hear()) or of the path's first waiter.
 */

void
ngx_zk_lock_path_heard(ngx_zk_lock_t *lock)
{
    ngx_msec_int_t  wait, least;

    if (lock->count || !lock->hear || lock->eager || lock->first) {
        ngx_zk_lock_path_relist(lock);
        return;
    }

    least = lock->pace / 4 + ngx_random() % (lock->pace / 4 + 1);
    wait = (ngx_msec_int_t) (lock->heard + lock->pace - ngx_current_msec);
    wait = ngx_max(wait, least);

    if (!lock->hearing.timer_set) {
        lock->hearing.handler = ngx_zk_lock_path_hearing_handler;
        lock->hearing.data = lock;
        lock->hearing.log = &lock->session->log;
        lock->hearing.cancelable = 1;
        ngx_add_timer(&lock->hearing, (ngx_msec_t) wait);
    }
}


static void
ngx_zk_lock_path_hearing_handler(ngx_event_t *ev)
{
    ngx_zk_lock_t  *lock;

    lock = ev->data;

    if (lock->hear) {
        ngx_zk_lock_path_relist(lock);
    }
}


ngx_int_t
ngx_zk_lock_path_list(ngx_zk_lock_t *lock)
{
    int                          rc;
    ngx_zk_lock_session_t       *s;

    s = lock->session;

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, &s->log, 0,
                   "zk lock: list \"%s\"", lock->path);

    /*
     * Semaphore v2 leases are counted, and a change of the count is
     * watched, as Curator does: every listing of such a lock sets the watch.
     * So does every listing of a path where this worker holds kept
     * leases, to hear at once of anybody else who waits (see
     * keep_listed(), keep_hear()).
     */

    ngx_zk_lock_session_batch(s);

    if (lock->hear) {
        lock->heard = ngx_current_msec;
    }

    if (lock->count || lock->hear) {
        rc = zoo_awget_children(s->zh, (char *) lock->path,
                                ngx_zk_lock_session_watcher, s,
                                ngx_zk_lock_path_listed, lock);
    } else {
        rc = zoo_aget_children(s->zh, (char *) lock->path, 0,
                               ngx_zk_lock_path_listed, lock);
    }

    if (rc != ZOK) {
        ngx_log_error(NGX_LOG_ERR, &s->log, 0,
                      "zoo_aget_children(\"%s\") failed (%d: %s)",
                      lock->path, rc, zerror(rc));
        return NGX_ERROR;
    }

    lock->sent++;
    lock->refs++;
    lock->wanted = 0;

    return NGX_OK;
}


static void
ngx_zk_lock_path_listed(int rc,
    const struct String_vector *strings, const void *data)
{
    ngx_zk_lock_t  *lock = (ngx_zk_lock_t *) data;

    static struct String_vector  none;

    /* a session's replies come in the order of its requests */

    lock->answered++;

    if (lock->session->exiting) {
        return;
    }

    ngx_log_debug4(NGX_LOG_DEBUG_HTTP, &lock->session->log, 0,
                   "zk lock: listed \"%s\" #%ui rc:%d n:%d",
                   lock->path, lock->answered, rc,
                   (rc == ZOK && strings) ? strings->count : 0);

    if (rc == ZOK) {
        lock->owner->listed(lock, strings ? strings : &none,
                            lock->answered);

    } else if (rc == ZNONODE) {
        lock->owner->listed(lock, &none, lock->answered);

    } else if (rc != ZCONNECTIONLOSS && rc != ZOPERATIONTIMEOUT
               && rc != ZSESSIONEXPIRED && rc != ZCLOSING)
    {
        ngx_log_error(NGX_LOG_ERR, &lock->session->log, 0,
                      "zookeeper list of \"%s\" failed (%d: %s)%s",
                      lock->path, rc, zerror(rc),
                      ngx_zk_lock_session_advice(rc));
    }

    if (lock->wanted && lock->sent == lock->answered
        && zoo_state(lock->session->zh) == ZOO_CONNECTED_STATE)
    {
        (void) ngx_zk_lock_path_list(lock);
    }

    /* the reference of the listing kept the lock through the evaluation */

    lock->refs--;
    ngx_zk_lock_path_gc(lock);
}


/*
 * Like Curator's creatingParentContainersIfNeeded(): container nodes,
 * which the server removes once they are empty.  Not the chroot: with its
 * ACL it is the fleet's, and is kept even while no lock is used.
 */

void
ngx_zk_lock_path_create_parents(ngx_zk_lock_t *lock)
{
    u_char  *p;
    u_char   buf[NGX_ZK_LOCK_BUF_LEN];

    /* whether one is refused, for the create sent after them */
    lock->denied = 0;

    /* with a chroot, "/" is the chroot itself, which may be missing too */

    if (lock->session->chroot.len) {
        ngx_zk_lock_path_create_parent(lock, (u_char *) "/",
                                       ZOO_PERSISTENT);
    }

    (void) ngx_cpymem(buf, lock->path, lock->sn.str.len + 1);

    for (p = buf; /* void */ ; *p = '/') {
        p = (u_char *) ngx_strchr(p + 1, '/');

        if (p == NULL) {
            ngx_zk_lock_path_create_parent(lock, buf, ZOO_CONTAINER);
            break;
        }

        *p = '\0';
        ngx_zk_lock_path_create_parent(lock, buf, ZOO_CONTAINER);
    }
}


static void
ngx_zk_lock_path_create_parent(ngx_zk_lock_t *lock, u_char *path,
    int mode)
{
    int                          rc;
    ngx_zk_lock_session_t       *s;

    s = lock->session;

    ngx_zk_lock_session_batch(s);

    if (mode == ZOO_CONTAINER) {
        rc = zoo_acreate(s->zh, (char *) path, NGX_ZK_LOCK_MARK,
                         sizeof(NGX_ZK_LOCK_MARK) - 1, s->acl, mode,
                         ngx_zk_lock_path_parent_done, lock);

    } else {
        /* the chroot */
        rc = zoo_acreate(s->zh, (char *) path, NULL, -1, s->acl, mode,
                         ngx_zk_lock_path_chroot_done, lock);
    }

    if (rc != ZOK) {
        ngx_log_error(NGX_LOG_ERR, &s->log, 0,
                      "zoo_acreate(\"%s\") failed (%d: %s)",
                      path, rc, zerror(rc));
        return;
    }

    lock->refs++;
}


static void
ngx_zk_lock_path_parent_done(int rc, const char *value, const void *data)
{
    ngx_zk_lock_t  *lock = (ngx_zk_lock_t *) data;

    lock->refs--;

    if (rc == ZNOAUTH) {
        lock->denied = 1;
    }

    /* a chroot that cannot be made has said so, see chroot_done() */

    if (rc != ZOK && rc != ZNODEEXISTS && !lock->session->exiting
        && !(rc == ZNONODE && lock->session->chroot.len))
    {
        ngx_log_error(NGX_LOG_ERR, &lock->session->log, 0,
                      "zookeeper create of a parent of \"%s\" failed "
                      "(%d: %s)%s", lock->path, rc, zerror(rc),
                      ngx_zk_lock_session_advice(rc));
    }

    ngx_zk_lock_path_gc(lock);
}


/*
 * The chroot of zk_hosts is made as a lock's first parent, but not its
 * own parent: one that is missing is the operator's to create, and the
 * log says which, at most every NGX_ZK_LOCK_CHROOT_LOG ms
 */

static void
ngx_zk_lock_path_chroot_done(int rc, const char *value,
    const void *data)
{
    ngx_zk_lock_t  *lock = (ngx_zk_lock_t *) data;

    ngx_str_t                    parent;
    ngx_zk_lock_session_t       *s;

    static ngx_msec_t            logged;

    s = lock->session;

    if (rc == ZNONODE && !s->exiting
        && (logged == 0
            || ngx_current_msec - logged >= NGX_ZK_LOCK_CHROOT_LOG))
    {
        logged = ngx_current_msec;

        parent = s->chroot;

        while (parent.len > 1 && parent.data[parent.len - 1] != '/') {
            parent.len--;
        }

        if (parent.len > 1) {
            parent.len--;
        }

        ngx_log_error(NGX_LOG_ERR, &s->log, 0,
                      "the chroot \"%V\" of zk_hosts cannot be created: its "
                      "parent \"%V\" is missing; no lock can be had until it "
                      "is created", &s->chroot, &parent);
    }

    if (rc == ZNONODE) {
        rc = ZNODEEXISTS;       /* said: not again as a parent's failure */
    }

    ngx_zk_lock_path_parent_done(rc, value, data);
}


/*
 * A path built from a request: its first variable segment may name a node
 * that is no lock's, a persistent one with data (a lease count, some
 * application's configuration) or a holder's ephemeral node.  Before the
 * worker's first node goes there, that node is read: missing (it will be
 * made), empty or with the module's mark, it may be a lock's; otherwise
 * the path is FOREIGN and its participants fail.  NGX_ZK_LOCK_VET_OK
 * for a literal path; VET_SENT while the read is on its way, and the
 * owner is told once it is answered.
 */

ngx_zk_lock_vet_e
ngx_zk_lock_path_vet(ngx_zk_lock_t *lock)
{
    int                          rc;
    u_char                      *p;
    ngx_uint_t                   i;
    ngx_zk_lock_session_t       *s;
    u_char                       buf[NGX_ZK_LOCK_BUF_LEN];

    if (lock->transient == 0) {
        return NGX_ZK_LOCK_VET_OK;
    }

    if (lock->vet != NGX_ZK_LOCK_VET_NONE) {
        return lock->vet;
    }

    s = lock->session;
    p = ngx_cpymem(buf, lock->path, lock->sn.str.len);
    *p = '\0';

    /* up to the first variable segment */

    for (i = 1; i < lock->transient; i++) {
        while (p > buf && *--p != '/') { /* void */ }
        *p = '\0';
    }

    if (p == buf) {
        return NGX_ZK_LOCK_VET_OK;
    }

    ngx_zk_lock_session_batch(s);

    rc = zoo_aget(s->zh, (char *) buf, 0, ngx_zk_lock_path_vet_done,
                  lock);

    if (rc != ZOK) {
        ngx_log_error(NGX_LOG_ERR, &s->log, 0,
                      "zoo_aget(\"%s\") failed (%d: %s)", buf, rc, zerror(rc));
        return NGX_ZK_LOCK_VET_NONE;
    }

    lock->refs++;
    lock->vet = NGX_ZK_LOCK_VET_SENT;

    return NGX_ZK_LOCK_VET_SENT;
}


static void
ngx_zk_lock_path_vet_done(int rc, const char *value, int value_len,
    const struct Stat *stat, const void *data)
{
    ngx_zk_lock_t  *lock = (ngx_zk_lock_t *) data;

    if (lock->session->exiting) {
        return;
    }

    if (rc == ZNONODE
        || (rc == ZOK && stat && stat->ephemeralOwner == 0
            && (value_len <= 0
                || (value_len == (int) sizeof(NGX_ZK_LOCK_MARK) - 1
                    && ngx_strncmp(value, NGX_ZK_LOCK_MARK, value_len)
                       == 0))))
    {
        lock->vet = NGX_ZK_LOCK_VET_OK;

    } else if (rc == ZOK) {
        lock->vet = NGX_ZK_LOCK_VET_FOREIGN;

    } else if (ngx_zk_lock_session_error(rc)) {
        /* read again by the next create, once reconnected */
        lock->vet = NGX_ZK_LOCK_VET_NONE;

    } else {
        /* not to be read (its ACL): the create will tell */
        lock->vet = NGX_ZK_LOCK_VET_OK;
    }

    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, &lock->session->log, 0,
                   "zk lock: \"%s\" vetted rc:%d %d", lock->path, rc,
                   lock->vet);

    /* the read's reference keeps the lock while its nodes are told */

    lock->owner->vetted(lock);
    lock->refs--;

    ngx_zk_lock_path_gc(lock);
}


/*
 * In a deep queue, a listing after each handoff would cost more than the
 * handoff itself, for ZooKeeper and for every waiter's worker, as in
 * Curator: instead each worker watches the "span" nodes at the head of its
 * last listing, those that hold the lock (and for readers, the first
 * writer), and the next ones as these go.  Every deletion ahead of its
 * waiters is then heard of, in the order of the queue, at the cost of one
 * event and one watch per worker and handoff; a node that left the middle
 * of the queue is found gone when its turn to be watched comes.
 */

void
ngx_zk_lock_path_window(ngx_zk_lock_t *lock)
{
    u_char                      *name;
    ngx_uint_t                   i, k;
    ngx_zk_lock_entry_t         *e;
    ngx_zk_lock_listing_t       *l;

    l = &lock->listing;
    k = 0;

    for (i = l->head; i < l->n && k < lock->span; i++) {
        e = &l->entries[i];

        if (!e->gone) {
            name = ngx_zk_lock_listing_name(l, e);
            ngx_zk_lock_path_watch(lock, name);
            k++;
        }
    }

    if (k < lock->span) {
        /*
         * Few nodes of the listing are left: the requests queued since
         * (and other workers' nodes between them) are listed now, once per
         * listing's worth of handoffs
         */
        ngx_zk_lock_path_relist(lock);
    }

    if (!lock->reads) {
        return;
    }

    for (i = l->head; i < l->n; i++) {
        e = &l->entries[i];

        if (!e->gone && e->write) {
            name = ngx_zk_lock_listing_name(l, e);
            ngx_zk_lock_path_watch(lock, name);
            return;
        }
    }
}


void
ngx_zk_lock_path_watch(ngx_zk_lock_t *lock, u_char *name)
{
    int                          rc;
    uint32_t                     seq;
    ngx_uint_t                   i;
    ngx_zk_lock_watch_t         *w;
    ngx_zk_lock_session_t       *s;
    u_char                       buf[NGX_ZK_LOCK_BUF_LEN];

    s = lock->session;

    if (ngx_zk_lock_session_ours(s, name)) {
        /* this worker deletes it: the reply to its delete tells */
        return;
    }

    seq = ngx_zk_lock_listing_seq(name, ngx_strlen(name));

    i = ngx_zk_lock_path_watched(lock, seq);

    if (i < lock->nwatched && lock->watched[i] == seq) {
        /* a watch is set and has not fired */
        return;
    }

    if (ngx_zk_lock_path_child(buf, lock, name) == NULL) {
        return;
    }

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, &s->log, 0,
                   "zk lock: watch \"%s\"", buf);

    /*
     * getData, as Curator does, rather than exists: no watch is left on a
     * node that is already gone.  Watches on the same node are one watch.
     */

    w = ngx_alloc(sizeof(ngx_zk_lock_watch_t), &s->log);
    if (w == NULL) {
        return;
    }

    w->lock = lock;
    w->seq = seq;

    ngx_zk_lock_session_batch(s);

    rc = zoo_awget(s->zh, (char *) buf, ngx_zk_lock_session_watcher, s,
                   ngx_zk_lock_path_watch_done, w);

    if (rc != ZOK) {
        ngx_log_error(NGX_LOG_ERR, &s->log, 0,
                      "zoo_awget(\"%s\") failed (%d: %s)",
                      buf, rc, zerror(rc));
        ngx_free(w);
        return;
    }

    /* names without a sequence number are watched every time */

    if (seq < NGX_ZK_LOCK_SEQ_WRAPPED) {
        ngx_zk_lock_path_remember(lock, i, seq);
    }

    lock->refs++;
}


void
ngx_zk_lock_path_unwatch(ngx_zk_lock_t *lock, uint32_t seq)
{
    ngx_uint_t  i;

    i = ngx_zk_lock_path_watched(lock, seq);

    if (i < lock->nwatched && lock->watched[i] == seq) {
        lock->nwatched--;
        ngx_memmove(&lock->watched[i], &lock->watched[i + 1],
                    (lock->nwatched - i) * sizeof(uint32_t));
    }
}


/* where a sequence number is, or would go, among the watched ones */

static ngx_uint_t
ngx_zk_lock_path_watched(ngx_zk_lock_t *lock, uint32_t seq)
{
    ngx_uint_t  lo, hi, mid;

    lo = 0;
    hi = lock->nwatched;

    while (lo < hi) {
        mid = lo + (hi - lo) / 2;

        if (lock->watched[mid] < seq) {
            lo = mid + 1;

        } else {
            hi = mid;
        }
    }

    return lo;
}


/* without the room, the node is watched again at the next listing */

static void
ngx_zk_lock_path_remember(ngx_zk_lock_t *lock, ngx_uint_t i, uint32_t seq)
{
    ngx_uint_t   room;
    uint32_t    *watched;

    if (lock->nwatched == lock->watch_room) {
        room = lock->watch_room ? 2 * lock->watch_room : NGX_ZK_LOCK_WATCHED;

        watched = ngx_alloc(room * sizeof(uint32_t), &lock->session->log);
        if (watched == NULL) {
            return;
        }

        if (lock->watched) {
            ngx_memcpy(watched, lock->watched,
                       lock->nwatched * sizeof(uint32_t));
            ngx_free(lock->watched);
        }

        lock->watched = watched;
        lock->watch_room = room;
    }

    ngx_memmove(&lock->watched[i + 1], &lock->watched[i],
                (lock->nwatched - i) * sizeof(uint32_t));
    lock->watched[i] = seq;
    lock->nwatched++;
}


/* a watch asked for on a node that was already gone never fires */

void
ngx_zk_lock_path_unwatch_gone(ngx_zk_lock_t *lock,
    ngx_zk_lock_child_t *children, ngx_uint_t n)
{
    ngx_uint_t  i, lo, kept;

    for (i = 0, kept = 0; i < lock->nwatched; i++) {
        lo = ngx_zk_lock_listing_find(children, n, lock->watched[i]);

        if (lo < n && children[lo].seq == lock->watched[i]) {
            lock->watched[kept++] = lock->watched[i];
        }
    }

    lock->nwatched = kept;
}


static void
ngx_zk_lock_path_watch_done(int rc, const char *value, int value_len,
    const struct Stat *stat, const void *data)
{
    ngx_zk_lock_watch_t  *w = (ngx_zk_lock_watch_t *) data;

    uint32_t             seq;
    ngx_zk_lock_t       *lock;

    lock = w->lock;
    seq = w->seq;
    ngx_free(w);

    lock->refs--;

    if (lock->session->exiting) {
        return;
    }

    if (rc == ZNONODE) {

        /* gone between the listing and the watch: no watch is left */

        ngx_zk_lock_path_unwatch(lock, seq);

        if (lock->deep) {
            lock->owner->gone(lock, seq);

        } else {
            ngx_zk_lock_path_relist(lock);
        }
    }

    ngx_zk_lock_path_gc(lock);
}


u_char *
ngx_zk_lock_path_child(u_char *buf, ngx_zk_lock_t *lock,
    u_char *name)
{
    u_char  *p;

    if (lock->sn.str.len + ngx_strlen(name) + 2 > NGX_ZK_LOCK_BUF_LEN) {
        return NULL;
    }

    p = ngx_sprintf(buf, "%s/%s", lock->path, name);
    *p = '\0';

    return buf;
}


/*
 * A path as a configuration message quotes it: one longer than what
 * nginx's message can hold (NGX_MAX_CONF_ERRSTR) would push out what
 * follows it, the reason and the file and line; so its middle is left out
 */

ngx_str_t *
ngx_zk_lock_path_short(ngx_pool_t *pool, ngx_str_t *path)
{
    u_char     *p;
    ngx_str_t  *s;

    if (path->len <= NGX_ZK_LOCK_SHORT_HEAD + NGX_ZK_LOCK_SHORT_TAIL + 3) {
        return path;
    }

    s = ngx_palloc(pool, sizeof(ngx_str_t));
    if (s == NULL) {
        return path;
    }

    s->len = NGX_ZK_LOCK_SHORT_HEAD + 3 + NGX_ZK_LOCK_SHORT_TAIL;
    s->data = ngx_pnalloc(pool, s->len);
    if (s->data == NULL) {
        return path;
    }

    p = ngx_cpymem(s->data, path->data, NGX_ZK_LOCK_SHORT_HEAD);
    p = ngx_cpymem(p, "...", 3);
    ngx_memcpy(p, path->data + path->len - NGX_ZK_LOCK_SHORT_TAIL,
               NGX_ZK_LOCK_SHORT_TAIL);

    return s;
}


/*
 * The segments of "/a/b" after its first "/", each by the rule below:
 * NULL, or why one is not; *n: how many were checked
 */

const char *
ngx_zk_lock_path_check(ngx_str_t *path, ngx_uint_t top, ngx_uint_t *n)
{
    u_char      *p, *last;
    ngx_str_t    seg;
    const char  *err;

    p = path->data;
    last = p + path->len;
    err = NULL;

    for (*n = 0; err == NULL && p < last; (*n)++) {
        seg.data = ++p;
        p = ngx_strlchr(p, last, '/');
        if (p == NULL) {
            p = last;
        }

        seg.len = p - seg.data;

        err = ngx_zk_lock_path_check_segment(&seg, top && *n == 0);
    }

    return err;
}


/*
 * The rule for a path segment, from configuration or from variables: not
 * empty, not "." or "..", no "/", no control characters, valid UTF-8
 * without the code points ZooKeeper refuses; "zookeeper" is reserved at
 * the top.
 */

const char *
ngx_zk_lock_path_check_segment(ngx_str_t *seg, ngx_uint_t top)
{
    u_char    *p, *last;
    uint32_t   u;

    if (seg->len == 0) {
        return "empty";
    }

    if ((seg->len == 1 && seg->data[0] == '.')
        || (seg->len == 2 && seg->data[0] == '.' && seg->data[1] == '.'))
    {
        return "\".\" or \"..\"";
    }

    if (top && seg->len == 9 && ngx_strncmp(seg->data, "zookeeper", 9) == 0) {
        return "reserved by ZooKeeper";
    }

    p = seg->data;
    last = p + seg->len;

    while (p < last) {

        if (*p < 0x80) {
            if (*p < 0x20 || *p == 0x7f) {
                return "a control character";
            }

            if (*p == '/') {
                return "a \"/\"";
            }

            p++;
            continue;
        }

        u = ngx_zk_lock_path_utf8(&p, last);

        if (u == NGX_ZK_LOCK_BAD_UTF8) {
            return "not valid UTF-8";
        }

        /*
         * ZooKeeper checks paths as Java strings: what is beyond U+FFFF
         * becomes a surrogate pair, refused like the rest of D800-F8FF
         */

        if (u <= 0x9f
            || (u >= 0xd800 && u <= 0xf8ff)
            || (u >= 0xfff0))
        {
            return "a character ZooKeeper refuses";
        }
    }

    return NULL;
}


/*
 * Strict UTF-8 (no overlong forms, no truncation, continuation bytes
 * checked): ngx_utf8_decode() is lenient, and ZooKeeper would turn what it
 * lets through into U+FFFD, which it refuses.
 */

static uint32_t
ngx_zk_lock_path_utf8(u_char **pp, u_char *last)
{
    u_char    *p;
    uint32_t   u, min;
    ngx_uint_t n;

    p = *pp;
    u = *p++;

    if (u >= 0xc2 && u <= 0xdf) {
        n = 1;
        u &= 0x1f;
        min = 0x80;

    } else if (u >= 0xe0 && u <= 0xef) {
        n = 2;
        u &= 0x0f;
        min = 0x800;

    } else if (u >= 0xf0 && u <= 0xf4) {
        n = 3;
        u &= 0x07;
        min = 0x10000;

    } else {
        return NGX_ZK_LOCK_BAD_UTF8;
    }

    if ((size_t) (last - p) < n) {
        return NGX_ZK_LOCK_BAD_UTF8;
    }

    while (n--) {
        if ((*p & 0xc0) != 0x80) {
            return NGX_ZK_LOCK_BAD_UTF8;
        }

        u = (u << 6) | (*p++ & 0x3f);
    }

    if (u < min || u > 0x10ffff) {
        return NGX_ZK_LOCK_BAD_UTF8;
    }

    *pp = p;

    return u;
}
