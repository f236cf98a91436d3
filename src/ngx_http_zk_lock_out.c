
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_zk_lock_out.h"


/*
 * A page written into pool chunks as it goes: the status page's JSON
 * (ngx_http_zk_lock_status.c) and its Prometheus text
 * (ngx_http_zk_lock_prom.c), which call this file and never each other,
 * and the fleet view's JSON (ngx_http_zk_lock_fleet.c).
 * A chunk is sized as written rather than to a bound of the whole page
 * (ten times the output with 2 000 locks).  Here too is what both formats
 * write alike (an escaped string, a histogram's bound) or read alike (the
 * stream layer's locks, the priority classes).
 */

#define NGX_HTTP_ZK_LOCK_CHUNK  65536


/* the other layer whose locks the page shows, from the core's counters */
static ngx_str_t  ngx_http_zk_lock_out_layer = ngx_string("stream");


/* an empty page, whose chunks the pool will hold */

void
ngx_http_zk_lock_out_init(ngx_http_zk_lock_out_t *o, ngx_pool_t *pool)
{
    o->pool = pool;
    o->first = NULL;
    o->last = &o->first;
    o->buf = NULL;
}


/*
 * Room for "need" bytes at p: in the chunk being written, or in a new one
 * (NULL without memory); p NULL: none written yet
 */

u_char *
ngx_http_zk_lock_out_room(ngx_http_zk_lock_out_t *o, u_char *p, size_t need)
{
    ngx_buf_t    *b;
    ngx_chain_t  *cl;

    if (o->buf) {
        o->buf->last = p;

        if ((size_t) (o->buf->end - p) >= need) {
            return p;
        }
    }

    b = ngx_create_temp_buf(o->pool, ngx_max(need, NGX_HTTP_ZK_LOCK_CHUNK));
    if (b == NULL) {
        return NULL;
    }

    cl = ngx_alloc_chain_link(o->pool);
    if (cl == NULL) {
        return NULL;
    }

    cl->buf = b;
    cl->next = NULL;
    *o->last = cl;
    o->last = &cl->next;
    o->buf = b;

    return b->last;
}


/* p ends the page: its size, in the chunks from o->first */

off_t
ngx_http_zk_lock_out_end(ngx_http_zk_lock_out_t *o, u_char *p)
{
    off_t         size;
    ngx_chain_t  *cl;

    o->buf->last = p;
    size = 0;

    for (cl = o->first; cl; cl = cl->next) {
        size += cl->buf->last - cl->buf->pos;
    }

    return size;
}


/*
 * The stream layer's counters, whose locks the page shows beside HTTP's
 * (NULL when it counts none)
 */

ngx_zk_lock_stats_t *
ngx_http_zk_lock_out_stream(void)
{
    return ngx_zk_lock_stats_find((ngx_cycle_t *) ngx_cycle,
                                  &ngx_http_zk_lock_out_layer);
}


/* priority=: the HTTP configuration's classes, NULL for none */

ngx_zk_lock_classes_t *
ngx_http_zk_lock_out_classes(void)
{
    ngx_http_zk_lock_main_conf_t  *lmcf;

    lmcf = ngx_http_cycle_get_module_main_conf(ngx_cycle,
                                               ngx_http_zk_lock_module);

    return (lmcf && lmcf->zk.classes.n) ? &lmcf->zk.classes : NULL;
}


/* bucket j's bound in seconds, as Prometheus writes it: "0.005", "2.5" */

u_char *
ngx_http_zk_lock_out_bound(u_char *p, ngx_http_zk_lock_counts_t *c,
    ngx_uint_t j)
{
    ngx_msec_t  ms, frac;

    if (j == c->nbuckets) {
        return ngx_cpymem(p, "+Inf", 4);
    }

    ms = c->bounds[j];
    frac = ms % 1000;

    if (frac == 0) {
        return ngx_sprintf(p, "%M", ms / 1000);
    }

    if (frac % 100 == 0) {
        return ngx_sprintf(p, "%M.%M", ms / 1000, frac / 100);
    }

    if (frac % 10 == 0) {
        return ngx_sprintf(p, "%M.%02M", ms / 1000, frac / 10);
    }

    return ngx_sprintf(p, "%M.%03M", ms / 1000, frac);
}


/* for a JSON string and a Prometheus label value alike */

u_char *
ngx_http_zk_lock_out_escape(u_char *p, ngx_str_t *s)
{
    u_char      c;
    ngx_uint_t  i;

    for (i = 0; i < s->len; i++) {
        c = s->data[i];

        if (c == '"' || c == '\\') {
            *p++ = '\\';
            *p++ = c;

        } else if (c < 0x20) {
            p = ngx_sprintf(p, "\\n");

        } else {
            *p++ = c;
        }
    }

    return p;
}
