#!/usr/bin/perl
# Bounded waiting:
#
#  1. max_waiting=3 on a held mutex: 3 requests wait (and time out), the
#     others get zk_lock_status (429 here) at once, with Retry-After (the
#     lock's timeout) and $zk_lock_status REJECTED, without a node
#  2. zk_lock_max_waiting 4: at most 4 waiting requests per worker, over
#     all paths
#  3. a bad max_waiting fails "nginx -t"
#  4. zk_lock_max_waiting 0 fails "nginx -t"
#  5. by default a worker's waiters are bounded by worker_connections,
#     counted in requests: 100 HTTP/2 streams of one connection queue 16
#     nodes at most with worker_connections 16
#  6. zk_lock_max_path: a longer path gets 400
#  no node left, no alert/crash line

use strict;
use warnings;
use Test::More;
use Time::HiRes qw(time sleep);
use lib 't/lib';
use ZkLock::Test;

require_prereqs(qw(nginx zookeeper kazoo module));

my $zk = zk_start();
my $be = backend_start();

my $ng = nginx_start(<<'EOF', zk => $zk, backend => $be, workers => 1);
    zk_hosts %%ZK%%;
    zk_lock_max_waiting 4;
    server {
        listen 127.0.0.1:%%PORT%%;
        add_header X-Lock $zk_lock_status always;
        zk_lock_status 429;

        location /q {
            zk_mutex /q/m max_waiting=3 timeout=2s;
            proxy_pass http://%%BACKEND%%;
        }
        location /a {
            zk_mutex /q/a timeout=2s;
            proxy_pass http://%%BACKEND%%;
        }
        location /b {
            zk_semaphore /q/b leases=1 protocol=v2 timeout=2s;
            proxy_pass http://%%BACKEND%%;
        }
    }
EOF
ok(sessions_connected($ng), 'the worker has a session');

my $name = '_c_00000000-0000-4000-8000-000000000002-lock-';

sub bad_lines {
    return grep { /\[(?:alert|crit|emerg)\]/ || /exited on signal/ }
        split /\n/, $ng->error_log;
}

subtest 'max_waiting=3' => sub {
    my $h = zk_hold($zk, '/q/m', name => $name, seconds => 60);
    my $peak = 0;
    my $bg = http_parallel_bg([ map { [ $ng->port, "/q?key=q&id=$_" ] }
        1 .. 10 ], timeout => 20, stagger => 0.05);
    wait_for(sub {
        my $n = () = zk_children($zk, '/q/m');
        $peak = $n if $n > $peak;
        return 0;
    }, 1.5, 0.05);
    my $res = http_parallel_collect($bg, 20);

    my @rej = grep { ($_->{headers}{'x-lock'} // '') eq 'REJECTED' } @$res;
    my @out = grep { ($_->{headers}{'x-lock'} // '') eq 'TIMEOUT' } @$res;
    is(scalar @out, 3, '3 waited and timed out');
    is(scalar @rej, 7, '7 rejected');
    is_deeply([ map { $_->{status} } @rej ], [ (429) x 7 ],
        'rejected: zk_lock_status');
    ok(!grep({ $_->{time} > 1 } @rej), 'rejected at once');
    is_deeply([ map { $_->{headers}{'retry-after'} // '-' } @rej ],
        [ (2) x 7 ], 'Retry-After: the 2 s timeout');
    cmp_ok($peak, '<=', 4, "at most the holder and 3 nodes ($peak)");
    is($be->stats('q')->{count}, 0, 'backend never reached');
    like($ng->error_log, qr/zk_mutex "\/q\/m" rejected: too many requests waiting/,
        'logged');
    $h->release;
    no_ephemerals($zk, '/q', 'max_waiting', 15);
};

subtest 'zk_lock_max_waiting 4, over all paths' => sub {
    my @h = (zk_hold($zk, '/q/a', name => $name, seconds => 60),
        zk_hold($zk, '/q/b/locks', name => $name, seconds => 60));
    my $res = http_parallel([ map { [ $ng->port, ($_ % 2 ? '/a' : '/b')
        . "?key=ab&id=$_" ] } 1 .. 10 ], timeout => 20, stagger => 0.05);
    my %n;
    $n{ $_->{headers}{'x-lock'} // '-' }++ for @$res;
    is($n{TIMEOUT}, 4, '4 waited');
    is($n{REJECTED}, 6, '6 rejected');
    $_->release for @h;

    # a holder that had to reconnect to close leaves its node until its
    # session expires (10 s)
    no_ephemerals($zk, '/q', 'zk_lock_max_waiting', 15);
};

subtest 'bad max_waiting' => sub {
    for my $v ('0', 'x', '-1') {
        my ($rc, $out) = nginx_test_conf(<<"EOF", zk => $zk);
    zk_hosts %%ZK%%;
    server {
        listen 127.0.0.1:%%PORT%%;
        location / { zk_mutex /q/x max_waiting=$v; }
    }
EOF
        isnt($rc, 0, "max_waiting=$v: nginx -t fails");
        like($out, qr/invalid max_waiting "max_waiting=\Q$v\E"/,
            '... naming it');
    }
};

subtest 'zk_lock_max_waiting 0' => sub {
    my ($rc, $out) = nginx_test_conf(<<'EOF', zk => $zk);
    zk_hosts %%ZK%%;
    zk_lock_max_waiting 0;
EOF
    isnt($rc, 0, 'nginx -t fails');
    like($out, qr/value must be equal to or greater than 1/,
        '... naming the bound');
};

# One HTTP/2 connection carries up to 128 requests: the default bound of a
# worker's waiters is worker_connections counted in requests, not in
# connections.
subtest 'the default bound counts HTTP/2 streams' => sub {
    my ($minor) = `$ZkLock::Test::NGINX -v 2>&1` =~ m{nginx/1\.(\d+)\.};
    my ($listen, $on) = ($minor // 0) >= 25 ? ('', 'http2 on;') : (' http2', '');
    my $h2 = nginx_start(<<"EOF", zk => $zk, backend => $be, workers => 1,
    zk_hosts %%ZK%%;
    server {
        listen 127.0.0.1:%%PORT%%$listen;
        $on
        location / {
            zk_mutex /q/h2 timeout=5s;
            proxy_pass http://%%BACKEND%%;
        }
    }
EOF
        connections => 16);
    ok(sessions_connected($h2), 'connected');
    my $h = zk_hold($zk, '/q/h2', seconds => 60);
    my $client = ZkLock::Test::spawn(name => 'nghttp', cmd => ['nghttp',
        '-n', '-t', '20', '-m', 100,
        'http://127.0.0.1:' . $h2->port . '/?key=h2']);
    my $most = 0;
    wait_for(sub {
        my $n = () = zk_children($zk, '/q/h2');
        $most = $n if $n > $most;
        return 0;
    }, 3, 0.1);
    cmp_ok($most - 1, '<=', 16, "at most worker_connections (16) of 100 "
        . "streams queue (saw " . ($most - 1) . ')');
    cmp_ok($most - 1, '>=', 4, '... but some do');
    like($h2->error_log, qr/zk_mutex "\/q\/h2" rejected: too many requests/,
        'the others are rejected');
    kill 'TERM', $client;
    proc_wait($client, 5);
    $h->release;
    $h2->stop;
    no_ephemerals($zk, '/q', 'HTTP/2');
};

subtest 'zk_lock_max_path' => sub {
    my $lp = nginx_start(<<'EOF', zk => $zk, backend => $be, workers => 1);
    zk_hosts %%ZK%%;
    zk_lock_max_path 16;
    server {
        listen 127.0.0.1:%%PORT%%;
        location / {
            zk_mutex /lp/$arg_x timeout=2s;
            proxy_pass http://%%BACKEND%%;
        }
    }
EOF
    is($lp->get('/?x=' . ('a' x 12))->{status}, 200, '16 bytes: 200');
    is($lp->get('/?x=' . ('a' x 13))->{status}, 400, '17 bytes: 400');
    like($lp->error_log, qr/zk_mutex path "\/lp\/\$arg_x" is longer than 16 bytes/,
        'logged');
    my ($rc, $out) = nginx_test_conf(<<'EOF', zk => $zk);
    zk_hosts %%ZK%%;
    zk_lock_max_path 5000;
EOF
    isnt($rc, 0, 'zk_lock_max_path 5000: nginx -t fails');
    like($out, qr/value must be between 2 and 4096/, '... naming the bounds');
    $lp->stop;
    no_ephemerals($zk, '/lp', 'max_path');
};

is_deeply([ bad_lines() ], [], 'no alert/crash lines');

done_testing;
