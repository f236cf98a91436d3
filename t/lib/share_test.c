/*
 * Unit test of src/ngx_zk_lock_share.c, the fair shares of kept leases
 * as a listing shows them: built by t/share.t against the headers of the
 * configured nginx tree (with src/ngx_zk_lock_listing.c, which parses the
 * names), it prints TAP lines.
 */

#include <ngx_config.h>
#include <ngx_core.h>

#include "ngx_zk_lock_share.h"
#include "unit.h"


/*
 * Workers by their UUID: the first 8 digits are an nginx's, the first 18
 * a worker's; W1 is the worker that computes
 */
#define W1       "_c_0a0a0a0a-1111-4111"
#define W2       "_c_0a0a0a0a-2222-4222"
#define N2W1     "_c_0b0b0b0b-1111-4111"
#define N3W1     "_c_0c0c0c0c-1111-4111"
#define NODE(w, n, seq)  w "-8111-00000000000" n "-lock-" seq
#define CURATOR(seq)  "_c_5e1f0a2b-9c3d-4e5f-a6b7-c8d9e0f1a2b3-lock-" seq
#define CURATOR2(seq)  "_c_6f2a1b3c-9c3d-4e5f-a6b7-c8d9e0f1a2b3-lock-" seq
#define CURATOR3(seq)  "_c_7a3b2c4d-9c3d-4e5f-a6b7-c8d9e0f1a2b3-lock-" seq


/*
 * fair=: the claims of the other workers, as board.c gives them; only the
 * second nginx's worker reports one
 */

static ngx_uint_t  n2_claim;

static ngx_uint_t
weigh(void *data, u_char *worker)
{
    return ngx_strncmp(worker, N2W1, NGX_ZK_LOCK_OURS_LEN) == 0
           ? n2_claim : 0;
}


/* a listing, its parts, and the shares computed from them */

static ngx_uint_t
weighed(ngx_zk_lock_share_t *sh, char **names, ngx_uint_t n,
    ngx_uint_t leases, ngx_uint_t demand, ngx_uint_t ours, ngx_uint_t theirs)
{
    ngx_uint_t            np;
    ngx_zk_lock_claim_t   claims[16];
    ngx_zk_lock_part_t    parts[16];
    ngx_zk_lock_child_t   c[16];

    ngx_memzero(sh, sizeof(ngx_zk_lock_share_t));
    sh->ours = (u_char *) W1;
    sh->leases = leases;
    sh->demand = demand;
    sh->weight = ours;
    sh->weigh = ours ? weigh : NULL;
    n2_claim = theirs;

    (void) ngx_zk_lock_listing_sort(c, names, n);

    np = ngx_zk_lock_share_parts(sh, c, n, parts);
    ngx_zk_lock_share(sh, parts, np, claims);

    return np;
}


static ngx_uint_t
compute(ngx_zk_lock_share_t *sh, char **names, ngx_uint_t n,
    ngx_uint_t leases, ngx_uint_t demand)
{
    return weighed(sh, names, n, leases, demand, 0, 0);
}


static void
test_parts(void)
{
    char                 *names[] = {
        NODE(W1, "1", "0000000001"),
        CURATOR("0000000002"),
        NODE(W1, "2", "0000000003"),
        NODE(W2, "1", "0000000004"),
        "lock-0000000005",
    };
    ngx_uint_t            np;
    ngx_zk_lock_share_t   sh;
    ngx_zk_lock_child_t   c;

    np = compute(&sh, names, 5, 8, 2000);

    ok(np == 3, "a worker's nodes are one participant, a Curator node "
       "one, a child that is no participant none");
    ok(sh.free == 4, "4 of 8 leases free");
    ok(!sh.others, "nobody else waits");

    c.name = (u_char *) NODE(W1, "1", "0000000001");
    c.len = strlen((char *) c.name);
    ok(ngx_zk_lock_share_prefix(&c) == NGX_ZK_LOCK_OURS_LEN,
       "an nginx node's participant is its worker's prefix");

    c.name = (u_char *) "lock-0000000005";
    c.len = strlen((char *) c.name);
    ok(ngx_zk_lock_share_prefix(&c) == c.len,
       "another node is a participant of its own");
}


static void
test_level(void)
{
    char                 *names[] = {
        NODE(W1, "1", "0000000001"),
        NODE(W1, "2", "0000000002"),
        NODE(N2W1, "1", "0000000003"),
        CURATOR("0000000004"),
        NODE(N2W1, "2", "0000000005"),
        NODE(W1, "3", "0000000006"),
    };
    ngx_zk_lock_share_t   sh;

    /*
     * 4 leases: this nginx holds 2 and waits, the second holds 1 and
     * waits, the Curator client holds 1 and wants no more: 3 over the
     * two nginx, 1.5 each
     */

    (void) compute(&sh, names, 6, 4, NGX_MAX_UINT32_VALUE);

    ok(sh.others, "another participant waits");
    ok(sh.floor == 1 && sh.ceil == 2, "the share is 1.5: floor 1, ceil 2");
    ok(!sh.owed, "the other nginx has its floor: not owed");
    ok(sh.lagging, "it waits below the ceil: lagging");
    ok(sh.free == 0, "no lease free");
}


static void
test_owed(void)
{
    char                 *names[] = {
        NODE(W1, "1", "0000000001"),
        NODE(W1, "2", "0000000002"),
        NODE(W1, "3", "0000000003"),
        NODE(N2W1, "1", "0000000004"),
        NODE(N3W1, "1", "0000000005"),
    };
    ngx_zk_lock_share_t   sh;

    /* 3 leases, all this worker's; two other nginx wait with none */

    (void) compute(&sh, names, 5, 3, 3000);

    ok(sh.owed, "a participant that waits with none is owed");
    ok(sh.floor == 1 && sh.ceil == 1, "the share is 1 each");
}


static void
test_workers(void)
{
    char                 *names[] = {
        NODE(W2, "1", "0000000001"),
        NODE(W2, "2", "0000000002"),
        NODE(N2W1, "1", "0000000003"),
        NODE(N2W1, "2", "0000000004"),
        NODE(W1, "1", "0000000005"),
    };
    ngx_zk_lock_share_t   sh;

    /*
     * 4 leases, 2 per nginx; this nginx's are its other worker's, and
     * this worker waits: the two workers of this nginx share its 2
     */

    (void) compute(&sh, names, 5, 4, NGX_MAX_UINT32_VALUE);

    ok(sh.floor == 1 && sh.ceil == 1, "this worker's share is 1 of its "
       "nginx's 2");
    ok(!sh.owed && !sh.others, "nobody else waits: the other nginx and "
       "this one's other worker hold 2 each");
}


static void
test_alone(void)
{
    char                 *names[] = {
        NODE(W1, "1", "0000000001"),
        NODE(W1, "2", "0000000002"),
    };
    ngx_zk_lock_share_t   sh;

    (void) compute(&sh, names, 2, 8, NGX_MAX_UINT32_VALUE);

    ok(!sh.others && !sh.owed && !sh.lagging, "alone: nobody else waits");
    ok(sh.floor == 8 && sh.ceil == 8, "alone: the whole count");
    ok(sh.free == 6, "alone: 6 free");
}


static void
test_weighed(void)
{
    char                 *names[] = {
        NODE(W1, "1", "0000000001"),
        NODE(W1, "2", "0000000002"),
        NODE(N2W1, "1", "0000000003"),
        NODE(N2W1, "2", "0000000004"),
        NODE(W1, "3", "0000000005"),
        NODE(N2W1, "3", "0000000006"),
    };
    char                 *short_names[] = {
        NODE(W1, "1", "0000000001"),
        NODE(W1, "2", "0000000002"),
        NODE(W1, "3", "0000000003"),
        NODE(N2W1, "1", "0000000004"),
        NODE(W1, "4", "0000000005"),
        NODE(N2W1, "2", "0000000006"),
    };
    ngx_zk_lock_share_t   sh;

    /* 4 leases, both nginx hold 2 and wait: this one claims 3 flows */

    (void) weighed(&sh, names, 6, 4, NGX_MAX_UINT32_VALUE, 3000, 1000);

    ok(sh.level == 1000, "weighed: a flow's level is 1 lease of 4 over "
       "4 flows");
    ok(sh.floor == 3 && sh.ceil == 3, "weighed: this nginx's share is 3");
    ok(!sh.owed && !sh.lagging, "weighed: the other holds 2 of its 1");

    (void) weighed(&sh, names, 6, 4, NGX_MAX_UINT32_VALUE, 1000, 0);

    ok(sh.floor == 2 && sh.ceil == 2, "weighed: an instance with no "
       "report is one flow, as this one: 2 each");

    /* 1 flow against 1.4: 1.67 and 2.33 leases */

    (void) weighed(&sh, names, 6, 4, NGX_MAX_UINT32_VALUE, 1000, 1400);

    ok(sh.floor == 1 && sh.ceil == 2, "weighed: 1 against 1.4 flows: "
       "this one's share 1.67");
    ok(!sh.lagging, "weighed: the other holds 2 of its 2.33: within "
       "half a lease, no rotation");

    (void) weighed(&sh, short_names, 6, 4, NGX_MAX_UINT32_VALUE, 1000,
                  1400);

    ok(sh.lagging && sh.owed, "weighed: the other holds 1 of its 2.33: "
       "owed");
}


static void
test_external(void)
{
    char                 *names[] = {
        NODE(W1, "1", "0000000001"),
        NODE(W1, "2", "0000000002"),
        CURATOR("0000000003"),
        CURATOR2("0000000004"),
        NODE(W1, "3", "0000000005"),
        CURATOR3("0000000006"),
    };
    ngx_zk_lock_share_t   sh;

    /*
     * 4 leases: this nginx (one flow) holds 2 and waits, three Curator
     * clients hold 2 and one waits: one flow together, 2 leases each
     */

    (void) weighed(&sh, names, 6, 4, NGX_MAX_UINT32_VALUE, 1000, 0);

    ok(sh.level == 2000, "external: Curator clients are one flow "
       "together: a flow's level is 2 leases");
    ok(sh.floor == 2 && sh.ceil == 2, "external: this nginx's share is 2");
    ok(!sh.owed && !sh.lagging, "external: the Curator clients hold 2 of "
       "their 2: none owed, though one waits with none");

    /* without fair=, each Curator client is a participant of its own */

    (void) weighed(&sh, names, 6, 4, NGX_MAX_UINT32_VALUE, 0, 0);

    ok(sh.owed, "external: without fair=, the Curator client that waits "
       "with none is owed one");

    /* the second nginx reports: it is a flow of its own, not external */

    names[3] = NODE(N2W1, "1", "0000000004");

    (void) weighed(&sh, names, 6, 4, NGX_MAX_UINT32_VALUE, 1000, 1000);

    ok(sh.level == 1500, "external: the second nginx is a flow of its "
       "own, which wants its 1 lease: this nginx and the Curator clients "
       "1.5 each");
}


int
main(void)
{
    test_parts();
    test_level();
    test_owed();
    test_workers();
    test_alone();
    test_weighed();
    test_external();

    printf("1..%d\n", tests);

    return failed ? 1 : 0;
}
