
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#ifndef _NGX_ZK_LOCK_PARAMS_H_INCLUDED_
#define _NGX_ZK_LOCK_PARAMS_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>

#include "ngx_zk_lock_class.h"

#include "ngx_zk_lock_recipe.h"


/* a lock directive's type: its index in ngx_zk_lock_types[] */
#define NGX_ZK_LOCK_MUTEX        1
#define NGX_ZK_LOCK_SEMAPHORE    2
#define NGX_ZK_LOCK_RWLOCK_READ  3
#define NGX_ZK_LOCK_RWLOCK_WRITE 4

typedef struct {
    char                         *directive;  /* in log lines */
    char                         *label;      /* the metrics' "type" */
    ngx_zk_lock_kind_e            kind;       /* its node, Curator's name */
} ngx_zk_lock_type_t;


/*
 * A lock directive (zk_mutex, zk_semaphore, zk_rwlock) as parsed, in
 * "http" or "stream": the first member of the layer's own description of
 * the directive, so that a pointer to it is the tag of the reports about
 * the lock (see keep.h).  The core takes kind to revocable; the rest is
 * the layer's to apply.
 */

typedef struct ngx_zk_lock_params_s  ngx_zk_lock_params_t;

/* what a pool of kept leases tells the layer: a lease idle, or given back */
typedef void (*ngx_zk_lock_report_pt)(ngx_zk_lock_params_t *lp,
    ngx_int_t idle, ngx_uint_t given_back);

/*
 * ... and with fair=: its flows, the instance's claim, the flows that
 * hold the most (ngx_zk_lock_fair_top_t, see fair.c), and with priority=
 * its classes (ngx_zk_lock_fair_load_t, by the configuration's index)
 */
typedef void (*ngx_zk_lock_fair_report_pt)(ngx_zk_lock_params_t *lp,
    ngx_uint_t flows, ngx_uint_t claim, void *top, ngx_uint_t ntop,
    void *classes, ngx_uint_t nclasses);

struct ngx_zk_lock_params_s {
    ngx_zk_lock_kind_e            kind;       /* its node, Curator's name */
    ngx_uint_t                    leases;     /* or the default of: */
    ngx_str_t                     counter;    /* leases=zk:<path> */
    ngx_msec_t                    keep;       /* a lease idle, kept: 0 none */
    ngx_uint_t                    transient;  /* levels from variables */
    unsigned                      v2:1;       /* InterProcessSemaphoreV2 */
    unsigned                      revocable:1;  /* Curator's Revoker */

    unsigned                      reentrant:1;
    ngx_uint_t                    type;       /* NGX_ZK_LOCK_MUTEX... */
    ngx_str_t                     name;       /* the path as configured */
    ngx_uint_t                    id;         /* the brokers' number of it */
    ngx_msec_t                    timeout;    /* or unset: the layer's */
    ngx_uint_t                    max_waiting; /* in a worker; 0: any */
    ngx_uint_t                    weight;     /* leases a participant takes */
    ngx_str_t                     weight_var; /* or from this, if set */
    ngx_str_t                     fair;       /* fair=: the flow's key */
    ngx_uint_t                    fair_weight; /* 0: not set */
    ngx_str_t                     fair_weight_var;
    ngx_uint_t                    fair_max;   /* a flow's leases; 0: any */
    ngx_uint_t                    fair_max_pct; /* ... or this % of them */
    ngx_str_t                     priority;   /* priority=: a class name */
    ngx_zk_lock_classes_t        *classes;    /* the layer's zk_lock_class */

    ngx_zk_lock_report_pt         report;     /* the layer's metrics */
    ngx_zk_lock_fair_report_pt    fair_report;
};


/* fair= or priority=: the requests are served by flow, with a board */
#define ngx_zk_lock_params_flows(lp)                                     \
    ((lp)->fair.len != 0 || (lp)->priority.len != 0)


void ngx_zk_lock_params_init(ngx_zk_lock_params_t *lp, ngx_uint_t type,
    ngx_str_t *name);
char *ngx_zk_lock_params(ngx_conf_t *cf, ngx_command_t *cmd,
    ngx_zk_lock_params_t *lp);
char *ngx_zk_lock_params_recipe(ngx_conf_t *cf, ngx_zk_lock_params_t *lp);
char *ngx_zk_lock_params_number(ngx_conf_t *cf, ngx_array_t **specs,
    void *spec, size_t size);
char *ngx_zk_lock_params_unique(ngx_conf_t *cf, ngx_array_t *locks,
    ngx_zk_lock_params_t *lp, ngx_uint_t reentry);
char *ngx_zk_lock_params_fail(ngx_conf_t *cf, ngx_flag_t *open,
    ngx_uint_t *local);


extern ngx_zk_lock_type_t  ngx_zk_lock_types[];


#endif /* _NGX_ZK_LOCK_PARAMS_H_INCLUDED_ */
