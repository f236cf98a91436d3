
/*
 * What the unit tests of t/lib (listing_test.c, share_test.c) need: the
 * little of nginx's core that the pure files call, and TAP output; built
 * into each test program by ZkLock::Unit.
 */

#include <ngx_config.h>
#include <ngx_core.h>

#include "unit.h"


/* what the pure files need of nginx's core, as nginx's own do it */

void *
ngx_alloc(size_t size, ngx_log_t *log)
{
    return malloc(size);
}


ngx_int_t
ngx_atoi(u_char *line, size_t n)
{
    ngx_int_t  value;

    if (n == 0) {
        return NGX_ERROR;
    }

    for (value = 0; n--; line++) {
        if (*line < '0' || *line > '9') {
            return NGX_ERROR;
        }

        value = value * 10 + (*line - '0');
    }

    return value;
}


int  tests, failed;


void
ok(int pass, const char *what)
{
    printf("%sok %d - %s\n", pass ? "" : "not ", ++tests, what);
    failed += !pass;
}
