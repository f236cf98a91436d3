#!/usr/bin/perl
# zk_semaphore keep=<time> (protocol v1): a worker keeps the lease its
# request held, idle, for up to keep, and hands it to its next request
# with no ZooKeeper call; it gives idle leases back at once when another
# participant waits on the path.
#
#  1. nginx -t: keep= on zk_rwlock write, on zk_mutex reentrant=off or
#     revocable=on, keep= with protocol=v2, keep=abc fail, naming the
#     problem; valid keep times pass (zk_mutex keep=: t/keep-mutex.t,
#     zk_rwlock read keep=: t/keep-rwlock.t)
#  2. the hot path (1 worker): 20 requests after the first run on its kept
#     lease: all 200, the first one's token (the kept node's czxid), wait 0,
#     ZooKeeper's zxid unchanged (no write), one Curator v1 node whose data
#     says it is kept for the configured time; metrics (JSON and
#     Prometheus): reused, acquired, kept
#  3. idle expiry (keep=1s): requests closer than keep apart stay on one
#     node past keep; after the last one the node stays (checked right
#     after it, from the server's 4lw dump) and is deleted about keep
#     later, not before 0.5 s and within keep + 3 s
#  4. the exact bound: 2 nginx x 2 workers and a Curator client that holds
#     a lease for as long as its own GET of the backend takes, on one path
#     with leases=3 keep=1s: never more than 3 at the backend, every
#     request 200, no node left after keep
#  5. give-back: 3 leases kept idle for 30 s by one worker; a Curator
#     waiter on the path acquires within seconds of connecting, not after
#     keep; the metrics count the leases given back, and the nodes left to
#     nginx match the kept gauge; nginx stops promptly, no node left
#  6. session expiry (through a fault proxy) takes the kept node with it;
#     the gauge drops to 0; the next request holds a new node (new token);
#     a worker killed with 3 kept leases: the kept gauge of its successor
#     starts at 0 (issue 25, item 9)
#  7. reload: the old worker, with one lease idle and one busy under a
#     running request, finishes that request (200, on a kept lease) and
#     its nodes vanish once it exits; the new worker serves on new nodes
#  8. weight=2 and timeout=0 (a try) do not use kept leases: a weighted
#     request holds 2 nodes of its own (beside an idle kept one), and none
#     is left after it; a try on the path holds a node of its own, gone
#     after it; the kept node stays untouched
#  9. while another participant waits (foreign Curator-named nodes: one
#     holds, one waits), the worker's 5 waiting requests queue one node
#     between them and run one by one in arrival order (FIFO) on it
# 10. fair share (leases=2, one worker running 2 requests with 2 more
#     waiting, then a Curator waiter): the worker gives a lease back as
#     each of its requests ends, so that Curator gets the second one freed,
#     before the worker's last request - with the two ends 1 s apart
# 11. the same with the two ends a few ms apart
# 12. while nginx keeps every lease busy under a steady load, a Curator
#     waiter acquires before the load ends: Curator waits for the node
#     "leases" places ahead of its own, which nginx gives back
# 13. the instance is the participant (4 workers, leases=1): 40 requests
#     on fresh connections, served by every worker, none waits, all on
#     the first one's lease (its token), ZooKeeper's zxid unchanged, one
#     node for the instance
#  no [alert]/[crit]/[emerg] line, no crashed worker (checked by the
#  harness at done_testing)

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

my $NODE_RE = qr/^_c_[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}-lock-\d{10}\z/;

# the server's last zxid: moves with every write (create, delete, session)
sub zxid {
    my ($z) = (zk_4lw($zk->port, 'srvr') // '') =~ /Zxid: 0x([0-9a-f]+)/;
    return defined $z ? hex $z : undef;
}

# the ephemeral children of $path now, from the server's 4lw "dump" (a
# few ms, no session: for checks that must be quick, within keep)
sub eph_children {
    my ($path) = @_;
    my $d = zk_4lw($zk->port, 'dump', 5);
    return ('(dump failed)') unless defined $d;
    my @c = sort map { m{^\s+\Q$path\E/([^/\s]+)$} ? $1 : () } split /\n/, $d;
    return @c;    # a count in scalar context (sort's is undefined)
}

# test: within $timeout s no ephemeral child is left (polled with dump),
# and a kazoo listing then shows none at all
sub none_left {
    my ($path, $timeout, $name) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    my $ok = wait_for(sub { !eph_children($path) }, $timeout, 0.05);
    my @left = zk_children($zk, $path);
    ok($ok && !@left, "$name: no child left under $path within $timeout s")
        or diag explain [ eph_children($path), '--', @left ];
    return $ok && !@left;
}

# a worker's nodes share the start of their uuid (_c_ + 8-4-4 hex digits)
sub owner { return $_[0] =~ /^(_c_[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4})-/ ? $1 : '' }

sub lock_stats {
    my ($ng, $path) = @_;
    my $r = $ng->get('/status');
    my $j = eval { $ZkLock::Test::JSON->decode($r->{body}) } // {};
    my ($l) = grep { $_->{path} eq $path } @{ $j->{locks} // [] };
    return $l // {};
}

sub prom_value {
    my ($ng, $family, $path) = @_;
    my $body = $ng->get('/metrics')->{body} // '';
    return $body =~ /^\Q$family\E\{path="\Q$path\E",type="semaphore"\} (\S+)$/m
        ? $1 : undef;
}

sub conf {
    my ($locations, %o) = @_;
    my $extra = $o{extra} // '';
    return <<"EOF";
    zk_hosts %%ZK%%;
    $extra
    server {
        listen 127.0.0.1:%%PORT%%;
        add_header X-Token \$zk_lock_token always;
        add_header X-Wait \$zk_lock_wait_time always;
        add_header X-Node \$zk_lock_node always;
$locations
        location = /status  { zk_lock_status_page; }
        location = /metrics { zk_lock_status_page prometheus; }
    }
EOF
}

sub loc {
    my ($name, $directive) = @_;
    return "        location $name { $directive proxy_pass http://%%BACKEND%%; }\n";
}

###############################################################################

subtest 'nginx -t' => sub {
    my $wrap = sub {
        my ($directive) = @_;
        return <<"EOF";
    zk_hosts 127.0.0.1:1;
    server {
        listen 127.0.0.1:%%PORT%%;
        location / { $directive }
    }
EOF
    };
    for my $case (
        [ 'keep= on zk_rwlock write', 'zk_rwlock /m write keep=1s;',
          qr/"keep" is not for the write lock of "zk_rwlock"/ ],
        [ 'keep= on zk_mutex reentrant=off', 'zk_mutex /m reentrant=off keep=1s;',
          qr/"keep" is not for "reentrant=off"/ ],
        [ 'keep= on zk_mutex revocable=on', 'zk_mutex /m keep=1s revocable=on;',
          qr/"keep" is not for "revocable=on"/ ],
        [ 'keep= with protocol=v2',
          'zk_semaphore /s leases=2 protocol=v2 keep=1s;',
          qr/"keep" is not for "protocol=v2"/ ],
        [ 'keep=abc', 'zk_semaphore /s leases=2 keep=abc;',
          qr/invalid keep "keep=abc"/ ],
    ) {
        my ($name, $directive, $re) = @$case;
        my ($rc, $out) = nginx_test_conf($wrap->($directive));
        isnt($rc, 0, "$name: nginx -t fails");
        like($out, $re, "$name: the error names the problem") or diag $out;
    }

    for my $ok ('zk_semaphore /s leases=2 keep=1s timeout=2s;',
                'zk_semaphore /s leases=2 keep=500ms protocol=v1;',
                'zk_semaphore /s leases=4 keep=30s weight=2;',
                'zk_mutex /m keep=1s timeout=2s;',
                'zk_rwlock /m read keep=1s timeout=2s;') {
        my ($rc, $out) = nginx_test_conf($wrap->($ok));
        is($rc, 0, "passes: $ok") or diag $out;
    }
};

###############################################################################

subtest 'the hot path: no ZooKeeper call on a kept lease' => sub {
    my $ng = nginx_start(conf(loc('/k',
        'zk_semaphore /k/hot leases=4 keep=2s timeout=5s;')),
        zk => $zk, backend => $be, workers => 1);
    ok(sessions_connected($ng), 'the worker has a session');

    my $first = $ng->get('/k?key=hot');
    is($first->{status}, 200, 'the first request: 200');
    my $token = $first->{headers}{'x-token'} // '';
    like($token, qr/^\d+$/, '... with a token');

    my $z0 = zxid();
    my @r = map { $ng->get("/k?key=hot&id=$_") } 1 .. 20;
    my $z1 = zxid();
    my $st = lock_stats($ng, '/k/hot');
    my $prom_kept = prom_value($ng, 'zk_lock_kept', '/k/hot');
    my $prom_reused = prom_value($ng, 'zk_lock_kept_reused_total', '/k/hot');

    is(scalar(grep { $_->{status} == 200 } @r), 20, '20 more: all 200');
    ok(defined $z0 && defined $z1, 'read the zxid (srvr)');
    is(sprintf('0x%x', $z1 // -1), sprintf('0x%x', $z0 // -2),
        'ZooKeeper wrote nothing meanwhile: zxid unchanged');
    is(scalar(grep { ($_->{headers}{'x-token'} // '') eq $token } @r), 20,
        'all 20 on the first one\'s lease: its token')
        or diag explain [ map { $_->{headers}{'x-token'} } @r ];
    is(scalar(grep { ($_->{headers}{'x-wait'} // '') eq '0' } @r), 20,
        '$zk_lock_wait_time 0 for all 20')
        or diag explain [ map { $_->{headers}{'x-wait'} } @r ];
    is(scalar(keys %{{ map { ($_->{headers}{'x-node'} // '') => 1 } @r }}),
        1, '$zk_lock_node: one node for all');

    my @e = eph_children('/k/hot');
    is(scalar @e, 1, 'one child under the path (server dump, right after)')
        or diag explain \@e;
    like($e[0] // '', $NODE_RE, '... a Curator v1 node, _c_<uuid>-lock-<seq>');
    like($first->{headers}{'x-node'} // '', qr{^/k/hot/\Q@{[ $e[0] // 'none' ]}\E\z},
        '... the node the first request held');

    cmp_ok($st->{reused} // 0, '>=', 20, 'metrics: reused >= 20')
        or diag explain $st;
    is($st->{acquired}, 21, 'metrics: acquired counts the reused ones too');
    is($st->{kept}, 1, 'metrics: one lease kept idle');
    is($st->{held}, 0, 'metrics: none held now');
    is($prom_kept, 1, 'Prometheus: zk_lock_kept 1');
    is($prom_reused, $st->{reused}, 'Prometheus: zk_lock_kept_reused_total '
        . 'as in the JSON');

    # one more on the lease: keep (2 s) counts from here for kazoo's reads
    my $again = $ng->get('/k?key=hot');
    is($again->{headers}{'x-token'} // '', $token, 'one more: the same token');
    my @c = zk_children($zk, '/k/hot');
    my $g = $c[0] ? zk_get($zk, "/k/hot/$c[0]") : undef;
    is_deeply(\@c, \@e, 'a listing (kazoo) shows that node alone');
    is($g ? $g->{czxid} : undef, $token, '$zk_lock_token: its czxid');
    ok($g && $g->{ephemeral_owner}, 'ephemeral');
    like($g ? $g->{data} : '', qr/kept/, 'its data says it is kept');
    like($g ? $g->{data} : '', qr/kept for 2000ms idle/,
        '... for keep (2000 ms)');
    $ng->stop;
    none_left('/k/hot', 5, 'nginx stopped');
};

###############################################################################

subtest 'a lease idle for keep is deleted, not before' => sub {
    my $ng = nginx_start(conf(loc('/k',
        'zk_semaphore /k/idle leases=4 keep=1s timeout=5s;')),
        zk => $zk, backend => $be, workers => 1);
    ok(sessions_connected($ng), 'the worker has a session');

    # 5 requests 0.3 s apart: 1.2 s in all, past keep, on one node
    my $t0 = time;
    my @r;
    for my $i (1 .. 5) {
        sleep 0.3 if $i > 1;
        push @r, $ng->get("/k?key=idle&id=$i");
    }
    my $done = time;
    is(scalar(grep { $_->{status} == 200 } @r), 5, '5 requests, 0.3 s apart: '
        . 'all 200');
    my $token = $r[0]{headers}{'x-token'} // '';
    is(scalar(grep { ($_->{headers}{'x-token'} // '') eq $token } @r), 5,
        '... on one lease for ' . sprintf('%.1f', $done - $t0)
        . ' s: idle counts from the last request');

    my @c = eph_children('/k/idle');
    my $checked = time - $done;
    is(scalar @c, 1, sprintf('the node is kept after the last request '
        . '(server dump, %.3f s after it)', $checked)) or diag explain \@c;
    like($r[-1]{headers}{'x-node'} // '', qr{/\Q@{[ $c[0] // 'none' ]}\E\z},
        '... the node the requests held');
    is(lock_stats($ng, '/k/idle')->{kept}, 1, 'metrics: kept 1');

    my $gone;
    while (time - $done < 1 + 3) {
        if (!eph_children('/k/idle')) { $gone = time; last }
        sleep 0.02;
    }
    ok($gone, 'deleted within keep + 3 s');
    if ($gone) {
        note sprintf 'deleted %.2f s after the last request', $gone - $done;
        cmp_ok($gone - $done, '>=', 0.5, '... not before 0.5 s');
    }
    is(scalar(() = zk_children($zk, '/k/idle')), 0, 'no child left');
    is(lock_stats($ng, '/k/idle')->{kept}, 0, 'metrics: kept 0');

    my $again = $ng->get('/k?key=idle');
    is($again->{status}, 200, 'the next request: 200');
    isnt($again->{headers}{'x-token'} // '', $token, '... on a new node');
    $ng->stop;
};

###############################################################################

subtest 'the exact bound: 2 nginx x 2 workers and Curator' => sub {
    my @ng = map {
        nginx_start(conf(loc('/k',
            'zk_semaphore /k/bound leases=3 keep=1s timeout=20s;')),
            zk => $zk, backend => $be, workers => 2)
    } 1 .. 2;
    ok(sessions_connected(@ng), 'every worker has a session');
    $be->reset;

    my $n = 60;
    my $bg = http_parallel_bg([ map {
        [ $ng[$_ % 2]->port, "/k?key=bound&sleep=200&id=$_" ]
    } 1 .. $n ], stagger => 0.02, timeout => 60);

    ok(wait_for(sub { $be->stats('bound')->{inflight} }, 10),
        'nginx requests run');
    my $url = 'http://' . $be->addr . '/curator?key=bound&sleep=400&id=curator';
    my $c = curator($zk, 'semaphore', '/k/bound', 0, 3, 30000, $url);
    ok(curator_expect($c, qr/^READY/, 20), 'Curator connected');
    my $mid = time;
    my @seen = zk_children($zk, '/k/bound');
    ok(curator_expect($c, qr/^ACQUIRED/, 30), 'Curator acquired a lease');
    ok(curator_expect($c, qr/^RELEASED/, 30), 'Curator released it');

    my $res = http_parallel_collect($bg, 90);
    is(scalar(grep { $_->{status} == 200 } @$res), $n, "all $n nginx "
        . 'requests 200')
        or diag explain [ map { "$_->{status} " . ($_->{error} // "") }
            grep { $_->{status} != 200 } @$res ];
    my $st = $be->stats('bound');
    cmp_ok($st->{max}, '<=', 3, 'never more than 3 at the backend at once, '
        . 'Curator included') or diag explain $st;
    is($st->{count}, $n + 1, 'the backend saw every nginx request and Curator');
    ok((grep { $_ eq 'curator' } @{ $st->{order} }), 'Curator ran during the '
        . 'nginx load') or diag explain $st->{order};

    my @bad = grep { $_ !~ $NODE_RE } @seen;
    ok(!@bad, 'mid-run: every child a Curator v1 node (' . scalar(@seen)
        . ' seen)') or diag explain \@bad;

    my %sum;
    for my $ng (@ng) {
        my $l = lock_stats($ng, '/k/bound');
        $sum{$_} += $l->{$_} // 0 for qw(acquired reused given_back kept);
    }
    is($sum{acquired}, $n, 'metrics: acquired over both nginx');
    note "metrics over both nginx: reused $sum{reused}, given_back "
        . "$sum{given_back}, kept $sum{kept}";

    my $end = time;
    my $gone_at = wait_for(sub { eph_children('/k/bound') ? 0 : time }, 1 + 4);
    ok($gone_at, 'every node deleted within keep (1 s) + 4 s of the last '
        . 'request') or diag explain [ eph_children('/k/bound') ];
    note sprintf 'nodes gone %.2f s after the last request', $gone_at - $end
        if $gone_at;
    none_left('/k/bound', 1, 'then');
    is(scalar(grep { ($_->{kept} // 0) } map { lock_stats($_, '/k/bound') } @ng),
        0, 'metrics: nothing kept');
    $_->stop for @ng;
};

###############################################################################

subtest 'a Curator waiter gets a lease kept idle at once' => sub {
    my $ng = nginx_start(conf(loc('/k',
        'zk_semaphore /k/give leases=3 keep=30s timeout=5s;')),
        zk => $zk, backend => $be, workers => 1);
    ok(sessions_connected($ng), 'the worker has a session');
    $be->reset;

    my $res = http_parallel([ map { [ $ng->port, "/k?key=give&sleep=300&id=$_" ] }
        1 .. 3 ]);
    is(scalar(grep { $_->{status} == 200 } @$res), 3, '3 concurrent '
        . 'requests: 200');
    is($be->stats('give')->{max}, 3, '... they ran at once (the worker '
        . 'queued 3 nodes at once)');
    ok(wait_for(sub { (lock_stats($ng, '/k/give')->{kept} // 0) == 3 }, 5),
        'metrics: 3 leases kept idle');
    my @c = zk_children($zk, '/k/give');
    is(scalar @c, 3, '3 children');
    is(scalar(keys %{{ map { owner($_) => 1 } @c }}), 1, '... of one worker');
    my $mine = owner($c[0] // '');

    my $c = curator($zk, 'semaphore', '/k/give', 1500, 3, 25000);
    my $ready = curator_expect($c, qr/^READY/, 20) ? time : undef;
    ok($ready, 'Curator connected');
    my $at = curator_expect($c, qr/^ACQUIRED (\d+)/, 25);
    ok($at, 'Curator acquired (it waits up to 25 s; keep is 30 s)');
    if ($at && $ready) {
        note sprintf 'Curator acquired %.3f s after it said READY',
            $at / 1000 - $ready;
        cmp_ok($at / 1000 - $ready, '<', 3, '... within seconds of '
            . 'connecting, not after keep');
    }

    my $st = lock_stats($ng, '/k/give');
    cmp_ok($st->{given_back} // 0, '>=', 1, 'metrics: given_back >= 1')
        or diag explain $st;
    is(($st->{kept} // 0) + ($st->{given_back} // 0), 3,
        'metrics: kept + given_back = 3');
    my @now = zk_children($zk, '/k/give');
    is(scalar(grep { owner($_) eq $mine } @now), $st->{kept} // -1,
        'the nodes nginx still has: as many as the kept gauge')
        or diag explain \@now;
    cmp_ok(scalar @now, '<=', 3, 'no more than 3 children with Curator');
    is(prom_value($ng, 'zk_lock_kept_given_back_total', '/k/give'),
        $st->{given_back}, 'Prometheus: zk_lock_kept_given_back_total as '
        . 'in the JSON');
    ok(curator_expect($c, qr/^RELEASED/, 10), 'Curator released');

    my $r = $ng->get('/k?key=give');
    is($r->{status}, 200, 'nginx serves after Curator');

    my $t = time;
    $ng->stop;
    my $took = time - $t;
    cmp_ok($took, '<', 8, sprintf('nginx stops promptly with leases kept '
        . 'for 30 s (%.1f s)', $took));
    none_left('/k/give', 5, 'nginx stopped');
};

###############################################################################

subtest 'session expiry drops the kept lease' => sub {
    my $px = ZkLock::FaultProxy->start($zk);
    my $ng = nginx_start(conf(loc('/k',
        'zk_semaphore /k/exp leases=3 keep=30s timeout=5s;'),
        extra => 'zk_session_timeout 2s;'),
        zk => $px->hosts, backend => $be, workers => 1);
    ok(sessions_connected($ng), 'connected through the proxy');

    my $r = $ng->get('/k?key=exp');
    is($r->{status}, 200, 'a request');
    my $token = $r->{headers}{'x-token'} // '';
    my @c = zk_children($zk, '/k/exp');
    is(scalar @c, 1, 'its lease is kept: one child');
    is(lock_stats($ng, '/k/exp')->{kept}, 1, 'metrics: kept 1');

    my $off = length $ng->error_log;
    my $cut = $px->cut(5);    # past the 2 s session timeout
    ok(wait_for(sub {
        substr($ng->error_log, $off) =~ /zookeeper session 0x\S+ expired/
    }, 20), 'the session expired');
    note sprintf 'expiry logged %.1f s after the cut', time - $cut;
    ok(@c && !zk_get($zk, "/k/exp/$c[0]"), 'the kept node went with the '
        . 'session');
    is(scalar(() = zk_children($zk, '/k/exp')), 0, 'no child left');
    is(lock_stats($ng, '/k/exp')->{kept}, 0, 'metrics: kept 0');

    ok(wait_for(sub { $ng->get('/k?key=exp')->{status} == 200 }, 15),
        'a request after the expiry: 200');
    my $after = $ng->get('/k?key=exp');
    is($after->{status}, 200, 'another: 200');
    isnt($after->{headers}{'x-token'} // '', $token, '... on a new node '
        . '(another token)');
    my @n = zk_children($zk, '/k/exp');
    is(scalar @n, 1, 'one child again, kept');
    isnt($n[0] // '', $c[0] // '', '... a new one');
    $ng->stop;
    $px->stop;
    none_left('/k/exp', 5, 'nginx stopped');
};

###############################################################################

# Issue 25, item 9: the kept gauge of a worker that was killed goes with it
subtest 'a worker killed with kept leases: the gauge does not stay' => sub {
    my $ng = nginx_start(conf(loc('/k',
        'zk_semaphore /k/kill leases=5 keep=30s timeout=5s;'),
        extra => 'zk_session_timeout 2s;'),
        zk => $zk, backend => $be, workers => 1);
    ok(sessions_connected($ng), 'connected');
    my $res = http_parallel([ map { [ $ng->port, "/k?key=kill&sleep=300" ] }
        1 .. 3 ], timeout => 20);
    is(scalar(grep { $_->{status} == 200 } @$res), 3, '3 requests at once');
    is(lock_stats($ng, '/k/kill')->{kept}, 3, 'metrics: kept 3');

    my ($victim) = $ng->worker_pids;
    kill 'KILL', $victim or die "kill: $!";
    ok(wait_for(sub {
        my @w = $ng->worker_pids;
        @w == 1 && $w[0] != $victim
    }, 10), 'the master starts a new worker');
    $ng->expect_log(
        qr/\[alert\] \d+#\d+: worker process $victim exited on signal 9$/);
    is(lock_stats($ng, '/k/kill')->{kept}, 0,
        'metrics: kept 0, not the dead worker\'s 3');
    ok(wait_for(sub { !zk_children($zk, '/k/kill') }, 10),
        'its nodes go with its session');
    is($ng->get('/k?key=kill')->{status}, 200, 'a request: 200');
    is(lock_stats($ng, '/k/kill')->{kept}, 1, 'metrics: kept 1, its own');
    $ng->stop;
    none_left('/k/kill', 5, 'nginx stopped');
};

###############################################################################

subtest 'reload: the old worker gives its leases back as it exits' => sub {
    my $ng = nginx_start(conf(loc('/k',
        'zk_semaphore /k/reload leases=3 keep=30s timeout=10s;')),
        zk => $zk, backend => $be, workers => 1);
    ok(sessions_connected($ng), 'the worker has a session');
    $be->reset;

    my $res = http_parallel([ map { [ $ng->port, "/k?key=rl&sleep=300&id=$_" ] }
        1 .. 2 ]);
    is(scalar(grep { $_->{status} == 200 } @$res), 2, '2 concurrent requests');
    ok(wait_for(sub { (lock_stats($ng, '/k/reload')->{kept} // 0) == 2 }, 5),
        'metrics: 2 leases kept');
    my @old = zk_children($zk, '/k/reload');
    is(scalar @old, 2, '2 children');
    my %old_token = map { ($_->{headers}{'x-token'} // '') => 1 } @$res;

    # one kept lease busy under a long request at the reload, one idle
    my $bg = http_parallel_bg([ [ $ng->port, '/k?key=rl-long&sleep=2500' ] ],
        timeout => 30);
    ok(wait_for(sub { $be->stats('rl-long')->{inflight} }, 5),
        'a long request runs');
    my $t = time;
    ok($ng->reload, 'reloaded');

    my $new = $ng->get('/k?key=rl-new');
    is($new->{status}, 200, 'the new worker serves meanwhile');
    ok(!$old_token{ $new->{headers}{'x-token'} // '' },
        '... not on an old worker\'s lease');

    my $long = http_parallel_collect($bg, 30)->[0];
    is($long->{status}, 200, 'the request running at the reload: 200');
    is($long->{headers}{'x-wait'}, '0', '... it ran on a kept lease (wait 0)');
    ok($old_token{ $long->{headers}{'x-token'} // '' },
        '... one of the two kept');

    my $ended = time;
    my $gone = wait_for(sub {
        my %now = map { $_ => 1 } eph_children('/k/reload');
        !grep { $now{$_} } @old;
    }, 5, 0.1);
    ok($gone, 'the old worker\'s nodes are gone within 5 s of its last '
        . 'request') or diag explain [ zk_children($zk, '/k/reload') ];
    note sprintf 'old nodes gone %.1f s after the last request ended '
        . '(%.1f s after the reload)', time - $ended, time - $t;

    my @after = map { $ng->get("/k?key=rl-after&id=$_") } 1 .. 5;
    is(scalar(grep { $_->{status} == 200 } @after), 5,
        'requests after the reload: 200');
    ok(!(grep { $old_token{ $_->{headers}{'x-token'} // '' } } @after),
        '... none on an old lease');
    my %old_owner = map { owner($_) => 1 } @old;
    my @now = zk_children($zk, '/k/reload');
    ok(@now && !(grep { $old_owner{ owner($_) } } @now),
        'the nodes now are the new worker\'s') or diag explain \@now;
    $ng->stop;
    none_left('/k/reload', 5, 'nginx stopped');
};

###############################################################################

subtest 'weighted requests and tries do not use kept leases' => sub {
    my $ng = nginx_start(conf(
          loc('/w2', 'zk_semaphore /k/w leases=4 keep=30s weight=2 '
              . 'timeout=5s;')
        . loc('/w1', 'zk_semaphore /k/w leases=4 keep=30s timeout=5s;')
        . loc('/try', 'zk_semaphore /k/w leases=4 keep=30s timeout=0;')),
        zk => $zk, backend => $be, workers => 1);
    ok(sessions_connected($ng), 'the worker has a session');

    # weight=2 alone
    my $bg = http_parallel_bg([ [ $ng->port, '/w2?key=w&sleep=1500' ] ],
        timeout => 20);
    my @k;
    ok(wait_for(sub { @k = eph_children('/k/w'); @k == 2 }, 5),
        'weight=2: 2 nodes while it holds') or diag explain \@k;
    my $r = http_parallel_collect($bg, 20)->[0];
    is($r->{status}, 200, 'weight=2: 200');
    none_left('/k/w', 3, 'weight=2 done (keep is 30 s)');
    is(lock_stats($ng, '/k/w')->{kept}, 0, 'metrics: kept 0');

    # a kept lease beside a weighted request
    my $one = $ng->get('/w1?key=w');
    is($one->{status}, 200, 'weight 1: 200');
    my @kept = eph_children('/k/w');
    is(scalar @kept, 1, '... its lease kept');
    $bg = http_parallel_bg([ [ $ng->port, '/w2?key=w&sleep=1500' ] ],
        timeout => 20);
    ok(wait_for(sub { @k = eph_children('/k/w'); @k == 3 }, 5),
        'weight=2 beside the kept lease: 3 nodes') or diag explain \@k;
    ok((grep { $_ eq ($kept[0] // '') } @k), '... the kept one among them');
    $r = http_parallel_collect($bg, 20)->[0];
    is($r->{status}, 200, 'weight=2: 200');
    isnt($r->{headers}{'x-token'} // '', $one->{headers}{'x-token'} // '',
        '... its own token, not the kept lease\'s');
    ok(wait_for(sub {
        @k = eph_children('/k/w');
        @k == 1 && $k[0] eq ($kept[0] // '');
    }, 3), 'only the kept node left after it') or diag explain \@k;

    # a try
    my $try = $ng->get('/try?key=w');
    is($try->{status}, 200, 'a try (timeout=0): 200');
    isnt($try->{headers}{'x-token'} // '', $one->{headers}{'x-token'} // '',
        '... on a node of its own, not the kept lease');
    ok(wait_for(sub {
        @k = eph_children('/k/w');
        @k == 1 && $k[0] eq ($kept[0] // '');
    }, 3), '... gone after it; the kept node stays') or diag explain \@k;

    my $reuse = $ng->get('/w1?key=w');
    is($reuse->{headers}{'x-token'}, $one->{headers}{'x-token'},
        'the next weight-1 request runs on the kept lease');
    is($reuse->{headers}{'x-wait'}, '0', '... wait 0');
    $ng->stop;
    none_left('/k/w', 5, 'nginx stopped');
};

###############################################################################

subtest 'while another waits: one queued node, FIFO in the worker' => sub {
    my $ng = nginx_start(conf(loc('/k',
        'zk_semaphore /k/fifo leases=1 keep=5s timeout=20s;')),
        zk => $zk, backend => $be, workers => 1);
    ok(sessions_connected($ng), 'the worker has a session');
    $be->reset;

    # a foreign holder has the lease, a second foreign node waits
    my $h = zk_hold($zk, '/k/fifo', seconds => 60);
    my $w = zk_hold($zk, '/k/fifo', seconds => 60);

    my $n = 5;
    my $bg = http_parallel_bg([ map {
        [ $ng->port, "/k?key=fifo&sleep=200&id=$_" ]
    } 1 .. $n ], stagger => 0.1, timeout => 40);
    ok(wait_for(sub { (lock_stats($ng, '/k/fifo')->{waiting} // 0) == $n }, 10),
        "metrics: $n requests wait");
    sleep 0.3;
    my @c = zk_children($zk, '/k/fifo');
    my @ours = grep { $_ ne $h->node =~ s{.*/}{}r && $_ ne $w->node =~ s{.*/}{}r }
        @c;
    is(scalar @ours, 1, "the worker queued one node for its $n waiting "
        . 'requests') or diag explain \@c;

    $h->release;
    $w->release;
    my $res = http_parallel_collect($bg, 40);
    is(scalar(grep { $_->{status} == 200 } @$res), $n, "all $n: 200");
    my $st = $be->stats('fifo');
    is($st->{max}, 1, 'one at a time (leases=1)');
    is_deeply($st->{order}, [ 1 .. $n ], 'in arrival order')
        or diag explain $st->{order};
    is(scalar(keys %{{ map { ($_->{headers}{'x-token'} // '') => 1 } @$res }}),
        1, 'all on that one node\'s lease');
    $ng->stop;
    none_left('/k/fifo', 5, 'nginx stopped');
};

###############################################################################

# leases=2, one worker: requests a and b hold both leases, c and d wait in
# the worker (behind one queued node: the listing showed no lease free);
# then a Curator client queues.  The worker is over its share (1 of 2) and
# gives a lease back as a and b end: the first freed goes to its queued
# node, which is ahead of Curator's, the second to Curator.  $specs:
# [ start offset s, sleep ms ] for a, b, c, d; returns what happened.
sub fair_run {
    my ($path, $key, $specs) = @_;
    my $ng = nginx_start(conf(loc('/k',
        "zk_semaphore $path leases=2 keep=30s timeout=30s;")),
        zk => $zk, backend => $be, workers => 1);
    ok(sessions_connected($ng), 'the worker has a session');
    $be->reset;

    my @ids = qw(a b c d);
    my $t0 = time;
    my @bg = map {
        my ($at, $ms) = @{ $specs->[$_] };
        sleep $t0 + $at - time if $t0 + $at > time;
        http_parallel_bg([ [ $ng->port, "/k?key=$key&sleep=$ms&id=$ids[$_]" ] ],
            timeout => 40);
    } 0 .. 3;
    ok(wait_for(sub { $be->stats($key)->{inflight} == 2 }, 5),
        'a and b hold both leases');
    ok(wait_for(sub { (lock_stats($ng, $path)->{waiting} // 0) == 2 }, 5),
        'c and d wait');
    # the queued node comes once c has waited 100 ms for the worker's own
    # leases (at its share, see keep_stall())
    my @mine;
    wait_for(sub { @mine = eph_children($path); @mine == 3 }, 3);
    is(scalar @mine, 3, 'the worker has 2 nodes that hold and 1 queued')
        or diag explain \@mine;
    my %ours = map { owner($_) => 1 } @mine;

    my $url = 'http://' . $be->addr . "/curator?key=$key&sleep=500&id=curator";
    my $c = curator($zk, 'semaphore', $path, 0, 2, 30000, $url);
    ok(curator_expect($c, qr/^READY/, 20), 'Curator connected');
    ok(wait_for(sub { grep { !$ours{ owner($_) } } eph_children($path) }, 5),
        'Curator queued its node');
    my $queued = time - $t0;
    my $first_end = $t0 + (sort { $a <=> $b }
        map { $_->[0] + $_->[1] / 1000 } @$specs[0, 1])[0];
    cmp_ok($queued, '<', $first_end - $t0 - 0.5, sprintf('... while a and b '
        . 'still ran (%.1f s in)', $queued));

    my $at = curator_expect($c, qr/^ACQUIRED (\d+)/, 30);
    ok($at, 'Curator acquired');
    ok(curator_expect($c, qr/^RELEASED/, 30), 'Curator released');
    my @res = map { http_parallel_collect($_, 40)->[0] } @bg;
    is(scalar(grep { $_->{status} == 200 } @res), 4, 'all 4 nginx '
        . 'requests: 200');
    my $st = $be->stats($key);
    cmp_ok($st->{max}, '<=', 2, 'never more than 2 at the backend, Curator '
        . 'included') or diag explain $st;
    my $given = lock_stats($ng, $path)->{given_back} // 0;
    $ng->stop;
    none_left($path, 5, 'nginx stopped');
    return { at => $at ? $at / 1000 : undef, res => \@res,
             order => $st->{order}, given_back => $given };
}

subtest 'fair share: leases go back as requests end (ends 1 s apart)' => sub {
    my $r = fair_run('/k/fair', 'fair',
        [ [ 0, 3000 ], [ 0.05, 4000 ], [ 0.3, 3000 ], [ 0.4, 3000 ] ]);
    my $b_end = $r->{res}[1]{end};
    if ($r->{at}) {
        note sprintf 'Curator acquired %.2f s after b ended (a ended %.2f s '
            . 'before b)', $r->{at} - $b_end, $b_end - $r->{res}[0]{end};
        cmp_ok(abs($r->{at} - $b_end), '<', 0.5, 'Curator got b\'s lease as '
            . 'b ended (a\'s went to the worker\'s queued node, ahead of it)');
    }
    is_deeply([ @{ $r->{order} }[3, 4] ], [ qw(curator d) ],
        'Curator ran before d') or diag explain $r->{order};
    cmp_ok($r->{given_back}, '>=', 2, 'metrics: given_back >= 2');
};

subtest 'fair share: leases go back as requests end (ends together)' => sub {
    # a and b end within a few ms of each other: b ends before the worker
    # has heard that its queued node holds (the lease of a gone)
    my $r = fair_run('/k/fair2', 'fair2',
        [ [ 0, 4000 ], [ 0.3, 3700 ], [ 0.6, 3000 ], [ 0.7, 3000 ] ]);
    my ($first_end) = sort { $a <=> $b } map { $_->{end} } @{ $r->{res} }[0, 1];
    note sprintf 'a and b ended %.3f s apart',
        abs($r->{res}[0]{end} - $r->{res}[1]{end});
    if ($r->{at}) {
        note sprintf 'Curator acquired %.2f s after the first of a and b ended',
            $r->{at} - $first_end;
        cmp_ok($r->{at} - $first_end, '<', 0.5, 'Curator got a lease as a '
            . 'and b ended, not after c or d (3 s later)');
    }
    ok((grep { $_ eq 'curator' } @{ $r->{order} }[2, 3]),
        'Curator ran before c or d') or diag explain $r->{order};
};

###############################################################################

subtest 'a Curator waiter gets a lease while nginx keeps all of them busy' => sub {
    my $ng = nginx_start(conf(loc('/k',
        'zk_semaphore /k/busy leases=3 keep=30s timeout=10s;')),
        zk => $zk, backend => $be, workers => 1);
    ok(sessions_connected($ng), 'connected');
    $be->reset;

    # 6 clients, each a request of 100 ms after another, until Curator is
    # done (at most 30 s): a JVM slow to start on a loaded machine must not
    # find the load over
    my $stop = tempdir('busy') . '/stop';
    my @pids = map {
        my $pid = fork // die "fork: $!";
        if ($pid == 0) {
            my $end = time + 30;
            http_get($ng->port, '/k?key=busy&sleep=100')
                while time < $end && !-e $stop;
            POSIX::_exit(0);
        }
        ZkLock::Test::register_pid($pid, 'client');
        $pid
    } 1 .. 6;

    ok(wait_for(sub { $be->stats('busy')->{inflight} == 3 }, 10),
        'nginx runs 3 requests at a time');
    my $c = curator($zk, 'semaphore', '/k/busy', 0, 3, 20000);
    my $ready = curator_expect($c, qr/^READY/, 20) ? time : undef;
    ok($ready, 'Curator connected');
    my $at = curator_expect($c, qr/^ACQUIRED (\d+)/, 25);
    ok($at && $ready && $at / 1000 - $ready < 4, 'Curator acquired while '
        . 'the load lasts, within seconds (Curator waits for the one node '
        . '3 places ahead: nginx gives that one back after its quantum)')
        or diag sprintf 'acquired %.2f s after READY',
            ($at // 0) / 1000 - ($ready // 0);
    ok($be->stats('busy')->{inflight} > 0, '... the load still runs');
    ok(curator_expect($c, qr/^RELEASED/, 10), 'Curator released');
    open my $fh, '>', $stop or die "$stop: $!";
    close $fh;
    proc_wait($_, 20) for @pids;
    cmp_ok($be->stats('busy')->{max}, '<=', 3, 'never more than 3 at once');
    $ng->stop;
    none_left('/k/busy', 5, 'nginx stopped');
};

###############################################################################

subtest 'the instance is the participant: one lease for all its workers' => sub {
    my $ng = nginx_start(conf(loc('/k', 'zk_semaphore /k/inst leases=1 '
        . 'keep=30s timeout=5s; add_header X-Pid $pid always; '
        . 'add_header X-Token $zk_lock_token always;'),
        extra => ''), zk => $zk, backend => $be, workers => 4);
    ok(sessions_connected($ng), 'the workers have sessions');
    my $first = $ng->get('/k?key=inst');
    is($first->{status}, 200, 'the first request: 200');
    my $token = $first->{headers}{'x-token'} // '';

    my $z0 = zxid();
    my @r = map { $ng->get("/k?key=inst&id=$_") } 1 .. 40;
    my $z1 = zxid();
    my %pids = map { ($_->{headers}{'x-pid'} // '?') => 1 } @r;
    is(scalar(grep { $_->{status} == 200 } @r), 40,
        '40 more, each on a fresh connection: all 200');
    cmp_ok(scalar(keys %pids), '>=', 3,
        'served by ' . scalar(keys %pids) . ' of the 4 workers');
    my ($slowest) = sort { $b <=> $a } map { $_->{time} } @r;
    cmp_ok($slowest, '<', 1, sprintf('none waited (slowest %.2f s)',
        $slowest));
    is(scalar(grep { ($_->{headers}{'x-token'} // '') eq $token } @r), 40,
        'all on the first one\'s lease: its token')
        or diag explain [ map { $_->{headers}{'x-token'} } @r ];
    is(sprintf('0x%x', $z1 // -1), sprintf('0x%x', $z0 // -2),
        'ZooKeeper wrote nothing meanwhile: zxid unchanged');
    is(scalar(eph_children('/k/inst')), 1, 'one node for the instance');
    $ng->stop;
    none_left('/k/inst', 5, 'nginx stopped');
};

done_testing;
