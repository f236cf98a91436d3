
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#ifndef _NGX_HTTP_ZK_LOCK_METRICS_H_INCLUDED_
#define _NGX_HTTP_ZK_LOCK_METRICS_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_zk_lock_module.h"


/* what happened to a request at a lock directive */
typedef enum {
    NGX_HTTP_ZK_LOCK_M_WAIT = 0,    /* starts waiting */
    NGX_HTTP_ZK_LOCK_M_UNWAIT,      /* stops waiting: gone, or given back */
    NGX_HTTP_ZK_LOCK_M_ACQUIRED,    /* stops waiting, holds; with the time */
    NGX_HTTP_ZK_LOCK_M_TIMEOUT,     /* stops waiting */
    NGX_HTTP_ZK_LOCK_M_ERROR,       /* stops waiting */
    NGX_HTTP_ZK_LOCK_M_BYPASSED,    /* stops waiting, or never started */
    NGX_HTTP_ZK_LOCK_M_REJECTED,
    NGX_HTTP_ZK_LOCK_M_RELEASED,    /* held no more */
    NGX_HTTP_ZK_LOCK_M_LOST         /* held no more: the session expired */
} ngx_http_zk_lock_event_e;


ngx_int_t ngx_http_zk_lock_metrics_init(ngx_conf_t *cf,
    ngx_http_zk_lock_main_conf_t *lmcf);
void ngx_http_zk_lock_metrics_worker(void);
void ngx_http_zk_lock_metrics_count(ngx_http_zk_lock_spec_t *spec,
    ngx_http_zk_lock_event_e event, ngx_msec_t waited);
void ngx_http_zk_lock_metrics_session(ngx_http_zk_lock_session_t *s);
char *ngx_http_zk_lock_status_page(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);


#endif /* _NGX_HTTP_ZK_LOCK_METRICS_H_INCLUDED_ */
