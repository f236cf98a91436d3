package ZkLock::Unit;
# The pure parts of the core on their own: a C program of t/lib, built with
# the sources it tests against the headers of the nginx tree that
# t/lib/build.sh configures (built first if need be), prints TAP lines,
# which become this test file's.
#
#   c_unit('share', [qw(ngx_zk_lock_share.c ngx_zk_lock_listing.c)], 17);

use strict;
use warnings;
use Exporter 'import';
use Fcntl qw(:flock);
use File::Temp qw(tempdir);
use FindBin;
use Test::More;

our @EXPORT = qw(c_unit);

sub c_unit {
    my ($name, $sources, $cases) = @_;
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
        "$tree/src/os/unix", "$tree/objs", "$top/src", "$top/t/lib";
    my @src = map { "$top/src/$_" } @$sources;

    my $out = `cc -Wall -Wextra -Wno-unused-parameter -Werror @inc \\
        -o $dir/$name $top/t/lib/${name}_test.c $top/t/lib/unit.c @src 2>&1`;
    is($?, 0, "$name and its test build with -Werror") or diag $out;

    my @tap = `$dir/$name`;
    my $rc = $?;

    for (@tap) {
        ok(!defined $1, $2) if /^(not )?ok \d+ - (.*)$/;
    }

    is($rc, 0, 'the test program exits 0');
    ok(scalar(grep { /^ok/ } @tap) >= $cases, 'it ran all its cases');
}

1;
