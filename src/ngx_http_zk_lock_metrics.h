
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#ifndef _NGX_HTTP_ZK_LOCK_METRICS_H_INCLUDED_
#define _NGX_HTTP_ZK_LOCK_METRICS_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_zk_lock_module.h"


ngx_int_t ngx_http_zk_lock_metrics_init(ngx_conf_t *cf,
    ngx_http_zk_lock_main_conf_t *lmcf);
void ngx_http_zk_lock_metrics_worker(void);
void ngx_http_zk_lock_metrics_exit(void);
void ngx_http_zk_lock_metrics_count(ngx_http_zk_lock_spec_t *spec,
    ngx_http_zk_lock_event_e event, ngx_msec_t waited);
void ngx_http_zk_lock_metrics_keep(ngx_zk_lock_params_t *lp,
    ngx_int_t idle, ngx_uint_t given_back);
void ngx_http_zk_lock_metrics_session(ngx_zk_lock_session_t *s);
void ngx_http_zk_lock_metrics_leases(u_char *path, ngx_uint_t value);
void ngx_http_zk_lock_metrics_timeouts(ngx_conf_t *cf,
    ngx_http_zk_lock_loc_conf_t *llcf);
char *ngx_http_zk_lock_metrics_buckets(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
char *ngx_http_zk_lock_status_page(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);


#endif /* _NGX_HTTP_ZK_LOCK_METRICS_H_INCLUDED_ */
