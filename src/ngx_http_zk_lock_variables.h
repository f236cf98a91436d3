
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#ifndef _NGX_HTTP_ZK_LOCK_VARIABLES_H_INCLUDED_
#define _NGX_HTTP_ZK_LOCK_VARIABLES_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>


/* $zk_lock_status, $zk_lock_wait_time, $zk_lock_node, $zk_lock_token */

ngx_int_t ngx_http_zk_lock_add_variables(ngx_conf_t *cf);


#endif /* _NGX_HTTP_ZK_LOCK_VARIABLES_H_INCLUDED_ */
