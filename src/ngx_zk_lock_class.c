
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#include <ngx_config.h>
#include <ngx_core.h>

#include "ngx_zk_lock_class.h"


/*
 * Priority classes, after Kubernetes' API Priority and Fairness (its
 * priority levels' nominal seats, lendablePercent, borrowing), over the
 * leases of one lock across the fleet:
 *
 *   zk_lock_class critical shares=50 lendable=0%;
 *   zk_lock_class standard shares=30 lendable=50% default;
 *   zk_lock_class batch    shares=20 lendable=90%;
 *
 * A class's nominal part of "cap" leases is cap x shares / all shares.
 * It gets what it wants of it; what it does not want, others may borrow,
 * but for the part it does not lend (reserved seats), which stays idle
 * for it; what is left of the leases goes max-min by shares between the
 * classes that want more than their nominal part.  Every instance
 * computes the same from the same demands (board.c carries them), so no
 * controller decides.  The leases themselves stay lease nodes: this only
 * says who should hold them, and the bound is exact whatever it says.
 */


static char *ngx_zk_lock_class_param(ngx_conf_t *cf, ngx_zk_lock_class_t *c,
    ngx_str_t *value, ngx_uint_t *dflt);
static uint64_t ngx_zk_lock_class_lend(ngx_zk_lock_classes_t *cl,
    ngx_zk_lock_class_alloc_t *a, uint64_t spare);


/*
 * zk_lock_class <name> shares=<1..1000> [lendable=<0..100>%] [default]:
 * a name of letters, digits, "_" and "-", which travels on the board
 */

char *
ngx_zk_lock_class_parse(ngx_conf_t *cf, ngx_zk_lock_classes_t *cl)
{
    char                 *rv;
    u_char                c;
    ngx_str_t            *value;
    ngx_uint_t            i, dflt;
    ngx_zk_lock_class_t  *cls;

    value = cf->args->elts;

    if (cl->n == NGX_ZK_LOCK_CLASS_MAX) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "too many classes: %d at most",
                           NGX_ZK_LOCK_CLASS_MAX);
        return NGX_CONF_ERROR;
    }

    if (value[1].len == 0 || value[1].len > NGX_ZK_LOCK_CLASS_NAME) {
        goto invalid;
    }

    for (i = 0; i < value[1].len; i++) {
        c = ngx_tolower(value[1].data[i]);

        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')
              || c == '_' || c == '-'))
        {
            goto invalid;
        }
    }

    if (ngx_zk_lock_class_find(cl, value[1].data, value[1].len) != cl->n) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "duplicate class \"%V\"", &value[1]);
        return NGX_CONF_ERROR;
    }

    cls = &cl->class[cl->n];
    cls->name = value[1];
    cls->shares = 0;
    cls->lendable = 0;
    dflt = 0;

    for (i = 2; i < cf->args->nelts; i++) {
        rv = ngx_zk_lock_class_param(cf, cls, &value[i], &dflt);
        if (rv != NGX_CONF_OK) {
            return rv;
        }
    }

    if (cls->shares == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "class \"%V\" needs \"shares\"", &value[1]);
        return NGX_CONF_ERROR;
    }

    if (dflt) {
        if (cl->dflt_set) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "class \"%V\": \"%V\" is the default "
                               "already", &value[1],
                               &cl->class[cl->dflt].name);
            return NGX_CONF_ERROR;
        }

        cl->dflt_set = 1;
    }

    /* without "default", the last class declared is */

    if (dflt || !cl->dflt_set) {
        cl->dflt = cl->n;
    }

    cl->n++;

    return NGX_CONF_OK;

invalid:

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "invalid class name \"%V\": 1 to %d letters, "
                       "digits, \"_\" or \"-\"", &value[1],
                       NGX_ZK_LOCK_CLASS_NAME);
    return NGX_CONF_ERROR;
}


static char *
ngx_zk_lock_class_param(ngx_conf_t *cf, ngx_zk_lock_class_t *c,
    ngx_str_t *value, ngx_uint_t *dflt)
{
    ngx_int_t  n;

    if (value->len == 7 && ngx_strncmp(value->data, "default", 7) == 0) {
        *dflt = 1;
        return NGX_CONF_OK;
    }

    if (ngx_strncmp(value->data, "shares=", 7) == 0) {
        n = ngx_atoi(value->data + 7, value->len - 7);

        if (n < 1 || n > NGX_ZK_LOCK_CLASS_SHARES) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "invalid shares \"%V\", 1 to %d expected",
                               value, NGX_ZK_LOCK_CLASS_SHARES);
            return NGX_CONF_ERROR;
        }

        c->shares = n;
        return NGX_CONF_OK;
    }

    if (ngx_strncmp(value->data, "lendable=", 9) == 0) {
        n = NGX_ERROR;

        if (value->len > 10 && value->data[value->len - 1] == '%') {
            n = ngx_atoi(value->data + 9, value->len - 10);
        }

        if (n < 0 || n > 100) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "invalid lendable \"%V\", 0%% to 100%% "
                               "expected", value);
            return NGX_CONF_ERROR;
        }

        c->lendable = n;
        return NGX_CONF_OK;
    }

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "invalid parameter \"%V\"", value);
    return NGX_CONF_ERROR;
}


/* a class by its name: its index, or "n" when there is none */

ngx_uint_t
ngx_zk_lock_class_find(ngx_zk_lock_classes_t *cl, u_char *name, size_t len)
{
    ngx_uint_t  i;

    for (i = 0; i < cl->n; i++) {
        if (cl->class[i].name.len == len
            && ngx_strncmp(cl->class[i].name.data, name, len) == 0)
        {
            return i;
        }
    }

    return cl->n;
}


/*
 * The classes' parts of "cap" (thousandths of leases) for their demands:
 * each its nominal part or what it wants if less; then the leases that
 * nobody holds nor keeps reserved, lent max-min by shares to those that
 * want more.  "idle": the reserved seats that nobody uses.
 */

void
ngx_zk_lock_class_alloc(ngx_zk_lock_classes_t *cl, uint64_t cap,
    ngx_zk_lock_class_alloc_t *a)
{
    uint64_t    all, nominal, reserved, kept, spare;
    ngx_uint_t  i;

    all = 0;

    for (i = 0; i < cl->n; i++) {
        all += cl->class[i].shares;
    }

    kept = 0;
    a->idle = 0;
    a->reserved = 0;

    for (i = 0; i < cl->n; i++) {
        nominal = cap * cl->class[i].shares / all;
        reserved = nominal * (100 - cl->class[i].lendable) / 100;

        a->nominal[i] = nominal;

        a->alloc[i] = ngx_min(a->demand[i], nominal);

        if (a->alloc[i] < reserved) {
            a->idle += reserved - a->alloc[i];
            a->reserved |= 1 << i;
            kept += reserved;

        } else {
            kept += a->alloc[i];
        }
    }

    spare = (cap > kept) ? cap - kept : 0;

    while (spare) {
        spare = ngx_zk_lock_class_lend(cl, a, spare);
    }
}


/*
 * One round of lending: "spare" split by shares between the classes that
 * want more; those that want less than their part take what they want,
 * and the rest goes round again.  What is left to lend: 0 once nobody
 * wants more, or every class took its part.
 */

static uint64_t
ngx_zk_lock_class_lend(ngx_zk_lock_classes_t *cl,
    ngx_zk_lock_class_alloc_t *a, uint64_t spare)
{
    uint64_t    shares, part, want, left;
    ngx_uint_t  i, short_;

    shares = 0;

    for (i = 0; i < cl->n; i++) {
        if (a->demand[i] > a->alloc[i]) {
            shares += cl->class[i].shares;
        }
    }

    if (shares == 0) {
        return 0;
    }

    /* first those that want less than their part: they leave the rest */

    short_ = 0;
    left = spare;

    for (i = 0; i < cl->n; i++) {
        want = a->demand[i] - ngx_min(a->demand[i], a->alloc[i]);
        part = spare * cl->class[i].shares / shares;

        if (want && want <= part) {
            a->alloc[i] += want;
            left -= want;
            short_ = 1;
        }
    }

    if (short_) {
        return left;
    }

    for (i = 0; i < cl->n; i++) {
        if (a->demand[i] > a->alloc[i]) {
            a->alloc[i] += spare * cl->class[i].shares / shares;
        }
    }

    return 0;
}
