
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#ifndef _NGX_ZK_LOCK_GROUP_H_INCLUDED_
#define _NGX_ZK_LOCK_GROUP_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>

#include "ngx_zk_lock_recipe.h"


/*
 * A weighted participant: "weight" nodes created by one multi(), so that
 * ZooKeeper gives them consecutive sequence numbers, with nobody else's
 * node among them.  The last one is the participant's own node, which
 * waits and holds as any other: it holds once fewer than "leases" children
 * come before it, and then so do the others, its passengers, which only
 * count against the leases.  Groups never wait for each other: the one
 * whose last node comes first holds first (Curator's acquire(qty) takes
 * its leases one after the other, and two clients that each hold part of
 * what they need can wait for each other until they time out).
 */

/*
 * A group's multi() stays well under ZooKeeper's jute.maxbuffer (1 MB by
 * default: a larger request makes the server drop the connection).  A
 * create in it costs its path, the sequence number, and at most about
 * NGX_ZK_LOCK_MULTI_OP bytes more: the node's data (256 at most), its
 * ACL, the headers.
 */

#define NGX_ZK_LOCK_MULTI_MAX  (512 * 1024)
#define NGX_ZK_LOCK_MULTI_OP   (256 + 256)

#define ngx_zk_lock_group_max(path_len)                                  \
    (NGX_ZK_LOCK_MULTI_MAX / ((path_len) + 11 + NGX_ZK_LOCK_MULTI_OP))


ngx_int_t ngx_zk_lock_group_create(ngx_zk_lock_node_t *node,
    u_char *path, string_stat_completion_t done);
ngx_uint_t ngx_zk_lock_group_adopt(ngx_zk_lock_node_t *node,
    ngx_zk_lock_child_t *children, ngx_uint_t n, u_char *prefix,
    size_t len);
void ngx_zk_lock_group_delete(ngx_zk_lock_node_t *node,
    void_completion_t done);
void ngx_zk_lock_group_gone(ngx_zk_lock_node_t *node);
void ngx_zk_lock_group_free(ngx_zk_lock_node_t *node);


#endif /* _NGX_ZK_LOCK_GROUP_H_INCLUDED_ */
