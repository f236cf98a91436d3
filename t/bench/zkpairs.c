/*
 * The raw ZooKeeper reference for the benchmarks: create an
 * EPHEMERAL_SEQUENTIAL node and delete it, from one session of the same
 * single-threaded C client the module uses, "depth" pairs in flight at a
 * time, for a number of seconds.  Prints "pairs/s <rate>".
 *
 *   zkpairs host:port path seconds [depth]
 */

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <zookeeper/zookeeper.h>


static zhandle_t  *zh;
static const char *base;
static long        done, inflight;
static int         connected, stop;


static double
now(void)
{
    struct timeval  tv;

    gettimeofday(&tv, NULL);
    return tv.tv_sec + tv.tv_usec / 1e6;
}


static void start_pair(void);


static void
deleted(int rc, const void *data)
{
    inflight--;

    if (rc == ZOK) {
        done++;
    }

    if (!stop) {
        start_pair();
    }
}


static void
created(int rc, const char *value, const void *data)
{
    if (rc != ZOK) {
        fprintf(stderr, "create: %s\n", zerror(rc));
        exit(1);
    }

    zoo_adelete(zh, value, -1, deleted, NULL);
}


static void
start_pair(void)
{
    char  path[512];

    snprintf(path, sizeof(path), "%s/_c_bench-lock-", base);

    if (zoo_acreate(zh, path, NULL, -1, &ZOO_OPEN_ACL_UNSAFE,
                    ZOO_EPHEMERAL_SEQUENTIAL, created, NULL) != ZOK)
    {
        fprintf(stderr, "zoo_acreate failed\n");
        exit(1);
    }

    inflight++;
}


static void
watcher(zhandle_t *z, int type, int state, const char *path, void *ctx)
{
    if (type == ZOO_SESSION_EVENT && state == ZOO_CONNECTED_STATE) {
        connected = 1;
    }
}


static void
parent_done(int rc, const char *value, const void *data)
{
    if (rc != ZOK && rc != ZNODEEXISTS) {
        fprintf(stderr, "create %s: %s\n", base, zerror(rc));
        exit(1);
    }
}


static void
run_until(double deadline, int (*cond)(void))
{
    int             fd, interest, ms;
    struct pollfd   pfd;
    struct timeval  tv;

    while (now() < deadline && !cond()) {
        zookeeper_interest(zh, &fd, &interest, &tv);

        ms = tv.tv_sec * 1000 + tv.tv_usec / 1000;
        pfd.fd = fd;
        pfd.events = (interest & ZOOKEEPER_READ ? POLLIN : 0)
                     | (interest & ZOOKEEPER_WRITE ? POLLOUT : 0);
        pfd.revents = 0;

        if (poll(&pfd, fd == -1 ? 0 : 1, ms > 100 ? 100 : ms) < 0
            && errno != EINTR)
        {
            perror("poll");
            exit(1);
        }

        zookeeper_process(zh, (pfd.revents & POLLIN ? ZOOKEEPER_READ : 0)
                              | (pfd.revents & POLLOUT ? ZOOKEEPER_WRITE : 0));
    }
}


static int is_connected(void) { return connected; }
static int never(void) { return 0; }
static int drained(void) { return inflight == 0; }


int
main(int argc, char **argv)
{
    int     depth, i;
    long    pairs;
    double  seconds, t0, t1;

    if (argc < 4) {
        fprintf(stderr, "usage: zkpairs host:port path seconds [depth]\n");
        return 2;
    }

    base = argv[2];
    seconds = atof(argv[3]);
    depth = argc > 4 ? atoi(argv[4]) : 1;

    zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);

    zh = zookeeper_init(argv[1], watcher, 10000, NULL, NULL, 0);
    if (zh == NULL) {
        perror("zookeeper_init");
        return 1;
    }

    run_until(now() + 10, is_connected);
    if (!connected) {
        fprintf(stderr, "not connected\n");
        return 1;
    }

    zoo_acreate(zh, base, NULL, -1, &ZOO_OPEN_ACL_UNSAFE, 0, parent_done,
                NULL);

    t0 = now();

    for (i = 0; i < depth; i++) {
        start_pair();
    }

    run_until(t0 + seconds, never);
    stop = 1;
    t1 = now();
    pairs = done;
    run_until(t1 + 5, drained);

    printf("pairs/s %.1f\n", pairs / (t1 - t0));

    zookeeper_close(zh);

    return 0;
}
