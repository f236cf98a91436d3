
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>

#include "ngx_zk_lock_session.h"


static void ngx_zk_lock_outage_handler(ngx_event_t *ev);
static u_char *ngx_zk_lock_outage_server(ngx_zk_lock_session_t *s,
    u_char *buf, size_t len);


void
ngx_zk_lock_outage_init(ngx_zk_lock_session_t *s)
{
    ngx_zk_lock_outage_t  *o;

    o = &s->outage;

    o->event.handler = ngx_zk_lock_outage_handler;
    o->event.data = s;
    o->event.log = &s->log;
    o->event.cancelable = 1;
}


/*
 * The session is out of use since "since": said after a third of the
 * session timeout, if it lasts
 */

void
ngx_zk_lock_outage_begin(ngx_zk_lock_session_t *s, ngx_msec_t since)
{
    ngx_msec_t             grace;
    ngx_msec_int_t         left;
    ngx_zk_lock_outage_t  *o;

    o = &s->outage;

    if (o->out || s->exiting || s->brokered) {
        return;
    }

    o->out = 1;
    o->said = 0;
    o->since = since;
    o->refused = 0;
    o->timed_out = 0;
    o->through = 0;

    grace = (s->negotiated ? s->negotiated : s->timeout) / 3;
    left = (ngx_msec_int_t) (since + grace - ngx_current_msec);

    ngx_add_timer(&o->event, left > 0 ? (ngx_msec_t) left : 1);
}


static void
ngx_zk_lock_outage_handler(ngx_event_t *ev)
{
    char                   *action;
    u_char                 *p;
    ngx_msec_t              out;
    ngx_zk_lock_session_t  *s;
    ngx_zk_lock_outage_t   *o;
    u_char                  cause[NGX_ZK_LOCK_CAUSE_LEN + 64];

    s = ev->data;
    o = &s->outage;

    if (!o->out || s->exiting) {
        return;
    }

    o->said = 1;
    out = ngx_current_msec - o->since;

    /* the client's own words if it had any, else what the session saw */

    if (o->cause[0]) {
        p = ngx_cpymem(cause, o->cause, ngx_strlen(o->cause));

    } else if (s->connected) {
        p = ngx_cpymem(cause, "no answer from ", 15);
        p = ngx_zk_lock_outage_server(s, p, cause + sizeof(cause) - 32 - p);
        p = ngx_sprintf(p, " for %Mms", ngx_current_msec - s->heard);

    } else {
        p = ngx_cpymem(cause, "no connection to ", 17);
        p = ngx_zk_lock_outage_server(s, p, cause + sizeof(cause) - 1 - p);
    }

    *p = '\0';

    /* the line says what the session was doing: no "while ..." after it */

    action = s->log.action;
    s->log.action = NULL;

    if (s->siblings && ngx_zk_lock_session_none(s)) {

        /* refused a session, as maxClientCnxns does, while siblings serve */

        ngx_log_error(NGX_LOG_ERR, &s->log, 0,
                      "zookeeper unreachable for %Mms: %s; until it "
                      "answers, the worker takes its locks through the "
                      "session of another worker (zk_sessions), and where "
                      "none has one, each lock refuses, lets through or "
                      "leases locally as its zk_lock_fail says; check that "
                      "the servers run, that this host reaches them, and "
                      "their maxClientCnxns against the connections of "
                      "every nginx behind this address", out, cause);

    } else {
        ngx_log_error(NGX_LOG_ERR, &s->log, 0,
                      "zookeeper unreachable for %Mms: %s; until it "
                      "answers, each lock refuses, lets through or leases "
                      "locally as its zk_lock_fail says, and holders let "
                      "go at 3/4 of the session timeout; check that the "
                      "servers run and that this host reaches them",
                      out, cause);
    }

    s->log.action = action;
}


/* connected and heard from: the outage, if any, is over */

void
ngx_zk_lock_outage_end(ngx_zk_lock_session_t *s)
{
    char                  *action;
    ngx_msec_t             out;
    ngx_zk_lock_outage_t  *o;
    u_char                 server[NGX_SOCKADDR_STRLEN + 1];

    o = &s->outage;
    o->cause[0] = '\0';

    if (!o->out) {
        return;
    }

    o->out = 0;

    if (o->event.timer_set) {
        ngx_del_timer(&o->event);
    }

    if (!o->said) {
        return;
    }

    out = ngx_current_msec - o->since;
    *ngx_zk_lock_outage_server(s, server, sizeof(server) - 1) = '\0';

    action = s->log.action;
    s->log.action = NULL;

    ngx_log_error(NGX_LOG_ERR, &s->log, 0,
                  "zookeeper usable again after %M.%Ms (%s): %ui "
                  "refused, %ui timed out, %ui let through meanwhile",
                  out / 1000, out % 1000 / 100, server, o->refused,
                  o->timed_out, o->through);

    s->log.action = action;
}


/*
 * The client's complaint about a connection attempt, in the operator's
 * words: "Socket 127.0.0.1:22199 zk retcode=-4, errno=111(Connection
 * refused): failed while receiving a server response" is
 * "127.0.0.1:22199 (111: Connection refused)"
 */

void
ngx_zk_lock_outage_cause(ngx_zk_lock_session_t *s, const char *text,
    size_t len)
{
    u_char  *p, *last, *addr, *addr_end, *err, *err_end, *end;

    p = (u_char *) text;
    last = p + len;
    end = s->outage.cause + NGX_ZK_LOCK_CAUSE_LEN - 1;

    addr = ngx_strnstr(p, "Socket ", len);

    if (addr == NULL) {
        if (len > 13 && ngx_strncmp(p, "getaddrinfo: ", 13) == 0) {
            p = ngx_snprintf(s->outage.cause, end - s->outage.cause,
                             "cannot resolve: %*s", len - 13, text + 13);
            *p = '\0';
        }

        return;
    }

    addr += sizeof("Socket ") - 1;
    addr_end = ngx_strnstr(addr, " zk retcode=", last - addr);
    err = ngx_strnstr(addr, "errno=", last - addr);

    if (addr_end == NULL || err == NULL) {
        return;
    }

    err += sizeof("errno=") - 1;
    err_end = ngx_strlchr(err, last, ')');

    if (err_end == NULL) {
        return;
    }

    /* "111(Connection refused" */

    p = ngx_strlchr(err, err_end, '(');

    if (p == NULL) {
        return;
    }

    p = ngx_snprintf(s->outage.cause, end - s->outage.cause,
                     "%*s (%*s: %*s)", addr_end - addr, addr, p - err, err,
                     err_end - p - 1, p + 1);
    *p = '\0';
}


/* how long the session has been out of use, ms; 0: it is usable */

ngx_msec_t
ngx_zk_lock_outage_for(ngx_zk_lock_session_t *s)
{
    ngx_zk_lock_outage_t  *o;

    o = &s->outage;

    /* a hang is seen by the probes, a few times a timeout: or here */

    if (!o->out && s->connected && ngx_zk_lock_session_silent(s)) {
        ngx_zk_lock_outage_begin(s, s->heard);
    }

    if (!o->out) {
        return 0;
    }

    return ngx_max(ngx_current_msec - o->since, 1);
}


static u_char *
ngx_zk_lock_outage_server(ngx_zk_lock_session_t *s, u_char *buf, size_t len)
{
    const char  *server;

    server = NULL;

    if (s->connected && s->zh) {
        server = zoo_get_current_server(s->zh);

    } else if (s->last_server[0]) {
        server = (const char *) s->last_server;
    }

    if (server == NULL) {
        return ngx_cpymem(buf, "?", ngx_min(len, 1));
    }

    return ngx_cpymem(buf, server, ngx_min(len, ngx_strlen(server)));
}
