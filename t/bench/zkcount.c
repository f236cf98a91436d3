/*
 * Copyright (C) ngx_http_zk_lock_module authors
 *
 * What the workers ask of ZooKeeper and hear from it, counted by call and
 * by watch event: an LD_PRELOAD shim over libzookeeper's asynchronous
 * calls, for benchmarks run by hand (never by prove).  Each process that
 * made a call writes its counts to $ZKCOUNT_DIR/<pid> every 32 calls or
 * events and as it exits; t/bench/README.md ("Counting the calls") says
 * how to build it, run it and add the files up.
 *
 * Calls made from inside the library (zoo_aexists() calls zoo_awexists())
 * are counted twice.  A watch set with a watcher other than the first one
 * seen is passed on uncounted, and the library's own default watcher is
 * left alone, so that ZooKeeper's dedup of watches is what it would be.
 */

#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>
#include <zookeeper/zookeeper.h>


enum {
    C_WGET_CHILDREN, C_GET_CHILDREN, C_WEXISTS, C_EXISTS, C_WGET, C_GET,
    C_CREATE, C_CREATE2, C_MULTI, C_DELETE, C_SET, E_CREATED, E_DELETED, E_CHANGED, E_CHILD,
    E_OTHER, C_N
};

static const char  *names[C_N] = {
    "wget_children", "get_children", "wexists", "exists", "wget", "get",
    "create", "create2", "multi", "delete", "set", "ev_created", "ev_deleted", "ev_changed",
    "ev_child", "ev_other"
};

static long         counts[C_N];
static long         ticks;
static char         dir[512];
static watcher_fn   watcher;
static FILE        *trace;


__attribute__((constructor)) static void
zkcount_init(void)
{
    const char  *d = getenv("ZKCOUNT_DIR");

    snprintf(dir, sizeof(dir), "%s", d ? d : ".");
}


/*
 * ZKCOUNT_TRACE=1: each call and event also goes, with its time in
 * milliseconds, to $ZKCOUNT_DIR/<pid>.trace, to see when in a case they
 * come (as the load starts, while it runs, as its kept leases expire)
 */

static void
zkcount_trace(int what)
{
    char            file[600];
    struct timeval  tv;

    if (trace == NULL) {
        if (getenv("ZKCOUNT_TRACE") == NULL) {
            return;
        }

        snprintf(file, sizeof(file), "%s/%d.trace", dir, (int) getpid());
        trace = fopen(file, "a");
        if (trace == NULL) {
            return;
        }

        setvbuf(trace, NULL, _IOLBF, 0);
    }

    gettimeofday(&tv, NULL);
    fprintf(trace, "%ld %s\n",
            (long) tv.tv_sec * 1000 + tv.tv_usec / 1000, names[what]);
}


static void
zkcount_dump(void)
{
    int    i;
    char   file[600];
    FILE  *fp;

    snprintf(file, sizeof(file), "%s/%d", dir, (int) getpid());

    fp = fopen(file, "w");
    if (fp == NULL) {
        return;
    }

    for (i = 0; i < C_N; i++) {
        fprintf(fp, "%s %ld\n", names[i], counts[i]);
    }

    fclose(fp);
}


static void
zkcount(int what)
{
    counts[what]++;
    zkcount_trace(what);

    if ((++ticks & 31) == 0) {
        zkcount_dump();
    }
}


__attribute__((destructor)) static void
zkcount_fini(void)
{
    if (ticks) {
        zkcount_dump();
    }
}


/* the event types are the library's ints: ZOO_CREATED_EVENT is 1, ... */

static void
zkcount_watcher(zhandle_t *zh, int type, int state, const char *path,
    void *ctx)
{
    zkcount(type == 1 ? E_CREATED : type == 2 ? E_DELETED
            : type == 3 ? E_CHANGED : type == 4 ? E_CHILD : E_OTHER);

    watcher(zh, type, state, path, ctx);
}


static watcher_fn
zkcount_wrap(watcher_fn w)
{
    if (w == NULL || (watcher != NULL && watcher != w)) {
        return w;
    }

    watcher = w;

    return zkcount_watcher;
}


#define ZKCOUNT_NEXT(name)                                                    \
    static __typeof__(name) *next;                                            \
    if (next == NULL) {                                                       \
        next = (__typeof__(name) *) dlsym(RTLD_NEXT, #name);                  \
    }


int
zoo_awget_children(zhandle_t *zh, const char *path, watcher_fn w, void *c,
    strings_completion_t done, const void *data)
{
    ZKCOUNT_NEXT(zoo_awget_children);
    zkcount(C_WGET_CHILDREN);
    return next(zh, path, zkcount_wrap(w), c, done, data);
}


int
zoo_aget_children(zhandle_t *zh, const char *path, int watch,
    strings_completion_t done, const void *data)
{
    ZKCOUNT_NEXT(zoo_aget_children);
    zkcount(C_GET_CHILDREN);
    return next(zh, path, watch, done, data);
}


/* the session's probes and pings ask exists("/"): not counted */

int
zoo_awexists(zhandle_t *zh, const char *path, watcher_fn w, void *c,
    stat_completion_t done, const void *data)
{
    ZKCOUNT_NEXT(zoo_awexists);

    if (strcmp(path, "/") != 0) {
        zkcount(C_WEXISTS);
    }

    return next(zh, path, zkcount_wrap(w), c, done, data);
}


int
zoo_aexists(zhandle_t *zh, const char *path, int watch,
    stat_completion_t done, const void *data)
{
    ZKCOUNT_NEXT(zoo_aexists);

    if (strcmp(path, "/") != 0) {
        zkcount(C_EXISTS);
    }

    return next(zh, path, watch, done, data);
}


int
zoo_awget(zhandle_t *zh, const char *path, watcher_fn w, void *c,
    data_completion_t done, const void *data)
{
    ZKCOUNT_NEXT(zoo_awget);
    zkcount(C_WGET);
    return next(zh, path, zkcount_wrap(w), c, done, data);
}


int
zoo_aget(zhandle_t *zh, const char *path, int watch,
    data_completion_t done, const void *data)
{
    ZKCOUNT_NEXT(zoo_aget);
    zkcount(C_GET);
    return next(zh, path, watch, done, data);
}


int
zoo_acreate(zhandle_t *zh, const char *path, const char *value,
    int len, const struct ACL_vector *acl, int mode,
    string_completion_t done, const void *data)
{
    ZKCOUNT_NEXT(zoo_acreate);
    zkcount(C_CREATE);
    return next(zh, path, value, len, acl, mode, done, data);
}


/* a lock's node (recipe.c): its stat comes with it */

int
zoo_acreate2(zhandle_t *zh, const char *path, const char *value,
    int len, const struct ACL_vector *acl, int mode,
    string_stat_completion_t done, const void *data)
{
    ZKCOUNT_NEXT(zoo_acreate2);
    zkcount(C_CREATE2);
    return next(zh, path, value, len, acl, mode, done, data);
}


/* a multi() is a group's creates (group.c): one call, one write */

int
zoo_amulti(zhandle_t *zh, int count, const zoo_op_t *ops,
    zoo_op_result_t *results, void_completion_t done, const void *data)
{
    ZKCOUNT_NEXT(zoo_amulti);
    zkcount(C_MULTI);
    return next(zh, count, ops, results, done, data);
}


int
zoo_adelete(zhandle_t *zh, const char *path, int version,
    void_completion_t done, const void *data)
{
    ZKCOUNT_NEXT(zoo_adelete);
    zkcount(C_DELETE);
    return next(zh, path, version, done, data);
}


int
zoo_aset(zhandle_t *zh, const char *path, const char *buf, int len,
    int version, stat_completion_t done, const void *data)
{
    ZKCOUNT_NEXT(zoo_aset);
    zkcount(C_SET);
    return next(zh, path, buf, len, version, done, data);
}
