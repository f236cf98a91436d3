
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#ifndef _NGX_HTTP_ZK_LOCK_HANDLER_H_INCLUDED_
#define _NGX_HTTP_ZK_LOCK_HANDLER_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_zk_lock_module.h"
#include "ngx_zk_lock_recipe.h"
#include "ngx_zk_lock_local.h"


/* a lock the client request holds or waits for */

typedef struct {
    ngx_str_t                     path;
    ngx_http_zk_lock_spec_t      *spec;
    ngx_zk_lock_node_t           *node;
    ngx_zk_lock_local_t     *local;      /* zk_lock_fail local= */
    ngx_uint_t                    pass;
    ngx_uint_t                    weight;     /* leases it takes */

    /* who took it: a second take by another is a re-entry */
    ngx_http_request_t           *request;
    ngx_uint_t                    epoch;

    unsigned                      abort:1;    /* zk_lock_lost abort */
    unsigned                      counted:1;  /* as held, in the metrics */
    unsigned                      bypassed:1; /* let through unlocked */
    unsigned                      dry:1;      /* zk_lock_dry_run */
} ngx_http_zk_lock_hold_t;


/*
 * One per client request: the main request owns the locks, so that its
 * subrequests and internal redirects find them held.
 */

typedef struct {
    ngx_array_t                   holds;      /* ngx_http_zk_lock_hold_t */
    ngx_uint_t                    waiting;    /* index in holds */
    ngx_queue_t                   queue;      /* in the worker's waiters */

    /* the locks of one location are taken, or given back, together */
    ngx_uint_t                    pass;
    void                         *pass_conf;

    /* bumped by internal redirects, which clear r->ctx */
    ngx_uint_t                    epoch;

    ngx_http_request_t           *main;
    ngx_http_request_t           *request;    /* the one that waits */
    ngx_array_t                  *blocked;    /* others of the same client */
    ngx_array_t                  *refused;    /* blocked by a failed wait */
    ngx_int_t                     refused_status;
    ngx_event_t                   timer;
    ngx_msec_t                    started;
    ngx_int_t                     status;     /* answer to the waiter */

    /* for the variables */
    ngx_http_zk_lock_event_e      result;
    ngx_msec_t                    wait_time;
} ngx_http_zk_lock_ctx_t;


ngx_int_t ngx_http_zk_lock_handler(ngx_http_request_t *r);
void ngx_http_zk_lock_handler_session(ngx_zk_lock_session_t *s);
ngx_http_zk_lock_ctx_t *ngx_http_zk_lock_handler_find_ctx(
    ngx_http_request_t *r, ngx_uint_t *found);


#endif /* _NGX_HTTP_ZK_LOCK_HANDLER_H_INCLUDED_ */
