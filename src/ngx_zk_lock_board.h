
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#ifndef _NGX_ZK_LOCK_BOARD_H_INCLUDED_
#define _NGX_ZK_LOCK_BOARD_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>

#include "ngx_zk_lock_session.h"
#include "ngx_zk_lock_class.h"


/*
 * fair=: what each instance claims of a path's leases (fair.c, share.c),
 * told to the others through ZooKeeper.  Beside the lock "P", the
 * container "P.fair" has one ephemeral node per worker that serves fair
 * flows on P, named by its nodes' prefix ("_c_" and 18 characters of
 * the UUID), whose data is its claim in thousandths of a flow, in
 * decimal.  A worker writes its own at most once a quantum, and only
 * while others wait on the path; it reads and watches the others'.
 *
 *     P.fair/_c_0a0a0a0a-1111-4111     "2565"
 *     P.fair/_c_0b0b0b0b-2222-4222     "1000"
 *
 * With priority=, each class that the worker serves follows, with its
 * claim and its demand (thousandths of leases: its requests alive, on
 * average), by name, so that instances that number their classes apart
 * still agree:
 *
 *     P.fair/_c_0c0c0c0c-1111-4111  "3000 critical=1000/900 batch=2000/4000"
 */


typedef struct ngx_zk_lock_board_s  ngx_zk_lock_board_t;


/* priority=: each class's claim and demand, by index */

typedef struct {
    ngx_uint_t                    claim[NGX_ZK_LOCK_CLASS_MAX];
    ngx_uint_t                    demand[NGX_ZK_LOCK_CLASS_MAX];
} ngx_zk_lock_board_class_t;


/* priority=: the classes across the fleet, see board_classes() */

typedef struct {
    ngx_zk_lock_class_alloc_t     a;          /* demands and parts */
    uint64_t                      claims[NGX_ZK_LOCK_CLASS_MAX];
    uint64_t                      mine[NGX_ZK_LOCK_CLASS_MAX];
} ngx_zk_lock_board_fleet_t;


ngx_zk_lock_board_t *ngx_zk_lock_board(ngx_zk_lock_session_t *s,
    ngx_str_t *path, ngx_zk_lock_classes_t *classes);
void ngx_zk_lock_board_leave(ngx_zk_lock_board_t *b);
void ngx_zk_lock_board_classify(ngx_zk_lock_board_t *b,
    ngx_zk_lock_classes_t *classes);
void ngx_zk_lock_board_post(ngx_zk_lock_board_t *b, ngx_uint_t claim,
    ngx_zk_lock_board_class_t *cls);
void ngx_zk_lock_board_classes(ngx_zk_lock_board_t *b, uint64_t cap,
    ngx_zk_lock_board_fleet_t *fl);
uint64_t ngx_zk_lock_board_worth(ngx_zk_lock_board_t *b);
ngx_uint_t ngx_zk_lock_board_behind(ngx_zk_lock_board_t *b, ngx_uint_t k,
    uint64_t demand);
ngx_uint_t ngx_zk_lock_board_seats(ngx_zk_lock_board_t *b, uint64_t extra);
ngx_uint_t ngx_zk_lock_board_mine(ngx_zk_lock_board_t *b);
ngx_uint_t ngx_zk_lock_board_claim(void *data, u_char *worker);
void ngx_zk_lock_boards_connected(ngx_zk_lock_session_t *s);
void ngx_zk_lock_board_watch(ngx_zk_lock_session_t *s, int type,
    const char *path);
void ngx_zk_lock_boards_free(ngx_zk_lock_session_t *s);


#endif /* _NGX_ZK_LOCK_BOARD_H_INCLUDED_ */
