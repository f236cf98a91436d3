
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#ifndef _NGX_HTTP_ZK_LOCK_STATUS_H_INCLUDED_
#define _NGX_HTTP_ZK_LOCK_STATUS_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>


/*
 * The status page (zk_lock_status_page): the metrics zone's counts and
 * the stream layer's, as JSON or Prometheus text
 */


char *ngx_http_zk_lock_status_page(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
void ngx_http_zk_lock_status_exit(void);


#endif /* _NGX_HTTP_ZK_LOCK_STATUS_H_INCLUDED_ */
