
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_sha1.h>

#include "ngx_zk_lock_conf.h"
#include "ngx_zk_lock_path.h"
#include "ngx_zk_lock_broker.h"


/* what the module does on its nodes: create, delete, list (getChildren) */
#define NGX_ZK_LOCK_CONF_PERMS                                           \
    (ZOO_PERM_CREATE | ZOO_PERM_DELETE | ZOO_PERM_READ)

/* "user:" + the base64 of a SHA-1: a digest id, as ZooKeeper makes it */
#define NGX_ZK_LOCK_CONF_DIGEST_LEN  28


/*
 * The directives of the worker's ZooKeeper session, the same in "http"
 * and in "stream": zk_hosts, zk_session_timeout, zk_auth, zk_acl and
 * zk_sessions.  The layer's main configuration holds an
 * ngx_zk_lock_conf_t; the command's offset is where.
 */


static char *ngx_zk_lock_conf_acl_id(ngx_conf_t *cf, ngx_str_t *entry,
    u_char *scheme, u_char *id);
static char *ngx_zk_lock_conf_timeout_check(ngx_conf_t *cf, void *post,
    void *data);
static ngx_int_t ngx_zk_lock_conf_acl_usable(ngx_conf_t *cf,
    ngx_zk_lock_conf_t *zc);
static ngx_int_t ngx_zk_lock_conf_digest(ngx_pool_t *pool, ngx_str_t *auth,
    ngx_str_t *id);
static ngx_str_t *ngx_zk_lock_conf_acl_text(ngx_pool_t *pool,
    struct ACL_vector *acl);
static u_char *ngx_zk_lock_conf_perms(u_char *p, int32_t perms);


ngx_conf_post_t  ngx_zk_lock_conf_timeout_post = {
    ngx_zk_lock_conf_timeout_check
};


ngx_conf_num_bounds_t  ngx_zk_lock_conf_sessions_bounds = {
    ngx_conf_check_num_bounds, 1, 1024
};


/* bumped by every configuration the master loads: see zk_sessions */
static ngx_uint_t  ngx_zk_lock_conf_generation;


void
ngx_zk_lock_conf_create(ngx_zk_lock_conf_t *zc)
{
    /*
     * set by the layer's ngx_pcalloc():
     *
     *     zc->hosts = NULL;
     *     zc->chroot = { 0, NULL };
     *     zc->auth = { 0, NULL };
     *     zc->acl = NULL;
     *     zc->classes = { 0 }: none
     */

    zc->session_timeout = NGX_CONF_UNSET_MSEC;
    zc->sessions = NGX_CONF_UNSET_UINT;
}


char *
ngx_zk_lock_conf_init(ngx_conf_t *cf, ngx_zk_lock_conf_t *zc)
{
    ngx_conf_init_msec_value(zc->session_timeout, 10000);

    /* zk_sessions unset: chosen from worker_processes, see get_sessions() */

#if !(NGX_LINUX)

    if (zc->sessions != NGX_CONF_UNSET_UINT) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"zk_sessions\" is only supported on Linux "
                           "(its brokers listen on abstract unix sockets)");
        return NGX_CONF_ERROR;
    }

#endif

    /* a new name for the brokers of each configuration the master loads */

    zc->generation = ++ngx_zk_lock_conf_generation;

    if (ngx_zk_lock_broker_token(cf->log) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


/*
 * The worker's session, made in the master from the directives.  With a
 * "resolver" in the layer's block, the workers resolve the names of
 * zk_hosts themselves, without blocking, and again as they reconnect;
 * without one, they are resolved now, once.
 */

ngx_zk_lock_session_t *
ngx_zk_lock_conf_session(ngx_conf_t *cf, ngx_zk_lock_conf_t *zc,
    ngx_resolver_t *resolver, ngx_msec_t resolver_timeout)
{
    ngx_uint_t              i;
    ngx_zk_lock_hosts_t    *h;
    ngx_zk_lock_session_t  *s;

    h = zc->hosts;

    if (ngx_zk_lock_hosts_names(h)
        && resolver && resolver->connections.nelts)
    {
        h->resolver = resolver;
        h->resolver_timeout = (resolver_timeout == NGX_CONF_UNSET_MSEC)
                              ? 30000 : resolver_timeout;
    }

    if (ngx_zk_lock_hosts_load(cf, h) != NGX_OK) {
        return NULL;
    }

    if (zc->acl && zc->auth.len == 0) {
        for (i = 0; i < (ngx_uint_t) zc->acl->count; i++) {
            if (ngx_strcmp(zc->acl->data[i].id.scheme, "auth") == 0) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "\"zk_acl\" with the \"auth\" scheme "
                                   "needs \"zk_auth\"");
                return NULL;
            }
        }
    }

    if (zc->acl && ngx_zk_lock_conf_acl_usable(cf, zc) != NGX_OK) {
        return NULL;
    }

    s = ngx_pcalloc(cf->pool, sizeof(ngx_zk_lock_session_t));
    if (s == NULL) {
        return NULL;
    }

    if (ngx_zk_lock_session_instance(cf->log, s) != NGX_OK) {
        return NULL;
    }

    s->hosts = h;
    s->chroot = zc->chroot;
    s->timeout = zc->session_timeout;
    s->auth = zc->auth;
    s->acl = zc->acl ? zc->acl : &ZOO_OPEN_ACL_UNSAFE;

    return s;
}


/*
 * The nodes the module creates carry zk_acl, and it must create, delete
 * and list nodes below them: with an ACL that denies it one of these, no
 * lock works, and the containers it made stay (the server reaps only the
 * containers that have had a child) with that ACL after the configuration
 * is fixed.  Its identity: world:anyone, and the digest id of zk_auth
 * ("auth:" names that too).  An ip: entry is taken on trust: the
 * address the server sees (NAT, the interface of the route) is not known
 * before it connects.  Neither SASL nor x509 is an identity of this
 * client (Debian's has neither SASL nor TLS).
 */

static ngx_int_t
ngx_zk_lock_conf_acl_usable(ngx_conf_t *cf, ngx_zk_lock_conf_t *zc)
{
    char          *scheme;
    u_char        *p, *q;
    int32_t        perms, missing;
    ngx_str_t      mine;
    ngx_uint_t     i, n, digests;
    const char    *why;
    struct ACL    *acl;
    u_char         buf[8], list[64];

    ngx_str_null(&mine);

    if (zc->auth.len
        && ngx_zk_lock_conf_digest(cf->pool, &zc->auth, &mine) != NGX_OK)
    {
        return NGX_ERROR;
    }

    perms = 0;
    digests = 0;

    for (i = 0; i < (ngx_uint_t) zc->acl->count; i++) {
        acl = &zc->acl->data[i];
        scheme = acl->id.scheme;

        if (ngx_strcmp(scheme, "world") == 0
            || ngx_strcmp(scheme, "auth") == 0
            || ngx_strcmp(scheme, "ip") == 0)
        {
            perms |= acl->perms;

        } else if (ngx_strcmp(scheme, "digest") == 0) {
            digests++;

            if (mine.len && ngx_strcmp(acl->id.id, mine.data) == 0) {
                perms |= acl->perms;
            }
        }
    }

    /* the secret's hash is no more of use here */

    if (mine.len) {
        ngx_explicit_memzero(mine.data, mine.len);
    }

    missing = NGX_ZK_LOCK_CONF_PERMS & ~perms;

    if (missing == 0) {
        return NGX_OK;
    }

    /* "c", "c" and "d", "c", "d" and "r" */

    p = ngx_zk_lock_conf_perms(buf, missing);
    n = p - buf;

    for (i = 0, q = list; i < n; i++) {
        q = ngx_sprintf(q, "%s\"%c\"",
                        i == 0 ? "" : (i + 1 == n) ? " and " : ", ", buf[i]);
    }

    q = ngx_sprintf(q, " permission%s", n > 1 ? "s" : "");
    *q = '\0';

    why = (digests == 0) ? ""
          : zc->auth.len ? "; none of its digest ids is the one of the user "
                           "and password of \"zk_auth\""
                         : "; its digest ids need the \"zk_auth\" of their "
                           "user and password";

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "zk_acl \"%V\" leaves this nginx without the %s on "
                       "its own nodes: to take a lock, it must create, "
                       "delete and list nodes (\"cdr\"); give them to "
                       "\"world:anyone\", to \"auth:\" or to the digest id "
                       "of \"zk_auth\"%s",
                       ngx_zk_lock_conf_acl_text(cf->pool, zc->acl), list,
                       why);

    return NGX_ERROR;
}


/* "user:password": "user:" + base64(sha1("user:password")), terminated */

static ngx_int_t
ngx_zk_lock_conf_digest(ngx_pool_t *pool, ngx_str_t *auth, ngx_str_t *id)
{
    u_char       *colon;
    ngx_str_t     hash, sha1;
    ngx_sha1_t    ctx;
    u_char        digest[20];

    colon = ngx_strlchr(auth->data, auth->data + auth->len, ':');
    if (colon == NULL) {
        return NGX_ERROR;
    }

    id->len = colon - auth->data + 1 + NGX_ZK_LOCK_CONF_DIGEST_LEN;
    id->data = ngx_pnalloc(pool, id->len + 1);
    if (id->data == NULL) {
        return NGX_ERROR;
    }

    ngx_sha1_init(&ctx);
    ngx_sha1_update(&ctx, auth->data, auth->len);
    ngx_sha1_final(digest, &ctx);

    sha1.data = digest;
    sha1.len = sizeof(digest);

    hash.data = ngx_cpymem(id->data, auth->data, colon - auth->data + 1);
    ngx_encode_base64(&hash, &sha1);

    id->data[id->len] = '\0';

    ngx_explicit_memzero(digest, sizeof(digest));
    ngx_explicit_memzero(&ctx, sizeof(ngx_sha1_t));

    return NGX_OK;
}


/* the ACL as zk_acl writes it, for a message */

static ngx_str_t *
ngx_zk_lock_conf_acl_text(ngx_pool_t *pool, struct ACL_vector *acl)
{
    u_char      *p;
    size_t       len;
    ngx_int_t    i;
    ngx_str_t   *text;

    static ngx_str_t  none = ngx_string("...");

    text = ngx_palloc(pool, sizeof(ngx_str_t));
    if (text == NULL) {
        return &none;
    }

    len = 0;

    for (i = 0; i < acl->count; i++) {
        len += ngx_strlen(acl->data[i].id.scheme)
               + ngx_strlen(acl->data[i].id.id) + sizeof(" ::cdrwa") - 1;
    }

    text->data = ngx_pnalloc(pool, len);
    if (text->data == NULL) {
        return &none;
    }

    p = text->data;

    for (i = 0; i < acl->count; i++) {
        p = ngx_sprintf(p, "%s%s:%s:", i ? " " : "", acl->data[i].id.scheme,
                        acl->data[i].id.id);
        p = ngx_zk_lock_conf_perms(p, acl->data[i].perms);
    }

    text->len = p - text->data;

    return text;
}


/* perms as zkCli.sh writes them, "cdrwa" */

static u_char *
ngx_zk_lock_conf_perms(u_char *p, int32_t perms)
{
    if (perms & ZOO_PERM_CREATE) {
        *p++ = 'c';
    }

    if (perms & ZOO_PERM_DELETE) {
        *p++ = 'd';
    }

    if (perms & ZOO_PERM_READ) {
        *p++ = 'r';
    }

    if (perms & ZOO_PERM_WRITE) {
        *p++ = 'w';
    }

    if (perms & ZOO_PERM_ADMIN) {
        *p++ = 'a';
    }

    return p;
}


/* zk_hosts host:port[,host:port...][/chroot] */

char *
ngx_zk_lock_conf_hosts(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    u_char              *p, *last;
    ngx_str_t           *value;
    ngx_uint_t           n;
    const char          *err;
    ngx_zk_lock_conf_t  *zc;

    zc = (ngx_zk_lock_conf_t *) ((char *) conf + cmd->offset);

    if (zc->hosts) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (value[1].len == 0 || value[1].data[0] == '/') {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "no hosts in \"%V\"", &value[1]);
        return NGX_CONF_ERROR;
    }

    last = value[1].data + value[1].len;
    p = ngx_strlchr(value[1].data, last, '/');

    zc->hosts = ngx_pcalloc(cf->pool, sizeof(ngx_zk_lock_hosts_t));
    if (zc->hosts == NULL) {
        return NGX_CONF_ERROR;
    }

    if (ngx_zk_lock_hosts_parse(cf, zc->hosts, &value[1],
                                p ? p : last)
        != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

    if (p) {
        zc->chroot.data = p;
        zc->chroot.len = last - p;

        if (ngx_strlchr(p, last, ',')) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "a chroot follows the last host only, in "
                               "\"%V\" (host:port,host:port/chroot)",
                               &value[1]);
            return NGX_CONF_ERROR;
        }

        /* the chroot follows the rules of lock paths */

        err = ngx_zk_lock_path_check(&zc->chroot, 0, &n);
        if (err) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "invalid chroot in \"%V\": a segment is %s",
                               &value[1], err);
            return NGX_CONF_ERROR;
        }
    }

    return NGX_CONF_OK;
}


/*
 * A session timeout is the time the server gives a silent worker; it
 * cannot be shorter than two of the server's ticks, and the worker's
 * probes and reconnections are paced by fractions of it
 */

static char *
ngx_zk_lock_conf_timeout_check(ngx_conf_t *cf, void *post,
    void *data)
{
    ngx_msec_t  *tp = data;

    if (*tp < NGX_ZK_LOCK_MIN_SESSION_TIMEOUT) {
        return "must be at least 1s (a ZooKeeper server allows no less "
               "than two of its ticks)";
    }

    return NGX_CONF_OK;
}


/*
 * An id as its scheme wants it: the server refuses any other, and every
 * create would fail ("invalid acl"), each request with it
 */

static char *
ngx_zk_lock_conf_acl_id(ngx_conf_t *cf, ngx_str_t *entry, u_char *scheme,
    u_char *id)
{
    u_char         *hash;
    ngx_str_t       text;
    ngx_cidr_t      cidr;
    const char     *err;

    err = NULL;

    if (ngx_strcmp(scheme, "world") == 0) {
        if (ngx_strcmp(id, "anyone") != 0) {
            err = "the id of \"world\" is \"anyone\"";
        }

    } else if (ngx_strcmp(scheme, "digest") == 0) {

        /* user:base64(sha1(user:password)), as zkCli.sh's setAcl takes */

        hash = (u_char *) ngx_strchr(id, ':');

        if (hash == NULL || hash == id || ngx_strlen(hash + 1) != 28) {
            err = "the id of \"digest\" is \"user:hash\", the hash being "
                  "the base64 of the SHA-1 of \"user:password\" "
                  "(28 characters)";
        }

    } else if (ngx_strcmp(scheme, "ip") == 0) {
        text.data = id;
        text.len = ngx_strlen(id);

        if (ngx_ptocidr(&text, &cidr) == NGX_ERROR) {
            err = "the id of \"ip\" is an address or a network "
                  "(\"10.0.0.0/8\")";
        }

    } else if (ngx_strcmp(scheme, "auth") != 0
               && ngx_strcmp(scheme, "x509") != 0
               && ngx_strcmp(scheme, "sasl") != 0)
    {
        err = "unknown scheme, not one of \"world\", \"auth\", "
              "\"digest\", \"ip\", \"x509\", \"sasl\"";
    }

    if (err) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid zk_acl entry \"%V\": %s", entry, err);
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


/*
 * zk_acl scheme:id:perms ..., as zkCli.sh's setAcl writes them, perms
 * among "cdrwa": "world:anyone:r", "auth::cdrwa" (whoever authenticated
 * as with zk_auth), "digest:user:<base64 sha1>:cdrwa", "ip:10.0.0.0/8:r"
 */

char *
ngx_zk_lock_conf_acl(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    u_char              *p, *colon, *last;
    int32_t              perms;
    ngx_str_t           *value, entry;
    ngx_uint_t           i;
    struct ACL          *acl;
    ngx_zk_lock_conf_t  *zc;

    zc = (ngx_zk_lock_conf_t *) ((char *) conf + cmd->offset);

    if (zc->acl) {
        return "is duplicate";
    }

    value = cf->args->elts;

    zc->acl = ngx_pcalloc(cf->pool, sizeof(struct ACL_vector));
    if (zc->acl == NULL) {
        return NGX_CONF_ERROR;
    }

    acl = ngx_pcalloc(cf->pool, (cf->args->nelts - 1) * sizeof(struct ACL));
    if (acl == NULL) {
        return NGX_CONF_ERROR;
    }

    zc->acl->count = cf->args->nelts - 1;
    zc->acl->data = acl;

    for (i = 1; i < cf->args->nelts; i++, acl++) {

        p = value[i].data;
        last = p + value[i].len;

        colon = ngx_strlchr(p, last, ':');

        while (last > p && last[-1] != ':') {
            last--;
        }

        if (colon == NULL || colon == p || last - 1 == colon) {
            goto invalid;
        }

        perms = 0;

        for (p = last; p < value[i].data + value[i].len; p++) {
            switch (*p) {
            case 'c': perms |= ZOO_PERM_CREATE; break;
            case 'd': perms |= ZOO_PERM_DELETE; break;
            case 'r': perms |= ZOO_PERM_READ; break;
            case 'w': perms |= ZOO_PERM_WRITE; break;
            case 'a': perms |= ZOO_PERM_ADMIN; break;
            default: goto invalid;
            }
        }

        if (perms == 0) {
            goto invalid;
        }

        /* as written, for a message: the scheme and the id are cut out */

        entry.len = value[i].len;
        entry.data = ngx_pstrdup(cf->pool, &value[i]);
        if (entry.data == NULL) {
            return NGX_CONF_ERROR;
        }

        *colon = '\0';
        last[-1] = '\0';

        if (ngx_zk_lock_conf_acl_id(cf, &entry, value[i].data, colon + 1)
            != NGX_CONF_OK)
        {
            return NGX_CONF_ERROR;
        }

        acl->perms = perms;
        acl->id.scheme = (char *) value[i].data;
        acl->id.id = (char *) colon + 1;

        continue;

    invalid:

        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid zk_acl entry \"%V\", must be "
                           "\"scheme:id:perms\" with perms among \"cdrwa\"",
                           &value[i]);
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


/*
 * zk_auth digest user:password
 * zk_auth digest file=<path>: the first line of the file, so that the
 * secret stays out of nginx.conf (the file is read by the master, at
 * configuration time, and may be readable by root only)
 */

char *
ngx_zk_lock_conf_auth(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    u_char              *p, *last;
    ssize_t              n;
    ngx_str_t           *value, name;
    ngx_file_t           file;
    ngx_zk_lock_conf_t  *zc;
    u_char               buf[1024];

    zc = (ngx_zk_lock_conf_t *) ((char *) conf + cmd->offset);

    if (zc->auth.data) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (ngx_strcmp(value[1].data, "digest") != 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "unsupported zk_auth scheme \"%V\", "
                           "only \"digest\"", &value[1]);
        return NGX_CONF_ERROR;
    }

    if (ngx_strncmp(value[2].data, "file=", 5) != 0) {
        zc->auth = value[2];
        goto check;
    }

    name.len = value[2].len - 5;
    name.data = value[2].data + 5;

    if (ngx_conf_full_name(cf->cycle, &name, 1) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    ngx_memzero(&file, sizeof(ngx_file_t));
    file.name = name;
    file.log = cf->log;

    file.fd = ngx_open_file(name.data, NGX_FILE_RDONLY, NGX_FILE_OPEN, 0);
    if (file.fd == NGX_INVALID_FILE) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, ngx_errno,
                           ngx_open_file_n " \"%s\" failed", name.data);
        return NGX_CONF_ERROR;
    }

    n = ngx_read_file(&file, buf, sizeof(buf), 0);

    if (ngx_close_file(file.fd) == NGX_FILE_ERROR) {
        ngx_conf_log_error(NGX_LOG_ALERT, cf, ngx_errno,
                           ngx_close_file_n " \"%s\" failed", name.data);
    }

    if (n == NGX_ERROR) {
        return NGX_CONF_ERROR;
    }

    last = ngx_strlchr(buf, buf + n, LF);
    if (last == NULL) {
        last = buf + n;
    }

    if (last > buf && last[-1] == CR) {
        last--;
    }

    zc->auth.len = last - buf;
    zc->auth.data = ngx_pnalloc(cf->pool, zc->auth.len);
    if (zc->auth.data == NULL) {
        return NGX_CONF_ERROR;
    }

    ngx_memcpy(zc->auth.data, buf, zc->auth.len);

    /* not to leave the secret on the stack */
    ngx_explicit_memzero(buf, sizeof(buf));

check:

    p = ngx_strlchr(zc->auth.data, zc->auth.data + zc->auth.len, ':');

    if (p == NULL || p == zc->auth.data) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "zk_auth digest credentials must be "
                           "\"user:password\"");
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


/* zk_lock_class <name> shares=<n> [lendable=<n>%] [default] */

char *
ngx_zk_lock_conf_class(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_zk_lock_conf_t  *zc;

    zc = (ngx_zk_lock_conf_t *) ((char *) conf + cmd->offset);

    return ngx_zk_lock_class_parse(cf, &zc->classes);
}
