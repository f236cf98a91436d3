
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#ifndef _NGX_ZK_LOCK_CLASS_H_INCLUDED_
#define _NGX_ZK_LOCK_CLASS_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>


/*
 * Priority classes (zk_lock_class, priority=): each has a nominal part of
 * a lock's leases, by its shares, of which "lendable" percent others may
 * borrow while it does not use them; see ngx_zk_lock_class.c.  Pure
 * arithmetic, tested on its own (t/class.t).
 */


/* classes in one configuration, at most */
#define NGX_ZK_LOCK_CLASS_MAX     8

/* a class's shares, at most */
#define NGX_ZK_LOCK_CLASS_SHARES  1000

/* a class's name, at most: it travels in each board's node */
#define NGX_ZK_LOCK_CLASS_NAME    32

/*
 * A class's demand (thousandths of leases) that is news to act on at
 * once, from "was" to "now": the class was idle, or wants 4 times what it
 * did and 2 leases more, back after a pause while what it wanted then
 * still decays.  The requests of a small class that come and go at
 * random stay below it: acting on each (at twice and a lease more) made
 * the board's writes 0.076 a request instead of 0.050, and the classes
 * took 13% over their parts in t/bench/classes.pl's flood.
 */
#define ngx_zk_lock_class_back(was, now)                                 \
    (((was) == 0 && (now) != 0) || (now) > 4 * (uint64_t) (was) + 2000)


typedef struct {
    ngx_str_t                     name;
    ngx_uint_t                    shares;
    ngx_uint_t                    lendable;   /* percent */
} ngx_zk_lock_class_t;


/* in the order they were declared: the first is the highest */

typedef struct {
    ngx_zk_lock_class_t           class[NGX_ZK_LOCK_CLASS_MAX];
    ngx_uint_t                    n;
    ngx_uint_t                    dflt;       /* the default's index */
    unsigned                      dflt_set:1;
    unsigned                      warned:1;   /* of an unknown name */
} ngx_zk_lock_classes_t;


/* what each class gets of the leases: in thousandths of leases */

typedef struct {
    uint64_t                      demand[NGX_ZK_LOCK_CLASS_MAX];
    uint64_t                      alloc[NGX_ZK_LOCK_CLASS_MAX];
    uint64_t                      nominal[NGX_ZK_LOCK_CLASS_MAX];
    uint64_t                      idle;       /* reserved and unused */
    uint32_t                      reserved;   /* the classes with some,
                                                 a bit each */
} ngx_zk_lock_class_alloc_t;


char *ngx_zk_lock_class_parse(ngx_conf_t *cf, ngx_zk_lock_classes_t *cl);
ngx_uint_t ngx_zk_lock_class_find(ngx_zk_lock_classes_t *cl,
    u_char *name, size_t len);
void ngx_zk_lock_class_alloc(ngx_zk_lock_classes_t *cl, uint64_t cap,
    ngx_zk_lock_class_alloc_t *a);


#endif /* _NGX_ZK_LOCK_CLASS_H_INCLUDED_ */
