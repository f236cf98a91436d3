
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#ifndef _NGX_HTTP_ZK_LOCK_OUT_H_INCLUDED_
#define _NGX_HTTP_ZK_LOCK_OUT_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_zk_lock_metrics.h"
#include "ngx_zk_lock_stats.h"


/*
 * A page written into pool chunks as it goes (the status page's, the
 * fleet view's), and what the status page's two formats, JSON
 * (ngx_http_zk_lock_status.c) and Prometheus text
 * (ngx_http_zk_lock_prom.c), write or read alike
 */

typedef struct {
    ngx_pool_t                   *pool;
    ngx_chain_t                  *first;
    ngx_chain_t                 **last;
    ngx_buf_t                    *buf;
} ngx_http_zk_lock_out_t;


void ngx_http_zk_lock_out_init(ngx_http_zk_lock_out_t *o, ngx_pool_t *pool);
u_char *ngx_http_zk_lock_out_room(ngx_http_zk_lock_out_t *o, u_char *p,
    size_t need);
off_t ngx_http_zk_lock_out_end(ngx_http_zk_lock_out_t *o, u_char *p);
u_char *ngx_http_zk_lock_out_escape(u_char *p, ngx_str_t *s);
u_char *ngx_http_zk_lock_out_bound(u_char *p, ngx_http_zk_lock_counts_t *c,
    ngx_uint_t j);
ngx_zk_lock_stats_t *ngx_http_zk_lock_out_stream(void);
ngx_zk_lock_classes_t *ngx_http_zk_lock_out_classes(void);


#endif /* _NGX_HTTP_ZK_LOCK_OUT_H_INCLUDED_ */
