#!/usr/bin/perl
# zk_mutex across a fleet of two nginx instances: exclusion, FIFO order,
# timeouts, client aborts while waiting and while holding.

use strict;
use warnings;
use Test::More;
use Time::HiRes qw(time sleep);
use lib 't/lib';
use ZkLock::Test;

require_prereqs(qw(nginx zookeeper kazoo module));

my $zk = zk_start();
my $be = backend_start();

my $conf = <<'EOF';
    zk_hosts %%ZK%%;
    zk_session_timeout 10s;

    server {
        listen 127.0.0.1:%%PORT%%;

        location /m {
            zk_mutex /t/mutex timeout=20s;
            proxy_pass http://%%BACKEND%%;
        }

        location /short {
            zk_mutex /t/mutex timeout=1s;
            zk_lock_status 429;
            proxy_pass http://%%BACKEND%%;
        }
    }
EOF

my @fleet = map { nginx_start($conf, zk => $zk, backend => $be) } 1 .. 2;

sub no_nodes_left { no_ephemerals($zk, '/t', $_[0]) }

# the sessions connect in the background
ok(sessions_connected(@fleet), 'every worker has a session');

###############################################################################

subtest 'exclusion across the fleet' => sub {
    $be->reset;
    my @req = map { [$fleet[$_ % 2]->port, "/m?key=mx&sleep=20&id=$_"] }
        1 .. 40;
    my $res = http_parallel(\@req, timeout => 60);

    is(scalar(grep { $_->{status} == 200 } @$res), 40, 'all 40 succeed')
        or diag explain [map { $_->{status} } @$res];
    my $st = $be->stats('mx');
    is($st->{max}, 1, 'never more than one in flight');
    is($st->{count}, 40, 'backend saw 40 requests');
    no_nodes_left('exclusion');
};

subtest 'FIFO across the fleet' => sub {
    $be->reset;

    # a holder first, so that the others queue in arrival order
    my @req = map { [$fleet[$_ % 2]->port, "/m?key=fifo&sleep=150&id=$_"] }
        0 .. 7;
    my $res = http_parallel(\@req, stagger => 0.25, timeout => 60);

    is(scalar(grep { $_->{status} == 200 } @$res), 8, 'all succeed');
    is_deeply($be->stats('fifo')->{order}, [0 .. 7],
        'served in arrival order');
    is($be->stats('fifo')->{max}, 1, 'one at a time');
    no_nodes_left('fifo');
};

subtest 'timeout answers zk_lock_status and deletes the node' => sub {
    my $h = zk_hold($zk, '/t/mutex', name => curator_name());

    my $r = http_get($fleet[0]->port, '/short?key=to', timeout => 10);
    is($r->{status}, 429, 'configured status');
    ok($r->{time} > 0.8 && $r->{time} < 4, 'after about the timeout')
        or diag "took $r->{time}";

    is_deeply([zk_children($zk, '/t/mutex')], [($h->node =~ m{([^/]+)$})],
        'only the foreign holder is left');
    like($fleet[0]->error_log, qr/\[error\].*zk_mutex "\/t\/mutex" not acquired in \d+ms/,
        'not acquired is logged');

    $h->release;
    no_nodes_left('timeout');
};

subtest 'client abort while waiting' => sub {
    my $h = zk_hold($zk, '/t/mutex', name => curator_name());

    my $pid = http_abort_after($fleet[1]->port, '/m?key=abort1', 1);
    ok(wait_for(sub { zk_children($zk, '/t/mutex') == 2 }, 5),
        'the waiter queued behind the holder');
    proc_wait($pid);

    my $t0 = time;
    ok(wait_for(sub { zk_children($zk, '/t/mutex') == 1 }, 3),
        'its node is deleted once the client is gone');
    ok(time - $t0 < 1.5, 'within a second or so');

    $h->release;

    my $r = http_get($fleet[0]->port, '/m?key=abort1', timeout => 5);
    is($r->{status}, 200, 'the next request gets the lock');
    ok($r->{time} < 2, 'promptly');
    is($be->stats('abort1')->{count}, 1, 'the aborted one never ran');
    no_nodes_left('abort while waiting');
};

subtest 'client abort while holding' => sub {
    $be->reset;

    my $pid = http_abort_after($fleet[0]->port, '/m?key=abort2&sleep=5000',
        1);
    ok(wait_for(sub { $be->stats('abort2')->{inflight} == 1 }, 5),
        'the first request holds the lock');
    proc_wait($pid);

    my $t0 = time;
    my $r = http_get($fleet[1]->port, '/m?key=abort2b', timeout => 10);
    is($r->{status}, 200, 'the next request gets the lock');
    ok(time - $t0 < 2, 'without waiting for the aborted request to end')
        or diag 'took ' . (time - $t0);
    no_nodes_left('abort while holding');
};

###############################################################################

done_testing();

