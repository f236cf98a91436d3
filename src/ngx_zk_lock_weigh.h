
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#ifndef _NGX_ZK_LOCK_WEIGH_H_INCLUDED_
#define _NGX_ZK_LOCK_WEIGH_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>

#include "ngx_zk_lock_pool.h"


/* a pool of kept leases weighed in the fleet: see ngx_zk_lock_weigh.c */


void ngx_zk_lock_weigh_shares(ngx_zk_lock_pool_t *pool, ngx_uint_t leases);
void ngx_zk_lock_weigh_claim(ngx_zk_lock_pool_t *pool);
void ngx_zk_lock_weigh_back(ngx_zk_lock_pool_t *pool,
    ngx_zk_lock_node_t *ticket);
void ngx_zk_lock_weigh_handler(ngx_event_t *ev);
ngx_uint_t ngx_zk_lock_weigh_fair_max(ngx_zk_lock_pool_t *pool,
    ngx_zk_lock_params_t *lp);
void ngx_zk_lock_weigh_doom(ngx_zk_lock_pool_t *pool,
    ngx_zk_lock_child_t *children, ngx_uint_t n, ngx_uint_t leases,
    ngx_zk_lock_part_t *parts, ngx_uint_t np);
void ngx_zk_lock_weigh_starve_handler(ngx_event_t *ev);


#endif /* _NGX_ZK_LOCK_WEIGH_H_INCLUDED_ */
