#!/usr/bin/perl
# A participant at several locks, and the bounds of a lock's queue, where
# the gate decides (issue 36, items 7 to 10):
#
#  7. max_waiting= counts the requests that wait behind a holder, not
#     those on their way: a burst of 5 on 5 free leases with
#     max_waiting=2 is served whole, and a burst beyond the leases is
#     still refused
#  8. zk_lock_fail open while ZooKeeper hangs (SIGSTOP: its connections
#     stay open, nothing answers): a request whose wait ends then is let
#     through (BYPASSED), not refused
#  9. a lock lost (its node deleted, zk_lock_lost finish) while the
#     request waits for a later one is taken again before the request
#     goes on: never two in flight on a mutex; the same through an
#     error_page redirect whose location re-enters the first lock
# 10. max_waiting= of a location's second lock is checked before that
#     lock is queued: with it held elsewhere, 3 requests at once, one
#     waits for it and the others are refused at once, with Retry-After
use strict;
use warnings;
use Test::More;
use Time::HiRes qw(time sleep);
use lib 't/lib';
use ZkLock::Test;

require_prereqs(qw(nginx zookeeper kazoo python module));

my $zk = zk_start();
my $be = backend_start();

subtest 'max_waiting= counts the queue, not the arrivals' => sub {
    my $ng = nginx_start(<<'EOF', zk => $zk, backend => $be, workers => 1);
    zk_hosts %%ZK%%;
    zk_lock_status 429;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /mw {
            zk_semaphore /gt/mw leases=5 max_waiting=2 timeout=10s;
            proxy_pass http://%%BACKEND%%;
        }
    }
EOF
    ok(sessions_connected(10, $ng), 'session up');
    my $ok = 0;
    for my $round (1 .. 5) {
        my $res = http_parallel([ map { [ $ng->port, "/mw?key=mw&sleep=100" ] }
            1 .. 5 ], timeout => 10);
        $ok += grep { $_->{status} == 200 } @$res;
        sleep 0.3;
    }
    is($ok, 25, 'bursts of 5 on 5 free leases, max_waiting=2: 25 of 25 '
        . 'served');
    my $res = http_parallel([ map { [ $ng->port, "/mw?key=mw&sleep=1000" ] }
        1 .. 12 ], timeout => 10);
    my %st;
    $st{ $_->{status} }++ for @$res;
    is($st{200}, 7, '12 at once: 5 hold and 2 wait, served') or diag(explain \%st);
    is($st{429}, 5, '... 5 refused') or diag(explain \%st);
    $ng->stop;
    no_ephemerals($zk, '/gt/mw', 'max_waiting');
};

subtest 'zk_lock_fail open while ZooKeeper hangs' => sub {
    my $ng = nginx_start(<<'EOF', zk => $zk, backend => $be, workers => 1);
    zk_hosts %%ZK%%;
    zk_session_timeout 6s;
    zk_lock_fail open;
    add_header X-Lock $zk_lock_status always;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /hold {
            zk_mutex /gt/open timeout=10s;
            proxy_pass http://%%BACKEND%%;
        }
        location /o {
            zk_mutex /gt/open timeout=3s;
            proxy_pass http://%%BACKEND%%;
        }
    }
EOF
    ok(sessions_connected(10, $ng), 'session up');
    my $bg = http_parallel_bg([ [ $ng->port, '/hold?key=h&sleep=6000' ] ],
        timeout => 20);
    ok(wait_for(sub { $be->stats('h')->{inflight} }, 5), 'one holds');
    my $t0 = time;
    my $waiter = http_parallel_bg([ [ $ng->port, '/o?key=o' ] ],
        timeout => 20);
    sleep 0.2;
    $zk->pause;
    my ($r) = @{ http_parallel_collect($waiter) };
    my $took = time - $t0;
    $zk->resume;
    is($r->{status}, 200, 'the waiter ends while ZooKeeper hangs: 200');
    is($r->{headers}{'x-lock'}, 'BYPASSED', '... BYPASSED');
    cmp_ok($took, '<', 5.5, sprintf('... at its timeout (%.1f s)', $took));
    like($ng->error_log, qr/bypassed after \d+ms: no answer from zookeeper/,
        'logged: no answer from zookeeper');
    http_parallel_collect($bg);
    $ng->stop;
    no_ephemerals($zk, '/gt/open', 'fail open', 15);
};

# the ephemeral node of $path held by nobody but the request that waits
sub only_node {
    my ($path) = @_;
    my @n = zk_children($zk, $path);
    return @n == 1 ? "$path/$n[0]" : undef;
}

subtest 'a lock lost while a later one is awaited is taken again' => sub {
    my $ng = nginx_start(<<'EOF', zk => $zk, backend => $be, workers => 1);
    zk_hosts %%ZK%%;
    zk_lock_lost finish;
    add_header X-Lock $zk_lock_status always;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /holdb {
            zk_mutex /gt/lf/b timeout=10s;
            proxy_pass http://%%BACKEND%%;
        }
        location /a {
            zk_mutex /gt/lf/a timeout=10s;
            proxy_pass http://%%BACKEND%%;
        }
        location /ab {
            zk_mutex /gt/lf/a timeout=10s;
            zk_mutex /gt/lf/b timeout=10s;
            proxy_pass http://%%BACKEND%%;
        }
        location /ep {
            zk_mutex /gt/lf/a timeout=10s;
            proxy_intercept_errors on;
            error_page 500 = /ab?key=a&sleep=500;
            proxy_pass http://%%BACKEND%%;
        }
    }
EOF
    ok(sessions_connected(10, $ng), 'session up');

    for my $via ('/ab?key=a&sleep=500', '/ep?key=x&status=500') {
        $be->reset;
        my $holdb = http_parallel_bg([ [ $ng->port,
            '/holdb?key=b&sleep=3000' ] ], timeout => 20);
        ok(wait_for(sub { $be->stats('b')->{inflight} }, 5), "$via: b held");
        my $r1 = http_parallel_bg([ [ $ng->port, $via ] ], timeout => 20);
        my $node;
        ok(wait_for(sub { $node = only_node('/gt/lf/a') }, 5),
            "$via: R1 holds a, waits for b");
        sleep 0.3;
        zk_delete($zk, $node);
        my $r2 = http_parallel_bg([ [ $ng->port, '/a?key=a&sleep=2500' ] ],
            timeout => 20);
        my ($res1) = @{ http_parallel_collect($r1) };
        my ($res2) = @{ http_parallel_collect($r2) };
        http_parallel_collect($holdb);
        is($res1->{status} . $res2->{status}, '200200', "$via: both 200");
        is($be->stats('a')->{max}, 1, "$via: one at a time behind /gt/lf/a");
        like($ng->error_log, qr/lost before the request went on: taken again/,
            "$via: logged") if $via =~ /^\/ab/;
    }
    $ng->stop;
    no_ephemerals($zk, '/gt/lf', 'lost while waiting');
};

subtest 'max_waiting= of a second lock' => sub {
    my $ng = nginx_start(<<'EOF', zk => $zk, backend => $be, workers => 1);
    zk_hosts %%ZK%%;
    zk_lock_status 429;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /holdb {
            zk_mutex /gt/mw2/b timeout=10s;
            proxy_pass http://%%BACKEND%%;
        }
        location /x {
            zk_semaphore /gt/mw2/a leases=2 timeout=8s;
            zk_mutex /gt/mw2/b max_waiting=1 timeout=4s;
            proxy_pass http://%%BACKEND%%;
        }
    }
EOF
    ok(sessions_connected(10, $ng), 'session up');
    $be->reset;
    my $holdb = http_parallel_bg([ [ $ng->port, '/holdb?key=b&sleep=3000' ] ],
        timeout => 20);
    ok(wait_for(sub { $be->stats('b')->{inflight} }, 5), 'b held');
    my $res = http_parallel([ map { [ $ng->port, "/x?key=x&sleep=100" ] }
        1 .. 3 ], timeout => 20);
    http_parallel_collect($holdb);
    my @fast = grep { $_->{status} == 429 && $_->{time} < 1 } @$res;
    is(scalar(grep { $_->{status} == 200 } @$res), 1, 'one waited for b');
    is(scalar @fast, 2, 'two refused at once')
        or diag(join ' ', map { "$_->{status}/$_->{time}" } @$res);
    is(scalar(grep { $_->{headers}{'retry-after'} } @fast), 2,
        '... with Retry-After');
    $ng->stop;
    no_ephemerals($zk, '/gt/mw2', 'max_waiting of a second lock');
};

done_testing;
