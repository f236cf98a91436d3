
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#ifndef _NGX_ZK_LOCK_FAIR_H_INCLUDED_
#define _NGX_ZK_LOCK_FAIR_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>

#include "ngx_zk_lock_recipe.h"
#include "ngx_zk_lock_params.h"
#include "ngx_zk_lock_class.h"


/*
 * fair=<key> fair_weight=<n>: the requests of a pool of kept leases
 * (keep.c) are served weighted fair between their flows rather than first
 * come, first served; see ngx_zk_lock_fair.c.
 */


/* the longest fair_weight= */
#define NGX_ZK_LOCK_FAIR_WEIGHT_MAX  1000

/* $zk_lock_flow: 16 hex digits */
#define NGX_ZK_LOCK_FAIR_ID_LEN  16

/* the flows a status page shows, for each lock */
#define NGX_ZK_LOCK_FAIR_TOP  5


/* a request's flow, as the layer evaluated it */

typedef struct {
    uint64_t                      id;         /* its key, hashed; 0: none */
    ngx_uint_t                    weight;
    ngx_uint_t                    cls;        /* priority=: its class */
} ngx_zk_lock_flow_t;


/* a flow as the status page shows it: its hash, never its key */

typedef struct {
    uint64_t                      id;         /* 0: none */
    uint32_t                      held;
    uint32_t                      waiting;
    uint32_t                      weight;
} ngx_zk_lock_fair_top_t;


/* priority=: a class in a pool, as the status page shows it */

typedef struct {
    uint32_t                      held;
    uint32_t                      waiting;
    uint32_t                      part;       /* thousandths of leases */
} ngx_zk_lock_fair_load_t;


typedef struct {
    uint64_t                      level;      /* a flow's: 0, fair.level */
    uint64_t                      target;     /* thousandths of leases */
    uint64_t                      vtime;      /* held ms over target */
    uint64_t                      gone;       /* claim of flows that left */
    uint64_t                      gone_busy;  /* ... their tickets' ms */
    ngx_uint_t                    claim;      /* thousandths of a flow */
    ngx_uint_t                    demand;     /* thousandths of leases */
    ngx_uint_t                    alive;      /* its tickets, now */
    unsigned                      reserved:1; /* comes back to seats idle
                                                 for it */
} ngx_zk_lock_fair_class_t;


typedef struct {
    ngx_queue_t                   flows;      /* with a ticket alive */
    ngx_uint_t                    nflows;
    uint64_t                      vtime;      /* the last served flow's */
    ngx_msec_t                    hold;       /* a request's, on average */

    /* the claim on the fleet's leases, see claim() */
    uint64_t                      level;      /* a flow's, as share.c saw */
    ngx_msec_t                    start;      /* of the window */
    ngx_uint_t                    claim;      /* thousandths of a flow */

    /*
     * priority=: the classes, and for each the claim and the demand of
     * the last window, and what the fleet gives them here (keep.c)
     */
    ngx_zk_lock_classes_t        *classes;    /* NULL: one class, 0 */
    uint64_t                      cvtime;     /* the last served class's */
    ngx_zk_lock_fair_class_t      cls[NGX_ZK_LOCK_CLASS_MAX];
} ngx_zk_lock_fair_t;


ngx_int_t ngx_zk_lock_fair_secret(ngx_log_t *log);
uint64_t ngx_zk_lock_fair_hash(ngx_str_t *key);
ngx_int_t ngx_zk_lock_fair_weight(ngx_str_t *value);
ngx_int_t ngx_zk_lock_fair_flow(ngx_zk_lock_flow_t *flow,
    ngx_zk_lock_params_t *lp, ngx_str_t *key, ngx_str_t *weight,
    ngx_str_t *class, ngx_log_t *log);
ngx_int_t ngx_zk_lock_fair_value(ngx_pool_t *pool, uint64_t id,
    ngx_variable_value_t *v);
void ngx_zk_lock_fair_init(ngx_zk_lock_fair_t *fair);
ngx_int_t ngx_zk_lock_fair_join(ngx_zk_lock_fair_t *fair,
    ngx_zk_lock_node_t *ticket, ngx_zk_lock_flow_t *flow, ngx_uint_t max);
ngx_zk_lock_node_t *ngx_zk_lock_fair_next(ngx_zk_lock_fair_t *fair,
    ngx_queue_t *tickets);
void ngx_zk_lock_fair_start(ngx_zk_lock_fair_t *fair,
    ngx_zk_lock_node_t *ticket);
ngx_zk_lock_node_t *ngx_zk_lock_fair_leave(ngx_zk_lock_fair_t *fair,
    ngx_zk_lock_node_t *ticket);
ngx_uint_t ngx_zk_lock_fair_claim(ngx_zk_lock_fair_t *fair);
ngx_uint_t ngx_zk_lock_fair_alive(ngx_zk_lock_fair_t *fair,
    ngx_zk_lock_node_t *ticket, ngx_uint_t *cls);
ngx_uint_t ngx_zk_lock_fair_reserved(ngx_zk_lock_fair_t *fair,
    ngx_queue_t *tickets);
ngx_uint_t ngx_zk_lock_fair_loads(ngx_zk_lock_fair_t *fair,
    ngx_queue_t *tickets, ngx_zk_lock_fair_load_t *load);
void ngx_zk_lock_fair_loads_add(ngx_zk_lock_fair_load_t *load,
    ngx_zk_lock_fair_load_t *slot);
ngx_uint_t ngx_zk_lock_fair_top(ngx_zk_lock_fair_t *fair,
    ngx_zk_lock_fair_top_t *top);
void ngx_zk_lock_fair_top_set(ngx_zk_lock_fair_top_t *slot,
    ngx_zk_lock_fair_top_t *top, ngx_uint_t n);
ngx_uint_t ngx_zk_lock_fair_top_add(ngx_zk_lock_fair_top_t *top, ngx_uint_t n,
    ngx_zk_lock_fair_top_t *slot);


#endif /* _NGX_ZK_LOCK_FAIR_H_INCLUDED_ */
