
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#ifndef _NGX_ZK_LOCK_SEMV2_H_INCLUDED_
#define _NGX_ZK_LOCK_SEMV2_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>

#include "ngx_zk_lock_recipe.h"


ngx_zk_lock_node_t *ngx_zk_lock_semv2_acquire(
    ngx_zk_lock_session_t *s, ngx_str_t *path, ngx_uint_t leases,
    ngx_uint_t weight, ngx_zk_lock_counter_t *counter, ngx_str_t *info,
    ngx_uint_t transient, ngx_zk_lock_notify_pt notify, void *data,
    ngx_log_t *log);
ngx_uint_t ngx_zk_lock_semv2_waiting(ngx_zk_lock_session_t *s,
    ngx_str_t *path);


#endif /* _NGX_ZK_LOCK_SEMV2_H_INCLUDED_ */
