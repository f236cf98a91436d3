#!/usr/bin/perl
# Kept leases where workers outnumber leases (issue 26, item 1): 3 nginx x
# 2 workers (6 sessions) on zk_semaphore leases=2 keep=1s, clients on
# fresh connections.  Every share is below one lease; a worker used to
# hand a lease back the moment its node came to hold, before any request
# ran on it, and queue again: a livelock (2 requests served in 6 s at 24
# sessions on 8 leases, 3 600 ZooKeeper writes a request).
#
#  1. the same load with and without keep=: with keep, at least half as
#     many requests served as without, every one 200, the backend never
#     above 2, and fewer ZooKeeper writes a request than without
#  2. every instance is served (nobody starves)
#  3. a reload while a request waits in the worker it replaces: that
#     worker serves it once the lease frees (issue 26, item 6)
#  4. a count lowered from 4 to 1 under load (wrk, 8 connections): the
#     requests that start 1.2 s later run one at a time (issue 26, item 3)
#  5. keep=30s on a path built from a variable: 40 values leave no lease
#     kept once idle (issue 26, item 4)
#  6. no node left once nginx stopped
#  7. at its share (another holds the other of 2 leases), a worker whose
#     second request waits for its own busy lease queues no node for it:
#     10 pairs, at most 4 ZooKeeper writes; one that waits beyond the
#     patience does queue, and is served on the lease the other gives back
#     (issue 38, item 2)
#  8. the packets a change of the path's children costs ZooKeeper: at 6
#     holders less than twice those at 2 (issue 38, item 2)
#  9. 6 nginx each holding its share of 6 leases and waiting for one more:
#     the waiting nodes watch the first waiter's window and one node each
#     behind it (at most 3 x 6 data watches on the server), not a window
#     each (36); every request served once the holders end, never more
#     than 6 at once (issue 38, item 2b)
# 10. 2 nginx holding the 2 leases, 6 more waiting, each for one: the
#     waiters behind the first "leases" waiters (4 here) hear of each
#     change as the first ones do, and watch no window either (at most 2
#     data watches on the server; 13 with a window each); all served, never
#     more than 2 at once (issue 38, item 2b)
#  no [alert]/[crit]/[emerg] line, no crashed worker

use strict;
use warnings;
use Test::More;
use Time::HiRes qw(time sleep);
use POSIX ();
use lib 't/lib';
use ZkLock::Test;

require_prereqs(qw(nginx zookeeper kazoo module));
ZkLock::Test::_find_in_path('wrk')
    or BAIL_OUT('wrk is missing: run t/lib/install-deps.sh');

my $zk = zk_start();
my $be = backend_start();

my $conf = <<'EOF';
    zk_hosts %%ZK%%;
    server {
        listen 127.0.0.1:%%PORT%%;
        add_header X-Lock $zk_lock_status always;
        location /keep {
            zk_semaphore /kf/keep leases=2 keep=1s timeout=20s;
            proxy_pass http://%%BACKEND%%;
        }
        location /plain {
            zk_semaphore /kf/plain leases=2 timeout=20s;
            proxy_pass http://%%BACKEND%%;
        }
    }
EOF

my @fleet = map { nginx_start($conf, zk => $zk, backend => $be,
    workers => 2) } 1 .. 3;
ok(sessions_connected(@fleet), '3 nginx x 2 workers connected');

sub zxid {
    my ($z) = (zk_4lw($zk->port, 'srvr') // '') =~ /Zxid: 0x([0-9a-f]+)/;
    return defined $z ? hex $z : 0;
}

# rounds of 12 requests at once, each on a fresh connection, for $secs
sub load {
    my ($loc, $secs) = @_;
    my (%per, $n, $bad);
    my $z0 = zxid();
    my $t0 = time;
    my $i = 0;
    while (time - $t0 < $secs) {
        my $res = http_parallel([ map {
            my $ng = $fleet[$_ % 3];
            [ $ng->port, "/$loc?key=$loc&sleep=20&id=" . $i++ ]
        } 1 .. 12 ], timeout => 25);
        for my $k (0 .. $#$res) {
            if ($res->[$k]{status} == 200) {
                $n++;
                $per{ ($k + 1) % 3 }++;
            } else {
                $bad++;
            }
        }
    }
    my $writes = zxid() - $z0;
    return { n => $n // 0, bad => $bad // 0, per => \%per,
        writes => $writes, secs => time - $t0 };
}

my $plain = load('plain', 4);
my $keep  = load('keep', 4);
note sprintf 'without keep: %d served, %.2f writes a request; '
    . 'with keep: %d served, %.2f writes a request',
    $plain->{n}, $plain->{writes} / ($plain->{n} || 1),
    $keep->{n}, $keep->{writes} / ($keep->{n} || 1);

is($keep->{bad}, 0, 'with keep: every request 200');
cmp_ok($keep->{n}, '>=', 0.5 * $plain->{n},
    "with keep: at least half as many served as without ($keep->{n} vs "
    . "$plain->{n})");
cmp_ok($keep->{writes} / ($keep->{n} || 1), '<',
    $plain->{writes} / ($plain->{n} || 1),
    'with keep: fewer ZooKeeper writes a request than without');
is($be->stats('keep')->{max}, 2, 'the backend never had more than 2');
is(scalar(grep { ($keep->{per}{$_} // 0) > 0 } 0 .. 2), 3,
    'every instance was served')
    or diag explain $keep->{per};

$_->stop for @fleet;

# Issue 26, item 6: a request that waits in a worker that a reload
# replaces is served by that worker once a lease frees, not given back
# and queued again until its timeout
subtest 'a reload: the old worker serves its waiting request' => sub {
    my $ng = nginx_start(<<'EOF', zk => $zk, backend => $be, workers => 1);
    zk_hosts %%ZK%%;
    server {
        listen 127.0.0.1:%%PORT%%;
        add_header X-Lock $zk_lock_status always;
        location /one {
            zk_semaphore /kf/one leases=1 keep=1s timeout=10s;
            proxy_pass http://%%BACKEND%%;
        }
    }
EOF
    ok(sessions_connected($ng), 'connected');
    $be->reset;
    my $bg = http_parallel_bg([
        [ $ng->port, '/one?key=one&sleep=1500&id=1' ],
        [ $ng->port, '/one?key=one&sleep=100&id=2' ],
    ], timeout => 20, stagger => 0.3);
    ok(wait_for(sub { $be->stats('one')->{inflight} == 1
                      && zk_children($zk, '/kf/one') == 2 }, 5),
        'one holds, one waits in the worker (a node queued for it)');
    my $z0 = zxid();
    ok($ng->reload, 'reload');
    my $res = http_parallel_collect($bg, 20);
    is($res->[0]{status}, 200, 'the holder: 200');
    is($res->[1]{status}, 200, 'the waiter: 200');
    cmp_ok($res->[1]{time}, '<', 5, sprintf('... once the lease freed '
        . '(%.1f s), not at its timeout', $res->[1]{time}));
    cmp_ok(zxid() - $z0, '<', 40, 'no create and delete loop meanwhile');
    is($be->stats('one')->{max}, 1, 'never two at the backend');
    $ng->stop;
};

# Issue 26, item 3: a count lowered under load applies at the next
# listing: the kept leases beyond it are never granted again
subtest 'a lowered count applies to kept leases' => sub {
    zk_set($zk, '/kf-count', '4');
    my $ng = nginx_start(<<'EOF', zk => $zk, backend => $be, workers => 1);
    zk_hosts %%ZK%%;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /kz {
            zk_semaphore /kf/kz leases=zk:/kf-count leases_default=4
                         keep=2s timeout=20s;
            proxy_ignore_client_abort on;
            proxy_pass http://%%BACKEND%%;
        }
    }
EOF
    ok(sessions_connected($ng), 'connected');
    ok(wait_for(sub { $ng->error_log =~ /lease count "\/kf-count" is now 4/ },
        10), 'the count of 4 read');
    $be->reset;

    # wrk keeps 8 connections busy: the kept leases never idle long
    my $wrk = sub {
        my ($key, $secs) = @_;
        return spawn(cmd => [ 'wrk', '-t1', '-c8', "-d${secs}s",
            'http://127.0.0.1:' . $ng->port . "/kz?key=$key&sleep=50" ]);
    };
    my $before = $wrk->('kz-before', 3);
    sleep 1.2;
    zk_set($zk, '/kf-count', '1');
    sleep 1.2;
    my $after = $wrk->('kz-after', 2);
    proc_wait($before, 10);
    proc_wait($after, 10);
    is($be->stats('kz-before')->{max}, 4, 'before: 4 at a time');
    # proxy_ignore_client_abort: wrk closes its connections mid-request
    # when it stops; without it the lease would go while the backend
    # still works on the aborted request (see the README)
    is($be->stats('kz-after')->{max}, 1,
        'started 1.2 s after the count went to 1: 1 at a time');
    cmp_ok($be->stats('kz-after')->{count}, '>', 5, '... and served');
    $ng->stop;
};

# Issue 26, item 4: keep= on a path built from a variable keeps a lease
# only while the path is in use
subtest 'keep= on a variable path: no lease pinned per value' => sub {
    my $ng = nginx_start(<<'EOF', zk => $zk, backend => $be, workers => 1);
    zk_hosts %%ZK%%;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /kv {
            zk_semaphore /kf/v/$arg_t leases=2 keep=30s timeout=5s;
            proxy_pass http://%%BACKEND%%;
        }
    }
EOF
    ok(sessions_connected($ng), 'connected');
    my $res = http_parallel([ map { [ $ng->port, "/kv?t=v$_&key=kv" ] }
        1 .. 40 ], timeout => 20);
    is(scalar(grep { $_->{status} == 200 } @$res), 40, '40 values: 200');
    ok(wait_for(sub { !zk_ephemerals($zk, '/kf/v') }, 3),
        'no lease kept for 30 s per value: none left within 3 s');
    my $r = $ng->get('/kv?t=hot&key=kv');
    is($r->{status}, 200, 'a value in use: 200');
    $ng->stop;
};

ok(wait_for(sub { !zk_ephemerals($zk, '/kf') }, 10), 'no node left');

# Issue 38, item 2: a worker at its share whose next request waits for
# its own busy lease queues no node for it at once: the lease frees first
# (at 32 nginx of 2 clients each on 32 leases, a node queued and deleted
# unused for the second client made 0.14 to 0.37 writes a request)
subtest 'at its share, a worker waits for its own lease first' => sub {
    my $ng = nginx_start(<<'EOF', zk => $zk, backend => $be, workers => 1);
    zk_hosts %%ZK%%;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /sh {
            zk_semaphore /kf/share leases=2 keep=5s timeout=20s;
            proxy_pass http://%%BACKEND%%;
        }
    }
EOF
    ok(sessions_connected($ng), 'connected');
    is($ng->get('/sh?key=sh&sleep=0')->{status}, 200,
        'nginx keeps a lease');

    # another participant holds the other lease: nginx's share is the
    # one it has
    my $h = zk_hold($zk, '/kf/share', seconds => 60);
    sleep 0.3;    # nginx lists the path: nobody waits, one lease each

    my $z0 = zxid();
    my $ok = 0;
    for my $i (1 .. 10) {
        my $res = http_parallel([ [ $ng->port, "/sh?key=sh&sleep=40&id=a$i" ],
            [ $ng->port, "/sh?key=sh&sleep=0&id=b$i" ] ],
            timeout => 20, stagger => 0.01);
        $ok += grep { $_->{status} == 200 } @$res;
    }
    my $writes = zxid() - $z0;
    is($ok, 20, '10 pairs of requests: all 200');
    cmp_ok($writes, '<=', 4, "the second of each waited for the first's "
        . "lease: $writes ZooKeeper writes for 10 pairs (a node queued and "
        . 'deleted for each: 20)');
    is($be->stats('sh')->{max}, 1, 'one at a time at the backend');

    # a request that waits beyond the patience does queue, and gets the
    # lease the other gives back before nginx's own frees
    my $bg = http_parallel_bg([ [ $ng->port, '/sh?key=sh2&sleep=4000&id=long' ],
        [ $ng->port, '/sh?key=sh2&sleep=0&id=short' ] ], timeout => 30,
        stagger => 0.05);
    ok(wait_for(sub { zk_children($zk, '/kf/share') == 3 }, 3),
        'after the patience, a node queues for the waiting request');
    $h->release;
    my $res = http_parallel_collect($bg, 30);
    is($res->[1]{status}, 200, 'the waiting request: 200');
    cmp_ok($res->[1]{time}, '<', 3.5, sprintf('... on the lease the other '
        . 'gave back (%.1f s), not after the long one (4 s)',
        $res->[1]{time}));
    $ng->stop;
};

# issue 38, item 2: what a change of a path's children costs ZooKeeper as
# the holders grow.  Each nginx (1 worker) holds a kept lease, idle; a
# foreign client makes 40 changes at once (participants that hold a free
# lease at once and go).  Each holder used to list the path again for
# every change it heard of: the packets per change grew with the holders
# (8 at 2 nginx, 20 at 6: 2.5 times); a holder now lists again at most
# once a 100 ms.
sub packets {
    my $m = zk_4lw($zk->port, 'mntr') // '';
    my ($in) = $m =~ /zk_packets_received\s+(\d+)/;
    my ($out) = $m =~ /zk_packets_sent\s+(\d+)/;
    return ($in // 0) + ($out // 0);
}

# an nginx with one gated location, and sessions that outlive the pauses
# of a loaded machine
sub one_location {
    my ($loc, $directive) = @_;
    return <<"EOF";
    zk_hosts %%ZK%%;
    zk_session_timeout 30s;
    server {
        listen 127.0.0.1:%%PORT%%;
        location $loc {
            $directive
            proxy_pass http://%%BACKEND%%;
        }
    }
EOF
}

sub per_change {
    my ($n) = @_;
    my $path = "/kf/churn$n";
    my $leases = $n + 8;
    my $c = one_location('/c',
        "zk_semaphore $path leases=$leases keep=30s timeout=5s;");
    my @ng = map { nginx_start($c, zk => $zk, backend => $be,
        workers => 1) } 1 .. $n;
    sessions_connected(@ng);
    is(scalar(grep { $_->get('/c?key=churn')->{status} == 200 } @ng), $n,
        "$n nginx: each holds a kept lease");
    sleep 0.5;
    my $p0 = packets();
    my $changes = zk_churn($zk, $path, 20, 0);
    sleep 0.5;
    my $per = (packets() - $p0) / $changes;
    is(scalar(zk_children($zk, $path)), $n, "$n nginx: still a lease each");
    $_->stop for @ng;
    return $per;
}

subtest 'a change costs about the same with 2 and 6 holders' => sub {
    my $two = per_change(2);
    my $six = per_change(6);
    note sprintf 'packets per change: %.1f at 2 nginx, %.1f at 6', $two,
        $six;
    cmp_ok($six / $two, '<', 2, sprintf('6 holders: %.2f times the packets '
        . 'of 2 per change (%.1f, %.1f), less than 2', $six / $two, $six,
        $two));
};

# the data watches on the server (wchs counts them, not children watches)
sub data_watches {
    my $w = zk_4lw($zk->port, 'wchs') // '';
    note "wchs: $w";
    my ($watches) = $w =~ /Total watches:\s*(\d+)/;
    return $watches;
}

# The waiters' watches, read from the server:
# each waiting node used to watch the "leases" nodes ahead of it, so that
# a deletion woke every waiter whose window held it; then the first waiter
# a window and each one behind it a node (10 here); now a pool that hears
# of every change lists instead, and its waiting node watches at most its
# own node
subtest 'waiting nginx that hear of each change watch no window' => sub {
    my $n = 6;
    my $c = one_location('/w',
        'zk_semaphore /kf/windows leases=6 keep=30s timeout=20s;');
    my @ng = map { nginx_start($c, zk => $zk, backend => $be,
        workers => 1) } 1 .. $n;
    ok(sessions_connected(@ng), 'every worker has a session');
    $be->reset;

    # one request each first: each instance holds its share, 1 lease
    my $first = http_parallel_bg([ map { [ $_->port,
        '/w?key=windows&sleep=4000' ] } @ng ], timeout => 30);
    ok(wait_for(sub { ($be->stats('windows')->{inflight} // 0) == $n }, 10),
        "$n requests run, one on each nginx");
    my $second = http_parallel_bg([ map { [ $_->port,
        '/w?key=windows&sleep=200' ] } @ng ], timeout => 30);
    ok(wait_for(sub { scalar(zk_children($zk, '/kf/windows')) == 2 * $n },
        5), 'each nginx queued one more node: ' . 2 * $n . ' children');
    sleep 0.5;
    my $watches = data_watches();
    ok(defined $watches && $watches <= $n, sprintf('%s data watches on '
        . 'the server, at most %d (a waiting node\'s own; a window each was '
        . '%d, a window and a node for each waiter behind the first 10)',
        $watches // 'no', $n, $n * $n));
    my @r = (@{ http_parallel_collect($first, 40) },
             @{ http_parallel_collect($second, 40) });
    is(scalar(grep { $_->{status} == 200 } @r), 2 * $n,
        'every request served (200) once the holders ended');
    cmp_ok($be->stats('windows')->{max}, '<=', $n, "never more than $n "
        . 'at the backend at once');
    $_->stop for @ng;
};

# The waiters behind the first "leases" waiters watched the "leases" nodes
# ahead of them, each a window of their own, and every deletion there fired
# a watch and a listing for each; up to 4 x "leases" places back they now
# hear of the changes as the first waiters do, at their holders' pace
subtest 'waiters behind the first watch no window either' => sub {
    my $n = 8;
    my $c = one_location('/f',
        'zk_semaphore /kf/far leases=2 keep=30s timeout=20s;');
    my @ng = map { nginx_start($c, zk => $zk, backend => $be,
        workers => 1) } 1 .. $n;
    ok(sessions_connected(@ng), 'every worker has a session');
    $be->reset;

    my $first = http_parallel_bg([ map { [ $_->port,
        '/f?key=far&sleep=4000' ] } @ng[0, 1] ], timeout => 30);
    ok(wait_for(sub { ($be->stats('far')->{inflight} // 0) == 2 }, 10),
        '2 requests run, on 2 nginx');
    my $rest = http_parallel_bg([ map { [ $_->port,
        '/f?key=far&sleep=200' ] } @ng[2 .. $n - 1] ], timeout => 30);
    ok(wait_for(sub { scalar(zk_children($zk, '/kf/far')) == $n }, 5),
        ($n - 2) . " more queued: $n children");
    sleep 0.5;
    my $watches = data_watches();
    ok(defined $watches && $watches <= 2, sprintf('%s data watches on the '
        . 'server, at most 2 (the first waiter\'s own node; a window for '
        . 'each waiter behind the first 2: 13 before)', $watches // 'no'));
    my @r = (@{ http_parallel_collect($first, 40) },
             @{ http_parallel_collect($rest, 40) });
    is(scalar(grep { $_->{status} == 200 } @r), $n,
        'every request served (200) once the holders ended');
    cmp_ok($be->stats('far')->{max}, '<=', 2,
        'never more than 2 at the backend at once');
    $_->stop for @ng;
};

done_testing();
