/*
 * Unit test of src/ngx_zk_lock_listing.c, the pure arithmetic of a
 * lock's queue: built by t/listing.t against the headers of the configured
 * nginx tree, it prints TAP lines.
 */

#include <ngx_config.h>
#include <ngx_core.h>

#include "ngx_zk_lock_listing.h"
#include "unit.h"


#define UUID  "0f9e5c4a-1b2c-4d3e-8f90-a1b2c3d4e5f6"
#define NAME(kind, seq)  "_c_" UUID "-" kind seq


static void
test_seq(void)
{
    static struct {
        const char  *name;
        uint32_t     seq;
        const char  *what;
    } cases[] = {
        { NAME("lock-", "0000000042"), 42, "a mutex or semaphore node" },
        { NAME("__READ__", "0000000007"), 7, "a read node" },
        { NAME("__WRIT__", "2147483647"), 2147483647, "the last sequence" },
        { NAME("lease-", "0000000000"), 0, "a semaphore v2 lease" },
        { "a0000000000", NGX_ZK_LOCK_SEQ_NONE,
          "a container ending in 10 digits is no participant" },
        { "lock-0000000001", NGX_ZK_LOCK_SEQ_NONE,
          "a name without protection is no participant" },
        { NAME("lock", "0000000001"), NGX_ZK_LOCK_SEQ_NONE,
          "an unknown kind is no participant" },
        { NAME("lock-", "000000001x"), NGX_ZK_LOCK_SEQ_NONE,
          "a sequence that is not a number" },
        { NAME("lock-", "2147483648"), NGX_ZK_LOCK_SEQ_NONE,
          "a sequence beyond 2^31 - 1" },
        { NAME("lock-", "-2147483648"), NGX_ZK_LOCK_SEQ_WRAPPED,
          "the first negative sequence is wrapped" },
        { NAME("__WRIT__", "-2147483638"), NGX_ZK_LOCK_SEQ_WRAPPED,
          "a negative write node is wrapped" },
        { NAME("lease-", "-000000005"), NGX_ZK_LOCK_SEQ_WRAPPED,
          "a short negative sequence is wrapped" },
    };

    ngx_uint_t  i;

    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        ok(ngx_zk_lock_listing_seq((u_char *) cases[i].name,
                                        strlen(cases[i].name))
           == cases[i].seq, cases[i].what);
    }
}


static void
test_sort(void)
{
    char                      *names[] = {
        NAME("__READ__", "0000000005"),
        "a0000000000",
        NAME("__WRIT__", "0000000003"),
        NAME("__READ__", "0000000001"),
        NAME("__WRIT__", "0000000009"),
        NAME("__READ__", "0000000004"),
    };
    ngx_uint_t                 n, first_write;
    ngx_zk_lock_child_t   c[6];

    n = 6;
    first_write = ngx_zk_lock_listing_sort(c, names, n);

    ok(c[0].seq == 1 && c[1].seq == 3 && c[2].seq == 4 && c[3].seq == 5
       && c[4].seq == 9, "sorted by sequence number");
    ok(c[5].seq == NGX_ZK_LOCK_SEQ_NONE
       && strcmp((char *) c[5].name, "a0000000000") == 0,
       "a child that is no participant sorts last");
    ok(first_write == 1, "the first write node");
    ok(c[0].writes == 0 && c[2].writes == 1 && c[3].writes == 1
       && c[4].writes == 1, "write nodes ahead of each");
    ok(ngx_zk_lock_listing_index(c, n, 4,
                                      (u_char *) NAME("__READ__", "0000000004"))
       == 2, "a node's index");
    ok(ngx_zk_lock_listing_index(c, n, 4,
                                      (u_char *) NAME("__WRIT__", "0000000004"))
       == NGX_ERROR, "a node with another name is not there");
    ok(ngx_zk_lock_listing_index(c, n, 6,
                                      (u_char *) NAME("__READ__", "0000000006"))
       == NGX_ERROR, "a node with another sequence is not there");
    ok(ngx_zk_lock_listing_wrapped(c, n) == NULL, "nothing wrapped");
    ok(ngx_zk_lock_listing_sort(c, names, 0) == 0
       && ngx_zk_lock_listing_wrapped(c, 0) == NULL, "an empty listing");
}


static void
test_wrapped(void)
{
    char                      *names[] = {
        NAME("lock-", "2147483647"),
        NAME("lock-", "-2147483648"),
        "locks",
    };
    u_char                    *name;
    ngx_zk_lock_child_t   c[3];

    (void) ngx_zk_lock_listing_sort(c, names, 3);
    name = ngx_zk_lock_listing_wrapped(c, 3);

    ok(name && strcmp((char *) name, names[1]) == 0,
       "a wrapped participant is found");
    ok(c[0].seq == 2147483647, "ahead of it, the last positive one");
}


static void
test_keep(void)
{
    char                        *names[] = {
        NAME("lock-", "0000000012"),
        NAME("lock-", "0000000010"),
        "leases",
        NAME("lock-", "0000000011"),
    };
    ngx_zk_lock_child_t     c[4];
    ngx_zk_lock_entry_t    *e;
    ngx_zk_lock_listing_t   l;

    memset(&l, 0, sizeof(l));

    (void) ngx_zk_lock_listing_sort(c, names, 4);

    ok(ngx_zk_lock_listing_keep(&l, c, 4, NULL) == NGX_OK
       && l.n == 3 && l.live == 3 && l.head == 0,
       "the participants are kept, not the other child");
    ok(strcmp((char *) ngx_zk_lock_listing_name(&l, &l.entries[1]),
              names[3]) == 0, "an entry's name");

    e = ngx_zk_lock_listing_remove(&l, 11);
    ok(e == &l.entries[1] && l.live == 2 && l.head == 0,
       "a deletion in the middle is counted");
    ok(ngx_zk_lock_listing_remove(&l, 11) == NULL && l.live == 2,
       "and counted once");
    ok(ngx_zk_lock_listing_remove(&l, 13) == NULL,
       "a node created after the listing is not counted");

    e = ngx_zk_lock_listing_remove(&l, 10);
    ok(e == &l.entries[0] && l.head == 2 && l.live == 1,
       "the head moves past the nodes gone");

    (void) ngx_zk_lock_listing_remove(&l, 12);
    ok(l.head == 3 && l.live == 0, "all gone");

    ok(ngx_zk_lock_listing_keep(&l, c, 0, NULL) == NGX_OK
       && l.n == 0 && l.entries == NULL, "an empty listing is kept");

    ngx_zk_lock_listing_free(&l);
}


int
main(void)
{
    test_seq();
    test_sort();
    test_wrapped();
    test_keep();

    printf("1..%d\n", tests);

    return failed ? 1 : 0;
}
