
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#ifndef _NGX_STREAM_ZK_LOCK_HANDLER_H_INCLUDED_
#define _NGX_STREAM_ZK_LOCK_HANDLER_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_stream.h>

#include "ngx_stream_zk_lock_module.h"


void ngx_stream_zk_lock_handler(ngx_stream_session_t *s);


#endif /* _NGX_STREAM_ZK_LOCK_HANDLER_H_INCLUDED_ */
