
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#ifndef _NGX_ZK_LOCK_CONF_H_INCLUDED_
#define _NGX_ZK_LOCK_CONF_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <zookeeper/zookeeper.h>

#include "ngx_zk_lock_session.h"
#include "ngx_zk_lock_hosts.h"
#include "ngx_zk_lock_class.h"


/* what the session directives say, in either layer's main configuration */

typedef struct {
    ngx_zk_lock_hosts_t          *hosts;
    ngx_str_t                     chroot;
    ngx_msec_t                    session_timeout;
    ngx_str_t                     auth;       /* digest "user:password" */
    struct ACL_vector            *acl;        /* of the nodes created */
    ngx_uint_t                    sessions;   /* zk_sessions, if set */
    ngx_uint_t                    generation; /* names its brokers */
    ngx_zk_lock_classes_t         classes;    /* zk_lock_class */
} ngx_zk_lock_conf_t;


void ngx_zk_lock_conf_create(ngx_zk_lock_conf_t *zc);
char *ngx_zk_lock_conf_init(ngx_conf_t *cf, ngx_zk_lock_conf_t *zc);
ngx_zk_lock_session_t *ngx_zk_lock_conf_session(ngx_conf_t *cf,
    ngx_zk_lock_conf_t *zc, ngx_resolver_t *resolver,
    ngx_msec_t resolver_timeout);

char *ngx_zk_lock_conf_hosts(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
char *ngx_zk_lock_conf_auth(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
char *ngx_zk_lock_conf_acl(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
char *ngx_zk_lock_conf_class(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);


extern ngx_conf_post_t        ngx_zk_lock_conf_timeout_post;
extern ngx_conf_num_bounds_t  ngx_zk_lock_conf_sessions_bounds;


#endif /* _NGX_ZK_LOCK_CONF_H_INCLUDED_ */
