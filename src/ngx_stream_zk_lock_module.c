
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_stream.h>

#include "ngx_stream_zk_lock_module.h"
#include "ngx_stream_zk_lock_handler.h"
#include "ngx_stream_zk_lock_variables.h"
#include "ngx_zk_lock_recipe.h"
#include "ngx_zk_lock_wait.h"
#include "ngx_zk_lock_keep.h"
#include "ngx_zk_lock_counter.h"
#include "ngx_zk_lock_path.h"
#include "ngx_zk_lock_get.h"


/*
 * The "stream" layer: a connection waits where its server's content
 * handler would start, before proxy_pass connects, until it holds its
 * locks, and holds them for its life.  The worker's ZooKeeper session
 * and the recipes are the core's, as in "http"; this layer has a session
 * of its own (see the README).
 */


static void *ngx_stream_zk_lock_create_main_conf(ngx_conf_t *cf);
static char *ngx_stream_zk_lock_init_main_conf(ngx_conf_t *cf, void *conf);
static void *ngx_stream_zk_lock_create_srv_conf(ngx_conf_t *cf);
static char *ngx_stream_zk_lock_merge_srv_conf(ngx_conf_t *cf, void *parent,
    void *child);
static char *ngx_stream_zk_lock(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static void ngx_stream_zk_lock_fair_report(ngx_zk_lock_params_t *lp,
    ngx_uint_t flows, ngx_uint_t claim, void *top, ngx_uint_t ntop,
    void *classes, ngx_uint_t nclasses);
static char *ngx_stream_zk_lock_compile(ngx_conf_t *cf,
    ngx_stream_zk_lock_spec_t *spec);
static char *ngx_stream_zk_lock_fail(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static ngx_int_t ngx_stream_zk_lock_init(ngx_conf_t *cf);
static ngx_int_t ngx_stream_zk_lock_init_local(ngx_conf_t *cf,
    ngx_stream_zk_lock_main_conf_t *smcf);
static ngx_int_t ngx_stream_zk_lock_init_process(ngx_cycle_t *cycle);
static void ngx_stream_zk_lock_exit_process(ngx_cycle_t *cycle);


static ngx_str_t  ngx_stream_zk_lock_layer = ngx_string("stream");


static ngx_conf_enum_t  ngx_stream_zk_lock_lost_modes[] = {
    { ngx_string("finish"), 0 },
    { ngx_string("abort"), 1 },
    { ngx_null_string, 0 }
};


static ngx_conf_enum_t  ngx_stream_zk_lock_log_levels[] = {
    { ngx_string("info"), NGX_LOG_INFO },
    { ngx_string("notice"), NGX_LOG_NOTICE },
    { ngx_string("warn"), NGX_LOG_WARN },
    { ngx_string("error"), NGX_LOG_ERR },
    { ngx_null_string, 0 }
};


static ngx_command_t  ngx_stream_zk_lock_commands[] = {

    { ngx_string("zk_hosts"),
      NGX_STREAM_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_zk_lock_conf_hosts,
      NGX_STREAM_MAIN_CONF_OFFSET,
      offsetof(ngx_stream_zk_lock_main_conf_t, zk),
      NULL },

    { ngx_string("zk_session_timeout"),
      NGX_STREAM_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_STREAM_MAIN_CONF_OFFSET,
      offsetof(ngx_stream_zk_lock_main_conf_t, zk.session_timeout),
      &ngx_zk_lock_conf_timeout_post },

    { ngx_string("zk_auth"),
      NGX_STREAM_MAIN_CONF|NGX_CONF_TAKE2,
      ngx_zk_lock_conf_auth,
      NGX_STREAM_MAIN_CONF_OFFSET,
      offsetof(ngx_stream_zk_lock_main_conf_t, zk),
      NULL },

    { ngx_string("zk_acl"),
      NGX_STREAM_MAIN_CONF|NGX_CONF_1MORE,
      ngx_zk_lock_conf_acl,
      NGX_STREAM_MAIN_CONF_OFFSET,
      offsetof(ngx_stream_zk_lock_main_conf_t, zk),
      NULL },

    { ngx_string("zk_sessions"),
      NGX_STREAM_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_STREAM_MAIN_CONF_OFFSET,
      offsetof(ngx_stream_zk_lock_main_conf_t, zk.sessions),
      &ngx_zk_lock_conf_sessions_bounds },

    { ngx_string("zk_lock_class"),
      NGX_STREAM_MAIN_CONF|NGX_CONF_2MORE,
      ngx_zk_lock_conf_class,
      NGX_STREAM_MAIN_CONF_OFFSET,
      offsetof(ngx_stream_zk_lock_main_conf_t, zk),
      NULL },

    { ngx_string("zk_lock_max_waiting"),
      NGX_STREAM_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_STREAM_MAIN_CONF_OFFSET,
      offsetof(ngx_stream_zk_lock_main_conf_t, max_waiting),
      NULL },

    { ngx_string("zk_mutex"),
      NGX_STREAM_MAIN_CONF|NGX_STREAM_SRV_CONF|NGX_CONF_1MORE,
      ngx_stream_zk_lock,
      NGX_STREAM_SRV_CONF_OFFSET,
      NGX_ZK_LOCK_MUTEX,
      NULL },

    { ngx_string("zk_semaphore"),
      NGX_STREAM_MAIN_CONF|NGX_STREAM_SRV_CONF|NGX_CONF_1MORE,
      ngx_stream_zk_lock,
      NGX_STREAM_SRV_CONF_OFFSET,
      NGX_ZK_LOCK_SEMAPHORE,
      NULL },

    { ngx_string("zk_rwlock"),
      NGX_STREAM_MAIN_CONF|NGX_STREAM_SRV_CONF|NGX_CONF_1MORE,
      ngx_stream_zk_lock,
      NGX_STREAM_SRV_CONF_OFFSET,
      NGX_ZK_LOCK_RWLOCK_READ,
      NULL },

    { ngx_string("zk_lock_timeout"),
      NGX_STREAM_MAIN_CONF|NGX_STREAM_SRV_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_STREAM_SRV_CONF_OFFSET,
      offsetof(ngx_stream_zk_lock_srv_conf_t, timeout),
      NULL },

    { ngx_string("zk_lock_log_level"),
      NGX_STREAM_MAIN_CONF|NGX_STREAM_SRV_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_enum_slot,
      NGX_STREAM_SRV_CONF_OFFSET,
      offsetof(ngx_stream_zk_lock_srv_conf_t, log_level),
      &ngx_stream_zk_lock_log_levels },

    { ngx_string("zk_lock_fail"),
      NGX_STREAM_MAIN_CONF|NGX_STREAM_SRV_CONF|NGX_CONF_TAKE1,
      ngx_stream_zk_lock_fail,
      NGX_STREAM_SRV_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("zk_lock_lost"),
      NGX_STREAM_MAIN_CONF|NGX_STREAM_SRV_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_enum_slot,
      NGX_STREAM_SRV_CONF_OFFSET,
      offsetof(ngx_stream_zk_lock_srv_conf_t, lost_abort),
      &ngx_stream_zk_lock_lost_modes },

      ngx_null_command
};


static ngx_stream_module_t  ngx_stream_zk_lock_module_ctx = {
    ngx_stream_zk_lock_variables_add,      /* preconfiguration */
    ngx_stream_zk_lock_init,               /* postconfiguration */

    ngx_stream_zk_lock_create_main_conf,   /* create main configuration */
    ngx_stream_zk_lock_init_main_conf,     /* init main configuration */

    ngx_stream_zk_lock_create_srv_conf,    /* create server configuration */
    ngx_stream_zk_lock_merge_srv_conf      /* merge server configuration */
};


ngx_module_t  ngx_stream_zk_lock_module = {
    NGX_MODULE_V1,
    &ngx_stream_zk_lock_module_ctx,        /* module context */
    ngx_stream_zk_lock_commands,           /* module directives */
    NGX_STREAM_MODULE,                     /* module type */
    NULL,                                  /* init master */
    NULL,                                  /* init module */
    ngx_stream_zk_lock_init_process,       /* init process */
    NULL,                                  /* init thread */
    NULL,                                  /* exit thread */
    ngx_stream_zk_lock_exit_process,       /* exit process */
    NULL,                                  /* exit master */
    NGX_MODULE_V1_PADDING
};


static void *
ngx_stream_zk_lock_create_main_conf(ngx_conf_t *cf)
{
    ngx_stream_zk_lock_main_conf_t  *smcf;

    smcf = ngx_pcalloc(cf->pool, sizeof(ngx_stream_zk_lock_main_conf_t));
    if (smcf == NULL) {
        return NULL;
    }

    /*
     * set by ngx_pcalloc():
     *
     *     smcf->used = { 0, NULL };
     *     smcf->session = NULL;
     *     smcf->stat_names = NULL;
     *     smcf->stats = NULL;
     */

    ngx_zk_lock_conf_create(&smcf->zk);
    smcf->max_waiting = NGX_CONF_UNSET_UINT;

    return smcf;
}


static char *
ngx_stream_zk_lock_init_main_conf(ngx_conf_t *cf, void *conf)
{
    ngx_stream_zk_lock_main_conf_t *smcf = conf;

    if (ngx_zk_lock_conf_init(cf, &smcf->zk) != NGX_CONF_OK) {
        return NGX_CONF_ERROR;
    }

    ngx_conf_init_uint_value(smcf->max_waiting, 0);

    return NGX_CONF_OK;
}


static void *
ngx_stream_zk_lock_create_srv_conf(ngx_conf_t *cf)
{
    ngx_stream_zk_lock_srv_conf_t  *sscf;

    sscf = ngx_pcalloc(cf->pool, sizeof(ngx_stream_zk_lock_srv_conf_t));
    if (sscf == NULL) {
        return NULL;
    }

    /*
     * set by ngx_pcalloc():
     *
     *     sscf->locks = NULL;
     */

    sscf->timeout = NGX_CONF_UNSET_MSEC;
    sscf->log_level = NGX_CONF_UNSET_UINT;
    sscf->fail_open = NGX_CONF_UNSET;
    sscf->fail_local = NGX_CONF_UNSET_UINT;
    sscf->lost_abort = NGX_CONF_UNSET;

    return sscf;
}


static char *
ngx_stream_zk_lock_merge_srv_conf(ngx_conf_t *cf, void *parent, void *child)
{
    ngx_stream_zk_lock_srv_conf_t *prev = parent;
    ngx_stream_zk_lock_srv_conf_t *conf = child;

    ngx_stream_core_srv_conf_t  *cscf;

    if (conf->locks == NULL) {
        conf->locks = prev->locks;
    }

    ngx_conf_merge_msec_value(conf->timeout, prev->timeout, 60000);
    ngx_conf_merge_uint_value(conf->log_level, prev->log_level,
                              NGX_LOG_ERR);
    ngx_conf_merge_value(conf->fail_open, prev->fail_open, 0);
    ngx_conf_merge_uint_value(conf->fail_local, prev->fail_local, 0);
    ngx_conf_merge_value(conf->lost_abort, prev->lost_abort, 0);

    if (conf->locks == NULL) {
        return NGX_CONF_OK;
    }

    /*
     * The locks are taken where the server's content handler (proxy_pass,
     * return) would start: after the access rules, TLS and the preread
     * phase, so that $ssl_preread_server_name and a server chosen by its
     * name are known, and before anything is sent upstream.  ssl_preread
     * ends its phase once it has the ClientHello, so no handler of that
     * phase would run after it.
     */

    cscf = ngx_stream_conf_get_module_srv_conf(cf, ngx_stream_core_module);

    if (cscf->handler != NULL
        && cscf->handler != ngx_stream_zk_lock_handler)
    {
        conf->content = cscf->handler;
        cscf->handler = ngx_stream_zk_lock_handler;
    }

    return NGX_CONF_OK;
}


/*
 * zk_mutex <path> [timeout=<time>] [revocable=on|off] [keep=<time>]
 * zk_semaphore <path> leases=<n> [timeout=<time>] [protocol=v1|v2]
 *     [weight=<n>|<$variable>] [keep=<time>]
 * zk_rwlock <path> read|write [timeout=<time>] [revocable=on|off]
 *
 * The parameters are "http"'s, parsed by the same code
 */

static char *
ngx_stream_zk_lock(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_stream_zk_lock_srv_conf_t *sscf = conf;

    ngx_int_t                        rc;
    ngx_str_t                       *value;
    ngx_zk_lock_stats_name_t        *n;
    ngx_stream_zk_lock_spec_t       *spec;
    ngx_stream_zk_lock_main_conf_t  *smcf;

    value = cf->args->elts;

    if (sscf->locks == NULL) {
        sscf->locks = ngx_array_create(cf->pool, 1,
                                       sizeof(ngx_stream_zk_lock_spec_t));
        if (sscf->locks == NULL) {
            return NGX_CONF_ERROR;
        }
    }

    spec = ngx_array_push(sscf->locks);
    if (spec == NULL) {
        return NGX_CONF_ERROR;
    }

    smcf = ngx_stream_conf_get_module_main_conf(cf,
                                                ngx_stream_zk_lock_module);

    ngx_memzero(spec, sizeof(ngx_stream_zk_lock_spec_t));
    ngx_zk_lock_params_init(&spec->lock, cmd->offset, &value[1]);
    spec->lock.fair_report = ngx_stream_zk_lock_fair_report;
    spec->lock.classes = &smcf->zk.classes;

    if (ngx_stream_zk_lock_compile(cf, spec) != NGX_CONF_OK) {
        return NGX_CONF_ERROR;
    }

    if (ngx_zk_lock_params(cf, cmd, &spec->lock) != NGX_CONF_OK) {
        return NGX_CONF_ERROR;
    }

    /* no re-entry in stream: a second lock on a path waits for the first */

    if (ngx_zk_lock_params_unique(cf, sscf->locks, &spec->lock, 0)
        != NGX_CONF_OK)
    {
        return NGX_CONF_ERROR;
    }

    if (ngx_zk_lock_params_recipe(cf, &spec->lock) != NGX_CONF_OK) {
        return NGX_CONF_ERROR;
    }

    if (spec->lock.reentrant == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"reentrant=off\" is not for \"stream\": a "
                           "connection takes a lock once");
        return NGX_CONF_ERROR;
    }

    if (spec->lock.weight_var.len) {
        spec->weight_cv = ngx_stream_zk_lock_variables_compile(cf,
                                                   &spec->lock.weight_var);
        if (spec->weight_cv == NULL) {
            return NGX_CONF_ERROR;
        }
    }

    if (spec->lock.fair.len) {
        spec->fair_cv = ngx_stream_zk_lock_variables_compile(cf,
                                                         &spec->lock.fair);
        if (spec->fair_cv == NULL) {
            return NGX_CONF_ERROR;
        }
    }

    if (spec->lock.fair_weight_var.len) {
        spec->fair_weight_cv = ngx_stream_zk_lock_variables_compile(cf,
                                              &spec->lock.fair_weight_var);
        if (spec->fair_weight_cv == NULL) {
            return NGX_CONF_ERROR;
        }
    }

    if (spec->lock.priority.len) {
        spec->priority_cv = ngx_stream_zk_lock_variables_compile(cf,
                                                     &spec->lock.priority);
        if (spec->priority_cv == NULL) {
            return NGX_CONF_ERROR;
        }
    }

    if (smcf->used.data == NULL) {
        smcf->used = cmd->name;
    }

    rc = ngx_zk_lock_stats_add(cf, &smcf->stat_names, &spec->lock.name,
                               spec->lock.type);
    if (rc == NGX_ERROR) {
        return NGX_CONF_ERROR;
    }

    spec->stat = rc;

    if (ngx_zk_lock_params_flows(&spec->lock)) {
        n = smcf->stat_names->elts;
        n[rc].fair = 1;
        n[rc].priority |= (spec->lock.priority.len != 0);
    }

    return ngx_zk_lock_params_number(cf, &smcf->specs, spec,
                                     sizeof(ngx_stream_zk_lock_spec_t));
}


/*
 * fair=: the flows of the pool that keeps the lock's leases, the
 * instance's claim and the flows that hold the most, every quantum
 * (keep.c), and with priority= its classes; the HTTP module's status
 * page shows them
 */

static void
ngx_stream_zk_lock_fair_report(ngx_zk_lock_params_t *lp, ngx_uint_t flows,
    ngx_uint_t claim, void *top, ngx_uint_t ntop, void *classes,
    ngx_uint_t nclasses)
{
    ngx_stream_zk_lock_spec_t  *spec = (ngx_stream_zk_lock_spec_t *) lp;

    ngx_stream_zk_lock_main_conf_t  *smcf;

    smcf = ngx_stream_cycle_get_module_main_conf((ngx_cycle_t *) ngx_cycle,
                                                 ngx_stream_zk_lock_module);

    if (smcf == NULL || smcf->stats == NULL) {
        return;
    }

    ngx_zk_lock_stats_set(smcf->stats, spec->stat, NGX_ZK_LOCK_STATS_FLOWS,
                          flows);
    ngx_zk_lock_stats_set(smcf->stats, spec->stat, NGX_ZK_LOCK_STATS_CLAIM,
                          claim);
    ngx_zk_lock_stats_top_set(smcf->stats, spec->stat, top, ntop);
    ngx_zk_lock_stats_loads_set(smcf->stats, spec->stat, classes, nclasses);
}


/*
 * A literal path is checked now; one with variables is compiled whole,
 * and checked for each connection: its variables make the last levels,
 * which are transient (see ngx_zk_lock_transient())
 */

static char *
ngx_stream_zk_lock_compile(ngx_conf_t *cf, ngx_stream_zk_lock_spec_t *spec)
{
    u_char      *p, *last;
    ngx_str_t    seg;
    ngx_uint_t   n, dynamic;
    const char  *err;

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

    dynamic = 0;

    for (n = 0; p < last; n++) {
        seg.data = ++p;
        p = ngx_strlchr(p, last, '/');
        if (p == NULL) {
            p = last;
        }

        seg.len = p - seg.data;

        if (ngx_strlchr(seg.data, seg.data + seg.len, '$')) {
            if (dynamic == 0) {
                dynamic = n + 1;
            }

            continue;
        }

        /* a literal "/zookeeper" is the server's own: refused there */

        err = ngx_zk_lock_path_check_segment(&seg, 0);
        if (err) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "invalid lock path \"%V\": segment %ui is %s",
                               ngx_zk_lock_path_short(cf->pool,
                                                      &spec->lock.name),
                               n + 1, err);
            return NGX_CONF_ERROR;
        }
    }

    spec->levels = n;

    if (dynamic == 0) {

        /* a connection's path from variables is refused when longer */

        if (spec->lock.name.len > NGX_STREAM_ZK_LOCK_MAX_PATH) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "lock path is %uz bytes, longer than the %d "
                               "that a stream lock path may have: \"%V\"",
                               spec->lock.name.len,
                               NGX_STREAM_ZK_LOCK_MAX_PATH,
                               ngx_zk_lock_path_short(cf->pool,
                                                      &spec->lock.name));
            return NGX_CONF_ERROR;
        }

        return NGX_CONF_OK;
    }

    spec->lock.transient = n - dynamic + 1;

    spec->path_cv = ngx_stream_zk_lock_variables_compile(cf,
                                                         &spec->lock.name);
    if (spec->path_cv == NULL) {
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


/* zk_lock_fail closed | open | local=<n> */

static char *
ngx_stream_zk_lock_fail(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_stream_zk_lock_srv_conf_t *sscf = conf;

    char                            *rv;
    ngx_stream_zk_lock_main_conf_t  *smcf;

    rv = ngx_zk_lock_params_fail(cf, &sscf->fail_open, &sscf->fail_local);

    if (rv == NGX_CONF_OK && sscf->fail_local) {
        smcf = ngx_stream_conf_get_module_main_conf(cf,
                                                    ngx_stream_zk_lock_module);
        smcf->local_used = 1;
    }

    return rv;
}


static ngx_int_t
ngx_stream_zk_lock_init(ngx_conf_t *cf)
{
    ngx_stream_core_srv_conf_t      *cscf;
    ngx_stream_zk_lock_main_conf_t  *smcf;

    if (ngx_zk_lock_gate_built(cf, NGX_ZK_LOCK_VERSION, NGX_ZK_LOCK_ABI)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    smcf = ngx_stream_conf_get_module_main_conf(cf,
                                                ngx_stream_zk_lock_module);

    if (smcf->used.data == NULL) {
        return NGX_OK;
    }

    if (smcf->zk.hosts == NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"%V\" is used but \"zk_hosts\" is not set "
                           "in \"stream\"", &smcf->used);
        return NGX_ERROR;
    }

    cscf = ngx_stream_conf_get_module_srv_conf(cf, ngx_stream_core_module);

    smcf->session = ngx_zk_lock_conf_session(cf, &smcf->zk, cscf->resolver,
                                             cscf->resolver_timeout);
    if (smcf->session == NULL) {
        return NGX_ERROR;
    }

    /* the HTTP module's status page shows them, with layer="stream" */

    smcf->stats = ngx_zk_lock_stats_zone(cf, &ngx_stream_zk_lock_layer,
                                         smcf->stat_names);
    if (smcf->stats == NULL) {
        return NGX_ERROR;
    }

    smcf->stats->classes = smcf->zk.classes.n ? &smcf->zk.classes : NULL;

    if (smcf->local_used && ngx_stream_zk_lock_init_local(cf, smcf) != NGX_OK)
    {
        return NGX_ERROR;
    }

    return NGX_OK;
}


/*
 * zk_lock_fail local=: every lock has its place in the local leases,
 * which the HTTP locks on the same path share
 */

static ngx_int_t
ngx_stream_zk_lock_init_local(ngx_conf_t *cf,
    ngx_stream_zk_lock_main_conf_t *smcf)
{
    ngx_int_t                        index;
    ngx_uint_t                       s, i;
    ngx_stream_zk_lock_spec_t       *spec;
    ngx_stream_core_srv_conf_t     **cscfp;
    ngx_stream_core_main_conf_t     *cmcf;
    ngx_stream_zk_lock_srv_conf_t   *sscf;

    cmcf = ngx_stream_conf_get_module_main_conf(cf, ngx_stream_core_module);
    cscfp = cmcf->servers.elts;

    for (s = 0; s < cmcf->servers.nelts; s++) {
        sscf = cscfp[s]->ctx->srv_conf[ngx_stream_zk_lock_module.ctx_index];

        if (sscf->locks == NULL) {
            continue;
        }

        spec = sscf->locks->elts;

        for (i = 0; i < sscf->locks->nelts; i++) {
            index = ngx_zk_lock_local_add(cf, spec[i].lock.type,
                                          &spec[i].lock.name,
                                          &smcf->local_zone);
            if (index == NGX_ERROR) {
                return NGX_ERROR;
            }

            spec[i].local = index;
        }
    }

    return NGX_OK;
}


static ngx_int_t
ngx_stream_zk_lock_init_process(ngx_cycle_t *cycle)
{
    ngx_zk_lock_session_t           *s;
    ngx_stream_zk_lock_main_conf_t  *smcf;

    if (ngx_process != NGX_PROCESS_WORKER
        && ngx_process != NGX_PROCESS_SINGLE)
    {
        return NGX_OK;
    }

    smcf = ngx_stream_cycle_get_module_main_conf(cycle,
                                                 ngx_stream_zk_lock_module);

    if (smcf == NULL || smcf->session == NULL) {
        return NGX_OK;
    }

    ngx_zk_lock_stats_worker(smcf->stats);

    if (ngx_zk_lock_local_worker(cycle, smcf->local_zone) != NGX_OK) {
        return NGX_ERROR;
    }

    /* the layer above the session hears of it through these alone */

    s = smcf->session;

    ngx_zk_lock_gate_waiters(&smcf->waiters, s, cycle->log);

    s->connect_handler = ngx_zk_lock_gate_connected;
    s->expire_handler = ngx_zk_lock_recipe_expired;
    s->jeopardy_handler = ngx_zk_lock_gate_jeopardy;
    s->heard_handler = ngx_zk_lock_gate_heard;
    s->close_handler = ngx_zk_lock_recipe_free;
    s->watch_handler = ngx_zk_lock_wait_event;
    s->data = &smcf->waiters;

    ngx_zk_lock_counters_handler(ngx_zk_lock_recipe_recount);
    ngx_zk_lock_recipe_handler(&ngx_zk_lock_wait_owner);
    ngx_zk_lock_keep_init();

    return ngx_zk_lock_get_init(cycle, s, &smcf->zk, smcf->specs,
                                smcf->local_used, &ngx_stream_zk_lock_layer);
}


static void
ngx_stream_zk_lock_exit_process(ngx_cycle_t *cycle)
{
    ngx_stream_zk_lock_main_conf_t  *smcf;

    smcf = ngx_stream_cycle_get_module_main_conf(cycle,
                                                 ngx_stream_zk_lock_module);

    if (smcf == NULL || smcf->session == NULL) {
        return;
    }

    ngx_zk_lock_session_close(smcf->session);
}
