
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#include <ngx_config.h>
#include <ngx_core.h>

#include "ngx_zk_lock_share.h"


static uint64_t ngx_zk_lock_share_level(ngx_zk_lock_claim_t *claims,
    ngx_uint_t nc, uint64_t rest, uint64_t amount);
static void ngx_zk_lock_share_owed(ngx_zk_lock_share_t *sh,
    ngx_zk_lock_part_t *parts, ngx_uint_t np, uint64_t level,
    size_t len);
static void ngx_zk_lock_share_workers(ngx_zk_lock_share_t *sh,
    ngx_zk_lock_part_t *parts, ngx_uint_t np, ngx_zk_lock_claim_t *claims,
    uint64_t share);
static ngx_uint_t ngx_zk_lock_share_due(ngx_zk_lock_share_t *sh,
    ngx_uint_t held, ngx_uint_t waits, uint64_t part, ngx_uint_t weighed);
static uint64_t ngx_zk_lock_share_weight(ngx_zk_lock_share_t *sh,
    ngx_zk_lock_part_t *parts, ngx_uint_t i, ngx_uint_t j);
static ngx_uint_t ngx_zk_lock_share_external(ngx_zk_lock_share_t *sh,
    ngx_zk_lock_part_t *parts, ngx_uint_t np, ngx_uint_t *held,
    ngx_uint_t *waits);
static uint64_t ngx_zk_lock_share_part_of(uint64_t level, uint64_t weight);
static ngx_uint_t ngx_zk_lock_share_same(ngx_zk_lock_part_t *a,
    ngx_zk_lock_part_t *b);
static ngx_uint_t ngx_zk_lock_share_ours(ngx_zk_lock_share_t *sh,
    ngx_zk_lock_part_t *part, size_t len);
static int ngx_libc_cdecl ngx_zk_lock_share_claim_cmp(const void *one,
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
 *
 * With fair= the instances' level is weighted: an instance that waits gets
 * L times its claim, the flows it serves as the fleet's level counts them
 * (fair.c), so that max-min holds between the flows of the whole fleet
 * rather than between instances.  The participants without a claim (Curator
 * clients, an nginx without fair= on the path) are one flow together, the
 * external one: an instance cannot tell their requests apart, and one
 * flow each would give a service that runs many clients a share per
 * client.
 */

void
ngx_zk_lock_share(ngx_zk_lock_share_t *sh, ngx_zk_lock_part_t *parts,
    ngx_uint_t np, ngx_zk_lock_claim_t *claims)
{
    uint64_t                   level, share, rest, weight, mine;
    ngx_uint_t                 i, j, nc, held, ours, waits, ext;
    ngx_uint_t                 ext_held, ext_waits;
    ngx_zk_lock_part_t        *p;

    /* this worker's demand: unbounded while a request of its waits */
    ours = sh->demand;

    ext = ngx_zk_lock_share_external(sh, parts, np, &ext_held, &ext_waits);

    /* the instances: the parts that share an instance prefix, sorted */

    nc = 0;
    rest = 0;
    share = ours;
    mine = sh->weight ? sh->weight : NGX_ZK_LOCK_SHARE_FLOW;
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

        if (ngx_zk_lock_share_ours(sh, &parts[i],
                                  NGX_ZK_LOCK_INSTANCE_LEN))
        {
            /* this nginx: its other workers and this one */
            share = (waits || ours == NGX_MAX_UINT32_VALUE)
                    ? NGX_MAX_UINT32_VALUE : held + ours;
            continue;
        }

        weight = ngx_zk_lock_share_weight(sh, parts, i, j);

        if (weight == 0) {
            /* external: below, with the others */
            continue;
        }

        if (waits) {
            rest += weight;

        } else {
            claims[nc].demand = held;
            claims[nc++].weight = weight;
        }
    }

    if (ext) {
        if (ext_waits) {
            rest += NGX_ZK_LOCK_SHARE_FLOW;

        } else {
            claims[nc].demand = 1000 * ext_held;
            claims[nc++].weight = NGX_ZK_LOCK_SHARE_FLOW;
        }
    }

    /* this nginx, even when none of its nodes is listed yet */

    if (share != NGX_MAX_UINT32_VALUE) {
        claims[nc].demand = share;
        claims[nc++].weight = mine;

    } else {
        rest += mine;
    }

    level = ngx_zk_lock_share_level(claims, nc, rest,
                                   (uint64_t) 1000 * sh->leases);
    sh->level = level;

    share = ngx_min(share, ngx_zk_lock_share_part_of(level, mine));

    ngx_zk_lock_share_owed(sh, parts, np, level,
                          NGX_ZK_LOCK_INSTANCE_LEN);

    if (ext && !sh->owed) {
        (void) ngx_zk_lock_share_due(sh, ext_held, ext_waits,
                        ngx_zk_lock_share_part_of(level,
                                                  NGX_ZK_LOCK_SHARE_FLOW),
                        1);
    }

    ngx_zk_lock_share_workers(sh, parts, np, claims, share);
}


/*
 * The workers of this nginx, this one among them, share what the instance
 * gets, "share": one flow each
 */

static void
ngx_zk_lock_share_workers(ngx_zk_lock_share_t *sh, ngx_zk_lock_part_t *parts,
    ngx_uint_t np, ngx_zk_lock_claim_t *claims, uint64_t share)
{
    uint64_t             level;
    ngx_uint_t           i, nc, total;
    ngx_zk_lock_part_t  *p;

    nc = 0;
    total = 1;

    if (sh->demand != NGX_MAX_UINT32_VALUE) {
        claims[nc].demand = sh->demand;
        claims[nc++].weight = NGX_ZK_LOCK_SHARE_FLOW;
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
            claims[nc].demand = 1000 * p->held;
            claims[nc++].weight = NGX_ZK_LOCK_SHARE_FLOW;
        }
    }

    level = ngx_zk_lock_share_level(claims, nc,
                                   (total - nc) * NGX_ZK_LOCK_SHARE_FLOW,
                                   share);

    sh->floor = level / 1000;
    sh->ceil = (level + 999) / 1000;

    ngx_zk_lock_share_owed(sh, parts, np, level,
                          NGX_ZK_LOCK_OURS_LEN);
}


/*
 * The level of a flow (FLOW of weight) that "amount" fills: the claims
 * below it get their demand, the others, and "rest" (the weight of those
 * that wait), the level times their weight
 */

static uint64_t
ngx_zk_lock_share_level(ngx_zk_lock_claim_t *claims, ngx_uint_t nc,
    uint64_t rest, uint64_t amount)
{
    uint64_t    all, weight, level;
    ngx_uint_t  i;

    ngx_qsort(claims, nc, sizeof(ngx_zk_lock_claim_t),
              ngx_zk_lock_share_claim_cmp);

    all = amount;
    weight = rest;

    for (i = 0; i < nc; i++) {
        weight += claims[i].weight;
    }

    for (i = 0; i < nc; i++) {
        level = amount * NGX_ZK_LOCK_SHARE_FLOW / weight;

        if (claims[i].demand * NGX_ZK_LOCK_SHARE_FLOW / claims[i].weight
            > level)
        {
            break;
        }

        amount -= claims[i].demand;
        weight -= claims[i].weight;
    }

    /* nobody wants more than it has: nobody is over a share */

    return weight ? amount * NGX_ZK_LOCK_SHARE_FLOW / weight : all;
}


/* the level times a weight, in thousandths of leases */

static uint64_t
ngx_zk_lock_share_part_of(uint64_t level, uint64_t weight)
{
    return level / NGX_ZK_LOCK_SHARE_FLOW * weight
           + level % NGX_ZK_LOCK_SHARE_FLOW * weight / NGX_ZK_LOCK_SHARE_FLOW;
}


/*
 * An instance's claim: what its workers reported, 0 if none did (or it is
 * a Curator client: external, see external()), this nginx's its own; one
 * flow each without fair=
 */

static uint64_t
ngx_zk_lock_share_weight(ngx_zk_lock_share_t *sh, ngx_zk_lock_part_t *parts,
    ngx_uint_t i, ngx_uint_t j)
{
    uint64_t  weight;

    if (sh->weigh == NULL) {
        return NGX_ZK_LOCK_SHARE_FLOW;
    }

    if (ngx_zk_lock_share_ours(sh, &parts[i], NGX_ZK_LOCK_INSTANCE_LEN)) {
        return sh->weight ? sh->weight : NGX_ZK_LOCK_SHARE_FLOW;
    }

    if (parts[i].len != NGX_ZK_LOCK_OURS_LEN) {
        return 0;
    }

    weight = 0;

    for ( /* void */ ; i < j; i++) {
        weight += sh->weigh(sh->weigh_data, parts[i].name);
    }

    return ngx_min(weight, NGX_ZK_LOCK_SHARE_WEIGHT_MAX);
}


/*
 * fair=: the instances that report no claim, taken together: how many,
 * the leases they hold, whether one of them waits
 */

static ngx_uint_t
ngx_zk_lock_share_external(ngx_zk_lock_share_t *sh,
    ngx_zk_lock_part_t *parts, ngx_uint_t np, ngx_uint_t *held,
    ngx_uint_t *waits)
{
    ngx_uint_t  i, j, k, n;

    n = 0;
    *held = 0;
    *waits = 0;

    if (sh->weigh == NULL) {
        return 0;
    }

    for (i = 0; i < np; i = j) {

        for (j = i + 1;
             j < np && ngx_zk_lock_share_same(&parts[i], &parts[j]);
             j++)
        {
            /* void */
        }

        if (ngx_zk_lock_share_ours(sh, &parts[i], NGX_ZK_LOCK_INSTANCE_LEN)
            || ngx_zk_lock_share_weight(sh, parts, i, j) != 0)
        {
            continue;
        }

        n++;

        for (k = i; k < j; k++) {
            *held += parts[k].held;
            *waits |= (parts[k].waiting != 0);
        }
    }

    return n;
}


/*
 * A participant that waits with fewer leases than the level (rounded
 * down, and one at least) is owed one: at the level of the instances
 * (a "len" of INSTANCE_LEN: another nginx, or a Curator client; with
 * fair=, those without a claim are one, see share()), or of the workers
 * of this nginx (OURS_LEN)
 */

static void
ngx_zk_lock_share_owed(ngx_zk_lock_share_t *sh,
    ngx_zk_lock_part_t *parts, ngx_uint_t np, uint64_t level,
    size_t len)
{
    uint64_t    part, weight;
    ngx_uint_t  i, j, held, waits;

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

        /* an instance's level is weighted by its claim, a worker's not */

        if (len == NGX_ZK_LOCK_INSTANCE_LEN) {
            weight = ngx_zk_lock_share_weight(sh, parts, i, j);

            if (weight == 0) {
                /* external: weighed as one, see share() */
                continue;
            }

            part = ngx_zk_lock_share_part_of(level, weight);

        } else {
            part = level;
        }

        if (ngx_zk_lock_share_due(sh, held, waits, part,
                                  sh->weigh && len == NGX_ZK_LOCK_INSTANCE_LEN))
        {
            return;
        }
    }
}


/*
 * A participant of "part" (thousandths of leases) that holds "held" and
 * "waits": lagging if it is under its part, rounded, owed if under it
 * rounded down (one lease at least); 1 when owed
 */

static ngx_uint_t
ngx_zk_lock_share_due(ngx_zk_lock_share_t *sh, ngx_uint_t held,
    ngx_uint_t waits, uint64_t part, ngx_uint_t weighed)
{
    uint64_t  due, even;

    due = ngx_max(part / 1000, 1);

    /*
     * The fraction of a share rotates, see assign(); between weighed
     * instances (fair=), only for one more than half a lease short: a
     * weighed share is seldom whole, and rotating every fraction cost a
     * lease change per instance and quantum (0.15 writes a request in
     * t/bench/fair.pl, against 0.01 without weights).  What a flow gets is
     * in its instance's hands; the instance's part of the leases is met
     * within half a lease.
     */

    even = weighed ? (part + 499) / 1000 : (part + 999) / 1000;

    if (waits && held < even) {
        sh->lagging = 1;
    }

    if (waits && held < due) {
        sh->owed = 1;
        return 1;
    }

    return 0;
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


/* by the level at which a claim is met: demand over weight */

static int ngx_libc_cdecl
ngx_zk_lock_share_claim_cmp(const void *one, const void *two)
{
    uint64_t                    x, y;
    const ngx_zk_lock_claim_t  *a = one, *b = two;

    x = a->demand * NGX_ZK_LOCK_SHARE_FLOW / a->weight;
    y = b->demand * NGX_ZK_LOCK_SHARE_FLOW / b->weight;

    return (x > y) - (x < y);
}
