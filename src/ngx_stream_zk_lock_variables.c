
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_stream.h>

#include "ngx_stream_zk_lock_variables.h"
#include "ngx_zk_lock_recipe.h"
#include "ngx_zk_lock_path.h"


/*
 * $zk_lock_status, $zk_lock_wait_time, $zk_lock_node and $zk_lock_token
 * in "stream", for log_format as in "http"; and the scripts of the lock
 * paths and weights that use variables
 */


static ngx_int_t ngx_stream_zk_lock_variables_result(ngx_stream_session_t *s,
    ngx_stream_variable_value_t *v, uintptr_t data);
static ngx_int_t ngx_stream_zk_lock_variables_flow_id(
    ngx_stream_session_t *s, ngx_stream_variable_value_t *v, uintptr_t data);
static ngx_int_t ngx_stream_zk_lock_variables_node(ngx_stream_session_t *s,
    ngx_stream_variable_value_t *v, uintptr_t data);


/* by ngx_zk_lock_gate_result_e */

static ngx_str_t  ngx_stream_zk_lock_results[] = {
    ngx_null_string,
    ngx_string("ACQUIRED"),
    ngx_string("TIMEOUT"),
    ngx_string("ERROR"),
    ngx_string("BYPASSED"),
    ngx_string("REJECTED"),
    ngx_string("LOST"),
    ngx_string("REVOKED"),
    ngx_string("GONE"),
    ngx_string("LOCAL"),
    ngx_string("LOST"),             /* in jeopardy: as before */
    ngx_string("TIMEOUT")           /* zookeeper unreachable: the same */
};


static ngx_stream_variable_t  ngx_stream_zk_lock_vars[] = {

    { ngx_string("zk_lock_status"), NULL,
      ngx_stream_zk_lock_variables_result, 0,
      NGX_STREAM_VAR_NOCACHEABLE, 0 },

    { ngx_string("zk_lock_wait_time"), NULL,
      ngx_stream_zk_lock_variables_result, 1,
      NGX_STREAM_VAR_NOCACHEABLE, 0 },

    { ngx_string("zk_lock_node"), NULL,
      ngx_stream_zk_lock_variables_node, 0,
      NGX_STREAM_VAR_NOCACHEABLE, 0 },

    { ngx_string("zk_lock_token"), NULL,
      ngx_stream_zk_lock_variables_node, 1,
      NGX_STREAM_VAR_NOCACHEABLE, 0 },

    { ngx_string("zk_lock_flow"), NULL,
      ngx_stream_zk_lock_variables_flow_id, 0,
      NGX_STREAM_VAR_NOCACHEABLE, 0 },

      ngx_stream_null_variable
};


ngx_int_t
ngx_stream_zk_lock_variables_add(ngx_conf_t *cf)
{
    ngx_stream_variable_t  *var, *v;

    for (v = ngx_stream_zk_lock_vars; v->name.len; v++) {
        var = ngx_stream_add_variable(cf, &v->name, v->flags);
        if (var == NULL) {
            return NGX_ERROR;
        }

        var->get_handler = v->get_handler;
        var->data = v->data;
    }

    return NGX_OK;
}


ngx_stream_complex_value_t *
ngx_stream_zk_lock_variables_compile(ngx_conf_t *cf, ngx_str_t *value)
{
    ngx_stream_complex_value_t          *cv;
    ngx_stream_compile_complex_value_t   ccv;

    cv = ngx_palloc(cf->pool, sizeof(ngx_stream_complex_value_t));
    if (cv == NULL) {
        return NULL;
    }

    ngx_memzero(&ccv, sizeof(ngx_stream_compile_complex_value_t));

    ccv.cf = cf;
    ccv.value = value;
    ccv.complex_value = cv;

    if (ngx_stream_compile_complex_value(&ccv) != NGX_OK) {
        return NULL;
    }

    return cv;
}


/*
 * The lock path of a connection: its variables may not add levels, nor
 * make a segment that ZooKeeper refuses.  NGX_DECLINED: a bad path, which
 * the connection is refused for, without a node.
 */

ngx_int_t
ngx_stream_zk_lock_variables_path(ngx_stream_session_t *s,
    ngx_stream_zk_lock_spec_t *spec, ngx_uint_t top, ngx_str_t *path)
{
    ngx_uint_t   n;
    const char  *err;

    if (spec->path_cv == NULL) {
        *path = spec->lock.name;
        return NGX_OK;
    }

    if (ngx_stream_complex_value(s, spec->path_cv, path) != NGX_OK) {
        return NGX_ERROR;
    }

    if (path->len > NGX_STREAM_ZK_LOCK_MAX_PATH) {
        err = "too long";

    } else {
        err = ngx_zk_lock_path_check(path, top, &n);

        if (err == NULL && n != spec->levels) {
            err = "of other levels than configured";
        }
    }

    if (err) {
        ngx_log_error(NGX_LOG_INFO, s->connection->log, 0,
                      "%s path \"%V\" is \"%V\": %s",
                      ngx_zk_lock_types[spec->lock.type].directive,
                      &spec->lock.name, path, err);
        return NGX_DECLINED;
    }

    return NGX_OK;
}


/* weight=<$variable>: 1 to the leases, else the connection is refused */

ngx_int_t
ngx_stream_zk_lock_variables_weight(ngx_stream_session_t *s,
    ngx_stream_zk_lock_spec_t *spec, ngx_uint_t *weight)
{
    ngx_int_t  n;
    ngx_str_t  v;

    if (spec->weight_cv == NULL) {
        *weight = spec->lock.weight;
        return NGX_OK;
    }

    if (ngx_stream_complex_value(s, spec->weight_cv, &v) != NGX_OK) {
        return NGX_ERROR;
    }

    n = ngx_atoi(v.data, v.len);

    if (n < 1 || (ngx_uint_t) n > spec->lock.leases) {
        ngx_log_error(NGX_LOG_INFO, s->connection->log, 0,
                      "%s \"%V\": invalid weight \"%V\", 1 to %ui expected",
                      ngx_zk_lock_types[spec->lock.type].directive,
                      &spec->lock.name, &v, spec->lock.leases);
        return NGX_DECLINED;
    }

    *weight = n;

    return NGX_OK;
}


/*
 * The connection's flow (fair=) and class (priority=): its key hashed,
 * and its weight from 1 to 1000, else the connection is refused
 */

ngx_int_t
ngx_stream_zk_lock_variables_flow(ngx_stream_session_t *s,
    ngx_stream_zk_lock_spec_t *spec, ngx_zk_lock_flow_t *flow)
{
    ngx_str_t  key, weight, class;

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
         && ngx_stream_complex_value(s, spec->fair_cv, &key) != NGX_OK)
        || (spec->fair_weight_cv
            && ngx_stream_complex_value(s, spec->fair_weight_cv, &weight)
               != NGX_OK)
        || (spec->priority_cv
            && ngx_stream_complex_value(s, spec->priority_cv, &class)
               != NGX_OK))
    {
        return NGX_ERROR;
    }

    return ngx_zk_lock_fair_flow(flow, &spec->lock, &key,
                                 spec->fair_weight_cv ? &weight : NULL,
                                 spec->priority_cv ? &class : NULL,
                                 s->connection->log);
}


/* $zk_lock_flow: the connection's flow, hashed */

static ngx_int_t
ngx_stream_zk_lock_variables_flow_id(ngx_stream_session_t *s,
    ngx_stream_variable_value_t *v, uintptr_t data)
{
    ngx_stream_zk_lock_ctx_t  *ctx;

    ctx = ngx_stream_get_module_ctx(s, ngx_stream_zk_lock_module);

    return ngx_zk_lock_fair_value(s->connection->pool,
                                  ctx ? ngx_zk_lock_gate_flow(&ctx->gate) : 0,
                                  v);
}


/* $zk_lock_status (data 0) and $zk_lock_wait_time (data 1) */

static ngx_int_t
ngx_stream_zk_lock_variables_result(ngx_stream_session_t *s,
    ngx_stream_variable_value_t *v, uintptr_t data)
{
    u_char                    *p;
    ngx_stream_zk_lock_ctx_t  *ctx;

    ctx = ngx_stream_get_module_ctx(s, ngx_stream_zk_lock_module);

    if (ctx == NULL || ctx->gate.result == NGX_ZK_LOCK_GATE_NONE) {
        v->not_found = 1;
        return NGX_OK;
    }

    if (data == 0) {
        v->len = ngx_stream_zk_lock_results[ctx->gate.result].len;
        v->data = ngx_stream_zk_lock_results[ctx->gate.result].data;

    } else {
        p = ngx_pnalloc(s->connection->pool, NGX_TIME_T_LEN);
        if (p == NULL) {
            return NGX_ERROR;
        }

        v->len = ngx_sprintf(p, "%M", ctx->gate.wait_time) - p;
        v->data = p;
    }

    v->valid = 1;
    v->no_cacheable = 0;
    v->not_found = 0;

    return NGX_OK;
}


/*
 * The nodes the connection holds, or held once its locks were all had (a
 * node lost with its session stays), as full paths or as tokens (data),
 * separated by spaces
 */

static ngx_int_t
ngx_stream_zk_lock_variables_node(ngx_stream_session_t *s,
    ngx_stream_variable_value_t *v, uintptr_t data)
{
    u_char                    *p;
    size_t                     len;
    ngx_stream_zk_lock_ctx_t  *ctx;

    ctx = ngx_stream_get_module_ctx(s, ngx_stream_zk_lock_module);

    len = ctx ? ngx_zk_lock_gate_held_len(&ctx->gate, data) : 0;

    if (len == 0) {
        v->not_found = 1;
        return NGX_OK;
    }

    p = ngx_pnalloc(s->connection->pool, len);
    if (p == NULL) {
        return NGX_ERROR;
    }

    v->data = p;
    p = ngx_zk_lock_gate_held_nodes(&ctx->gate, data, p, v->data);

    v->valid = 1;
    v->no_cacheable = 0;
    v->not_found = 0;
    v->len = p - v->data;

    return NGX_OK;
}
