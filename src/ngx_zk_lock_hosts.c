
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>

#include "ngx_zk_lock_hosts.h"


/*
 * The zone: the last addresses of each name, found by name and port, the
 * one stored last at the tail, the head the first to go when it is full
 * (names that a reload took out of zk_hosts are never stored again).
 */

typedef struct {
    ngx_queue_t                   queue;
    in_port_t                     port;
    size_t                        len;        /* of the name */
    u_char                       *addrs;      /* after the name, with '\0' */
    u_char                        name[1];
} ngx_zk_lock_hosts_node_t;


typedef struct {
    ngx_queue_t                   queue;
} ngx_zk_lock_hosts_shm_t;


static ngx_int_t ngx_zk_lock_hosts_zone(ngx_conf_t *cf,
    ngx_zk_lock_hosts_t *h);
static ngx_int_t ngx_zk_lock_hosts_init_zone(ngx_shm_zone_t *shm_zone,
    void *data);
static ngx_zk_lock_hosts_node_t *ngx_zk_lock_hosts_lookup(
    ngx_zk_lock_hosts_shm_t *shm, ngx_zk_lock_host_t *host);
static void ngx_zk_lock_hosts_store(ngx_zk_lock_host_t *host);
static u_char *ngx_zk_lock_hosts_addr(u_char *p, struct sockaddr *sa,
    socklen_t socklen, in_port_t port);
static ngx_int_t ngx_zk_lock_hosts_join(ngx_zk_lock_hosts_t *h,
    ngx_pool_t *pool);
static void ngx_zk_lock_hosts_resolved(ngx_resolver_ctx_t *ctx);
static void ngx_zk_lock_hosts_set(ngx_zk_lock_host_t *host,
    ngx_resolver_ctx_t *ctx);
static void ngx_zk_lock_hosts_answered(ngx_zk_lock_hosts_t *h);
static void ngx_zk_lock_hosts_done(ngx_event_t *ev);


static ngx_str_t  ngx_zk_lock_hosts_name = ngx_string("zk_lock_hosts");


/* "host:port[,host:port...]", up to "last" (the chroot, if any) */

ngx_int_t
ngx_zk_lock_hosts_parse(ngx_conf_t *cf, ngx_zk_lock_hosts_t *h,
    ngx_str_t *value, u_char *last)
{
    u_char                   *p, *start;
    ngx_url_t                 u;
    ngx_zk_lock_host_t       *host;

    if (ngx_array_init(&h->hosts, cf->pool, 4,
                       sizeof(ngx_zk_lock_host_t))
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

        ngx_memzero(host, sizeof(ngx_zk_lock_host_t));
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

            *ngx_zk_lock_hosts_addr(host->addrs, u.addrs[0].sockaddr,
                                    u.addrs[0].socklen, u.port) = '\0';
        }
    }

    return NGX_OK;
}


/* how many hosts are names */

ngx_int_t
ngx_zk_lock_hosts_names(ngx_zk_lock_hosts_t *h)
{
    ngx_uint_t                i, n;
    ngx_zk_lock_host_t       *host;

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
ngx_zk_lock_hosts_load(ngx_conf_t *cf, ngx_zk_lock_hosts_t *h)
{
    u_char                   *p;
    ngx_url_t                 u;
    ngx_uint_t                i, j;
    ngx_zk_lock_host_t       *host;

    if (h->resolver && ngx_zk_lock_hosts_zone(cf, h) != NGX_OK) {
        return NGX_ERROR;
    }

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

            p = ngx_zk_lock_hosts_addr(p, u.addrs[j].sockaddr,
                                       u.addrs[j].socklen,
                                       host[i].port);
        }

        *p = '\0';
    }

    return (ngx_zk_lock_hosts_join(h, cf->pool) == NGX_ERROR)
           ? NGX_ERROR : NGX_OK;
}


/*
 * No resolution here with a resolver: getaddrinfo() would ask the
 * system's DNS, not the resolver's, and a DNS that does not answer would
 * hold the master for its whole timeout (10 s and more) at every reload.
 * The workers' answers are kept instead, in a zone that is not created
 * anew at a reload (same name, size and tag), unlike the module's others.
 */

static ngx_int_t
ngx_zk_lock_hosts_zone(ngx_conf_t *cf, ngx_zk_lock_hosts_t *h)
{
    h->zone = ngx_shared_memory_add(cf, &ngx_zk_lock_hosts_name,
                                    8 * ngx_pagesize,
                                    &ngx_zk_lock_hosts_name);
    if (h->zone == NULL) {
        return NGX_ERROR;
    }

    h->zone->init = ngx_zk_lock_hosts_init_zone;
    h->zone->data = h;

    return NGX_OK;
}


static ngx_int_t
ngx_zk_lock_hosts_init_zone(ngx_shm_zone_t *shm_zone, void *data)
{
    ngx_slab_pool_t               *shpool;
    ngx_zk_lock_hosts_shm_t       *shm;

    shpool = (ngx_slab_pool_t *) shm_zone->shm.addr;

    /*
     * A reload: the zone of before, as its workers left it.  Its tag is
     * this file's, so its layout is this one: a module built anew is
     * another tag, and another zone.
     */

    if (data || shm_zone->shm.exists) {
        return NGX_OK;
    }

    shm = ngx_slab_alloc(shpool, sizeof(ngx_zk_lock_hosts_shm_t));
    if (shm == NULL) {
        return NGX_ERROR;
    }

    ngx_queue_init(&shm->queue);

    shpool->data = shm;

    /* full, it gives room by dropping the oldest names: no error */
    shpool->log_nomem = 0;

    return NGX_OK;
}


/*
 * A worker starts (after a reload, or in place of one that died): the
 * names start from the last addresses that a worker of this instance
 * resolved, so that the session need not wait for DNS to answer.
 * NGX_DECLINED: none known.
 */

ngx_int_t
ngx_zk_lock_hosts_seed(ngx_zk_lock_hosts_t *h)
{
    u_char                         *addrs;
    size_t                          len;
    ngx_uint_t                      i, n;
    ngx_slab_pool_t                *shpool;
    ngx_zk_lock_host_t             *host;
    ngx_zk_lock_hosts_node_t       *node;

    if (h->zone == NULL) {
        return NGX_DECLINED;
    }

    shpool = (ngx_slab_pool_t *) h->zone->shm.addr;
    host = h->hosts.elts;
    n = 0;

    ngx_shmtx_lock(&shpool->mutex);

    for (i = 0; i < h->hosts.nelts; i++) {

        if (host[i].addrs) {
            continue;
        }

        node = ngx_zk_lock_hosts_lookup(shpool->data, &host[i]);
        if (node == NULL) {
            continue;
        }

        len = ngx_strlen(node->addrs) + 1;

        addrs = ngx_alloc(len, h->log);
        if (addrs == NULL) {
            ngx_shmtx_unlock(&shpool->mutex);
            return NGX_ERROR;
        }

        ngx_memcpy(addrs, node->addrs, len);

        host[i].addrs = addrs;
        host[i].allocated = 1;
        n++;
    }

    ngx_shmtx_unlock(&shpool->mutex);

    if (n == 0) {
        return NGX_DECLINED;
    }

    if (ngx_zk_lock_hosts_join(h, NULL) == NGX_ERROR) {
        return NGX_ERROR;
    }

    ngx_log_error(NGX_LOG_INFO, h->log, 0,
                  "zk_hosts \"%V\" start from the last known addresses "
                  "\"%s\"", &h->text, h->list);

    return NGX_OK;
}


static ngx_zk_lock_hosts_node_t *
ngx_zk_lock_hosts_lookup(ngx_zk_lock_hosts_shm_t *shm,
    ngx_zk_lock_host_t *host)
{
    ngx_queue_t                    *q;
    ngx_zk_lock_hosts_node_t       *node;

    for (q = ngx_queue_head(&shm->queue);
         q != ngx_queue_sentinel(&shm->queue);
         q = ngx_queue_next(q))
    {
        node = ngx_queue_data(q, ngx_zk_lock_hosts_node_t, queue);

        if (node->port == host->port && node->len == host->name.len
            && ngx_strncasecmp(node->name, host->name.data, node->len) == 0)
        {
            return node;
        }
    }

    return NULL;
}


/* a name has resolved: what the next worker to start starts from */

static void
ngx_zk_lock_hosts_store(ngx_zk_lock_host_t *host)
{
    size_t                          len, size;
    ngx_queue_t                    *q;
    ngx_slab_pool_t                *shpool;
    ngx_zk_lock_hosts_shm_t        *shm;
    ngx_zk_lock_hosts_node_t       *node, *old;

    shpool = (ngx_slab_pool_t *) host->hosts->zone->shm.addr;
    shm = shpool->data;
    len = ngx_strlen(host->addrs) + 1;

    ngx_shmtx_lock(&shpool->mutex);

    node = ngx_zk_lock_hosts_lookup(shm, host);

    if (node) {
        ngx_queue_remove(&node->queue);

        if (ngx_strcmp(node->addrs, host->addrs) == 0) {
            ngx_queue_insert_tail(&shm->queue, &node->queue);
            ngx_shmtx_unlock(&shpool->mutex);
            return;
        }

        ngx_slab_free_locked(shpool, node);
    }

    size = offsetof(ngx_zk_lock_hosts_node_t, name) + host->name.len
           + len;

    for ( ;; ) {
        node = ngx_slab_alloc_locked(shpool, size);

        if (node || ngx_queue_empty(&shm->queue)) {
            break;
        }

        q = ngx_queue_head(&shm->queue);
        ngx_queue_remove(q);

        old = ngx_queue_data(q, ngx_zk_lock_hosts_node_t, queue);
        ngx_slab_free_locked(shpool, old);
    }

    if (node) {
        node->port = host->port;
        node->len = host->name.len;
        node->addrs = ngx_cpymem(node->name, host->name.data, node->len);
        ngx_memcpy(node->addrs, host->addrs, len);

        ngx_queue_insert_tail(&shm->queue, &node->queue);
    }

    ngx_shmtx_unlock(&shpool->mutex);

    if (node == NULL) {
        ngx_log_error(NGX_LOG_WARN, host->hosts->log, 0,
                      "no room in the \"%V\" zone for the addresses of "
                      "\"%V\"", &ngx_zk_lock_hosts_name, &host->name);
    }
}


/* IPv6 without brackets: the client splits at the last colon */

static u_char *
ngx_zk_lock_hosts_addr(u_char *p, struct sockaddr *sa, socklen_t socklen,
    in_port_t port)
{
    p += ngx_sock_ntop(sa, socklen, p, NGX_SOCKADDR_STRLEN - 6, 0);

    return ngx_sprintf(p, ":%d", (int) port);
}


/* the list the client is given: every address known, then the chroot */

static ngx_int_t
ngx_zk_lock_hosts_join(ngx_zk_lock_hosts_t *h, ngx_pool_t *pool)
{
    u_char                   *list, *p;
    size_t                    len;
    ngx_uint_t                i, n;
    ngx_zk_lock_host_t       *host;

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
ngx_zk_lock_hosts_resolve(ngx_zk_lock_hosts_t *h)
{
    ngx_uint_t                i;
    ngx_resolver_ctx_t       *ctx;
    ngx_zk_lock_host_t       *host;

    if (h->pending) {
        /* asked already: the answers will do */
        return NGX_OK;
    }

    h->done.handler = ngx_zk_lock_hosts_done;
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
        ctx->handler = ngx_zk_lock_hosts_resolved;
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

    ngx_zk_lock_hosts_answered(h);

    return NGX_OK;
}


static void
ngx_zk_lock_hosts_resolved(ngx_resolver_ctx_t *ctx)
{
    ngx_zk_lock_host_t  *host = ctx->data;

    ngx_zk_lock_hosts_t  *h;

    h = host->hosts;

    if (ctx->state == NGX_OK && ctx->naddrs) {
        ngx_zk_lock_hosts_set(host, ctx);

    } else {
        ngx_log_error(NGX_LOG_WARN, h->log, 0,
                      "could not resolve \"%V\" of zk_hosts (%i: %s)%s",
                      &ctx->name, ctx->state,
                      ngx_resolver_strerror(ctx->state),
                      host->addrs ? ", its last addresses are kept" : "");
    }

    ngx_resolve_name_done(ctx);
    host->ctx = NULL;

    ngx_zk_lock_hosts_answered(h);
}


static void
ngx_zk_lock_hosts_set(ngx_zk_lock_host_t *host,
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

        p = ngx_zk_lock_hosts_addr(p, ctx->addrs[i].sockaddr,
                                   ctx->addrs[i].socklen, host->port);
    }

    *p = '\0';

    if (host->allocated) {
        ngx_free(host->addrs);
    }

    host->addrs = addrs;
    host->allocated = 1;

    if (host->hosts->zone) {
        ngx_zk_lock_hosts_store(host);
    }
}


static void
ngx_zk_lock_hosts_answered(ngx_zk_lock_hosts_t *h)
{
    if (--h->pending == 0 && !h->done.posted) {
        ngx_post_event(&h->done, &ngx_posted_events);
    }
}


static void
ngx_zk_lock_hosts_done(ngx_event_t *ev)
{
    ngx_zk_lock_hosts_t  *h = ev->data;

    if (h->pending) {
        return;
    }

    h->changed = (ngx_zk_lock_hosts_join(h, NULL) == NGX_OK);

    if (h->handler) {
        h->handler(h);
    }
}
