
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#include <ngx_config.h>
#include <ngx_core.h>

#include "ngx_zk_lock_params.h"
#include "ngx_zk_lock_path.h"
#include "ngx_zk_lock_group.h"
#include "ngx_zk_lock_fair.h"


ngx_zk_lock_type_t  ngx_zk_lock_types[] = {
    { "", "", NGX_ZK_LOCK_LEASE },
    { "zk_mutex", "mutex", NGX_ZK_LOCK_LEASE },
    { "zk_semaphore", "semaphore", NGX_ZK_LOCK_LEASE },
    { "zk_rwlock read", "read", NGX_ZK_LOCK_READ },
    { "zk_rwlock write", "write", NGX_ZK_LOCK_WRITE }
};


/*
 * The parameters of a lock directive (zk_mutex, zk_semaphore, zk_rwlock),
 * in "http" or "stream": each checked alone, then together.
 */


static char *ngx_zk_lock_params_combined(ngx_conf_t *cf,
    ngx_zk_lock_params_t *lp);
static char *ngx_zk_lock_params_one(ngx_conf_t *cf,
    ngx_zk_lock_params_t *lp, ngx_str_t *value);
static ngx_uint_t ngx_zk_lock_params_duplicate(ngx_str_t *value,
    ngx_uint_t first, ngx_uint_t i);
static char *ngx_zk_lock_params_leases(ngx_conf_t *cf,
    ngx_zk_lock_params_t *lp, ngx_str_t *value);
static char *ngx_zk_lock_params_semaphore(ngx_conf_t *cf, ngx_str_t *value,
    const char *why);
static char *ngx_zk_lock_params_keep(ngx_conf_t *cf,
    ngx_zk_lock_params_t *lp, ngx_str_t *value);
static char *ngx_zk_lock_params_weight(ngx_conf_t *cf,
    ngx_zk_lock_params_t *lp, ngx_str_t *value);
static char *ngx_zk_lock_params_fair(ngx_conf_t *cf,
    ngx_zk_lock_params_t *lp, ngx_str_t *value);
static char *ngx_zk_lock_params_fair_max(ngx_conf_t *cf,
    ngx_zk_lock_params_t *lp, ngx_str_t *value);
static char *ngx_zk_lock_params_priority(ngx_conf_t *cf,
    ngx_zk_lock_params_t *lp, ngx_str_t *value);
static char *ngx_zk_lock_params_fair_combined(ngx_conf_t *cf,
    ngx_zk_lock_params_t *lp);
static ngx_int_t ngx_zk_lock_params_choice(ngx_conf_t *cf,
    ngx_str_t *value, size_t skip, char *yes, char *no);
static ngx_int_t ngx_zk_lock_params_check_path(ngx_str_t *path);


/*
 * The literal lock paths of the configuration being read, in "http" and
 * "stream" alike: on one path, every directive must make the nodes of
 * one recipe, whichever block it is in
 */

typedef struct {
    ngx_str_t                     name;
    ngx_str_t                     counter;
    ngx_uint_t                    leases;
    ngx_str_t                     file;
    ngx_uint_t                    line;
    unsigned                      rw:1;
    unsigned                      v2:1;
} ngx_zk_lock_params_literal_t;


static ngx_cycle_t  *ngx_zk_lock_params_cycle;
static ngx_array_t  *ngx_zk_lock_params_literals;


/* a lock directive's defaults, before its parameters */

void
ngx_zk_lock_params_init(ngx_zk_lock_params_t *lp, ngx_uint_t type,
    ngx_str_t *name)
{
    ngx_memzero(lp, sizeof(ngx_zk_lock_params_t));

    lp->type = type;
    lp->name = *name;
    lp->leases = (type == NGX_ZK_LOCK_SEMAPHORE) ? 0 : 1;
    lp->timeout = NGX_CONF_UNSET_MSEC;
    lp->weight = 1;
    lp->reentrant = 1;
}


/*
 * Parameters are counted here, not by the directive's flags, so that a
 * missing one is named rather than "invalid number of arguments".
 */

char *
ngx_zk_lock_params(ngx_conf_t *cf, ngx_command_t *cmd,
    ngx_zk_lock_params_t *lp)
{
    ngx_str_t   *value, s;
    ngx_uint_t   i, first, dflt;

    value = cf->args->elts;
    first = 2;
    dflt = 0;

    if (lp->type == NGX_ZK_LOCK_RWLOCK_READ) {

        if (cf->args->nelts < 3) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "\"%V\" must have \"read\" or \"write\" "
                               "after the path", &cmd->name);
            return NGX_CONF_ERROR;
        }

        if (ngx_strcmp(value[2].data, "write") == 0) {
            lp->type = NGX_ZK_LOCK_RWLOCK_WRITE;

        } else if (ngx_strcmp(value[2].data, "read") != 0) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "\"%V\" must be \"read\" or \"write\", "
                               "not \"%V\"", &cmd->name, &value[2]);
            return NGX_CONF_ERROR;
        }

        first = 3;
    }

    for (i = first; i < cf->args->nelts; i++) {

        /* "leases=3 leases=zk:/c": which one would count is a guess */

        if (ngx_zk_lock_params_duplicate(value, first, i)) {
            s.data = value[i].data;
            s.len = ngx_strlchr(s.data, s.data + value[i].len, '=') - s.data;

            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "\"%V\" parameter is duplicate", &s);
            return NGX_CONF_ERROR;
        }

        if (ngx_zk_lock_params_one(cf, lp, &value[i]) != NGX_CONF_OK) {
            return NGX_CONF_ERROR;
        }

        dflt |= (ngx_strncmp(value[i].data, "leases_default=", 15) == 0);
    }

    if (lp->leases && lp->weight > lp->leases
        && lp->counter.len == 0)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"weight=%ui\" is more than \"leases=%ui\"",
                           lp->weight, lp->leases);
        return NGX_CONF_ERROR;
    }

    if (lp->weight > ngx_zk_lock_group_max(lp->name.len)) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"weight=%ui\" is more than the %ui nodes that "
                           "one zookeeper multi() may create on \"%V\"",
                           lp->weight,
                           ngx_zk_lock_group_max(lp->name.len),
                           ngx_zk_lock_path_short(cf->pool, &lp->name));
        return NGX_CONF_ERROR;
    }

    if (ngx_zk_lock_params_combined(cf, lp) != NGX_CONF_OK) {
        return NGX_CONF_ERROR;
    }

    if (dflt && lp->counter.len == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"leases_default\" is only for a count read "
                           "with \"leases=zk:\"");
        return NGX_CONF_ERROR;
    }

    if (lp->leases == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           lp->counter.len
                           ? "\"%V\" with \"leases=zk:\" must have "
                             "\"leases_default\" parameter"
                           : "\"%V\" must have \"leases\" parameter",
                           &cmd->name);
        return NGX_CONF_ERROR;
    }

    /* the node the core makes for it, once the parameters have said */
    lp->kind = ngx_zk_lock_types[lp->type].kind;

    return NGX_CONF_OK;
}


/* parameters that do not go together: each said, rather than ignored */

static char *
ngx_zk_lock_params_combined(ngx_conf_t *cf, ngx_zk_lock_params_t *lp)
{
    if (lp->keep && lp->v2) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           (lp->type == NGX_ZK_LOCK_MUTEX)
                           ? "\"keep\" is not for \"reentrant=off\": "
                             "Curator's InterProcessSemaphoreMutex takes "
                             "its lease under a mutex"
                           : "\"keep\" is not for \"protocol=v2\": its "
                             "leases are taken under a mutex");
        return NGX_CONF_ERROR;
    }

    /* a kept node serves many requests: revoking it revokes them all */

    if (lp->keep && lp->revocable) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"keep\" is not for \"revocable=on\": a kept "
                           "lock belongs to the instance, not to the "
                           "request that a revoker would ask to let go");
        return NGX_CONF_ERROR;
    }

    if (ngx_zk_lock_params_fair_combined(cf, lp) != NGX_CONF_OK) {
        return NGX_CONF_ERROR;
    }

    if (lp->revocable && lp->v2) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"revocable=on\" is not for \"reentrant=off\", "
                           "which Curator's InterProcessSemaphoreMutex is");
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


/* one parameter of a lock directive */

static char *
ngx_zk_lock_params_one(ngx_conf_t *cf, ngx_zk_lock_params_t *lp,
    ngx_str_t *value)
{
    ngx_int_t   n;
    ngx_str_t   s;

    if (ngx_strncmp(value->data, "timeout=", 8) == 0) {

        s.len = value->len - 8;
        s.data = value->data + 8;

        lp->timeout = ngx_parse_time(&s, 0);
        if (lp->timeout == (ngx_msec_t) NGX_ERROR) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "invalid timeout \"%V\"", value);
            return NGX_CONF_ERROR;
        }

        return NGX_CONF_OK;
    }

    if (ngx_strncmp(value->data, "max_waiting=", 12) == 0) {

        n = ngx_atoi(value->data + 12, value->len - 12);
        if (n == NGX_ERROR || n == 0) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "invalid max_waiting \"%V\"", value);
            return NGX_CONF_ERROR;
        }

        lp->max_waiting = n;
        return NGX_CONF_OK;
    }

    if (lp->type == NGX_ZK_LOCK_SEMAPHORE
        && ngx_strncmp(value->data, "protocol=", 9) == 0)
    {
        n = ngx_zk_lock_params_choice(cf, value, 9, "v2", "v1");
        if (n == NGX_ERROR) {
            return NGX_CONF_ERROR;
        }

        lp->v2 = n;
        return NGX_CONF_OK;
    }

    /* Curator's InterProcessSemaphoreMutex: a v2 semaphore, 1 lease */

    if (lp->type == NGX_ZK_LOCK_MUTEX
        && ngx_strncmp(value->data, "reentrant=", 10) == 0)
    {
        n = ngx_zk_lock_params_choice(cf, value, 10, "off", "on");
        if (n == NGX_ERROR) {
            return NGX_CONF_ERROR;
        }

        lp->v2 = n;
        lp->reentrant = !n;
        return NGX_CONF_OK;
    }

    /* Curator's acquire(qty), in one multi(): see ngx_zk_lock_group.c */

    if (ngx_strncmp(value->data, "weight=", 7) == 0) {
        return (lp->type == NGX_ZK_LOCK_SEMAPHORE)
               ? ngx_zk_lock_params_weight(cf, lp, value)
               : ngx_zk_lock_params_semaphore(cf, value,
                                              "a request takes one lease of "
                                              "a mutex or of a read/write "
                                              "lock");
    }

    /* flows served fairly from the kept leases: see ngx_zk_lock_fair.c */

    if (ngx_strncmp(value->data, "fair=", 5) == 0
        || ngx_strncmp(value->data, "fair_weight=", 12) == 0
        || ngx_strncmp(value->data, "fair_max=", 9) == 0)
    {
        return ngx_zk_lock_params_fair(cf, lp, value);
    }

    if (ngx_strncmp(value->data, "priority=", 9) == 0) {
        return ngx_zk_lock_params_priority(cf, lp, value);
    }

    /* leases a worker keeps: see ngx_zk_lock_keep.c */

    if (ngx_strncmp(value->data, "keep=", 5) == 0) {
        return ngx_zk_lock_params_keep(cf, lp, value);
    }

    /* Curator's Revocable: InterProcessMutex and the read/write lock */

    if (lp->type != NGX_ZK_LOCK_SEMAPHORE
        && ngx_strncmp(value->data, "revocable=", 10) == 0)
    {
        n = ngx_zk_lock_params_choice(cf, value, 10, "on", "off");
        if (n == NGX_ERROR) {
            return NGX_CONF_ERROR;
        }

        lp->revocable = n;
        return NGX_CONF_OK;
    }

    if (lp->type == NGX_ZK_LOCK_SEMAPHORE
        && ngx_strncmp(value->data, "leases", 6) == 0)
    {
        return ngx_zk_lock_params_leases(cf, lp, value);
    }

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "invalid parameter \"%V\"", value);
    return NGX_CONF_ERROR;
}


/* a parameter of the same name ("leases" for "leases=zk:" too) before i */

static ngx_uint_t
ngx_zk_lock_params_duplicate(ngx_str_t *value, ngx_uint_t first,
    ngx_uint_t i)
{
    u_char      *eq;
    size_t       len;
    ngx_uint_t   k;

    eq = ngx_strlchr(value[i].data, value[i].data + value[i].len, '=');
    if (eq == NULL) {
        return 0;
    }

    len = eq - value[i].data + 1;

    for (k = first; k < i; k++) {
        if (value[k].len >= len
            && ngx_strncmp(value[k].data, value[i].data, len) == 0)
        {
            return 1;
        }
    }

    return 0;
}


/* leases=<n>, leases=zk:<path>, leases_default=<n> */

static char *
ngx_zk_lock_params_leases(ngx_conf_t *cf, ngx_zk_lock_params_t *lp,
    ngx_str_t *value)
{
    size_t     j;
    ngx_int_t  n;

    if (ngx_strncmp(value->data, "leases=zk:", 10) == 0) {
        lp->counter.data = value->data + 10;
        lp->counter.len = value->len - 10;

        if (ngx_zk_lock_params_check_path(&lp->counter) != NGX_OK) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "invalid lease count path in \"%V\"", value);
            return NGX_CONF_ERROR;
        }

        return NGX_CONF_OK;
    }

    if (ngx_strncmp(value->data, "leases=", 7) == 0) {
        j = 7;

    } else if (ngx_strncmp(value->data, "leases_default=", 15) == 0) {
        j = 15;

    } else {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid parameter \"%V\"", value);
        return NGX_CONF_ERROR;
    }

    n = ngx_atoi(value->data + j, value->len - j);
    if (n == NGX_ERROR || n < 1) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid number of leases \"%V\"", value);
        return NGX_CONF_ERROR;
    }

    if (n > NGX_ZK_LOCK_MAX_LEASES) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"%V\" is more than %d, the most leases that "
                           "Curator's semaphores and ZooKeeper's sequence "
                           "numbers count", value, NGX_ZK_LOCK_MAX_LEASES);
        return NGX_CONF_ERROR;
    }

    lp->leases = n;

    return NGX_CONF_OK;
}


/*
 * A parameter of zk_semaphore on another lock directive: said so, rather
 * than "invalid parameter", which would have the operator look for a typo
 */

static char *
ngx_zk_lock_params_semaphore(ngx_conf_t *cf, ngx_str_t *value,
    const char *why)
{
    u_char  *eq;

    eq = ngx_strlchr(value->data, value->data + value->len, '=');

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "\"%*s\" is only for \"zk_semaphore\": %s",
                       (size_t) (eq - value->data), value->data, why);

    return NGX_CONF_ERROR;
}


/*
 * keep=<time>: a semaphore's leases, which are alike, a mutex, which the
 * instance then passes from request to request (lock cohorting), or a
 * read lock, which its readers share
 */

static char *
ngx_zk_lock_params_keep(ngx_conf_t *cf, ngx_zk_lock_params_t *lp,
    ngx_str_t *value)
{
    ngx_str_t  s;

    if (lp->type == NGX_ZK_LOCK_RWLOCK_WRITE) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"keep\" is not for the write lock of "
                           "\"zk_rwlock\", only for its read lock, "
                           "which readers share");
        return NGX_CONF_ERROR;
    }

    s.len = value->len - 5;
    s.data = value->data + 5;

    lp->keep = ngx_parse_time(&s, 0);

    if (lp->keep == (ngx_msec_t) NGX_ERROR) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid keep \"%V\"", value);
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


/*
 * weight=<n>, or weight=<$variable> checked for each request: the layer
 * compiles the variable with its own scripts (see weight_var)
 */

static char *
ngx_zk_lock_params_weight(ngx_conf_t *cf, ngx_zk_lock_params_t *lp,
    ngx_str_t *value)
{
    ngx_int_t  n;
    ngx_str_t  v;

    v.data = value->data + 7;
    v.len = value->len - 7;

    if (ngx_strlchr(v.data, v.data + v.len, '$')) {
        lp->weight_var = v;
        return NGX_CONF_OK;
    }

    n = ngx_atoi(v.data, v.len);

    if (n < 1) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid weight \"%V\"", value);
        return NGX_CONF_ERROR;
    }

    lp->weight = n;

    return NGX_CONF_OK;
}


/*
 * fair=<key>: a flow's key, a variable's value for each request, hashed
 * (see ngx_zk_lock_fair.c; the layer compiles it); fair_weight=<n> from 1
 * to 1000, or a variable's, checked for each request; fair_max=<n> or
 * <n>%: the leases a flow may hold at once
 */

static char *
ngx_zk_lock_params_fair(ngx_conf_t *cf, ngx_zk_lock_params_t *lp,
    ngx_str_t *value)
{
    ngx_int_t  n;
    ngx_str_t  v;

    if (lp->type != NGX_ZK_LOCK_SEMAPHORE && lp->type != NGX_ZK_LOCK_MUTEX) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"fair\" is for \"zk_semaphore\" and "
                           "\"zk_mutex\": the readers of a read/write lock "
                           "share a lease, and a writer waits for them all");
        return NGX_CONF_ERROR;
    }

    if (value->data[4] == '=') {
        v.data = value->data + 5;
        v.len = value->len - 5;

        if (v.len == 0) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "invalid fair \"%V\": the key of the "
                               "request's flow, such as \"fair=$tenant\", "
                               "expected", value);
            return NGX_CONF_ERROR;
        }

        if (ngx_zk_lock_fair_secret(cf->log) != NGX_OK) {
            return NGX_CONF_ERROR;
        }

        lp->fair = v;
        return NGX_CONF_OK;
    }

    if (value->data[5] == 'm') {
        return ngx_zk_lock_params_fair_max(cf, lp, value);
    }

    v.data = value->data + 12;
    v.len = value->len - 12;

    if (ngx_strlchr(v.data, v.data + v.len, '$')) {
        lp->fair_weight_var = v;
        return NGX_CONF_OK;
    }

    n = ngx_zk_lock_fair_weight(&v);

    if (n == NGX_ERROR) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid fair_weight \"%V\", 1 to %d expected",
                           value, NGX_ZK_LOCK_FAIR_WEIGHT_MAX);
        return NGX_CONF_ERROR;
    }

    lp->fair_weight = n;

    return NGX_CONF_OK;
}


/*
 * priority=<class>: the request's class (zk_lock_class, declared before),
 * a name or a variable's value; a literal name must be a class
 */

static char *
ngx_zk_lock_params_priority(ngx_conf_t *cf, ngx_zk_lock_params_t *lp,
    ngx_str_t *value)
{
    ngx_str_t  v;

    if (lp->type != NGX_ZK_LOCK_SEMAPHORE && lp->type != NGX_ZK_LOCK_MUTEX) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"priority\" is for \"zk_semaphore\" and "
                           "\"zk_mutex\"");
        return NGX_CONF_ERROR;
    }

    if (lp->classes == NULL || lp->classes->n == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"priority\" needs \"zk_lock_class\" "
                           "directives before it");
        return NGX_CONF_ERROR;
    }

    v.data = value->data + 9;
    v.len = value->len - 9;

    if (v.len == 0
        || (ngx_strlchr(v.data, v.data + v.len, '$') == NULL
            && ngx_zk_lock_class_find(lp->classes, v.data, v.len)
               == lp->classes->n))
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid priority \"%V\": a class of "
                           "\"zk_lock_class\", or a variable, expected",
                           value);
        return NGX_CONF_ERROR;
    }

    if (ngx_zk_lock_fair_secret(cf->log) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    lp->priority = v;

    return NGX_CONF_OK;
}


/* fair_max=<n>: 1 to the most leases; <n>%: 1% to 100% of the count */

static char *
ngx_zk_lock_params_fair_max(ngx_conf_t *cf, ngx_zk_lock_params_t *lp,
    ngx_str_t *value)
{
    ngx_int_t   n;
    ngx_str_t   v;
    ngx_uint_t  pct;

    v.data = value->data + 9;
    v.len = value->len - 9;

    pct = (v.len > 1 && v.data[v.len - 1] == '%');

    n = ngx_atoi(v.data, v.len - pct);

    if (n < 1 || (ngx_uint_t) n > (pct ? 100 : NGX_ZK_LOCK_MAX_LEASES)) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid fair_max \"%V\": the leases a flow may "
                           "hold at once, a number or 1%% to 100%% of the "
                           "count, expected", value);
        return NGX_CONF_ERROR;
    }

    if (lp->type == NGX_ZK_LOCK_MUTEX) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"fair_max\" is for \"zk_semaphore\": a "
                           "mutex has one lease");
        return NGX_CONF_ERROR;
    }

    if (pct) {
        lp->fair_max_pct = n;

    } else {
        lp->fair_max = n;
    }

    return NGX_CONF_OK;
}


static char *
ngx_zk_lock_params_fair_combined(ngx_conf_t *cf, ngx_zk_lock_params_t *lp)
{
    if (lp->fair.len == 0) {

        if (lp->fair_weight || lp->fair_weight_var.len) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "\"fair_weight\" is only for \"fair\"");
            return NGX_CONF_ERROR;
        }

        if (lp->fair_max || lp->fair_max_pct) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "\"fair_max\" is only for \"fair\"");
            return NGX_CONF_ERROR;
        }

        if (lp->priority.len == 0) {
            return NGX_CONF_OK;
        }
    }

    if (lp->keep == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"%s\" needs \"keep\": the flows share the "
                           "leases that an instance keeps",
                           lp->fair.len ? "fair" : "priority");
        return NGX_CONF_ERROR;
    }

    if (lp->weight != 1 || lp->weight_var.len) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"%s\" is not for \"weight\": a request that "
                           "takes several leases takes no kept one",
                           lp->fair.len ? "fair" : "priority");
        return NGX_CONF_ERROR;
    }

    if (lp->fair_weight == 0) {
        lp->fair_weight = 1;
    }

    return NGX_CONF_OK;
}


/* "name=yes" is 1, "name=no" is 0 */

static ngx_int_t
ngx_zk_lock_params_choice(ngx_conf_t *cf, ngx_str_t *value, size_t skip,
    char *yes, char *no)
{
    if (ngx_strcmp(value->data + skip, yes) == 0) {
        return 1;
    }

    if (ngx_strcmp(value->data + skip, no) == 0) {
        return 0;
    }

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "invalid value \"%V\", \"%s\" or \"%s\" expected",
                       value, no, yes);

    return NGX_ERROR;
}


/* an absolute path of literal segments, as zk_hosts' chroot */

static ngx_int_t
ngx_zk_lock_params_check_path(ngx_str_t *path)
{
    ngx_uint_t  n;

    if (path->len < 2 || path->data[0] != '/'
        || ngx_zk_lock_path_check(path, 0, &n) != NULL)
    {
        return NGX_ERROR;
    }

    return NGX_OK;
}


/*
 * A literal path names one lock of one recipe in the whole configuration:
 * Curator's nodes of a mutex and of a semaphore v1 of 1 lease agree
 */

char *
ngx_zk_lock_params_recipe(ngx_conf_t *cf, ngx_zk_lock_params_t *lp)
{
    ngx_uint_t                     i, rw;
    ngx_zk_lock_params_literal_t  *lit;

    if (lp->transient) {
        return NGX_CONF_OK;     /* a variable segment */
    }

    if (ngx_zk_lock_params_cycle != cf->cycle) {
        ngx_zk_lock_params_cycle = cf->cycle;
        ngx_zk_lock_params_literals = NULL;
    }

    if (ngx_zk_lock_params_literals == NULL) {
        ngx_zk_lock_params_literals = ngx_array_create(cf->pool, 4,
                                        sizeof(ngx_zk_lock_params_literal_t));
        if (ngx_zk_lock_params_literals == NULL) {
            return NGX_CONF_ERROR;
        }
    }

    rw = (lp->type == NGX_ZK_LOCK_RWLOCK_READ
          || lp->type == NGX_ZK_LOCK_RWLOCK_WRITE);

    lit = ngx_zk_lock_params_literals->elts;

    for (i = 0; i < ngx_zk_lock_params_literals->nelts; i++) {

        if (lit[i].name.len != lp->name.len
            || ngx_strncmp(lit[i].name.data, lp->name.data, lp->name.len)
               != 0)
        {
            continue;
        }

        if (lit[i].rw == rw && lit[i].v2 == lp->v2
            && lit[i].leases == lp->leases
            && lit[i].counter.len == lp->counter.len
            && ngx_strncmp(lit[i].counter.data, lp->counter.data,
                           lp->counter.len) == 0)
        {
            return NGX_CONF_OK;
        }

        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "lock path \"%V\" is already another kind of "
                           "lock (recipe, protocol or leases) at %V:%ui",
                           ngx_zk_lock_path_short(cf->pool, &lp->name),
                           &lit[i].file, lit[i].line);
        return NGX_CONF_ERROR;
    }

    lit = ngx_array_push(ngx_zk_lock_params_literals);
    if (lit == NULL) {
        return NGX_CONF_ERROR;
    }

    lit->name = lp->name;
    lit->counter = lp->counter;
    lit->leases = lp->leases;
    lit->rw = rw;
    lit->v2 = lp->v2;
    lit->file = cf->conf_file->file.name;
    lit->line = cf->conf_file->line;

    return NGX_CONF_OK;
}


/*
 * The brokers of zk_sessions find a directive by its number: the layer's
 * description of it (spec, size bytes, its ngx_zk_lock_params_t first)
 * is numbered, and a copy kept, as the block's array may move as it grows
 */

char *
ngx_zk_lock_params_number(ngx_conf_t *cf, ngx_array_t **specs, void *spec,
    size_t size)
{
    void                   *copy;
    ngx_zk_lock_params_t  **sp, *lp;

    if (*specs == NULL) {
        *specs = ngx_array_create(cf->pool, 4, sizeof(ngx_zk_lock_params_t *));
        if (*specs == NULL) {
            return NGX_CONF_ERROR;
        }
    }

    sp = ngx_array_push(*specs);
    if (sp == NULL) {
        return NGX_CONF_ERROR;
    }

    lp = spec;
    lp->id = (*specs)->nelts - 1;

    copy = ngx_palloc(cf->pool, size);
    if (copy == NULL) {
        return NGX_CONF_ERROR;
    }

    ngx_memcpy(copy, spec, size);
    *sp = copy;

    return NGX_CONF_OK;
}


/*
 * One lock directive per path in a block (locks: the layer's array of
 * directives, each starting with its ngx_zk_lock_params_t; lp, the last
 * one).  A second one on the same nodes would be a re-entry of the first,
 * whose parameters alone would apply: "zk_mutex /m timeout=3s; zk_mutex /m
 * timeout=1s" waited 1s.  With re-entry (http), the write lock and the
 * read lock of a path go together: the read lock is the write lock's
 * re-entry; a stream connection takes a lock once.
 */

char *
ngx_zk_lock_params_unique(ngx_conf_t *cf, ngx_array_t *locks,
    ngx_zk_lock_params_t *lp, ngx_uint_t reentry)
{
    u_char                *elts;
    ngx_uint_t             i;
    ngx_zk_lock_params_t  *other;

    elts = locks->elts;

    for (i = 0; i < locks->nelts; i++) {
        other = (ngx_zk_lock_params_t *) (elts + i * locks->size);

        if (other == lp
            || other->name.len != lp->name.len
            || ngx_strncmp(other->name.data, lp->name.data, lp->name.len)
               != 0)
        {
            continue;
        }

        if (reentry && (other->kind != lp->kind || other->v2 != lp->v2)) {
            continue;
        }

        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "lock path \"%V\" is duplicate: %s",
                           ngx_zk_lock_path_short(cf->pool, &lp->name),
                           reentry ? "a request takes it once, with the "
                                     "parameters of the first directive"
                                   : "a connection takes a lock once");
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


/* zk_lock_fail closed | open | local=<n>, in either layer */

char *
ngx_zk_lock_params_fail(ngx_conf_t *cf, ngx_flag_t *open, ngx_uint_t *local)
{
    ngx_int_t   n;
    ngx_str_t  *value;

    if (*open != NGX_CONF_UNSET) {
        return "is duplicate";
    }

    value = cf->args->elts;
    *open = 0;
    *local = 0;

    if (ngx_strcmp(value[1].data, "closed") == 0) {
        return NGX_CONF_OK;
    }

    if (ngx_strcmp(value[1].data, "open") == 0) {
        *open = 1;
        return NGX_CONF_OK;
    }

    if (ngx_strncmp(value[1].data, "local=", 6) == 0) {
        n = ngx_atoi(value[1].data + 6, value[1].len - 6);

        if (n < 1) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "invalid number of local leases \"%V\"",
                               &value[1]);
            return NGX_CONF_ERROR;
        }

        *local = n;
        return NGX_CONF_OK;
    }

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "invalid value \"%V\", \"closed\", \"open\" or "
                       "\"local=<number>\" expected", &value[1]);

    return NGX_CONF_ERROR;
}
