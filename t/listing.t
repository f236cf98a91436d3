#!/usr/bin/perl
# The queue arithmetic on its own (src/ngx_zk_lock_listing.c): a C
# program, t/lib/listing_test.c, runs its cases (see ZkLock::Unit).

use strict;
use warnings;
use Test::More;
use lib 't/lib';
use ZkLock::Unit;

c_unit('listing', [ 'ngx_zk_lock_listing.c' ], 25);

done_testing();
