
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>

#include "ngx_zk_lock_counter.h"


static ngx_zk_lock_counter_t *ngx_zk_lock_counter_find(
    ngx_zk_lock_session_t *s, u_char *path, size_t len);
static void ngx_zk_lock_counter_read(ngx_zk_lock_counter_t *c);
static void ngx_zk_lock_counter_done(int rc, const char *value,
    int value_len, const struct Stat *stat, const void *data);
static void ngx_zk_lock_counter_exists(int rc, const struct Stat *stat,
    const void *data);
static ngx_uint_t ngx_zk_lock_counter_parse(u_char *p, int len);


/* the core's recipes, and each layer's metrics: each once */
#define NGX_ZK_LOCK_RECOUNTS  4

static ngx_zk_lock_recount_pt  ngx_zk_lock_recount[NGX_ZK_LOCK_RECOUNTS];


void
ngx_zk_lock_counters_handler(ngx_zk_lock_recount_pt handler)
{
    ngx_uint_t  i;

    for (i = 0; i < NGX_ZK_LOCK_RECOUNTS; i++) {
        if (ngx_zk_lock_recount[i] == handler) {
            return;
        }

        if (ngx_zk_lock_recount[i] == NULL) {
            ngx_zk_lock_recount[i] = handler;
            return;
        }
    }
}


ngx_zk_lock_counter_t *
ngx_zk_lock_counter(ngx_zk_lock_session_t *s, ngx_str_t *path)
{
    ngx_zk_lock_counter_t  *c;

    c = ngx_zk_lock_counter_find(s, path->data, path->len);
    if (c) {
        return c;
    }

    /* one per configured path, kept as long as the worker lives */

    c = ngx_calloc(offsetof(ngx_zk_lock_counter_t, path) + path->len + 1,
                   &s->log);
    if (c == NULL) {
        return NULL;
    }

    c->session = s;
    ngx_memcpy(c->path, path->data, path->len);
    ngx_queue_insert_tail(&s->counters, &c->queue);

    ngx_zk_lock_counter_read(c);

    return c;
}


static void
ngx_zk_lock_counter_read(ngx_zk_lock_counter_t *c)
{
    int                          rc;
    ngx_zk_lock_session_t       *s;

    s = c->session;

    if (!s->connected || c->reading) {
        return;
    }

    ngx_zk_lock_session_batch(s);

    rc = zoo_awget(s->zh, (char *) c->path, ngx_zk_lock_session_watcher,
                   s, ngx_zk_lock_counter_done, c);

    if (rc != ZOK) {
        ngx_log_error(NGX_LOG_ERR, &s->log, 0,
                      "zoo_awget(\"%s\") failed (%d: %s)",
                      c->path, rc, zerror(rc));
        return;
    }

    c->reading = 1;
}


static void
ngx_zk_lock_counter_done(int rc, const char *value, int value_len,
    const struct Stat *stat, const void *data)
{
    ngx_zk_lock_counter_t  *c = (ngx_zk_lock_counter_t *) data;

    int                          erc;
    ngx_uint_t                   i, old;
    ngx_zk_lock_session_t       *s;

    s = c->session;
    c->reading = 0;

    if (s->exiting) {
        return;
    }

    old = c->value;

    if (rc == ZOK) {
        c->value = ngx_zk_lock_counter_parse((u_char *) value,
                                             value_len);
        if (c->value == 0) {
            ngx_log_error(NGX_LOG_WARN, &s->log, 0,
                          "lease count in \"%s\" is invalid, "
                          "using leases_default", c->path);
        }

    } else if (rc == ZNONODE) {
        c->value = 0;

        if (old) {
            ngx_log_error(NGX_LOG_WARN, &s->log, 0,
                          "lease count \"%s\" is missing, "
                          "using leases_default", c->path);
        }

        /* to hear of its creation */
        ngx_zk_lock_session_batch(s);

        erc = zoo_awexists(s->zh, (char *) c->path,
                           ngx_zk_lock_session_watcher, s,
                           ngx_zk_lock_counter_exists, c);

        if (erc != ZOK) {
            /* read again once reconnected: the watch is set then */
            ngx_log_error(NGX_LOG_ERR, &s->log, 0,
                          "zoo_awexists(\"%s\") failed (%d: %s)",
                          c->path, erc, zerror(erc));
        }

    } else {
        /* read again once connected */
        return;
    }

    if (c->value == old) {
        return;
    }

    /* a count of 0 is none: the lines above said that the default is used */

    if (c->value) {
        ngx_log_error(NGX_LOG_NOTICE, &s->log, 0,
                      "lease count \"%s\" is now %ui", c->path, c->value);
    }

    /* the locks that count on it are evaluated again */

    for (i = 0; i < NGX_ZK_LOCK_RECOUNTS && ngx_zk_lock_recount[i]; i++) {
        ngx_zk_lock_recount[i](s, c);
    }
}


static void
ngx_zk_lock_counter_exists(int rc, const struct Stat *stat,
    const void *data)
{
    ngx_zk_lock_counter_t  *c = (ngx_zk_lock_counter_t *) data;

    if (rc == ZOK && !c->session->exiting) {
        /* created between the read and the watch */
        ngx_zk_lock_counter_read(c);
    }
}


/*
 * Curator's SharedCount is a 4-byte big-endian integer; ASCII decimal is
 * easier to set by hand
 */

static ngx_uint_t
ngx_zk_lock_counter_parse(u_char *p, int len)
{
    int        i;
    ngx_int_t  n;

    if (p == NULL || len <= 0) {
        return 0;
    }

    while (len && (p[len - 1] == '\n' || p[len - 1] == ' ')) {
        len--;
    }

    for (i = 0; i < len && p[i] >= '0' && p[i] <= '9'; i++) {
        /* void */
    }

    if (i == len && len > 0) {
        n = ngx_atoi(p, len);
        return (n > 0 && n <= NGX_ZK_LOCK_MAX_LEASES) ? (ngx_uint_t) n : 0;
    }

    /*
     * Four bytes of text ("many") are not a count: a big-endian one below
     * 2^24 starts with a zero byte
     */

    if (len == 4 && p[0] == 0) {
        n = (ngx_int_t) p[1] << 16 | p[2] << 8 | p[3];
        return (n > 0) ? (ngx_uint_t) n : 0;
    }

    return 0;
}


/* a session is connected: what it had to read, it reads now */

void
ngx_zk_lock_counters_connected(ngx_zk_lock_session_t *s)
{
    ngx_queue_t  *q;

    for (q = ngx_queue_head(&s->counters);
         q != ngx_queue_sentinel(&s->counters);
         q = ngx_queue_next(q))
    {
        ngx_zk_lock_counter_read(
                          ngx_queue_data(q, ngx_zk_lock_counter_t, queue));
    }
}


/* a watch event on a counter's path: NGX_DECLINED if it is no counter's */

ngx_int_t
ngx_zk_lock_counter_watch(ngx_zk_lock_session_t *s,
    const char *path)
{
    ngx_zk_lock_counter_t  *c;

    c = ngx_zk_lock_counter_find(s, (u_char *) path, ngx_strlen(path));
    if (c == NULL) {
        return NGX_DECLINED;
    }

    ngx_zk_lock_counter_read(c);

    return NGX_OK;
}


static ngx_zk_lock_counter_t *
ngx_zk_lock_counter_find(ngx_zk_lock_session_t *s, u_char *path,
    size_t len)
{
    ngx_queue_t                 *q;
    ngx_zk_lock_counter_t       *c;

    for (q = ngx_queue_head(&s->counters);
         q != ngx_queue_sentinel(&s->counters);
         q = ngx_queue_next(q))
    {
        c = ngx_queue_data(q, ngx_zk_lock_counter_t, queue);

        if (ngx_strncmp(c->path, path, len) == 0 && c->path[len] == '\0') {
            return c;
        }
    }

    return NULL;
}


/* the worker exits */

void
ngx_zk_lock_counters_free(ngx_zk_lock_session_t *s)
{
    ngx_queue_t  *q;

    while (!ngx_queue_empty(&s->counters)) {
        q = ngx_queue_head(&s->counters);
        ngx_queue_remove(q);
        ngx_free(ngx_queue_data(q, ngx_zk_lock_counter_t, queue));
    }
}
