#!/usr/bin/perl
# The priority classes' parts of a lock's leases on their own
# (src/ngx_zk_lock_class.c, zk_lock_class and priority=): a C program,
# t/lib/class_test.c, runs its cases (see ZkLock::Unit).

use strict;
use warnings;
use Test::More;
use lib 't/lib';
use ZkLock::Unit;

c_unit('class', [ 'ngx_zk_lock_class.c' ], 12);

done_testing();
