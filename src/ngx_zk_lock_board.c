
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>

#include "ngx_zk_lock_board.h"
#include "ngx_zk_lock_share.h"
#include "ngx_zk_lock_path.h"


/*
 * A board lives while a pool on its path does, and after that until its
 * last completion: its own node is deleted when the last pool goes, and
 * the others' reports are only read.  Each completion finds the board
 * there (the worker's exit frees them all once no completion is to come,
 * see recipe_free()).  A node that may be there when the last pool goes
 * (the connection down, a create or a delete unanswered) keeps the board
 * until the session is connected again, which deletes it, as a lock's
 * (Curator's guaranteed delete), or until the session is found gone with
 * it: a session that survives a partition would keep it for as long as
 * the worker lives, a report of a claim that nobody makes.
 */


#define NGX_ZK_LOCK_BOARD_SUFFIX   ".fair"
#define NGX_ZK_LOCK_BOARD_SUFLEN   (sizeof(NGX_ZK_LOCK_BOARD_SUFFIX) - 1)

/* a write a quantum at most (keep.c's), ms */
#define NGX_ZK_LOCK_BOARD_QUANTUM  600


/* a report's data, at most: the claim, and each class's claim and demand */
#define NGX_ZK_LOCK_BOARD_DATA                                           \
    (NGX_INT_T_LEN + NGX_ZK_LOCK_CLASS_MAX                               \
                     * (NGX_ZK_LOCK_CLASS_NAME + 2 * NGX_INT_T_LEN + 3))


/*
 * priority=: the classes that came back (a bit each), and until when
 * their growth is news too: a class comes back in a burst, and was told
 * at the arrival that crossed class_back() (the 6th of 16 after a pause),
 * its part cut there until the next write a quantum on (1.7 s to its 7)
 */

typedef struct {
    ngx_uint_t                    mask;
    ngx_msec_t                    until;
} ngx_zk_lock_board_came_t;


typedef struct {
    u_char                        name[NGX_ZK_LOCK_OURS_LEN];
    ngx_uint_t                    claim;      /* 0: not read, or invalid */
    ngx_zk_lock_board_class_t     cls;        /* priority=: by our index */
    ngx_zk_lock_board_came_t      came;
    unsigned                      plain:1;    /* no class in it */
} ngx_zk_lock_report_t;


struct ngx_zk_lock_board_s {
    ngx_queue_t                   queue;      /* in session->boards */
    ngx_zk_lock_session_t        *session;
    ngx_uint_t                    refs;       /* pools on the path */
    ngx_uint_t                    pending;    /* completions to come */

    ngx_zk_lock_report_t         *reports;    /* the others', by name */
    ngx_uint_t                    nreports;

    ngx_uint_t                    claim;      /* ours, to write */
    ngx_uint_t                    written;    /* ... as last written */
    ngx_zk_lock_classes_t        *classes;    /* priority=: NULL none */
    ngx_zk_lock_board_class_t     cls;        /* ours, to write */
    ngx_zk_lock_board_class_t     wcls;       /* ... as last written */
    ngx_zk_lock_board_came_t      came;       /* ours */
    uint64_t                      factor[NGX_ZK_LOCK_CLASS_MAX];
    ngx_uint_t                    generation; /* the session of our node */
    ngx_msec_t                    next;       /* no write before */

    unsigned                      listing:1;
    unsigned                      relist:1;
    unsigned                      writing:1;
    unsigned                      again:1;    /* news while writing */
    unsigned                      created:1;  /* our node */
    unsigned                      unsure:1;   /* ... may be: unanswered */
    unsigned                      orphan:1;   /* to delete once connected */
    unsigned                      dir:1;      /* made P.fair for our node */

    u_char                       *node;       /* "P.fair/<ours>" */
    size_t                        len;        /* of "P.fair" */
    u_char                        path[1];    /* "P.fair" */
};


typedef struct {
    ngx_zk_lock_board_t          *board;
    u_char                        name[NGX_ZK_LOCK_OURS_LEN];
} ngx_zk_lock_board_read_t;


static ngx_zk_lock_board_t *ngx_zk_lock_board_find(
    ngx_zk_lock_session_t *s, u_char *path, size_t len);
static ngx_uint_t ngx_zk_lock_board_done(ngx_zk_lock_board_t *b);
static void ngx_zk_lock_board_list(ngx_zk_lock_board_t *b);
static void ngx_zk_lock_board_listed(int rc,
    const struct String_vector *strings, const void *data);
static void ngx_zk_lock_board_exists(int rc, const struct Stat *stat,
    const void *data);
static void ngx_zk_lock_board_update(ngx_zk_lock_board_t *b,
    const struct String_vector *strings);
static void ngx_zk_lock_board_read(ngx_zk_lock_board_t *b, u_char *name);
static void ngx_zk_lock_board_got(int rc, const char *value, int value_len,
    const struct Stat *stat, const void *data);
static uint64_t ngx_zk_lock_board_weight(ngx_zk_lock_board_t *b,
    ngx_zk_lock_report_t *r);
static uint64_t ngx_zk_lock_board_sum(ngx_zk_lock_board_t *b,
    ngx_zk_lock_board_class_t *cls);
static void ngx_zk_lock_board_parse(ngx_zk_lock_board_t *b,
    ngx_zk_lock_report_t *report, u_char *p, u_char *last);
static ngx_uint_t ngx_zk_lock_board_moved(ngx_zk_lock_board_t *b);
static ngx_uint_t ngx_zk_lock_board_came(ngx_zk_lock_board_t *b,
    ngx_zk_lock_board_class_t *was, ngx_zk_lock_board_class_t *now,
    ngx_zk_lock_board_came_t *came);
static ngx_uint_t ngx_zk_lock_board_grows(ngx_zk_lock_board_came_t *came,
    ngx_uint_t k, ngx_uint_t was, uint64_t now);
static ngx_zk_lock_report_t *ngx_zk_lock_board_report(
    ngx_zk_lock_report_t *reports, ngx_uint_t n, u_char *name);
static void ngx_zk_lock_board_write(ngx_zk_lock_board_t *b);
static void ngx_zk_lock_board_created(int rc, const char *value,
    const void *data);
static void ngx_zk_lock_board_made(int rc, const char *value,
    const void *data);
static void ngx_zk_lock_board_set(int rc, const struct Stat *stat,
    const void *data);
static void ngx_zk_lock_board_again(ngx_zk_lock_board_t *b);
static void ngx_zk_lock_board_unpost(ngx_zk_lock_board_t *b);
static void ngx_zk_lock_board_deleted(int rc, const void *data);
static ngx_uint_t ngx_zk_lock_board_sent(ngx_zk_lock_board_t *b, int rc,
    const char *call, u_char *path);
static void ngx_zk_lock_board_free(ngx_zk_lock_board_t *b);
static int ngx_libc_cdecl ngx_zk_lock_board_cmp(const void *one,
    const void *two);


/*
 * a pool on "path" serves fair flows: the board of the path, made once;
 * with priority=, of the first pool's classes
 */

ngx_zk_lock_board_t *
ngx_zk_lock_board(ngx_zk_lock_session_t *s, ngx_str_t *path,
    ngx_zk_lock_classes_t *classes)
{
    size_t                len;
    ngx_zk_lock_board_t  *b;

    len = path->len + NGX_ZK_LOCK_BOARD_SUFLEN;

    b = ngx_zk_lock_board_find(s, path->data, path->len);
    if (b) {
        if (b->refs++ == 0) {
            /* left until a completion came: its watches may have fired */
            b->orphan = 0;
            ngx_zk_lock_board_list(b);
        }

        return b;
    }

    b = ngx_calloc(sizeof(ngx_zk_lock_board_t) + 2 * len + 1
                   + NGX_ZK_LOCK_OURS_LEN + 1, &s->log);
    if (b == NULL) {
        return NULL;
    }

    b->session = s;
    b->refs = 1;
    b->classes = classes;
    b->len = len;
    ngx_sprintf(b->path, "%V" NGX_ZK_LOCK_BOARD_SUFFIX "%Z", path);

    b->node = b->path + len + 1;
    ngx_sprintf(b->node, "%s/%*s%Z", b->path, (size_t) NGX_ZK_LOCK_OURS_LEN,
                s->ours);

    ngx_queue_insert_tail(&s->boards, &b->queue);

    ngx_zk_lock_board_list(b);

    return b;
}


/*
 * priority=: the classes of a board made for a pool without them; the
 * reports read so far count in the default class until they change
 */

void
ngx_zk_lock_board_classify(ngx_zk_lock_board_t *b,
    ngx_zk_lock_classes_t *classes)
{
    if (b->classes == NULL) {
        b->classes = classes;
    }
}


/* the last pool on the path goes: so does our node */

void
ngx_zk_lock_board_leave(ngx_zk_lock_board_t *b)
{
    if (--b->refs) {
        return;
    }

    b->written = 0;

    ngx_zk_lock_board_unpost(b);
    (void) ngx_zk_lock_board_done(b);
}


/*
 * No pool on the path: our node goes, if it may be there in this session;
 * once connected again if the connection is down, or the call failed
 */

static void
ngx_zk_lock_board_unpost(ngx_zk_lock_board_t *b)
{
    int                     rc;
    ngx_zk_lock_session_t  *s;

    s = b->session;
    b->orphan = 0;

    if (!(b->created || b->unsure) || b->generation != s->generation) {
        b->created = 0;
        b->unsure = 0;
        return;
    }

    if (!s->connected) {
        b->orphan = 1;
        return;
    }

    ngx_zk_lock_session_batch(s);

    rc = zoo_adelete(s->zh, (char *) b->node, -1,
                     ngx_zk_lock_board_deleted, b);

    if (!ngx_zk_lock_board_sent(b, rc, "zoo_adelete", b->node)) {
        b->orphan = 1;
        return;
    }

    b->created = 0;
    b->unsure = 0;
}


/* a completion came, or a pool left: 1 if the board was freed */

static ngx_uint_t
ngx_zk_lock_board_done(ngx_zk_lock_board_t *b)
{
    if (b->refs || b->pending || b->orphan) {
        return 0;
    }

    ngx_queue_remove(&b->queue);
    ngx_zk_lock_board_free(b);

    return 1;
}


static void
ngx_zk_lock_board_list(ngx_zk_lock_board_t *b)
{
    int                     rc;
    ngx_zk_lock_session_t  *s;

    s = b->session;

    if (b->listing) {
        b->relist = 1;
        return;
    }

    if (!s->connected || b->refs == 0) {
        return;
    }

    ngx_zk_lock_session_batch(s);

    rc = zoo_awget_children(s->zh, (char *) b->path,
                            ngx_zk_lock_session_watcher, s,
                            ngx_zk_lock_board_listed, b);

    if (ngx_zk_lock_board_sent(b, rc, "zoo_awget_children", b->path)) {
        b->listing = 1;
    }
}


static void
ngx_zk_lock_board_listed(int rc, const struct String_vector *strings,
    const void *data)
{
    ngx_zk_lock_board_t  *b = (ngx_zk_lock_board_t *) data;

    int                     erc;
    ngx_zk_lock_session_t  *s;

    s = b->session;
    b->pending--;
    b->listing = 0;

    if (s->exiting || ngx_zk_lock_board_done(b) || b->refs == 0) {
        return;
    }

    if (rc == ZOK) {
        ngx_zk_lock_board_update(b, strings);

    } else if (rc == ZNONODE) {
        /* nobody reported yet: to hear of the first */

        b->nreports = 0;

        ngx_zk_lock_session_batch(s);

        erc = zoo_awexists(s->zh, (char *) b->path,
                           ngx_zk_lock_session_watcher, s,
                           ngx_zk_lock_board_exists, b);
        (void) ngx_zk_lock_board_sent(b, erc, "zoo_awexists", b->path);

    } else {
        /* listed again once connected */
        return;
    }

    if (b->relist) {
        b->relist = 0;
        ngx_zk_lock_board_list(b);
    }
}


static void
ngx_zk_lock_board_exists(int rc, const struct Stat *stat, const void *data)
{
    ngx_zk_lock_board_t  *b = (ngx_zk_lock_board_t *) data;

    b->pending--;

    if (b->session->exiting || ngx_zk_lock_board_done(b)) {
        return;
    }

    if (rc == ZOK) {
        /* made between the listing and the watch */
        ngx_zk_lock_board_list(b);
    }
}


/* the others' reports: those known are kept, the new ones read */

static void
ngx_zk_lock_board_update(ngx_zk_lock_board_t *b,
    const struct String_vector *strings)
{
    int                     i;
    size_t                  len;
    u_char                 *name;
    ngx_uint_t              n;
    ngx_zk_lock_report_t   *reports, *r, *old;
    ngx_zk_lock_session_t  *s;

    s = b->session;

    reports = NULL;
    n = 0;

    if (strings->count) {
        reports = ngx_alloc(strings->count * sizeof(ngx_zk_lock_report_t),
                            &s->log);
        if (reports == NULL) {
            return;
        }
    }

    for (i = 0; i < strings->count; i++) {
        name = (u_char *) strings->data[i];
        len = ngx_strlen(name);

        if (len != NGX_ZK_LOCK_OURS_LEN
            || ngx_strncmp(name, "_c_", 3) != 0
            || ngx_memcmp(name, s->ours, NGX_ZK_LOCK_OURS_LEN) == 0)
        {
            continue;
        }

        r = &reports[n++];

        old = ngx_zk_lock_board_report(b->reports, b->nreports, name);

        if (old) {
            *r = *old;

        } else {
            /* not read yet: no claim, and no class that came before */
            ngx_memzero(r, sizeof(ngx_zk_lock_report_t));
            ngx_memcpy(r->name, name, NGX_ZK_LOCK_OURS_LEN);
        }
    }

    if (b->reports) {
        ngx_free(b->reports);
    }

    ngx_qsort(reports, n, sizeof(ngx_zk_lock_report_t),
              ngx_zk_lock_board_cmp);

    b->reports = reports;
    b->nreports = n;

    for (n = 0; n < b->nreports; n++) {
        if (b->reports[n].claim == 0) {
            ngx_zk_lock_board_read(b, b->reports[n].name);
        }
    }
}


static void
ngx_zk_lock_board_read(ngx_zk_lock_board_t *b, u_char *name)
{
    int                        rc;
    u_char                     path[NGX_MAX_PATH];
    ngx_zk_lock_session_t     *s;
    ngx_zk_lock_board_read_t  *r;

    s = b->session;

    if (b->len + 1 + NGX_ZK_LOCK_OURS_LEN + 1 > NGX_MAX_PATH) {
        return;
    }

    r = ngx_alloc(sizeof(ngx_zk_lock_board_read_t), &s->log);
    if (r == NULL) {
        return;
    }

    r->board = b;
    ngx_memcpy(r->name, name, NGX_ZK_LOCK_OURS_LEN);

    ngx_sprintf(path, "%s/%*s%Z", b->path, (size_t) NGX_ZK_LOCK_OURS_LEN,
                name);

    ngx_zk_lock_session_batch(s);

    rc = zoo_awget(s->zh, (char *) path, ngx_zk_lock_session_watcher, s,
                   ngx_zk_lock_board_got, r);

    if (!ngx_zk_lock_board_sent(b, rc, "zoo_awget", path)) {
        ngx_free(r);
    }
}


static void
ngx_zk_lock_board_got(int rc, const char *value, int value_len,
    const struct Stat *stat, const void *data)
{
    ngx_zk_lock_board_read_t  *r = (ngx_zk_lock_board_read_t *) data;

    ngx_zk_lock_t              *lock;
    ngx_zk_lock_board_t        *b;
    ngx_zk_lock_report_t       *report;
    ngx_zk_lock_board_class_t   was;

    b = r->board;
    b->pending--;

    report = NULL;

    if (!b->session->exiting && !ngx_zk_lock_board_done(b)) {
        report = ngx_zk_lock_board_report(b->reports, b->nreports, r->name);
    }

    ngx_free(r);

    if (report == NULL || rc != ZOK || value == NULL || value_len <= 0) {
        return;
    }

    was = report->cls;

    ngx_zk_lock_board_parse(b, report, (u_char *) value,
                            (u_char *) value + value_len);

    /*
     * priority=: a class that comes back to another instance moves the
     * parts at once, not at our next listing, lest what it lent come
     * back a quantum later
     */

    if (b->classes
        && ngx_zk_lock_board_came(b, &was, &report->cls, &report->came))
    {
        lock = ngx_zk_lock_path_find(b->session, b->path,
                                     b->len - NGX_ZK_LOCK_BOARD_SUFLEN);
        if (lock) {
            /* after a listing on its way, which weighed the old report */
            ngx_zk_lock_path_ask(lock);
        }
    }
}


/*
 * priority=: whether a class comes back, from what was told of it (told a
 * window late, its reserved seats came back 1.1 to 2.1 s after it did),
 * or grows in the quantum after it came back
 */

static ngx_uint_t
ngx_zk_lock_board_came(ngx_zk_lock_board_t *b, ngx_zk_lock_board_class_t *was,
    ngx_zk_lock_board_class_t *now, ngx_zk_lock_board_came_t *came)
{
    ngx_uint_t  k, news;

    news = 0;

    for (k = 0; k < b->classes->n; k++) {
        if (ngx_zk_lock_class_back(was->demand[k], now->demand[k])) {
            came->mask |= (ngx_uint_t) 1 << k;
            came->until = ngx_current_msec + NGX_ZK_LOCK_BOARD_QUANTUM;
            news = 1;

        } else if (ngx_zk_lock_board_grows(came, k, was->demand[k],
                                           now->demand[k]))
        {
            news = 1;
        }
    }

    return news;
}


static ngx_uint_t
ngx_zk_lock_board_grows(ngx_zk_lock_board_came_t *came, ngx_uint_t k,
    ngx_uint_t was, uint64_t now)
{
    if ((ngx_msec_int_t) (came->until - ngx_current_msec) <= 0) {
        came->mask = 0;
        return 0;
    }

    return ((came->mask >> k) & 1) && now > was;
}


/*
 * priority=: whether our class k, whose requests alive now want "demand"
 * (thousandths of leases), comes back past what the others were told, or
 * grows past it in the quantum after:
 * keep.c tells them at once then, rather than at its next listing (a
 * quantum away while kept leases move no node)
 */

ngx_uint_t
ngx_zk_lock_board_behind(ngx_zk_lock_board_t *b, ngx_uint_t k,
    uint64_t demand)
{
    return b->classes && k < b->classes->n && b->written
           && (ngx_zk_lock_class_back(b->wcls.demand[k], demand)
               || ngx_zk_lock_board_grows(&b->came, k, b->wcls.demand[k],
                                          demand));
}


/*
 * Another's report, "<claim>[ <class>=<claim>/<demand> ...]": what it is
 * not, one flow (share.c); a class we do not know, the default's; a
 * report with no class, the default's claim, which wants every lease
 */

static void
ngx_zk_lock_board_parse(ngx_zk_lock_board_t *b, ngx_zk_lock_report_t *report,
    u_char *p, u_char *last)
{
    u_char                 *end, *eq, *slash;
    ngx_int_t               claim, demand;
    ngx_uint_t              k;
    ngx_zk_lock_classes_t  *cl;

    ngx_memzero(&report->cls, sizeof(ngx_zk_lock_board_class_t));
    report->plain = 1;

    end = ngx_strlchr(p, last, ' ');
    end = end ? end : last;

    claim = ngx_atoi(p, end - p);

    report->claim = (claim > 0 && claim <= NGX_ZK_LOCK_SHARE_WEIGHT_MAX)
                    ? (ngx_uint_t) claim : 0;

    cl = b->classes;

    while (cl && cl->n && end < last) {
        p = end + 1;
        end = ngx_strlchr(p, last, ' ');
        end = end ? end : last;

        eq = ngx_strlchr(p, end, '=');
        slash = eq ? ngx_strlchr(eq, end, '/') : NULL;

        if (slash == NULL) {
            break;
        }

        claim = ngx_atoi(eq + 1, slash - eq - 1);
        demand = ngx_atoi(slash + 1, end - slash - 1);

        if (claim < 0 || claim > NGX_ZK_LOCK_SHARE_WEIGHT_MAX
            || demand < 0 || demand > NGX_ZK_LOCK_SHARE_WEIGHT_MAX)
        {
            break;
        }

        k = ngx_zk_lock_class_find(cl, p, eq - p);
        k = (k < cl->n) ? k : cl->dflt;

        report->cls.claim[k] += claim;
        report->cls.demand[k] += demand;
        report->plain = 0;
    }
}


/* our claim as the others read it: 0 for none yet */

ngx_uint_t
ngx_zk_lock_board_mine(ngx_zk_lock_board_t *b)
{
    return (b->created && b->generation == b->session->generation)
           ? b->written : 0;
}


/* share.c's weigh(): a worker's claim, 0 for none */

ngx_uint_t
ngx_zk_lock_board_claim(void *data, u_char *worker)
{
    ngx_zk_lock_board_t  *b = data;

    uint64_t               w;
    ngx_zk_lock_report_t  *r;

    r = ngx_zk_lock_board_report(b->reports, b->nreports, worker);

    if (r == NULL || r->claim == 0 || b->classes == NULL) {
        return r ? r->claim : 0;
    }

    w = ngx_zk_lock_board_weight(b, r);

    return (ngx_uint_t) ngx_max(ngx_min(w, NGX_ZK_LOCK_SHARE_WEIGHT_MAX), 1);
}


/* priority=: what a report's classes' claims give it, thousandths of leases */

static uint64_t
ngx_zk_lock_board_weight(ngx_zk_lock_board_t *b, ngx_zk_lock_report_t *r)
{
    if (r->plain) {
        return r->claim * b->factor[b->classes->dflt] / 1000;
    }

    return ngx_zk_lock_board_sum(b, &r->cls);
}


/* priority=: what classes' claims give, each its class's factor */

static uint64_t
ngx_zk_lock_board_sum(ngx_zk_lock_board_t *b, ngx_zk_lock_board_class_t *cls)
{
    uint64_t    w;
    ngx_uint_t  k;

    w = 0;

    for (k = 0; k < b->classes->n; k++) {
        w += cls->claim[k] * b->factor[k] / 1000;
    }

    return w;
}


/*
 * priority=: what our classes' claims give us, thousandths of leases, as
 * the others read them (weight() of our report): the weight of ours in
 * share.c and our seats are computed from it, as theirs are
 */

uint64_t
ngx_zk_lock_board_worth(ngx_zk_lock_board_t *b)
{
    return ngx_zk_lock_board_mine(b) ? ngx_zk_lock_board_sum(b, &b->wcls) : 0;
}


/*
 * priority=: the leases this worker may hold: the leases that the
 * classes' parts add up to, apportioned between the workers by their
 * weights as every worker computes them from the reports, ours as
 * written (the largest remainders, ties by name), so that the caps add
 * up to no more than the parts, and no reserved seat is taken by
 * rounding; and "extra" (thousandths), for the classes that nobody claims
 * yet; one at least
 */

ngx_uint_t
ngx_zk_lock_board_seats(ngx_zk_lock_board_t *b, uint64_t extra)
{
    uint64_t               w, mine, total, floors;
    ngx_uint_t             i, above;
    ngx_zk_lock_report_t  *r;

    mine = ngx_zk_lock_board_worth(b);
    total = mine;
    floors = mine / 1000;
    above = 0;

    for (i = 0; i < b->nreports; i++) {
        r = &b->reports[i];

        if (r->claim == 0) {
            continue;
        }

        w = ngx_zk_lock_board_weight(b, r);

        total += w;
        floors += w / 1000;

        if (w % 1000 > mine % 1000
            || (w % 1000 == mine % 1000
                && ngx_memcmp(r->name, b->session->ours,
                              NGX_ZK_LOCK_OURS_LEN) < 0))
        {
            above++;
        }
    }

    /* the seats left by the floors go to the largest remainders */

    return (ngx_uint_t) ngx_max(mine / 1000
                                + (above < total / 1000 - floors)
                                + (extra + 999) / 1000, 1);
}


/*
 * priority=: the classes' parts of "cap" (thousandths of leases) across
 * the fleet, from every worker's report and ours as the others read it,
 * so that all compute alike: "fl" gets each class's demand, part and
 * claims, and our claims; weigh() what each worker's claims give it
 */

void
ngx_zk_lock_board_classes(ngx_zk_lock_board_t *b, uint64_t cap,
    ngx_zk_lock_board_fleet_t *fl)
{
    ngx_uint_t             i, k;
    ngx_zk_lock_report_t  *r;

    ngx_memzero(fl, sizeof(ngx_zk_lock_board_fleet_t));

    if (ngx_zk_lock_board_mine(b)) {
        for (k = 0; k < b->classes->n; k++) {
            fl->mine[k] = b->wcls.claim[k];
            fl->claims[k] += b->wcls.claim[k];
            fl->a.demand[k] += b->wcls.demand[k];
        }
    }

    for (i = 0; i < b->nreports; i++) {
        r = &b->reports[i];

        if (r->claim == 0) {
            continue;
        }

        if (r->plain) {
            fl->claims[b->classes->dflt] += r->claim;
            fl->a.demand[b->classes->dflt] += cap;
            continue;
        }

        for (k = 0; k < b->classes->n; k++) {
            fl->claims[k] += r->cls.claim[k];
            fl->a.demand[k] += r->cls.demand[k];
        }
    }

    ngx_zk_lock_class_alloc(b->classes, cap, &fl->a);

    for (k = 0; k < b->classes->n; k++) {
        b->factor[k] = fl->claims[k]
                       ? fl->a.alloc[k] * 1000 / fl->claims[k] : 0;
    }
}


static ngx_zk_lock_report_t *
ngx_zk_lock_board_report(ngx_zk_lock_report_t *reports, ngx_uint_t n,
    u_char *name)
{
    ngx_int_t   rc;
    ngx_uint_t  lo, hi, mid;

    lo = 0;
    hi = n;

    while (lo < hi) {
        mid = lo + (hi - lo) / 2;
        rc = ngx_memcmp(reports[mid].name, name, NGX_ZK_LOCK_OURS_LEN);

        if (rc == 0) {
            return &reports[mid];
        }

        if (rc < 0) {
            lo = mid + 1;

        } else {
            hi = mid;
        }
    }

    return NULL;
}


/*
 * Our claim, as fair.c counts it now, and with priority= each class's
 * claim and demand: written when one moved by more than an eighth, a
 * quantum after the last write at the soonest, but for a class that
 * comes back
 */

void
ngx_zk_lock_board_post(ngx_zk_lock_board_t *b, ngx_uint_t claim,
    ngx_zk_lock_board_class_t *cls)
{
    ngx_uint_t              came;
    ngx_zk_lock_session_t  *s;

    s = b->session;
    b->claim = claim;
    came = 0;

    if (cls && b->classes) {
        b->cls = *cls;

        /* a class that comes back is told at once (see board_got()) */
        came = ngx_zk_lock_board_came(b, &b->wcls, &b->cls, &b->came);
    }

    if (came && b->writing) {
        /* told when the write on its way is done, see board_set() */
        b->again = 1;
    }

    if (claim == 0 || b->writing || !s->connected
        || (!came && (ngx_msec_int_t) (b->next - ngx_current_msec) > 0))
    {
        return;
    }

    if (b->generation != s->generation) {
        b->created = 0;
        b->unsure = 0;
        b->written = 0;
    }

    if (b->written && !ngx_zk_lock_board_moved(b)) {
        return;
    }

    ngx_zk_lock_board_write(b);
}


static ngx_uint_t
ngx_zk_lock_board_moved(ngx_zk_lock_board_t *b)
{
    ngx_uint_t  k, i, *now, *was;

    now = &b->claim;
    was = &b->written;

    for (i = 0; i <= (b->classes ? 2 * b->classes->n : 0); i++) {
        if (i) {
            k = (i - 1) / 2;
            now = (i & 1) ? &b->cls.claim[k] : &b->cls.demand[k];
            was = (i & 1) ? &b->wcls.claim[k] : &b->wcls.demand[k];
        }

        if ((*now == 0) != (*was == 0)
            || ((*now > *was) ? *now - *was : *was - *now) * 8 > *was)
        {
            return 1;
        }
    }

    return 0;
}


static void
ngx_zk_lock_board_write(ngx_zk_lock_board_t *b)
{
    int                     rc, len;
    u_char                 *p, data[NGX_ZK_LOCK_BOARD_DATA];
    ngx_uint_t              k;
    ngx_zk_lock_session_t  *s;

    s = b->session;

    p = ngx_sprintf(data, "%ui", b->claim);

    for (k = 0; b->classes && k < b->classes->n; k++) {
        if (b->cls.claim[k] || b->cls.demand[k]) {
            p = ngx_slprintf(p, data + sizeof(data), " %V=%ui/%ui",
                             &b->classes->class[k].name, b->cls.claim[k],
                             b->cls.demand[k]);
        }
    }

    len = p - data;

    ngx_zk_lock_session_batch(s);

    if (b->created) {
        rc = zoo_aset(s->zh, (char *) b->node, (char *) data, len, -1,
                      ngx_zk_lock_board_set, b);

    } else {
        rc = zoo_acreate(s->zh, (char *) b->node, (char *) data, len,
                         s->acl, ZOO_EPHEMERAL,
                         ngx_zk_lock_board_created, b);
    }

    if (!ngx_zk_lock_board_sent(b, rc, b->created ? "zoo_aset"
                                               : "zoo_acreate", b->node))
    {
        return;
    }

    b->writing = 1;
    b->again = 0;
    b->written = b->claim;
    b->wcls = b->cls;
    b->next = ngx_current_msec + NGX_ZK_LOCK_BOARD_QUANTUM;
}


static void
ngx_zk_lock_board_created(int rc, const char *value, const void *data)
{
    ngx_zk_lock_board_t  *b = (ngx_zk_lock_board_t *) data;

    int                     erc;
    ngx_zk_lock_session_t  *s;

    s = b->session;
    b->pending--;
    b->writing = 0;

    if (s->exiting) {
        return;
    }

    if (rc == ZOK || rc == ZNODEEXISTS) {
        b->created = 1;
        b->unsure = 0;
        b->generation = s->generation;

        /* the container may go once empty: made again then */
        b->dir = 0;

        if (b->refs == 0) {
            /* the last pool left meanwhile: leave() deletes it now */
            b->refs = 1;
            ngx_zk_lock_board_leave(b);

        } else if (rc == ZNODEEXISTS) {
            /* ours, from before a lost connection: its data is old */
            ngx_zk_lock_board_write(b);

        } else {
            ngx_zk_lock_board_again(b);
        }

        return;
    }

    b->written = 0;

    if (rc == ZCONNECTIONLOSS || rc == ZOPERATIONTIMEOUT) {
        /* it may have been made: written again, or deleted */
        b->unsure = 1;
        b->generation = s->generation;

        if (b->refs == 0) {
            ngx_zk_lock_board_unpost(b);
        }
    }

    if (ngx_zk_lock_board_done(b)
        || rc != ZNONODE || b->dir || b->refs == 0)
    {
        return;
    }

    /* the first report on the path: its container, as a lock's parents */

    b->dir = 1;

    ngx_zk_lock_session_batch(s);

    erc = zoo_acreate(s->zh, (char *) b->path, NGX_ZK_LOCK_MARK,
                      sizeof(NGX_ZK_LOCK_MARK) - 1, s->acl, ZOO_CONTAINER,
                      ngx_zk_lock_board_made, b);
    if (ngx_zk_lock_board_sent(b, erc, "zoo_acreate", b->path)) {
        b->writing = 1;
    }
}


static void
ngx_zk_lock_board_made(int rc, const char *value, const void *data)
{
    ngx_zk_lock_board_t  *b = (ngx_zk_lock_board_t *) data;

    b->pending--;
    b->writing = 0;

    if (b->session->exiting || ngx_zk_lock_board_done(b) || b->refs == 0) {
        return;
    }

    if (rc == ZOK || rc == ZNODEEXISTS) {
        ngx_zk_lock_board_write(b);
    }
}


static void
ngx_zk_lock_board_set(int rc, const struct Stat *stat, const void *data)
{
    ngx_zk_lock_board_t  *b = (ngx_zk_lock_board_t *) data;

    b->pending--;
    b->writing = 0;

    if (b->session->exiting || ngx_zk_lock_board_done(b)) {
        return;
    }

    if (rc == ZCONNECTIONLOSS || rc == ZOPERATIONTIMEOUT) {
        /* still ours: written again at the next post */
        b->written = 0;

    } else if (rc != ZOK) {
        /* made again at the next post: someone deleted it, say */
        b->created = 0;
        b->written = 0;

    } else {
        ngx_zk_lock_board_again(b);
    }
}


/* priority=: a class that came back while we wrote is told now */

static void
ngx_zk_lock_board_again(ngx_zk_lock_board_t *b)
{
    if (b->again && b->refs && b->claim && b->session->connected
        && ngx_zk_lock_board_moved(b))
    {
        ngx_zk_lock_board_write(b);
    }
}


static void
ngx_zk_lock_board_deleted(int rc, const void *data)
{
    ngx_zk_lock_board_t  *b = (ngx_zk_lock_board_t *) data;

    b->pending--;

    if (b->session->exiting) {
        return;
    }

    if (rc == ZCONNECTIONLOSS || rc == ZOPERATIONTIMEOUT) {
        /* it may be there still */
        b->unsure = 1;

        if (b->refs == 0) {
            ngx_zk_lock_board_unpost(b);
        }
    }

    (void) ngx_zk_lock_board_done(b);
}


/* a watch fired: on a board's path, or on a report under it */

void
ngx_zk_lock_board_watch(ngx_zk_lock_session_t *s, int type,
    const char *path)
{
    size_t                len, dir;
    u_char               *p, *name;
    ngx_zk_lock_board_t  *b;

    if (ngx_queue_empty(&s->boards)) {
        return;
    }

    p = (u_char *) path;
    len = ngx_strlen(path);

    if (type == ZOO_CHILD_EVENT || type == ZOO_CREATED_EVENT) {
        /* on "P.fair": a report came or went, or the first one */

        if (len > NGX_ZK_LOCK_BOARD_SUFLEN) {
            b = ngx_zk_lock_board_find(s, p, len - NGX_ZK_LOCK_BOARD_SUFLEN);

            if (b && ngx_strcmp(b->path, p) == 0) {
                ngx_zk_lock_board_list(b);
            }
        }

        return;
    }

    /* on "P.fair/<worker>": a claim changed (a deleted one, listed) */

    name = (u_char *) strrchr(path, '/');

    if (type != ZOO_CHANGED_EVENT || name == NULL) {
        return;
    }

    dir = name - p;
    name++;

    if (p + len - name != NGX_ZK_LOCK_OURS_LEN
        || dir <= NGX_ZK_LOCK_BOARD_SUFLEN)
    {
        return;
    }

    b = ngx_zk_lock_board_find(s, p, dir - NGX_ZK_LOCK_BOARD_SUFLEN);

    if (b && b->refs && ngx_strncmp(b->path, p, dir) == 0
        && ngx_zk_lock_board_report(b->reports, b->nreports, name))
    {
        ngx_zk_lock_board_read(b, name);
    }
}


/* by the lock's path */

static ngx_zk_lock_board_t *
ngx_zk_lock_board_find(ngx_zk_lock_session_t *s, u_char *path, size_t len)
{
    ngx_queue_t          *q;
    ngx_zk_lock_board_t  *b;

    for (q = ngx_queue_head(&s->boards);
         q != ngx_queue_sentinel(&s->boards);
         q = ngx_queue_next(q))
    {
        b = ngx_queue_data(q, ngx_zk_lock_board_t, queue);

        if (b->len == len + NGX_ZK_LOCK_BOARD_SUFLEN
            && ngx_strncmp(b->path, path, len) == 0
            && ngx_strcmp(b->path + len, NGX_ZK_LOCK_BOARD_SUFFIX) == 0)
        {
            return b;
        }
    }

    return NULL;
}


/*
 * a session is connected: lists again; a new one makes our node again;
 * a node left by the last pool is deleted now
 */

void
ngx_zk_lock_boards_connected(ngx_zk_lock_session_t *s)
{
    ngx_queue_t          *q, *next;
    ngx_zk_lock_board_t  *b;

    for (q = ngx_queue_head(&s->boards);
         q != ngx_queue_sentinel(&s->boards);
         q = next)
    {
        next = ngx_queue_next(q);
        b = ngx_queue_data(q, ngx_zk_lock_board_t, queue);

        if (b->generation != s->generation) {
            b->created = 0;
            b->unsure = 0;
            b->written = 0;

            /* a new session has none of the old one's watches: read all */
            b->nreports = 0;
        }

        if (b->orphan) {
            /* no pool: only its node to delete, if still there */
            ngx_zk_lock_board_unpost(b);
            (void) ngx_zk_lock_board_done(b);
            continue;
        }

        ngx_zk_lock_board_list(b);
    }
}


/* the worker exits: no completion is to come */

void
ngx_zk_lock_boards_free(ngx_zk_lock_session_t *s)
{
    ngx_queue_t  *q;

    while (!ngx_queue_empty(&s->boards)) {
        q = ngx_queue_head(&s->boards);
        ngx_queue_remove(q);
        ngx_zk_lock_board_free(ngx_queue_data(q, ngx_zk_lock_board_t,
                                              queue));
    }
}


/* a call was made: a completion is to come, or it failed, said here */

static ngx_uint_t
ngx_zk_lock_board_sent(ngx_zk_lock_board_t *b, int rc, const char *call,
    u_char *path)
{
    if (rc != ZOK) {
        ngx_log_error(NGX_LOG_ERR, &b->session->log, 0,
                      "%s(\"%s\") failed (%d: %s)",
                      call, path, rc, zerror(rc));
        return 0;
    }

    b->pending++;

    return 1;
}


static void
ngx_zk_lock_board_free(ngx_zk_lock_board_t *b)
{
    if (b->reports) {
        ngx_free(b->reports);
    }

    ngx_free(b);
}


static int ngx_libc_cdecl
ngx_zk_lock_board_cmp(const void *one, const void *two)
{
    const ngx_zk_lock_report_t  *a = one, *b = two;

    return ngx_memcmp(a->name, b->name, NGX_ZK_LOCK_OURS_LEN);
}
