
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#ifndef _NGX_ZK_LOCK_SESSION_H_INCLUDED_
#define _NGX_ZK_LOCK_SESSION_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>
#include <zookeeper/zookeeper.h>

#include "ngx_zk_lock_hosts.h"
#include "ngx_zk_lock_outage.h"
#include "ngx_zk_lock_share.h"


/*
 * The ZooKeeper session of one worker process, shared by all its requests.
 * The single-threaded client's socket is wrapped in an ngx_connection_t and
 * its timeouts in a timer, so that every completion and watch runs from the
 * worker's event loop, inside zookeeper_process().  The session knows
 * nothing of locks or HTTP: it tells its owner what happens through the
 * handlers the owner sets, as ngx_resolver_ctx_t.handler does.
 */

typedef struct ngx_zk_lock_session_s  ngx_zk_lock_session_t;

typedef void (*ngx_zk_lock_session_pt)(ngx_zk_lock_session_t *s);
typedef void (*ngx_zk_lock_watch_pt)(ngx_zk_lock_session_t *s,
    int type, const char *path);

#define NGX_ZK_LOCK_UUID_LEN  36

/* the shortest zk_session_timeout, ms */
#define NGX_ZK_LOCK_MIN_SESSION_TIMEOUT  1000


struct ngx_zk_lock_session_s {
    zhandle_t                    *zh;
    ngx_connection_t             *conn;       /* wraps the client's socket */
    dev_t                         dev;        /* identity of that socket, */
    ino_t                         ino;        /* to detect fd number reuse */

    ngx_event_t                   timer;      /* the client's own timeouts */
    ngx_event_t                   update;     /* posted after API calls */
    ngx_event_t                   renew;      /* new session after expiry */
    ngx_log_t                     log;

    ngx_zk_lock_hosts_t          *hosts;
    ngx_str_t                     chroot;
    ngx_msec_t                    timeout;
    ngx_str_t                     auth;
    struct ACL_vector            *acl;

    /* bumped for every new ZooKeeper session: a node belongs to one */
    ngx_uint_t                    generation;
    ngx_uint_t                    reconnects;
    ngx_uint_t                    jeopardies; /* times it went unheard */

    /* connection attempts since the last connect, and when the next may */
    ngx_uint_t                    attempts;
    ngx_msec_t                    next_attempt;
    ngx_uint_t                    nhosts;
    u_char                        last_server[NGX_SOCKADDR_STRLEN + 1];

    ngx_rbtree_t                  locks;      /* ngx_zk_lock_t by path */
    ngx_rbtree_node_t             sentinel;
    ngx_queue_t                   all;        /* the same locks, as a list */
    ngx_queue_t                   counters;   /* lease counts from znodes */
    ngx_queue_t                   boards;     /* fair=: claims, board.c */

    uint32_t                      instance;   /* of the nginx, see uuid() */
    uint64_t                      uuid_key[2];
    uint64_t                      uuid_seq;
    u_char                        ours[3 + NGX_ZK_LOCK_UUID_LEN];

    /*
     * The time a request that the server answered was sent, the latest:
     * the server heard from the worker then, and cannot expire the
     * session until a session timeout later.  Probes keep it fresh.
     */
    ngx_event_t                   probe;
    ngx_msec_t                    heard;
    ngx_msec_t                    probe_sent;
    ngx_msec_t                    negotiated; /* the server's timeout */

    ngx_zk_lock_outage_t          outage;

    /* the owner's: each may be NULL */
    ngx_zk_lock_session_pt        state_handler;   /* any change of state */
    ngx_zk_lock_session_pt        connect_handler; /* connected, or again */
    ngx_zk_lock_session_pt        expire_handler;  /* its nodes are gone */
    ngx_zk_lock_session_pt        jeopardy_handler; /* it may expire */
    ngx_zk_lock_session_pt        heard_handler;   /* jeopardy is over */
    ngx_zk_lock_session_pt        reach_handler;   /* gone, or back: the
                                                      broker's, any change */
    ngx_zk_lock_session_pt        close_handler;   /* at exit, closed */
    ngx_zk_lock_watch_pt          watch_handler;   /* a node watch fired */
    void                         *data;

    /* zk_sessions, of this session's layer: its broker, its asks */
    struct ngx_zk_lock_broker_s  *broker;
    struct ngx_zk_lock_remotes_s *remotes;

    unsigned                      connected:1;
    unsigned                      down:1;     /* an attempt has failed */
    unsigned                      exiting:1;
    unsigned                      verified:1; /* conn checked, connected */
    unsigned                      corked:1;   /* requests are being batched */
    unsigned                      drained:1;  /* all answered, at exit */
    unsigned                      live:1;     /* connected once: has nodes */
    unsigned                      probing:1;  /* a probe is unanswered */
    unsigned                      jeopardy:1; /* heard from too long ago */
    unsigned                      brokered:1; /* none: a sibling's serves */
    unsigned                      borrow:1;   /* kept leases: worker 0's */
    unsigned                      siblings:1; /* their brokers may serve */
    unsigned                      stale:1;    /* the client's hosts are */
    unsigned                      cut:1;      /* the timeout said cut */
};


/*
 * The leases held through the session can no longer be counted on, nor
 * new ones had: it may have expired unheard of, or there is none and
 * ZooKeeper is out of reach.  A session that only lost its connection
 * still counts: its nodes block others as long as it lives.
 */

#define ngx_zk_lock_session_gone(s)                                      \
    ((s)->jeopardy || ngx_zk_lock_session_none(s))

/*
 * No session, and the server cannot be reached or refuses to make one
 * (maxClientCnxns): a sibling's session may still serve (zk_sessions)
 */

#define ngx_zk_lock_session_none(s)                                      \
    (!(s)->live && (s)->down)


/*
 * Connected, but no answer for longer than the client's own ping interval
 * (a third of the timeout; probes ask twice as often): a server that
 * hangs (SIGSTOP, a full disk, a long GC) rather than refuses
 */

#define ngx_zk_lock_session_silent(s)                                    \
    ((s)->live && !(s)->brokered                                         \
     && ngx_current_msec - (s)->heard > (s)->negotiated / 3)

/* connected, and heard from: its holders hold */
#define ngx_zk_lock_session_usable(s)                                    \
    ((s)->connected && !(s)->jeopardy)


ngx_int_t ngx_zk_lock_session_instance(ngx_log_t *log,
    ngx_zk_lock_session_t *s);
ngx_int_t ngx_zk_lock_session_random(ngx_log_t *log, void *buf, size_t len);
ngx_int_t ngx_zk_lock_session_init(ngx_cycle_t *cycle,
    ngx_zk_lock_session_t *s);
void ngx_zk_lock_session_close(ngx_zk_lock_session_t *s);
void ngx_zk_lock_session_batch(ngx_zk_lock_session_t *s);
void ngx_zk_lock_session_watcher(zhandle_t *zh, int type, int state,
    const char *path, void *ctx);
void ngx_zk_lock_session_uuid(ngx_zk_lock_session_t *s,
    u_char *buf);
ngx_uint_t ngx_zk_lock_session_ours(ngx_zk_lock_session_t *s,
    u_char *name);
ngx_int_t ngx_zk_lock_session_error(int error);
const char *ngx_zk_lock_session_advice(int error);
ngx_msec_t ngx_zk_lock_session_trust(ngx_zk_lock_session_t *s);


#endif /* _NGX_ZK_LOCK_SESSION_H_INCLUDED_ */
