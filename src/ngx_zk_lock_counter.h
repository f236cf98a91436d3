
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#ifndef _NGX_ZK_LOCK_COUNTER_H_INCLUDED_
#define _NGX_ZK_LOCK_COUNTER_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>

#include "ngx_zk_lock_session.h"


/*
 * Curator's semaphores take their leases as a Java int, and ZooKeeper
 * numbers a lock's children in 32 bits: more leases would never bound
 * (leases=, and a count read from ZooKeeper)
 */
#define NGX_ZK_LOCK_MAX_LEASES  2147483647


/*
 * A lease count kept in a znode (Curator's SharedCount: a 4-byte big-endian
 * integer; ASCII decimal too), read and watched by every worker.
 */

typedef struct {
    ngx_queue_t                   queue;      /* in session->counters */
    ngx_zk_lock_session_t        *session;
    ngx_uint_t                    value;      /* 0: unknown, use the default */
    unsigned                      reading:1;
    u_char                        path[1];
} ngx_zk_lock_counter_t;


/* tells the layer above that a count changed: the locks using it */
typedef void (*ngx_zk_lock_recount_pt)(ngx_zk_lock_session_t *s,
    ngx_zk_lock_counter_t *c);


void ngx_zk_lock_counters_handler(ngx_zk_lock_recount_pt handler);
ngx_zk_lock_counter_t *ngx_zk_lock_counter(
    ngx_zk_lock_session_t *s, ngx_str_t *path);
void ngx_zk_lock_counters_connected(ngx_zk_lock_session_t *s);
ngx_int_t ngx_zk_lock_counter_watch(ngx_zk_lock_session_t *s,
    const char *path);
void ngx_zk_lock_counters_free(ngx_zk_lock_session_t *s);


#endif /* _NGX_ZK_LOCK_COUNTER_H_INCLUDED_ */
