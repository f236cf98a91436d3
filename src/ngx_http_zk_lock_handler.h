
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#ifndef _NGX_HTTP_ZK_LOCK_HANDLER_H_INCLUDED_
#define _NGX_HTTP_ZK_LOCK_HANDLER_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_zk_lock_module.h"
#include "ngx_zk_lock_gate.h"


typedef struct ngx_http_zk_lock_ctx_s  ngx_http_zk_lock_ctx_t;


/*
 * The locks of one location that the client request took together, in
 * the core's gate: its holds are the locks, taken in the gate's order
 */

typedef struct {
    ngx_zk_lock_gate_t             gate;       /* first */
    ngx_http_zk_lock_ctx_t        *ctx;
    ngx_http_zk_lock_loc_conf_t   *conf;

    /* who took them: a second take by another is a re-entry */
    ngx_http_request_t            *request;
    ngx_uint_t                     epoch;

    unsigned                       dry:1;      /* zk_lock_dry_run */
} ngx_http_zk_lock_pass_t;


/*
 * One per client request: the main request owns the locks, so that its
 * subrequests and internal redirects find them held.
 */

struct ngx_http_zk_lock_ctx_s {
    ngx_array_t                    passes;     /* ngx_http_zk_lock_pass_t * */
    ngx_http_zk_lock_pass_t       *waiting;

    /* bumped by internal redirects, which clear r->ctx */
    ngx_uint_t                     epoch;

    ngx_http_request_t            *main;
    ngx_http_request_t            *request;    /* the one that waits */
    ngx_array_t                   *blocked;    /* others of the same client */
    ngx_array_t                   *refused;    /* blocked by a failed wait */
    ngx_int_t                      refused_status;
    ngx_int_t                      status;     /* answer to the waiter */

    /* for the variables */
    ngx_http_zk_lock_event_e       result;
    ngx_msec_t                     wait_time;
};


#define ngx_http_zk_lock_spec(hold)  ((ngx_http_zk_lock_spec_t *) (hold)->lock)


ngx_int_t ngx_http_zk_lock_handler(ngx_http_request_t *r);
ngx_http_zk_lock_ctx_t *ngx_http_zk_lock_handler_find_ctx(
    ngx_http_request_t *r, ngx_uint_t *found);


#endif /* _NGX_HTTP_ZK_LOCK_HANDLER_H_INCLUDED_ */
