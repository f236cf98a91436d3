#!/usr/bin/perl
# zk_lock_fail local=<n> (issue 17, item 5): while a worker has no usable
# session (the moments at which "open" lets requests through), at most n
# requests per lock of an nginx instance, all its workers together, pass,
# in the order they came; the others wait up to their timeout and get
# zk_lock_status.  $zk_lock_status is LOCAL, a warn line says so once per
# outage, the metrics count it.
#
#  1. nginx -t: local=0, local=abc, an unknown value
#  2. ZooKeeper stopped: a request that waited in ZooKeeper takes a local
#     lease once its session may have expired (jeopardy), not before; 2 instances x 2 workers, local=2: every request
#     passes (LOCAL), never more than 2 per instance at the backend, 4 in
#     all; local=1: one at a time, in the order the requests came, across
#     the instance's workers; one that cannot get a lease in its timeout
#     gets 503 (ERROR); the metrics count "local"
#  3. a worker killed while it holds a local lease: its lease no longer
#     counts, the next request gets it
#  4. ZooKeeper back: new requests take the lock in ZooKeeper (ACQUIRED)
#  5. a partition (the relay swallows every byte): once the session may
#     have expired (jeopardy), requests pass with local leases, at most n
#  6. a blip of one instance (its session alive, the other instance holds
#     every lease): no local lease, the request waits in ZooKeeper
#  7. ZooKeeper back: the requests that waited for a local lease queue in
#     ZooKeeper, no local lease begins after the recovery
#  no [alert]/[crit]/[emerg] line, no crashed worker

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

sub conf {
    my ($hosts) = @_;
    return <<"EOF";
    zk_hosts $hosts;
    zk_session_timeout 4s;
    server {
        listen 127.0.0.1:%%PORT%%;
        add_header X-Lock \$zk_lock_status always;

        location /two {
            zk_semaphore /lc/two leases=8 timeout=20s;
            zk_lock_fail local=2;
            proxy_pass http://%%BACKEND%%;
        }
        location /one {
            zk_mutex /lc/one timeout=20s;
            zk_lock_fail local=1;
            proxy_pass http://%%BACKEND%%;
        }
        location /short {
            zk_mutex /lc/one timeout=1s;
            zk_lock_fail local=1;
            proxy_pass http://%%BACKEND%%;
        }
        location = /status {
            zk_lock_status_page;
        }
    }
EOF
}

###############################################################################

subtest 'nginx -t' => sub {
    for my $case ([ 'local=0', qr/invalid number of local leases "local=0"/ ],
                  [ 'local=abc', qr/invalid number of local leases/ ],
                  [ 'sideways', qr/invalid value "sideways", "closed", "open" or "local=<number>" expected/ ])
    {
        my ($v, $re) = @$case;
        my ($rc, $out) = nginx_test_conf(<<"EOF");
    zk_hosts 127.0.0.1:1;
    server {
        listen 127.0.0.1:%%PORT%%;
        location / { zk_mutex /m; zk_lock_fail $v; }
    }
EOF
        isnt($rc, 0, "zk_lock_fail $v: nginx -t fails");
        like($out, $re, '... naming the problem');
    }
};

###############################################################################

my @fleet = map { nginx_start(conf('%%ZK%%'), zk => $zk, backend => $be) }
    1 .. 2;
ok(sessions_connected(@fleet), 'every worker has a session');

subtest 'ZooKeeper stopped: local leases, n per instance' => sub {
    # one waits in ZooKeeper behind a foreign holder when it goes
    my $fh = zk_hold($zk, '/lc/one',
        name => '_c_00000000-0000-4000-8000-000000000001-lock-',
        seconds => 60, session_timeout => 30);
    my $w = http_parallel_bg([ [ $fleet[0]->port, '/one?key=conv' ] ],
        timeout => 30);
    ok(wait_for(sub { zk_children($zk, '/lc/one') == 2 }, 5),
        'a request waits behind a foreign holder');
    my $stopped = time;
    $zk->stop;
    my $c = http_parallel_collect($w, 30)->[0];
    is($c->{headers}{'x-lock'}, 'LOCAL',
        'once its session may have expired, it takes a local lease');
    is($c->{status}, 200, '... 200');
    cmp_ok($c->{end}, '>', $stopped + 1.5,
        '... not while the session still counts (jeopardy: 3/4 of 4 s)');
    $fh->kill;

    ok(wait_for(sub {
        !grep { $_->error_log !~ /no word from zookeeper/ } @fleet
    }, 10), 'both instances know their sessions may be gone');
    $be->reset;

    my @req;
    for my $i (0, 1) {
        push @req, map { [ $fleet[$i]->port, "/two?key=two$i&sleep=300" ] }
            1 .. 6;
    }
    my $res = http_parallel(\@req, timeout => 30);
    is(scalar(grep { $_->{status} == 200 } @$res), 12, 'all 12 pass');
    is(scalar(grep { ($_->{headers}{'x-lock'} // '') eq 'LOCAL' } @$res), 12,
        '$zk_lock_status LOCAL');
    for my $i (0, 1) {
        is($be->stats("two$i")->{max}, 2,
            "instance $i: 2 at a time at most, its 2 leases used");
    }

    $be->reset;
    my $t0 = time;
    my $one = http_parallel([ map { [ $fleet[0]->port,
        "/one?key=one&sleep=200&id=$_" ] } 1 .. 6 ], timeout => 30,
        stagger => 0.05);
    is(scalar(grep { $_->{status} == 200 } @$one), 6, 'local=1: all 6 pass');
    is($be->stats('one')->{max}, 1, '... one at a time');
    is_deeply($be->stats('one')->{order}, [ 1 .. 6 ],
        '... in the order they came, whichever worker took them');

    my $h = http_parallel_bg([ [ $fleet[0]->port, '/one?key=hold&sleep=3000' ] ],
        timeout => 30);
    ok(wait_for(sub { $be->stats('hold')->{inflight} == 1 }, 5),
        'one holds the local lease');
    my $t = time;
    my $r = $fleet[0]->get('/short?key=short');
    is($r->{status}, 503, 'another gets zk_lock_status at its 1 s timeout');
    is($r->{headers}{'x-lock'}, 'ERROR', '... ERROR');
    cmp_ok(time - $t, '<', 2.5, '... not later');
    is(http_parallel_collect($h, 30)->[0]{status}, 200, 'the holder: 200');

    like($fleet[0]->error_log,
        qr/\[error\].*zk_semaphore "\/lc\/two" passed with a local lease: no zookeeper connection/,
        'a warn line says so');
    my @warns = $fleet[0]->error_log
        =~ /zk_semaphore "\/lc\/two" passed with a local lease/g;
    cmp_ok(scalar @warns, '<=', 2, '... once per worker in this outage');
    like($fleet[0]->get('/status')->{body}, qr/"local":(?:[1-9]\d*)/,
        'the metrics count local leases');
};

subtest 'a worker killed while it holds a local lease: the lease comes back' => sub {
    my $k = nginx_start(conf('%%ZK%%'), zk => $zk, backend => $be,
        workers => 1);
    $be->reset;
    my $h = http_parallel_bg([ [ $k->port, '/one?key=crash&sleep=30000' ] ],
        timeout => 40);
    ok(wait_for(sub { $be->stats('crash')->{inflight} == 1 }, 10),
        'a request holds the local lease');
    my ($victim) = $k->worker_pids;
    kill 'KILL', $victim or die "kill: $!";
    ok(wait_for(sub {
        my @w = $k->worker_pids;
        @w == 1 && $w[0] != $victim
    }, 10), 'the master starts a new worker');
    my $t = time;
    my $r = $k->get('/one?key=after-crash', timeout => 30);
    is($r->{headers}{'x-lock'}, 'LOCAL',
        'the next request gets the lease: a dead worker holds none');
    cmp_ok(time - $t, '<', 10, '... well before its 20 s timeout');
    $k->expect_log(
        qr/\[alert\] \d+#\d+: worker process $victim exited on signal 9$/);
    $k->stop;
};

subtest 'ZooKeeper back: requests go through ZooKeeper again' => sub {
    $zk->start;

    # the killed foreign holder's node would stay for its 30 s session
    zk_delete($zk, "/lc/one/$_")
        for grep { /^_c_00000000-/ } zk_children($zk, '/lc/one');

    ok(wait_for(sub {
        ($fleet[1]->get('/two?key=back')->{headers}{'x-lock'} // '')
            eq 'ACQUIRED'
    }, 20, 0.3), 'ACQUIRED');
    no_ephemerals($zk, '/lc', 'after the outage');
};

$_->stop for @fleet;

subtest 'a partition: local leases once the session may have expired' => sub {
    my $px = ZkLock::FaultProxy->start($zk);
    my $ng = nginx_start(conf($px->hosts), backend => $be);
    ok(sessions_connected($ng), 'connected through the relay');
    my $off = length $ng->error_log;
    $px->partition(12);
    ok(wait_for(sub {
        my @j = substr($ng->error_log, $off) =~ /no word from zookeeper/g;
        @j >= 2;
    }, 10), 'the workers declare jeopardy');
    $be->reset;
    my $res = http_parallel([ map { [ $ng->port, "/two?key=part&sleep=300" ] }
        1 .. 6 ], timeout => 30);
    is(scalar(grep { ($_->{headers}{'x-lock'} // '') eq 'LOCAL' } @$res), 6,
        'requests pass with local leases');
    is($be->stats('part')->{max}, 2, '... 2 at a time');
    $ng->stop;
    $px->stop;
};

# Issue 25, item 3: a connection blip of one instance, its session alive,
# gives no local lease beside the leases the fleet holds in ZooKeeper
subtest 'a blip: no local lease while the session lives' => sub {
    my $px = ZkLock::FaultProxy->start($zk);
    my $a = nginx_start(conf6($px->hosts), backend => $be, workers => 1);
    my $b = nginx_start(conf6('%%ZK%%'), zk => $zk, backend => $be,
        workers => 1);
    ok(sessions_connected($a, $b), 'A (through the relay) and B connected');
    $be->reset;
    my $hb = http_parallel_bg([ map { [ $b->port, "/sc?key=sc&sleep=4000" ] }
        1 .. 2 ], timeout => 30);
    ok(wait_for(sub { $be->stats('sc')->{inflight} == 2 }, 5),
        'B holds both leases');
    my $off = length $a->error_log;
    $px->cut(2);
    ok(wait_for(sub {
        substr($a->error_log, $off) =~ /zookeeper connection lost/
    }, 5), 'A lost its connection');
    my $r = $a->get('/sc?key=sc&sleep=100', timeout => 30);
    is($r->{status}, 200, "A's request: 200");
    is($r->{headers}{'x-lock'}, 'ACQUIRED', '... through ZooKeeper, not LOCAL');
    is($be->stats('sc')->{max}, 2, 'never more than the 2 leases in flight');
    is(scalar(grep { $_->{status} == 200 } @{ http_parallel_collect($hb) }),
        2, "B's holders: 200");
    unlike(substr($a->error_log, $off), qr/passed with a local lease/,
        'no local lease');
    $a->stop;
    $b->stop;
    $px->stop;
};

# Issue 25, item 2: once the session is usable again, the requests that
# wait for a local lease queue in ZooKeeper; no local lease is given after
subtest 'ZooKeeper back: no new local lease' => sub {
    my $ng = nginx_start(conf6('%%ZK%%'), zk => $zk, backend => $be,
        workers => 1);
    ok(sessions_connected($ng), 'connected');
    $zk->stop;
    ok(wait_for(sub { $ng->error_log =~ /no word from zookeeper/ }, 15),
        'jeopardy');
    $be->reset;
    my $bg = http_parallel_bg([ map { [ $ng->port,
        "/lm?key=lm&sleep=2000&id=$_" ] } 1 .. 6 ], timeout => 60,
        stagger => 0.05);
    ok(wait_for(sub { $be->stats('lm')->{inflight} == 1 }, 5),
        'one passes with the local lease, the others wait for it');
    my $off = length $ng->error_log;
    $zk->start;
    ok(wait_for(sub {
        substr($ng->error_log, $off) =~ /zookeeper session \S+ (?:connected|is heard from again)/
    }, 30), 'the session is back');
    my $back = time;
    my $res = http_parallel_collect($bg, 60);
    is(scalar(grep { $_->{status} == 200 } @$res), 6, 'all 6: 200');
    my @late = grep { ($_->{headers}{'x-lock'} // '') eq 'LOCAL'
                      && $_->{end} - 2 > $back + 0.5 } @$res;
    is(scalar @late, 0, 'no local lease began after the recovery')
        or diag explain [ map { [ $_->{headers}{'x-lock'}, $_->{end} - $back ] }
                          @$res ];
    cmp_ok($be->stats('lm')->{max}, '<=', 2,
        'at most the local holder and one through ZooKeeper');
    ok((grep { ($_->{headers}{'x-lock'} // '') eq 'ACQUIRED' } @$res) >= 3,
        'the waiters took the lock in ZooKeeper');
    $ng->stop;
};

done_testing();

sub conf6 {
    my ($hosts) = @_;
    return <<"EOF";
    zk_hosts $hosts;
    zk_session_timeout 10s;
    server {
        listen 127.0.0.1:%%PORT%%;
        add_header X-Lock \$zk_lock_status always;
        location /sc {
            zk_semaphore /lc/sc leases=2 timeout=10s;
            zk_lock_fail local=1;
            proxy_pass http://%%BACKEND%%;
        }
        location /lm {
            zk_mutex /lc/lm timeout=30s;
            zk_lock_fail local=1;
            proxy_pass http://%%BACKEND%%;
        }
    }
EOF
}
