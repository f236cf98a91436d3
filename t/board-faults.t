#!/usr/bin/perl
# The board node of fair= goes when the worker's pool on the path goes, even
# when that happens while the worker cannot reach ZooKeeper and its
# session survives (src/ngx_zk_lock_board.c): a worker posts its claim in
# "<path>.fair/<id>" (ephemeral) while the path is contended, and deletes
# it when its pool on the path goes (no request, the kept leases given
# back keep= after the last one).  Should that delete be lost or never
# sent, the node would stay for as long as the worker lives (the session
# is not lost): a report of a claim nobody makes.
#
# One nginx x 1 worker reaching ZooKeeper through a fault proxy,
# zk_session_timeout 8s, zk_semaphore leases=2 keep=1s fair=$arg_t; 8
# requests of 1.5 s at once from 2 tenants (a and b) make the path
# contended.  Each fault starts at once after the last answer, so that
# the pool goes (keep=1s later) inside it; it lasts 4 s, half the session
# timeout.
#
#  1. a partition (both ways' bytes swallowed, sockets left open: the
#     client notices only once the proxy closes them at the end, so the
#     pool goes while the worker believes it is connected: its delete is
#     swallowed, and lost with the connection at the heal): the board
#     node is there while the path is contended; every request is
#     answered; once the partition heals, within 6 s, no node under
#     "<path>.fair" and no ephemeral node under /bf (an independent
#     client), the same worker still running; the session survived (the
#     worker lost its connection and connected again with the same
#     session id, nothing logged as expired)
#  2. ZooKeeper unreachable (connections closed, new ones refused: the
#     worker knows at once that it is disconnected, so the pool goes with
#     no delete it could send): the same
#  3. the control, no fault: the board node goes within 5 s of the last
#     answer, no ephemeral node is left under /bf
#  no [alert]/[crit]/[emerg] line, no crashed worker (checked by the
#  harness at done_testing)

use strict;
use warnings;
use Test::More;
use Time::HiRes qw(time sleep);
use lib 't/lib';
use ZkLock::Test;
use ZkLock::FaultProxy;

require_prereqs(qw(nginx zookeeper kazoo module));

my $FAULT = 4;       # s, half the session timeout
my $HEALED = 6;      # s after the fault ends, for the node to go

my $zk = zk_start();
my $be = backend_start();
my $px = ZkLock::FaultProxy->start($zk);

sub conf {
    my ($path) = @_;
    return <<"EOF";
    zk_hosts %%ZK%%;
    zk_session_timeout 8s;
    server {
        listen 127.0.0.1:%%PORT%%;
        location = /bf {
            zk_semaphore $path leases=2 keep=1s timeout=20s fair=\$arg_t;
            proxy_pass http://%%BACKEND%%;
        }
    }
EOF
}

sub board { return zk_children($zk, "$_[0].fair") }

# the session ids the worker logged as connected, in order
sub sessions {
    my ($ng) = @_;
    return $ng->error_log =~ /zookeeper session (0x[0-9a-f]+) connected/g;
}

# 8 requests of 1.5 s at once, tenants a and b, on 2 leases: once the
# board node is there, waits for every answer; returns (the results,
# when the node was seen, when the last answer came)
sub contend {
    my ($ng, $path, $key, $t0) = @_;
    my $h = http_parallel_bg([ map { [ $ng->port,
        "/bf?key=$key&sleep=1500&t=" . ($_ % 2 ? 'a' : 'b') . "&id=$_" ] }
        1 .. 8 ], timeout => 30);
    my @seen;
    my $ok = wait_for(sub { @seen = board($path) }, 5, 0.1);
    my $seen = time;
    ok($ok, 'the path contended: the worker posted its claim on the board');
    note sprintf '+%.2f s: board node %s', $seen - $t0, join ' ', @seen;
    my $res = http_parallel_collect($h, 40);
    my $last = 0;
    $last < ($_->{end} // 0) and $last = $_->{end} for @$res;
    return ($res, $seen, $last);
}

sub answered {
    my ($res) = @_;
    my @lost = grep { ($_->{error} // '') eq 'timeout' } @$res;
    my %by;
    $by{ $_->{status} }++ for @$res;
    is(scalar @lost, 0, 'every request got an answer or a closed connection')
        or diag explain \@lost;
    note 'statuses: ' . join ' ', map { "$_: $by{$_}" } sort keys %by;
}

for my $f ([ partition => 'partition', 'a partition' ],
           [ refused   => 'cut', 'ZooKeeper unreachable (refused)' ])
{
    my ($name, $how, $what) = @$f;
    subtest "$what of $FAULT s, shorter than the session: the board node "
        . 'goes once it heals' => sub {
        my $path = "/bf/$name";
        my $ng = nginx_start(conf($path), zk => $px->hosts, backend => $be,
            workers => 1);
        ok(sessions_connected($ng), 'the worker connected through the proxy');
        my ($worker) = $ng->worker_pids;
        my ($sid) = sessions($ng);
        my $t0 = time;

        my ($res, $seen, $last) = contend($ng, $path, $name, $t0);
        my $start = $px->$how($FAULT);
        my $end = $start + $FAULT;
        answered($res);
        note sprintf '+%.2f s: last answer; +%.2f s: %s started; '
            . '+%.2f s: ended', $last - $t0, $start - $t0, $how, $end - $t0;
        # the pool goes keep= (1 s) after the last answer at the soonest:
        # inside the fault
        cmp_ok($start - $last, '<', 0.9,
            "the $how started before the pool could go");
        sleep $end - time if $end > time;

        my $gone = wait_for(sub { !board($path) }, $HEALED, 0.2);
        my $at = time;
        ok($gone, "within $HEALED s of the heal, no node under $path.fair")
            or diag explain [ board($path) ];
        note $gone ? sprintf('+%.2f s: the board node went (%.2f s after '
            . 'the heal)', $at - $t0, $at - $end)
                   : sprintf('+%.2f s: the board node still there',
            $at - $t0);
        no_ephemerals($zk, '/bf', 'after the heal', 2);

        ok(pid_alive($worker), 'the worker that posted it still runs');
        is_deeply([ $ng->worker_pids ], [ $worker ], '... the only one');
        my $log = $ng->error_log;
        like($log, qr/zookeeper connection lost, reconnecting/,
            'the worker lost its connection');
        my @ids = sessions($ng);
        ok(@ids >= 2 && !grep({ $_ ne $sid } @ids),
            "... and connected again with the same session ($sid)")
            or diag "sessions: @ids";
        unlike($log, qr/zookeeper session \S+ expired/,
            '... which never expired');

        $ng->stop;
    };
}

subtest 'the control: no fault, the board node goes keep= after the '
    . 'traffic' => sub {
    my $path = '/bf/calm';
    my $ng = nginx_start(conf($path), zk => $px->hosts, backend => $be,
        workers => 1);
    ok(sessions_connected($ng), 'the worker connected through the proxy');
    my $t0 = time;
    my ($res, $seen, $last) = contend($ng, $path, 'calm', $t0);
    answered($res);
    my $gone = wait_for(sub { !board($path) }, 5, 0.2);
    my $at = time;
    ok($gone, "within 5 s of the last answer, no node under $path.fair")
        or diag explain [ board($path) ];
    note sprintf '+%.2f s: last answer; +%.2f s: the board node went',
        $last - $t0, $at - $t0;
    no_ephemerals($zk, '/bf', 'after the traffic', 2);
    unlike($ng->error_log, qr/zookeeper connection lost|expired/,
        'no connection lost, no session expired');
    $ng->stop;
};

$px->stop;

done_testing();
