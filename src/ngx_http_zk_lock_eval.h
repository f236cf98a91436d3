
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#ifndef _NGX_HTTP_ZK_LOCK_EVAL_H_INCLUDED_
#define _NGX_HTTP_ZK_LOCK_EVAL_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_zk_lock_handler.h"


/* the directive of a lock, as log lines name it */
#define ngx_http_zk_lock_directive(spec)                                     \
    ngx_zk_lock_types[(spec)->lock.type].directive


ngx_int_t ngx_http_zk_lock_eval(ngx_http_request_t *r,
    ngx_http_zk_lock_spec_t *spec, ngx_zk_lock_gate_hold_t *want);
ngx_int_t ngx_http_zk_lock_eval_info(ngx_http_request_t *r, ngx_str_t *info);


#endif /* _NGX_HTTP_ZK_LOCK_EVAL_H_INCLUDED_ */
