#!/usr/bin/perl
# The per-worker ZooKeeper session and ZooKeeper faults (basic level).
#
#  1. every worker connects ("zookeeper session 0x... connected")
#  2. ZooKeeper down at request time: fail closed (503 after the timeout),
#     recovery once it is back, no node left
#  3. ZooKeeper restart while requests wait and hold: every request ends
#     (200 or 503) in time, mutual exclusion holds, no node left
#  4. SIGTERM to the master: workers close their sessions, the held lock
#     node vanishes at once (not after zk_session_timeout 30s)
#  5. SIGKILL of a worker holding a lock: the node survives until the
#     session expires (zk_session_timeout 3s), the worker is respawned,
#     another instance keeps working meanwhile
#  6. ZooKeeper unresponsive (SIGSTOP) longer than 2/3 of C's 3 s session
#     timeout: the workers drop the silent connection, reconnect, serve
#     again, quietly
#  no [alert]/[crit]/[emerg] lines anywhere, except the expected "exited
#  on signal 9" of test 5
#
# ZK_TEST_LOG_LEVEL=debug gives the module's "zk lock:" trace in error.log
# (with ZK_TEST_KEEP=1 to keep the logs).

use strict;
use warnings;
use Test::More;
use Time::HiRes qw(time sleep);
use JSON::PP ();
use POSIX qw(_exit);
use File::Temp ();
use lib 't/lib';
use ZkLock::Test;

require_prereqs(qw(nginx zookeeper kazoo module));

my $T_START = time;
my $zk = zk_start();
my $be = backend_start();
my $LOG_LEVEL = $ENV{ZK_TEST_LOG_LEVEL} || 'info';

sub conf {
    my ($session_timeout, $locations) = @_;
    return <<"EOF";
    zk_hosts %%ZK%%;
    zk_session_timeout $session_timeout;
    server {
        listen 127.0.0.1:%%PORT%%;
$locations
    }
EOF
}

# A and B: the default 10 s session timeout. (ZooKeeper 3.8.0 can leave a
# connection made while it starts up unanswered - an NPE in its
# NIOServerCnxn.close - so a worker may wait 2/3 of the session timeout
# before it tries again: 6.7 s here, inside the ~10 s recovery bound.)
my $fleet_conf = conf('10s', <<'EOF');
        location /m {
            zk_mutex /t/m timeout=2s;
            proxy_pass http://%%BACKEND%%;
        }
        location /r {
            zk_mutex /t/r timeout=15s;
            proxy_pass http://%%BACKEND%%;
        }
        location /free {
            zk_mutex /t/free timeout=5s;
            proxy_pass http://%%BACKEND%%;
        }
EOF

my %nopt = (zk => $zk, backend => $be, workers => 2, log_level => $LOG_LEVEL);
my $A = nginx_start($fleet_conf, %nopt);
my $B = nginx_start($fleet_conf, %nopt);

# ------------------------------------------------------------ local helpers

# pid => session id (hex, lowercase) of the "connected" lines in the
# error.log text after byte offset $from (the last one per pid wins).
sub connected_sessions {
    my ($ng, $from) = @_;
    my $log = substr($ng->error_log, $from // 0);
    my %s;
    $s{$1} = lc $2 while $log
        =~ /(\d+)#\d+: .*?zookeeper session 0x([0-9a-fA-F]+) connected/g;
    return \%s;
}

# True once every current worker of $ng logged "connected" after $from.
sub all_workers_connected {
    my ($ng, $from) = @_;
    my @w = $ng->worker_pids;
    my $s = connected_sessions($ng, $from);
    return @w && !grep { !$s->{$_} } @w;
}

# [alert]/[crit]/[emerg] and crash lines of $ng's error.log that were not
# checked yet (each check looks at the lines since the previous one, so
# a finding is reported by the scenario that caused it), minus @allow.
my %LOG_CHECKED;    # prefix => byte offset
sub bad_log_lines {
    my ($ng, @allow) = @_;
    my $log = $ng->error_log;
    my $from = $LOG_CHECKED{ $ng->prefix } // 0;
    $LOG_CHECKED{ $ng->prefix } = length $log;
    return grep { my $l = $_; !grep { $l =~ $_ } @allow }
        grep { /\[(?:alert|crit|emerg)\]/ || /exited on signal/ }
        split /\n/, substr($log, $from);
}

sub check_logs {
    my ($what, @ngs) = @_;
    for my $n (@ngs) {
        my ($name, $ng, @allow) = @$n;
        my @bad = bad_log_lines($ng, @allow);
        ok(!@bad, "$what: error.log of $name has no new alert/crit/emerg/"
            . "crash lines") or diag join "\n", @bad;
    }
}

sub fmt_t { sprintf '%.2f', $_[0] - $_[1] }

# ----------------------------------------------------- 1. workers connect

subtest 'every worker connects its session' => sub {
    for my $n ([A => $A], [B => $B]) {
        my ($name, $ng) = @$n;
        ok(wait_for(sub { all_workers_connected($ng) }, 15, 0.1),
            "both workers of $name logged 'zookeeper session 0x... "
            . "connected'") or diag $ng->error_log;
        my $s = connected_sessions($ng);
        my @ids = map { $s->{$_} // '' } $ng->worker_pids;
        is(scalar(keys %{ { map { $_ => 1 } @ids } }), 2,
            "$name: one session per worker") or diag explain $s;
    }
    is($A->get('/m?sleep=10&key=m1')->{status}, 200, 'a gated request works');
    check_logs('connect', [A => $A], [B => $B]);
};

# ----------------------------------------- 2. ZooKeeper down at request time

subtest 'ZooKeeper down: fail closed, then recover' => sub {
    my %off = (A => length $A->error_log, B => length $B->error_log);
    $zk->stop;
    ok(wait_for(sub {
        substr($A->error_log, $off{A}) =~ /zookeeper connection lost/ }, 5),
        'A noticed: "zookeeper connection lost"');

    my $res = http_parallel([ [ $A->port, '/m?sleep=10&key=m2&id=a' ],
        [ $B->port, '/m?sleep=10&key=m2&id=b' ] ], timeout => 20);
    for my $i (0, 1) {
        my $r = $res->[$i];
        my $name = (qw(A B))[$i];
        is($r->{status}, 503, "$name: request answers 503 while ZooKeeper "
            . "is down") or diag explain $r;
        cmp_ok($r->{time}, '>=', 1.5, "$name: after its 2 s timeout");
        cmp_ok($r->{time}, '<=', 6, "$name: not much later (no hang)");
    }
    is($be->stats('m2')->{count}, 0, 'backend never reached');
    ok($A->error_log =~ /zk_mutex "\/t\/m" not acquired in \d+ms/,
        'A logged "not acquired"');

    %off = (A => length $A->error_log, B => length $B->error_log);
    my $t0 = time;
    $zk->start;
    note sprintf 'ZooKeeper serving again after %.2fs', time - $t0;
    my $ok = wait_for(sub {
        all_workers_connected($A, $off{A})
            && all_workers_connected($B, $off{B}) }, 15, 0.1);
    my $conn_t = time - $t0;
    ok($ok, 'all workers reconnect after ZooKeeper is back');
    note sprintf 'workers reconnected %.2fs after the start', $conn_t;

    # Requests succeed again: several in a row on both instances.
    my $last;
    wait_for(sub {
        $last = http_parallel([ map { [ $_->port, '/m?sleep=10&key=m3' ] }
            $A, $B, $A, $B ], timeout => 10);
        my @ok = grep { $_->{status} == 200 } @$last;
        return @ok == 4;
    }, 15, 0.2);
    my $rec_t = time - $t0;
    is_deeply([ map { $_->{status} } @$last ], [ (200) x 4 ],
        'requests succeed again');
    cmp_ok($rec_t, '<=', 12, 'within ~10 s of ZooKeeper being started');
    note sprintf 'requests succeed after %.2fs', $rec_t;
    no_ephemerals($zk, '/t', 'after the outage');
    check_logs('zk down', [A => $A], [B => $B]);
};

# ----------------------------- 3. ZooKeeper restart while requests wait/hold

subtest 'ZooKeeper restart while requests wait and hold' => sub {
    my $t0 = time;
    my $h = http_parallel_bg([ map {
        [ ($_ % 2 ? $A : $B)->port, "/r?sleep=1500&key=r3&id=$_" ] } 1 .. 6 ],
        timeout => 40);
    ok(wait_for(sub { $be->stats('r3')->{inflight} == 1 }, 5, 0.02),
        'one request holds the mutex');
    # The others queue (one znode each).
    my @ch;
    ok(wait_for(sub { @ch = zk_children($zk, '/t/r'); @ch == 6 }, 3, 0.05),
        'all 6 requests have a node') or diag explain \@ch;
    # Down for 2 s: the holder's release (1.5 s) falls in the outage.
    my $t_restart = time;
    $zk->stop;
    sleep 2;
    $zk->start;
    my $t_back = time;
    my $res = http_parallel_collect($h, 60);

    my $timeline = join "\n",
        "restart +" . fmt_t($t_restart, $t0) . " .. +" . fmt_t($t_back, $t0),
        map { "r$_: $res->[$_-1]{status} +" . fmt_t($res->[$_-1]{start}, $t0)
            . " .. +" . fmt_t($res->[$_-1]{end}, $t0)
            . ($res->[$_-1]{error} ? " ($res->[$_-1]{error})" : '') } 1 .. 6;
    note $timeline;
    for my $i (1 .. 6) {
        my $r = $res->[$i - 1];
        like($r->{status}, qr/^(?:200|503)$/, "r$i ends with 200 or 503")
            or diag $timeline;
        # 15 s wait + 1.5 s backend + margin
        cmp_ok($r->{time}, '<=', 20, "r$i ends within its timeout + margin")
            or diag $timeline;
    }
    my $n200 = grep { $_->{status} == 200 } @$res;
    cmp_ok($n200, '>=', 1, "some requests got the lock ($n200 x 200)");
    my $s = $be->stats('r3');
    is($s->{max}, 1, 'backend max in flight stayed 1');
    is($s->{count}, $n200, 'backend count matches the 200s');

    my $after;
    ok(wait_for(sub {
        $after = http_get($A->port, '/r?sleep=10&key=r3b', timeout => 20);
        $after->{status} == 200 }, 15, 0.2), 'a new request succeeds')
        or diag explain $after;
    is(http_get($B->port, '/r?sleep=10&key=r3b', timeout => 20)->{status},
        200, 'on the other instance too');
    no_ephemerals($zk, '/t', 'after the restart');
    check_logs('zk restart', [A => $A], [B => $B]);
};

# ---------------------------- 4. SIGTERM: workers close their sessions

subtest 'SIGTERM to the master closes the sessions at once' => sub {
    my $D = nginx_start(conf('30s', <<'EOF'), %nopt);
        location /term {
            zk_mutex /t/term timeout=10s;
            proxy_pass http://%%BACKEND%%;
        }
EOF
    ok(wait_for(sub { all_workers_connected($D) }, 15, 0.1),
        'D: workers connected');
    my $h = http_parallel_bg([[ $D->port, '/term?sleep=20000&key=term' ]],
        timeout => 30);
    ok(wait_for(sub { $be->stats('term')->{inflight} == 1 }, 5, 0.02),
        'a request holds the lock (backend in flight 1)');
    my @eph = zk_ephemerals($zk, '/t/term');
    is(scalar @eph, 1, 'its node exists') or diag explain \@eph;

    my $master = $D->pid;
    my $t0 = time;
    kill 'TERM', $master or die "kill: $!";
    my $gone = wait_for(sub { !zk_ephemerals($zk, '/t/term') }, 5, 0.05);
    my $took = time - $t0;
    ok($gone, 'the lock node disappears');
    cmp_ok($took, '<=', 2.5,
        sprintf('within ~2 s (%.2fs), far below the 30 s session timeout',
            $took));
    ok(defined proc_wait($master, 10), 'the master exits');
    like($D->error_log, qr/closing zookeeper session 0x[0-9a-f]+/,
        'D logged "closing zookeeper session"');
    my $r = http_parallel_collect($h, 10)->[0];
    isnt($r->{status}, 200, 'the held request did not complete normally')
        or diag explain $r;
    check_logs('SIGTERM', [D => $D]);
};

# ------------------------ 5. SIGKILL of a worker that holds a lock

my $C;
subtest 'SIGKILL of a worker holding a lock' => sub {
    $C = nginx_start(conf('3s', <<'EOF'), %nopt);
        location /k {
            zk_mutex /t/kill timeout=10s;
            proxy_pass http://%%BACKEND%%;
        }
EOF
    ok(wait_for(sub { all_workers_connected($C) }, 15, 0.1),
        'C: workers connected');
    my $h = http_parallel_bg([[ $C->port, '/k?sleep=20000&key=kill' ]],
        timeout => 30);
    ok(wait_for(sub { $be->stats('kill')->{inflight} == 1 }, 5, 0.02),
        'a request holds the lock');
    my ($node) = zk_ephemerals($zk, '/t/kill');
    ok($node, "its node: " . ($node // 'none'));
    my $owner = $node ? sprintf('%x', zk_get($zk, $node)->{ephemeral_owner})
                      : '';
    my $sess = connected_sessions($C);
    my ($victim) = grep { $sess->{$_} eq $owner } $C->worker_pids;
    ok($victim, "the holding worker is found by its session 0x$owner")
        or diag explain $sess;
    return unless $victim && $node;

    my $t0 = time;
    kill 'KILL', $victim or die "kill: $!";
    my $r = http_parallel_collect($h, 10)->[0];
    isnt($r->{status}, 200, "the killed worker's client got no answer");

    # The other instance keeps working while C's lock is stuck. Sample
    # until the node is gone.
    my (@free, $gone_at, $present_1s);
    while (time - $t0 < 15) {
        my $exists = zk_get($zk, $node) ? 1 : 0;
        my $t = time - $t0;
        $present_1s = $exists if $t <= 1.2;
        if (!$exists) { $gone_at = $t; last }
        push @free, $A->get('/free?sleep=10&key=free', timeout => 10);
    }
    ok($present_1s, 'the node survives the kill (checked at ~1 s)');
    ok(defined $gone_at, 'then it disappears with the session');
    if (defined $gone_at) {
        cmp_ok($gone_at, '>=', 1.5,
            sprintf('not before ~the 3 s session timeout (%.2fs)', $gone_at));
        cmp_ok($gone_at, '<=', 10, 'well before 15 s');
    }
    ok(scalar @free, scalar(@free) . ' requests to A meanwhile');
    is_deeply([ grep { $_ != 200 } map { $_->{status} } @free ], [],
        'all of them 200');
    is_deeply([ grep { $_->{time} > 2 } @free ], [], 'all of them quick');

    ok(wait_for(sub {
        my @w = $C->worker_pids;
        @w == 2 && !grep { $_ == $victim } @w }, 10, 0.1),
        'the master respawned the worker');
    ok(wait_for(sub { all_workers_connected($C) }, 15, 0.1),
        'the new worker connects');
    my $last;
    ok(wait_for(sub {
        $last = http_parallel([ map { [ $C->port, '/k?sleep=10&key=kill2' ] }
            1 .. 4 ], timeout => 15);
        !grep { $_->{status} != 200 } @$last }, 15, 0.2),
        'requests to C succeed again')
        or diag explain [ map { $_->{status} } @$last ];
    no_ephemerals($zk, '/t', 'after the kill');

    like($C->error_log, qr/worker process $victim exited on signal 9/,
        'C: the kill is logged');
    $C->expect_log(
        qr/\[alert\] \d+#\d+: worker process $victim exited on signal 9$/);
    check_logs('SIGKILL (except the expected exit on signal 9)',
        [C => $C, qr/\[alert\] \d+#\d+: worker process $victim exited on signal 9$/]);
    check_logs('SIGKILL', [A => $A], [B => $B]);
};

# ------------------- 6. ZooKeeper unresponsive (SIGSTOP) past the timeout
#
# With zk_session_timeout 3s the client gives up a silent connection after
# 2 s (2/3 of it) and reconnects; the session may expire meanwhile. The
# workers must come back by themselves, quietly (no [alert]).

subtest 'ZooKeeper unresponsive (paused) longer than 2/3 of the timeout' => sub {
    plan skip_all => 'C did not start' unless $C;
    my $off = length $C->error_log;
    my %off = (A => length $A->error_log, B => length $B->error_log);
    $zk->pause;
    sleep 2.6;    # > 2 s (2/3 of C's 3 s), < 6.7 s (2/3 of A/B's 10 s)
    $zk->resume;
    my $t0 = time;
    like(substr($C->error_log, $off), qr/zookeeper connection lost/,
        'C noticed the silent server');
    ok(wait_for(sub { all_workers_connected($C, $off) }, 15, 0.1),
        'C: every worker has a session again');
    my $last;
    ok(wait_for(sub {
        $last = http_parallel([ map { [ $C->port, '/k?sleep=10&key=p' ] }
            1 .. 4 ], timeout => 15);
        !grep { $_->{status} != 200 } @$last }, 15, 0.2),
        'requests to C succeed again')
        or diag explain [ map { $_->{status} } @$last ];
    note sprintf 'C serves again %.2fs after the resume', time - $t0;
    is($A->get('/free?sleep=10&key=p')->{status}, 200,
        'A (10 s sessions) works');
    is($B->get('/free?sleep=10&key=p')->{status}, 200,
        'B (10 s sessions) works');
    no_ephemerals($zk, '/t', 'after the pause');
    check_logs('pause', [C => $C], [A => $A], [B => $B]);
};

note sprintf 'total runtime %.1fs', time - $T_START;
done_testing;
