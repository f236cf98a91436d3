
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#ifndef _NGX_ZK_LOCK_KEEP_H_INCLUDED_
#define _NGX_ZK_LOCK_KEEP_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>

#include "ngx_zk_lock_recipe.h"
#include "ngx_zk_lock_params.h"
#include "ngx_zk_lock_fair.h"


/*
 * zk_semaphore, zk_mutex, zk_rwlock read ... keep=<time>: a worker keeps
 * the nodes that its requests held, and hands them to its next requests
 * without a ZooKeeper call; see ngx_zk_lock_keep.c for the protocol.
 */


ngx_zk_lock_node_t *ngx_zk_lock_keep_acquire(
    ngx_zk_lock_session_t *s, ngx_str_t *path, ngx_zk_lock_kind_e kind,
    ngx_uint_t leases,
    ngx_zk_lock_counter_t *counter, ngx_msec_t keep,
    ngx_uint_t transient, ngx_zk_lock_params_t *tag, ngx_zk_lock_flow_t *flow,
    ngx_zk_lock_notify_pt notify, ngx_zk_lock_notify_pt recall,
    void *data, ngx_log_t *log);
void ngx_zk_lock_keep_late(ngx_zk_lock_node_t *ticket);
void ngx_zk_lock_keep_listed(ngx_zk_lock_t *lock,
    ngx_zk_lock_child_t *children, ngx_uint_t n);
void ngx_zk_lock_keep_init(void);


#endif /* _NGX_ZK_LOCK_KEEP_H_INCLUDED_ */
