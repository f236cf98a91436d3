#!/usr/bin/perl
# The fair shares of kept leases on their own (src/ngx_zk_lock_share.c,
# with src/ngx_zk_lock_listing.c, which parses the names): a C program,
# t/lib/share_test.c, built against the headers of the nginx tree that
# t/lib/build.sh configures, runs its cases and prints TAP.

use strict;
use warnings;
use Test::More;
use File::Temp qw(tempdir);
use Fcntl qw(:flock);
use FindBin;

my $top = "$FindBin::Bin/..";
my $tree = ($ENV{BUILD_DIR} || "$top/t/build") . '/nginx';

# prove -j: the build is shared, and serialised as module_path() does
open my $lock, '<', "$top/t/lib/build.sh" or BAIL_OUT("build.sh: $!");
flock $lock, LOCK_EX;
unless (-f "$tree/objs/ngx_auto_config.h") {
    system('sh', "$top/t/lib/build.sh") == 0
        or BAIL_OUT('t/lib/build.sh failed');
}
close $lock;

my $dir = tempdir(CLEANUP => 1);
my @inc = map { "-I$_" } "$tree/src/core", "$tree/src/event",
    "$tree/src/os/unix", "$tree/objs", "$top/src";

my $out = `cc -Wall -Wextra -Wno-unused-parameter -Werror @inc -o $dir/share \\
    $top/t/lib/share_test.c $top/src/ngx_zk_lock_share.c \\
    $top/src/ngx_zk_lock_listing.c 2>&1`;
is($?, 0, 'the shares and their test build with -Werror') or diag $out;

my @tap = `$dir/share`;
my $rc = $?;

for (@tap) {
    ok(!defined $1, $2) if /^(not )?ok \d+ - (.*)$/;
}

is($rc, 0, 'the test program exits 0');
ok(scalar(grep { /^ok/ } @tap) >= 17, 'it ran all its cases');

done_testing();
