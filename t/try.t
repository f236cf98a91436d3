#!/usr/bin/perl
# timeout=0 is a try-lock: the request gets the lock if it is free when
# ZooKeeper first lists its node, and zk_lock_status at once if not. (It
# used to time out before the create's reply could arrive: always 409.)
#
#  1. uncontended, each recipe (mutex, semaphore v1 and v2, rwlock read and
#     write, zk_lock_timeout 0 at the location): 200
#  2. taken by a foreign holder (a Curator-named node): 409 at once, and
#     the request's node is gone
#  3. a semaphore of 2 with one foreign lease: 200; with two: 409
#  4. rwlock: a try to read beside a foreign reader: 200; beside a
#     foreign writer: 409
#  5. 20 tries at once on a mutex whose holder takes 1 s: at most one in
#     the backend, the rest 409, all answered within 1 s
#  6. a try while the worker's session is still connecting waits for it
#     (bounded by the session timeout): 200, not zk_lock_status
#  7. no node left; nothing logged at alert/crit/emerg

use strict;
use warnings;
use Test::More;
use Time::HiRes qw(time);
use lib 't/lib';
use ZkLock::Test;

require_prereqs(qw(nginx zookeeper kazoo module));

my $zk = zk_start();
my $be = backend_start();

my $ng = nginx_start(<<'EOF', zk => $zk, backend => $be, workers => 2);
    zk_hosts %%ZK%%;
    zk_lock_status 409;

    server {
        listen 127.0.0.1:%%PORT%%;

        location /m {
            zk_mutex /try/m timeout=0;
            proxy_pass http://%%BACKEND%%;
        }
        location /s {
            zk_semaphore /try/s leases=2 timeout=0;
            proxy_pass http://%%BACKEND%%;
        }
        location /v2 {
            zk_semaphore /try/v2 leases=2 protocol=v2 timeout=0;
            proxy_pass http://%%BACKEND%%;
        }
        location /r {
            zk_rwlock /try/rw read timeout=0;
            proxy_pass http://%%BACKEND%%;
        }
        location /w {
            zk_rwlock /try/rw write timeout=0;
            proxy_pass http://%%BACKEND%%;
        }
        location /loc {
            zk_lock_timeout 0;
            zk_mutex /try/loc;
            proxy_pass http://%%BACKEND%%;
        }
    }
EOF
ok(sessions_connected($ng), 'connected');

sub try_get {
    my ($uri) = @_;
    my $t0 = time;
    my $r = $ng->get($uri);
    return ($r->{status}, time - $t0);
}

# 1. uncontended
for my $uri (qw(/m /s /v2 /r /w /loc)) {
    my ($st, $took) = try_get("$uri?key=free");
    is($st, 200, "uncontended $uri: 200");
}

# 2. taken
{
    my $h = zk_hold($zk, '/try/m', seconds => 60);
    my ($st, $took) = try_get('/m?key=taken');
    is($st, 409, 'mutex taken: 409');
    cmp_ok($took, '<', 1, sprintf('at once (%.2f s)', $took));
    ok(wait_for(sub { zk_children($zk, '/try/m') == 1 }, 2),
        'mutex taken: the try left no node');
    $h->release;
    is((try_get('/m?key=again'))[0], 200, 'mutex free again: 200');
}

# 3. semaphore of 2
{
    my $h1 = zk_hold($zk, '/try/s', seconds => 60);
    is((try_get('/s?key=s1'))[0], 200, 'semaphore, 1 of 2 leases taken: 200');
    my $h2 = zk_hold($zk, '/try/s', seconds => 60);
    my ($st, $took) = try_get('/s?key=s2');
    is($st, 409, 'semaphore, 2 of 2 leases taken: 409');
    cmp_ok($took, '<', 1, sprintf('at once (%.2f s)', $took));
    $_->release for $h1, $h2;
}

# 4. rwlock
{
    my $r = zk_hold($zk, '/try/rw', name => curator_name('__READ__'),
        seconds => 60);
    is((try_get('/r?key=r1'))[0], 200, 'read beside a foreign reader: 200');
    is((try_get('/w?key=w1'))[0], 409, 'write beside a foreign reader: 409');
    $r->release;
    my $w = zk_hold($zk, '/try/rw', name => curator_name('__WRIT__'),
        seconds => 60);
    is((try_get('/r?key=r2'))[0], 409, 'read beside a foreign writer: 409');
    $w->release;
}

# 5. 20 tries at once
{
    $be->reset;
    my $t0 = time;
    my $res = http_parallel([ map { [$ng->port, "/m?key=burst&sleep=1000"] }
        1 .. 20 ]);
    my %st;
    $st{$_->{status}}++ for @$res;
    my $ok = $st{200} // 0;
    cmp_ok($ok, '>=', 1, "20 tries at once: $ok got the lock");
    is($ok + ($st{409} // 0), 20, 'the others got 409')
        or diag explain \%st;
    is($be->stats('burst')->{max}, 1, 'at most one in the backend');
    my @late = grep { $_->{status} == 409 && $_->{time} > 1 } @$res;
    is(scalar @late, 0, 'every 409 within 1 s');
}

# 6. a try in a worker's first moments (issue 25, item 7): the session is
#    still connecting (ZooKeeper stopped with SIGSTOP: the connection is
#    accepted, the handshake unanswered); the try waits for it, bounded
#    by the session timeout, rather than answer at once
{
    $zk->pause;
    my $fresh = nginx_start(<<'EOF', zk => $zk, backend => $be, workers => 1);
    zk_hosts %%ZK%%;
    zk_session_timeout 6s;
    zk_lock_status 409;
    server {
        listen 127.0.0.1:%%PORT%%;
        add_header X-Lock $zk_lock_status always;
        location /m {
            zk_mutex /try/first timeout=0;
            proxy_pass http://%%BACKEND%%;
        }
    }
EOF
    my $bg = http_parallel_bg([ [ $fresh->port, '/m?key=first' ] ],
        timeout => 20);
    sleep 1;
    $zk->resume;
    my $r = http_parallel_collect($bg)->[0];
    is($r->{status}, 200, 'a try while the session connects: 200')
        or diag $r->{status}, ' ', $r->{headers}{'x-lock'} // '';
    is($r->{headers}{'x-lock'}, 'ACQUIRED', 'ACQUIRED');
    cmp_ok($r->{time}, '>', 0.5, sprintf('it waited for the session '
        . '(%.2f s)', $r->{time}));
    $fresh->stop;
}

no_ephemerals($zk, '/try', 'at the end');

my $log = $ng->error_log;
like($log, qr/zk_mutex "\/try\/m" not acquired in \d+ms/,
    'the refused try is logged like a timeout');

done_testing();
