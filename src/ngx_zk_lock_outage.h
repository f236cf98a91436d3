
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#ifndef _NGX_ZK_LOCK_OUTAGE_H_INCLUDED_
#define _NGX_ZK_LOCK_OUTAGE_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>


/*
 * A worker's ZooKeeper outage as the operator hears of it: one line at
 * "error" when the session has been out of use for a third of its timeout
 * (the client's own ping interval: what zk_lock_fail open also calls out
 * of reach), naming the servers and the cause; one line when it is usable
 * again, with how long it was out and what became of the requests
 * meanwhile.  A blip shorter than that (a leader's failover, a server of
 * an ensemble restarted) says nothing.
 *
 *   usable --lost, silent, not connected yet--> out --grace--> said
 *     ^                                          |               |
 *     +------------- connected and heard --------+---------------+
 *                                                 (said: the end line)
 */

#define NGX_ZK_LOCK_CAUSE_LEN  160


typedef struct {
    ngx_event_t                   event;      /* the grace, then said */
    ngx_msec_t                    since;
    ngx_uint_t                    refused;    /* by the gates, meanwhile */
    ngx_uint_t                    timed_out;
    ngx_uint_t                    through;    /* let through, or local */
    u_char                        cause[NGX_ZK_LOCK_CAUSE_LEN];
    unsigned                      out:1;
    unsigned                      said:1;
} ngx_zk_lock_outage_t;


/* of the session (ngx_zk_lock_session.h), which includes this */
struct ngx_zk_lock_session_s;

void ngx_zk_lock_outage_init(struct ngx_zk_lock_session_s *s);
void ngx_zk_lock_outage_begin(struct ngx_zk_lock_session_s *s,
    ngx_msec_t since);
void ngx_zk_lock_outage_end(struct ngx_zk_lock_session_s *s);
void ngx_zk_lock_outage_cause(struct ngx_zk_lock_session_s *s,
    const char *text, size_t len);
ngx_msec_t ngx_zk_lock_outage_for(struct ngx_zk_lock_session_s *s);


#endif /* _NGX_ZK_LOCK_OUTAGE_H_INCLUDED_ */
