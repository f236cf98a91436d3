
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#ifndef _NGX_HTTP_ZK_LOCK_PARAMS_H_INCLUDED_
#define _NGX_HTTP_ZK_LOCK_PARAMS_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_zk_lock_module.h"


char *ngx_http_zk_lock_params(ngx_conf_t *cf, ngx_command_t *cmd,
    ngx_http_zk_lock_spec_t *spec);


#endif /* _NGX_HTTP_ZK_LOCK_PARAMS_H_INCLUDED_ */
