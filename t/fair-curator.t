#!/usr/bin/perl
# fair= beside Curator clients on the same path (issue 39): an instance
# cannot tell a Curator client's requests apart, so the participants that
# report no claim are one flow together, the external one
# (src/ngx_zk_lock_share.c), rather than a flow each.
#
# One nginx x 2 workers, zk_semaphore leases=4 keep=1s fair=$arg_tenant, a
# backend of 100 ms that records every call (the independent witness).
# Two Curator clients (InterProcessSemaphore, the v1 recipe, 4 leases)
# take a lease each and hold it for 15 s; then two tenants, each with 6
# closed-loop clients on fresh connections; 2 s into their load, a third
# Curator client asks for a lease.  Max-min over three flows (the two
# tenants and the Curator clients) gives each 4/3 of a lease: the Curator
# clients hold 2 already, over their share, so the third waits while the
# tenants want more, and the instance keeps the 2 other leases.  With a
# flow per Curator client (five flows, 0.8 of a lease each), the third
# would be owed a lease, and the tenants would be left with one (0.99
# with the main before the change).  So:
#
#  - over 8 s of load, the tenants use at least 1.6 leases at the backend
#    (seat-seconds over time), and never more than 2 at once
#  - the third Curator client is not starved: it acquires within 20 s
#    (Curator's v1 semaphore wakes a waiter only when the node "leases"
#    places ahead of it goes, here the first client's, at its 15 s)
#  - once the Curator clients are done and the kept leases expired, no
#    ephemeral node is left under the path or its board
#  no [alert]/[crit]/[emerg] line, no crashed worker (checked by the
#  harness at done_testing)

use strict;
use warnings;
use Test::More;
use Time::HiRes qw(time sleep);
use POSIX ();
use lib 't/lib';
use ZkLock::Test;
use ZkLock::Curator;

require_prereqs(qw(nginx zookeeper kazoo module));
curator_prereqs();

my $LEASES = 4;
my $CALL_MS = 100;
my $CLIENTS = 6;    # closed-loop clients per tenant
my $WARMUP = 4;
my $WINDOW = 8;
my $PATH = '/t/fc';
my $KEY = 'fc';

my $zk = zk_start();
my $be = backend_start();

my $ng = nginx_start(<<"EOF", zk => $zk, backend => $be, workers => 2);
    zk_hosts %%ZK%%;
    server {
        listen 127.0.0.1:%%PORT%%;
        access_log off;
        location = /fc {
            zk_semaphore $PATH leases=$LEASES keep=1s timeout=30s
                         fair=\$arg_tenant;
            proxy_pass http://%%BACKEND%%;
        }
    }
EOF

sub uri { "/fc?key=$KEY&sleep=$CALL_MS&rec=1&tenant=$_[0]&id=$_[0]" }

# two Curator clients hold a lease each, for longer than the load
my @java = map { curator($zk, 'semaphore', $PATH, 15000, $LEASES) } 1 .. 2;
ok(!(grep { !curator_expect($_, qr/^ACQUIRED/, 30) } @java),
    'two Curator clients hold a lease each');

$be->reset;

my $dir = $ng->prefix;
my ($spec, $out) = map { "$dir/$_.$$" } qw(load.json load.out);
my $w0 = time + 0.2 + $WARMUP;
my $w1 = $w0 + $WINDOW;
open my $fh, '>', $spec or die "$spec: $!";
print $fh $ZkLock::Test::JSON->encode({ until => $w1,
    clients => [ map { my $t = $_; map { { port => $ng->port, uri => uri($t),
        gap => 0, timeout => 60 } } 1 .. $CLIENTS } qw(a b) ] });
close $fh;

my $load = fork // die "fork: $!";
if ($load == 0) {
    my $r = run_cmd([$ZkLock::Test::PYTHON, 't/lib/load.py', '--spec',
        $spec, '--out', $out], timeout => $WARMUP + $WINDOW + 60);
    POSIX::_exit($r->{rc} == 0 ? 0 : 1);
}

# the third, once the tenants' load runs
sleep $w0 - 2 - time;
my $third = curator($zk, 'semaphore', $PATH, 100, $LEASES, 30000);
ok(curator_expect($third, qr/^READY/, 30), 'a third Curator client asks');
my $asked = time;

waitpid $load, 0;
is($?, 0, 'the load ran');

my $at = curator_expect($third, qr/^ACQUIRED (\d+)/, $asked + 25 - time);

my $seat = 0;
for my $c (@{ $be->calls->{$KEY} // [] }) {
    my ($start, $end, $w) = @$c;
    $end //= $w1;
    my $lo = $start > $w0 ? $start : $w0;
    my $hi = $end < $w1 ? $end : $w1;
    $seat += ($hi - $lo) * $w if $hi > $lo;
}
my $peak = $be->stats($KEY)->{max} // 0;

diag(sprintf 'the tenants used %.2f leases over %d s, peak %d; the third '
    . 'Curator client acquired %s', $seat / $WINDOW, $WINDOW, $peak,
    $at ? sprintf('%.1f s after it asked', $at / 1000 - $asked) : 'never');

cmp_ok($seat / $WINDOW, '>=', 1.6, 'the tenants use the 2 leases the '
    . 'Curator clients leave');
cmp_ok($peak, '<=', 2, 'never more than 2 at the backend beside the '
    . "Curator clients' 2");
ok($at && $at / 1000 - $asked < 20, 'the third Curator client acquires '
    . 'within 20 s: not starved');

kill 'TERM', map { $_->{pid} } @java, $third;
waitpid $_->{pid}, 0 for @java, $third;

ok(wait_for(sub { !zk_ephemerals($zk, '/t') }, 15, 0.2),
    'no ephemeral node left under the path or its board')
    or diag(join ' ', zk_ephemerals($zk, '/t'));

$ng->stop;
$be->stop;
$zk->stop;

done_testing();
