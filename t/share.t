#!/usr/bin/perl
# The fair shares of kept leases on their own (src/ngx_zk_lock_share.c,
# with src/ngx_zk_lock_listing.c, which parses the names): a C program,
# t/lib/share_test.c, runs its cases (see ZkLock::Unit).

use strict;
use warnings;
use Test::More;
use lib 't/lib';
use ZkLock::Unit;

c_unit('share', [ 'ngx_zk_lock_share.c', 'ngx_zk_lock_listing.c' ], 24);

done_testing();
