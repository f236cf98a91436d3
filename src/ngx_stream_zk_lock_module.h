
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#ifndef _NGX_STREAM_ZK_LOCK_MODULE_H_INCLUDED_
#define _NGX_STREAM_ZK_LOCK_MODULE_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_stream.h>

#include "ngx_zk_lock_session.h"
#include "ngx_zk_lock_conf.h"
#include "ngx_zk_lock_params.h"
#include "ngx_zk_lock_stats.h"
#include "ngx_zk_lock_gate.h"


/* the longest lock path a connection's variables may make */
#define NGX_STREAM_ZK_LOCK_MAX_PATH  1024


/* one zk_mutex, zk_semaphore or zk_rwlock directive in "stream" */
typedef struct {
    ngx_zk_lock_params_t          lock;       /* first: as parsed */
    ngx_stream_complex_value_t   *path_cv;    /* a path with variables */
    ngx_uint_t                    levels;     /* segments of the path */
    ngx_stream_complex_value_t   *weight_cv;  /* lock.weight_var */
    ngx_stream_complex_value_t   *fair_cv;    /* lock.fair */
    ngx_stream_complex_value_t   *fair_weight_cv; /* lock.fair_weight_var */
    ngx_stream_complex_value_t   *priority_cv; /* lock.priority */
    ngx_uint_t                    stat;       /* its counters' index */
    ngx_uint_t                    local;      /* its local leases' index */
} ngx_stream_zk_lock_spec_t;


typedef struct {
    ngx_zk_lock_conf_t            zk;         /* zk_hosts and the like */
    ngx_uint_t                    max_waiting; /* of a worker, all paths */
    ngx_str_t                     used;       /* a lock directive, if any */
    ngx_zk_lock_session_t        *session;
    ngx_array_t                  *stat_names; /* ngx_zk_lock_stats_name_t */
    ngx_zk_lock_stats_t          *stats;      /* for the status page */
    ngx_uint_t                    local_used; /* zk_lock_fail local= */
    ngx_shm_zone_t               *local_zone;
    ngx_array_t                  *specs;      /* for zk_sessions' brokers */
    ngx_zk_lock_gate_waiters_t    waiters;    /* in the worker */
} ngx_stream_zk_lock_main_conf_t;


typedef struct {
    ngx_array_t                  *locks;      /* ngx_stream_zk_lock_spec_t */
    ngx_msec_t                    timeout;
    ngx_uint_t                    log_level;
    ngx_flag_t                    fail_open;  /* zk_lock_fail open */
    ngx_uint_t                    fail_local; /* zk_lock_fail local=<n> */
    ngx_flag_t                    lost_abort; /* zk_lock_lost abort */
    ngx_stream_content_handler_pt content;    /* proxy_pass, once held */
} ngx_stream_zk_lock_srv_conf_t;


/* one per gated connection (a stream "session", not ZooKeeper's) */
typedef struct {
    ngx_zk_lock_gate_t            gate;       /* its locks, the core's */
    ngx_stream_session_t         *session;
} ngx_stream_zk_lock_ctx_t;


extern ngx_module_t  ngx_stream_zk_lock_module;


#endif /* _NGX_STREAM_ZK_LOCK_MODULE_H_INCLUDED_ */
