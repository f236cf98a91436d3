
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#ifndef _NGX_HTTP_ZK_LOCK_FLEET_H_INCLUDED_
#define _NGX_HTTP_ZK_LOCK_FLEET_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_zk_lock_snap.h"


/* what the fleet view tells of a worker and its last snapshot */

typedef struct {
    ngx_http_zk_lock_snap_t        *snap;     /* the last complete, or NULL */
    ngx_zk_lock_session_t          *session;  /* NULL: none */
    ngx_uint_t                      reads;    /* complete ones */
    ngx_msec_t                      age;      /* of snap, ms */
    ngx_uint_t                      stale;    /* the read failed, or took
                                                 too long */
} ngx_http_zk_lock_fleet_t;


ngx_chain_t *ngx_http_zk_lock_fleet_json(ngx_pool_t *pool, ngx_log_t *log,
    ngx_http_zk_lock_fleet_t *fleet);


#endif /* _NGX_HTTP_ZK_LOCK_FLEET_H_INCLUDED_ */
