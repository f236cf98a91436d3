#!/usr/bin/perl
# conf-examples/: every example passes "nginx -t" with the built module, and
# the demo of README.md runs and shows the cap holding.

use strict;
use warnings;
use Test::More;
use File::Temp qw(tempdir);
use lib 't/lib';
use ZkLock::Test;

require_prereqs(qw(nginx zookeeper kazoo module));

my $nginx = $ZkLock::Test::NGINX;
my $so = module_path();

for my $file (glob 'conf-examples/*.conf') {
    open my $fh, '<', $file or die "$file: $!";
    my $conf = do { local $/; <$fh> };
    close $fh;

    $conf =~ s{load_module\s+\S+;}{load_module $so;};

    my $dir = tempdir(CLEANUP => 1);
    mkdir "$dir/logs";
    open $fh, '>', "$dir/nginx.conf" or die $!;
    print $fh "pid $dir/nginx.pid;\nerror_log $dir/logs/error.log;\n", $conf;
    close $fh;

    my $out = `$nginx -t -p $dir -c $dir/nginx.conf 2>&1`;
    is($?, 0, "$file passes nginx -t") or diag $out;
}

my $out = `$^X conf-examples/demo.pl 2>&1`;
is($?, 0, 'the demo succeeds') or diag $out;
like($out, qr/at most 3 in flight \(leases=3\)/, 'the demo shows the cap');
like($out, qr/znodes left under \S+: 0/, 'and leaves no node');

done_testing();
