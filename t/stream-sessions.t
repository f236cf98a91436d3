#!/usr/bin/perl
# The stream layer's sessions and kept leases for the whole instance
# (issue 38, item 5): "stream" has zk_sessions and the instance pool as
# "http" has, each layer with its own brokers (their sockets are named
# after the layer).  An HTTP/1.0 request through the stream proxy is one
# connection, so the backend's count in flight is the connections'.
#
#  1. 6 workers, no zk_sessions: 4 sessions, every connection served,
#     the cap exact, no node left
#  2. 70 workers against maxClientCnxns=60, locks in both layers, no
#     zk_sessions: 4 sessions a layer, 60 requests and 60 connections on
#     fresh connections all served, none slower than 1 s, and the server
#     never refuses a connection
#  3. keep=: 4 workers, 1 lease: connections one after the other land on
#     any worker and are each served on the instance's one kept node,
#     with no ZooKeeper write (each worker used to keep a lease of its
#     own, moved between them through ZooKeeper)
#  4. zk_sessions 1: 4 workers, one session, a mutex one at a time
#  5. nginx -t: zk_sessions in stream is checked as in http

use strict;
use warnings;
use Test::More;
use Time::HiRes qw(time sleep);
use lib 't/lib';
use ZkLock::Test;
use ZkLock::Test::Stream;

require_prereqs(qw(nginx zookeeper kazoo module stream));

my $zk = zk_start(cfg => { maxClientCnxns => 60 });
my $be = backend_start();

# an http block with no lock: its sessions are not counted
my $PLAIN = <<'EOF';
    server {
        listen 127.0.0.1:%%PORT%%;
        location / { return 204; }
    }
EOF

sub sessions_made {
    my ($ng) = @_;
    my @pids = $ng->error_log
        =~ /(\d+)#\d+: zookeeper session 0x[0-9a-f]+ connected/g;
    return @pids;
}

# the server's last zxid: moves with every write
sub zxid {
    my ($z) = (zk_4lw($zk->port, 'srvr') // '') =~ /Zxid: 0x([0-9a-f]+)/;
    return defined $z ? hex $z : undef;
}

subtest '6 workers, no zk_sessions: 4 sessions' => sub {
    my $port = free_port();
    my $ng = nginx_start($PLAIN, zk => $zk, backend => $be, workers => 6,
        stream => stream_conf('%%ZK%%',
            $port => 'zk_semaphore /sts/d leases=3 timeout=10s;'));
    ok(wait_for(sub { sessions_made($ng) >= 4 }, 15), '4 sessions');
    $be->reset;
    my $res = http_parallel([ map { [ $port, "/c?key=d&sleep=50&id=$_" ] }
        1 .. 24 ], timeout => 20);
    is(scalar(grep { $_->{status} == 200 } @$res), 24, '24 connections served')
        or diag(join ' ', map { $_->{status} } @$res);
    is($be->stats('d')->{max}, 3, 'three at a time, never more');
    is(scalar(sessions_made($ng)), 4, 'still 4 sessions');
    $ng->stop;
    no_ephemerals($zk, '/sts/d', 'once nginx stopped');
};

subtest '70 workers, maxClientCnxns=60, both layers, no zk_sessions' => sub {
    my $port = free_port();
    my $http = <<'EOF';
    zk_hosts %%ZK%%;
    server {
        listen 127.0.0.1:%%PORT%% reuseport;
        location /w {
            zk_semaphore /sts/hw leases=100 timeout=5s;
            proxy_pass http://%%BACKEND%%;
        }
    }
EOF
    my $ng = nginx_start($http, zk => $zk, backend => $be, workers => 70,
        stream => stream_conf('%%ZK%%',
            $port => 'zk_semaphore /sts/sw leases=100 timeout=5s;'));
    ok(wait_for(sub { sessions_made($ng) >= 8 }, 20),
        '8 sessions: 4 a layer, by default');
    $be->reset;
    my $res = http_parallel([ (map { [ $port, "/c?key=sw&sleep=20" ] }
        1 .. 60), (map { [ $ng->port, "/w?key=hw&sleep=20" ] } 1 .. 60) ],
        timeout => 10);
    is(scalar(grep { $_->{status} == 200 } @$res), 120,
        '60 connections and 60 requests, all served')
        or diag(join ' ', map { $_->{status} } @$res);
    my ($slowest) = sort { $b <=> $a } map { $_->{time} } @$res;
    cmp_ok($slowest, '<', 1, sprintf('none slower than 1 s (%.2f s)',
        $slowest));
    is(scalar(sessions_made($ng)), 8, 'still 8 sessions');
    unlike($zk->log, qr/Too many connections/, 'no connection refused');
    $ng->stop;
    no_ephemerals($zk, '/sts/sw', 'stream, once nginx stopped');
    no_ephemerals($zk, '/sts/hw', 'http, once nginx stopped');
};

subtest 'keep=: the instance keeps one lease for all its workers' => sub {
    my $port = free_port();
    my $ng = nginx_start($PLAIN, zk => $zk, backend => $be, workers => 4,
        stream => stream_conf('%%ZK%%',
            $port => 'zk_semaphore /sts/k leases=1 keep=3s timeout=10s;'));
    ok(wait_for(sub { sessions_made($ng) >= 4 }, 15), '4 sessions');

    # the first connection queues the instance's node
    is(http_get($port, '/c?key=k&id=warm')->{status}, 200, 'warmed up');
    sleep 0.3;

    $be->reset;
    my $z0 = zxid();
    my @r = map { http_get($port, "/c?key=k&id=$_") } 1 .. 20;
    my $z1 = zxid();
    is(scalar(grep { $_->{status} == 200 } @r), 20, '20 connections served');
    ok(defined $z0 && defined $z1, 'read the zxid');
    is($z1, $z0, 'ZooKeeper wrote nothing meanwhile: zxid unchanged');
    my @tail = (split /\n/, stream_log($ng))[-20 .. -1];
    my %tokens = map { (split ' ')[4] => 1 } @tail;
    # a lease that another worker keeps is recalled first: a round trip
    is(scalar(grep { /^$port 200 ACQUIRED (\d+) \d+ \/sts\/k\//
                     && $1 < 50 } @tail), 20,
        '... each ACQUIRED at once, or after a recall (under 50 ms)')
        or diag(join "\n", @tail);
    is(scalar(keys %tokens), 1, '... on one node');
    is(scalar(zk_children($zk, '/sts/k')), 1, 'the instance holds one node');
    $ng->stop;
    no_ephemerals($zk, '/sts/k', 'once nginx stopped');
};

subtest 'zk_sessions 1: 4 workers, one session' => sub {
    my $port = free_port();
    my $conf = stream_conf('%%ZK%%',
        $port => 'zk_mutex /sts/one timeout=20s;');
    $conf = "    zk_sessions 1;\n$conf";
    my $ng = nginx_start($PLAIN, zk => $zk, backend => $be, workers => 4,
        stream => $conf);
    ok(wait_for(sub { sessions_made($ng) >= 1 }, 10), 'the session');
    $be->reset;
    my $res = http_parallel([ map { [ $port, "/c?key=one&sleep=50&id=$_" ] }
        1 .. 16 ], timeout => 30);
    is(scalar(grep { $_->{status} == 200 } @$res), 16, '16 connections served')
        or diag(join ' ', map { $_->{status} } @$res);
    is($be->stats('one')->{max}, 1, 'one at a time');
    is(scalar(sessions_made($ng)), 1, 'one session made');
    $ng->stop;
    no_ephemerals($zk, '/sts/one', 'once nginx stopped');
};

# a worker that ZooKeeper refuses a session (maxClientCnxns: several
# nginx behind one address) is served through a sibling's, as in http
subtest 'a worker refused a session is served through a sibling' => sub {
    my $zk2 = zk_start(cfg => { maxClientCnxns => 2 });
    my $port = free_port();
    my $stream = stream_conf('%%ZK%%',
        $port => 'zk_semaphore /sts/refused leases=2 timeout=5s;');

    my ($ng, $refused) = nginx_start_refused($zk2, $PLAIN, zk => $zk2,
        backend => $be, workers => 3, stream => $stream);
    ok($refused, '2 sessions, the third refused by the server');
    $be->reset;
    my $res = http_parallel([ map { [ $port,
        "/c?key=refused&sleep=30&id=$_" ] } 1 .. 40 ], timeout => 15);
    is(scalar(grep { $_->{status} == 200 } @$res), 40,
        '40 connections served')
        or diag(join ' ', map { $_->{status} } @$res);
    cmp_ok($be->stats('refused')->{max}, '<=', 2, 'never more than 2');
    unlike($ng->error_log, qr/no zookeeper connection/,
        'no connection refused for want of a session');
    $ng->stop;
    no_ephemerals($zk2, '/sts/refused', 'once nginx stopped');
    $zk2->stop;
};

subtest 'nginx -t: zk_sessions in stream' => sub {
    for my $case ([ 'zk_sessions 0;',
                    qr/value must be between 1 and 1024 in \S+:\d+/ ],
                  [ 'zk_sessions x;', qr/invalid number/ ]) {
        my ($line, $want) = @$case;
        my $conf = "    $line\n" . stream_conf('%%ZK%%',
            free_port() => 'zk_mutex /sts/t;');
        my ($rc, $out) = nginx_test_conf($PLAIN, dummy => 1,
            stream => $conf);
        isnt($rc, 0, "refused: $line");
        like($out, $want, '... naming the problem');
    }
    my ($rc, $out) = nginx_test_conf($PLAIN, dummy => 1,
        stream => "    zk_sessions 2;\n" . stream_conf('%%ZK%%',
            free_port() => 'zk_mutex /sts/t;'));
    is($rc, 0, 'zk_sessions 2 passes') or diag $out;
};

done_testing();
