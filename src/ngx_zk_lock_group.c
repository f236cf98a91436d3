
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#include <ngx_config.h>
#include <ngx_core.h>

#include "ngx_zk_lock_group.h"


/* a group's multi(): its results and their paths live until the reply */

typedef struct {
    ngx_zk_lock_node_t           *node;
    string_stat_completion_t      done;
    ngx_uint_t                    n;
    size_t                        len;        /* of one path */
    zoo_op_result_t              *results;
    u_char                       *paths;
} ngx_zk_lock_multi_t;


static void ngx_zk_lock_group_created(int rc, const void *data);
static ngx_int_t ngx_zk_lock_group_passengers(
    ngx_zk_lock_node_t *node, ngx_uint_t n);
static void ngx_zk_lock_group_board(ngx_zk_lock_passenger_t *p,
    u_char *name, size_t len);


/*
 * Creates the group's nodes in one multi(); "done" is then called as the
 * completion of a single create would be, with the last node's path and
 * without a Stat (a multi() answers none).
 */

ngx_int_t
ngx_zk_lock_group_create(ngx_zk_lock_node_t *node, u_char *path,
    string_stat_completion_t done)
{
    int                          rc;
    size_t                       len;
    ngx_uint_t                   i, n;
    zoo_op_t                    *ops;
    ngx_zk_lock_multi_t         *m;
    ngx_zk_lock_session_t       *s;

    s = node->lock->session;
    n = node->weight;

    /* the path, the server's sequence number (with a sign), a null */
    len = ngx_strlen(path) + 11 + 1;

    m = ngx_alloc(sizeof(ngx_zk_lock_multi_t)
                  + n * (sizeof(zoo_op_result_t) + len), node->log);
    if (m == NULL) {
        return ZSYSTEMERROR;
    }

    /* the client serializes the ops at once: only the results are kept */

    ops = ngx_alloc(n * sizeof(zoo_op_t), node->log);
    if (ops == NULL) {
        ngx_free(m);
        return ZSYSTEMERROR;
    }

    m->node = node;
    m->done = done;
    m->n = n;
    m->len = len;
    m->results = (zoo_op_result_t *) (m + 1);
    m->paths = (u_char *) (m->results + n);

    for (i = 0; i < n; i++) {
        zoo_create_op_init(&ops[i], (char *) path, (char *) node->info.data,
                           (int) node->info.len, s->acl,
                           ZOO_EPHEMERAL_SEQUENTIAL,
                           (char *) m->paths + i * len, (int) len);
    }

    rc = zoo_amulti(s->zh, (int) n, ops, m->results,
                    ngx_zk_lock_group_created, m);

    ngx_free(ops);

    if (rc != ZOK) {
        ngx_free(m);
    }

    return rc;
}


static void
ngx_zk_lock_group_created(int rc, const void *data)
{
    ngx_zk_lock_multi_t  *m = (ngx_zk_lock_multi_t *) data;

    u_char                   *name, *last;
    ngx_uint_t                i;
    ngx_zk_lock_node_t       *node;

    node = m->node;
    last = NULL;

    /* the sequence numbers follow the order of the ops: the last is ours */

    if (rc == ZOK
        && ngx_zk_lock_group_passengers(node, m->n - 1) == NGX_OK)
    {
        for (i = 0; i + 1 < m->n; i++) {
            name = (u_char *) strrchr((char *) m->paths + i * m->len, '/');
            name = name ? name + 1 : m->paths + i * m->len;

            ngx_zk_lock_group_board(&node->passengers[i], name,
                                    ngx_strlen(name));
        }

        last = m->paths + (m->n - 1) * m->len;

    } else if (rc == ZOK) {
        /* its nodes go with the session */
        rc = ZSYSTEMERROR;
    }

    m->done(rc, (char *) last, NULL, node);

    ngx_free(m);
}


/*
 * A group whose create reply was lost is found by its uuid: the last of
 * the children that carry it is the participant's node (its index is
 * returned, or n if none), the others are its passengers.
 */

ngx_uint_t
ngx_zk_lock_group_adopt(ngx_zk_lock_node_t *node,
    ngx_zk_lock_child_t *children, ngx_uint_t n, u_char *prefix,
    size_t len)
{
    u_char      *name;
    ngx_uint_t   i, last, found;

    last = n;
    found = 0;

    for (i = 0; i < n; i++) {
        if (ngx_strncmp(children[i].name, prefix, len) == 0) {
            if (last == n || children[i].seq > children[last].seq) {
                last = i;
            }

            found++;
        }
    }

    if (last == n || found == 1) {
        return last;
    }

    if (ngx_zk_lock_group_passengers(node, found - 1) != NGX_OK) {
        return n;
    }

    found = 0;

    for (i = 0; i < n; i++) {
        name = children[i].name;

        if (i != last && ngx_strncmp(name, prefix, len) == 0) {
            ngx_zk_lock_group_board(&node->passengers[found++], name,
                                    children[i].len);
        }
    }

    return last;
}


static ngx_int_t
ngx_zk_lock_group_passengers(ngx_zk_lock_node_t *node,
    ngx_uint_t n)
{
    ngx_zk_lock_group_free(node);

    node->passengers = ngx_alloc(n * sizeof(ngx_zk_lock_passenger_t),
                                 node->log);
    if (node->passengers == NULL) {
        return NGX_ERROR;
    }

    node->npassengers = n;

    return NGX_OK;
}


static void
ngx_zk_lock_group_board(ngx_zk_lock_passenger_t *p, u_char *name,
    size_t len)
{
    len = ngx_min(len, sizeof(p->name) - 1);

    ngx_memcpy(p->name, name, len);
    p->name[len] = '\0';
    p->seq = ngx_zk_lock_listing_seq(name, len);
}


/*
 * The passengers are deleted before the node: ZooKeeper answers in order,
 * so they are gone by the time the node's delete is answered.
 */

void
ngx_zk_lock_group_delete(ngx_zk_lock_node_t *node,
    void_completion_t done)
{
    int                          rc;
    ngx_uint_t                   i;
    ngx_zk_lock_session_t       *s;
    u_char                       buf[NGX_ZK_LOCK_BUF_LEN];

    s = node->lock->session;

    for (i = 0; i < node->npassengers; i++) {

        if (ngx_zk_lock_path_child(buf, node->lock,
                                   node->passengers[i].name)
            == NULL)
        {
            continue;
        }

        rc = zoo_adelete(s->zh, (char *) buf, -1, done, node);

        if (rc != ZOK) {
            ngx_log_error(NGX_LOG_ERR, node->log, 0,
                          "zoo_adelete(\"%s\") failed (%d: %s)",
                          buf, rc, zerror(rc));
            continue;
        }

        node->pending++;
    }
}


/* the node's delete was answered: its passengers went before it */

void
ngx_zk_lock_group_gone(ngx_zk_lock_node_t *node)
{
    ngx_uint_t  i;

    for (i = 0; i < node->npassengers; i++) {
        node->lock->owner->gone(node->lock, node->passengers[i].seq);
    }
}


void
ngx_zk_lock_group_free(ngx_zk_lock_node_t *node)
{
    if (node->passengers) {
        ngx_free(node->passengers);
        node->passengers = NULL;
        node->npassengers = 0;
    }
}
