
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#ifndef _NGX_ZK_LOCK_WAIT_H_INCLUDED_
#define _NGX_ZK_LOCK_WAIT_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>

#include "ngx_zk_lock_recipe.h"


extern ngx_zk_lock_owner_t  ngx_zk_lock_wait_owner;

void ngx_zk_lock_wait_event(ngx_zk_lock_session_t *s, int type,
    const char *path);


#endif /* _NGX_ZK_LOCK_WAIT_H_INCLUDED_ */
