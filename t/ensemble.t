#!/usr/bin/perl
# Surviving ZooKeeper faults: a leader crash in an ensemble, and a create
# whose reply is lost with the connection.
#
#  1. leader SIGKILLed in a 3-node ensemble under a steady load of gated
#     requests from two nginx instances: mutual exclusion holds, every
#     request ends with 200 or 503 in its timeout, a new leader takes
#     over and the lock works again within seconds on both instances, no
#     node is left behind, no worker crashed
#  2. create reply lost ("protection mode"), through a fault proxy
#     (t/lib/ZkLock/FaultProxy.pm) between nginx and ZooKeeper that
#     forwards the create but swallows its reply, then cuts the
#     connection while the session lives on:
#     a. the request still waiting: after the reconnect it finds its node
#        by its uuid and holds that very node (no second node, no orphan),
#        and the next request gets the lock at once
#     b. the client gone before the reconnect: the found node is deleted
#        at once (not left until the session ends), the backend is never
#        reached
#  no [alert]/[crit]/[emerg] line, no worker exited on a signal
#
# ZK_TEST_LOG_LEVEL=debug gives the module's "zk lock:" trace in error.log
# (with ZK_TEST_KEEP=1 to keep the logs).

use strict;
use warnings;
use Test::More;
use Time::HiRes qw(time sleep);
use lib 't/lib';
use ZkLock::Test;
use ZkLock::FaultProxy;

require_prereqs(qw(nginx zookeeper kazoo module));

my $T_START = time;
my $LOG_LEVEL = $ENV{ZK_TEST_LOG_LEVEL} || 'info';
my $be = backend_start();

sub conf {
    my ($locations) = @_;
    return <<"EOF";
    zk_hosts %%ZK%%;
    zk_session_timeout 10s;
    server {
        listen 127.0.0.1:%%PORT%%;
$locations
    }
EOF
}

# [alert]/[crit]/[emerg] and crash lines of an error.log
sub bad_log_lines {
    my ($ng) = @_;
    return grep { /\[(?:alert|crit|emerg)\]/ || /exited on signal/ }
        split /\n/, $ng->error_log;
}

sub check_logs {
    my ($what, %ngs) = @_;
    for my $name (sort keys %ngs) {
        my @bad = bad_log_lines($ngs{$name});
        ok(!@bad, "$what: error.log of $name has no alert/crit/emerg/crash "
            . 'lines') or diag join "\n", @bad;
    }
}

# pid => session id of the "connected" lines of $ng's error.log
sub connected_sessions {
    my ($ng) = @_;
    my %s;
    my $log = $ng->error_log;
    push @{ $s{$1} }, lc $2 while $log
        =~ /(\d+)#\d+: .*?zookeeper session 0x([0-9a-fA-F]+) connected/g;
    return \%s;
}

sub basename { my ($p) = @_; $p =~ s{.*/}{}; return $p }

# ------------------------------------------- 1. leader killed under load

subtest 'leader SIGKILLed in a 3-node ensemble under load' => sub {
    my $ens = zk_ensemble_start(3);
    my $timeout = 15;
    my %nopt = (zk => $ens->hosts, backend => $be, workers => 2,
        log_level => $LOG_LEVEL);
    my $loc = <<"EOF";
        location /e {
            zk_mutex /e/lock timeout=${timeout}s;
            proxy_pass http://%%BACKEND%%;
        }
EOF
    my $A = nginx_start(conf($loc), %nopt);
    my $B = nginx_start(conf($loc), %nopt);
    ok(sessions_connected($A, $B), 'every worker has a session');
    like($A->conf, qr/zk_hosts (?:127\.0\.0\.1:\d+,){2}127\.0\.0\.1:\d+;/,
        'zk_hosts lists the three servers');
    is($A->get('/e?key=ewarm')->{status}, 200, 'the lock works');

    my $leader = $ens->leader_index;
    ok($leader, 'the ensemble has a leader: node ' . ($leader // 'none'));
    return unless $leader;

    # 48 requests, one every 100 ms, alternating A and B, each holding the
    # lock 150 ms: a queue that is never empty while the leader dies.
    my $n = 48;
    my $t0 = time;
    my $h = http_parallel_bg([ map {
        [ ($_ % 2 ? $A : $B)->port, "/e?key=ens&sleep=150&id=$_" ] }
        1 .. $n ], stagger => 0.1, timeout => 60);
    ok(wait_for(sub { $be->stats('ens')->{count} >= 8 }, 15, 0.05),
        'the load runs (8 requests served)');
    my @queued = zk_children($ens, '/e/lock');
    note scalar(@queued) . ' nodes queued when the leader dies';
    my $t_kill = time;
    $ens->node($leader)->kill;
    note sprintf 'leader (node %d) killed at +%.2fs', $leader, $t_kill - $t0;

    my $new = wait_for(sub {
        my $l = $ens->leader_index;
        $l && $l != $leader ? $l : 0 }, 30, 0.2);
    ok($new, 'a new leader is elected: node ' . ($new || 'none'));
    note sprintf 'new leader after %.2fs', time - $t_kill;

    my $res = http_parallel_collect($h, 90);
    my $t_end = time;
    my @timeline = map { my $r = $res->[$_ - 1]; sprintf
        'e%d: %d +%.2f .. +%.2f%s', $_, $r->{status},
        ($r->{start} // $t0) - $t0,
        ($r->{end} // $t_end) - $t0, $r->{error} ? " ($r->{error})" : '' }
        1 .. $n;
    my @odd = grep { $res->[$_]{status} !~ /^(?:200|503)$/ } 0 .. $n - 1;
    is_deeply([ map { "e" . ($_ + 1) . ": $res->[$_]{status}" } @odd ], [],
        'every request ends with 200 or 503') or diag join "\n", @timeline;
    my @slow = grep { ($res->[$_]{time} // 999) > $timeout + 6 } 0 .. $n - 1;
    is_deeply([ map { "e" . ($_ + 1) . ": $res->[$_]{time}s" } @slow ], [],
        "none takes longer than the ${timeout}s timeout + 6s")
        or diag join "\n", @timeline;
    my $n200 = grep { $_->{status} == 200 } @$res;
    my $n503 = grep { $_->{status} == 503 } @$res;
    note "$n200 x 200, $n503 x 503";
    my $across = grep { $_->{status} == 200 && $_->{start} < $t_kill
        && $_->{end} > $t_kill } @$res;    # a 200 has start and end
    cmp_ok($across, '>=', 1, "requests in flight across the kill got the "
        . "lock ($across)") or diag join "\n", @timeline;
    # The lock served on across the kill: the longest time without a
    # request getting through stays far below the 10 s session timeout.
    my @ends = sort { $a <=> $b } map { $_->{end} }
        grep { $_->{status} == 200 } @$res;
    my ($gap, $gap_at) = (0, 0);
    for my $i (1 .. $#ends) {
        ($gap, $gap_at) = ($ends[$i] - $ends[$i - 1], $ends[$i - 1])
            if $ends[$i] - $ends[$i - 1] > $gap;
    }
    cmp_ok($gap, '<=', 8, sprintf('the lock served again within seconds '
        . '(longest pause %.2fs, from +%.2fs)', $gap, $gap_at - $t0))
        or diag join "\n", @timeline;
    my $st = $be->stats('ens');
    is($st->{max}, 1, 'mutual exclusion: never more than one in flight');
    is($st->{count}, $n200, 'the backend saw exactly the 200s');

    my $hit = grep { $_->error_log =~ /zookeeper connection lost/ } $A, $B;
    ok($hit, 'the workers noticed the fault ("zookeeper connection lost")');
    unlike($A->error_log . $B->error_log, qr/session 0x[0-9a-f]+ expired/,
        'no session expired');

    # With two nodes left the quorum holds: both instances lock again.
    my $t_fresh = time;
    my $last;
    ok(wait_for(sub {
        $last = http_parallel([ map { [ $_->port, '/e?key=efresh' ] }
            $A, $B, $A, $B ], timeout => 10);
        !grep { $_->{status} != 200 } @$last }, 15, 0.2),
        'fresh requests to both instances get the lock')
        or diag explain [ map { $_->{status} } @$last ];
    my $after = time - $t_fresh;
    cmp_ok($after, '<=', 5, sprintf('within a few seconds after the load '
        . '(%.2fs, %.2fs after the kill)', $after, time - $t_kill));
    no_ephemerals($ens, '/e', 'after the leader kill', 10);
    check_logs('leader kill', A => $A, B => $B);

    $A->stop;
    $B->stop;
    $ens->stop;
};

# ------------------------------------- 2. create reply lost (protection)

subtest 'create reply lost: the node is found by its uuid' => sub {
    my $zk = zk_start();
    my $px = ZkLock::FaultProxy->start($zk);
    my $timeout = 8;
    my $ng = nginx_start(conf(<<"EOF"),
        location /p {
            zk_mutex /pl/m timeout=${timeout}s;
            proxy_pass http://%%BACKEND%%;
            add_header X-Lock-Token \$zk_lock_token always;
        }
EOF
        zk => $px->hosts, backend => $be, workers => 2,
        log_level => $LOG_LEVEL);
    # A persistent parent: the module's first create is the lock node's.
    zk_create($zk, '/pl/m', makepath => 1);
    ok(sessions_connected($ng), 'every worker has a session (through the '
        . 'proxy)');
    my $warm = $ng->get('/p?key=pwarm');
    is($warm->{status}, 200, 'the lock works through the proxy');

    # The last fault's swallowed reply to a lock node create, if any.
    my $lost_create = sub {
        my $f = $px->stats->{faults}[-1] or return;
        return unless $f->{closed};
        my ($c) = grep { ($_->{path} // '') =~ m{^/pl/m/_c_} }
            @{ $f->{creates} };
        return ($f, $c);
    };

    # --- a. the request still waiting: it adopts its node

    my $t0 = $px->blackhole(close_after => 0.3);
    my $h = http_parallel_bg([[ $ng->port, '/p?key=lost&sleep=2000' ]],
        timeout => 30);
    my ($f, $c);
    ok(wait_for(sub { ($f, $c) = $lost_create->(); $c }, 10, 0.05),
        'the proxy swallowed the reply to the lock node create and cut the '
        . 'connection') or diag explain $px->stats;
    return unless $c;
    is($c->{err}, 0, 'the create succeeded on the server (ZOK)');
    like($c->{created} // '', qr{^/pl/m/_c_[0-9a-f-]{36}-lock-\d{10}$},
        "the node exists: $c->{created}");
    my $lost = $c->{created};
    note sprintf 'reply swallowed at +%.3fs, connections cut at +%.3fs',
        $c->{reply_t} - $t0, $f->{closed} - $t0;

    # While the request is in the backend, the only node under the lock is
    # the one whose reply was lost.
    my $holding = wait_for(sub { $be->stats('lost')->{inflight} == 1 },
        $timeout + 2, 0.05);
    ok($holding, 'the request got the lock after the reconnect');
    my $czxid;
    if ($holding) {
        is_deeply([ zk_children($zk, '/pl/m') ], [ basename($lost) ],
            'it holds the very node whose create reply was lost (adopted, '
            . 'not created again)');
        $czxid = (zk_get($zk, $lost) // {})->{czxid};
    }
    my $r = http_parallel_collect($h, 30)->[0];
    like($r->{status}, qr/^(?:200|503)$/, "the request ends with 200 or 503 "
        . "($r->{status})") or diag explain $r;
    cmp_ok($r->{time}, '<=', $timeout + 2 + 3, sprintf(
        'within its timeout (%.2fs)', $r->{time}));
    is($r->{status}, 200, 'it got the lock (200)') or diag explain $r;
    is($r->{headers}{'x-lock-token'}, $czxid, 'its fencing token is the '
        . 'czxid of the adopted node, asked for as no create reply had it');
    my $creates_for_it = grep { ($_->{path} // '') =~ m{^/pl/m/_c_}
        && $_->{t} >= $t0 && $_->{t} <= $r->{end} } @{ $px->stats->{creates} };
    is($creates_for_it, 1, 'one lock node create for it, none after the '
        . 'reconnect');
    ok(wait_for(sub { !zk_ephemerals($zk, '/pl') }, 2, 0.05),
        'no orphan: no node left below /pl within 2 s of its end')
        or diag explain [ zk_ephemerals($zk, '/pl') ];
    ok(!zk_get($zk, $lost), 'the adopted node is gone');

    my $next = $ng->get('/p?key=next', timeout => 15);
    is($next->{status}, 200, 'the next request gets the lock');
    cmp_ok($next->{time}, '<=', 2, sprintf('promptly (%.2fs), far below the '
        . '10 s session timeout', $next->{time}));
    if ($LOG_LEVEL eq 'debug') {
        like($ng->error_log, qr/found lost node "\Q$lost\E"/,
            'debug log: "found lost node"');
    }

    # --- b. the client gone before the reconnect: the node is deleted

    $t0 = $px->blackhole(close_after => 1.5);
    my $abort = http_abort_after($ng->port, '/p?key=gone&sleep=2000', 0.3);
    proc_wait($abort, 5);
    my $t_abort = time;
    ok(wait_for(sub { ($f, $c) = $lost_create->(); $c }, 10, 0.05),
        'b: the create reply was swallowed, then the connection cut')
        or diag explain $px->stats;
    return unless $c;
    my $lost_b = $c->{created} // '';
    is($c->{err}, 0, "b: the node was created: $lost_b");
    cmp_ok($c->{t}, '<', $t_abort, 'b: the create was sent before the '
        . 'client went away') or diag explain $c;
    cmp_ok($t_abort, '<', $f->{closed}, 'b: the client went away before '
        . 'the cut (while the create reply was lost)') or diag explain $f;
    my $t_cut = $f->{closed};
    my $gone = wait_for(sub { !zk_ephemerals($zk, '/pl') }, 3, 0.05);
    ok($gone, sprintf('b: no orphan: the found node is deleted (%.2fs '
        . 'after the cut)', time - $t_cut))
        or diag explain [ zk_ephemerals($zk, '/pl') ];
    is($be->stats('gone')->{count}, 0, 'b: the backend was never reached');
    $next = $ng->get('/p?key=next2', timeout => 15);
    is($next->{status}, 200, 'b: the next request gets the lock');
    cmp_ok($next->{time}, '<=', 2, sprintf('b: promptly (%.2fs)',
        $next->{time}));

    # The faults cut connections, never the sessions.
    like($ng->error_log, qr/zookeeper connection lost/,
        'the workers noticed the cuts ("zookeeper connection lost")');
    unlike($ng->error_log, qr/session 0x[0-9a-f]+ expired/,
        'no session expired');
    my $sessions = connected_sessions($ng);
    my @changed = grep { my $ids = $sessions->{$_};
        grep { $_ ne $ids->[0] } @$ids } keys %$sessions;
    is_deeply(\@changed, [], 'every worker reconnected with its session');
    cmp_ok($px->stats->{accepted}, '>=', 4, 'the workers reconnected '
        . 'through the proxy (' . $px->stats->{accepted} . ' connections)');
    check_logs('lost reply', nginx => $ng);

    $ng->stop;
    $px->stop;
    $zk->stop;
};

# ------------------------------------------------------------------ cleanup

$be->stop;
my @alive = grep { pid_alive($_) } started_pids();
is_deeply(\@alive, [], 'every process started here is gone');
note sprintf 'total runtime %.1fs', time - $T_START;
done_testing;
