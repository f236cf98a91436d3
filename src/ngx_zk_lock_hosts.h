
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#ifndef _NGX_ZK_LOCK_HOSTS_H_INCLUDED_
#define _NGX_ZK_LOCK_HOSTS_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>


/*
 * The servers of zk_hosts, as the C client is given them: addresses only,
 * "a.b.c.d:port,...[/chroot]".  Given a name, the client would call
 * getaddrinfo() from the worker at every connect, and a DNS that does not
 * answer would stop the whole worker meanwhile.  The names are resolved
 * once at configuration load, or, with a "resolver" in the http block, by
 * nginx's resolver whenever the worker asks, without blocking; a name that
 * stops resolving keeps the addresses it had.  With a resolver, the last
 * addresses of each name are also kept in a shared memory zone that lives
 * across reloads, so that a worker that starts while DNS does not answer
 * (after a reload, or in place of one that died) starts from them.
 */

typedef struct ngx_zk_lock_hosts_s  ngx_zk_lock_hosts_t;

typedef void (*ngx_zk_lock_hosts_pt)(ngx_zk_lock_hosts_t *h);


typedef struct {
    ngx_str_t                     name;       /* without the port */
    in_port_t                     port;
    unsigned                      literal:1;  /* an address: never asked */
    unsigned                      allocated:1; /* addrs from ngx_alloc() */
    u_char                       *addrs;      /* "a:p,b:p", or NULL */
    ngx_resolver_ctx_t           *ctx;        /* a resolution under way */
    ngx_zk_lock_hosts_t          *hosts;
} ngx_zk_lock_host_t;


struct ngx_zk_lock_hosts_s {
    ngx_str_t                     text;       /* as written, for the logs */
    ngx_str_t                     chroot;
    ngx_array_t                   hosts;      /* ngx_zk_lock_host_t */

    /* NULL: the names were resolved at configuration load */
    ngx_resolver_t               *resolver;
    ngx_msec_t                    resolver_timeout;
    ngx_shm_zone_t               *zone;       /* with a resolver */

    u_char                       *list;       /* for the client, or NULL */
    ngx_uint_t                    naddrs;
    unsigned                      allocated:1; /* list from ngx_alloc() */
    unsigned                      changed:1;  /* by the last resolution */
    ngx_uint_t                    pending;    /* names being resolved */
    ngx_event_t                   done;       /* posted once all answered */

    /* the owner's: told once every name asked has answered or failed */
    ngx_zk_lock_hosts_pt          handler;
    void                         *data;
    ngx_log_t                    *log;
};


ngx_int_t ngx_zk_lock_hosts_parse(ngx_conf_t *cf,
    ngx_zk_lock_hosts_t *h, ngx_str_t *value, u_char *last);
ngx_int_t ngx_zk_lock_hosts_load(ngx_conf_t *cf,
    ngx_zk_lock_hosts_t *h);
ngx_int_t ngx_zk_lock_hosts_seed(ngx_zk_lock_hosts_t *h);
ngx_int_t ngx_zk_lock_hosts_resolve(ngx_zk_lock_hosts_t *h);
ngx_int_t ngx_zk_lock_hosts_names(ngx_zk_lock_hosts_t *h);


#endif /* _NGX_ZK_LOCK_HOSTS_H_INCLUDED_ */
