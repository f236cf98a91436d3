
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#ifndef _NGX_ZK_LOCK_PATH_H_INCLUDED_
#define _NGX_ZK_LOCK_PATH_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>

#include "ngx_zk_lock_session.h"
#include "ngx_zk_lock_listing.h"


/*
 * One lock path with participants in this worker, and what ZooKeeper is
 * asked of it as a whole: its listings (one at a time, the next one asked
 * for while one is on its way), the watches on its children (each set
 * once), its parents (containers, as Curator makes them) and, once idle,
 * the deletion of a path built from a request.  What the participants
 * make of a listing or of a node gone is their owner's: it is told
 * through the handlers that it gave (see ngx_zk_lock_owner_t).
 * Also the rule for a segment of a path, which configuration and
 * requests alike must follow.
 */


/* the longest path, the bound of zk_lock_max_path: ZooKeeper allows longer */
#define NGX_ZK_LOCK_MAX_PATH  4096

/*
 * A holder of kept leases lists the children at most this often, ms;
 * keep.c slows it down as the participants grow, see keep_listed()
 */
#define NGX_ZK_LOCK_PATH_HEAR  100


typedef struct ngx_zk_lock_s       ngx_zk_lock_t;

/* the leases a worker keeps on a path, see ngx_zk_lock_keep.c */
typedef struct ngx_zk_lock_pool_s  ngx_zk_lock_pool_t;

typedef void (*ngx_zk_lock_listed_pt)(ngx_zk_lock_t *lock,
    const struct String_vector *strings, ngx_uint_t id);
typedef void (*ngx_zk_lock_gone_pt)(ngx_zk_lock_t *lock,
    uint32_t seq);

typedef void (*ngx_zk_lock_vetted_pt)(ngx_zk_lock_t *lock);

typedef struct {
    ngx_zk_lock_listed_pt    listed;     /* a listing answered */
    ngx_zk_lock_gone_pt      gone;       /* a node to watch was gone */
    ngx_zk_lock_vetted_pt    vetted;     /* see path_vet() */
} ngx_zk_lock_owner_t;


/* what is known of the node a path's variable names, see path_vet() */

typedef enum {
    NGX_ZK_LOCK_VET_NONE = 0,
    NGX_ZK_LOCK_VET_SENT,
    NGX_ZK_LOCK_VET_OK,
    NGX_ZK_LOCK_VET_FOREIGN
} ngx_zk_lock_vet_e;


/*
 * The data of the containers that the module makes for lock paths: it
 * deletes an idle one of a path from a request only when it finds this
 */
#define NGX_ZK_LOCK_MARK  "ngx_http_zk_lock_module"


/* what a configuration message quotes of a long path: its ends */
#define NGX_ZK_LOCK_SHORT_HEAD     96
#define NGX_ZK_LOCK_SHORT_TAIL     32


/* "<path>/" + child name + '\0' */
#define NGX_ZK_LOCK_BUF_LEN        (NGX_ZK_LOCK_MAX_PATH + 66)


/*
 * The watches a worker remembers in one lock, so as to set each once: the
 * first room; it grows to a window of any lease count (a table of 16 made
 * a waiter for 32 leases set 16 watches again at each listing: most of
 * what a lease change cost at 32 nginx)
 */
#define NGX_ZK_LOCK_WATCHED  16


/* one lock path with participants in this worker */

struct ngx_zk_lock_s {
    ngx_str_node_t                sn;         /* key: the path */
    ngx_queue_t                   queue;      /* in session->all */
    ngx_queue_t                   nodes;
    ngx_zk_lock_session_t        *session;
    ngx_zk_lock_owner_t          *owner;
    ngx_uint_t                    refs;       /* nodes and completions */
    ngx_uint_t                    sent;       /* listings asked for */
    ngx_uint_t                    answered;   /* listings answered */
    ngx_uint_t                    nwatched;
    ngx_uint_t                    watch_room;
    uint32_t                     *watched;    /* sorted */

    ngx_zk_lock_listing_t         listing;    /* the last one */
    ngx_uint_t                    span;       /* the entries to watch there */
    ngx_uint_t                    transient;  /* levels to delete when idle */
    ngx_zk_lock_pool_t           *pool;       /* keep=: the worker's leases */
    ngx_uint_t                    tickets;    /* requests waiting there */
    ngx_msec_t                    heard;      /* its last listing, hear */
    ngx_msec_t                    pace;       /* between two, hear */
    ngx_event_t                   hearing;    /* the next, see path_heard() */

    unsigned                      count:1;    /* lists with a watch */
    unsigned                      keep:1;     /* a pool's, see keep.c */
    unsigned                      hear:1;     /* lists with a watch, keep.c */
    unsigned                      eager:1;    /* ... unpaced: it holds none */
    unsigned                      first:1;    /* ... or it waits first */
    unsigned                      wanted:1;   /* a listing, after this one */
    unsigned                      deep:1;     /* see path_window() */
    unsigned                      reads:1;    /* readers wait */
    unsigned                      made:1;     /* a node created here */
    unsigned                      denied:1;   /* a parent's create: NOAUTH */
    unsigned                      vet:2;      /* ngx_zk_lock_vet_e */
    u_char                        path[1];
};



ngx_zk_lock_t *ngx_zk_lock_path_get(ngx_zk_lock_session_t *s,
    ngx_str_t *path, ngx_zk_lock_owner_t *owner);
ngx_zk_lock_t *ngx_zk_lock_path_find(ngx_zk_lock_session_t *s,
    u_char *path, size_t len);
void ngx_zk_lock_path_gc(ngx_zk_lock_t *lock);
void ngx_zk_lock_path_ask(ngx_zk_lock_t *lock);
void ngx_zk_lock_path_relist(ngx_zk_lock_t *lock);
void ngx_zk_lock_path_heard(ngx_zk_lock_t *lock);
ngx_int_t ngx_zk_lock_path_list(ngx_zk_lock_t *lock);
void ngx_zk_lock_path_create_parents(ngx_zk_lock_t *lock);
ngx_zk_lock_vet_e ngx_zk_lock_path_vet(ngx_zk_lock_t *lock);
void ngx_zk_lock_path_window(ngx_zk_lock_t *lock);
void ngx_zk_lock_path_watch(ngx_zk_lock_t *lock, u_char *name);
void ngx_zk_lock_path_unwatch(ngx_zk_lock_t *lock, uint32_t seq);
void ngx_zk_lock_path_unwatch_gone(ngx_zk_lock_t *lock,
    ngx_zk_lock_child_t *children, ngx_uint_t n);
const char *ngx_zk_lock_path_check(ngx_str_t *path, ngx_uint_t top,
    ngx_uint_t *n);
const char *ngx_zk_lock_path_check_segment(ngx_str_t *seg,
    ngx_uint_t top);
u_char *ngx_zk_lock_path_child(u_char *buf, ngx_zk_lock_t *lock,
    u_char *name);
ngx_str_t *ngx_zk_lock_path_short(ngx_pool_t *pool, ngx_str_t *path);


#endif /* _NGX_ZK_LOCK_PATH_H_INCLUDED_ */
