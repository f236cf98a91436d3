
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#ifndef _NGX_ZK_LOCK_GATE_H_INCLUDED_
#define _NGX_ZK_LOCK_GATE_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>

#include "ngx_zk_lock_session.h"
#include "ngx_zk_lock_recipe.h"
#include "ngx_zk_lock_params.h"
#include "ngx_zk_lock_stats.h"
#include "ngx_zk_lock_local.h"
#include "ngx_zk_lock_fair.h"
#include "ngx_zk_lock_version.h"


/*
 * A participant at its locks, whatever its protocol: it takes them one
 * after the other in the order given, waits for each with a timeout, and
 * ends with an outcome, which it logs and counts.  The layer fills the
 * gate, suspends its request or connection, and hears of the end through
 * handler and data, as ngx_resolver_ctx_t's owner does:
 *
 *   refuse: a lock's path or weight is invalid, before it is asked for
 *   start --> OK: all held at once (kept leases), or let through
 *         --> DECLINED: refused at once (no session, queue full): result
 *         --> AGAIN: waiting ...
 *                 ... handler: done (all held, or let through: fail open)
 *                              or not (result: timeout, error, revoked)
 *   a held lock lost --> lost handler (zk_lock_lost abort): cut it off
 *   cancel: the participant left while waiting (GONE)
 *   done: the request or connection ends: every node goes
 *
 * Each step is counted as it happens (waits, holds, the result at the
 * lock it came at): in the core's counters (stats), and through the
 * layer's count hook where it keeps its own (HTTP's metrics).
 *
 * Under zk_lock_fail local=<n>, a lock is taken from the instance's local
 * leases (ngx_zk_lock_local.c) while the session is gone, and a wait
 * moves between the two queues with the session's news:
 *
 *   waiting in ZooKeeper --session gone (news, or an error)--> local
 *   waiting for a local lease --session usable (news: recall)--> ZooKeeper
 */

typedef struct ngx_zk_lock_gate_s  ngx_zk_lock_gate_t;

typedef void (*ngx_zk_lock_gate_handler_pt)(ngx_zk_lock_gate_t *gate);


/*
 * $zk_lock_status: the core's counts, after "none"; then what a layer
 * counts besides (see count)
 */
typedef enum {
    NGX_ZK_LOCK_GATE_NONE = 0,
    NGX_ZK_LOCK_GATE_ACQUIRED,      /* holds: with the time it waited */
    NGX_ZK_LOCK_GATE_TIMEOUT,
    NGX_ZK_LOCK_GATE_ERROR,
    NGX_ZK_LOCK_GATE_BYPASSED,
    NGX_ZK_LOCK_GATE_REJECTED,
    NGX_ZK_LOCK_GATE_LOST,
    NGX_ZK_LOCK_GATE_REVOKED,
    NGX_ZK_LOCK_GATE_GONE,
    NGX_ZK_LOCK_GATE_LOCAL,         /* holds a local lease: the same */
    NGX_ZK_LOCK_GATE_JEOPARDY,      /* let go: zookeeper went silent */
    NGX_ZK_LOCK_GATE_UNREACHABLE,   /* timed out: zookeeper was silent */
    NGX_ZK_LOCK_GATE_WAIT,          /* starts waiting */
    NGX_ZK_LOCK_GATE_UNWAIT,        /* stops waiting, however */
    NGX_ZK_LOCK_GATE_REUSED,        /* acquired: a lease the worker kept */
    NGX_ZK_LOCK_GATE_RELEASED       /* held no more, however */
} ngx_zk_lock_gate_result_e;


typedef struct ngx_zk_lock_gate_hold_s  ngx_zk_lock_gate_hold_t;

typedef void (*ngx_zk_lock_gate_count_pt)(ngx_zk_lock_gate_t *gate,
    ngx_zk_lock_gate_hold_t *hold, ngx_zk_lock_gate_result_e event,
    ngx_msec_t waited);


/* a layer's participants that wait, in a worker, and its session's news */
typedef struct {
    ngx_queue_t                   queue;      /* ngx_zk_lock_gate_t */
    ngx_uint_t                    n;
    ngx_zk_lock_session_t        *session;
    ngx_event_t                   event;
} ngx_zk_lock_gate_waiters_t;


/* one lock of the participant */
struct ngx_zk_lock_gate_hold_s {
    ngx_zk_lock_params_t         *lock;
    ngx_str_t                     path;       /* as evaluated */
    ngx_uint_t                    weight;
    ngx_zk_lock_flow_t            flow;       /* fair=: id 0 without */
    ngx_uint_t                    stat;       /* its counters' index */
    ngx_zk_lock_node_t           *node;
    ngx_zk_lock_local_t           local;      /* index: the layer's */
    ngx_str_t                     held;       /* its node's path, once held */
    int64_t                       token;      /* and the node's czxid */
    unsigned                      counted:1;  /* as held, in the counters */
    unsigned                      reasked:1;  /* of the worker's session */
};


struct ngx_zk_lock_gate_s {
    ngx_zk_lock_session_t        *session;
    ngx_zk_lock_stats_t          *stats;
    ngx_zk_lock_gate_hold_t      *holds;
    ngx_uint_t                    nholds;
    ngx_uint_t                    next;       /* the hold to take next */

    ngx_msec_t                    timeout;    /* where a lock has none */
    ngx_uint_t                    log_level;  /* of a timeout */
    ngx_uint_t                    max_waiting; /* 0: as many as connections */
    ngx_zk_lock_gate_waiters_t   *waiters;    /* the layer's, in the worker */
    ngx_queue_t                   queue;      /* in them, while waiting */
    ngx_uint_t                    fail_local; /* zk_lock_fail local=<n> */
    ngx_str_t                     info;       /* the nodes' data */

    ngx_event_t                   timer;
    ngx_msec_t                    started;
    ngx_msec_t                    since;      /* the wait for holds[next] */
    ngx_msec_t                    wait_time;
    ngx_zk_lock_gate_result_e     result;
    int                           error;      /* ZooKeeper's, at the end */

    ngx_zk_lock_gate_handler_pt   handler;    /* the wait ended */
    ngx_zk_lock_gate_handler_pt   lost;       /* a held lock, cut off */
    ngx_zk_lock_gate_count_pt     count;      /* the layer's own counts */
    void                         *data;
    ngx_log_t                    *log;
    ngx_pool_t                   *pool;       /* the participant's */

    /* the layer's words: "request", "aborting the request" */
    const char                   *noun;
    const char                   *cut;

    unsigned                      fail_open:1;
    unsigned                      lost_abort:1;
    unsigned                      waiting:1;
    unsigned                      done:1;     /* all held, or let through */
    unsigned                      local:1;    /* a local lease among them */
    unsigned                      elsewhere:1; /* no session: a sibling's? */
};


/* " (zookeeper unreachable for 3.1s)" in a participant's lines */
#define NGX_ZK_LOCK_GATE_OUTAGE_LEN  64


/* $zk_lock_flow: the flow of its first lock with fair=, or 0 */
uint64_t ngx_zk_lock_gate_flow(ngx_zk_lock_gate_t *gate);


#define ngx_zk_lock_gate_directive(hold)                                     \
    ngx_zk_lock_types[(hold)->lock->type].directive


/*
 * The core a layer was built with, by its version and the sizes of what
 * the layers share with it: each shared object of the modules carries
 * the core, and the copy nginx loaded first serves both layers (see
 * config), so both must come from one build
 */
#define NGX_ZK_LOCK_ABI                                                      \
    (sizeof(ngx_zk_lock_gate_t) << 24 ^ sizeof(ngx_zk_lock_params_t) << 16   \
     ^ sizeof(ngx_zk_lock_stats_t) << 12 ^ sizeof(ngx_zk_lock_session_t) << 8 \
     ^ sizeof(ngx_zk_lock_local_t) << 4 ^ sizeof(ngx_zk_lock_node_t))


ngx_int_t ngx_zk_lock_gate_start(ngx_zk_lock_gate_t *gate);
void ngx_zk_lock_gate_refuse(ngx_zk_lock_gate_t *gate, ngx_uint_t i);
void ngx_zk_lock_gate_cancel(ngx_zk_lock_gate_t *gate);
void ngx_zk_lock_gate_done(ngx_zk_lock_gate_t *gate);
ngx_zk_lock_gate_hold_t *ngx_zk_lock_gate_find(ngx_zk_lock_gate_t *gate,
    ngx_zk_lock_node_t *node);
ngx_int_t ngx_zk_lock_gate_cmp(const void *one, const void *two);
size_t ngx_zk_lock_gate_held_len(ngx_zk_lock_gate_t *gate, ngx_uint_t token);
u_char *ngx_zk_lock_gate_held_nodes(ngx_zk_lock_gate_t *gate,
    ngx_uint_t token, u_char *p, u_char *start);
void ngx_zk_lock_gate_waiters(ngx_zk_lock_gate_waiters_t *w,
    ngx_zk_lock_session_t *s, ngx_log_t *log);
void ngx_zk_lock_gate_news(ngx_zk_lock_gate_waiters_t *w);
void ngx_zk_lock_gate_connected(ngx_zk_lock_session_t *s);
void ngx_zk_lock_gate_jeopardy(ngx_zk_lock_session_t *s);
void ngx_zk_lock_gate_heard(ngx_zk_lock_session_t *s);
ngx_int_t ngx_zk_lock_gate_built(ngx_conf_t *cf, char *version, size_t abi);


#endif /* _NGX_ZK_LOCK_GATE_H_INCLUDED_ */
