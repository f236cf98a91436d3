#!/usr/bin/perl
# Tests of the test harness itself (t/lib): ZooKeeper control, zkctl.py,
# backend.py, nginx start/stop without the module, the HTTP clients and
# process cleanup. Needs no zk_lock module, so it can pass before the
# module builds.

use strict;
use warnings;
use Test::More;
use Time::HiRes qw(time);
use lib 't/lib';
use ZkLock::Test;

require_prereqs(qw(nginx zookeeper kazoo));

# ---------------------------------------------------------------- ZooKeeper

my $zk = zk_start();
like($zk->hosts, qr/^127\.0\.0\.1:\d+$/, 'zk hosts string');
is(zk_4lw($zk->port, 'ruok'), 'imok', 'zk answers ruok');
is($zk->mode, 'standalone', 'zk is standalone');
my $H = $zk->hosts;

is_deeply([zk_children($H, '/harness')], [], 'children of a missing node');
is(zk_get($H, '/harness'), undef, 'get of a missing node is undef');
is(zk_create($H, '/harness/a', makepath => 1, data => 'x'), '/harness/a',
    'create with makepath');
is(zk_get($H, '/harness/a')->{data}, 'x', 'get returns data');
is(zk_get($H, '/harness/a')->{ephemeral_owner}, 0, 'persistent node');
like(zk_create($H, '/harness/seq-', sequence => 1), qr{^/harness/seq-\d{10}$},
    'sequential create returns the full name');

subtest 'foreign holder (zk_hold)' => sub {
    my $h = zk_hold($H, '/harness/locks', name => 'lock-', seconds => 60);
    like($h->node, qr{^/harness/locks/lock-\d{10}$}, 'holder node name');
    is_deeply([zk_ephemerals($H, '/harness')], [$h->node],
        'only the holder node is ephemeral');
    ok(zk_get($H, $h->node)->{ephemeral_owner}, 'it has an owner session');
    my @tree = zk_tree($H, '/harness');
    ok((grep { $_ eq '/harness/locks' } @tree)
        && (grep { $_ eq $h->node } @tree), 'tree is recursive')
        or diag explain \@tree;
    $h->release;
    is(zk_get($H, $h->node), undef, 'release closes the session at once');

    # A crashed holder keeps its node until the server expires the session.
    my $c = zk_hold($H, '/harness/locks', name => 'crash-', seconds => 60,
        session_timeout => 1);
    $c->kill;
    ok(zk_get($H, $c->node), 'node survives the SIGKILLed holder');
    ok(zk_wait_gone($H, $c->node, 15), 'and disappears on session expiry');
};

subtest 'pause, resume, restart' => sub {
    $zk->pause;
    is(zk_4lw($zk->port, 'ruok', 0.5), undef, 'paused server does not answer');
    $zk->resume;
    ok(wait_for(sub { (zk_4lw($zk->port, 'ruok') // '') eq 'imok' }, 10),
        'resumed server answers');
    my $h = zk_hold($H, '/harness/locks', name => 'held-', seconds => 60);
    my $port = $zk->port;
    $zk->restart;
    is($zk->port, $port, 'restart keeps the port');
    is(zk_get($H, '/harness/a')->{data}, 'x', 'restart keeps the data');
    ok(zk_get($H, $h->node), 'a session survives a quick restart');
    $h->release;
    ok(!zk_get($H, $h->node), 'and can still be closed');
};

ok(zk_delete($H, '/harness', recursive => 1), 'recursive delete');
is_deeply([zk_tree($H, '/harness')], [], 'tree of a deleted node is empty');
ok(!zk_delete($H, '/harness'), 'deleting a missing node reports 0');

# ------------------------------------------------------------------ backend

my $be = backend_start();
subtest 'backend concurrency accounting' => sub {
    my $t0 = time;
    my $res = http_parallel([ map { [$be->port, "/p?key=par&sleep=300&id=$_"] }
        1 .. 5 ]);
    my $took = time - $t0;
    is_deeply([map { $_->{status} } @$res], [(200) x 5], 'all 200');
    like($res->[0]{body}, qr/^ok key=par id=1 inflight=\d\n$/, 'body format');
    my $st = $be->stats('par');
    is($st->{max}, 5, 'max in flight 5');
    is($st->{count}, 5, 'count 5');
    is($st->{inflight}, 0, 'none left in flight');
    cmp_ok($took, '<', 1.5, 'requests overlapped');
    ok($res->[$_]{end} >= $res->[$_]{start}, "times of $_") for 0 .. 4;

    $res = http_parallel([ map { [$be->port, "/q?sleep=50&id=$_"] } 0 .. 3 ],
        stagger => 0.1);
    is_deeply($be->stats('/q')->{order}, [0 .. 3],
        'stagger starts in order; key defaults to the path');
    cmp_ok($res->[3]{start} - $res->[0]{start}, '>=', 0.29, 'stagger delay');

    is(http_get($be->port, '/e?status=503')->{status}, 503, 'status arg');
    $be->reset;
    is_deeply($be->stats('par'),
        { inflight => 0, max => 0, count => 0, order => [], hangups => 0 },
        'reset');
    is_deeply($be->stats, {}, 'reset clears all keys');

    my $t1 = time;
    http_abort_after($be->port, '/h?key=hang&sleep=20000&hangup=1', 0.3);
    ok(wait_for(sub { $be->stats('hang')->{hangups} }, 10),
        'hangup=1: the request ends when its client goes away');
    cmp_ok(time - $t1, '<', 10, '... long before its sleep');
    is($be->stats('hang')->{inflight}, 0, '... and is no longer in flight');
};

# -------------------------------------------------------------------- nginx

my $conf = <<'EOF';
    server {
        listen 127.0.0.1:%%PORT%%;
        location / { proxy_pass http://%%BACKEND%%; }
    }
EOF

my $ng = nginx_start($conf, backend => $be, no_module => 1);
my @workers = $ng->worker_pids;
subtest 'plain nginx (no module)' => sub {
    is(scalar @workers, 2, 'two workers');
    my $r = $ng->get('/hello?id=7');
    is($r->{status}, 200, 'proxied 200');
    like($r->{body}, qr{^ok key=/hello id=7 }, 'backend body');
    is($r->{headers}{'x-inflight'}, 1, 'headers are lowercased');

    my $t0 = time;
    my $r2 = $ng->get('/slow?sleep=3000', timeout => 0.5);
    is($r2->{status}, 0, 'client timeout gives status 0');
    is($r2->{error}, 'timeout', 'and says why');
    cmp_ok(time - $t0, '<', 1.5, 'timeout is honoured');

    my $pid = http_abort_after($ng->port, '/abort?sleep=2000', 0.3);
    ok(defined proc_wait($pid, 5), 'abort client finished');
    ok(wait_for(sub { $ng->access_log =~ m{"GET /abort\S* HTTP/1.0" 499 } },
        5), 'nginx saw the client abort (499)');

    ok($ng->reload, 'reload brings up new workers');
    my @new = $ng->worker_pids;
    ok(!(grep { my $n = $_; grep { $_ == $n } @workers } @new),
        'worker pids changed') or diag "@workers / @new";
    push @workers, @new;
    is($ng->get('/after-reload')->{status}, 200, 'serves after reload');
    like($ng->error_log, qr/reconfiguring/, 'error_log is readable');
};

subtest 'nginx -t' => sub {
    my ($rc, $out) = nginx_test_conf($conf, no_module => 1);
    is($rc, 0, 'valid conf passes') or diag $out;
    like($out, qr/syntax is ok/, 'nginx -t output');
    ($rc, $out) = nginx_test_conf("bogus_directive on;\n", no_module => 1);
    isnt($rc, 0, 'unknown directive fails');
    like($out, qr/unknown directive "bogus_directive"/, 'with a message');
};

is(http_get(ZkLock::Test::free_port(), '/')->{status}, 0,
    'connection refused gives status 0');

# ---------------------------------------------------------- ensemble (quick)

subtest '3-node ensemble' => sub {
    my $ens = zk_ensemble_start(3);
    my $leader = $ens->leader_index;
    ok($leader, "leader is node $leader");
    is(scalar(split /,/, $ens->hosts), 3, 'hosts lists 3 servers');
    zk_create($ens->hosts, '/ens', data => 'y');
    $ens->node($leader)->stop;
    ok(wait_for(sub { my $l = $ens->leader_index; $l && $l != $leader }, 30),
        'a new leader is elected');
    my $other = (grep { $_->running } $ens->nodes)[0];
    is(zk_get($other->hosts, '/ens')->{data}, 'y', 'data survives');
    $ens->node($leader)->start;
    is(scalar(grep { defined $_->mode } $ens->nodes), 3, 'node rejoined');
    $ens->stop;
};

# ------------------------------------------------------------------ cleanup

$ng->stop;
$be->stop;
$zk->stop;
my @alive = grep { pid_alive($_) } started_pids(), @workers;
is_deeply(\@alive, [], 'every started process (and nginx worker) is gone');

done_testing;
