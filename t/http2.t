#!/usr/bin/perl
# HTTP/2: one connection carries many requests, each a stream the client
# can cancel alone (RST_STREAM). A cancelled stream leaves the queue, or
# lets go of the lock, at once, and the other streams of the connection go
# on; a connection closed with streams waiting takes all their nodes. A
# real HTTP/2 client (python3-h2, t/lib/h2client.py):
#
#  1. reset while waiting: 4 streams wait behind a foreign holder; one is
#     reset: its node is gone within 1 s, the others keep theirs and each
#     gets the lock in turn when the holder leaves;
#  2. reset while holding: a stream holds the lock (its backend call takes
#     30 s), another waits; the holder is reset: its node is gone and the
#     waiter gets the lock within 1 s, and the connection takes new streams;
#  3. closing the connection with 5 streams waiting: all 5 nodes are gone
#     within 1 s, and a request on another nginx gets the lock at once;
#  4. nothing left in ZooKeeper, nothing logged at alert/crit/emerg.
#
# Runs against any nginx built with HTTP/2 (ZK_LOCK_NGINX / ZK_LOCK_MODULE).

use strict;
use warnings;
use Test::More;
use Time::HiRes qw(time sleep);
use lib 't/lib';
use ZkLock::Test;

require_prereqs(qw(nginx zookeeper kazoo module python));

my $r = system("$ZkLock::Test::PYTHON -c 'import h2' 2>/dev/null");
if ($r != 0) {
    BAIL_OUT('python3-h2 missing') if ($ENV{CI} // '') =~ /^(1|true|yes)$/i;
    plan skip_all => "python3-h2 missing for $ZkLock::Test::PYTHON";
}

my $zk = zk_start();
my $be = backend_start();
my ($listen, $on) = http2_listen();

my $ng = nginx_start(<<"EOF", zk => $zk, backend => $be, workers => 1);
    zk_hosts %%ZK%%;
    zk_session_timeout 10s;

    server {
        listen 127.0.0.1:%%PORT%%$listen;
        $on

        location /w {
            zk_mutex /t/h2 timeout=60s;
            proxy_pass http://%%BACKEND%%;
            proxy_read_timeout 60s;
        }
    }
EOF
my $other = nginx_start(<<'EOF', zk => $zk, backend => $be, workers => 1);
    zk_hosts %%ZK%%;

    server {
        listen 127.0.0.1:%%PORT%%;

        location /w {
            zk_mutex /t/h2 timeout=10s;
            proxy_pass http://%%BACKEND%%;
        }
    }
EOF
ok(sessions_connected($ng, $other), 'connected');

sub nodes { scalar(() = zk_children($zk, '/t/h2')) }

sub settles {
    my ($n, $timeout) = @_;
    my $t0 = time;
    my $ok = wait_for(sub { nodes() == $n }, $timeout);
    return ($ok, time - $t0);
}

# 1. reset while waiting
{
    my $h = zk_hold($zk, '/t/h2', seconds => 60);
    my $c = h2_client($ng->port);
    $c->get("w$_", "/w?key=wait&sleep=100&n=$_") for 1 .. 4;
    ok(wait_for(sub { nodes() == 5 }, 10), 'reset while waiting: 4 queued');

    $c->reset('w2');
    my ($ok, $took) = settles(4, 1);
    ok($ok, sprintf('reset while waiting: its node is gone (%.2f s)', $took));
    sleep 0.5;
    is(nodes(), 4, 'reset while waiting: the others keep theirs');

    $h->release;
    ok($c->wait(qr/(?:^done w[134]\n.*){3}/ms, 20),
        'reset while waiting: the other 3 streams are served')
        or diag $c->events;
    like($c->events, qr/^status w1 200$/m, 'stream 1: 200');
    like($c->events, qr/^status w3 200$/m, 'stream 3: 200');
    like($c->events, qr/^status w4 200$/m, 'stream 4: 200');
    unlike($c->events, qr/^status w2 /m, 'the reset stream got nothing');
    my $st = $be->stats('wait');
    is($st->{count}, 3, 'reset while waiting: 3 reached the backend');
    is($st->{max}, 1, 'reset while waiting: one at a time');
    $c->stop;
}

# 2. reset while holding
{
    my $c = h2_client($ng->port);
    $c->get('holder', '/w?key=held&sleep=30000');
    ok(wait_for(sub { ($be->stats('held')->{inflight} // 0) == 1 }, 10),
        'reset while holding: the holder is in the backend');
    $c->get('next', '/w?key=next&sleep=100');
    ok(wait_for(sub { nodes() == 2 }, 10),
        'reset while holding: a second stream waits');

    my $t0 = time;
    $c->reset('holder');
    ok($c->wait(qr/^status next 200$/m, 1),
        sprintf('reset while holding: the waiting stream gets the lock'
            . ' (%.2f s)', time - $t0)) or diag $c->events;
    my ($ok) = settles(0, 2);
    ok($ok, 'reset while holding: no node left');

    $c->get('again', '/w?key=again&sleep=10');
    ok($c->wait(qr/^done again$/m, 10),
        'reset while holding: the connection takes a new stream');
    like($c->events, qr/^status again 200$/m, 'and serves it');
    $c->stop;
}

# 3. close the connection with 5 streams waiting
{
    my $h = zk_hold($zk, '/t/h2', seconds => 60);
    my $c = h2_client($ng->port);
    $c->get("c$_", "/w?key=closed&sleep=10&n=$_") for 1 .. 5;
    ok(wait_for(sub { nodes() == 6 }, 10), 'connection closed: 5 queued');

    $c->close;
    my ($ok, $took) = settles(1, 1);
    ok($ok, sprintf('connection closed: all 5 nodes gone (%.2f s)', $took));

    $h->release;
    my $t0 = time;
    my $res = $other->get('/w?key=after');
    is($res->{status}, 200, 'another nginx gets the lock');
    cmp_ok(time - $t0, '<', 3, 'at once');
    is($be->stats('closed')->{count} // 0, 0,
        'no closed stream reached the backend');
}

no_ephemerals($zk, '/t', 'at the end');

done_testing();
