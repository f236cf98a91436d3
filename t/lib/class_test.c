/*
 * Unit test of src/ngx_zk_lock_class.c, the priority classes' parts of a
 * lock's leases: built by t/class.t against the headers of the configured
 * nginx tree, it prints TAP lines.
 */

#include <ngx_config.h>
#include <ngx_core.h>

#include "ngx_zk_lock_class.h"
#include "unit.h"


/* the parser's errors: not called by these cases */

void ngx_cdecl
ngx_conf_log_error(ngx_uint_t level, ngx_conf_t *cf, ngx_err_t err,
    const char *fmt, ...)
{
}


static ngx_zk_lock_classes_t  classes;


static void
add(char *name, ngx_uint_t shares, ngx_uint_t lendable)
{
    ngx_zk_lock_class_t  *c;

    c = &classes.class[classes.n++];
    c->name.data = (u_char *) name;
    c->name.len = strlen(name);
    c->shares = shares;
    c->lendable = lendable;
}


/*
 * critical, standard and batch as the README's example has them, on 10
 * leases: nominal 5, 3 and 2, of which 5, 1.5 and 0.2 reserved
 */

static int
alloc(uint64_t critical, uint64_t standard, uint64_t batch,
    uint64_t want_c, uint64_t want_s, uint64_t want_b, uint64_t idle)
{
    uint64_t                   sum;
    ngx_uint_t                 i;
    ngx_zk_lock_class_alloc_t  a;

    ngx_memzero(&a, sizeof(a));
    a.demand[0] = critical;
    a.demand[1] = standard;
    a.demand[2] = batch;

    ngx_zk_lock_class_alloc(&classes, 10000, &a);

    sum = a.idle;

    for (i = 0; i < 3; i++) {
        sum += a.alloc[i];
    }

    if (a.alloc[0] != want_c || a.alloc[1] != want_s || a.alloc[2] != want_b
        || a.idle != idle || sum > 10000)
    {
        printf("# got %lu %lu %lu, idle %lu\n", (unsigned long) a.alloc[0],
               (unsigned long) a.alloc[1], (unsigned long) a.alloc[2],
               (unsigned long) a.idle);
        return 0;
    }

    return 1;
}


int
main(void)
{
    add("critical", 50, 0);
    add("standard", 30, 50);
    add("batch", 20, 90);
    classes.dflt = 1;

    ok(ngx_zk_lock_class_find(&classes, (u_char *) "batch", 5) == 2,
       "a class by its name");
    ok(ngx_zk_lock_class_find(&classes, (u_char *) "batc", 4) == 3
       && ngx_zk_lock_class_find(&classes, (u_char *) "batchx", 6) == 3,
       "no class by a prefix or a longer name");

    ok(alloc(99000, 99000, 99000, 5000, 3000, 2000, 0),
       "all want more: each its nominal part");
    ok(alloc(0, 0, 99000, 0, 0, 3500, 6500),
       "batch alone: its part and what the others lend (1.5 of standard's "
       "3), not the reserved seats");
    ok(alloc(0, 99000, 99000, 0, 3000, 2000, 5000),
       "critical idle: its 5 reserved seats stay idle");
    ok(alloc(2000, 0, 99000, 2000, 0, 3500, 4500),
       "critical wants 2: it has them, its 3 other seats stay reserved");
    ok(alloc(99000, 1000, 99000, 6071, 1000, 2428, 500),
       "standard wants 1: of the 1.5 it lends, critical and batch borrow "
       "50 to 20");
    ok(alloc(99000, 0, 0, 8300, 0, 0, 1700),
       "critical alone: all but the others' reserved seats");
    ok(alloc(5500, 0, 99000, 5500, 0, 3000, 1500),
       "one that wants less than its part of the lent seats: the rest "
       "goes to the other");
    ok(alloc(1000, 1000, 1000, 1000, 1000, 1000, 4500),
       "everyone wants less than its part: each what it wants");

    classes.n = 0;
    add("a", 1, 100);
    add("b", 3, 100);

    {
        ngx_zk_lock_class_alloc_t  a;

        ngx_memzero(&a, sizeof(a));
        a.demand[0] = 99000;
        ngx_zk_lock_class_alloc(&classes, 8000, &a);
        ok(a.alloc[0] == 8000 && a.alloc[1] == 0 && a.idle == 0,
           "all lendable: a class alone takes every lease");

        ngx_memzero(&a, sizeof(a));
        a.demand[0] = 99000;
        a.demand[1] = 99000;
        ngx_zk_lock_class_alloc(&classes, 8000, &a);
        ok(a.alloc[0] == 2000 && a.alloc[1] == 6000,
           "two that want all: by their shares, 1 to 3");
    }

    printf("1..%d\n", tests);

    return failed ? 1 : 0;
}
