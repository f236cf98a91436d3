
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_zk_lock_module.h"
#include "ngx_zk_lock_session.h"
#include "ngx_http_zk_lock_handler.h"
#include "ngx_zk_lock_params.h"
#include "ngx_http_zk_lock_variables.h"
#include "ngx_zk_lock_local.h"
#include "ngx_zk_lock_recipe.h"
#include "ngx_zk_lock_wait.h"
#include "ngx_zk_lock_keep.h"
#include "ngx_http_zk_lock_metrics.h"
#include "ngx_http_zk_lock_status.h"
#include "ngx_zk_lock_get.h"
#include "ngx_http_zk_lock_view.h"
#include "ngx_zk_lock_gate.h"


static void *ngx_http_zk_lock_create_main_conf(ngx_conf_t *cf);
static char *ngx_http_zk_lock_init_main_conf(ngx_conf_t *cf, void *conf);
static void *ngx_http_zk_lock_create_loc_conf(ngx_conf_t *cf);
static char *ngx_http_zk_lock_merge_loc_conf(ngx_conf_t *cf, void *parent,
    void *child);
static char *ngx_http_zk_lock_fail(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_zk_lock_off(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_zk_lock(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_zk_lock_counter_reach(ngx_conf_t *cf,
    ngx_http_zk_lock_spec_t *spec);
static char *ngx_http_zk_lock_register(ngx_conf_t *cf,
    ngx_http_zk_lock_spec_t *spec);
static char *ngx_http_zk_lock_same_recipe(ngx_conf_t *cf,
    ngx_http_zk_lock_main_conf_t *lmcf, ngx_http_zk_lock_spec_t *spec);
static char *ngx_http_zk_lock_compile(ngx_conf_t *cf, ngx_str_t *value,
    ngx_http_complex_value_t **cvp);
static char *ngx_http_zk_lock_compile_path(ngx_conf_t *cf,
    ngx_http_zk_lock_spec_t *spec);
static ngx_int_t ngx_http_zk_lock_init(ngx_conf_t *cf);
static ngx_int_t ngx_http_zk_lock_init_local(ngx_conf_t *cf,
    ngx_http_zk_lock_main_conf_t *lmcf);
static ngx_int_t ngx_http_zk_lock_init_process(ngx_cycle_t *cycle);
static void ngx_http_zk_lock_recount(ngx_zk_lock_session_t *s,
    ngx_zk_lock_counter_t *c);
static void ngx_http_zk_lock_exit_process(ngx_cycle_t *cycle);


static ngx_conf_num_bounds_t  ngx_http_zk_lock_status_bounds = {
    ngx_conf_check_num_bounds, 400, 599
};


static ngx_conf_num_bounds_t  ngx_http_zk_lock_max_path_bounds = {
    ngx_conf_check_num_bounds, 2, NGX_ZK_LOCK_MAX_PATH
};


static ngx_conf_num_bounds_t  ngx_http_zk_lock_max_waiting_bounds = {
    ngx_conf_check_num_bounds, 1, -1
};




/* names the brokers' sockets, apart from stream's */
static ngx_str_t  ngx_http_zk_lock_layer = ngx_string("http");


static ngx_conf_enum_t  ngx_http_zk_lock_log_levels[] = {
    { ngx_string("info"), NGX_LOG_INFO },
    { ngx_string("notice"), NGX_LOG_NOTICE },
    { ngx_string("warn"), NGX_LOG_WARN },
    { ngx_string("error"), NGX_LOG_ERR },
    { ngx_null_string, 0 }
};


static ngx_conf_enum_t  ngx_http_zk_lock_lost[] = {
    { ngx_string("finish"), 0 },
    { ngx_string("abort"), 1 },
    { ngx_null_string, 0 }
};


static ngx_command_t  ngx_http_zk_lock_commands[] = {

    { ngx_string("zk_hosts"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_zk_lock_conf_hosts,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_zk_lock_main_conf_t, zk),
      NULL },

    { ngx_string("zk_session_timeout"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_zk_lock_main_conf_t, zk.session_timeout),
      &ngx_zk_lock_conf_timeout_post },

    { ngx_string("zk_auth"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE2,
      ngx_zk_lock_conf_auth,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_zk_lock_main_conf_t, zk),
      NULL },

    { ngx_string("zk_acl"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_1MORE,
      ngx_zk_lock_conf_acl,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_zk_lock_main_conf_t, zk),
      NULL },

    { ngx_string("zk_sessions"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_zk_lock_main_conf_t, zk.sessions),
      &ngx_zk_lock_conf_sessions_bounds },

    { ngx_string("zk_lock_class"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_2MORE,
      ngx_zk_lock_conf_class,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_zk_lock_main_conf_t, zk),
      NULL },

    { ngx_string("zk_lock_max_path"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_size_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_zk_lock_main_conf_t, max_path),
      &ngx_http_zk_lock_max_path_bounds },

    { ngx_string("zk_lock_max_waiting"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_zk_lock_main_conf_t, max_waiting),
      &ngx_http_zk_lock_max_waiting_bounds },

    { ngx_string("zk_lock_histogram_buckets"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_1MORE,
      ngx_http_zk_lock_metrics_buckets,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("zk_mutex"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_1MORE,
      ngx_http_zk_lock,
      NGX_HTTP_LOC_CONF_OFFSET,
      NGX_HTTP_ZK_LOCK_MUTEX,
      NULL },

    { ngx_string("zk_semaphore"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_1MORE,
      ngx_http_zk_lock,
      NGX_HTTP_LOC_CONF_OFFSET,
      NGX_HTTP_ZK_LOCK_SEMAPHORE,
      NULL },

    { ngx_string("zk_rwlock"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_1MORE,
      ngx_http_zk_lock,
      NGX_HTTP_LOC_CONF_OFFSET,
      NGX_HTTP_ZK_LOCK_RWLOCK_READ,
      NULL },

    { ngx_string("zk_lock_timeout"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_zk_lock_loc_conf_t, timeout),
      NULL },

    { ngx_string("zk_lock_status"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_zk_lock_loc_conf_t, status),
      &ngx_http_zk_lock_status_bounds },

    { ngx_string("zk_lock_log_level"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_enum_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_zk_lock_loc_conf_t, log_level),
      &ngx_http_zk_lock_log_levels },

    { ngx_string("zk_lock"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_zk_lock_off,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("zk_lock_status_page"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS|NGX_CONF_TAKE1,
      ngx_http_zk_lock_status_page,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("zk_lock_fleet_view"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS|NGX_CONF_TAKE1,
      ngx_http_zk_lock_fleet_view,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("zk_lock_fail"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_zk_lock_fail,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("zk_lock_dry_run"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_FLAG,
      ngx_conf_set_flag_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_zk_lock_loc_conf_t, dry_run),
      NULL },

    { ngx_string("zk_lock_lost"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_enum_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_zk_lock_loc_conf_t, lost_abort),
      &ngx_http_zk_lock_lost },

      ngx_null_command
};


static ngx_http_module_t  ngx_http_zk_lock_module_ctx = {
    ngx_http_zk_lock_add_variables,        /* preconfiguration */
    ngx_http_zk_lock_init,                 /* postconfiguration */

    ngx_http_zk_lock_create_main_conf,     /* create main configuration */
    ngx_http_zk_lock_init_main_conf,       /* init main configuration */

    NULL,                                  /* create server configuration */
    NULL,                                  /* merge server configuration */

    ngx_http_zk_lock_create_loc_conf,      /* create location configuration */
    ngx_http_zk_lock_merge_loc_conf        /* merge location configuration */
};


ngx_module_t  ngx_http_zk_lock_module = {
    NGX_MODULE_V1,
    &ngx_http_zk_lock_module_ctx,          /* module context */
    ngx_http_zk_lock_commands,             /* module directives */
    NGX_HTTP_MODULE,                       /* module type */
    NULL,                                  /* init master */
    NULL,                                  /* init module */
    ngx_http_zk_lock_init_process,         /* init process */
    NULL,                                  /* init thread */
    NULL,                                  /* exit thread */
    ngx_http_zk_lock_exit_process,         /* exit process */
    NULL,                                  /* exit master */
    NGX_MODULE_V1_PADDING
};


static void *
ngx_http_zk_lock_create_main_conf(ngx_conf_t *cf)
{
    ngx_http_zk_lock_main_conf_t  *lmcf;

    lmcf = ngx_pcalloc(cf->pool, sizeof(ngx_http_zk_lock_main_conf_t));
    if (lmcf == NULL) {
        return NULL;
    }

    /*
     * set by ngx_pcalloc():
     *
     *     lmcf->session = NULL;
     *     lmcf->used = { 0, NULL };
     *     lmcf->counters = NULL;
     *     lmcf->literals = NULL;
     *     lmcf->buckets = NULL;
     *     lmcf->max_timeout = 0;
     */

    ngx_zk_lock_conf_create(&lmcf->zk);
    lmcf->max_waiting = NGX_CONF_UNSET_UINT;
    lmcf->max_path = NGX_CONF_UNSET_SIZE;

    return lmcf;
}


static char *
ngx_http_zk_lock_init_main_conf(ngx_conf_t *cf, void *conf)
{
    ngx_http_zk_lock_main_conf_t *lmcf = conf;

    ngx_uint_t                   i;
    ngx_http_zk_lock_metric_t   *metric;
    ngx_http_zk_lock_literal_t  *lit;

    if (ngx_zk_lock_conf_init(cf, &lmcf->zk) != NGX_CONF_OK) {
        return NGX_CONF_ERROR;
    }

    ngx_conf_init_uint_value(lmcf->max_waiting, 0);
    ngx_conf_init_size_value(lmcf->max_path, 1024);

    /* a literal path is known now: it would fail every request */

    if (lmcf->literals) {
        lit = lmcf->literals->elts;

        for (i = 0; i < lmcf->literals->nelts; i++) {
            if (lit[i].name.len > lmcf->max_path) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "lock path in %V:%ui is %uz bytes, "
                                   "longer than zk_lock_max_path (%uz): "
                                   "\"%V\"", &lit[i].file, lit[i].line,
                                   lit[i].name.len, lmcf->max_path,
                                   ngx_zk_lock_path_short(cf->pool,
                                                          &lit[i].name));
                return NGX_CONF_ERROR;
            }
        }
    }

    /* "/zookeeper" is the server's own, unless below a chroot */

    if (lmcf->metrics == NULL || lmcf->zk.chroot.len) {
        return NGX_CONF_OK;
    }

    metric = lmcf->metrics->elts;

    for (i = 0; i < lmcf->metrics->nelts; i++) {
        if (metric[i].name.len >= 10
            && ngx_strncmp(metric[i].name.data, "/zookeeper", 10) == 0
            && (metric[i].name.len == 10 || metric[i].name.data[10] == '/'))
        {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "invalid lock path \"%V\": segment 1 is "
                               "reserved by ZooKeeper (a chroot in "
                               "\"zk_hosts\" allows it)",
                               ngx_zk_lock_path_short(cf->pool,
                                                      &metric[i].name));
            return NGX_CONF_ERROR;
        }
    }

    return NGX_CONF_OK;
}


static void *
ngx_http_zk_lock_create_loc_conf(ngx_conf_t *cf)
{
    ngx_http_zk_lock_loc_conf_t  *conf;

    conf = ngx_pcalloc(cf->pool, sizeof(ngx_http_zk_lock_loc_conf_t));
    if (conf == NULL) {
        return NULL;
    }

    /*
     * set by ngx_pcalloc():
     *
     *     conf->locks = NULL;
     *     conf->status_page = 0;
     *     conf->fleet_view = 0;
     *     conf->off = 0;
     */

    conf->timeout = NGX_CONF_UNSET_MSEC;
    conf->status = NGX_CONF_UNSET_UINT;
    conf->log_level = NGX_CONF_UNSET_UINT;
    conf->fail_open = NGX_CONF_UNSET;
    conf->fail_local = NGX_CONF_UNSET_UINT;
    conf->lost_abort = NGX_CONF_UNSET;
    conf->dry_run = NGX_CONF_UNSET;

    return conf;
}


static char *
ngx_http_zk_lock_merge_loc_conf(ngx_conf_t *cf, void *parent, void *child)
{
    ngx_http_zk_lock_loc_conf_t *prev = parent;
    ngx_http_zk_lock_loc_conf_t *conf = child;

    /*
     * zk_lock off, and the status page, which must answer when a lock
     * does not: no lock of the levels around
     */

    if ((conf->off || conf->status_page || conf->fleet_view) && conf->locks)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "a lock directive where %s",
                           conf->off ? "\"zk_lock off\" is set"
                           : conf->status_page
                             ? "\"zk_lock_status_page\" is: "
                               "the status page is never gated"
                             : "\"zk_lock_fleet_view\" is: "
                               "the fleet view is never gated");
        return NGX_CONF_ERROR;
    }

    if (conf->locks == NULL && !conf->off && !conf->status_page
        && !conf->fleet_view)
    {
        conf->locks = prev->locks;
    }

    ngx_conf_merge_msec_value(conf->timeout, prev->timeout, 60000);
    ngx_conf_merge_uint_value(conf->status, prev->status,
                              NGX_HTTP_SERVICE_UNAVAILABLE);
    ngx_conf_merge_uint_value(conf->log_level, prev->log_level,
                              NGX_LOG_ERR);
    ngx_conf_merge_value(conf->fail_open, prev->fail_open, 0);
    ngx_conf_merge_uint_value(conf->fail_local, prev->fail_local, 0);
    ngx_conf_merge_value(conf->lost_abort, prev->lost_abort, 0);
    ngx_conf_merge_value(conf->dry_run, prev->dry_run, 0);

    ngx_http_zk_lock_metrics_timeouts(cf, conf);

    return NGX_CONF_OK;
}


/* zk_lock_fail closed | open | local=<n> */

static char *
ngx_http_zk_lock_fail(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_zk_lock_loc_conf_t *llcf = conf;

    char                          *rv;
    ngx_http_zk_lock_main_conf_t  *lmcf;

    rv = ngx_zk_lock_params_fail(cf, &llcf->fail_open, &llcf->fail_local);

    if (rv == NGX_CONF_OK && llcf->fail_local) {
        lmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_zk_lock_module);
        lmcf->local_used = 1;
    }

    return rv;
}


/* zk_lock off: no lock of the levels around, as auth_request off */

static char *
ngx_http_zk_lock_off(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_zk_lock_loc_conf_t *llcf = conf;

    ngx_str_t  *value;

    value = cf->args->elts;

    if (ngx_strcmp(value[1].data, "off") != 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid value \"%V\", \"off\" expected "
                           "(the locks are zk_mutex, zk_semaphore and "
                           "zk_rwlock)", &value[1]);
        return NGX_CONF_ERROR;
    }

    if (llcf->off) {
        return "is duplicate";
    }

    llcf->off = 1;

    return NGX_CONF_OK;
}


/*
 * zk_mutex <path> [timeout=<time>] [reentrant=on|off] [revocable=on|off]
 *     [keep=<time>]
 * zk_semaphore <path> leases=<n> [timeout=<time>] [protocol=v1|v2]
 *     [weight=<n>|<$variable>] [keep=<time>]
 * zk_rwlock <path> read|write [timeout=<time>] [revocable=on|off]
 */

static char *
ngx_http_zk_lock(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_zk_lock_loc_conf_t *llcf = conf;

    ngx_str_t                     *value;
    ngx_http_zk_lock_spec_t       *spec;
    ngx_http_zk_lock_main_conf_t  *lmcf;

    value = cf->args->elts;

    if (llcf->locks == NULL) {
        llcf->locks = ngx_array_create(cf->pool, 1,
                                       sizeof(ngx_http_zk_lock_spec_t));
        if (llcf->locks == NULL) {
            return NGX_CONF_ERROR;
        }
    }

    spec = ngx_array_push(llcf->locks);
    if (spec == NULL) {
        return NGX_CONF_ERROR;
    }

    lmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_zk_lock_module);

    ngx_zk_lock_params_init(&spec->lock, cmd->offset, &value[1]);
    spec->lock.report = ngx_http_zk_lock_metrics_keep;
    spec->lock.fair_report = ngx_http_zk_lock_metrics_fair;
    spec->lock.classes = &lmcf->zk.classes;
    spec->weight_cv = NULL;
    spec->fair_cv = NULL;
    spec->fair_weight_cv = NULL;
    spec->priority_cv = NULL;

    if (ngx_http_zk_lock_compile_path(cf, spec) != NGX_CONF_OK) {
        return NGX_CONF_ERROR;
    }

    if (ngx_zk_lock_params(cf, cmd, &spec->lock) != NGX_CONF_OK) {
        return NGX_CONF_ERROR;
    }

    if (ngx_zk_lock_params_unique(cf, llcf->locks, &spec->lock, 1)
        != NGX_CONF_OK)
    {
        return NGX_CONF_ERROR;
    }

    if (spec->lock.weight_var.len
        && ngx_http_zk_lock_compile(cf, &spec->lock.weight_var,
                                    &spec->weight_cv)
           != NGX_CONF_OK)
    {
        return NGX_CONF_ERROR;
    }

    if (spec->lock.fair.len
        && ngx_http_zk_lock_compile(cf, &spec->lock.fair, &spec->fair_cv)
           != NGX_CONF_OK)
    {
        return NGX_CONF_ERROR;
    }

    if (spec->lock.fair_weight_var.len
        && ngx_http_zk_lock_compile(cf, &spec->lock.fair_weight_var,
                                    &spec->fair_weight_cv)
           != NGX_CONF_OK)
    {
        return NGX_CONF_ERROR;
    }

    if (spec->lock.priority.len
        && ngx_http_zk_lock_compile(cf, &spec->lock.priority,
                                    &spec->priority_cv)
           != NGX_CONF_OK)
    {
        return NGX_CONF_ERROR;
    }

    if (ngx_http_zk_lock_counter_reach(cf, spec) != NGX_CONF_OK) {
        return NGX_CONF_ERROR;
    }

    if (lmcf->used.data == NULL) {
        lmcf->used = cmd->name;
    }

    return ngx_http_zk_lock_register(cf, spec);
}


/*
 * A request's variable may name any node below the path's literal part:
 * the lease count there would become a lock, its children the request's
 */

static char *
ngx_http_zk_lock_counter_reach(ngx_conf_t *cf, ngx_http_zk_lock_spec_t *spec)
{
    u_char     *p, *dollar;
    ngx_str_t  *c, *name, top;

    c = &spec->lock.counter;
    name = &spec->lock.name;
    dollar = ngx_strlchr(name->data, name->data + name->len, '$');

    if (c->len == 0 || dollar == NULL) {
        return NGX_CONF_OK;
    }

    for (p = dollar; *p != '/'; p--) { /* void */ }

    if (c->len > (size_t) (p - name->data)
        && ngx_strncmp(c->data, name->data, p - name->data) == 0
        && c->data[p - name->data] == '/')
    {
        top.data = name->data;
        top.len = p - name->data + 1;

        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "the lease count \"%V\" is below \"%V\", where "
                           "the variable of the lock path \"%V\" may lead: "
                           "a request could use it as a lock",
                           ngx_zk_lock_path_short(cf->pool, c),
                           ngx_zk_lock_path_short(cf->pool, &top),
                           ngx_zk_lock_path_short(cf->pool, name));
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


static char *
ngx_http_zk_lock_register(ngx_conf_t *cf, ngx_http_zk_lock_spec_t *spec)
{
    ngx_uint_t                     i;
    ngx_str_t                     *path;
    ngx_http_zk_lock_metric_t     *metric;
    ngx_http_zk_lock_main_conf_t  *lmcf;

    lmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_zk_lock_module);

    if (ngx_http_zk_lock_same_recipe(cf, lmcf, spec) != NGX_CONF_OK) {
        return NGX_CONF_ERROR;
    }

    if (lmcf->metrics == NULL) {
        lmcf->metrics = ngx_array_create(cf->pool, 4,
                                         sizeof(ngx_http_zk_lock_metric_t));
        if (lmcf->metrics == NULL) {
            return NGX_CONF_ERROR;
        }
    }

    /* one path in several locations: one series, not the same one twice */

    metric = lmcf->metrics->elts;

    for (i = 0; i < lmcf->metrics->nelts; i++) {
        if (metric[i].type == spec->lock.type
            && metric[i].name.len == spec->lock.name.len
            && ngx_strncmp(metric[i].name.data, spec->lock.name.data,
                           spec->lock.name.len) == 0)
        {
            break;
        }
    }

    spec->index = i;

    if (i == lmcf->metrics->nelts) {
        metric = ngx_array_push(lmcf->metrics);
        if (metric == NULL) {
            return NGX_CONF_ERROR;
        }

        metric->name = spec->lock.name;
        metric->type = spec->lock.type;
        metric->leases = spec->lock.leases;
        metric->counter = spec->lock.counter;
        metric->fair = 0;
        metric->priority = 0;
    }

    metric = lmcf->metrics->elts;
    metric[i].fair |= ngx_zk_lock_params_flows(&spec->lock);
    metric[i].priority |= (spec->lock.priority.len != 0);

    if (ngx_zk_lock_params_number(cf, &lmcf->specs, spec,
                                  sizeof(ngx_http_zk_lock_spec_t))
        != NGX_CONF_OK)
    {
        return NGX_CONF_ERROR;
    }

    if (spec->lock.counter.len) {
        if (lmcf->counters == NULL) {
            lmcf->counters = ngx_array_create(cf->pool, 2, sizeof(ngx_str_t));
            if (lmcf->counters == NULL) {
                return NGX_CONF_ERROR;
            }
        }

        path = ngx_array_push(lmcf->counters);
        if (path == NULL) {
            return NGX_CONF_ERROR;
        }

        *path = spec->lock.counter;
    }

    return NGX_CONF_OK;
}


/*
 * One literal path, one recipe, in "http" and "stream" alike (see
 * ngx_zk_lock_params_recipe()): a zk_mutex and a zk_semaphore with 5
 * leases on "/t" would both count the same nodes, each with its own
 * bound, and a request holding one would re-enter the other.  A path with
 * variables is checked when it is evaluated (re-entry refuses another
 * lock on the nodes a request holds).
 */

static char *
ngx_http_zk_lock_same_recipe(ngx_conf_t *cf,
    ngx_http_zk_lock_main_conf_t *lmcf, ngx_http_zk_lock_spec_t *spec)
{
    ngx_uint_t                   i;
    ngx_http_zk_lock_literal_t  *lit;

    if (spec->lock.transient) {
        return NGX_CONF_OK;     /* a variable segment */
    }

    if (lmcf->literals == NULL) {
        lmcf->literals = ngx_array_create(cf->pool, 4,
                                          sizeof(ngx_http_zk_lock_literal_t));
        if (lmcf->literals == NULL) {
            return NGX_CONF_ERROR;
        }
    }

    if (ngx_zk_lock_params_recipe(cf, &spec->lock) != NGX_CONF_OK) {
        return NGX_CONF_ERROR;
    }

    /* the same recipe, then: one entry (zk_lock_max_path, the fleet view) */

    lit = lmcf->literals->elts;

    for (i = 0; i < lmcf->literals->nelts; i++) {
        if (lit[i].name.len == spec->lock.name.len
            && ngx_strncmp(lit[i].name.data, spec->lock.name.data,
                           spec->lock.name.len) == 0)
        {
            lit[i].fair |= ngx_zk_lock_params_flows(&spec->lock);
            return NGX_CONF_OK;
        }
    }

    lit = ngx_array_push(lmcf->literals);
    if (lit == NULL) {
        return NGX_CONF_ERROR;
    }

    lit->name = spec->lock.name;
    lit->counter = spec->lock.counter;
    lit->leases = spec->lock.leases;
    lit->rw = (spec->lock.type == NGX_HTTP_ZK_LOCK_RWLOCK_READ
               || spec->lock.type == NGX_HTTP_ZK_LOCK_RWLOCK_WRITE);
    lit->v2 = spec->lock.v2;
    lit->fair = ngx_zk_lock_params_flows(&spec->lock);
    lit->file = cf->conf_file->file.name;
    lit->line = cf->conf_file->line;

    return NGX_CONF_OK;
}


/*
 * weight=<$variable>, fair=<key>, fair_weight=<$variable>: evaluated for
 * each request (see eval.c)
 */

static char *
ngx_http_zk_lock_compile(ngx_conf_t *cf, ngx_str_t *value,
    ngx_http_complex_value_t **cvp)
{
    ngx_http_complex_value_t          *cv;
    ngx_http_compile_complex_value_t   ccv;

    cv = ngx_palloc(cf->pool, sizeof(ngx_http_complex_value_t));
    if (cv == NULL) {
        return NGX_CONF_ERROR;
    }

    *cvp = cv;

    ngx_memzero(&ccv, sizeof(ngx_http_compile_complex_value_t));

    ccv.cf = cf;
    ccv.value = value;
    ccv.complex_value = cv;

    if (ngx_http_compile_complex_value(&ccv) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


/*
 * The path is kept as segments, each a complex value: a variable cannot
 * then change how many levels the path has (its value is checked at run
 * time), and the literal segments are checked here.
 */

static char *
ngx_http_zk_lock_compile_path(ngx_conf_t *cf, ngx_http_zk_lock_spec_t *spec)
{
    u_char                            *p, *last;
    ngx_str_t                          seg;
    const char                        *err;
    ngx_uint_t                         n;
    ngx_http_complex_value_t          *cv;
    ngx_http_compile_complex_value_t   ccv;

    p = spec->lock.name.data;
    last = p + spec->lock.name.len;

    if (spec->lock.name.len < 2 || p[0] != '/') {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "lock path \"%V\" must be absolute and name a node "
                           "below \"/\"",
                           ngx_zk_lock_path_short(cf->pool,
                                                  &spec->lock.name));
        return NGX_CONF_ERROR;
    }

    spec->segments = ngx_array_create(cf->pool, 4,
                                      sizeof(ngx_http_complex_value_t));
    if (spec->segments == NULL) {
        return NGX_CONF_ERROR;
    }

    for (n = 0; p < last; n++) {
        seg.data = ++p;
        p = ngx_strlchr(p, last, '/');
        if (p == NULL) {
            p = last;
        }

        seg.len = p - seg.data;

        cv = ngx_array_push(spec->segments);
        if (cv == NULL) {
            return NGX_CONF_ERROR;
        }

        ngx_memzero(&ccv, sizeof(ngx_http_compile_complex_value_t));

        ccv.cf = cf;
        ccv.value = &seg;
        ccv.complex_value = cv;

        if (ngx_http_compile_complex_value(&ccv) != NGX_OK) {
            return NGX_CONF_ERROR;
        }

        if (cv->lengths && spec->lock.transient == 0) {
            /* the first variable segment, + 1 */
            spec->lock.transient = n + 1;
        }

        /* a literal "/zookeeper" is checked once the chroot is known */

        if (cv->lengths == NULL) {
            err = ngx_zk_lock_path_check_segment(&seg, 0);

            if (err) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "invalid lock path \"%V\": segment %ui "
                                   "is %s",
                                   ngx_zk_lock_path_short(cf->pool,
                                                          &spec->lock.name),
                                   n + 1, err);
                return NGX_CONF_ERROR;
            }
        }
    }

    /* the levels from the first variable segment to the end of the path */

    if (spec->lock.transient) {
        spec->lock.transient = n - spec->lock.transient + 1;
    }

    return NGX_CONF_OK;
}


static ngx_int_t
ngx_http_zk_lock_init(ngx_conf_t *cf)
{
    ngx_http_handler_pt           *h;
    ngx_http_core_loc_conf_t      *clcf;
    ngx_http_core_main_conf_t     *cmcf;
    ngx_http_zk_lock_main_conf_t  *lmcf;

    if (ngx_zk_lock_gate_built(cf, NGX_ZK_LOCK_VERSION, NGX_ZK_LOCK_ABI)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    lmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_zk_lock_module);

    if (lmcf->used.data == NULL) {
        return NGX_OK;
    }

    if (lmcf->zk.hosts == NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"%V\" is used but \"zk_hosts\" is not set",
                           &lmcf->used);
        return NGX_ERROR;
    }

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);

    lmcf->session = ngx_zk_lock_conf_session(cf, &lmcf->zk, clcf->resolver,
                                             clcf->resolver_timeout);
    if (lmcf->session == NULL) {
        return NGX_ERROR;
    }

    if (ngx_http_zk_lock_metrics_init(cf, lmcf) != NGX_OK) {
        return NGX_ERROR;
    }

    if (lmcf->local_used && ngx_http_zk_lock_init_local(cf, lmcf) != NGX_OK) {
        return NGX_ERROR;
    }

    /*
     * After access checks (auth_basic, auth_request): a request that is
     * refused never makes a ZooKeeper call.  Unlike the access phase, this
     * one runs for subrequests too.
     */

    cmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_core_module);

    h = ngx_array_push(&cmcf->phases[NGX_HTTP_PRECONTENT_PHASE].handlers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    *h = ngx_http_zk_lock_handler;

    return NGX_OK;
}


/* zk_lock_fail local=: every lock has its place in the local leases */

static ngx_int_t
ngx_http_zk_lock_init_local(ngx_conf_t *cf,
    ngx_http_zk_lock_main_conf_t *lmcf)
{
    ngx_int_t                   index;
    ngx_uint_t                  i;
    ngx_http_zk_lock_metric_t  *m;

    m = lmcf->metrics->elts;

    for (i = 0; i < lmcf->metrics->nelts; i++) {
        index = ngx_zk_lock_local_add(cf, m[i].type, &m[i].name,
                                      &lmcf->local_zone);
        if (index == NGX_ERROR) {
            return NGX_ERROR;
        }

        m[i].local = index;
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_zk_lock_init_process(ngx_cycle_t *cycle)
{
    ngx_str_t                     *path;
    ngx_uint_t                     i;
    ngx_zk_lock_session_t         *s;
    ngx_http_zk_lock_main_conf_t  *lmcf;

    /* not in cache managers and loaders */

    if (ngx_process != NGX_PROCESS_WORKER
        && ngx_process != NGX_PROCESS_SINGLE)
    {
        return NGX_OK;
    }

    lmcf = ngx_http_cycle_get_module_main_conf(cycle, ngx_http_zk_lock_module);

    if (lmcf == NULL || lmcf->session == NULL) {
        return NGX_OK;
    }

    ngx_http_zk_lock_metrics_worker();

    if (ngx_zk_lock_local_worker(cycle, lmcf->local_zone) != NGX_OK) {
        return NGX_ERROR;
    }

    /* the layers above the session hear of it through these alone */

    s = lmcf->session;

    ngx_zk_lock_gate_waiters(&lmcf->waiters, s, cycle->log);

    s->state_handler = ngx_http_zk_lock_metrics_session;
    s->connect_handler = ngx_zk_lock_gate_connected;
    s->heard_handler = ngx_zk_lock_gate_heard;
    s->expire_handler = ngx_zk_lock_recipe_expired;
    s->jeopardy_handler = ngx_zk_lock_gate_jeopardy;
    s->data = &lmcf->waiters;
    s->close_handler = ngx_zk_lock_recipe_free;
    s->watch_handler = ngx_zk_lock_wait_event;

    ngx_zk_lock_counters_handler(ngx_zk_lock_recipe_recount);
    ngx_zk_lock_counters_handler(ngx_http_zk_lock_recount);
    ngx_zk_lock_recipe_handler(&ngx_zk_lock_wait_owner);
    ngx_zk_lock_keep_init();

    if (ngx_zk_lock_get_init(cycle, s, &lmcf->zk, lmcf->specs,
                             lmcf->local_used, &ngx_http_zk_lock_layer)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (s->brokered) {
        return NGX_OK;
    }

    /*
     * Lease counts are read and watched from the first connect, so that
     * a worker's first request already sees the fleet-wide limit.
     */

    if (lmcf->counters) {
        path = lmcf->counters->elts;

        for (i = 0; i < lmcf->counters->nelts; i++) {
            if (ngx_zk_lock_counter(s, &path[i]) == NULL) {
                return NGX_ERROR;
            }
        }
    }

    return NGX_OK;
}


/* a lease count changed: what the metrics show (the core's recipes too) */

static void
ngx_http_zk_lock_recount(ngx_zk_lock_session_t *s,
    ngx_zk_lock_counter_t *c)
{
    ngx_http_zk_lock_metrics_leases(c->path, c->value);
}


static void
ngx_http_zk_lock_exit_process(ngx_cycle_t *cycle)
{
    ngx_http_zk_lock_main_conf_t  *lmcf;

    /* a status page may show stream locks alone: with no session here */
    ngx_http_zk_lock_status_exit();

    lmcf = ngx_http_cycle_get_module_main_conf(cycle, ngx_http_zk_lock_module);

    if (lmcf == NULL || lmcf->session == NULL) {
        return;
    }

    ngx_zk_lock_session_close(lmcf->session);

    /* its last completions have run: the fleet view's snapshots can go */
    ngx_http_zk_lock_view_exit();
}


