
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_md5.h>

#include "ngx_zk_lock_fair.h"
#include "ngx_zk_lock_share.h"
#include "ngx_zk_lock_session.h"


/*
 * Weighted fair queuing of a pool's tickets (fair=, fair_weight=): start
 * time fair queuing over the flows that have a ticket alive, in seat
 * time.  Each flow has a virtual time, the milliseconds its requests held
 * a lease over its weight; a lease that frees goes to the waiting ticket
 * whose flow's virtual time is least, first come first served within a
 * flow.  How long a request will hold is not known when it starts, so its
 * flow is charged the pool's mean hold at the grant and the difference at
 * its end: a flow with many requests in flight is behind by all of them
 * at once, not only as they end.
 *
 * A flow that comes, or comes back, starts at the virtual time of the
 * last flow served: none banks credit while it asks nothing (a flow
 * that was idle would otherwise take every lease until it caught up),
 * and one that asks little is served next, behind one lease's end,
 * however many requests the others queued.  Between two flows that both
 * want more, leases go by weight.
 *
 * A flow is kept while a ticket of its is alive, waiting or served: the
 * memory follows the requests in the worker, not the keys ever seen.  A
 * pick walks the waiting tickets, as few as the worker's requests.
 *
 * Across the fleet, an instance claims a part of the leases by the flows
 * it serves (claim()): each flow counts as its weight, or less if it
 * wanted less than the fleet's level gives a flow (its tickets' time
 * alive, waiting or served, over the level's lease time in a window).
 * share.c weighs the instances' levels by these claims, so that a flow
 * that wants little gets it all whichever instance it comes to, and the
 * rest goes between the flows that want more.  An instance's flows are
 * its own: a key that comes to two instances is two flows.
 *
 * fair_max= caps the tickets of a flow that the pool has, waiting or
 * served; the others wait in their flow, first come first served, and
 * take no part in the pool (no node queues for them) until one of the
 * flow's ends.  So a flow never holds more than its cap, and claims no
 * more than it.
 *
 * With priority= (zk_lock_class), each flow is of a class, and a lease
 * that frees goes first to the class that holds the least for its part
 * of the instance's leases (keep.c computes the parts, class.c the
 * fleet's), then within it by flow as above; the claim and the demand
 * are counted per class, for the board.
 *
 * Keys are hashed with a secret that the master draws as it reads the
 * configuration (MD5 of the secret and the key, 63 bits): $zk_lock_flow
 * and the log show the hash, never the key, and the hash of a key tells
 * nothing without the secret.
 */


/* virtual time: milliseconds held x SCALE / weight */
#define NGX_ZK_LOCK_FAIR_SCALE  1000

/* a request's hold before any ended, ms */
#define NGX_ZK_LOCK_FAIR_HOLD   10

/* the claim's window, ms: a quantum of kept leases */
#define NGX_ZK_LOCK_FAIR_WINDOW  600

/* a class's target, at least, for its virtual time: 5% of a lease */
#define NGX_ZK_LOCK_FAIR_LEAST   50


/* priority=: the default class; the one class, 0, without classes */
#define ngx_zk_lock_fair_dflt(fair)                                      \
    ((fair)->classes ? (fair)->classes->dflt : 0)

/* a flow's class: the default for one that names none of the pool's */
#define ngx_zk_lock_fair_cls(fair, flow)                                 \
    (((fair)->classes && (flow)->cls < (fair)->classes->n)              \
     ? (flow)->cls : ngx_zk_lock_fair_dflt(fair))

/* a waiting ticket's class: a ticket without a flow is the default's */
#define ngx_zk_lock_fair_ticket_cls(fair, ticket)                        \
    ((ticket)->flow ? ((ngx_zk_lock_fair_flow_t *) (ticket)->flow)->cls  \
                    : ngx_zk_lock_fair_dflt(fair))


typedef struct {
    ngx_queue_t                   queue;      /* in fair->flows */
    uint64_t                      id;
    ngx_uint_t                    weight;
    ngx_uint_t                    cls;        /* priority=: its class */
    ngx_uint_t                    tickets;    /* alive */
    ngx_uint_t                    held;       /* ... of them, served */
    uint64_t                      vtime;
    uint64_t                      busy;       /* tickets x ms, in the */
    ngx_msec_t                    since;      /* window, until "since" */
    ngx_uint_t                    max;        /* fair_max=: admitted, at */
    ngx_uint_t                    admitted;   /* most; the others wait in */
    ngx_queue_t                   capped;     /* "capped" */
} ngx_zk_lock_fair_flow_t;


static ngx_zk_lock_fair_flow_t *ngx_zk_lock_fair_find(
    ngx_zk_lock_fair_t *fair, ngx_zk_lock_flow_t *flow);
static void ngx_zk_lock_fair_tally(ngx_zk_lock_fair_flow_t *f);
static void ngx_zk_lock_fair_class_pay(ngx_zk_lock_fair_t *fair,
    ngx_zk_lock_fair_flow_t *f, ngx_zk_lock_node_t *ticket, ngx_msec_t held);
static ngx_uint_t ngx_zk_lock_fair_smooth(ngx_uint_t old, uint64_t now);
static uint64_t ngx_zk_lock_fair_part(ngx_zk_lock_fair_t *fair,
    ngx_zk_lock_fair_flow_t *f, ngx_msec_t window);
static void ngx_zk_lock_fair_window(ngx_zk_lock_fair_t *fair);
static ngx_uint_t ngx_zk_lock_fair_class(ngx_zk_lock_fair_t *fair,
    ngx_queue_t *tickets);
static void ngx_zk_lock_fair_waits(ngx_zk_lock_fair_t *fair,
    ngx_queue_t *tickets, ngx_uint_t *waits);
static ngx_uint_t ngx_zk_lock_fair_rank(ngx_zk_lock_fair_top_t *top,
    ngx_uint_t n, ngx_zk_lock_fair_top_t *t);


static u_char  ngx_zk_lock_fair_key[16];


/* at configuration, in the master: the workers hash alike */

ngx_int_t
ngx_zk_lock_fair_secret(ngx_log_t *log)
{
    return ngx_zk_lock_session_random(log, ngx_zk_lock_fair_key,
                                      sizeof(ngx_zk_lock_fair_key));
}


uint64_t
ngx_zk_lock_fair_hash(ngx_str_t *key)
{
    u_char      digest[16];
    uint64_t    id;
    ngx_md5_t   md5;

    ngx_md5_init(&md5);
    ngx_md5_update(&md5, ngx_zk_lock_fair_key, sizeof(ngx_zk_lock_fair_key));
    ngx_md5_update(&md5, key->data, key->len);
    ngx_md5_final(digest, &md5);

    ngx_memcpy(&id, digest, sizeof(uint64_t));

    /* 63 bits, as nginx's ngx_hextoi() reads them (brokers' asks); 0 is none */
    id &= 0x7fffffffffffffffULL;

    return id ? id : 1;
}


/* fair_weight=: 1 to 1000, else NGX_ERROR */

ngx_int_t
ngx_zk_lock_fair_weight(ngx_str_t *value)
{
    ngx_int_t  n;

    n = ngx_atoi(value->data, value->len);

    if (n < 1 || n > NGX_ZK_LOCK_FAIR_WEIGHT_MAX) {
        return NGX_ERROR;
    }

    return n;
}


/*
 * A participant's flow, from its key and, with fair_weight=$variable, its
 * weight as evaluated by the layer: NGX_DECLINED for a weight out of
 * range.  Its class (priority=): an unknown name is the default class's,
 * said once in a worker.
 */

ngx_int_t
ngx_zk_lock_fair_flow(ngx_zk_lock_flow_t *flow, ngx_zk_lock_params_t *lp,
    ngx_str_t *key, ngx_str_t *weight, ngx_str_t *class, ngx_log_t *log)
{
    ngx_int_t               n;
    ngx_zk_lock_classes_t  *cl;

    flow->id = ngx_zk_lock_fair_hash(key);
    flow->weight = lp->fair_weight ? lp->fair_weight : 1;

    cl = lp->classes;
    flow->cls = (cl && cl->n) ? cl->dflt : 0;

    if (class && cl && cl->n) {
        n = ngx_zk_lock_class_find(cl, class->data, class->len);

        if ((ngx_uint_t) n < cl->n) {
            flow->cls = n;

        } else if (!cl->warned) {
            cl->warned = 1;
            ngx_log_error(NGX_LOG_WARN, log, 0,
                          "%s \"%V\": no class \"%V\", the default "
                          "class \"%V\" serves it (said once)",
                          ngx_zk_lock_types[lp->type].directive, &lp->name,
                          class, &cl->class[cl->dflt].name);
        }
    }

    if (weight == NULL) {
        return NGX_OK;
    }

    n = ngx_zk_lock_fair_weight(weight);

    if (n == NGX_ERROR) {
        ngx_log_error(NGX_LOG_INFO, log, 0,
                      "%s \"%V\": invalid fair_weight \"%V\", 1 to %d "
                      "expected", ngx_zk_lock_types[lp->type].directive,
                      &lp->name, weight, NGX_ZK_LOCK_FAIR_WEIGHT_MAX);
        return NGX_DECLINED;
    }

    flow->weight = n;

    return NGX_OK;
}


/* $zk_lock_flow, in either layer: the flow's 16 hex digits */

ngx_int_t
ngx_zk_lock_fair_value(ngx_pool_t *pool, uint64_t id,
    ngx_variable_value_t *v)
{
    u_char  *p;

    if (id == 0) {
        v->not_found = 1;
        return NGX_OK;
    }

    p = ngx_pnalloc(pool, NGX_ZK_LOCK_FAIR_ID_LEN);
    if (p == NULL) {
        return NGX_ERROR;
    }

    v->len = ngx_sprintf(p, "%016xL", id) - p;
    v->data = p;
    v->valid = 1;
    v->no_cacheable = 0;
    v->not_found = 0;

    return NGX_OK;
}


void
ngx_zk_lock_fair_init(ngx_zk_lock_fair_t *fair)
{
    ngx_queue_init(&fair->flows);
    fair->nflows = 0;
    fair->vtime = 0;
    fair->hold = NGX_ZK_LOCK_FAIR_HOLD;
    fair->level = 0;
    fair->start = ngx_current_msec;
    fair->claim = 0;
    fair->classes = NULL;
    fair->cvtime = 0;
    ngx_memzero(fair->cls, sizeof(fair->cls));
}


/*
 * A ticket of the flow is made: NGX_OK, NGX_BUSY if its flow has "max"
 * tickets in the pool already (it waits in its flow), NGX_ERROR for want
 * of memory
 */

ngx_int_t
ngx_zk_lock_fair_join(ngx_zk_lock_fair_t *fair, ngx_zk_lock_node_t *ticket,
    ngx_zk_lock_flow_t *flow, ngx_uint_t max)
{
    ngx_zk_lock_fair_flow_t  *f;

    ngx_zk_lock_fair_window(fair);

    f = ngx_zk_lock_fair_find(fair, flow);

    if (f == NULL) {
        f = ngx_alloc(sizeof(ngx_zk_lock_fair_flow_t), ticket->log);
        if (f == NULL) {
            return NGX_ERROR;
        }

        f->id = flow->id;
        f->weight = flow->weight;
        f->cls = ngx_zk_lock_fair_cls(fair, flow);
        f->tickets = 0;
        f->held = 0;
        f->vtime = fair->vtime;
        f->busy = 0;
        f->since = ngx_current_msec;
        f->admitted = 0;
        ngx_queue_init(&f->capped);

        ngx_queue_insert_tail(&fair->flows, &f->queue);
        fair->nflows++;
    }

    f->max = max;

    /* no credit for the time it asked nothing */
    f->vtime = ngx_max(f->vtime, fair->vtime);

    ngx_zk_lock_fair_tally(f);
    f->tickets++;
    fair->cls[f->cls].alive++;

    ticket->flow = f;
    ticket->fair_charge = 0;

    if (max && f->admitted >= max) {
        ticket->capped = 1;
        ngx_queue_insert_tail(&f->capped, &ticket->queue);
        return NGX_BUSY;
    }

    f->admitted++;

    return NGX_OK;
}


static ngx_zk_lock_fair_flow_t *
ngx_zk_lock_fair_find(ngx_zk_lock_fair_t *fair, ngx_zk_lock_flow_t *flow)
{
    ngx_queue_t              *q;
    ngx_zk_lock_fair_flow_t  *f;

    for (q = ngx_queue_head(&fair->flows);
         q != ngx_queue_sentinel(&fair->flows);
         q = ngx_queue_next(q))
    {
        f = ngx_queue_data(q, ngx_zk_lock_fair_flow_t, queue);

        /* one key, two weights or classes (two directives): two flows */

        if (f->id == flow->id && f->weight == flow->weight
            && f->cls == ngx_zk_lock_fair_cls(fair, flow))
        {
            return f;
        }
    }

    return NULL;
}


/*
 * The waiting ticket to serve: of the class furthest below its part
 * (priority=), the first of the flow least served; a ticket without a
 * flow (a directive without fair= on the same path) as one of the
 * default class that comes now
 */

ngx_zk_lock_node_t *
ngx_zk_lock_fair_next(ngx_zk_lock_fair_t *fair, ngx_queue_t *tickets)
{
    uint64_t                  v, least;
    ngx_uint_t                cls;
    ngx_queue_t              *q;
    ngx_zk_lock_node_t       *ticket, *best;
    ngx_zk_lock_fair_flow_t  *f;

    best = NULL;
    least = 0;
    cls = ngx_zk_lock_fair_class(fair, tickets);

    for (q = ngx_queue_head(tickets);
         q != ngx_queue_sentinel(tickets);
         q = ngx_queue_next(q))
    {
        ticket = ngx_queue_data(q, ngx_zk_lock_node_t, queue);

        if (ngx_zk_lock_fair_ticket_cls(fair, ticket) != cls) {
            continue;
        }

        f = ticket->flow;
        v = f ? f->vtime : fair->vtime;

        if (best == NULL || v < least) {
            best = ticket;
            least = v;
        }
    }

    return best;
}


/*
 * priority=: the class to serve, of those that wait: the one least served
 * for its part of the instance's leases (its target), in lease time over
 * the part (weighted fair queuing between the classes, as between the
 * flows of a class), the higher of two alike.  A class that comes, or
 * comes back, starts level with the last served: it is served at the
 * next lease that frees, however many requests of the others wait.
 */

static ngx_uint_t
ngx_zk_lock_fair_class(ngx_zk_lock_fair_t *fair, ngx_queue_t *tickets)
{
    uint64_t    v, least;
    ngx_uint_t  i, best, waits[NGX_ZK_LOCK_CLASS_MAX];

    if (fair->classes == NULL) {
        return 0;
    }

    ngx_zk_lock_fair_waits(fair, tickets, waits);

    best = ngx_zk_lock_fair_dflt(fair);
    least = (uint64_t) -1;

    for (i = 0; i < fair->classes->n; i++) {
        if (waits[i] == 0) {
            continue;
        }

        v = ngx_max(fair->cls[i].vtime, fair->cvtime);

        if (v < least) {
            least = v;
            best = i;
        }
    }

    return best;
}


/* priority=: how many tickets of each class wait */

static void
ngx_zk_lock_fair_waits(ngx_zk_lock_fair_t *fair, ngx_queue_t *tickets,
    ngx_uint_t *waits)
{
    ngx_queue_t         *q;
    ngx_zk_lock_node_t  *ticket;

    ngx_memzero(waits, NGX_ZK_LOCK_CLASS_MAX * sizeof(ngx_uint_t));

    for (q = ngx_queue_head(tickets);
         q != ngx_queue_sentinel(tickets);
         q = ngx_queue_next(q))
    {
        ticket = ngx_queue_data(q, ngx_zk_lock_node_t, queue);
        waits[ngx_zk_lock_fair_ticket_cls(fair, ticket)]++;
    }
}


/* the ticket holds: its flow is charged a mean hold, for now */

void
ngx_zk_lock_fair_start(ngx_zk_lock_fair_t *fair, ngx_zk_lock_node_t *ticket)
{
    uint64_t                   charge;
    ngx_zk_lock_fair_flow_t   *f;
    ngx_zk_lock_fair_class_t  *c;

    f = ticket->flow;

    if (f == NULL) {
        return;
    }

    fair->vtime = ngx_max(fair->vtime, f->vtime);
    f->held++;

    charge = (uint64_t) fair->hold * NGX_ZK_LOCK_FAIR_SCALE / f->weight;
    charge = ngx_max(charge, 1);

    f->vtime += charge;

    ticket->fair_charge = charge;
    ticket->fair_start = ngx_current_msec;

    if (fair->classes) {
        /* its class too, by its part: none banks credit while idle */
        c = &fair->cls[f->cls];
        c->vtime = ngx_max(c->vtime, fair->cvtime);
        fair->cvtime = c->vtime;
        c->vtime += (uint64_t) fair->hold * 1000
                    / ngx_max(c->target, NGX_ZK_LOCK_FAIR_LEAST);
    }
}


/*
 * The ticket ends, served or not: its flow pays what it held.  A ticket
 * of the flow that waited for its cap (fair_max=) is admitted in its
 * place: returned, for the pool to take.
 */

ngx_zk_lock_node_t *
ngx_zk_lock_fair_leave(ngx_zk_lock_fair_t *fair, ngx_zk_lock_node_t *ticket)
{
    uint64_t                  paid;
    ngx_msec_t                held;
    ngx_queue_t              *q;
    ngx_zk_lock_node_t       *next;
    ngx_zk_lock_fair_flow_t  *f;

    f = ticket->flow;

    if (f == NULL) {
        return NULL;
    }

    ticket->flow = NULL;
    next = NULL;

    if (ticket->capped) {
        ngx_queue_remove(&ticket->queue);

    } else {
        f->admitted--;

        if (!ngx_queue_empty(&f->capped)
            && (f->max == 0 || f->admitted < f->max))
        {
            q = ngx_queue_head(&f->capped);
            ngx_queue_remove(q);

            next = ngx_queue_data(q, ngx_zk_lock_node_t, queue);
            next->capped = 0;
            f->admitted++;
        }
    }

    if (ticket->fair_charge) {
        f->held--;

        held = ngx_current_msec - ticket->fair_start;
        fair->hold = (7 * fair->hold + held) / 8;

        paid = (uint64_t) held * NGX_ZK_LOCK_FAIR_SCALE / f->weight;
        f->vtime = f->vtime - ticket->fair_charge + paid;

        if (fair->classes) {
            ngx_zk_lock_fair_class_pay(fair, f, ticket, held);
        }
    }

    ngx_zk_lock_fair_tally(f);

    fair->cls[f->cls].alive--;

    if (--f->tickets == 0) {
        /* its part of the window's claim and demand stays when it goes */
        fair->cls[f->cls].gone += ngx_zk_lock_fair_part(fair, f,
                                  ngx_max(ngx_current_msec - fair->start,
                                          NGX_ZK_LOCK_FAIR_WINDOW));
        fair->cls[f->cls].gone_busy += f->busy;
        ngx_queue_remove(&f->queue);
        ngx_free(f);
        fair->nflows--;
    }

    return next;
}


/*
 * priority=: a class pays what its request held, for the mean hold it was
 * charged at the grant (the flow's charge over its weight)
 */

static void
ngx_zk_lock_fair_class_pay(ngx_zk_lock_fair_t *fair,
    ngx_zk_lock_fair_flow_t *f, ngx_zk_lock_node_t *ticket, ngx_msec_t held)
{
    uint64_t                   mean, w, diff;
    ngx_zk_lock_fair_class_t  *c;

    c = &fair->cls[f->cls];
    w = ngx_max(c->target, NGX_ZK_LOCK_FAIR_LEAST);
    mean = ticket->fair_charge * f->weight / NGX_ZK_LOCK_FAIR_SCALE;

    if (held >= mean) {
        c->vtime += (held - mean) * 1000 / w;

    } else {
        diff = (mean - held) * 1000 / w;
        c->vtime -= ngx_min(diff, c->vtime);
    }
}


/*
 * The instance's claim on the fleet's leases, in thousandths of a flow:
 * the flows' parts over the last window, at once when it grows, halved
 * towards it when it falls (a flow that pauses keeps some of its claim)
 */

ngx_uint_t
ngx_zk_lock_fair_claim(ngx_zk_lock_fair_t *fair)
{
    ngx_zk_lock_fair_window(fair);

    return fair->claim;
}


/* priority=: the ticket's class, and how many tickets of it are alive */

ngx_uint_t
ngx_zk_lock_fair_alive(ngx_zk_lock_fair_t *fair, ngx_zk_lock_node_t *ticket,
    ngx_uint_t *cls)
{
    *cls = ngx_zk_lock_fair_ticket_cls(fair, ticket);

    return fair->cls[*cls].alive;
}


/*
 * priority=: whether a ticket waits of a class that comes back to its
 * reserved seats, idle in the fleet (keep.c): it may take them, whatever
 * the worker's cap
 */

ngx_uint_t
ngx_zk_lock_fair_reserved(ngx_zk_lock_fair_t *fair, ngx_queue_t *tickets)
{
    ngx_uint_t  k, waits[NGX_ZK_LOCK_CLASS_MAX];

    if (fair->classes == NULL) {
        return 0;
    }

    ngx_zk_lock_fair_waits(fair, tickets, waits);

    for (k = 0; k < fair->classes->n; k++) {
        if (waits[k] && fair->cls[k].reserved) {
            return 1;
        }
    }

    return 0;
}


/*
 * priority=: each class's requests served and waiting, and its part of
 * the instance's leases, for the status page: how many classes
 */

ngx_uint_t
ngx_zk_lock_fair_loads(ngx_zk_lock_fair_t *fair, ngx_queue_t *tickets,
    ngx_zk_lock_fair_load_t *load)
{
    ngx_uint_t                k, waits[NGX_ZK_LOCK_CLASS_MAX];
    ngx_queue_t              *q;
    ngx_zk_lock_fair_flow_t  *f;

    if (fair->classes == NULL) {
        return 0;
    }

    ngx_memzero(load, fair->classes->n * sizeof(ngx_zk_lock_fair_load_t));

    for (q = ngx_queue_head(&fair->flows);
         q != ngx_queue_sentinel(&fair->flows);
         q = ngx_queue_next(q))
    {
        f = ngx_queue_data(q, ngx_zk_lock_fair_flow_t, queue);
        load[f->cls].held += f->held;
    }

    ngx_zk_lock_fair_waits(fair, tickets, waits);

    for (k = 0; k < fair->classes->n; k++) {
        load[k].waiting = (uint32_t) waits[k];
        load[k].part = (uint32_t) ngx_min(fair->cls[k].target,
                                          NGX_MAX_UINT32_VALUE);
    }

    return fair->classes->n;
}


/* priority=: a worker's slot of a layer's gauges added to the classes' */

void
ngx_zk_lock_fair_loads_add(ngx_zk_lock_fair_load_t *load,
    ngx_zk_lock_fair_load_t *slot)
{
    ngx_uint_t  k;

    for (k = 0; k < NGX_ZK_LOCK_CLASS_MAX; k++) {
        load[k].held += slot[k].held;
        load[k].waiting += slot[k].waiting;
        load[k].part += slot[k].part;
    }
}


/*
 * The flows that hold the most leases, then wait for the most: at most
 * TOP, by their hash, for the status page
 */

ngx_uint_t
ngx_zk_lock_fair_top(ngx_zk_lock_fair_t *fair, ngx_zk_lock_fair_top_t *top)
{
    ngx_uint_t                n;
    ngx_queue_t              *q;
    ngx_zk_lock_fair_top_t    t;
    ngx_zk_lock_fair_flow_t  *f;

    n = 0;

    for (q = ngx_queue_head(&fair->flows);
         q != ngx_queue_sentinel(&fair->flows);
         q = ngx_queue_next(q))
    {
        f = ngx_queue_data(q, ngx_zk_lock_fair_flow_t, queue);

        t.id = f->id;
        t.held = f->held;
        t.waiting = (f->tickets > f->held) ? f->tickets - f->held : 0;
        t.weight = f->weight;

        n = ngx_zk_lock_fair_rank(top, n, &t);
    }

    return n;
}


/*
 * "t" in its place among the "n" of "top", which are in order (the last
 * dropped when there are TOP): how many there are then
 */

static ngx_uint_t
ngx_zk_lock_fair_rank(ngx_zk_lock_fair_top_t *top, ngx_uint_t n,
    ngx_zk_lock_fair_top_t *t)
{
    ngx_uint_t  i;

    for (i = n; i > 0; i--) {
        if (t->held < top[i - 1].held
            || (t->held == top[i - 1].held
                && t->waiting <= top[i - 1].waiting))
        {
            break;
        }

        if (i < NGX_ZK_LOCK_FAIR_TOP) {
            top[i] = top[i - 1];
        }
    }

    if (i < NGX_ZK_LOCK_FAIR_TOP) {
        top[i] = *t;
    }

    return ngx_min(n + 1, NGX_ZK_LOCK_FAIR_TOP);
}


/*
 * A worker's slot of a layer's gauges (shared memory): its top flows as
 * reported, the rest emptied (an id of 0)
 */

void
ngx_zk_lock_fair_top_set(ngx_zk_lock_fair_top_t *slot,
    ngx_zk_lock_fair_top_t *top, ngx_uint_t n)
{
    ngx_memzero(slot, NGX_ZK_LOCK_FAIR_TOP * sizeof(ngx_zk_lock_fair_top_t));

    if (n) {
        ngx_memcpy(slot, top, n * sizeof(ngx_zk_lock_fair_top_t));
    }
}


/* a worker's slot added to the "n" top flows of all: how many then */

ngx_uint_t
ngx_zk_lock_fair_top_add(ngx_zk_lock_fair_top_t *top, ngx_uint_t n,
    ngx_zk_lock_fair_top_t *slot)
{
    ngx_uint_t  i;

    for (i = 0; i < NGX_ZK_LOCK_FAIR_TOP && slot[i].id; i++) {
        n = ngx_zk_lock_fair_rank(top, n, &slot[i]);
    }

    return n;
}


/*
 * The window ends: each class's claim (the flows' parts) and demand (its
 * tickets alive, waiting or served, on average; or as many as are alive
 * now if the class comes back, see class_back(): one that came in the
 * window's last 90 ms with 16 requests averaged 2.4, and was given its
 * part a window late), at once when they grow, halved towards them when
 * they fall; the instance's claim, their sum
 */

static void
ngx_zk_lock_fair_window(ngx_zk_lock_fair_t *fair)
{
    uint64_t                   claim[NGX_ZK_LOCK_CLASS_MAX];
    uint64_t                   busy[NGX_ZK_LOCK_CLASS_MAX];
    uint64_t                   alive, demand;
    ngx_uint_t                 i, n;
    ngx_msec_t                 window;
    ngx_queue_t               *q;
    ngx_zk_lock_fair_flow_t   *f;
    ngx_zk_lock_fair_class_t  *c;

    window = ngx_current_msec - fair->start;

    if (window < NGX_ZK_LOCK_FAIR_WINDOW) {
        return;
    }

    n = fair->classes ? fair->classes->n : 1;

    for (i = 0; i < n; i++) {
        claim[i] = fair->cls[i].gone;
        busy[i] = fair->cls[i].gone_busy;
    }

    for (q = ngx_queue_head(&fair->flows);
         q != ngx_queue_sentinel(&fair->flows);
         q = ngx_queue_next(q))
    {
        f = ngx_queue_data(q, ngx_zk_lock_fair_flow_t, queue);

        ngx_zk_lock_fair_tally(f);
        claim[f->cls] += ngx_zk_lock_fair_part(fair, f, window);
        busy[f->cls] += f->busy;
        f->busy = 0;
    }

    fair->claim = 0;

    for (i = 0; i < n; i++) {
        c = &fair->cls[i];

        c->claim = ngx_zk_lock_fair_smooth(c->claim, claim[i]);
        demand = busy[i] * 1000 / window;
        alive = 1000 * (uint64_t) c->alive;

        if (ngx_zk_lock_class_back(c->demand, alive)) {
            demand = ngx_max(demand, alive);
        }

        c->demand = ngx_zk_lock_fair_smooth(c->demand, demand);
        c->gone = 0;
        c->gone_busy = 0;

        fair->claim += c->claim;
    }

    fair->claim = ngx_min(fair->claim, NGX_ZK_LOCK_SHARE_WEIGHT_MAX);
    fair->start = ngx_current_msec;
}


/* at once when it grows, halved towards it when it falls */

static ngx_uint_t
ngx_zk_lock_fair_smooth(ngx_uint_t old, uint64_t now)
{
    if (now < old) {
        now = (now + old) / 2;
    }

    return (ngx_uint_t) ngx_min(now, NGX_ZK_LOCK_SHARE_WEIGHT_MAX);
}


/*
 * A flow's part of the claim: its weight, or what it wanted if less, the
 * lease time of its tickets alive (waiting or served) over a flow's at the
 * fleet's level (its class's, with priority=); its weight while that
 * level is not known
 */

static uint64_t
ngx_zk_lock_fair_part(ngx_zk_lock_fair_t *fair, ngx_zk_lock_fair_flow_t *f,
    ngx_msec_t window)
{
    uint64_t  whole, part, level;

    whole = (uint64_t) f->weight * NGX_ZK_LOCK_SHARE_FLOW;
    level = fair->classes ? fair->cls[f->cls].level : fair->level;

    if (level == 0) {
        return whole;
    }

    /* level: thousandths of leases; busy: ms; the flow's, in thousandths */

    part = f->busy * 1000 * NGX_ZK_LOCK_SHARE_FLOW / (level * window);

    if (f->max) {
        /* never more than its cap */
        whole = ngx_min(whole, (uint64_t) f->max * 1000
                               * NGX_ZK_LOCK_SHARE_FLOW / level);
    }

    return ngx_min(part, whole);
}


static void
ngx_zk_lock_fair_tally(ngx_zk_lock_fair_flow_t *f)
{
    f->busy += (uint64_t) f->tickets * (ngx_current_msec - f->since);
    f->since = ngx_current_msec;
}
