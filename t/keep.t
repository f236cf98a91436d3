#!/usr/bin/perl
# zk_semaphore keep= (issue 18): a worker keeps the leases its requests
# held and hands them to its next requests without a ZooKeeper call.
#
#  1. nginx -t: keep= on zk_mutex, with protocol=v2, an invalid time
#  2. the hot path: requests on a kept lease make no ZooKeeper write (the
#     server's zxid does not move), share one node and its token, wait 0 ms,
#     and the metrics count them; the node's data says it is kept
#  3. a lease idle for keep is given back, not before
#  4. the exact bound: 2 nginx x 2 workers and a Curator client on one
#     path never run more than the leases at once; no node left after keep
#  5. a Curator client that waits gets a lease idle in nginx at once, not
#     after keep (30 s here), and the metrics count a lease given back;
#     and while nginx keeps every lease busy, before the load ends
#  6. a session that expires takes its kept leases with it; the next
#     request holds a new node
#  7. on reload the old worker's kept lease goes with it
#  8. a weighted request does not keep its nodes
#  no [alert]/[crit]/[emerg] line, no crashed worker

use strict;
use warnings;
use Test::More;
use POSIX ();
use Time::HiRes qw(time sleep);
use lib 't/lib';
use ZkLock::Test;
use ZkLock::Curator;
use ZkLock::FaultProxy;

require_prereqs(qw(nginx zookeeper kazoo module));
curator_prereqs();

my $zk = zk_start();
my $be = backend_start();

sub zxid {
    my ($z) = (zk_4lw($zk->port, 'srvr') // '') =~ /Zxid: 0x([0-9a-f]+)/;
    return hex($z // 0);
}

sub lock_stats {
    my ($ng, $path) = @_;
    my $j = $ZkLock::Test::JSON->decode($ng->get('/status')->{body});
    my ($l) = grep { $_->{path} eq $path } @{ $j->{locks} };
    return $l // {};
}

sub conf {
    my ($directive, %o) = @_;
    my $extra = $o{extra} // '';
    return <<"EOF";
    zk_hosts %%ZK%%;
    $extra
    server {
        listen 127.0.0.1:%%PORT%%;
        location /k {
            $directive
            add_header X-Token \$zk_lock_token;
            add_header X-Wait \$zk_lock_wait_time;
            add_header X-Node \$zk_lock_node;
            proxy_pass http://%%BACKEND%%;
        }
        location = /status { zk_lock_status_page; }
    }
EOF
}

###############################################################################

subtest 'nginx -t' => sub {
    for my $case (
        [ 'keep= on zk_mutex', 'zk_mutex /m keep=1s;',
          qr/"keep" is only for "zk_semaphore"/ ],
        [ 'keep= with protocol=v2',
          'zk_semaphore /s leases=2 protocol=v2 keep=1s;',
          qr/"keep" is not for "protocol=v2"/ ],
        [ 'keep=abc', 'zk_semaphore /s leases=2 keep=abc;',
          qr/invalid keep "keep=abc"/ ],
    ) {
        my ($name, $directive, $re) = @$case;
        my ($rc, $out) = nginx_test_conf(<<"EOF");
    zk_hosts 127.0.0.1:1;
    server {
        listen 127.0.0.1:%%PORT%%;
        location / { $directive }
    }
EOF
        isnt($rc, 0, "$name: nginx -t fails");
        like($out, $re, '... naming the problem');
    }
};

###############################################################################

subtest 'the hot path: no ZooKeeper call on a kept lease' => sub {
    my $ng = nginx_start(conf('zk_semaphore /k/hot leases=4 keep=5s '
        . 'timeout=5s;'), zk => $zk, backend => $be, workers => 1);
    ok(sessions_connected($ng), 'connected');

    my $first = $ng->get('/k?key=hot');
    is($first->{status}, 200, 'the first request queues a node');
    my $token = $first->{headers}{'x-token'};

    my $z0 = zxid();
    my @r = map { $ng->get('/k?key=hot') } 1 .. 20;
    my $z1 = zxid();

    is(scalar(grep { $_->{status} == 200 } @r), 20, '20 more: all 200');
    is($z1, $z0, 'ZooKeeper wrote nothing for them (zxid unchanged)');
    is(scalar(grep { ($_->{headers}{'x-token'} // '') eq $token } @r), 20,
        'all on the first one\'s lease: the same token');
    is(scalar(grep { ($_->{headers}{'x-wait'} // '') eq '0' } @r), 20,
        '$zk_lock_wait_time 0');

    my @c = zk_children($zk, '/k/hot');
    is(scalar @c, 1, 'one node, kept');
    like(zk_get($zk, "/k/hot/$c[0]")->{data} // '', qr/pid \d+ .*kept for 5000ms idle/,
        'its data says it is kept');

    my $st = lock_stats($ng, '/k/hot');
    cmp_ok($st->{reused}, '>=', 20, 'metrics: reused');
    is($st->{kept}, 1, 'metrics: one lease kept idle');
    is($st->{acquired}, 21, 'metrics: reused requests count as acquired');
    $ng->stop;
};

###############################################################################

subtest 'a lease idle for keep is given back' => sub {
    my $ng = nginx_start(conf('zk_semaphore /k/idle leases=4 keep=1s '
        . 'timeout=5s;'), zk => $zk, backend => $be, workers => 1);
    ok(sessions_connected($ng), 'connected');

    is($ng->get('/k?key=idle')->{status}, 200, 'a request');
    my $done = time;
    is(scalar(zk_children($zk, '/k/idle')), 1, 'its node is kept');

    ok(wait_for(sub { !zk_children($zk, '/k/idle') }, 5, 0.05),
        'and gone after keep');
    cmp_ok(time - $done, '>=', 0.7, '... not before');
    is(lock_stats($ng, '/k/idle')->{kept}, 0, 'metrics: none kept');
    $ng->stop;
};

###############################################################################

subtest 'the exact bound: 2 nginx x 2 workers and Curator' => sub {
    my @ng = map {
        nginx_start(conf('zk_semaphore /k/bound leases=3 keep=1s '
            . 'timeout=20s;'), zk => $zk, backend => $be, workers => 2)
    } 1 .. 2;
    ok(sessions_connected($_), 'connected') for @ng;
    $be->reset;

    my $url = 'http://' . $be->addr . '/curator?key=bound&sleep=300';
    my $bg = http_parallel_bg([ map {
        my $ng = $ng[$_ % 2];
        [ $ng->port, "/k?key=bound&sleep=150&id=$_" ]
    } 1 .. 40 ], timeout => 60);

    # a Curator client that holds a lease for as long as its GET takes
    ok(wait_for(sub { $be->stats('bound')->{inflight} }, 10),
        'nginx requests run');
    my $c = curator($zk, 'semaphore', '/k/bound', 0, 3, 20000, $url);
    ok(curator_expect($c, qr/^ACQUIRED/, 25), 'Curator acquired a lease');
    ok(curator_expect($c, qr/^RELEASED/, 25), 'and released it');

    my $res = http_parallel_collect($bg, 60);
    is(scalar(grep { $_->{status} == 200 } @$res), 40, 'all 40 served');
    my $st = $be->stats('bound');
    cmp_ok($st->{max}, '<=', 3, 'never more than 3 at once, Curator '
        . 'included') or diag explain $st;
    is($st->{count}, 41, 'the backend saw 40 requests and Curator');

    ok(wait_for(sub { !zk_children($zk, '/k/bound') }, 6),
        'no node left after keep');
    $_->stop for @ng;
};

###############################################################################

subtest 'a Curator waiter gets a kept lease at once' => sub {
    my $ng = nginx_start(conf('zk_semaphore /k/give leases=3 keep=30s '
        . 'timeout=5s;'), zk => $zk, backend => $be, workers => 1);
    ok(sessions_connected($ng), 'connected');

    my $res = http_parallel([ map { [ $ng->port, '/k?key=give&sleep=200' ] }
        1 .. 3 ]);
    is(scalar(grep { $_->{status} == 200 } @$res), 3, '3 requests at once');
    ok(wait_for(sub { lock_stats($ng, '/k/give')->{kept} == 3 }, 5),
        'their 3 leases are kept');
    is(scalar(zk_children($zk, '/k/give')), 3, '3 nodes');

    my $t0 = time;
    my $c = curator($zk, 'semaphore', '/k/give', 0, 3, 20000);
    my $at = curator_expect($c, qr/^ACQUIRED (\d+)/, 25);
    ok($at, 'Curator acquired');
    cmp_ok($at / 1000 - $t0, '<', 5, 'within seconds, not after keep (30 s)')
        if $at;
    note sprintf 'Curator acquired %.2f s after it started', $at / 1000 - $t0
        if $at;
    ok(curator_expect($c, qr/^RELEASED/, 10), 'Curator released');

    my $st = lock_stats($ng, '/k/give');
    cmp_ok($st->{given_back}, '>=', 1, 'metrics: given back for a waiter');
    is(lock_stats($ng, '/k/give')->{kept} + $st->{given_back}, 3,
        'the others stay kept');
    $ng->stop;
    ok(wait_for(sub { !zk_children($zk, '/k/give') }, 5),
        'none left once nginx stops');
};

###############################################################################

subtest 'a Curator waiter gets a lease while nginx keeps all of them busy' => sub {
    my $ng = nginx_start(conf('zk_semaphore /k/busy leases=3 keep=30s '
        . 'timeout=10s;'), zk => $zk, backend => $be, workers => 1);
    ok(sessions_connected($ng), 'connected');
    $be->reset;

    # 6 clients, each a request of 100 ms after another, for 6 s
    my @pids = map {
        my $pid = fork // die "fork: $!";
        if ($pid == 0) {
            my $end = time + 6;
            http_get($ng->port, '/k?key=busy&sleep=100') while time < $end;
            POSIX::_exit(0);
        }
        ZkLock::Test::register_pid($pid, 'client');
        $pid
    } 1 .. 6;

    ok(wait_for(sub { $be->stats('busy')->{inflight} == 3 }, 10),
        'nginx runs 3 requests at a time');
    my $t0 = time;
    my $c = curator($zk, 'semaphore', '/k/busy', 0, 3, 20000);
    my $at = curator_expect($c, qr/^ACQUIRED (\d+)/, 25);
    ok($at && $at / 1000 < $t0 + 4, 'Curator acquired while the load '
        . 'lasts, not once it ends (Curator waits for the one node 3 '
        . 'places ahead: nginx gives that one back)')
        or diag sprintf 'acquired %.2f s after it started',
            ($at // 0) / 1000 - $t0;
    ok(curator_expect($c, qr/^RELEASED/, 10), 'Curator released');
    proc_wait($_, 20) for @pids;
    cmp_ok($be->stats('busy')->{max}, '<=', 3, 'never more than 3 at once');
    $ng->stop;
};

###############################################################################

subtest 'session expiry drops the kept leases' => sub {
    my $px = ZkLock::FaultProxy->start($zk);
    my $ng = nginx_start(conf('zk_semaphore /k/exp leases=3 keep=30s '
        . 'timeout=5s;', extra => 'zk_session_timeout 2s;'),
        zk => $px->hosts, backend => $be, workers => 1);
    ok(sessions_connected($ng), 'connected through the proxy');

    my $r = $ng->get('/k?key=exp');
    is($r->{status}, 200, 'a request');
    is(scalar(zk_children($zk, '/k/exp')), 1, 'its lease is kept');

    my $off = length $ng->error_log;
    $px->cut(5);
    ok(wait_for(sub {
        substr($ng->error_log, $off) =~ /zookeeper session 0x\S+ expired/
    }, 20), 'the session expired');
    is(scalar(zk_children($zk, '/k/exp')), 0, 'the kept node went with it');

    ok(wait_for(sub { $ng->get('/k?key=exp')->{status} == 200 }, 15),
        'a request after the expiry holds');
    my $after = $ng->get('/k?key=exp');
    isnt($after->{headers}{'x-token'}, $r->{headers}{'x-token'},
        'on a new node');
    $ng->stop;
    $px->stop;
};

###############################################################################

subtest 'reload: the old worker gives its lease back' => sub {
    my $ng = nginx_start(conf('zk_semaphore /k/reload leases=3 keep=30s '
        . 'timeout=5s;'), zk => $zk, backend => $be, workers => 1);
    ok(sessions_connected($ng), 'connected');

    is($ng->get('/k?key=reload')->{status}, 200, 'a request');
    my ($old) = zk_children($zk, '/k/reload');
    ok($old, 'its lease is kept');

    ok($ng->reload, 'reloaded');
    ok(wait_for(sub { !grep { $_ eq $old } zk_children($zk, '/k/reload') },
        10), 'the old worker\'s node is gone');
    ok(wait_for(sub { $ng->get('/k?key=reload')->{status} == 200 }, 10),
        'the new worker serves');
    $ng->stop;
};

###############################################################################

subtest 'a weighted request keeps nothing' => sub {
    my $ng = nginx_start(conf('zk_semaphore /k/w leases=4 keep=30s '
        . 'weight=2 timeout=5s;'), zk => $zk, backend => $be, workers => 1);
    ok(sessions_connected($ng), 'connected');

    my $bg = http_parallel_bg([ [ $ng->port, '/k?key=w&sleep=1000' ] ]);
    ok(wait_for(sub { zk_children($zk, '/k/w') == 2 }, 5),
        'two nodes while it holds');
    my $res = http_parallel_collect($bg, 10);
    is($res->[0]{status}, 200, 'served');
    ok(wait_for(sub { !zk_children($zk, '/k/w') }, 3), 'none after');
    $ng->stop;
};

done_testing;
