
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#ifndef _NGX_ZK_LOCK_RECIPE_H_INCLUDED_
#define _NGX_ZK_LOCK_RECIPE_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>

#include "ngx_zk_lock_session.h"
#include "ngx_zk_lock_counter.h"
#include "ngx_zk_lock_board.h"
#include "ngx_zk_lock_listing.h"
#include "ngx_zk_lock_path.h"


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


typedef struct ngx_zk_lock_node_s     ngx_zk_lock_node_t;


/* the other nodes of a weighted participant, see ngx_zk_lock_group.c */

typedef struct {
    uint32_t                      seq;
    u_char                        name[64];
} ngx_zk_lock_passenger_t;

typedef void (*ngx_zk_lock_notify_pt)(ngx_zk_lock_node_t *node);


/*
 * The pools of kept leases (keep.c), above the recipe: a request's ticket
 * is theirs to release, and their pools theirs to free
 */

typedef struct {
    ngx_zk_lock_notify_pt       release;
    void                        (*free)(ngx_zk_lock_t *lock);
} ngx_zk_lock_keeper_t;


/*
 * A node's life: the completions of its ZooKeeper requests move it, and
 * its owner's release() ("released"), after which the owner is told
 * nothing more and the node is freed once FAILED with no reply to come.
 *
 *           connected            created               first
 *   PARKED -----------> CREATING ---------> WAITING -----------> HELD
 *                        |    ^               ^  |                |
 *             reply lost |    | listed,       |  | released, or   | released
 *                        v    | not there     |  | a busy try     |
 *                       LOST -+---------------+  v                |
 *                                 listed,       DELETING <--------+
 *                                 there          |    ^
 *                                connection lost |    | reconnected
 *                                                v    |
 *                                               ORPHAN
 *
 *   CREATING --ZNONODE--> CREATING again, once its parents are made
 *   any --an error, the session's expiry, its node gone, its delete
 *         answered--> FAILED
 *
 * "first": the listing places it among the first "leases" children (a
 * reader: with no writer ahead), or a deletion counted without a listing
 * leaves fewer ahead once its watch on itself is set (see wait_gone(),
 * wait_promote()).  All moves go through recipe_node_state().
 */

typedef enum {
    NGX_ZK_LOCK_PARKED = 0,    /* waits for a connected session */
    NGX_ZK_LOCK_CREATING,      /* create sent */
    NGX_ZK_LOCK_LOST,          /* create reply lost: find it by uuid */
    NGX_ZK_LOCK_WAITING,       /* queued behind others */
    NGX_ZK_LOCK_HELD,
    NGX_ZK_LOCK_FAILED,        /* see "error" */
    NGX_ZK_LOCK_DELETING,      /* released, delete sent */
    NGX_ZK_LOCK_ORPHAN         /* released, delete to retry */
} ngx_zk_lock_state_e;


/* a waiter's watch on its own node, see wait_promote() */

typedef enum {
    NGX_ZK_LOCK_SELF_NONE = 0,
    NGX_ZK_LOCK_SELF_SENT,
    NGX_ZK_LOCK_SELF_SET
} ngx_zk_lock_self_e;


/* one participant: a request's place in one lock */

struct ngx_zk_lock_node_s {
    ngx_queue_t                   queue;      /* in lock->nodes */
    ngx_zk_lock_t                *lock;
    ngx_zk_lock_state_e           state;
    ngx_zk_lock_kind_e            kind;
    ngx_uint_t                    leases;     /* unless the counter says */
    ngx_uint_t                    weight;     /* nodes it creates */
    ngx_zk_lock_passenger_t      *passengers; /* weight - 1 of them */
    ngx_uint_t                    npassengers;
    ngx_zk_lock_counter_t        *counter;
    ngx_uint_t                    generation; /* session of the znode */
    ngx_uint_t                    pending;    /* completions to come */
    ngx_uint_t                    attempts;   /* creates tried */
    ngx_uint_t                    list_id;    /* the listing after create */
    ngx_uint_t                    ahead;      /* nodes in the way, at most */
    uint32_t                      seq;
    int64_t                       czxid;      /* its creation: the token */
    int64_t                       granted;    /* ms since 1970: HELD since */
    int                           error;      /* ZooKeeper error, if FAILED */

    /* the owner, told of HELD and FAILED; NULL once released */
    ngx_zk_lock_notify_pt         notify;
    void                         *data;
    ngx_event_t                   notify_event;
    ngx_log_t                    *log;        /* the owner's, then ours */

    ngx_zk_lock_self_e       self;

    unsigned                      was_held:1;
    unsigned                      was_waiting:1;
    unsigned                      covered:1;  /* all ahead are watched */
    unsigned                      promote:1;  /* holds once self is set */
    unsigned                      deferred:1; /* no listing after create */
    unsigned                      trying:1;   /* fails rather than waits */
    unsigned                      untold:1;   /* held, its token to come */
    unsigned                      revocable:1; /* watches its own data */
    unsigned                      pooled:1;   /* a lease a worker keeps */
    unsigned                      ticket:1;   /* a request on a pool */
    unsigned                      reused:1;   /* a ticket on a kept lease */
    unsigned                      recalled:1; /* a lent ticket, wanted back */
    unsigned                      spent:1;    /* lent, and idle for keep */
    unsigned                      declined:1; /* asked, no broker took it */
    unsigned                      capped:1;   /* its flow at fair_max */

    u_char                        uuid[NGX_ZK_LOCK_UUID_LEN];
    size_t                        name_len;
    u_char                        name[64];   /* child name, null-terminated */
    u_char                        pred[64];   /* the child just ahead */

    ngx_str_t                     info;       /* node data: the holder */

    /* created once this holds, released once told: see behind() */
    ngx_zk_lock_node_t      *gate;

    /* a ticket's lease, and when its request asked: see ngx_zk_lock_keep.c */
    void                         *kept;
    ngx_msec_t                    asked;

    /* a ticket's flow (fair=), charged so much since: ngx_zk_lock_fair.c */
    void                         *flow;
    uint64_t                      fair_charge;
    ngx_msec_t                    fair_start;

    /*
     * A ticket lent to an owner that may keep it between its requests (a
     * sibling worker, see ngx_zk_lock_broker.c): asked to end it
     */
    ngx_zk_lock_notify_pt    recall;

    /*
     * A node that a sibling's session holds for this worker (see
     * ngx_zk_lock_remote.c): no lock here, its own release
     */
    u_char                       *remote_path;
    ngx_zk_lock_notify_pt         releaser;
};


/* a waiter's "ahead" before its first listing */
#define NGX_ZK_LOCK_UNKNOWN  NGX_MAX_INT_T_VALUE


/*
 * the error of a node whose path's variable names a node that is no
 * lock's (see path_vet())
 */
#define NGX_ZK_LOCK_FOREIGN  4

/* the error of a trying node that found the lock taken: not ZooKeeper's */
#define NGX_ZK_LOCK_BUSY     1

/* the error of a revocable node whose data asks it to let go */
#define NGX_ZK_LOCK_REVOKED  2

/*
 * The error of a held node whose session may expire unheard of: it is
 * still HELD, and its owner releases it or keeps it until the session
 * comes back or expires
 */
#define NGX_ZK_LOCK_JEOPARDY  3


ngx_zk_lock_node_t *ngx_zk_lock_acquire(
    ngx_zk_lock_session_t *s, ngx_str_t *path,
    ngx_zk_lock_kind_e kind, ngx_uint_t leases, ngx_uint_t weight,
    ngx_zk_lock_counter_t *counter, ngx_str_t *info,
    ngx_uint_t transient, ngx_zk_lock_notify_pt notify, void *data,
    ngx_log_t *log);
ngx_zk_lock_node_t *ngx_zk_lock_behind(
    ngx_zk_lock_node_t *gate, ngx_str_t *path,
    ngx_zk_lock_kind_e kind, ngx_uint_t leases, ngx_uint_t weight,
    ngx_zk_lock_counter_t *counter);
void ngx_zk_lock_release(ngx_zk_lock_node_t *node);
u_char *ngx_zk_lock_node_path(ngx_zk_lock_node_t *node);
void ngx_zk_lock_transient(ngx_zk_lock_node_t *node,
    ngx_uint_t levels);
void ngx_zk_lock_try(ngx_zk_lock_node_t *node);
void ngx_zk_lock_revocable(ngx_zk_lock_node_t *node);
ngx_uint_t ngx_zk_lock_waiting(ngx_zk_lock_session_t *s,
    ngx_str_t *path);

void ngx_zk_lock_recipe_connected(ngx_zk_lock_session_t *s);
void ngx_zk_lock_recipe_expired(ngx_zk_lock_session_t *s);
void ngx_zk_lock_recipe_jeopardy(ngx_zk_lock_session_t *s);
void ngx_zk_lock_recipe_free(ngx_zk_lock_session_t *s);
void ngx_zk_lock_recipe_recount(ngx_zk_lock_session_t *s,
    ngx_zk_lock_counter_t *c);

void ngx_zk_lock_recipe_handler(ngx_zk_lock_owner_t *owner);
void ngx_zk_lock_recipe_keeper(ngx_zk_lock_keeper_t *keeper);

/* the moves of a node that ngx_zk_lock_wait.c decides */

ngx_int_t ngx_zk_lock_recipe_adopt(ngx_zk_lock_node_t *node,
    ngx_zk_lock_child_t *children, ngx_uint_t n);
ngx_uint_t ngx_zk_lock_recipe_busy(ngx_zk_lock_node_t *node);
ngx_uint_t ngx_zk_lock_recipe_leases(ngx_zk_lock_node_t *node);
ngx_uint_t ngx_zk_lock_recipe_needed(ngx_zk_lock_node_t *node);
void ngx_zk_lock_recipe_node_fail(ngx_zk_lock_node_t *node, int rc);
void ngx_zk_lock_recipe_node_gc(ngx_zk_lock_node_t *node);
void ngx_zk_lock_recipe_node_held(ngx_zk_lock_node_t *node);
void ngx_zk_lock_recipe_wrapped(ngx_zk_lock_t *lock, u_char *name);
void ngx_zk_lock_recipe_changed(ngx_zk_lock_node_t *node);
void ngx_zk_lock_recipe_vetted(ngx_zk_lock_t *lock);


#endif /* _NGX_ZK_LOCK_RECIPE_H_INCLUDED_ */
