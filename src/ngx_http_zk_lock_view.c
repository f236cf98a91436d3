
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_zk_lock_module.h"
#include "ngx_zk_lock_session.h"
#include "ngx_http_zk_lock_snap.h"
#include "ngx_http_zk_lock_fleet.h"
#include "ngx_http_zk_lock_view.h"


/*
 * The fleet view reads each lock's children and their data from ZooKeeper,
 * through the worker's session, into a snapshot that the worker owns: one
 * read at a time, at most one a second, shared by every request that asks
 * meanwhile.  A request that finds the snapshot old waits for the read in
 * progress (bounded), and a read that ends wakes the requests still
 * waiting; one gone meanwhile has unlinked itself from its pool's cleanup.
 * The reads are snap.c's, the JSON fleet.c's; the page, here, draws it.
 */


/* a snapshot younger than this is served as it is, ms */
#define NGX_HTTP_ZK_LOCK_VIEW_EVERY     1000

/* how long a request waits for a read, then gets the last snapshot, ms */
#define NGX_HTTP_ZK_LOCK_VIEW_WAIT      3000


/* the worker's */

typedef struct {
    ngx_http_zk_lock_snap_t        *current;  /* the last complete one */
    ngx_http_zk_lock_snap_t        *next;     /* being read */
    ngx_msec_t                      done;     /* when current was */
    ngx_uint_t                      reads;    /* complete ones */
    ngx_queue_t                     waiters;  /* view_ctx_t */
    ngx_http_zk_lock_main_conf_t   *lmcf;
} ngx_http_zk_lock_view_t;


/* a request waiting for a read */

typedef struct {
    ngx_queue_t                     queue;    /* in view.waiters */
    ngx_http_request_t             *request;
    ngx_event_t                     event;    /* woken, or its timer */
    unsigned                        queued:1;
    unsigned                        stale:1;  /* the read took too long */
} ngx_http_zk_lock_view_ctx_t;


static ngx_int_t ngx_http_zk_lock_view_handler(ngx_http_request_t *r);
static ngx_int_t ngx_http_zk_lock_view_wait(ngx_http_request_t *r,
    ngx_http_zk_lock_view_t *view);
static void ngx_http_zk_lock_view_answered(ngx_http_zk_lock_snap_t *snap);
static void ngx_http_zk_lock_view_wake(ngx_event_t *ev);
static void ngx_http_zk_lock_view_cleanup(void *data);
static ngx_int_t ngx_http_zk_lock_view_send(ngx_http_request_t *r,
    ngx_uint_t stale);
static ngx_int_t ngx_http_zk_lock_view_send_html(ngx_http_request_t *r);
static ngx_int_t ngx_http_zk_lock_view_out(ngx_http_request_t *r,
    ngx_chain_t *out, ngx_str_t *type);


static ngx_http_zk_lock_view_t  ngx_http_zk_lock_view;


static ngx_str_t  ngx_http_zk_lock_view_page;


/* zk_lock_fleet_view [html|json] */

char *
ngx_http_zk_lock_fleet_view(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_zk_lock_loc_conf_t *llcf = conf;

    ngx_str_t                 *value;
    ngx_http_core_loc_conf_t  *clcf;

    if (llcf->fleet_view) {
        return "is duplicate";
    }

    value = cf->args->elts;
    llcf->fleet_view = NGX_HTTP_ZK_LOCK_VIEW_HTML;

    if (cf->args->nelts == 2) {
        if (ngx_strcmp(value[1].data, "json") == 0) {
            llcf->fleet_view = NGX_HTTP_ZK_LOCK_VIEW_JSON;

        } else if (ngx_strcmp(value[1].data, "html") != 0) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "invalid format \"%V\", must be \"html\" or "
                               "\"json\"", &value[1]);
            return NGX_CONF_ERROR;
        }
    }

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);
    clcf->handler = ngx_http_zk_lock_view_handler;

    return NGX_CONF_OK;
}


static ngx_int_t
ngx_http_zk_lock_view_handler(ngx_http_request_t *r)
{
    ngx_int_t                      rc;
    ngx_str_t                      format;
    ngx_uint_t                     html;
    ngx_http_zk_lock_view_t       *view;
    ngx_zk_lock_session_t         *s;
    ngx_http_zk_lock_snap_t       *snap;
    ngx_http_zk_lock_loc_conf_t   *llcf;

    if (!(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD))) {
        return NGX_HTTP_NOT_ALLOWED;
    }

    rc = ngx_http_discard_request_body(r);
    if (rc != NGX_OK) {
        return rc;
    }

    llcf = ngx_http_get_module_loc_conf(r, ngx_http_zk_lock_module);
    html = (llcf->fleet_view == NGX_HTTP_ZK_LOCK_VIEW_HTML);

    if (ngx_http_arg(r, (u_char *) "format", 6, &format) == NGX_OK) {
        if (format.len == 4 && ngx_strncmp(format.data, "html", 4) == 0) {
            html = 1;

        } else if (format.len == 4 && ngx_strncmp(format.data, "json", 4) == 0)
        {
            html = 0;

        } else {
            return NGX_HTTP_BAD_REQUEST;
        }
    }

    /* the page reads the JSON itself, from the same location */

    if (html) {
        return ngx_http_zk_lock_view_send_html(r);
    }

    view = &ngx_http_zk_lock_view;

    if (view->lmcf == NULL) {
        view->lmcf = ngx_http_get_module_main_conf(r, ngx_http_zk_lock_module);
        ngx_queue_init(&view->waiters);
    }

    s = view->lmcf->session;

    /* no session to read through: what is known, at once */

    if (s == NULL || s->brokered || s->exiting
        || !ngx_zk_lock_session_usable(s))
    {
        return ngx_http_zk_lock_view_send(r, 1);
    }

    if (view->current
        && ngx_current_msec - view->done < NGX_HTTP_ZK_LOCK_VIEW_EVERY)
    {
        return ngx_http_zk_lock_view_send(r, 0);
    }

    if (view->next == NULL) {
        snap = ngx_http_zk_lock_snap_read(s, view->lmcf,
                                          ngx_http_zk_lock_view_answered,
                                          view);
        if (snap == NULL) {
            return ngx_http_zk_lock_view_send(r, 1);
        }

        view->next = snap;

        if (snap->pending == 0) {
            /* nothing was asked of ZooKeeper: done already */
            ngx_http_zk_lock_view_answered(snap);
            return ngx_http_zk_lock_view_send(r, 0);
        }
    }

    return ngx_http_zk_lock_view_wait(r, view);
}


/* the request waits for the read in progress, NGX_DONE */

static ngx_int_t
ngx_http_zk_lock_view_wait(ngx_http_request_t *r,
    ngx_http_zk_lock_view_t *view)
{
    ngx_pool_cleanup_t           *cln;
    ngx_http_zk_lock_view_ctx_t  *ctx;

    ctx = ngx_pcalloc(r->pool, sizeof(ngx_http_zk_lock_view_ctx_t));
    if (ctx == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (cln == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ctx->request = r;
    ctx->event.handler = ngx_http_zk_lock_view_wake;
    ctx->event.data = ctx;
    ctx->event.log = r->connection->log;

    /*
     * The cleanup unlinks a request that goes while it waits: a client
     * that closes, a worker that ends it.  The timer is not cancelable:
     * a worker shutting down gracefully answers the request first.
     */

    cln->handler = ngx_http_zk_lock_view_cleanup;
    cln->data = ctx;

    ngx_queue_insert_tail(&view->waiters, &ctx->queue);
    ctx->queued = 1;

    ngx_add_timer(&ctx->event, NGX_HTTP_ZK_LOCK_VIEW_WAIT);

    if (!r->discard_body) {
        /* to hear of a client that closes while it waits */
        r->read_event_handler = ngx_http_test_reading;
    }

    r->main->count++;

    return NGX_DONE;
}


/*
 * The read is over: a complete one replaces the snapshot; one that lost
 * answers (the connection went) is dropped, and the last stays.  Either
 * way the requests that waited are answered, each from its own event.
 */

static void
ngx_http_zk_lock_view_answered(ngx_http_zk_lock_snap_t *snap)
{
    ngx_uint_t                    failed;
    ngx_queue_t                  *q;
    ngx_http_zk_lock_view_t      *view;
    ngx_http_zk_lock_view_ctx_t  *ctx;

    view = snap->data;
    view->next = NULL;

    /* a failed snapshot is freed at once: what the waiters need, first */

    failed = snap->failed;

    if (failed) {
        ngx_destroy_pool(snap->pool);

    } else {
        ngx_http_zk_lock_snap_ages(snap, view->current);

        if (view->current) {
            ngx_destroy_pool(view->current->pool);
        }

        view->current = snap;
        view->done = ngx_current_msec;
        view->reads++;
    }

    while (!ngx_queue_empty(&view->waiters)) {
        q = ngx_queue_head(&view->waiters);
        ngx_queue_remove(q);

        ctx = ngx_queue_data(q, ngx_http_zk_lock_view_ctx_t, queue);
        ctx->queued = 0;
        ctx->stale = failed;

        if (ctx->event.timer_set) {
            ngx_del_timer(&ctx->event);
        }

        ngx_post_event(&ctx->event, &ngx_posted_events);
    }
}


static void
ngx_http_zk_lock_view_wake(ngx_event_t *ev)
{
    ngx_http_zk_lock_view_ctx_t *ctx = ev->data;

    ngx_connection_t    *c;
    ngx_http_request_t  *r;

    r = ctx->request;
    c = r->connection;

    if (ctx->queued) {
        /* the timer: the read took too long, the last snapshot is served */
        ngx_queue_remove(&ctx->queue);
        ctx->queued = 0;
        ctx->stale = 1;
    }

    ngx_http_set_log_request(c->log, r);

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, c->log, 0,
                   "zk lock view: answered, stale:%ui",
                   (ngx_uint_t) ctx->stale);

    ngx_http_finalize_request(r, ngx_http_zk_lock_view_send(r, ctx->stale));
    ngx_http_run_posted_requests(c);
}


static void
ngx_http_zk_lock_view_cleanup(void *data)
{
    ngx_http_zk_lock_view_ctx_t *ctx = data;

    if (ctx->queued) {
        ngx_queue_remove(&ctx->queue);
        ctx->queued = 0;
    }

    if (ctx->event.timer_set) {
        ngx_del_timer(&ctx->event);
    }

    if (ctx->event.posted) {
        ngx_delete_posted_event(&ctx->event);
    }
}


/* the worker exits, its session is closed: no answer is to come */

void
ngx_http_zk_lock_view_exit(void)
{
    ngx_http_zk_lock_view_t  *view;

    view = &ngx_http_zk_lock_view;

    if (view->next && view->next->pending == 0) {
        ngx_destroy_pool(view->next->pool);
        view->next = NULL;
    }

    if (view->current) {
        ngx_destroy_pool(view->current->pool);
        view->current = NULL;
    }
}


static ngx_int_t
ngx_http_zk_lock_view_send(ngx_http_request_t *r, ngx_uint_t stale)
{
    ngx_str_t                  type;
    ngx_chain_t               *out;
    ngx_http_zk_lock_view_t   *view;
    ngx_http_zk_lock_fleet_t   fleet;

    view = &ngx_http_zk_lock_view;

    fleet.snap = view->current;
    fleet.session = view->lmcf ? view->lmcf->session : NULL;
    fleet.reads = view->reads;
    fleet.age = ngx_current_msec - view->done;
    fleet.stale = stale;

    out = ngx_http_zk_lock_fleet_json(r->pool, r->connection->log, &fleet);
    if (out == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_str_set(&type, "application/json");

    return ngx_http_zk_lock_view_out(r, out, &type);
}


static ngx_int_t
ngx_http_zk_lock_view_send_html(ngx_http_request_t *r)
{
    ngx_buf_t    *b;
    ngx_str_t     type;
    ngx_chain_t   out;

    b = ngx_calloc_buf(r->pool);
    if (b == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    b->pos = ngx_http_zk_lock_view_page.data;
    b->last = b->pos + ngx_http_zk_lock_view_page.len;
    b->memory = 1;

    out.buf = b;
    out.next = NULL;

    ngx_str_set(&type, "text/html; charset=utf-8");

    return ngx_http_zk_lock_view_out(r, &out, &type);
}


/* the whole answer, in memory */

static ngx_int_t
ngx_http_zk_lock_view_out(ngx_http_request_t *r, ngx_chain_t *out,
    ngx_str_t *type)
{
    off_t         len;
    ngx_int_t     rc;
    ngx_chain_t  *cl;

    len = 0;

    for (cl = out; cl; cl = cl->next) {
        len += cl->buf->last - cl->buf->pos;

        if (cl->next == NULL) {
            cl->buf->last_buf = (r == r->main) ? 1 : 0;
            cl->buf->last_in_chain = 1;
        }
    }

    r->headers_out.content_type = *type;
    r->headers_out.content_type_len = type->len;
    r->headers_out.status = NGX_HTTP_OK;
    r->headers_out.content_length_n = len;

    rc = ngx_http_send_header(r);

    if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) {
        return rc;
    }

    return ngx_http_output_filter(r, out);
}


/*
 * The page: no external assets (nor a favicon for the browser to ask
 * for), it reads the JSON from its own location every 2 seconds and draws
 * one table per lock, its requests in dry run under it.  Its one format
 * of a time is an age, as of the read; anybody's text is drawn as text,
 * its control characters escaped, and cut to fit a column (whole in the
 * cell's title).
 */

static ngx_str_t  ngx_http_zk_lock_view_page = ngx_string(
"<!DOCTYPE html>\n"
"<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
"<link rel=\"icon\" href=\"data:,\">\n"
"<title>zk lock fleet view</title>\n"
"<style>\n"
"body{font:14px/1.4 -apple-system,'Segoe UI',Helvetica,Arial,sans-serif;\n"
"margin:0;background:#f4f5f7;color:#222}\n"
"header{background:#1f2d3d;color:#fff;padding:10px 16px}\n"
"header h1{font-size:18px;margin:0 0 4px}\n"
"header .meta span{margin-right:18px}\n"
".up{color:#7ee787}.down{color:#ff7b72;font-weight:bold}\n"
"main{padding:8px 16px}\n"
"section{background:#fff;border:1px solid #d0d7de;border-radius:6px;\n"
"margin:12px 0;padding:8px 12px}\n"
"section h2{font-size:15px;margin:2px 0 6px;font-family:monospace}\n"
"section h2 small{font-family:sans-serif;font-weight:normal;color:#57606a;\n"
"margin-left:10px}\n"
"table{border-collapse:collapse;width:100%;table-layout:fixed}\n"
"th,td{text-align:left;padding:3px 8px;border-bottom:1px solid #eaeef2;\n"
"white-space:nowrap;overflow:hidden;text-overflow:ellipsis}\n"
"th:nth-child(1){width:3%}th:nth-child(2){width:15%}\n"
"th:nth-child(3){width:10%}th:nth-child(4){width:6%}\n"
"th:nth-child(5){width:16%}th:nth-child(6){width:5%}\n"
"th:nth-child(7){width:15%}th:nth-child(8){width:8%}\n"
"th:nth-child(9){width:22%}\n"
"th{background:#f6f8fa;font-weight:600}\n"
"td.node{font-family:monospace;font-size:12px;color:#57606a}\n"
"tr.hold td{background:#dafbe1}\n"
"tr.hold td.state{color:#116329;font-weight:bold}\n"
"tr.wait td.state{color:#9a6700}\n"
"tr.kept td.state{color:#0550ae}\n"
"tr.dry td{background:#f5f0ff}\n"
"tr.dry td.state{color:#8250df;font-weight:normal}\n"
"section.stale{background:#f6f8fa;border-style:dashed}\n"
"tr.stale td{background:#eaeef2;color:#57606a}\n"
"tr.stale td.state{color:#57606a;font-weight:normal}\n"
"p.stale{color:#cf222e;font-weight:bold}\n"
".note{color:#57606a;font-style:italic}\n"
".err{color:#cf222e}\n"
"</style></head>\n"
"<body><header><h1>zk lock fleet view</h1>\n"
"<div class=\"meta\"><span id=\"who\"></span><span id=\"session\"></span>\n"
"<span id=\"read\"></span></div></header>\n"
"<main id=\"locks\"><p class=\"note\">loading&hellip;</p></main>\n"
"<script>\n"
"(function(){\n"
"var url=location.pathname+'?format=json',n=0,\n"
"CTL=/[\\u0000-\\u001f\\u007f-\\u009f\\u2028\\u2029]/,\n"
"COLS=['#','state','for','client','host','pid','request','arrived','node'];\n"
"function el(t,c,x){var e=document.createElement(t);if(c)e.className=c;\n"
"if(x!==undefined&&x!==null)e.textContent=String(x);return e}\n"
"function td(tr,c,x,t){var e=el('td',c,x);if(t&&t!==x)e.title=t;\n"
"tr.appendChild(e)}\n"
"function pad(x){return (x<10?'0':'')+x}\n"
"/* the one format of a time on the page: an age, as of the read */\n"
"function age(ms){if(typeof ms!=='number'||!isFinite(ms))return '';\n"
"if(ms<0)ms=0;\n"
"var s=Math.floor(ms/1000),m=Math.floor(s/60),h=Math.floor(m/60);\n"
"if(ms<10000)return (ms/1000).toFixed(1)+'s';\n"
"if(s<60)return s+'s';\n"
"if(m<60)return m+'m '+pad(s%60)+'s';\n"
"if(h<24)return h+'h '+pad(m%60)+'m';\n"
"return Math.floor(h/24)+'d '+(h%24)+'h'}\n"
"/* anybody's text: control characters as escapes, k characters at most */\n"
"function esc(c){return CTL.test(c)?\n"
"'\\\\u'+('000'+c.charCodeAt(0).toString(16)).slice(-4):c}\n"
"function cut(s,k){var o='',w=0,i,e,x,\n"
"a=Array.from(s===undefined||s===null?'':String(s));\n"
"for(i=0;i<a.length;i++){e=esc(a[i]);x=e===a[i]?1:e.length;\n"
"if(w+x>k)return o+'\\u2026';o+=e;w+=x}\n"
"return o}\n"
"function full(s){return cut(s,Infinity)}\n"
"/* a Curator name, \"_c_<uuid>-<kind><seq>\": the uuid's first group */\n"
"function name(s){var m=/^(_c_[0-9a-f]{8})-[0-9a-f-]{27}(-.*)$/.exec(s);\n"
"return m?m[1]+'\\u2026'+cut(m[2],32):cut(s,40)}\n"
"function row(d,j,dry){\n"
"var hold=d.state==='holding',q='#'+d.queue,st,f,fw='',who='',req='',\n"
"tr=el('tr',(dry?'dry ':'')+(hold?'hold':'wait')+\n"
"(d.kept?' kept':'')+(j.stale?' stale':''));\n"
"if(dry)st=(hold?'would hold':'would wait')+' (dry run)';\n"
"else if(j.stale)st=(hold?'held':'waited '+q)+' (stale)';\n"
"else st=hold?'holds':'waits '+q;\n"
"if(d.kept)st+=' (kept)';if(d.gone)st+=' (gone)';\n"
"f=hold?d.held_for_ms:d.waiting_for_ms;\n"
"if(typeof f==='number')fw=(hold?'held ':'waiting ')+\n"
"(hold&&!d.held_for_exact?'\\u2264 ':'')+age(f);\n"
"if(d.client==='nginx'){who=d.host;\n"
"req=d.kept?'kept for '+d.kept_for+' idle':d.method+' '+d.uri}\n"
"else if(d.client==='curator')who=d.data;\n"
"td(tr,'pos',d.position);td(tr,'state',st);td(tr,'for',fw);\n"
"td(tr,'client',(d.client||'?')+(typeof d.claim==='number'?\n"
"' \\u00b7 claim '+d.claim.toFixed(1):''));\n"
"td(tr,'host',cut(who,40),full(who)+\n"
"(typeof d.data_bytes==='number'?' ('+d.data_bytes+' bytes)':''));\n"
"td(tr,'pid',d.pid||'');td(tr,'req',cut(req,60),full(req));\n"
"/* when its node was made: ZooKeeper's clock, nginx's and Curator's alike */\n"
"td(tr,'arrived',d.created?age(j.read_at_ms-d.created)+' ago':'');\n"
"td(tr,'node',name(d.node),full(d.node));\n"
"return tr}\n"
"function draw(j){\n"
"document.getElementById('who').textContent=\n"
"'nginx '+j.hostname+' pid '+j.pid+' \\u00b7 module '+j.version+\n"
"' (build '+j.build+')';\n"
"var s=document.getElementById('session');\n"
"s.textContent='session: '+j.session+(j.stale?' (stale)':'');\n"
"s.className=j.session==='connected'&&!j.stale?'up':'down';\n"
"document.getElementById('read').textContent=\n"
"typeof j.age_ms==='number'?'read '+age(j.age_ms)+' ago':'never read';\n"
"var m=document.getElementById('locks');m.textContent='';\n"
"if(!j.locks.length)m.appendChild(el('p','note','no lock to show'));\n"
"j.locks.forEach(function(l){\n"
"var sec=el('section',j.stale?'stale':null),\n"
"dry=l.dry_run?l.dry_run.participants:0;\n"
"sec.setAttribute('data-path',l.path);\n"
"var h=el('h2',null,l.path);h.appendChild(el('small',null,l.type+\n"
"(l.leases!==null?', '+l.leases+' lease'+(l.leases===1?'':'s'):'')+\n"
"' \\u00b7 '+l.holders+' holding, '+l.waiting+' waiting'+\n"
"(dry?' \\u00b7 '+dry+' in dry run':'')+\n"
"(l.fair?' \\u00b7 fair=, '+l.fair.instances.length+' instance'+\n"
"(l.fair.instances.length===1?'':'s')+' claiming':'')+\n"
"(l.source==='live'?' \\u00b7 live in this worker':'')));\n"
"sec.appendChild(h);\n"
"if(j.stale)sec.appendChild(el('p','stale','stale: as read '+\n"
"age(j.age_ms)+' ago, '+(j.session==='connected'?\n"
"'the last read failed or took too long':'with the session '+j.session)+\n"
"': who holds and who waits now is not known'));\n"
"if(l.error)sec.appendChild(el('p','err','error: '+l.error));\n"
"if(l.truncated)sec.appendChild(el('p','note','the first '+l.shown+\n"
"' of '+l.participants+' nodes are shown'));\n"
"var t=el('table'),hr=el('tr');\n"
"COLS.forEach(function(x){hr.appendChild(el('th',null,x))});\n"
"t.appendChild(hr);\n"
"l.nodes.forEach(function(d){t.appendChild(row(d,j,false))});\n"
"if(l.dry_run)l.dry_run.nodes.forEach(function(d){\n"
"t.appendChild(row(d,j,true))});\n"
"if(t.rows.length===1){var e=el('tr'),c=el('td','note','nobody');\n"
"c.colSpan=COLS.length;e.appendChild(c);t.appendChild(e)}\n"
"sec.appendChild(t);m.appendChild(sec)});\n"
"document.body.setAttribute('data-draws',String(++n))}\n"
"function tick(){fetch(url,{cache:'no-store'}).then(function(r){\n"
"return r.json()}).then(draw).catch(function(e){\n"
"var s=document.getElementById('session');\n"
"s.textContent='view unreachable: '+e;s.className='down'})\n"
".then(function(){setTimeout(tick,2000)})}\n"
"tick()})();\n"
"</script></body></html>\n");
