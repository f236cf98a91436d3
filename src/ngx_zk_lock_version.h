
/*
 * Copyright (C) ngx_http_zk_lock_module authors
 */


#ifndef _NGX_ZK_LOCK_VERSION_H_INCLUDED_
#define _NGX_ZK_LOCK_VERSION_H_INCLUDED_


/* the modules' version, both layers' and the core's: CHANGES names it */
#define NGX_ZK_LOCK_VERSION  "0.1.0"

/*
 * Which build of that version: the package's version, the commit or a
 * checksum of the sources, from "config" (ngx_auto_config.h).  A reload
 * keeps the module it has loaded, so only this tells an upgrade apart.
 */
#ifndef NGX_ZK_LOCK_BUILD
#define NGX_ZK_LOCK_BUILD    "unknown"
#endif


#endif /* _NGX_ZK_LOCK_VERSION_H_INCLUDED_ */
