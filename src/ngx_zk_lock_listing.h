
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#ifndef _NGX_ZK_LOCK_LISTING_H_INCLUDED_
#define _NGX_ZK_LOCK_LISTING_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>


/*
 * The queue of one lock as a listing of its children shows it: Curator's
 * participant names, their order, and the last listing that a worker keeps
 * to count deletions without listing again.  Pure arithmetic on names: no
 * ZooKeeper call, no lock, so that it can be tested on its own (t/listing.t).
 */


/* what a participant's node is, and its infix in Curator's names */

typedef enum {
    NGX_ZK_LOCK_LEASE = 0,     /* mutex, semaphore: "lock-" */
    NGX_ZK_LOCK_READ,          /* "__READ__" */
    NGX_ZK_LOCK_WRITE,         /* "__WRIT__" */
    NGX_ZK_LOCK_COUNT          /* a semaphore v2 lease: "lease-" */
} ngx_zk_lock_kind_e;


/* a child that is no participant: sorts last, in nobody's way */
#define NGX_ZK_LOCK_SEQ_NONE       NGX_MAX_UINT32_VALUE

/* a participant whose sequence number ZooKeeper wrote negative */
#define NGX_ZK_LOCK_SEQ_WRAPPED    (NGX_MAX_UINT32_VALUE - 1)


/* a child of a listing: "seq" comes first here and in an entry */

typedef struct {
    uint32_t                      seq;
    ngx_uint_t                    write;      /* a write lock's node */
    ngx_uint_t                    writes;     /* write nodes before it */
    size_t                        len;
    u_char                       *name;
} ngx_zk_lock_child_t;


/* a child of the listing kept */

typedef struct {
    uint32_t                      seq;
    uint32_t                      name:30;    /* offset in the names */
    uint32_t                      write:1;    /* a write lock's node */
    uint32_t                      gone:1;     /* its deletion is counted */
} ngx_zk_lock_entry_t;


/* the last listing of a lock, sorted, its names after the entries */

typedef struct {
    ngx_zk_lock_entry_t          *entries;
    ngx_uint_t                    n;
    ngx_uint_t                    head;       /* the first not gone */
    ngx_uint_t                    live;       /* the entries not gone */
} ngx_zk_lock_listing_t;


const char *ngx_zk_lock_listing_kind(ngx_zk_lock_kind_e kind);
uint32_t ngx_zk_lock_listing_seq(u_char *name, size_t len);
ngx_uint_t ngx_zk_lock_listing_is_write(u_char *name);
ngx_uint_t ngx_zk_lock_listing_sort(ngx_zk_lock_child_t *children,
    char **names, ngx_uint_t n);
u_char *ngx_zk_lock_listing_wrapped(ngx_zk_lock_child_t *children,
    ngx_uint_t n);
ngx_int_t ngx_zk_lock_listing_index(ngx_zk_lock_child_t *children,
    ngx_uint_t n, uint32_t seq, u_char *name);
ngx_uint_t ngx_zk_lock_listing_find(ngx_zk_lock_child_t *children,
    ngx_uint_t n, uint32_t seq);

ngx_int_t ngx_zk_lock_listing_keep(ngx_zk_lock_listing_t *listing,
    ngx_zk_lock_child_t *children, ngx_uint_t n, ngx_log_t *log);
ngx_zk_lock_entry_t *ngx_zk_lock_listing_remove(
    ngx_zk_lock_listing_t *listing, uint32_t seq);
u_char *ngx_zk_lock_listing_name(ngx_zk_lock_listing_t *listing,
    ngx_zk_lock_entry_t *e);
void ngx_zk_lock_listing_free(ngx_zk_lock_listing_t *listing);


#endif /* _NGX_ZK_LOCK_LISTING_H_INCLUDED_ */
