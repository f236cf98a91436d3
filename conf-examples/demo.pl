#!/usr/bin/perl
# Demo: builds the module, starts a local ZooKeeper, a slow backend and a
# "fleet" of two nginx instances running conf-examples/upstream-cap.conf,
# sends 12 concurrent requests through both, and shows that the backend
# never sees more than the 3 leases in flight.  Everything it starts is
# stopped when it ends.
#
#   perl conf-examples/demo.pl [conf-examples/<example>.conf]

use strict;
use warnings;
use FindBin;
use Time::HiRes qw(time sleep);
use lib "$FindBin::Bin/../t/lib";
use ZkLock::Test;

chdir "$FindBin::Bin/.." or die "chdir: $!";

my $example = shift // 'conf-examples/upstream-cap.conf';

open my $fh, '<', $example or die "$example: $!\n";
my $text = do { local $/; <$fh> };
close $fh;

# The example is an http-context snippet (for /etc/nginx/conf.d/): the
# whole of it is the http{} block, pointed at this demo's servers, with its
# logs in the instance's own prefix rather than /var/log/nginx.
die "$example: $1 in it: a snippet for conf.d is expected\n"
    if $text =~ /^\s*(load_module|events|http)\b/m;
my $http = $text;
$http =~ s/zk_hosts\s+[^;\s]+?(\/\S*)?;/zk_hosts %%ZK%%$1;/;
$http =~ s/listen\s+\d+;/listen 127.0.0.1:%%PORT%%;/g;
$http =~ s/127\.0\.0\.1:9000/%%BACKEND%%/g;
$http =~ s{/var/log/nginx/}{%%PREFIX%%/logs/}g;

my ($path, $leases) = $http =~ /zk_semaphore\s+(\S+)\s+leases=(\d+)/
    or die "$example: the demo wants a zk_semaphore\n";
my ($chroot) = $http =~ /zk_hosts %%ZK%%(\/\S*);/;
$chroot //= '';

print "building the module ... ", module_path(), "\n";

my $zk = zk_start();
print "ZooKeeper          ", $zk->hosts, " (dir ", $zk->dir, ")\n";

my $be = backend_start();
print "backend            ", $be->addr, " (counts requests in flight)\n";

my @fleet = map { nginx_start($http, zk => $zk, backend => $be) } 1 .. 2;
print "nginx fleet        ", join(', ', map { '127.0.0.1:' . $_->port } @fleet),
    " (2 workers each, $example)\n";

wait_for(sub {
    (() = join('', map { $_->error_log } @fleet) =~ /session 0x\S+ connected/g)
        >= 4
}, 15) or die "the workers did not connect to ZooKeeper\n";

my $n = 12;
print "\n$n concurrent requests, half to each nginx; $path allows $leases",
    " at a time, each takes 1 s in the backend:\n\n";

my @req = map { [$fleet[$_ % 2]->port, "/api/pay?key=demo&sleep=1000&id=$_"] }
    1 .. $n;

my $pid = fork // die "fork: $!";
if ($pid == 0) {
    # meanwhile, what an independent client sees in ZooKeeper
    sleep 0.5;
    my @c = zk_children($zk, "$chroot$path");
    printf "  znodes under %s while they run: %d, e.g. %s\n\n",
        "$chroot$path", scalar @c, $c[0] // '-';
    exit 0;
}

my $t0 = time;
my $res = http_parallel(\@req, timeout => 30);
waitpid $pid, 0;

for my $i (sort { $res->[$a]{end} <=> $res->[$b]{end} } 0 .. $#$res) {
    printf "  request %2d via nginx #%d: %d after %.2f s\n", $i + 1,
        ($i + 1) % 2 + 1, $res->[$i]{status}, $res->[$i]{end} - $t0;
}

my $st = $be->stats('demo');
printf "\nbackend: %d requests served, at most %d in flight (leases=%d)\n",
    $st->{count}, $st->{max}, $leases;
printf "znodes left under %s: %d\n", "$chroot$path",
    scalar(() = zk_children($zk, "$chroot$path"));

exit($st->{max} <= $leases && $st->{count} == $n ? 0 : 1);
