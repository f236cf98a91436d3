
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#ifndef _NGX_HTTP_ZK_LOCK_PROM_H_INCLUDED_
#define _NGX_HTTP_ZK_LOCK_PROM_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_zk_lock_metrics.h"
#include "ngx_http_zk_lock_out.h"


/*
 * The status page as Prometheus text: the metrics zone's counts and the
 * stream layer's, written into the page's chunks
 */


u_char *ngx_http_zk_lock_prom_write(ngx_http_zk_lock_out_t *o, u_char *p,
    ngx_http_zk_lock_counts_t *c);


#endif /* _NGX_HTTP_ZK_LOCK_PROM_H_INCLUDED_ */
