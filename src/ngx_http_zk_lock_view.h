
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#ifndef _NGX_HTTP_ZK_LOCK_VIEW_H_INCLUDED_
#define _NGX_HTTP_ZK_LOCK_VIEW_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>


/*
 * The fleet view: who holds and who waits on each lock, across every
 * nginx and Curator client of the ensemble, as ZooKeeper shows it
 */


/* zk_lock_fleet_view's formats */
#define NGX_HTTP_ZK_LOCK_VIEW_HTML  1
#define NGX_HTTP_ZK_LOCK_VIEW_JSON  2


char *ngx_http_zk_lock_fleet_view(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
void ngx_http_zk_lock_view_exit(void);


#endif /* _NGX_HTTP_ZK_LOCK_VIEW_H_INCLUDED_ */
