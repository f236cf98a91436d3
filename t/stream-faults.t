#!/usr/bin/perl
# The stream layer under a partition (ZkLock::FaultProxy cuts the worker's
# session off from ZooKeeper for 12 s; the session times out in 4 s): the
# faults of t/stream.t, in the Debian lane of CI alone, as they take 12 s
# and more each.
#
#  1. zk_lock_lost abort: the held connection is closed (and its upstream)
#     before the server could expire the session; logged LOST, with the
#     token and the node it held (issue 36, item 6); no node is left
#  2. zk_lock_fail local=1: a connection that waits in ZooKeeper's queue
#     takes a local lease once the session may have expired, not at its
#     timeout; the next one waits for that lease until the session is
#     usable again, then queues in ZooKeeper and is served through it
#     (ACQUIRED) before the local holder ends; no node is left
#  no [alert]/[crit]/[emerg] line, no crashed worker (the harness)

use strict;
use warnings;
use Test::More;
use Time::HiRes qw(time sleep);
use lib 't/lib';
use ZkLock::Test;
use ZkLock::FaultProxy;
use ZkLock::Test::Stream;

require_prereqs(qw(nginx zookeeper kazoo module stream));

my $zk = zk_start();
my $be = backend_start();
my $HTTP = stream_http();

###############################################################################

subtest 'the session expires under zk_lock_lost abort: the connection goes'
    => sub {
    my $px = ZkLock::FaultProxy->start($zk);
    my $port = free_port();
    my $ng = nginx_start($HTTP, zk => $zk, backend => $be, workers => 1,
        stream => "    zk_session_timeout 4s;\n"
            . stream_conf($px->hosts, $port =>
                'zk_mutex /st/abort timeout=30s; zk_lock_lost abort;'));
    ok(sessions_connected($ng), 'connected through the relay');

    $be->reset;
    my $h = http_parallel_bg([ [ $port,
        '/c?key=abort&sleep=60000&hangup=1' ] ], timeout => 90);
    ok(wait_for(sub { $be->stats('abort')->{inflight} == 1 }, 10),
        'a connection holds the mutex');
    my ($node) = zk_children($zk, '/st/abort');
    my $czxid = zk_get($zk, "/st/abort/$node")->{czxid};

    my $cut = $px->partition(12);
    my $r = http_parallel_collect($h, 90)->[0];
    is($r->{status}, 0, 'the held connection is closed');
    cmp_ok($r->{end} - $cut, '<', 4,
        '... before the server could expire the session (4 s)');
    is($be->stats('abort')->{hangups}, 1, '... and so is its upstream');
    like($ng->error_log, qr/zk_mutex "\/st\/abort" lost while held: no word from zookeeper, the session may expire, closing the connection/,
        '... the log says why');
    like(stream_log($ng), qr/^$port \d+ LOST \d+ $czxid \/st\/abort\/$node$/m,
        '... logged LOST, with the token and the node it held');
    no_ephemerals($zk, '/st/abort', 'after the expiry', 30);
    $ng->stop;
    $px->stop;
};

###############################################################################

subtest 'zk_lock_fail local=: a waiter moves to a local lease when the '
    . 'session may have expired' => sub {
    my $px = ZkLock::FaultProxy->start($zk);
    my $port = free_port();
    my $ng = nginx_start($HTTP, zk => $zk, backend => $be, workers => 1,
        stream => "    zk_session_timeout 4s;\n"
            . stream_conf($px->hosts, $port =>
                'zk_mutex /st/lz timeout=30s; zk_lock_fail local=1;'));
    ok(sessions_connected($ng), 'connected through the relay');

    $be->reset;
    my $h = http_parallel_bg([ [ $port, '/c?key=lz&sleep=9000&id=a' ] ],
        timeout => 60);
    ok(wait_for(sub { $be->stats('lz')->{inflight} == 1 }, 10),
        'a connection holds the mutex');
    my $w = http_parallel_bg([ [ $port, '/c?key=lz&sleep=20000&id=b' ] ],
        timeout => 60);
    ok(wait_for(sub { zk_children($zk, '/st/lz') == 2 }, 5),
        'a second one waits in ZooKeeper');

    my $cut = $px->partition(12);
    ok(wait_for(sub { $be->stats('lz')->{inflight} == 2 }, 8),
        'the waiter is served');
    cmp_ok(time - $cut, '<', 6,
        '... once the session may have expired, not at its timeout');

    # it holds the local lease well past the outage (20 s; the partition
    # lasts 12 s, and reconnecting may take a few more): the next one waits
    # for that lease until the session is usable again, then queues in
    # ZooKeeper
    my $c = http_parallel_bg([ [ $port, '/c?key=lz&sleep=100&id=c' ] ],
        timeout => 60);
    my $rc = http_parallel_collect($c, 60)->[0];
    is($rc->{status}, 200, 'the next one is served');
    cmp_ok($rc->{end} - $cut, '>', 11, '... not before the outage ended');
    my $rb = http_parallel_collect($w, 60)->[0];
    is($rb->{status}, 200, 'the one on the local lease is served');
    cmp_ok($rc->{end}, '<', $rb->{end},
        '... after the next one: that one did not wait for its lease');
    like(stream_log($ng), qr/^$port 200 LOCAL \d+ - -$/m,
        'the first waiter logged LOCAL');
    like(stream_log($ng), qr/^$port 200 ACQUIRED \d+ \d+ \/st\/lz\//m,
        'the next one ACQUIRED, through ZooKeeper');
    http_parallel_collect($h, 60);
    $ng->stop;
    $px->stop;
    no_ephemerals($zk, '/st/lz', 'after the outage', 30);
};

done_testing;
