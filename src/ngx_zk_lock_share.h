
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#ifndef _NGX_ZK_LOCK_SHARE_H_INCLUDED_
#define _NGX_ZK_LOCK_SHARE_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>

#include "ngx_zk_lock_listing.h"


/*
 * The fair shares of kept leases as a listing shows them (see keep.c):
 * who takes part, what each holds and waits for, and the max-min level
 * over the instances and then over the workers of this one.  Pure
 * arithmetic on names and counts: no ZooKeeper call, no pool, so that it
 * can be tested on its own (t/share.t).
 */


/* "_c_" and the UUID's first three groups, drawn from the worker's key */
#define NGX_ZK_LOCK_OURS_LEN  (3 + 18)

/* "_c_" and the part of the UUID that the workers of one nginx share */
#define NGX_ZK_LOCK_INSTANCE_LEN  (3 + 8)


/*
 * fair=: the weight of an instance's claim, in thousandths of a flow; one
 * flow (FLOW) for a participant that reports none, such as a Curator
 * client, so that without fair= the shares are the same for all
 */
#define NGX_ZK_LOCK_SHARE_FLOW  1000

/* the most an instance may claim: 16 777 flows */
#define NGX_ZK_LOCK_SHARE_WEIGHT_MAX  (1 << 24)


/* a worker's report (board.c): 0 for none */
typedef ngx_uint_t (*ngx_zk_lock_weigh_pt)(void *data, u_char *worker);


/* what a participant wants, for the level: in thousandths of leases */

typedef struct {
    uint64_t                      demand;
    uint64_t                      weight;
} ngx_zk_lock_claim_t;


/* a participant in a listing: the nodes of one worker, or one node */

typedef struct {
    u_char                       *name;
    size_t                        len;
    ngx_uint_t                    held;
    ngx_uint_t                    waiting;
} ngx_zk_lock_part_t;


typedef struct {
    /* what the worker knows */
    u_char                       *ours;       /* its nodes' OURS_LEN prefix */
    ngx_uint_t                    leases;
    ngx_uint_t                    demand;     /* in thousandths; or
                                                 NGX_MAX_UINT32_VALUE while
                                                 a request of its waits */
    ngx_uint_t                    weight;     /* this instance's claim;
                                                 0: one flow */
    ngx_zk_lock_weigh_pt          weigh;      /* the others': NULL, one */
    void                         *weigh_data; /* flow each */

    /* what the listing tells */
    ngx_uint_t                    free;       /* leases that nobody held */
    ngx_uint_t                    ceil;       /* the fair share, rounded */
    ngx_uint_t                    floor;
    uint64_t                      level;      /* a flow's, in thousandths */
    unsigned                      others:1;   /* another participant waits */
    unsigned                      owed:1;     /* one waits under its share */
    unsigned                      lagging:1;  /* one waits with its floor */
} ngx_zk_lock_share_t;


ngx_uint_t ngx_zk_lock_share_parts(ngx_zk_lock_share_t *sh,
    ngx_zk_lock_child_t *children, ngx_uint_t n, ngx_zk_lock_part_t *parts);
void ngx_zk_lock_share(ngx_zk_lock_share_t *sh, ngx_zk_lock_part_t *parts,
    ngx_uint_t np, ngx_zk_lock_claim_t *claims);
size_t ngx_zk_lock_share_prefix(ngx_zk_lock_child_t *child);
int ngx_libc_cdecl ngx_zk_lock_share_part_cmp(const void *one,
    const void *two);


#endif /* _NGX_ZK_LOCK_SHARE_H_INCLUDED_ */
