
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#ifndef _NGX_HTTP_ZK_LOCK_SNAP_H_INCLUDED_
#define _NGX_HTTP_ZK_LOCK_SNAP_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_zk_lock_module.h"
#include "ngx_zk_lock_session.h"


/*
 * A snapshot of the fleet's locks for the fleet view: each lock's
 * participants in the order of the queue, their data and their ages, read
 * from ZooKeeper through the worker's session into a pool of its own
 */


/* the children whose data is read, per path, in the order of the queue */
#define NGX_HTTP_ZK_LOCK_SNAP_MAX       100

/* the bytes of a node's data kept: the module writes at most 256 */
#define NGX_HTTP_ZK_LOCK_SNAP_DATA      512

/* fair=: the instances' claims beside a lock (board.c) */
#define NGX_HTTP_ZK_LOCK_SNAP_BOARD     ".fair"


typedef struct ngx_http_zk_lock_snap_s       ngx_http_zk_lock_snap_t;
typedef struct ngx_http_zk_lock_snap_lock_s  ngx_http_zk_lock_snap_lock_t;

typedef void (*ngx_http_zk_lock_snap_pt)(ngx_http_zk_lock_snap_t *snap);


/* a participant's node, as listed */

typedef struct {
    ngx_http_zk_lock_snap_lock_t  *lock;
    ngx_str_t                      name;
    ngx_str_t                      data;      /* its first bytes */
    size_t                         size;      /* of all its data */
    int64_t                        ctime;     /* ms, from its stat */
    int64_t                        granted;   /* ms, by this worker's recipe */
    int64_t                        since;     /* ms: holds, or waits, since */
    uint32_t                       seq;
    ngx_uint_t                     writes;    /* write nodes ahead */
    unsigned                       write:1;
    unsigned                       read:1;    /* its data answered */
    unsigned                       gone:1;    /* deleted since listed */
    unsigned                       holds:1;   /* by the recipe's rule */
    unsigned                       exact:1;   /* "since" is its grant */
} ngx_http_zk_lock_snap_child_t;


/* fair=: an instance's claim, as its node on the board says */

typedef struct {
    ngx_http_zk_lock_snap_lock_t  *lock;
    u_char                         name[NGX_ZK_LOCK_OURS_LEN];
    ngx_int_t                      claim;     /* thousandths; -1: unread */
} ngx_http_zk_lock_snap_claim_t;


/* a lock path, as read */

struct ngx_http_zk_lock_snap_lock_s {
    ngx_http_zk_lock_snap_t        *snap;
    ngx_str_t                       path;     /* null-terminated */
    size_t                          base;     /* of path, before a suffix */
    const char                     *type;
    ngx_uint_t                      leases;
    ngx_uint_t                      total;    /* participants listed */
    ngx_uint_t                      n;        /* of them, read */
    ngx_http_zk_lock_snap_child_t  *children;
    ngx_uint_t                      shadow;   /* its dry run's: index + 1 */
    ngx_http_zk_lock_snap_claim_t  *claims;   /* fair=: the board's */
    ngx_uint_t                      nclaims;
    int                             rc;       /* of the listing */
    unsigned                        rw:1;     /* the read/write rule */
    unsigned                        live:1;   /* not configured literally */
    unsigned                        dry:1;    /* a shadow: see shadows() */
    unsigned                        fair:1;   /* its board is read too */
};


struct ngx_http_zk_lock_snap_s {
    ngx_pool_t                     *pool;     /* the snapshot's memory */
    ngx_array_t                     locks;    /* snap_lock_t */
    ngx_uint_t                      pending;  /* answers to come */
    time_t                          time;     /* when it was read */
    int64_t                         msec;     /* when it was complete, ms */
    ngx_zk_lock_session_t          *session;  /* read through */
    ngx_http_zk_lock_main_conf_t   *lmcf;     /* the locks configured */
    ngx_http_zk_lock_snap_pt        handler;  /* the last answer is in */
    void                           *data;
    unsigned                        failed:1; /* an answer was no answer */
};


ngx_http_zk_lock_snap_t *ngx_http_zk_lock_snap_read(ngx_zk_lock_session_t *s,
    ngx_http_zk_lock_main_conf_t *lmcf, ngx_http_zk_lock_snap_pt handler,
    void *data);
void ngx_http_zk_lock_snap_ages(ngx_http_zk_lock_snap_t *snap,
    ngx_http_zk_lock_snap_t *prev);


#endif /* _NGX_HTTP_ZK_LOCK_SNAP_H_INCLUDED_ */
