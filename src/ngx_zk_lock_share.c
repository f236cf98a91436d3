
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#include <ngx_config.h>
#include <ngx_core.h>

#include "ngx_zk_lock_share.h"


static ngx_uint_t ngx_zk_lock_share_level(ngx_uint_t *demand,
    ngx_uint_t nd, ngx_uint_t total, ngx_uint_t amount);
static void ngx_zk_lock_share_owed(ngx_zk_lock_share_t *sh,
    ngx_zk_lock_part_t *parts, ngx_uint_t np, ngx_uint_t level,
    size_t len);
static ngx_uint_t ngx_zk_lock_share_same(ngx_zk_lock_part_t *a,
    ngx_zk_lock_part_t *b);
static ngx_uint_t ngx_zk_lock_share_ours(ngx_zk_lock_share_t *sh,
    ngx_zk_lock_part_t *part, size_t len);
static int ngx_libc_cdecl ngx_zk_lock_share_uint_cmp(const void *one,
    const void *two);


/* the participants of a listing, with their nodes held and waiting */

ngx_uint_t
ngx_zk_lock_share_parts(ngx_zk_lock_share_t *sh,
    ngx_zk_lock_child_t *children, ngx_uint_t n, ngx_zk_lock_part_t *parts)
{
    ngx_uint_t                i, np, participants;
    ngx_zk_lock_part_t       *p;

    np = 0;
    participants = 0;

    for (i = 0; i < n; i++) {

        if (children[i].seq >= NGX_ZK_LOCK_SEQ_WRAPPED) {
            /* no participant: sorted last */
            break;
        }

        participants++;

        p = &parts[np++];
        p->name = children[i].name;
        p->len = ngx_zk_lock_share_prefix(&children[i]);
        p->held = (i < sh->leases);
        p->waiting = (i >= sh->leases);
    }

    sh->free = (participants < sh->leases) ? sh->leases - participants : 0;

    if (np < 2) {
        return np;
    }

    ngx_qsort(parts, np, sizeof(ngx_zk_lock_part_t),
              ngx_zk_lock_share_part_cmp);

    /* one entry per participant */

    p = parts;

    for (i = 1; i < np; i++) {
        if (ngx_zk_lock_share_part_cmp(p, &parts[i]) == 0) {
            p->held += parts[i].held;
            p->waiting += parts[i].waiting;
            continue;
        }

        *++p = parts[i];
    }

    return p - parts + 1;
}


/*
 * The max-min fair share, over the nginx instances first and then over
 * the workers of this one: those that wait get the level L, those that do
 * not what they hold, and it all comes to "leases" (in thousandths).  This
 * worker wants more when a request of its waits, else what its requests
 * run on: its idle leases are nobody's need.
 */

void
ngx_zk_lock_share(ngx_zk_lock_share_t *sh, ngx_zk_lock_part_t *parts,
    ngx_uint_t np, ngx_uint_t *demand)
{
    ngx_uint_t                 i, j, nd, total, level, share, held, ours;
    ngx_uint_t                 waits, found;
    ngx_zk_lock_part_t        *p;

    /* this worker's demand: unbounded while a request of its waits */
    ours = sh->demand;

    /* the instances: the parts that share an instance prefix, sorted */

    nd = 0;
    total = 0;
    found = 0;
    share = ours;
    sh->others = 0;
    sh->owed = 0;
    sh->lagging = 0;

    for (i = 0; i < np; i = j) {
        held = 0;
        waits = 0;

        for (j = i; j < np && ngx_zk_lock_share_same(&parts[i],
                                                    &parts[j]); j++)
        {
            p = &parts[j];

            if (ngx_zk_lock_share_ours(sh, p,
                                      NGX_ZK_LOCK_OURS_LEN))
            {
                continue;
            }

            sh->others |= (p->waiting != 0);
            waits |= (p->waiting != 0);
            held += 1000 * p->held;
        }

        total++;

        if (ngx_zk_lock_share_ours(sh, &parts[i],
                                  NGX_ZK_LOCK_INSTANCE_LEN))
        {
            /* this nginx: its other workers and this one */
            found = 1;
            share = (waits || ours == NGX_MAX_UINT32_VALUE)
                    ? NGX_MAX_UINT32_VALUE : held + ours;

        } else if (!waits) {
            demand[nd++] = held;
        }
    }

    if (!found) {
        /* none of this nginx's nodes listed yet */
        total++;
    }

    if (share != NGX_MAX_UINT32_VALUE) {
        demand[nd++] = share;
    }

    level = ngx_zk_lock_share_level(demand, nd, total, 1000 * sh->leases);
    share = ngx_min(share, level);

    ngx_zk_lock_share_owed(sh, parts, np, level,
                          NGX_ZK_LOCK_INSTANCE_LEN);

    /* the workers of this nginx, this one among them */

    nd = 0;
    total = 1;

    if (ours != NGX_MAX_UINT32_VALUE) {
        demand[nd++] = ours;
    }

    for (i = 0; i < np; i++) {
        p = &parts[i];

        if (!ngx_zk_lock_share_ours(sh, p,
                                   NGX_ZK_LOCK_INSTANCE_LEN)
            || ngx_zk_lock_share_ours(sh, p, NGX_ZK_LOCK_OURS_LEN))
        {
            continue;
        }

        total++;

        if (!p->waiting) {
            demand[nd++] = 1000 * p->held;
        }
    }

    level = ngx_zk_lock_share_level(demand, nd, total, share);

    sh->floor = level / 1000;
    sh->ceil = (level + 999) / 1000;

    ngx_zk_lock_share_owed(sh, parts, np, level,
                          NGX_ZK_LOCK_OURS_LEN);
}


/* the level that "amount" fills among "total", "demand" those below it */

static ngx_uint_t
ngx_zk_lock_share_level(ngx_uint_t *demand, ngx_uint_t nd,
    ngx_uint_t total, ngx_uint_t amount)
{
    ngx_uint_t  i, left, all;

    ngx_qsort(demand, nd, sizeof(ngx_uint_t), ngx_zk_lock_share_uint_cmp);

    all = amount;

    for (i = 0; i < nd; i++) {
        if (demand[i] * (total - i) > amount) {
            break;
        }

        amount -= demand[i];
    }

    left = total - i;

    /* nobody wants more than it has: nobody is over a share */

    return left ? amount / left : all;
}


/*
 * A participant that waits with fewer leases than the level (rounded
 * down, and one at least) is owed one: at the level of the instances
 * (a "len" of INSTANCE_LEN: another nginx, or a Curator client), or of
 * the workers of this nginx (OURS_LEN)
 */

static void
ngx_zk_lock_share_owed(ngx_zk_lock_share_t *sh,
    ngx_zk_lock_part_t *parts, ngx_uint_t np, ngx_uint_t level,
    size_t len)
{
    ngx_uint_t  i, j, held, waits, due, even;

    due = ngx_max(level / 1000, 1);
    even = (level + 999) / 1000;

    for (i = 0; i < np; i = j) {
        held = 0;
        waits = 0;

        for (j = i; j < np; j++) {
            if (len == NGX_ZK_LOCK_INSTANCE_LEN
                ? !ngx_zk_lock_share_same(&parts[i], &parts[j])
                : j > i)
            {
                break;
            }

            held += parts[j].held;
            waits |= (parts[j].waiting != 0);
        }

        /* the other instances; or the other workers of this one */

        if (ngx_zk_lock_share_ours(sh, &parts[i], len)
            || (len == NGX_ZK_LOCK_OURS_LEN
                && !ngx_zk_lock_share_ours(sh, &parts[i],
                                        NGX_ZK_LOCK_INSTANCE_LEN)))
        {
            continue;
        }

        if (waits && held < even) {
            /* the fraction of a share rotates, see assign() */
            sh->lagging = 1;
        }

        if (waits && held < due) {
            sh->owed = 1;
            return;
        }
    }
}


/* the parts of one instance: workers of one nginx, or one Curator node */

static ngx_uint_t
ngx_zk_lock_share_same(ngx_zk_lock_part_t *a,
    ngx_zk_lock_part_t *b)
{
    if (a->len != NGX_ZK_LOCK_OURS_LEN
        || b->len != NGX_ZK_LOCK_OURS_LEN)
    {
        return a == b;
    }

    return ngx_memcmp(a->name, b->name, NGX_ZK_LOCK_INSTANCE_LEN) == 0;
}


/* this worker's nodes (OURS_LEN), or this nginx's (INSTANCE_LEN) */

static ngx_uint_t
ngx_zk_lock_share_ours(ngx_zk_lock_share_t *sh,
    ngx_zk_lock_part_t *part, size_t len)
{
    return part->len == NGX_ZK_LOCK_OURS_LEN
           && ngx_memcmp(part->name, sh->ours, len) == 0;
}


/* a participant's name: a worker's nodes share the start of their UUID */

size_t
ngx_zk_lock_share_prefix(ngx_zk_lock_child_t *child)
{
    return (child->len > NGX_ZK_LOCK_OURS_LEN
            && ngx_strncmp(child->name, "_c_", 3) == 0)
           ? NGX_ZK_LOCK_OURS_LEN : child->len;
}


int ngx_libc_cdecl
ngx_zk_lock_share_part_cmp(const void *one, const void *two)
{
    const ngx_zk_lock_part_t  *a = one, *b = two;

    if (a->len != b->len) {
        return (a->len < b->len) ? -1 : 1;
    }

    return ngx_memcmp(a->name, b->name, a->len);
}


static int ngx_libc_cdecl
ngx_zk_lock_share_uint_cmp(const void *one, const void *two)
{
    const ngx_uint_t  *a = one, *b = two;

    return (*a > *b) - (*a < *b);
}
