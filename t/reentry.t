#!/usr/bin/perl
# Re-entry: which lock a request already holds when a location, an
# internal redirect or a subrequest asks for one on the same path.
#
#  1. "zk_rwlock P write" and "zk_rwlock P read" in one location, in either
#     order, literal or from variables that evaluate equal: the write lock
#     is taken first and the read lock is a re-entry (200 at once, not a
#     wait for itself until the timeout)
#  2. a request holding "zk_semaphore /t leases=5" and redirected to
#     "zk_mutex /t" (paths from variables: literal, nginx -t refuses
#     them) is not let in as if it held the mutex: it fails at once
#     (500, "another lock on the nodes of ..."), and no two requests are
#     ever inside the mutex location
#  3. a request holding a v1 semaphore lease on /s and redirected to a
#     protocol=v2 location on /s takes a v2 lease too (Java v2 users see it)
#  4. a lock lost with its session is not held any more: after the expiry,
#     a redirect to a location with the same lock takes it again, behind the
#     request that got it meanwhile (never two in the backend)
#  no [alert]/[crit]/[emerg] line, no crashed worker, no node left

use strict;
use warnings;
use Test::More;
use Time::HiRes qw(time sleep);
use lib 't/lib';
use ZkLock::Test;
use ZkLock::FaultProxy;

require_prereqs(qw(nginx zookeeper kazoo module));

my $zk = zk_start();
my $be = backend_start();

my $ng = nginx_start(<<'EOF', zk => $zk, backend => $be, workers => 1);
    zk_hosts %%ZK%%;

    server {
        listen 127.0.0.1:%%PORT%%;

        location /rw-read-write {
            zk_rwlock /re/rw read timeout=3s;
            zk_rwlock /re/rw write timeout=3s;
            proxy_pass http://%%BACKEND%%;
        }

        location /rw-write-read {
            zk_rwlock /re/rw write timeout=3s;
            zk_rwlock /re/rw read timeout=3s;
            proxy_pass http://%%BACKEND%%;
        }

        location /rw-vars {
            zk_rwlock /re/$arg_a read timeout=3s;
            zk_rwlock /re/$arg_b write timeout=3s;
            proxy_pass http://%%BACKEND%%;
        }

        location /sem {
            zk_semaphore /re/$arg_t leases=5 timeout=5s;
            error_page 502 = @mutex;
            proxy_pass http://127.0.0.1:1;
        }

        location @mutex {
            zk_mutex /re/$arg_t timeout=5s;
            proxy_pass http://%%BACKEND%%;
        }

        location /v1 {
            zk_semaphore /re/$arg_s leases=2 timeout=5s;
            error_page 502 = @v2;
            proxy_pass http://127.0.0.1:1;
        }

        location @v2 {
            zk_semaphore /re/$arg_s leases=2 protocol=v2 timeout=5s;
            proxy_pass http://%%BACKEND%%;
        }
    }
EOF
ok(sessions_connected($ng), 'session connected');

subtest 'the write lock and the read lock on one path in one location' => sub {
    for my $uri ('/rw-read-write', '/rw-write-read', '/rw-vars?a=x&b=x',
        '/rw-vars?a=x&b=y')
    {
        my $t0 = time;
        my $r = $ng->get("$uri&key=rw");
        my $took = time - $t0;
        is($r->{status}, 200, "$uri: 200");
        cmp_ok($took, '<', 2, sprintf("$uri: at once (%.2f s)", $took));
    }
    no_ephemerals($zk, '/re', 'rwlock');
};

subtest 'a semaphore held is not the mutex on its path' => sub {
    $be->reset;
    my $res = http_parallel([ map { [$ng->port, "/sem?t=t&key=m&sleep=500"] }
        1 .. 3 ]);
    is_deeply([ map { $_->{status} } @$res ], [500, 500, 500],
        'each fails at once');
    cmp_ok($_->{time}, '<', 3, 'not at the timeout') for @$res;
    is($be->stats('m')->{count} // 0, 0, 'none was let into the mutex');
    my $says = 'zk_mutex "/re/t" is another lock on the nodes of '
        . 'zk_semaphore "/re/t", which this request holds';
    like($ng->error_log, qr/\[error\] .*\Q$says\E/, 'the log says why');
    no_ephemerals($zk, '/re', 'semaphore, then mutex');
};

subtest 'a v1 lease held is not a v2 lease' => sub {
    $be->reset;
    my $bg = http_parallel_bg([[ $ng->port, '/v1?s=s&key=v&sleep=1500' ]]);
    ok(wait_for(sub { $be->stats('v')->{inflight} }, 5),
        'in the v2 location');
    is(scalar(my @l = zk_children($zk, '/re/s/leases')), 1,
        'with a v2 lease of its own');
    is(scalar(grep { /-lock-\d{10}$/ } zk_children($zk, '/re/s')), 1,
        'and its v1 lease');
    is(http_parallel_collect($bg, 10)->[0]{status}, 200, 'served');
    no_ephemerals($zk, '/re', 'v1, then v2');
};

subtest 'a lock lost with its session is taken again' => sub {
    my $px = ZkLock::FaultProxy->start($zk);
    my $a = nginx_start(<<'EOF', zk => $px, backend => $be, workers => 1);
    zk_hosts %%ZK%%;
    zk_session_timeout 2s;

    server {
        listen 127.0.0.1:%%PORT%%;

        location /l {
            zk_mutex /re/lost timeout=20s;
            proxy_intercept_errors on;
            error_page 502 = @again;
            proxy_pass http://%%BACKEND%%;
        }

        location @again {
            zk_mutex /re/lost timeout=20s;
            rewrite ^ /again?key=lost&sleep=500? break;
            proxy_pass http://%%BACKEND%%;
        }
    }
EOF
    my $b = nginx_start(<<'EOF', zk => $zk, backend => $be, workers => 1);
    zk_hosts %%ZK%%;

    server {
        listen 127.0.0.1:%%PORT%%;

        location /l {
            zk_mutex /re/lost timeout=20s;
            proxy_pass http://%%BACKEND%%;
        }
    }
EOF
    ok(sessions_connected($a, $b), 'both connected, A through a proxy');
    $be->reset;

    # A holds, its backend answers 502 after 8 s, when A knows its session
    # expired (at the end of the 5 s cut): a redirect to @again
    my $ha = http_parallel_bg([[ $a->port, '/l?key=first&sleep=8000&status=502' ]],
        timeout => 40);
    ok(wait_for(sub { $be->stats('first')->{inflight} }, 5), 'A holds');
    my $hb = http_parallel_bg([[ $b->port, '/l?key=lost&sleep=8000' ]],
        timeout => 40);
    ok(wait_for(sub { zk_children($zk, '/re/lost') == 2 }, 5),
        'B waits behind A');

    my $off = length $a->error_log;
    $px->cut(5);                # A's 2 s session expires meanwhile
    ok(wait_for(sub {
        substr($a->error_log, $off) =~ /lost while held/
    }, 15), "A's lock was lost with its session");

    my $ra = http_parallel_collect($ha, 40)->[0];
    my $rb = http_parallel_collect($hb, 40)->[0];
    is($rb->{status}, 200, 'B got the lock');
    is($ra->{status}, 200, 'A, redirected, got it again')
        or diag explain $ra;
    is($be->stats('lost')->{count}, 2, 'both reached the backend');
    is($be->stats('lost')->{max}, 1, 'one at a time');
    no_ephemerals($zk, '/re', 'lost, then taken again');

    $a->stop;
    $px->stop;
};

done_testing();
