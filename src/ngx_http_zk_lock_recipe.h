
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#ifndef _NGX_HTTP_ZK_LOCK_RECIPE_H_INCLUDED_
#define _NGX_HTTP_ZK_LOCK_RECIPE_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>

#include "ngx_http_zk_lock_session.h"
#include "ngx_http_zk_lock_counter.h"


/*
 * Curator's mutex and fair semaphore (InterProcessMutex,
 * InterProcessSemaphore): an EPHEMERAL_SEQUENTIAL child
 * "_c_<uuid>-lock-<seq>" per participant; a participant holds a lease while
 * fewer than "leases" children come before it.  Curator's read/write lock
 * (InterProcessReadWriteLock): children "_c_<uuid>-__READ__<seq>" and
 * "_c_<uuid>-__WRIT__<seq>"; a writer holds when it is first, a reader when
 * no writer comes before it.  The leases of Curator's InterProcessSemaphoreV2
 * ("_c_<uuid>-lease-<seq>"): held while there are at most "leases" children,
 * with a watch on the children; the mutex that the protocol takes around it
 * is the owner's business.
 */


/* the longest path, the bound of zk_lock_max_path: ZooKeeper allows longer */
#define NGX_HTTP_ZK_LOCK_MAX_PATH  4096


typedef struct ngx_http_zk_lock_s          ngx_http_zk_lock_t;
typedef struct ngx_http_zk_lock_node_s     ngx_http_zk_lock_node_t;

typedef void (*ngx_http_zk_lock_notify_pt)(ngx_http_zk_lock_node_t *node);


typedef enum {
    NGX_HTTP_ZK_LOCK_LEASE = 0,     /* mutex, semaphore */
    NGX_HTTP_ZK_LOCK_READ,
    NGX_HTTP_ZK_LOCK_WRITE,
    NGX_HTTP_ZK_LOCK_COUNT          /* a lease of Curator's semaphore v2 */
} ngx_http_zk_lock_kind_e;


typedef enum {
    NGX_HTTP_ZK_LOCK_PARKED = 0,    /* waits for a connected session */
    NGX_HTTP_ZK_LOCK_CREATING,      /* create sent */
    NGX_HTTP_ZK_LOCK_LOST,          /* create reply lost: find it by uuid */
    NGX_HTTP_ZK_LOCK_WAITING,       /* queued behind others */
    NGX_HTTP_ZK_LOCK_HELD,
    NGX_HTTP_ZK_LOCK_FAILED,        /* see "error" */
    NGX_HTTP_ZK_LOCK_DELETING,      /* released, delete sent */
    NGX_HTTP_ZK_LOCK_ORPHAN         /* released, delete to retry */
} ngx_http_zk_lock_state_e;


/* one participant: a request's place in one lock */

struct ngx_http_zk_lock_node_s {
    ngx_queue_t                   queue;      /* in lock->nodes */
    ngx_http_zk_lock_t           *lock;
    ngx_http_zk_lock_state_e      state;
    ngx_http_zk_lock_kind_e       kind;
    ngx_uint_t                    leases;     /* unless the counter says */
    ngx_http_zk_lock_counter_t   *counter;
    ngx_uint_t                    generation; /* session of the znode */
    ngx_uint_t                    pending;    /* completions to come */
    ngx_uint_t                    attempts;   /* creates tried */
    ngx_uint_t                    list_id;    /* the listing after create */
    ngx_uint_t                    ahead;      /* nodes in the way, at most */
    uint32_t                      seq;
    int                           error;      /* ZooKeeper error, if FAILED */

    /* the owner, told of HELD and FAILED; NULL once released */
    ngx_http_zk_lock_notify_pt    notify;
    void                         *data;
    ngx_event_t                   notify_event;
    ngx_log_t                    *log;        /* the owner's, then ours */

    unsigned                      was_held:1;
    unsigned                      was_waiting:1;
    unsigned                      covered:1;  /* all ahead are watched */
    unsigned                      self:2;     /* its own watch, see deleted() */
    unsigned                      promote:1;  /* holds once self is checked */
    unsigned                      deferred:1; /* no listing after create */
    unsigned                      trying:1;   /* fails rather than waits */

    u_char                        uuid[NGX_HTTP_ZK_LOCK_UUID_LEN];
    size_t                        name_len;
    u_char                        name[64];   /* child name, null-terminated */
    u_char                        pred[64];   /* the child just ahead */

    ngx_str_t                     info;       /* node data: the holder */
};


/* the error of a trying node that found the lock taken: not ZooKeeper's */
#define NGX_HTTP_ZK_LOCK_BUSY     1


/* the watches a worker remembers in one lock, so as to set each once */
#define NGX_HTTP_ZK_LOCK_WATCHED  16


/* a child of the lock in the last listing */

typedef struct {
    uint32_t                      seq;
    uint32_t                      name:30;    /* offset in the names */
    uint32_t                      write:1;    /* a write lock's node */
    uint32_t                      gone:1;     /* its deletion is counted */
} ngx_http_zk_lock_entry_t;


/* one lock path with participants in this worker */

struct ngx_http_zk_lock_s {
    ngx_str_node_t                sn;         /* key: the path */
    ngx_queue_t                   queue;      /* in session->all */
    ngx_queue_t                   nodes;
    ngx_http_zk_lock_session_t   *session;
    ngx_uint_t                    refs;       /* nodes and completions */
    ngx_uint_t                    sent;       /* listings asked for */
    ngx_uint_t                    answered;   /* listings answered */
    ngx_uint_t                    nwatched;
    uint32_t                      watched[NGX_HTTP_ZK_LOCK_WATCHED];

    /* the last listing, sorted, its names after the entries */
    ngx_http_zk_lock_entry_t     *cache;
    ngx_uint_t                    ncache;
    ngx_uint_t                    head;       /* the first not gone */
    ngx_uint_t                    live;       /* the entries not gone */
    ngx_uint_t                    span;       /* the entries to watch there */
    ngx_uint_t                    transient;  /* levels to delete when idle */

    unsigned                      count:1;    /* lists with a watch */
    unsigned                      wanted:1;   /* a listing, after this one */
    unsigned                      deep:1;     /* see window() */
    unsigned                      reads:1;    /* readers wait */
    u_char                        path[1];
};


ngx_http_zk_lock_node_t *ngx_http_zk_lock_acquire(
    ngx_http_zk_lock_session_t *s, ngx_str_t *path,
    ngx_http_zk_lock_kind_e kind, ngx_uint_t leases,
    ngx_http_zk_lock_counter_t *counter, ngx_str_t *info,
    ngx_http_zk_lock_notify_pt notify, void *data, ngx_log_t *log);
void ngx_http_zk_lock_release(ngx_http_zk_lock_node_t *node);
void ngx_http_zk_lock_transient(ngx_http_zk_lock_node_t *node,
    ngx_uint_t levels);
void ngx_http_zk_lock_try(ngx_http_zk_lock_node_t *node);
ngx_uint_t ngx_http_zk_lock_waiting(ngx_http_zk_lock_session_t *s,
    ngx_str_t *path);

void ngx_http_zk_lock_recipe_connected(ngx_http_zk_lock_session_t *s);
void ngx_http_zk_lock_recipe_expired(ngx_http_zk_lock_session_t *s);
void ngx_http_zk_lock_recipe_free(ngx_http_zk_lock_session_t *s);
void ngx_http_zk_lock_recipe_watch(ngx_http_zk_lock_session_t *s,
    int type, const char *path);
void ngx_http_zk_lock_recipe_recount(ngx_http_zk_lock_session_t *s,
    ngx_http_zk_lock_counter_t *c);


#endif /* _NGX_HTTP_ZK_LOCK_RECIPE_H_INCLUDED_ */
