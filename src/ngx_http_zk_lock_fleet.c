
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_zk_lock_version.h"
#include "ngx_zk_lock_session.h"
#include "ngx_http_zk_lock_out.h"
#include "ngx_http_zk_lock_fleet.h"


/*
 * The fleet view's JSON: a snapshot (snap.c) written out, each lock with
 * its nodes in the order of the queue and their ages, and with fair= the
 * claims on its board.  Whatever anybody wrote into a node is text to
 * show, escaped, and what is not valid UTF-8 is shown as escapes too.
 */


/* a line of fixed text */
#define NGX_HTTP_ZK_LOCK_FLEET_LINE     256


typedef struct {
    ngx_http_zk_lock_out_t          out;
    ngx_log_t                      *log;
    unsigned                        failed:1;
} ngx_http_zk_lock_fleet_out_t;


/* the node data the module writes, see eval_info() and keep_queue() */

typedef struct {
    ngx_str_t                       host;
    ngx_int_t                       pid;
    ngx_str_t                       since;
    ngx_str_t                       method;
    ngx_str_t                       uri;
    ngx_str_t                       kept;     /* "<n>ms" */
} ngx_http_zk_lock_fleet_info_t;


static void ngx_http_zk_lock_fleet_write(ngx_http_zk_lock_fleet_out_t *w,
    ngx_http_zk_lock_fleet_t *fleet);
static void ngx_http_zk_lock_fleet_lock(ngx_http_zk_lock_fleet_out_t *w,
    ngx_http_zk_lock_snap_lock_t *lock);
static void ngx_http_zk_lock_fleet_nodes(
    ngx_http_zk_lock_fleet_out_t *w, ngx_http_zk_lock_snap_lock_t *lock);
static void ngx_http_zk_lock_fleet_node(ngx_http_zk_lock_fleet_out_t *w,
    ngx_http_zk_lock_snap_child_t *child);
static void ngx_http_zk_lock_fleet_board(
    ngx_http_zk_lock_fleet_out_t *w, ngx_http_zk_lock_snap_lock_t *lock);
static ngx_int_t ngx_http_zk_lock_fleet_claim(
    ngx_http_zk_lock_snap_child_t *child);
static ngx_int_t ngx_http_zk_lock_fleet_parse(ngx_str_t *data,
    ngx_http_zk_lock_fleet_info_t *info);
static const char *ngx_http_zk_lock_fleet_state(ngx_zk_lock_session_t *s);
static u_char *ngx_http_zk_lock_fleet_room(ngx_http_zk_lock_fleet_out_t *w,
    size_t n);
static void ngx_http_zk_lock_fleet_printf(ngx_http_zk_lock_fleet_out_t *w,
    const char *fmt, ...);
static void ngx_http_zk_lock_fleet_text(ngx_http_zk_lock_fleet_out_t *w,
    u_char *src, size_t len, ngx_uint_t cut);
static ngx_int_t ngx_http_zk_lock_fleet_utf8(u_char *p, size_t n,
    size_t *len);


/*
 * The answer, written into a chain of buffers from the request's pool
 * that grows as it fills: no estimate of its size to hold; NULL if it
 * could not be written
 */

ngx_chain_t *
ngx_http_zk_lock_fleet_json(ngx_pool_t *pool, ngx_log_t *log,
    ngx_http_zk_lock_fleet_t *fleet)
{
    ngx_http_zk_lock_fleet_out_t  w;

    ngx_memzero(&w, sizeof(ngx_http_zk_lock_fleet_out_t));

    ngx_http_zk_lock_out_init(&w.out, pool);
    w.log = log;

    ngx_http_zk_lock_fleet_write(&w, fleet);

    return w.failed ? NULL : w.out.first;
}


static void
ngx_http_zk_lock_fleet_write(ngx_http_zk_lock_fleet_out_t *w,
    ngx_http_zk_lock_fleet_t *fleet)
{
    ngx_uint_t                     i, n;
    ngx_http_zk_lock_snap_t       *snap;
    ngx_http_zk_lock_snap_lock_t  *lock;

    snap = fleet->snap;

    ngx_http_zk_lock_fleet_printf(w, "{\"version\":\"" NGX_ZK_LOCK_VERSION
                                  "\",\"build\":\"" NGX_ZK_LOCK_BUILD
                                  "\",\"hostname\":\"");
    ngx_http_zk_lock_fleet_text(w, ngx_cycle->hostname.data,
                                ngx_cycle->hostname.len, 0);

    ngx_http_zk_lock_fleet_printf(w, "\",\"pid\":%P,\"session\":\"%s\","
                                  "\"stale\":%s,\"max_children\":%d,",
                                  ngx_pid,
                                  ngx_http_zk_lock_fleet_state(fleet->session),
                                  (fleet->stale || snap == NULL)
                                  ? "true" : "false",
                                  NGX_HTTP_ZK_LOCK_SNAP_MAX);

    if (snap == NULL) {
        ngx_http_zk_lock_fleet_printf(w, "\"reads\":0,\"read_at\":null,"
                                      "\"read_at_ms\":null,"
                                      "\"age_ms\":null,\"locks\":[]}\n");
        return;
    }

    ngx_http_zk_lock_fleet_printf(w, "\"reads\":%ui,\"read_at\":%T,"
                                  "\"read_at_ms\":%L,"
                                  "\"age_ms\":%M,\"locks\":[",
                                  fleet->reads, snap->time, snap->msec,
                                  fleet->age);

    lock = snap->locks.elts;
    n = 0;

    for (i = 0; i < snap->locks.nelts; i++) {
        if (lock[i].dry) {
            /* shown with its lock */
            continue;
        }

        if (n++) {
            ngx_http_zk_lock_fleet_printf(w, ",");
        }

        ngx_http_zk_lock_fleet_lock(w, &lock[i]);
    }

    ngx_http_zk_lock_fleet_printf(w, "]}\n");
}


static void
ngx_http_zk_lock_fleet_lock(ngx_http_zk_lock_fleet_out_t *w,
    ngx_http_zk_lock_snap_lock_t *lock)
{
    ngx_http_zk_lock_snap_lock_t  *shadow;

    ngx_http_zk_lock_fleet_printf(w, "{\"path\":\"");
    ngx_http_zk_lock_fleet_text(w, lock->path.data, lock->path.len, 0);
    ngx_http_zk_lock_fleet_printf(w, "\",\"type\":\"%s\",", lock->type);

    if (lock->rw) {
        ngx_http_zk_lock_fleet_printf(w, "\"leases\":null,");

    } else {
        ngx_http_zk_lock_fleet_printf(w, "\"leases\":%ui,", lock->leases);
    }

    ngx_http_zk_lock_fleet_printf(w, "\"source\":\"%s\",",
                                  lock->live ? "live" : "configured");

    ngx_http_zk_lock_fleet_nodes(w, lock);
    ngx_http_zk_lock_fleet_board(w, lock);

    /* the requests in dry run, on the shadow path, under their lock */

    if (lock->shadow == 0) {
        ngx_http_zk_lock_fleet_printf(w, ",\"dry_run\":null}");
        return;
    }

    shadow = (ngx_http_zk_lock_snap_lock_t *) lock->snap->locks.elts
             + lock->shadow - 1;

    ngx_http_zk_lock_fleet_printf(w, ",\"dry_run\":{\"path\":\"");
    ngx_http_zk_lock_fleet_text(w, shadow->path.data, shadow->path.len, 0);
    ngx_http_zk_lock_fleet_printf(w, "\",");
    ngx_http_zk_lock_fleet_nodes(w, shadow);
    ngx_http_zk_lock_fleet_printf(w, "}}");
}


/*
 * The nodes of a path, in the order of the queue, with their ages as of
 * the snapshot: how long each has held, or waited
 */

static void
ngx_http_zk_lock_fleet_nodes(ngx_http_zk_lock_fleet_out_t *w,
    ngx_http_zk_lock_snap_lock_t *lock)
{
    int64_t                         age;
    ngx_uint_t                      i, holders, waiting;
    ngx_http_zk_lock_snap_child_t  *child;

    ngx_http_zk_lock_fleet_printf(w, "\"error\":");

    if (lock->rc != ZOK) {
        ngx_http_zk_lock_fleet_printf(w, "\"%s\",", zerror(lock->rc));

    } else {
        ngx_http_zk_lock_fleet_printf(w, "null,");
    }

    ngx_http_zk_lock_fleet_printf(w, "\"participants\":%ui,\"shown\":%ui,"
                                  "\"truncated\":%s,\"nodes\":[",
                                  lock->total, lock->n,
                                  (lock->n < lock->total) ? "true" : "false");

    holders = 0;
    waiting = 0;

    for (i = 0; i < lock->n; i++) {
        child = &lock->children[i];

        if (child->holds) {
            holders++;

        } else {
            waiting++;
        }

        ngx_http_zk_lock_fleet_printf(w, "%s{\"position\":%ui,"
                                      "\"state\":\"%s\",\"queue\":%ui,",
                                      i ? "," : "", i + 1,
                                      child->holds ? "holding" : "waiting",
                                      child->holds ? 0 : waiting);

        /* clocks apart (ZooKeeper's, this host's): never below 0 */

        age = lock->snap->msec - child->since;

        if (child->since == 0) {
            ngx_http_zk_lock_fleet_printf(w, "\"%s_for_ms\":null,",
                                          child->holds ? "held" : "waiting");

        } else {
            ngx_http_zk_lock_fleet_printf(w, "\"%s_for_ms\":%L,",
                                          child->holds ? "held" : "waiting",
                                          ngx_max(age, 0));
        }

        if (child->holds) {
            ngx_http_zk_lock_fleet_printf(w, "\"held_for_exact\":%s,",
                                          child->exact ? "true" : "false");
        }

        ngx_http_zk_lock_fleet_node(w, child);
    }

    ngx_http_zk_lock_fleet_printf(w, "],\"holders\":%ui,\"waiting\":%ui",
                                  holders, waiting);
}


static void
ngx_http_zk_lock_fleet_node(ngx_http_zk_lock_fleet_out_t *w,
    ngx_http_zk_lock_snap_child_t *child)
{
    ngx_int_t                      claim;
    ngx_uint_t                     cut;
    const char                    *kind;
    ngx_http_zk_lock_fleet_info_t   info;

    kind = child->write ? "write"
           : ngx_strstr(child->name.data, "__READ__") ? "read"
           : ngx_strstr(child->name.data, "-lease-") ? "lease" : "lock";

    /* fair=: the claim of the node's instance; none for Curator's */

    if (child->lock->fair) {
        claim = ngx_http_zk_lock_fleet_claim(child);

        if (claim < 0) {
            ngx_http_zk_lock_fleet_printf(w, "\"claim\":null,");

        } else {
            ngx_http_zk_lock_fleet_printf(w, "\"claim\":%i.%03i,",
                                          claim / 1000, claim % 1000);
        }
    }

    ngx_http_zk_lock_fleet_printf(w, "\"node\":\"");
    ngx_http_zk_lock_fleet_text(w, child->name.data, child->name.len, 0);
    ngx_http_zk_lock_fleet_printf(w, "\",\"seq\":%uD,\"kind\":\"%s\","
                                  "\"gone\":%s,\"created\":%L,",
                                  child->seq, kind,
                                  child->gone ? "true" : "false",
                                  child->ctime);

    if (!child->read) {
        ngx_http_zk_lock_fleet_printf(w, "\"client\":null,\"kept\":false}");
        return;
    }

    /* the module writes less than the view keeps: more is not its data */

    cut = (child->size > child->data.len);

    if (cut || ngx_http_zk_lock_fleet_parse(&child->data, &info) != NGX_OK) {

        /* Curator writes the client's address, or what it was told */

        ngx_http_zk_lock_fleet_printf(w, "\"client\":\"curator\","
                                      "\"kept\":false,\"data\":\"");
        ngx_http_zk_lock_fleet_text(w, child->data.data, child->data.len,
                                    cut);
        ngx_http_zk_lock_fleet_printf(w, "%s\",\"data_bytes\":%uz}",
                                      cut ? "\xe2\x80\xa6" : "", child->size);
        return;
    }

    ngx_http_zk_lock_fleet_printf(w, "\"client\":\"nginx\",\"kept\":%s,"
                                  "\"host\":\"",
                                  info.kept.len ? "true" : "false");
    ngx_http_zk_lock_fleet_text(w, info.host.data, info.host.len, 0);
    ngx_http_zk_lock_fleet_printf(w, "\",\"pid\":%i,\"since\":\"", info.pid);
    ngx_http_zk_lock_fleet_text(w, info.since.data, info.since.len, 0);

    if (info.kept.len) {
        ngx_http_zk_lock_fleet_printf(w, "\",\"kept_for\":\"");
        ngx_http_zk_lock_fleet_text(w, info.kept.data, info.kept.len, 0);
        ngx_http_zk_lock_fleet_printf(w, "\"}");
        return;
    }

    ngx_http_zk_lock_fleet_printf(w, "\",\"method\":\"");
    ngx_http_zk_lock_fleet_text(w, info.method.data, info.method.len, 0);
    ngx_http_zk_lock_fleet_printf(w, "\",\"uri\":\"");
    ngx_http_zk_lock_fleet_text(w, info.uri.data, info.uri.len, 0);
    ngx_http_zk_lock_fleet_printf(w, "\"}");
}


/*
 * fair=: the board's claims, by instance (the prefix of its workers'
 * nodes), in flows
 */

static void
ngx_http_zk_lock_fleet_board(ngx_http_zk_lock_fleet_out_t *w,
    ngx_http_zk_lock_snap_lock_t *lock)
{
    ngx_uint_t  i;

    if (!lock->fair) {
        return;
    }

    ngx_http_zk_lock_fleet_printf(w, ",\"fair\":{\"path\":\"");
    ngx_http_zk_lock_fleet_text(w, lock->path.data, lock->path.len, 0);
    ngx_http_zk_lock_fleet_printf(w, NGX_HTTP_ZK_LOCK_SNAP_BOARD
                                  "\",\"instances\":[");

    for (i = 0; i < lock->nclaims; i++) {

        /* anybody may make a node there: its name as text, escaped */

        ngx_http_zk_lock_fleet_printf(w, "%s{\"instance\":\"",
                                      i ? "," : "");
        ngx_http_zk_lock_fleet_text(w, lock->claims[i].name,
                                    NGX_ZK_LOCK_INSTANCE_LEN, 0);
        ngx_http_zk_lock_fleet_printf(w, "\",");

        if (lock->claims[i].claim < 0) {
            ngx_http_zk_lock_fleet_printf(w, "\"claim\":null}");

        } else {
            ngx_http_zk_lock_fleet_printf(w, "\"claim\":%i.%03i}",
                                          lock->claims[i].claim / 1000,
                                          lock->claims[i].claim % 1000);
        }
    }

    ngx_http_zk_lock_fleet_printf(w, "]}");
}


/* fair=: the claim of a node's instance, -1 if it has none */

static ngx_int_t
ngx_http_zk_lock_fleet_claim(ngx_http_zk_lock_snap_child_t *child)
{
    ngx_uint_t                     i;
    ngx_http_zk_lock_snap_lock_t  *lock;

    lock = child->lock;

    if (child->name.len <= NGX_ZK_LOCK_OURS_LEN
        || ngx_strncmp(child->name.data, "_c_", 3) != 0)
    {
        return -1;
    }

    for (i = 0; i < lock->nclaims; i++) {
        if (ngx_memcmp(lock->claims[i].name, child->name.data,
                       NGX_ZK_LOCK_INSTANCE_LEN)
            == 0)
        {
            return lock->claims[i].claim;
        }
    }

    return -1;
}


/*
 * "<host> pid <pid> since <iso8601> <method> <uri>", or, for a lease a
 * worker keeps, "<host> pid <pid> since <iso8601> kept for <n>ms idle"
 */

static ngx_int_t
ngx_http_zk_lock_fleet_parse(ngx_str_t *data,
    ngx_http_zk_lock_fleet_info_t *info)
{
    u_char  *p, *q, *last;

    ngx_memzero(info, sizeof(ngx_http_zk_lock_fleet_info_t));

    if (data->len == 0) {
        return NGX_DECLINED;
    }

    p = data->data;
    last = p + data->len;

    q = ngx_strlcasestrn(p, last, (u_char *) " pid ", 5 - 1);
    if (q == NULL || q == p) {
        return NGX_DECLINED;
    }

    info->host.data = p;
    info->host.len = q - p;

    p = q + 5;
    q = p;

    while (p < last && *p >= '0' && *p <= '9') {
        p++;
    }

    /* written as a JSON number: "007" is 7, more than ngx_int_t is not */

    info->pid = ngx_atoi(q, p - q);

    if (info->pid == NGX_ERROR
        || last - p < 7 || ngx_strncmp(p, " since ", 7) != 0)
    {
        return NGX_DECLINED;
    }

    p += 7;
    info->since.data = p;

    while (p < last && *p != ' ') {
        p++;
    }

    info->since.len = p - info->since.data;

    if (info->since.len == 0 || p == last) {
        return NGX_DECLINED;
    }

    p++;

    if (last - p > 9 && ngx_strncmp(p, "kept for ", 9) == 0) {
        p += 9;
        q = ngx_strlchr(p, last, ' ');

        info->kept.data = p;
        info->kept.len = (q ? q : last) - p;

        return info->kept.len ? NGX_OK : NGX_DECLINED;
    }

    q = ngx_strlchr(p, last, ' ');
    if (q == NULL || q == p) {
        return NGX_DECLINED;
    }

    info->method.data = p;
    info->method.len = q - p;

    info->uri.data = q + 1;
    info->uri.len = last - (q + 1);

    return NGX_OK;
}


static const char *
ngx_http_zk_lock_fleet_state(ngx_zk_lock_session_t *s)
{
    if (s == NULL) {
        return "none";
    }

    if (s->brokered) {
        /* zk_sessions: a sibling's session serves this worker */
        return "brokered";
    }

    return ngx_zk_lock_session_usable(s) ? "connected" : "down";
}


/*
 * room for n more bytes: in the chunk being written, or in a new one
 * (out.c's, as the status page's)
 */

static u_char *
ngx_http_zk_lock_fleet_room(ngx_http_zk_lock_fleet_out_t *w, size_t n)
{
    u_char  *p;

    if (w->failed) {
        return NULL;
    }

    p = ngx_http_zk_lock_out_room(&w->out, w->out.buf ? w->out.buf->last
                                                      : NULL, n);
    if (p == NULL) {
        w->failed = 1;
    }

    return p;
}


/*
 * Fixed text with numbers and the module's own names, never data: a line
 * is short, and one that would not fit is a bug, not a shorter answer
 */

static void
ngx_http_zk_lock_fleet_printf(ngx_http_zk_lock_fleet_out_t *w,
    const char *fmt, ...)
{
    u_char   *p, *last;
    va_list   args;

    p = ngx_http_zk_lock_fleet_room(w, NGX_HTTP_ZK_LOCK_FLEET_LINE);
    if (p == NULL) {
        return;
    }

    last = p + NGX_HTTP_ZK_LOCK_FLEET_LINE;

    va_start(args, fmt);
    p = ngx_vslprintf(p, last, fmt, args);
    va_end(args);

    if (p == last) {
        ngx_log_error(NGX_LOG_ALERT, w->log, 0,
                      "zk lock fleet view: a line does not fit in %d bytes",
                      NGX_HTTP_ZK_LOCK_FLEET_LINE);
        w->failed = 1;
        return;
    }

    w->out.buf->last = p;
}


/*
 * A JSON string's text from any bytes (a node's data is anybody's), safe
 * in a <script> too: valid UTF-8 as it is; '"' and '\' escaped; control
 * bytes, '<' (no "</script>" nor "<!--") and U+2028, U+2029 (line ends
 * to older JavaScript) as \uXXXX; each invalid sequence as U+FFFD.  With
 * "cut" the text was cut at a byte count: a character cut in half at its
 * end is left out.
 */

static void
ngx_http_zk_lock_fleet_text(ngx_http_zk_lock_fleet_out_t *w, u_char *src,
    size_t len, ngx_uint_t cut)
{
    u_char     *p, *last, *dst;
    size_t      n;
    ngx_int_t   rc;

    static u_char  hex[] = "0123456789abcdef";

    p = src;
    last = src + len;

    while (p < last) {

        /* a byte, or a character, makes 6 bytes at most */

        dst = ngx_http_zk_lock_fleet_room(w, 6);
        if (dst == NULL) {
            return;
        }

        if (*p >= 0x80) {
            rc = ngx_http_zk_lock_fleet_utf8(p, last - p, &n);

            if (rc == NGX_AGAIN && cut) {
                return;
            }

            if (rc != NGX_OK) {
                dst = ngx_cpymem(dst, "\xef\xbf\xbd", 3);

            } else if (n == 3 && p[0] == 0xe2 && p[1] == 0x80
                       && (p[2] == 0xa8 || p[2] == 0xa9))
            {
                dst = ngx_cpymem(dst, p[2] == 0xa8 ? "\\u2028" : "\\u2029",
                                 6);

            } else {
                dst = ngx_cpymem(dst, p, n);
            }

            p += n;

        } else if (*p == '"' || *p == '\\') {
            *dst++ = '\\';
            *dst++ = *p++;

        } else if (*p < 0x20 || *p == 0x7f || *p == '<') {
            *dst++ = '\\';
            *dst++ = 'u';
            *dst++ = '0';
            *dst++ = '0';
            *dst++ = hex[*p >> 4];
            *dst++ = hex[*p & 0xf];
            p++;

        } else {
            *dst++ = *p++;
        }

        w->out.buf->last = dst;
    }
}


/*
 * The UTF-8 character at p, as RFC 3629 has it: no overlong form, no
 * surrogate, nothing above U+10FFFF (ngx_utf8_decode() takes any byte
 * from 0x80 up as a continuation, and surrogates).  NGX_OK and its
 * length; NGX_DECLINED and the length of the invalid sequence, its
 * "maximal subpart" that browsers and Python replace with one U+FFFD;
 * NGX_AGAIN when the n bytes end within a character.
 */

static ngx_int_t
ngx_http_zk_lock_fleet_utf8(u_char *p, size_t n, size_t *len)
{
    u_char  lo, hi;
    size_t  i, size;

    if (*p < 0xc2 || *p > 0xf4) {
        *len = 1;
        return (*p < 0x80) ? NGX_OK : NGX_DECLINED;
    }

    size = (*p >= 0xf0) ? 4 : (*p >= 0xe0) ? 3 : 2;

    /* the second byte's range rules out the overlongs, and the rest */

    lo = (*p == 0xe0) ? 0xa0 : (*p == 0xf0) ? 0x90 : 0x80;
    hi = (*p == 0xed) ? 0x9f : (*p == 0xf4) ? 0x8f : 0xbf;

    for (i = 1; i < size; i++) {

        if (i == n) {
            *len = i;
            return NGX_AGAIN;
        }

        if (p[i] < lo || p[i] > hi) {
            *len = i;
            return NGX_DECLINED;
        }

        lo = 0x80;
        hi = 0xbf;
    }

    *len = size;

    return NGX_OK;
}
