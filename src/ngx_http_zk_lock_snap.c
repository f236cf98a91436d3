
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_zk_lock_listing.h"
#include "ngx_zk_lock_counter.h"
#include "ngx_zk_lock_recipe.h"
#include "ngx_zk_lock_params.h"
#include "ngx_zk_lock_share.h"
#include "ngx_http_zk_lock_snap.h"


/*
 * The fleet view's reads: each lock's children and their data, and with
 * fair= its board's, asked of ZooKeeper at once through the worker's
 * session, into a snapshot that owns its memory.  The answers point into
 * the list of locks, made whole before the first is asked; the last one
 * in calls the snapshot's handler.  An answer that comes while the worker
 * exits touches nothing but the count of those to come.
 */


/* the shadow path of a lock in zk_lock_dry_run, see handler_dry() */
#define NGX_HTTP_ZK_LOCK_SNAP_DRY       ".dry-run"


static ngx_int_t ngx_http_zk_lock_snap_literals(ngx_http_zk_lock_snap_t *snap);
static ngx_int_t ngx_http_zk_lock_snap_live(ngx_http_zk_lock_snap_t *snap);
static void ngx_http_zk_lock_snap_split(ngx_zk_lock_t *zl,
    ngx_zk_lock_node_t *node, ngx_str_t *name, const char **suffix);
static const char *ngx_http_zk_lock_snap_type(ngx_http_zk_lock_snap_t *snap,
    ngx_str_t *name, ngx_uint_t live, const char *guess);
static ngx_uint_t ngx_http_zk_lock_snap_match(ngx_str_t *pattern,
    ngx_str_t *path);
static ngx_int_t ngx_http_zk_lock_snap_shadows(
    ngx_http_zk_lock_snap_t *snap);
static ngx_int_t ngx_http_zk_lock_snap_add(ngx_http_zk_lock_snap_t *snap,
    ngx_str_t *path, const char *suffix, const char *type, ngx_uint_t leases,
    ngx_uint_t rw, ngx_uint_t live);
static ngx_uint_t ngx_http_zk_lock_snap_known(
    ngx_http_zk_lock_snap_t *snap, u_char *path);
static void ngx_http_zk_lock_snap_listed(int rc,
    const struct String_vector *strings, const void *data);
static ngx_int_t ngx_http_zk_lock_snap_board(ngx_zk_lock_session_t *s,
    ngx_http_zk_lock_snap_lock_t *lock);
static void ngx_http_zk_lock_snap_board_listed(int rc,
    const struct String_vector *strings, const void *data);
static void ngx_http_zk_lock_snap_board_data(int rc, const char *value,
    int value_len, const struct Stat *stat, const void *data);
static void ngx_http_zk_lock_snap_data(int rc, const char *value,
    int value_len, const struct Stat *stat, const void *data);
static void ngx_http_zk_lock_snap_granted(ngx_http_zk_lock_snap_lock_t *lock,
    ngx_zk_lock_session_t *s);
static void ngx_http_zk_lock_snap_aged(ngx_http_zk_lock_snap_child_t *child,
    ngx_http_zk_lock_snap_lock_t *was, int64_t then);
static ngx_uint_t ngx_http_zk_lock_snap_holds(
    ngx_http_zk_lock_snap_lock_t *lock, ngx_uint_t i);


/*
 * A new snapshot: every literal path configured, and the paths from
 * variables that requests of this worker use now; first the list, so
 * that the answers can point into it, then the listings.  "handler" is
 * called once the last answer is in, unless none is to come
 * (snap->pending is 0 then): the caller's to see.
 */

ngx_http_zk_lock_snap_t *
ngx_http_zk_lock_snap_read(ngx_zk_lock_session_t *s,
    ngx_http_zk_lock_main_conf_t *lmcf, ngx_http_zk_lock_snap_pt handler,
    void *data)
{
    int                            rc;
    ngx_uint_t                     i;
    ngx_pool_t                    *pool;
    ngx_http_zk_lock_snap_t       *snap;
    ngx_http_zk_lock_snap_lock_t  *lock;

    pool = ngx_create_pool(4096, &s->log);
    if (pool == NULL) {
        return NULL;
    }

    snap = ngx_pcalloc(pool, sizeof(ngx_http_zk_lock_snap_t));
    if (snap == NULL) {
        goto failed;
    }

    snap->pool = pool;
    snap->time = ngx_time();
    snap->session = s;
    snap->lmcf = lmcf;
    snap->handler = handler;
    snap->data = data;

    if (ngx_array_init(&snap->locks, pool, 8,
                       sizeof(ngx_http_zk_lock_snap_lock_t))
        != NGX_OK)
    {
        goto failed;
    }

    if (ngx_http_zk_lock_snap_literals(snap) != NGX_OK
        || ngx_http_zk_lock_snap_live(snap) != NGX_OK
        || ngx_http_zk_lock_snap_shadows(snap) != NGX_OK)
    {
        goto failed;
    }

    /* the list is complete: the answers may now point into it */

    ngx_zk_lock_session_batch(s);

    lock = snap->locks.elts;

    for (i = 0; i < snap->locks.nelts; i++) {
        lock[i].snap = snap;

        rc = zoo_aget_children(s->zh, (char *) lock[i].path.data, 0,
                               ngx_http_zk_lock_snap_listed, &lock[i]);

        if (rc != ZOK) {
            ngx_log_error(NGX_LOG_ERR, &s->log, 0,
                          "zoo_aget_children(\"%V\") failed (%d: %s)",
                          &lock[i].path, rc, zerror(rc));
            lock[i].rc = rc;
            snap->failed = 1;
            continue;
        }

        snap->pending++;

        if (lock[i].fair && ngx_http_zk_lock_snap_board(s, &lock[i])
                            != NGX_OK)
        {
            snap->failed = 1;
        }
    }

    return snap;

failed:

    ngx_destroy_pool(pool);
    return NULL;
}


/* the locks of literal paths, as configured */

static ngx_int_t
ngx_http_zk_lock_snap_literals(ngx_http_zk_lock_snap_t *snap)
{
    ngx_int_t                      rc;
    ngx_uint_t                     i, leases;
    const char                    *type;
    ngx_http_zk_lock_literal_t    *lit;
    ngx_zk_lock_counter_t         *counter;
    ngx_http_zk_lock_snap_lock_t  *lock;

    lit = snap->lmcf->literals ? snap->lmcf->literals->elts : NULL;

    for (i = 0; lit && i < snap->lmcf->literals->nelts; i++) {

        /* the count as the fleet shares it, the default while unknown */

        leases = lit[i].leases;

        if (lit[i].counter.len) {
            counter = ngx_zk_lock_counter(snap->session, &lit[i].counter);

            if (counter && counter->value) {
                leases = counter->value;
            }
        }

        if (lit[i].rw) {
            rc = ngx_http_zk_lock_snap_add(snap, &lit[i].name, NULL,
                                           "rwlock", 0, 1, 0);

        } else if (lit[i].v2) {
            rc = ngx_http_zk_lock_snap_add(snap, &lit[i].name, "/leases",
                                           "semaphore v2", leases, 0, 0);
            if (rc == NGX_OK) {
                /* its queue to create a lease: Curator's internal mutex */
                rc = ngx_http_zk_lock_snap_add(snap, &lit[i].name, "/locks",
                                               "semaphore v2 mutex", 1, 0, 0);
            }

        } else {
            /* the directive's name: a semaphore may have one lease */

            type = (leases == 1 && lit[i].counter.len == 0)
                   ? "mutex" : "semaphore";
            type = ngx_http_zk_lock_snap_type(snap, &lit[i].name, 0, type);

            rc = ngx_http_zk_lock_snap_add(snap, &lit[i].name, NULL, type,
                                           leases, 0, 0);

            if (rc == NGX_OK && lit[i].fair) {
                lock = snap->locks.elts;
                lock[snap->locks.nelts - 1].fair = 1;
            }
        }

        if (rc != NGX_OK) {
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


/*
 * The paths built from variables that live in this worker; a shadow path
 * of a dry run as its lock's, whose listing shows the shadow's nodes
 */

static ngx_int_t
ngx_http_zk_lock_snap_live(ngx_http_zk_lock_snap_t *snap)
{
    u_char                   *p;
    ngx_str_t                 name, path;
    ngx_uint_t                leases, rw;
    ngx_queue_t              *q;
    const char               *type, *suffix;
    ngx_zk_lock_t            *zl;
    ngx_zk_lock_node_t       *node;

    for (q = ngx_queue_head(&snap->session->all);
         q != ngx_queue_sentinel(&snap->session->all);
         q = ngx_queue_next(q))
    {
        zl = ngx_queue_data(q, ngx_zk_lock_t, queue);

        if (ngx_queue_empty(&zl->nodes)) {
            continue;
        }

        /* the recipe is the one of its nodes: one per path */

        node = ngx_queue_data(ngx_queue_head(&zl->nodes),
                              ngx_zk_lock_node_t, queue);

        ngx_http_zk_lock_snap_split(zl, node, &name, &suffix);

        /* the lock's path: its own, or the one its shadow stands for */

        path.len = name.len + (suffix ? ngx_strlen(suffix) : 0);
        path.data = ngx_pnalloc(snap->pool, path.len + 1);
        if (path.data == NULL) {
            return NGX_ERROR;
        }

        p = ngx_sprintf(path.data, "%V%s", &name, suffix ? suffix : "");
        *p = '\0';

        if (ngx_http_zk_lock_snap_known(snap, path.data)) {
            continue;
        }

        leases = ngx_zk_lock_recipe_leases(node);
        rw = (node->kind == NGX_ZK_LOCK_READ
              || node->kind == NGX_ZK_LOCK_WRITE);

        if (rw) {
            type = "rwlock";

        } else if (node->kind == NGX_ZK_LOCK_COUNT) {
            type = "semaphore v2";

        } else {
            type = ngx_http_zk_lock_snap_type(snap, &name, 1,
                                              (leases == 1) ? "mutex"
                                                            : "semaphore");
        }

        if (ngx_http_zk_lock_snap_add(snap, &name, suffix, type, leases, rw,
                                      1)
            != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


/*
 * A path of this worker's as "<name>[<suffix>]", the lock's name without
 * the shadow's ".dry-run": the suffix of a semaphore v2's leases, which
 * its kind tells, and of the queue of its internal mutex in a dry run;
 * else none (that queue is shown as a lock of its own otherwise)
 */

static void
ngx_http_zk_lock_snap_split(ngx_zk_lock_t *zl, ngx_zk_lock_node_t *node,
    ngx_str_t *name, const char **suffix)
{
    size_t  n;

    name->data = zl->path;
    name->len = ngx_strlen(zl->path);
    *suffix = NULL;

    n = sizeof("/leases") - 1;

    if (node->kind == NGX_ZK_LOCK_COUNT && name->len > n
        && ngx_strcmp(name->data + name->len - n, "/leases") == 0)
    {
        name->len -= n;
        *suffix = "/leases";
    }

    n = sizeof(NGX_HTTP_ZK_LOCK_SNAP_DRY "/locks") - 1;

    if (node->kind == NGX_ZK_LOCK_LEASE && name->len > n
        && ngx_strcmp(name->data + name->len - n,
                      NGX_HTTP_ZK_LOCK_SNAP_DRY "/locks") == 0)
    {
        name->len -= sizeof("/locks") - 1;
        *suffix = "/locks";
    }

    n = sizeof(NGX_HTTP_ZK_LOCK_SNAP_DRY) - 1;

    if (name->len > n
        && ngx_strncmp(name->data + name->len - n, NGX_HTTP_ZK_LOCK_SNAP_DRY,
                       n) == 0)
    {
        name->len -= n;
    }
}


/*
 * The directive's type of a lock (zk_mutex or zk_semaphore, which the
 * recipe does not tell apart with one lease) as configured: a literal
 * path's own; a live path's from the directive whose path it fits, if
 * one type fits; else "guess", the recipe's
 */

static const char *
ngx_http_zk_lock_snap_type(ngx_http_zk_lock_snap_t *snap, ngx_str_t *name,
    ngx_uint_t live, const char *guess)
{
    ngx_uint_t                     i, type, fits;
    ngx_zk_lock_params_t         **lp;
    ngx_http_zk_lock_main_conf_t  *lmcf;

    lmcf = snap->lmcf;

    if (lmcf->specs == NULL) {
        return guess;
    }

    lp = lmcf->specs->elts;
    type = 0;

    for (i = 0; i < lmcf->specs->nelts; i++) {

        if (lp[i]->v2
            || (lp[i]->type != NGX_ZK_LOCK_MUTEX
                && lp[i]->type != NGX_ZK_LOCK_SEMAPHORE))
        {
            continue;
        }

        if (live) {
            fits = lp[i]->transient
                   && ngx_http_zk_lock_snap_match(&lp[i]->name, name);

        } else {
            fits = !lp[i]->transient && lp[i]->name.len == name->len
                   && ngx_strncmp(lp[i]->name.data, name->data, name->len)
                      == 0;
        }

        if (!fits) {
            continue;
        }

        if (type && type != lp[i]->type) {
            return guess;
        }

        type = lp[i]->type;
    }

    return (type == 0) ? guess
                       : (type == NGX_ZK_LOCK_MUTEX) ? "mutex" : "semaphore";
}


/*
 * Whether a path fits a directive's path with variables: as many levels
 * (a value cannot add one, see eval_path()), the same literal ones, and
 * each from variables with the text before its first "$"
 */

static ngx_uint_t
ngx_http_zk_lock_snap_match(ngx_str_t *pattern, ngx_str_t *path)
{
    u_char  *p, *q, *pe, *qe, *plast, *qlast, *dollar;

    p = pattern->data;
    plast = p + pattern->len;
    q = path->data;
    qlast = q + path->len;

    while (p < plast && q < qlast) {
        pe = ngx_strlchr(p + 1, plast, '/');
        pe = pe ? pe : plast;
        qe = ngx_strlchr(q + 1, qlast, '/');
        qe = qe ? qe : qlast;

        dollar = ngx_strlchr(p, pe, '$');

        if (dollar) {
            if (qe - q < dollar - p || ngx_strncmp(p, q, dollar - p) != 0) {
                return 0;
            }

        } else if (pe - p != qe - q || ngx_strncmp(p, q, pe - p) != 0) {
            return 0;
        }

        p = pe;
        q = qe;
    }

    return (p == plast && q == qlast);
}


/*
 * The shadow path of each lock, "<name>.dry-run<suffix>", where the
 * requests in zk_lock_dry_run across the fleet make their nodes: listed
 * with the lock, and shown under it
 */

static ngx_int_t
ngx_http_zk_lock_snap_shadows(ngx_http_zk_lock_snap_t *snap)
{
    u_char                        *p, *suffix;
    size_t                         len;
    ngx_str_t                      name;
    ngx_uint_t                     i, n;
    ngx_http_zk_lock_snap_lock_t  *lock, *shadow;

    n = snap->locks.nelts;

    for (i = 0; i < n; i++) {

        /* the array moves as it grows */

        lock = snap->locks.elts;

        len = lock[i].path.len + sizeof(NGX_HTTP_ZK_LOCK_SNAP_DRY);

        name.data = ngx_pnalloc(snap->pool, len);
        if (name.data == NULL) {
            return NGX_ERROR;
        }

        suffix = lock[i].path.data + lock[i].base;

        p = ngx_cpymem(name.data, lock[i].path.data, lock[i].base);
        p = ngx_cpymem(p, NGX_HTTP_ZK_LOCK_SNAP_DRY,
                       sizeof(NGX_HTTP_ZK_LOCK_SNAP_DRY) - 1);
        name.len = p - name.data;

        p = ngx_cpymem(p, suffix, lock[i].path.len - lock[i].base);
        *p = '\0';

        /* a lock of its own by that name is shown as one */

        if (ngx_http_zk_lock_snap_known(snap, name.data)) {
            continue;
        }

        if (ngx_http_zk_lock_snap_add(snap, &name, (char *) suffix,
                                      lock[i].type, lock[i].leases,
                                      lock[i].rw, lock[i].live)
            != NGX_OK)
        {
            return NGX_ERROR;
        }

        lock = snap->locks.elts;
        shadow = &lock[snap->locks.nelts - 1];

        shadow->dry = 1;
        lock[i].shadow = snap->locks.nelts;
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_zk_lock_snap_add(ngx_http_zk_lock_snap_t *snap, ngx_str_t *path,
    const char *suffix, const char *type, ngx_uint_t leases, ngx_uint_t rw,
    ngx_uint_t live)
{
    size_t                         len;
    ngx_http_zk_lock_snap_lock_t  *lock;

    lock = ngx_array_push(&snap->locks);
    if (lock == NULL) {
        return NGX_ERROR;
    }

    ngx_memzero(lock, sizeof(ngx_http_zk_lock_snap_lock_t));

    len = suffix ? ngx_strlen(suffix) : 0;

    lock->path.data = ngx_pnalloc(snap->pool, path->len + len + 1);
    if (lock->path.data == NULL) {
        return NGX_ERROR;
    }

    lock->path.len = ngx_sprintf(lock->path.data, "%V%s", path,
                                 suffix ? suffix : "")
                     - lock->path.data;
    lock->path.data[lock->path.len] = '\0';

    lock->base = path->len;
    lock->type = type;
    lock->leases = leases;
    lock->rw = rw;
    lock->live = live;

    return NGX_OK;
}


static ngx_uint_t
ngx_http_zk_lock_snap_known(ngx_http_zk_lock_snap_t *snap, u_char *path)
{
    ngx_uint_t                     i;
    ngx_http_zk_lock_snap_lock_t  *lock;

    lock = snap->locks.elts;

    for (i = 0; i < snap->locks.nelts; i++) {
        if (ngx_strcmp(lock[i].path.data, path) == 0) {
            return 1;
        }
    }

    return 0;
}


static void
ngx_http_zk_lock_snap_listed(int rc, const struct String_vector *strings,
    const void *data)
{
    ngx_http_zk_lock_snap_lock_t *lock = (ngx_http_zk_lock_snap_lock_t *) data;

    int                             erc;
    u_char                         *p;
    ngx_uint_t                      i, n;
    ngx_zk_lock_child_t            *sorted;
    ngx_zk_lock_session_t          *s;
    ngx_http_zk_lock_snap_t   *snap;
    ngx_http_zk_lock_snap_child_t  *child;
    u_char                          buf[NGX_ZK_LOCK_BUF_LEN + 16];

    snap = lock->snap;
    s = snap->session;

    snap->pending--;

    if (s->exiting) {
        return;
    }

    lock->rc = rc;

    if (rc == ZNONODE || (rc == ZOK && (strings == NULL || !strings->count)))
    {
        /* nobody there */
        lock->rc = ZOK;
        goto done;
    }

    if (rc != ZOK) {
        snap->failed = 1;
        goto done;
    }

    n = strings->count;

    sorted = ngx_alloc(n * sizeof(ngx_zk_lock_child_t), &s->log);
    if (sorted == NULL) {
        snap->failed = 1;
        goto done;
    }

    /* in the order of the queue, as Curator sorts: others last */

    (void) ngx_zk_lock_listing_sort(sorted, strings->data, n);

    for (i = 0; i < n; i++) {
        if (sorted[i].seq == NGX_ZK_LOCK_SEQ_NONE) {
            break;
        }
    }

    lock->total = i;
    lock->n = ngx_min(i, NGX_HTTP_ZK_LOCK_SNAP_MAX);

    lock->children = ngx_pcalloc(snap->pool,
                            lock->n * sizeof(ngx_http_zk_lock_snap_child_t));

    if (lock->n && lock->children == NULL) {
        ngx_free(sorted);
        snap->failed = 1;
        goto done;
    }

    ngx_zk_lock_session_batch(s);

    for (i = 0; i < lock->n; i++) {
        child = &lock->children[i];

        child->lock = lock;
        child->seq = sorted[i].seq;
        child->write = sorted[i].write ? 1 : 0;
        child->writes = sorted[i].writes;

        child->name.data = ngx_pnalloc(snap->pool, sorted[i].len + 1);
        if (child->name.data == NULL) {
            snap->failed = 1;
            continue;
        }

        child->name.len = sorted[i].len;
        ngx_memcpy(child->name.data, sorted[i].name, sorted[i].len);
        child->name.data[child->name.len] = '\0';

        p = ngx_snprintf(buf, sizeof(buf) - 1, "%V/%V", &lock->path,
                         &child->name);
        *p = '\0';

        erc = zoo_aget(s->zh, (char *) buf, 0, ngx_http_zk_lock_snap_data,
                       child);

        if (erc != ZOK) {
            snap->failed = 1;
            continue;
        }

        snap->pending++;
    }

    ngx_free(sorted);

    ngx_http_zk_lock_snap_granted(lock, s);

done:

    if (snap->pending == 0) {
        snap->handler(snap);
    }
}


/*
 * fair=: the board beside the lock, "<path>.fair", a node per instance
 * whose data is its claim (see ngx_zk_lock_board.c): listed and read
 * with the lock, its claims shown with the lock and on each node
 */

static ngx_int_t
ngx_http_zk_lock_snap_board(ngx_zk_lock_session_t *s,
    ngx_http_zk_lock_snap_lock_t *lock)
{
    int      rc;
    u_char  *p, buf[NGX_ZK_LOCK_BUF_LEN + 16];

    if (lock->path.len + sizeof(NGX_HTTP_ZK_LOCK_SNAP_BOARD) > sizeof(buf)) {
        return NGX_ERROR;
    }

    p = ngx_cpymem(buf, lock->path.data, lock->path.len);
    ngx_memcpy(p, NGX_HTTP_ZK_LOCK_SNAP_BOARD,
               sizeof(NGX_HTTP_ZK_LOCK_SNAP_BOARD));

    rc = zoo_aget_children(s->zh, (char *) buf, 0,
                           ngx_http_zk_lock_snap_board_listed, lock);

    if (rc != ZOK) {
        ngx_log_error(NGX_LOG_ERR, &s->log, 0,
                      "zoo_aget_children(\"%s\") failed (%d: %s)",
                      buf, rc, zerror(rc));
        return NGX_ERROR;
    }

    lock->snap->pending++;

    return NGX_OK;
}


static void
ngx_http_zk_lock_snap_board_listed(int rc,
    const struct String_vector *strings, const void *data)
{
    ngx_http_zk_lock_snap_lock_t *lock = (ngx_http_zk_lock_snap_lock_t *) data;

    int                             erc;
    u_char                         *p;
    ngx_uint_t                      i, n;
    ngx_zk_lock_session_t          *s;
    ngx_http_zk_lock_snap_t   *snap;
    ngx_http_zk_lock_snap_claim_t  *claim;
    u_char                          buf[NGX_ZK_LOCK_BUF_LEN + 64];

    snap = lock->snap;
    s = snap->session;

    snap->pending--;

    if (s->exiting) {
        return;
    }

    if (rc != ZOK || strings == NULL || strings->count <= 0) {
        /* no board (ZNONODE): nobody claims, not a failure */
        snap->failed |= (rc != ZOK && rc != ZNONODE);
        goto done;
    }

    n = ngx_min((ngx_uint_t) strings->count, NGX_HTTP_ZK_LOCK_SNAP_MAX);

    lock->claims = ngx_pcalloc(snap->pool,
                               n * sizeof(ngx_http_zk_lock_snap_claim_t));
    if (lock->claims == NULL) {
        snap->failed = 1;
        goto done;
    }

    ngx_zk_lock_session_batch(s);

    for (i = 0; i < (ngx_uint_t) strings->count && lock->nclaims < n; i++) {

        /* an instance's node is named by its worker's prefix; others not */

        if (ngx_strlen(strings->data[i]) != NGX_ZK_LOCK_OURS_LEN) {
            continue;
        }

        claim = &lock->claims[lock->nclaims++];
        claim->lock = lock;
        claim->claim = -1;
        ngx_memcpy(claim->name, strings->data[i], NGX_ZK_LOCK_OURS_LEN);

        p = ngx_snprintf(buf, sizeof(buf) - 1, "%V%s/%*s", &lock->path,
                         NGX_HTTP_ZK_LOCK_SNAP_BOARD,
                         (size_t) NGX_ZK_LOCK_OURS_LEN, claim->name);
        *p = '\0';

        erc = zoo_aget(s->zh, (char *) buf, 0,
                       ngx_http_zk_lock_snap_board_data, claim);

        if (erc != ZOK) {
            snap->failed = 1;
            continue;
        }

        snap->pending++;
    }

done:

    if (snap->pending == 0) {
        snap->handler(snap);
    }
}


static void
ngx_http_zk_lock_snap_board_data(int rc, const char *value, int value_len,
    const struct Stat *stat, const void *data)
{
    ngx_http_zk_lock_snap_claim_t *claim =
                                        (ngx_http_zk_lock_snap_claim_t *) data;

    u_char                        *end;
    ngx_http_zk_lock_snap_t  *snap;

    snap = claim->lock->snap;

    snap->pending--;

    if (snap->session->exiting) {
        return;
    }

    if (rc == ZOK && value && value_len > 0) {
        /*
         * a number, and with priority= its classes after a space (not
         * shown); anybody's other data is no claim (-1)
         */
        end = ngx_strlchr((u_char *) value, (u_char *) value + value_len,
                          ' ');
        claim->claim = ngx_atoi((u_char *) value,
                                end ? end - (u_char *) value : value_len);

    } else if (rc != ZOK && rc != ZNONODE) {
        snap->failed = 1;
    }

    if (snap->pending == 0) {
        snap->handler(snap);
    }
}


static void
ngx_http_zk_lock_snap_data(int rc, const char *value, int value_len,
    const struct Stat *stat, const void *data)
{
    ngx_http_zk_lock_snap_child_t *child =
                                        (ngx_http_zk_lock_snap_child_t *) data;

    size_t                         len;
    ngx_http_zk_lock_snap_t  *snap;

    snap = child->lock->snap;

    snap->pending--;

    if (snap->session->exiting) {
        return;
    }

    if (rc == ZOK) {
        child->read = 1;

        if (stat) {
            child->ctime = stat->ctime;
        }

        if (value && value_len > 0) {
            /* up to 1 MB, anybody's: the first bytes are enough to show */

            child->size = value_len;
            len = ngx_min((size_t) value_len, NGX_HTTP_ZK_LOCK_SNAP_DATA);

            child->data.data = ngx_pnalloc(snap->pool, len);
            if (child->data.data) {
                ngx_memcpy(child->data.data, value, len);
                child->data.len = len;
            }
        }

    } else if (rc == ZNONODE) {
        /* released between the listing and this read */
        child->gone = 1;

    } else {
        snap->failed = 1;
    }

    if (snap->pending == 0) {
        snap->handler(snap);
    }
}


/*
 * The nodes of this worker that hold there: when the recipe granted each
 * (ZooKeeper keeps no such time).  A weighted participant's other nodes
 * were granted with it.
 */

static void
ngx_http_zk_lock_snap_granted(ngx_http_zk_lock_snap_lock_t *lock,
    ngx_zk_lock_session_t *s)
{
    u_char                         *name;
    ngx_uint_t                      i, j;
    ngx_queue_t                    *q;
    ngx_zk_lock_t                  *zl;
    ngx_zk_lock_node_t             *node;
    ngx_http_zk_lock_snap_child_t  *child;

    zl = ngx_zk_lock_path_find(s, lock->path.data, lock->path.len);
    if (zl == NULL) {
        return;
    }

    for (q = ngx_queue_head(&zl->nodes);
         q != ngx_queue_sentinel(&zl->nodes);
         q = ngx_queue_next(q))
    {
        node = ngx_queue_data(q, ngx_zk_lock_node_t, queue);

        if (node->state != NGX_ZK_LOCK_HELD || node->granted == 0) {
            continue;
        }

        for (i = 0; i < lock->n; i++) {
            child = &lock->children[i];

            if (child->name.data == NULL) {
                continue;
            }

            for (j = 0; j <= node->npassengers; j++) {
                name = (j == 0) ? node->name : node->passengers[j - 1].name;

                if (ngx_strcmp(child->name.data, name) == 0) {
                    child->granted = node->granted;
                }
            }
        }
    }
}


/*
 * Since when each node of a complete snapshot holds, or waits.  A waiter
 * waits since its node was made.  A holder of this worker holds since
 * its recipe's grant.  Of another holder (another worker's, another
 * nginx's, a Curator client's) ZooKeeper tells only when its node was
 * made: it holds since then at the earliest, or since the last snapshot
 * of this worker that saw it wait, a bound kept from one snapshot to the
 * next as a grant is.
 */

void
ngx_http_zk_lock_snap_ages(ngx_http_zk_lock_snap_t *snap,
    ngx_http_zk_lock_snap_t *prev)
{
    ngx_uint_t                      i, j;
    ngx_time_t                     *tp;
    ngx_http_zk_lock_snap_lock_t   *lock, *old, *was;
    ngx_http_zk_lock_snap_child_t  *child;

    tp = ngx_timeofday();
    snap->msec = (int64_t) tp->sec * 1000 + tp->msec;

    lock = snap->locks.elts;
    old = prev ? prev->locks.elts : NULL;

    for (i = 0; i < snap->locks.nelts; i++) {

        was = NULL;

        for (j = 0; old && j < prev->locks.nelts; j++) {
            if (ngx_strcmp(old[j].path.data, lock[i].path.data) == 0) {
                was = &old[j];
                break;
            }
        }

        for (j = 0; j < lock[i].n; j++) {
            child = &lock[i].children[j];
            child->holds = ngx_http_zk_lock_snap_holds(&lock[i], j);

            ngx_http_zk_lock_snap_aged(child, was, prev ? prev->msec : 0);
        }
    }
}


static void
ngx_http_zk_lock_snap_aged(ngx_http_zk_lock_snap_child_t *child,
    ngx_http_zk_lock_snap_lock_t *was, int64_t then)
{
    ngx_uint_t                      i;
    ngx_http_zk_lock_snap_child_t  *old;

    child->since = child->ctime;

    if (!child->holds) {
        return;
    }

    if (child->granted) {
        child->since = child->granted;
        child->exact = 1;
        return;
    }

    for (i = 0; was && child->name.data && i < was->n; i++) {
        old = &was->children[i];

        if (old->seq != child->seq || old->name.data == NULL
            || ngx_strcmp(old->name.data, child->name.data) != 0)
        {
            continue;
        }

        if (old->holds && old->since) {
            child->since = old->since;
            child->exact = old->exact;

        } else if (!old->holds && child->since && then > child->since) {
            /* it waited then */
            child->since = then;
        }

        return;
    }
}


/*
 * Curator's rules: a writer holds when first, a reader when no writer is
 * ahead; a lease among the first "leases" nodes
 */

static ngx_uint_t
ngx_http_zk_lock_snap_holds(ngx_http_zk_lock_snap_lock_t *lock, ngx_uint_t i)
{
    ngx_http_zk_lock_snap_child_t  *child;

    child = &lock->children[i];

    if (lock->rw) {
        return child->write ? (i == 0) : (child->writes == 0);
    }

    return (i < lock->leases);
}
