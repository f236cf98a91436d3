
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#ifndef _NGX_ZK_LOCK_BROKER_H_INCLUDED_
#define _NGX_ZK_LOCK_BROKER_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>

#include "ngx_zk_lock_session.h"
#include "ngx_zk_lock_params.h"
#include "ngx_zk_lock_fair.h"


/*
 * zk_sessions <n>: the first n workers of an nginx have a ZooKeeper
 * session each, and take locks through it for the other workers too.  A
 * worker without a session connects to a broker's unix socket (in the
 * abstract namespace, named after a random token of the master's and the
 * configuration, see broker_addr()) for each lock a request takes, and
 * asks:
 *
 *   "<sign> <directive> <weight> <try> <flow> <flow weight> <flow class>
 *    <path length> <info length>\n" path info
 *
 * where the sign names the configuration and the directive's lock (see
 * broker_sign()), and the flow (fair=, hashed, in hex), its weight and
 * its class (priority=, an index of the configuration's) are 0 for
 * none: a broker refuses an ask that is not for one of its own locks, so
 * that no mix-up of names can ever lend a lease of another lock.
 * A broker listens only while its session is usable, and answers "n\n"
 * to an ask that comes as it stops (its session was refused, or is in
 * jeopardy): the worker asks the next broker.  Otherwise the broker takes
 * the lock as the request would (ngx_zk_lock_take()) and tells every
 * change of its node:
 *
 *   "<state> <error> <seq> <czxid> <reused> <name>\n"
 *
 * The connection is the node's life: closed by the worker, the node is
 * released; closed by the broker (it exited, or crashed), the node is
 * lost, as with an expired session.  Either process may die at any time:
 * the kernel closes its end.
 *
 * A broker that stalls (a long computation, a swap storm) cannot tell of
 * its session's jeopardy: with each line of a node that holds, and every
 * few seconds while it holds, the broker tells until when its session may
 * be trusted, on the system's monotonic clock,
 *
 *   "h <deadline in ms>\n"
 *
 * and a worker whose broker falls silent lets the node go at that time as
 * the broker itself would have (see ngx_zk_lock_remote.c).  A kept
 * lease that the worker keeps between its requests is recalled with
 * "r\n"; "e\n" from the worker says that it kept it for "keep" unused.
 */


#define NGX_ZK_LOCK_BROKER_ASK   "%08xD %ui %ui %ui %xL %ui %ui %uz %uz\n"
#define NGX_ZK_LOCK_BROKER_TELL  "%d %d %uD %L %d %s\n"

/* the longest line of each */
#define NGX_ZK_LOCK_BROKER_HEAD  (9 * NGX_INT_T_LEN)
#define NGX_ZK_LOCK_BROKER_LINE  (5 * NGX_INT64_LEN + 64)

/* the longest node data asked for, see eval_info() */
#define NGX_ZK_LOCK_BROKER_INFO  256

#define NGX_ZK_LOCK_BROKER_TRUST  "h %L\n"


/* a worker's broker, of one layer's session: see broker.c */
typedef struct ngx_zk_lock_broker_s  ngx_zk_lock_broker_t;


ngx_int_t ngx_zk_lock_broker_token(ngx_log_t *log);
ngx_int_t ngx_zk_lock_broker_init(ngx_cycle_t *cycle,
    ngx_zk_lock_session_t *s, ngx_array_t *specs, ngx_str_t *layer,
    ngx_uint_t generation);
socklen_t ngx_zk_lock_broker_addr(struct sockaddr_un *sun, ngx_str_t *layer,
    ngx_uint_t generation, ngx_uint_t slot);
uint32_t ngx_zk_lock_broker_sign(ngx_zk_lock_session_t *s,
    ngx_zk_lock_params_t *lp);
int64_t ngx_zk_lock_broker_clock(void);


#endif /* _NGX_ZK_LOCK_BROKER_H_INCLUDED_ */
