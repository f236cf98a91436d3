
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>

#include "ngx_http_zk_lock_hosts.h"


static u_char *ngx_http_zk_lock_hosts_addr(u_char *p, struct sockaddr *sa,
    socklen_t socklen, in_port_t port);
static ngx_int_t ngx_http_zk_lock_hosts_join(ngx_http_zk_lock_hosts_t *h,
    ngx_pool_t *pool);
static void ngx_http_zk_lock_hosts_resolved(ngx_resolver_ctx_t *ctx);
static void ngx_http_zk_lock_hosts_set(ngx_http_zk_lock_host_t *host,
    ngx_resolver_ctx_t *ctx);
static void ngx_http_zk_lock_hosts_answered(ngx_http_zk_lock_hosts_t *h);
static void ngx_http_zk_lock_hosts_done(ngx_event_t *ev);


/* "host:port[,host:port...]", up to "last" (the chroot, if any) */

ngx_int_t
ngx_http_zk_lock_hosts_parse(ngx_conf_t *cf, ngx_http_zk_lock_hosts_t *h,
    ngx_str_t *value, u_char *last)
{
    u_char                   *p, *start;
    ngx_url_t                 u;
    ngx_http_zk_lock_host_t  *host;

    if (ngx_array_init(&h->hosts, cf->pool, 4,
                       sizeof(ngx_http_zk_lock_host_t))
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    h->text = *value;
    h->chroot.data = last;
    h->chroot.len = value->data + value->len - last;

    for (start = value->data; start < last; start = p + 1) {

        p = ngx_strlchr(start, last, ',');
        if (p == NULL) {
            p = last;
        }

        ngx_memzero(&u, sizeof(ngx_url_t));
        u.url.data = start;
        u.url.len = p - start;
        u.no_resolve = 1;

        if (ngx_parse_url(cf->pool, &u) != NGX_OK || u.no_port
            || u.family == AF_UNIX || u.host.len == 0)
        {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "invalid host \"%V\" in \"%V\", %s",
                               &u.url, value,
                               u.err ? u.err : "host:port expected");
            return NGX_ERROR;
        }

        host = ngx_array_push(&h->hosts);
        if (host == NULL) {
            return NGX_ERROR;
        }

        ngx_memzero(host, sizeof(ngx_http_zk_lock_host_t));
        host->name = u.host;
        host->port = u.port;
        host->hosts = h;

        /* an address is one at once: it never needs a resolver */

        host->literal = (u.host.data[0] == '['
                         || ngx_inet_addr(u.host.data, u.host.len)
                            != INADDR_NONE);

        if (host->literal) {
            ngx_memzero(&u, sizeof(ngx_url_t));
            u.url.data = start;
            u.url.len = p - start;

            if (ngx_parse_url(cf->pool, &u) != NGX_OK || u.naddrs == 0) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "invalid host \"%V\" in \"%V\", %s",
                                   &u.url, value,
                                   u.err ? u.err : "invalid address");
                return NGX_ERROR;
            }

            host->addrs = ngx_pnalloc(cf->pool, NGX_SOCKADDR_STRLEN + 1);
            if (host->addrs == NULL) {
                return NGX_ERROR;
            }

            *ngx_http_zk_lock_hosts_addr(host->addrs, u.addrs[0].sockaddr,
                                         u.addrs[0].socklen, u.port) = '\0';
        }
    }

    return NGX_OK;
}


/* how many hosts are names */

ngx_int_t
ngx_http_zk_lock_hosts_names(ngx_http_zk_lock_hosts_t *h)
{
    ngx_uint_t                i, n;
    ngx_http_zk_lock_host_t  *host;

    host = h->hosts.elts;
    n = 0;

    for (i = 0; i < h->hosts.nelts; i++) {
        n += !host[i].literal;
    }

    return n;
}


/*
 * Without a resolver, the names are resolved now, once, as proxy_pass
 * resolves a static name, each into all its addresses; with one, the
 * workers resolve them, and the list holds the addresses among the hosts.
 */

ngx_int_t
ngx_http_zk_lock_hosts_load(ngx_conf_t *cf, ngx_http_zk_lock_hosts_t *h)
{
    u_char                   *p;
    ngx_url_t                 u;
    ngx_uint_t                i, j;
    ngx_http_zk_lock_host_t  *host;

    host = h->hosts.elts;

    for (i = 0; i < h->hosts.nelts; i++) {

        if (host[i].literal || h->resolver) {
            continue;
        }

        ngx_memzero(&u, sizeof(ngx_url_t));
        u.url = host[i].name;
        u.default_port = host[i].port;

        if (ngx_parse_url(cf->pool, &u) != NGX_OK || u.naddrs == 0) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "invalid host \"%V:%d\" in \"%V\", %s",
                               &host[i].name, (int) host[i].port, &h->text,
                               u.err ? u.err : "host not found");
            return NGX_ERROR;
        }

        p = ngx_pnalloc(cf->pool, u.naddrs * (NGX_SOCKADDR_STRLEN + 1));
        if (p == NULL) {
            return NGX_ERROR;
        }

        host[i].addrs = p;

        for (j = 0; j < u.naddrs; j++) {
            if (j) {
                *p++ = ',';
            }

            p = ngx_http_zk_lock_hosts_addr(p, u.addrs[j].sockaddr,
                                            u.addrs[j].socklen,
                                            host[i].port);
        }

        *p = '\0';
    }

    return (ngx_http_zk_lock_hosts_join(h, cf->pool) == NGX_ERROR)
           ? NGX_ERROR : NGX_OK;
}


/* IPv6 without brackets: the client splits at the last colon */

static u_char *
ngx_http_zk_lock_hosts_addr(u_char *p, struct sockaddr *sa, socklen_t socklen,
    in_port_t port)
{
    p += ngx_sock_ntop(sa, socklen, p, NGX_SOCKADDR_STRLEN - 6, 0);

    return ngx_sprintf(p, ":%d", (int) port);
}


/* the list the client is given: every address known, then the chroot */

static ngx_int_t
ngx_http_zk_lock_hosts_join(ngx_http_zk_lock_hosts_t *h, ngx_pool_t *pool)
{
    u_char                   *list, *p;
    size_t                    len;
    ngx_uint_t                i, n;
    ngx_http_zk_lock_host_t  *host;

    host = h->hosts.elts;
    len = h->chroot.len + 1;

    for (i = 0; i < h->hosts.nelts; i++) {
        if (host[i].addrs) {
            len += ngx_strlen(host[i].addrs) + 1;
        }
    }

    list = pool ? ngx_pnalloc(pool, len) : ngx_alloc(len, h->log);
    if (list == NULL) {
        return NGX_ERROR;
    }

    p = list;
    n = 0;

    for (i = 0; i < h->hosts.nelts; i++) {
        if (host[i].addrs == NULL) {
            continue;
        }

        if (p != list) {
            *p++ = ',';
        }

        p = ngx_cpymem(p, host[i].addrs, ngx_strlen(host[i].addrs));
    }

    if (p == list) {
        /* no name has resolved yet */
        if (pool == NULL) {
            ngx_free(list);
        }

        return NGX_DECLINED;
    }

    for (i = 0; list + i < p; i++) {
        n += (list[i] == ',');
    }

    p = ngx_cpymem(p, h->chroot.data, h->chroot.len);
    *p = '\0';

    if (h->list && ngx_strcmp(h->list, list) == 0) {
        if (pool == NULL) {
            ngx_free(list);
        }

        return NGX_DONE;
    }

    if (h->list && h->allocated) {
        ngx_free(h->list);
    }

    h->list = list;
    h->allocated = (pool == NULL);
    h->naddrs = n + 1;

    return NGX_OK;
}


/*
 * In a worker, with a resolver: every name is asked again; h->handler is
 * called once all have answered, from the event loop, never from here.
 */

ngx_int_t
ngx_http_zk_lock_hosts_resolve(ngx_http_zk_lock_hosts_t *h)
{
    ngx_uint_t                i;
    ngx_resolver_ctx_t       *ctx;
    ngx_http_zk_lock_host_t  *host;

    if (h->pending) {
        /* asked already: the answers will do */
        return NGX_OK;
    }

    h->done.handler = ngx_http_zk_lock_hosts_done;
    h->done.data = h;
    h->done.log = h->log;

    /* one for the loop itself, so that no answer ends it early */
    h->pending = 1;

    host = h->hosts.elts;

    for (i = 0; i < h->hosts.nelts; i++) {

        if (host[i].literal || h->resolver == NULL) {
            continue;
        }

        ctx = ngx_resolve_start(h->resolver, NULL);

        if (ctx == NULL || ctx == NGX_NO_RESOLVER) {
            ngx_log_error(NGX_LOG_ERR, h->log, 0,
                          "could not resolve \"%V\" of zk_hosts: "
                          "no resolver", &host[i].name);
            continue;
        }

        ctx->name = host[i].name;
        ctx->handler = ngx_http_zk_lock_hosts_resolved;
        ctx->data = &host[i];
        ctx->timeout = h->resolver_timeout;
        ctx->cancelable = 1;

        host[i].ctx = ctx;
        h->pending++;

        if (ngx_resolve_name(ctx) != NGX_OK) {
            /* the resolver has freed the context */
            host[i].ctx = NULL;
            h->pending--;
        }
    }

    ngx_http_zk_lock_hosts_answered(h);

    return NGX_OK;
}


static void
ngx_http_zk_lock_hosts_resolved(ngx_resolver_ctx_t *ctx)
{
    ngx_http_zk_lock_host_t  *host = ctx->data;

    ngx_http_zk_lock_hosts_t  *h;

    h = host->hosts;

    if (ctx->state == NGX_OK && ctx->naddrs) {
        ngx_http_zk_lock_hosts_set(host, ctx);

    } else {
        ngx_log_error(NGX_LOG_WARN, h->log, 0,
                      "could not resolve \"%V\" of zk_hosts (%i: %s)%s",
                      &ctx->name, ctx->state,
                      ngx_resolver_strerror(ctx->state),
                      host->addrs ? ", its last addresses are kept" : "");
    }

    ngx_resolve_name_done(ctx);
    host->ctx = NULL;

    ngx_http_zk_lock_hosts_answered(h);
}


static void
ngx_http_zk_lock_hosts_set(ngx_http_zk_lock_host_t *host,
    ngx_resolver_ctx_t *ctx)
{
    u_char      *addrs, *p;
    ngx_uint_t   i;

    addrs = ngx_alloc(ctx->naddrs * (NGX_SOCKADDR_STRLEN + 1),
                      host->hosts->log);
    if (addrs == NULL) {
        return;
    }

    p = addrs;

    for (i = 0; i < ctx->naddrs; i++) {
        if (i) {
            *p++ = ',';
        }

        p = ngx_http_zk_lock_hosts_addr(p, ctx->addrs[i].sockaddr,
                                        ctx->addrs[i].socklen, host->port);
    }

    *p = '\0';

    if (host->allocated) {
        ngx_free(host->addrs);
    }

    host->addrs = addrs;
    host->allocated = 1;
}


static void
ngx_http_zk_lock_hosts_answered(ngx_http_zk_lock_hosts_t *h)
{
    if (--h->pending == 0 && !h->done.posted) {
        ngx_post_event(&h->done, &ngx_posted_events);
    }
}


static void
ngx_http_zk_lock_hosts_done(ngx_event_t *ev)
{
    ngx_http_zk_lock_hosts_t  *h = ev->data;

    if (h->pending) {
        return;
    }

    h->changed = (ngx_http_zk_lock_hosts_join(h, NULL) == NGX_OK);

    if (h->handler) {
        h->handler(h);
    }
}
