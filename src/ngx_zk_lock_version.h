
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#ifndef _NGX_ZK_LOCK_VERSION_H_INCLUDED_
#define _NGX_ZK_LOCK_VERSION_H_INCLUDED_


/* the modules' version, both layers' and the core's: CHANGES names it */
#define NGX_ZK_LOCK_VERSION  "0.1.0"


#endif /* _NGX_ZK_LOCK_VERSION_H_INCLUDED_ */
