
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_zk_lock_variables.h"
#include "ngx_http_zk_lock_handler.h"


static ngx_int_t ngx_http_zk_lock_variables_result(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);
static ngx_int_t ngx_http_zk_lock_variables_node(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);
static ngx_int_t ngx_http_zk_lock_variables_flow(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);


/* $zk_lock_status, by the event that ended a wait */

static ngx_str_t  ngx_http_zk_lock_results[NGX_HTTP_ZK_LOCK_EV_N] = {
    ngx_null_string,
    ngx_null_string,
    ngx_null_string,
    ngx_string("ACQUIRED"),
    ngx_string("TIMEOUT"),
    ngx_string("ERROR"),
    ngx_string("BYPASSED"),
    ngx_string("REJECTED"),
    ngx_null_string,
    ngx_string("LOST"),
    ngx_string("REVOKED"),
    ngx_string("LOCAL"),
    ngx_null_string,
    ngx_null_string,
    ngx_string("DRY_RUN"),
    ngx_string("ACQUIRED_DRY_RUN"),
    ngx_string("WAITED_DRY_RUN"),
    ngx_string("LOST"),             /* in jeopardy: as before */
    ngx_string("TIMEOUT")           /* zookeeper unreachable: the same */
};


static ngx_http_variable_t  ngx_http_zk_lock_vars[] = {

    { ngx_string("zk_lock_status"), NULL,
      ngx_http_zk_lock_variables_result, 0,
      NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("zk_lock_wait_time"), NULL,
      ngx_http_zk_lock_variables_result, 1,
      NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("zk_lock_node"), NULL,
      ngx_http_zk_lock_variables_node, 0, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("zk_lock_token"), NULL,
      ngx_http_zk_lock_variables_node, 1, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("zk_lock_flow"), NULL,
      ngx_http_zk_lock_variables_flow, 0, NGX_HTTP_VAR_NOCACHEABLE, 0 },

      ngx_http_null_variable
};


ngx_int_t
ngx_http_zk_lock_add_variables(ngx_conf_t *cf)
{
    ngx_http_variable_t  *var, *v;

    for (v = ngx_http_zk_lock_vars; v->name.len; v++) {
        var = ngx_http_add_variable(cf, &v->name, v->flags);
        if (var == NULL) {
            return NGX_ERROR;
        }

        var->get_handler = v->get_handler;
        var->data = v->data;
    }

    return NGX_OK;
}


/* $zk_lock_status (data 0) and $zk_lock_wait_time (data 1) */

static ngx_int_t
ngx_http_zk_lock_variables_result(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    u_char                  *p;
    ngx_uint_t               found;
    ngx_http_zk_lock_ctx_t  *ctx;

    ctx = ngx_http_zk_lock_handler_find_ctx(r, &found);

    if (ctx == NULL || ctx->result == NGX_HTTP_ZK_LOCK_EV_NONE) {
        v->not_found = 1;
        return NGX_OK;
    }

    if (data == 0) {
        v->len = ngx_http_zk_lock_results[ctx->result].len;
        v->data = ngx_http_zk_lock_results[ctx->result].data;

    } else {
        p = ngx_pnalloc(r->pool, NGX_TIME_T_LEN);
        if (p == NULL) {
            return NGX_ERROR;
        }

        v->len = ngx_sprintf(p, "%M", ctx->wait_time) - p;
        v->data = p;
    }

    v->valid = 1;
    v->no_cacheable = 0;
    v->not_found = 0;

    return NGX_OK;
}


/*
 * The nodes the request holds, or held once its locks were all had (a
 * node lost with its session stays), as full paths or as tokens (data),
 * separated by spaces
 */

static ngx_int_t
ngx_http_zk_lock_variables_node(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    u_char                    *p;
    size_t                     len;
    ngx_uint_t                 i, found;
    ngx_http_zk_lock_ctx_t    *ctx;
    ngx_http_zk_lock_pass_t  **pass;

    ctx = ngx_http_zk_lock_handler_find_ctx(r, &found);

    if (ctx == NULL) {
        v->not_found = 1;
        return NGX_OK;
    }

    pass = ctx->passes.elts;
    len = 0;

    for (i = 0; i < ctx->passes.nelts; i++) {
        if (!pass[i]->dry) {
            len += ngx_zk_lock_gate_held_len(&pass[i]->gate, data);
        }
    }

    if (len == 0) {
        v->not_found = 1;
        return NGX_OK;
    }

    p = ngx_pnalloc(r->pool, len);
    if (p == NULL) {
        return NGX_ERROR;
    }

    v->data = p;

    for (i = 0; i < ctx->passes.nelts; i++) {
        if (!pass[i]->dry) {
            p = ngx_zk_lock_gate_held_nodes(&pass[i]->gate, data, p,
                                            v->data);
        }
    }

    v->valid = 1;
    v->no_cacheable = 0;
    v->not_found = 0;
    v->len = p - v->data;

    return NGX_OK;
}


/* the request's flow (fair=), hashed: that of its first lock with one */

static ngx_int_t
ngx_http_zk_lock_variables_flow(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    uint64_t                   id;
    ngx_uint_t                 i, found;
    ngx_http_zk_lock_ctx_t    *ctx;
    ngx_http_zk_lock_pass_t  **pass;

    ctx = ngx_http_zk_lock_handler_find_ctx(r, &found);
    id = 0;

    if (ctx) {
        pass = ctx->passes.elts;

        for (i = 0; id == 0 && i < ctx->passes.nelts; i++) {
            id = ngx_zk_lock_gate_flow(&pass[i]->gate);
        }
    }

    return ngx_zk_lock_fair_value(r->pool, id, v);
}
