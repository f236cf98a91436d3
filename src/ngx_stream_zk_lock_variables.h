
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#ifndef _NGX_STREAM_ZK_LOCK_VARIABLES_H_INCLUDED_
#define _NGX_STREAM_ZK_LOCK_VARIABLES_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_stream.h>

#include "ngx_stream_zk_lock_module.h"


ngx_int_t ngx_stream_zk_lock_variables_add(ngx_conf_t *cf);
ngx_stream_complex_value_t *ngx_stream_zk_lock_variables_compile(
    ngx_conf_t *cf, ngx_str_t *value);
ngx_int_t ngx_stream_zk_lock_variables_path(ngx_stream_session_t *s,
    ngx_stream_zk_lock_spec_t *spec, ngx_uint_t top, ngx_str_t *path);
ngx_int_t ngx_stream_zk_lock_variables_weight(ngx_stream_session_t *s,
    ngx_stream_zk_lock_spec_t *spec, ngx_uint_t *weight);
ngx_int_t ngx_stream_zk_lock_variables_flow(ngx_stream_session_t *s,
    ngx_stream_zk_lock_spec_t *spec, ngx_zk_lock_flow_t *flow);


#endif /* _NGX_STREAM_ZK_LOCK_VARIABLES_H_INCLUDED_ */
