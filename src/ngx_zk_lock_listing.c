
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#include <ngx_config.h>
#include <ngx_core.h>

#include "ngx_zk_lock_listing.h"


#define NGX_ZK_LOCK_SEQ_LEN        10

/* "_c_" <UUID: 36 characters> "-": what comes before the kind in a name */
#define NGX_ZK_LOCK_PREFIX_LEN     (3 + 36 + 1)


static ngx_uint_t ngx_zk_lock_listing_first(void *base, size_t size,
    ngx_uint_t n, uint32_t seq);
static int ngx_libc_cdecl ngx_zk_lock_listing_cmp(const void *one,
    const void *two);


/* Curator's infixes, by kind: the read and write ones have the same length */

static const char  *ngx_zk_lock_listing_kinds[] = {
    "lock-", "__READ__", "__WRIT__", "lease-"
};


/*
 * Children are ordered by the sequence number alone, as in Curator, and
 * only participants have one: names as Curator writes them in protection
 * mode, "_c_" <UUID> "-" <kind> <10 digits>.  Any other child, such as the
 * container of a deeper lock ("/p/a0000000000" for "/p/$arg_x"), is in
 * nobody's way.  ZooKeeper writes the sequence as a signed 32-bit number:
 * after 2^31 changes under one parent it writes "-2147483648" and on
 * (%010d: up to "-000000001"), which would sort a new node ahead of older
 * ones; such names are told apart.
 */

uint32_t
ngx_zk_lock_listing_seq(u_char *name, size_t len)
{
    u_char      *p;
    size_t       n;
    ngx_int_t    seq;
    ngx_uint_t   k, nkinds, wrapped;

    if (len < NGX_ZK_LOCK_PREFIX_LEN + NGX_ZK_LOCK_SEQ_LEN
        || ngx_strncmp(name, "_c_", 3) != 0
        || name[NGX_ZK_LOCK_PREFIX_LEN - 1] != '-')
    {
        return NGX_ZK_LOCK_SEQ_NONE;
    }

    p = name + NGX_ZK_LOCK_PREFIX_LEN;
    n = len - NGX_ZK_LOCK_PREFIX_LEN - NGX_ZK_LOCK_SEQ_LEN;
    nkinds = sizeof(ngx_zk_lock_listing_kinds) / sizeof(char *);

    for (k = 0; k < nkinds; k++) {
        wrapped = (n == ngx_strlen(ngx_zk_lock_listing_kinds[k]) + 1
                   && p[n - 1] == '-');

        if (n - wrapped == ngx_strlen(ngx_zk_lock_listing_kinds[k])
            && ngx_strncmp(p, ngx_zk_lock_listing_kinds[k], n - wrapped)
               == 0)
        {
            break;
        }
    }

    if (k == nkinds) {
        return NGX_ZK_LOCK_SEQ_NONE;
    }

    if (p[n] == '-') {
        /* from -999999999 on, the sign is within the 10 characters */
        return NGX_ZK_LOCK_SEQ_WRAPPED;
    }

    seq = ngx_atoi(p + n, NGX_ZK_LOCK_SEQ_LEN);

    if (seq == NGX_ERROR || seq > NGX_MAX_INT32_VALUE + (ngx_int_t) wrapped) {
        return NGX_ZK_LOCK_SEQ_NONE;
    }

    return wrapped ? NGX_ZK_LOCK_SEQ_WRAPPED : (uint32_t) seq;
}


const char *
ngx_zk_lock_listing_kind(ngx_zk_lock_kind_e kind)
{
    return ngx_zk_lock_listing_kinds[kind];
}


/* as Curator: a node whose name contains the write lock's */

ngx_uint_t
ngx_zk_lock_listing_is_write(u_char *name)
{
    return ngx_strstr(name,
                      ngx_zk_lock_listing_kinds[NGX_ZK_LOCK_WRITE])
           != NULL;
}


/*
 * The children of a listing in the order of the queue, each with the
 * count of write nodes ahead of it; returns the index of the first write
 * node, or n when there is none
 */

ngx_uint_t
ngx_zk_lock_listing_sort(ngx_zk_lock_child_t *children,
    char **names, ngx_uint_t n)
{
    ngx_uint_t  i, writes, first_write;

    for (i = 0; i < n; i++) {
        children[i].name = (u_char *) names[i];
        children[i].len = ngx_strlen(children[i].name);
        children[i].seq = ngx_zk_lock_listing_seq(children[i].name,
                                                  children[i].len);
        children[i].write = ngx_zk_lock_listing_is_write(
                                                            children[i].name);
    }

    if (n) {
        ngx_qsort(children, n, sizeof(ngx_zk_lock_child_t),
                  ngx_zk_lock_listing_cmp);
    }

    first_write = n;
    writes = 0;

    for (i = 0; i < n; i++) {
        children[i].writes = writes;

        if (children[i].write) {
            first_write = ngx_min(first_write, i);
            writes++;
        }
    }

    return first_write;
}


/* a participant with a negative sequence number, sorted after the others */

u_char *
ngx_zk_lock_listing_wrapped(ngx_zk_lock_child_t *children,
    ngx_uint_t n)
{
    ngx_uint_t  i;

    i = ngx_zk_lock_listing_find(children, n,
                                 NGX_ZK_LOCK_SEQ_WRAPPED);

    return (i < n && children[i].seq == NGX_ZK_LOCK_SEQ_WRAPPED)
           ? children[i].name : NULL;
}


/* the index of a node in the sorted children, or NGX_ERROR if not there */

ngx_int_t
ngx_zk_lock_listing_index(ngx_zk_lock_child_t *children,
    ngx_uint_t n, uint32_t seq, u_char *name)
{
    ngx_uint_t  i;

    /* foreign nodes without a sequence number share one */

    for (i = ngx_zk_lock_listing_find(children, n, seq);
         i < n && children[i].seq == seq;
         i++)
    {
        if (ngx_strcmp(children[i].name, name) == 0) {
            return i;
        }
    }

    return NGX_ERROR;
}


/* the index of the first sorted child whose sequence number is not below */

ngx_uint_t
ngx_zk_lock_listing_find(ngx_zk_lock_child_t *children,
    ngx_uint_t n, uint32_t seq)
{
    return ngx_zk_lock_listing_first(children,
                                     sizeof(ngx_zk_lock_child_t),
                                     n, seq);
}


/*
 * The last listing is kept, to count each deletion once and, in a deep
 * queue, to know which nodes come next.  Children without a sequence
 * number (the parents of other locks, say) and a wrapped one sort last and
 * are not kept.
 */

ngx_int_t
ngx_zk_lock_listing_keep(ngx_zk_lock_listing_t *listing,
    ngx_zk_lock_child_t *children, ngx_uint_t n, ngx_log_t *log)
{
    u_char                    *p, *names;
    size_t                     size;
    ngx_uint_t                 i;
    ngx_zk_lock_entry_t       *entries;

    while (n && children[n - 1].seq >= NGX_ZK_LOCK_SEQ_WRAPPED) {
        n--;
    }

    entries = NULL;
    names = NULL;

    if (n) {
        size = n * sizeof(ngx_zk_lock_entry_t);

        for (i = 0; i < n; i++) {
            size += children[i].len + 1;
        }

        entries = ngx_alloc(size, log);
        if (entries == NULL) {
            return NGX_ERROR;
        }

        names = (u_char *) &entries[n];
    }

    p = names;

    for (i = 0; i < n; i++) {
        entries[i].seq = children[i].seq;
        entries[i].name = p - names;
        entries[i].write = children[i].write;
        entries[i].gone = 0;

        p = ngx_cpymem(p, children[i].name, children[i].len + 1);
    }

    ngx_zk_lock_listing_free(listing);

    listing->entries = entries;
    listing->n = n;
    listing->head = 0;
    listing->live = n;

    return NGX_OK;
}


/* the entry of a node heard to be gone, unless counted already */

ngx_zk_lock_entry_t *
ngx_zk_lock_listing_remove(ngx_zk_lock_listing_t *listing,
    uint32_t seq)
{
    ngx_uint_t                 i;
    ngx_zk_lock_entry_t       *e;

    i = ngx_zk_lock_listing_first(listing->entries,
                                  sizeof(ngx_zk_lock_entry_t),
                                  listing->n, seq);

    if (i == listing->n || listing->entries[i].seq != seq
        || listing->entries[i].gone)
    {
        return NULL;
    }

    e = &listing->entries[i];
    e->gone = 1;
    listing->live--;

    while (listing->head < listing->n && listing->entries[listing->head].gone)
    {
        listing->head++;
    }

    return e;
}


u_char *
ngx_zk_lock_listing_name(ngx_zk_lock_listing_t *listing,
    ngx_zk_lock_entry_t *e)
{
    return (u_char *) &listing->entries[listing->n] + e->name;
}


void
ngx_zk_lock_listing_free(ngx_zk_lock_listing_t *listing)
{
    if (listing->entries) {
        ngx_free(listing->entries);
        listing->entries = NULL;
    }

    listing->n = 0;
    listing->head = 0;
    listing->live = 0;
}


/* a binary search by the sequence number, which leads either struct */

static ngx_uint_t
ngx_zk_lock_listing_first(void *base, size_t size, ngx_uint_t n,
    uint32_t seq)
{
    ngx_uint_t  lo, hi, mid;

    lo = 0;
    hi = n;

    while (lo < hi) {
        mid = lo + (hi - lo) / 2;

        if (*(uint32_t *) ((u_char *) base + mid * size) < seq) {
            lo = mid + 1;

        } else {
            hi = mid;
        }
    }

    return lo;
}


static int ngx_libc_cdecl
ngx_zk_lock_listing_cmp(const void *one, const void *two)
{
    const ngx_zk_lock_child_t  *a = one;
    const ngx_zk_lock_child_t  *b = two;

    if (a->seq != b->seq) {
        return a->seq < b->seq ? -1 : 1;
    }

    return ngx_strcmp(a->name, b->name);
}
