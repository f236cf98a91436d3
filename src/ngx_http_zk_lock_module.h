
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#ifndef _NGX_HTTP_ZK_LOCK_MODULE_H_INCLUDED_
#define _NGX_HTTP_ZK_LOCK_MODULE_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>
#include <zookeeper/zookeeper.h>

#include "ngx_zk_lock_session.h"
#include "ngx_zk_lock_conf.h"
#include "ngx_zk_lock_take.h"
#include "ngx_zk_lock_params.h"
#include "ngx_zk_lock_listing.h"
#include "ngx_zk_lock_gate.h"
#include "ngx_zk_lock_version.h"


/* a lock directive's type: its index in ngx_zk_lock_types[] */
#define NGX_HTTP_ZK_LOCK_MUTEX        NGX_ZK_LOCK_MUTEX
#define NGX_HTTP_ZK_LOCK_SEMAPHORE    NGX_ZK_LOCK_SEMAPHORE
#define NGX_HTTP_ZK_LOCK_RWLOCK_READ  NGX_ZK_LOCK_RWLOCK_READ
#define NGX_HTTP_ZK_LOCK_RWLOCK_WRITE NGX_ZK_LOCK_RWLOCK_WRITE


/*
 * What happened to a request at a lock directive: the metrics count each,
 * $zk_lock_status names the last of those that end a wait
 */

typedef enum {
    NGX_HTTP_ZK_LOCK_EV_NONE = 0,
    NGX_HTTP_ZK_LOCK_EV_WAIT,       /* starts waiting */
    NGX_HTTP_ZK_LOCK_EV_UNWAIT,     /* stops waiting, however */
    NGX_HTTP_ZK_LOCK_EV_ACQUIRED,   /* holds; with the time it waited */
    NGX_HTTP_ZK_LOCK_EV_TIMEOUT,
    NGX_HTTP_ZK_LOCK_EV_ERROR,
    NGX_HTTP_ZK_LOCK_EV_BYPASSED,
    NGX_HTTP_ZK_LOCK_EV_REJECTED,
    NGX_HTTP_ZK_LOCK_EV_RELEASED,   /* held no more, however */
    NGX_HTTP_ZK_LOCK_EV_LOST,       /* the session expired */
    NGX_HTTP_ZK_LOCK_EV_REVOKED,    /* revoked, waiting or holding */
    NGX_HTTP_ZK_LOCK_EV_LOCAL,      /* holds a local lease: fail local= */
    NGX_HTTP_ZK_LOCK_EV_REUSED,     /* acquired at once: a kept lease */
    NGX_HTTP_ZK_LOCK_EV_GIVEN_BACK, /* a kept lease, for another's wait */
    NGX_HTTP_ZK_LOCK_EV_DRY_RUN,    /* let through: zk_lock_dry_run */
    NGX_HTTP_ZK_LOCK_EV_DRY_ACQUIRED, /* ... and it would have held */
    NGX_HTTP_ZK_LOCK_EV_DRY_WAITED, /* ... and it would have waited */
    NGX_HTTP_ZK_LOCK_EV_JEOPARDY,   /* let go: ZooKeeper silent for 3/4 of
                                       the session timeout, session unknown */
    NGX_HTTP_ZK_LOCK_EV_UNREACHABLE /* timed out while ZooKeeper was
                                       unreachable, not behind holders */
} ngx_http_zk_lock_event_e;

#define NGX_HTTP_ZK_LOCK_EV_N  (NGX_HTTP_ZK_LOCK_EV_UNREACHABLE + 1)


/* one zk_mutex, zk_semaphore or zk_rwlock directive */
typedef struct {
    ngx_zk_lock_params_t          lock;       /* first: as parsed */
    ngx_array_t                  *segments;   /* ngx_http_complex_value_t */
    ngx_uint_t                    index;      /* of its counters */
    ngx_http_complex_value_t     *weight_cv;  /* lock.weight_var */
    ngx_http_complex_value_t     *fair_cv;    /* lock.fair */
    ngx_http_complex_value_t     *fair_weight_cv; /* lock.fair_weight_var */
    ngx_http_complex_value_t     *priority_cv; /* lock.priority */
} ngx_http_zk_lock_spec_t;


typedef struct {
    ngx_zk_lock_conf_t            zk;         /* zk_hosts and the like */
    ngx_uint_t                    max_waiting; /* of a worker, all paths */
    size_t                        max_path;   /* as evaluated for a request */
    ngx_array_t                  *metrics;    /* ngx_http_zk_lock_metric_t */
    ngx_shm_zone_t               *zone;
    ngx_array_t                  *buckets;    /* ngx_msec_t, of the waits */
    ngx_msec_t                    max_timeout; /* of a lock, as merged */
    ngx_uint_t                    slots;      /* of workers, in the zone */
    ngx_str_t                     used;       /* a lock directive, if any */
    ngx_array_t                  *counters;   /* leases=zk: paths */
    ngx_array_t                  *literals;   /* recipes of literal paths */
    ngx_zk_lock_session_t        *session;
    ngx_zk_lock_gate_waiters_t    waiters;    /* of the worker */
    ngx_shm_zone_t               *local_zone; /* zk_lock_fail local= */
    ngx_uint_t                    local_used;

    ngx_array_t                  *specs;      /* ngx_zk_lock_params_t * */
} ngx_http_zk_lock_main_conf_t;


typedef struct {
    ngx_array_t                  *locks;      /* ngx_http_zk_lock_spec_t */
    ngx_msec_t                    timeout;
    ngx_uint_t                    status;
    ngx_uint_t                    log_level;
    ngx_flag_t                    fail_open;  /* zk_lock_fail open */
    ngx_uint_t                    fail_local; /* zk_lock_fail local=<n> */
    ngx_flag_t                    lost_abort; /* zk_lock_lost abort */
    ngx_uint_t                    status_page; /* 1: json, 2: prometheus */
    ngx_uint_t                    off;        /* zk_lock off */
    ngx_flag_t                    dry_run;    /* zk_lock_dry_run */
    ngx_uint_t                    fleet_view; /* 1: html, 2: json */
} ngx_http_zk_lock_loc_conf_t;


/* the recipe of a literal lock path, and where it was first configured */
typedef struct {
    ngx_str_t                     name;
    ngx_str_t                     counter;
    ngx_uint_t                    leases;
    ngx_str_t                     file;
    ngx_uint_t                    line;
    unsigned                      rw:1;
    unsigned                      v2:1;
    unsigned                      fair:1;     /* a directive has fair= */
} ngx_http_zk_lock_literal_t;


/* the counters of a lock path as configured and a type of lock */
typedef struct {
    ngx_str_t                     name;
    ngx_uint_t                    type;
    ngx_uint_t                    leases;     /* as configured, or default */
    ngx_str_t                     counter;    /* leases=zk:<path> */
    ngx_uint_t                    local;      /* its index in local leases */
    unsigned                      fair:1;     /* a directive with fair= */
    unsigned                      priority:1; /* ... with priority= */
} ngx_http_zk_lock_metric_t;


extern ngx_module_t  ngx_http_zk_lock_module;


#endif /* _NGX_HTTP_ZK_LOCK_MODULE_H_INCLUDED_ */
