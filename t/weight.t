#!/usr/bin/perl
# zk_semaphore weight= (issue 17, item 2): a request takes n leases, as
# Curator's acquire(qty), all n nodes made by one multi(), so that they are
# consecutive and the group whose last node comes first holds first: no two
# weighted requests wait for each other.  The backend counts leases, not
# requests (w=<n>), and so does a Curator client holding leases (it holds
# them for as long as a GET of the backend takes).
#
#  1. nginx -t: a weight below 1 or above the leases, weight= on zk_mutex
#  2. a weight from a variable outside 1..leases: 400, no node made; with
#     leases=zk:, a weight above the count read: zk_lock_status at once
#     (REJECTED), no node; a weight past what one multi() may create
#     (ZooKeeper's jute.maxbuffer): 400 at run time, nginx -t when literal
#  3. a held weight=3 request has 3 nodes, one token; none left after
#  4. v1: 2 nginx x 2 workers, weights 1 to 3, leases=4: never more than 4
#     leases in flight, all requests served; weight=2 requests on leases=3
#     all served one after the other (no deadlock, no timeout)
#     with leases=zk: (a count of 4 read from a znode), two pairs at a time
#  5. Curator's acquire(2) and nginx's weight=2 on one path: never more
#     than the leases together
#  6. protocol=v2: the same bound, with Curator's v2 acquire(2)
#  7. the reply to a group's multi() lost with the connection: after the
#     reconnect its nodes are found by their uuid and it holds on them
#  no [alert]/[crit]/[emerg] line, no crashed worker

use strict;
use warnings;
use Test::More;
use Time::HiRes qw(time sleep);
use lib 't/lib';
use ZkLock::Test;
use ZkLock::Curator;
use ZkLock::FaultProxy;

require_prereqs(qw(nginx zookeeper kazoo module));
curator_prereqs();

my $zk = zk_start();
my $be = backend_start();

###############################################################################

subtest 'nginx -t' => sub {
    for my $case (
        [ 'weight=0', 'zk_semaphore /s leases=4 weight=0;',
          qr/invalid weight "weight=0"/ ],
        [ 'weight above the leases', 'zk_semaphore /s leases=4 weight=5;',
          qr/"weight=5" is more than "leases=4"/ ],
        [ 'weight too big for one multi()',
          'zk_semaphore /s leases=zk:/c leases_default=1 weight=5000;',
          qr/"weight=5000" is more than the \d+ nodes that one zookeeper multi\(\) may create on "\/s"/ ],
        [ 'weight= on zk_mutex', 'zk_mutex /m weight=2;',
          qr/"weight" is only for "zk_semaphore"/ ],
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

    my ($rc, $out) = nginx_test_conf(<<'EOF');
    zk_hosts 127.0.0.1:1;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /a { zk_semaphore /s1 leases=4 weight=4; }
        location /b { zk_semaphore /s2 leases=4 weight=$arg_w protocol=v2; }
        location /c {
            zk_semaphore /s3 leases=zk:/c leases_default=2 weight=$arg_w;
        }
    }
EOF
    is($rc, 0, 'literal and variable weights pass') or diag $out;
};

###############################################################################

my $conf = <<'EOF';
    zk_hosts %%ZK%%;
    server {
        listen 127.0.0.1:%%PORT%%;
        add_header X-Lock $zk_lock_status always;
        add_header X-Lock-Node $zk_lock_node always;
        add_header X-Lock-Token $zk_lock_token always;

        location /w {
            zk_semaphore /wt/s leases=4 weight=$arg_w timeout=30s;
            proxy_pass http://%%BACKEND%%;
        }
        location /three {
            zk_semaphore /wt/h leases=4 weight=3 timeout=30s;
            proxy_pass http://%%BACKEND%%;
        }
        location /pair {
            zk_semaphore /wt/p leases=3 weight=2 timeout=30s;
            proxy_pass http://%%BACKEND%%;
        }
        location /v2 {
            zk_semaphore /wt/v leases=4 protocol=v2 weight=$arg_w timeout=30s;
            proxy_pass http://%%BACKEND%%;
        }
        location /wz {
            zk_semaphore /wt/z leases=zk:/wt-count leases_default=1
                         weight=$arg_w timeout=10s;
            proxy_pass http://%%BACKEND%%;
        }
        location /counted {
            zk_semaphore /wt/c leases=zk:/wt-count leases_default=1
                         weight=2 timeout=30s;
            proxy_pass http://%%BACKEND%%;
        }
    }
EOF

zk_set($zk, '/wt-count', '4');

my @fleet = map { nginx_start($conf, zk => $zk, backend => $be) } 1 .. 2;
ok(sessions_connected(@fleet), 'every worker has a session');
my $ng = $fleet[0];

subtest 'a weight outside 1..leases: 400, no node' => sub {
    for my $w ('abc', '0', '5', '-1', '') {
        my $r = $ng->get("/w?key=bad&w=$w");
        is($r->{status}, 400, "weight \"$w\": 400");
    }
    is(scalar(() = zk_children($zk, '/wt/s')), 0, 'no node was made');
    like($ng->error_log, qr/zk_semaphore "\/wt\/s": invalid weight "5", 1 to 4 expected/,
        'logged at info, naming the weight');
};

# Issue 25, item 6: with leases=zk:, a weight above the count read from
# ZooKeeper is refused at once, and no weight makes a multi() that the
# server would refuse
subtest 'leases=zk: a weight above the count, or too big for a multi()' => sub {
    my $off = length $ng->error_log;
    my $t0 = time;
    my $r = $ng->get('/wz?key=wz&w=5');
    is($r->{status}, 503, 'w=5 with a count of 4: zk_lock_status');
    is($r->{headers}{'x-lock'}, 'REJECTED', '... REJECTED');
    cmp_ok(time - $t0, '<', 1, '... at once');
    is(scalar(() = zk_children($zk, '/wt/z')), 0, '... no node made');
    like(substr($ng->error_log, $off),
        qr{zk_semaphore "/wt/z" rejected: weight 5 is more than the 4 leases of "/wt-count"},
        '... logged, naming the count');

    for my $w (3000, 20000) {
        my $t = time;
        $r = $ng->get("/wz?key=wz&w=$w");
        is($r->{status}, 400, "w=$w: 400, more than one multi() may create");
        cmp_ok(time - $t, '<', 1, '... at once');
    }
    $t0 = time;
    $r = $ng->get('/wz?key=wz&w=1');
    is($r->{status}, 200, 'w=1 right after: 200');
    cmp_ok(time - $t0, '<', 1, '... without waiting behind them');
    unlike(substr($ng->error_log, $off), qr/zookeeper connection lost/,
        'the worker kept its connection');
    is(scalar(() = zk_children($zk, '/wt/z')), 0, 'no node left');
};

subtest 'weight=3: three nodes, one token, none left' => sub {
    my $h = http_parallel_bg([ [ $ng->port, '/three?key=three&sleep=1500' ] ],
        timeout => 30);
    my @k;
    ok(wait_for(sub { @k = zk_children($zk, '/wt/h'); @k == 3 }, 10),
        'the request has three nodes');
    my %uuid = map { /^(_c_[0-9a-f-]{36})-lock-\d{10}$/ ? ($1 => 1) : () } @k;
    is(scalar(keys %uuid), 1, 'Curator v1 nodes, of one protection uuid')
        or diag explain \@k;
    my @seq = sort { $a <=> $b } map { /(\d{10})$/ } @k;
    is($seq[2] - $seq[0], 2, 'consecutive: one multi()');
    my $r = http_parallel_collect($h, 30)->[0];
    is($r->{status}, 200, 'it holds: 200');
    like($r->{headers}{'x-lock-node'}, qr/-lock-$seq[2]$/,
        '$zk_lock_node: the last of them');
    like($r->{headers}{'x-lock-token'}, qr/^\d+$/, 'a token');
    no_ephemerals($zk, '/wt', 'after it');
};

subtest 'v1: weights 1 to 3 on leases=4, never more than 4' => sub {
    $be->reset;
    srand(17);
    my @req = map {
        my $w = 1 + int rand 3;
        [ $fleet[$_ % 2]->port, "/w?key=v1&w=$w&sleep=150&id=$_" ]
    } 1 .. 24;
    my $res = http_parallel(\@req, timeout => 60);
    is(scalar(grep { $_->{status} == 200 } @$res), 24, 'all 24 served');
    my $st = $be->stats('v1');
    cmp_ok($st->{max}, '<=', 4, "at most 4 leases in flight ($st->{max})");
    cmp_ok($st->{max}, '>=', 3, '... and the leases were shared');
    no_ephemerals($zk, '/wt', 'after the burst');
};

subtest 'weight=2 with leases=zk: (a count of 4): two at a time' => sub {
    $be->reset;
    my @req = map { [ $fleet[$_ % 2]->port, "/counted?key=cnt&w=2&sleep=300" ] }
        1 .. 6;
    my $res = http_parallel(\@req, timeout => 60);
    is(scalar(grep { $_->{status} == 200 } @$res), 6, 'all 6 served');
    is($be->stats('cnt')->{max}, 4, 'two pairs at a time: the count, 4');
    no_ephemerals($zk, '/wt', 'after them');
};

subtest 'weight=2 on leases=3: one at a time, nobody deadlocked' => sub {
    $be->reset;
    my $t0 = time;
    my @req = map { [ $fleet[$_ % 2]->port, "/pair?key=pair&w=2&sleep=200" ] }
        1 .. 8;
    my $res = http_parallel(\@req, timeout => 60);
    is(scalar(grep { $_->{status} == 200 } @$res), 8, 'all 8 served');
    is($be->stats('pair')->{max}, 2, 'one pair of leases at a time');
    cmp_ok(time - $t0, '<', 25, 'well before their 30 s timeout');
    no_ephemerals($zk, '/wt', 'after the pairs');
};

sub with_curator {
    my ($kind, $loc, $key) = @_;
    $be->reset;
    my $url = sprintf 'http://127.0.0.1:%d/c?key=%s&w=2&sleep=400',
        $be->port, $key;
    my $path = $loc eq '/v2' ? '/wt/v' : '/wt/s';
    my @c = map { curator($zk, $kind, $path, 400, 4, 30000, $url) } 1 .. 2;
    curator_expect($_, qr/^READY/) for @c;
    my @req = map { [ $fleet[$_ % 2]->port, "$loc?key=$key&w=2&sleep=300" ] }
        1 .. 6;
    my $res = http_parallel(\@req, timeout => 60);
    is(scalar(grep { $_->{status} == 200 } @$res), 6, 'nginx: all 6 served');
    for my $c (@c) {
        ok(curator_expect($c, qr/^RELEASED/, 30),
            'Curator acquire(2): acquired and released');
    }
    my $st = $be->stats($key);
    cmp_ok($st->{max}, '<=', 4, "together at most 4 leases ($st->{max})");
    is($st->{count}, 8, 'every holder reached the backend');
    no_ephemerals($zk, '/wt', 'after them');
}

subtest 'Curator acquire(2) and weight=2 share the leases (v1)' => sub {
    with_curator('semaphore:2', '/w', 'cv1');
};

subtest 'protocol=v2: weights on leases=4, with Curator v2 acquire(2)' => sub {
    $be->reset;
    my @req = map {
        my $w = 1 + $_ % 3;
        [ $fleet[$_ % 2]->port, "/v2?key=v2&w=$w&sleep=150" ]
    } 1 .. 12;
    my $res = http_parallel(\@req, timeout => 60);
    is(scalar(grep { $_->{status} == 200 } @$res), 12, 'all 12 served');
    cmp_ok($be->stats('v2')->{max}, '<=', 4, 'at most 4 leases in flight');
    with_curator('semv2:2', '/v2', 'cv2');
};

subtest 'a weighted create whose reply is lost: its nodes found again' => sub {
    my $px = ZkLock::FaultProxy->start($zk);
    my $pn = nginx_start($conf, zk => $px->hosts, backend => $be,
        workers => 1);
    ok(sessions_connected($pn), 'connected through the relay');
    is($pn->get('/three?key=warm')->{status}, 200,
        'a weighted request works through it');
    $be->reset;

    # the multi()'s reply is swallowed, the connection cut 1 s later
    $px->blackhole(close_after => 0.3, max => 1);
    my $h = http_parallel_bg([ [ $pn->port, '/three?key=lost&sleep=1500' ] ],
        timeout => 30);
    ok(wait_for(sub { $be->stats('lost')->{inflight} == 1 }, 15),
        'it holds after the reconnect');
    is(scalar(() = zk_children($zk, '/wt/h')), 3,
        'on its three nodes, found again by their uuid, not made anew');
    my $r = http_parallel_collect($h, 30)->[0];
    is($r->{status}, 200, 'it ends with 200');
    is($be->stats('lost')->{count}, 1, 'the backend saw it once');
    like($pn->error_log, qr/zookeeper connection lost/,
        'the connection was lost meanwhile');
    no_ephemerals($zk, '/wt', 'after it');
    $pn->stop;
    $px->stop;
};

done_testing();
