
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_zk_lock_eval.h"
#include "ngx_zk_lock_group.h"


/*
 * What a request makes of a location's lock directives, before any
 * ZooKeeper call: the path from its variables (a segment that comes from
 * variables is checked, so that a value cannot add levels, "/" or "..",
 * or bytes ZooKeeper refuses), its weight, the order in which its locks
 * are taken, and the data of its nodes.
 */


/* node data: "<host> pid <pid> since <time> <method> <uri>", truncated */
#define NGX_HTTP_ZK_LOCK_INFO_LEN  256


static ngx_int_t ngx_http_zk_lock_eval_weight(ngx_http_request_t *r,
    ngx_http_zk_lock_spec_t *spec, ngx_str_t *path, ngx_uint_t *weight);
static ngx_int_t ngx_http_zk_lock_eval_path(ngx_http_request_t *r,
    ngx_http_zk_lock_spec_t *spec, ngx_str_t *path);
static ngx_int_t ngx_http_zk_lock_eval_flow(ngx_http_request_t *r,
    ngx_http_zk_lock_spec_t *spec, ngx_zk_lock_flow_t *flow);
static size_t ngx_http_zk_lock_eval_utf8_cut(u_char *text, size_t len);


/* what the request's variables make of a lock: its path, its weight */

ngx_int_t
ngx_http_zk_lock_eval(ngx_http_request_t *r,
    ngx_http_zk_lock_spec_t *spec, ngx_zk_lock_gate_hold_t *want)
{
    ngx_int_t  rc;

    rc = ngx_http_zk_lock_eval_path(r, spec, &want->path);
    if (rc != NGX_OK) {
        return rc;
    }

    rc = ngx_http_zk_lock_eval_weight(r, spec, &want->path, &want->weight);
    if (rc != NGX_OK) {
        return rc;
    }

    return ngx_http_zk_lock_eval_flow(r, spec, &want->flow);
}


/*
 * The request's flow (fair=) and class (priority=): its key hashed, its
 * weight from 1 to 1000, else 400 before any node is made; with
 * priority= alone, the class's one flow
 */

static ngx_int_t
ngx_http_zk_lock_eval_flow(ngx_http_request_t *r,
    ngx_http_zk_lock_spec_t *spec, ngx_zk_lock_flow_t *flow)
{
    ngx_int_t   rc;
    ngx_str_t   key, weight, class;

    flow->id = 0;
    flow->weight = 0;
    flow->cls = 0;
    ngx_str_null(&key);
    ngx_str_null(&weight);
    ngx_str_null(&class);

    if (spec->fair_cv == NULL && spec->priority_cv == NULL) {
        return NGX_OK;
    }

    if ((spec->fair_cv
         && ngx_http_complex_value(r, spec->fair_cv, &key) != NGX_OK)
        || (spec->fair_weight_cv
            && ngx_http_complex_value(r, spec->fair_weight_cv, &weight)
               != NGX_OK)
        || (spec->priority_cv
            && ngx_http_complex_value(r, spec->priority_cv, &class)
               != NGX_OK))
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    rc = ngx_zk_lock_fair_flow(flow, &spec->lock, &key,
                               spec->fair_weight_cv ? &weight : NULL,
                               spec->priority_cv ? &class : NULL,
                               r->connection->log);

    return (rc == NGX_DECLINED) ? NGX_HTTP_BAD_REQUEST : rc;
}


/*
 * The leases a request takes (zk_semaphore weight=): from a variable, a
 * number from 1 to the leases, and to what one multi() may create on the
 * path, else 400 before any node is made.  With a count read from
 * ZooKeeper, the handler checks it against the count.
 */

static ngx_int_t
ngx_http_zk_lock_eval_weight(ngx_http_request_t *r,
    ngx_http_zk_lock_spec_t *spec, ngx_str_t *path, ngx_uint_t *weight)
{
    ngx_int_t   n;
    ngx_str_t   v;
    ngx_uint_t  max;

    if (spec->weight_cv == NULL) {
        *weight = spec->lock.weight;
        return NGX_OK;
    }

    if (ngx_http_complex_value(r, spec->weight_cv, &v) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    n = ngx_atoi(v.data, v.len);

    max = ngx_zk_lock_group_max(path->len);

    if (spec->lock.counter.len == 0) {
        max = ngx_min(max, spec->lock.leases);
    }

    if (n < 1 || (ngx_uint_t) n > max) {
        ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                      "%s \"%V\": invalid weight \"%V\", 1 to %ui expected",
                      ngx_http_zk_lock_directive(spec), &spec->lock.name,
                      &v, max);
        return NGX_HTTP_BAD_REQUEST;
    }

    *weight = n;

    return NGX_OK;
}


static ngx_int_t
ngx_http_zk_lock_eval_path(ngx_http_request_t *r,
    ngx_http_zk_lock_spec_t *spec, ngx_str_t *path)
{
    u_char                        *p;
    size_t                         len;
    ngx_str_t                     *v;
    ngx_uint_t                     i, n;
    const char                    *err;
    ngx_http_complex_value_t      *cv;
    ngx_http_zk_lock_main_conf_t  *lmcf;

    cv = spec->segments->elts;
    n = spec->segments->nelts;

    v = ngx_palloc(r->pool, n * sizeof(ngx_str_t));
    if (v == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    lmcf = ngx_http_get_module_main_conf(r, ngx_http_zk_lock_module);
    len = 0;

    for (i = 0; i < n; i++) {

        if (ngx_http_complex_value(r, &cv[i], &v[i]) != NGX_OK) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        if (cv[i].lengths) {
            err = ngx_zk_lock_path_check_segment(&v[i],
                                                 i == 0
                                                 && !lmcf->zk.chroot.len);

            if (err) {
                ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                              "%s path \"%V\": segment %ui is %s",
                              ngx_http_zk_lock_directive(spec),
                              &spec->lock.name, i + 1, err);
                return NGX_HTTP_BAD_REQUEST;
            }
        }

        len += 1 + v[i].len;
    }

    if (len > lmcf->max_path) {
        ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                      "%s path \"%V\" is longer than %uz bytes",
                      ngx_http_zk_lock_directive(spec),
                      &spec->lock.name, lmcf->max_path);
        return NGX_HTTP_BAD_REQUEST;
    }

    p = ngx_pnalloc(r->pool, len);
    if (p == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    path->data = p;
    path->len = len;

    for (i = 0; i < n; i++) {
        *p++ = '/';
        p = ngx_cpymem(p, v[i].data, v[i].len);
    }

    return NGX_OK;
}


/*
 * The node's data tells an operator who holds it: host, worker pid,
 * request and since when, short and bounded.
 */

ngx_int_t
ngx_http_zk_lock_eval_info(ngx_http_request_t *r, ngx_str_t *info)
{
    u_char     *p, *q, *last;
    ngx_str_t   uri;

    p = ngx_pnalloc(r->pool, NGX_HTTP_ZK_LOCK_INFO_LEN);
    if (p == NULL) {
        return NGX_ERROR;
    }

    info->data = p;
    last = p + NGX_HTTP_ZK_LOCK_INFO_LEN;

    p = ngx_slprintf(p, last, "%V pid %P since %V ", &ngx_cycle->hostname,
                     ngx_pid, &ngx_cached_http_log_iso8601);

    /*
     * The path without the arguments: anybody who may read the lock's
     * nodes (the default ACL: anyone) would read tokens and passwords
     */

    uri = r->main->unparsed_uri;

    q = ngx_strlchr(uri.data, uri.data + uri.len, '?');
    if (q) {
        uri.len = q - uri.data;
    }

    p = ngx_slprintf(p, last, "%V %V", &r->main->method_name, &uri);

    info->len = p - info->data;

    if (p == last) {
        info->len = ngx_http_zk_lock_eval_utf8_cut(info->data, info->len);
    }

    return NGX_OK;
}


/* a text cut at a byte count: the last character, if cut in half, goes */

static size_t
ngx_http_zk_lock_eval_utf8_cut(u_char *text, size_t len)
{
    size_t  i, n;

    for (i = len; i > 0 && len - i < 4; i--) {
        if ((text[i - 1] & 0xc0) != 0x80) {
            break;
        }
    }

    if (i == 0 || text[i - 1] < 0x80) {
        return len;
    }

    /* a lead byte at i - 1: the length its bits announce */

    n = (text[i - 1] >= 0xf0) ? 4 : (text[i - 1] >= 0xe0) ? 3 : 2;

    return (len - (i - 1) < n) ? i - 1 : len;
}
