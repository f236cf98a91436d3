#!/usr/bin/perl
# zk_semaphore across a fleet: one ZooKeeper, one backend, two nginx
# instances (2 workers each) with the same configuration.
#
#  1. leases are all used and never exceeded (30 requests, leases=3)
#  2. no lease stays idle when a waiter ahead leaves (timeout, client abort)
#  3. out-of-order releases: a waiter takes the first lease that is freed,
#     not the one of the oldest holder
#  4. a timeout answers zk_lock_status (configured 429, default 503) and
#     leaves no node
#  5. after every scenario: no ephemeral node under /t, no [alert]/[crit]/
#     [emerg] or crash lines in either error.log
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

my $conf = <<'EOF';
    zk_hosts %%ZK%%;
    zk_session_timeout 10s;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /s {
            zk_semaphore /t/sem leases=3 timeout=10s;
            proxy_pass http://%%BACKEND%%;
        }
        # scenario 2: one lock path, a short and a long timeout
        location /idle-short {
            zk_semaphore /t/idle leases=2 timeout=1s;
            proxy_pass http://%%BACKEND%%;
        }
        location /idle-long {
            zk_semaphore /t/idle leases=2 timeout=20s;
            proxy_pass http://%%BACKEND%%;
        }
        location /ooo {
            zk_semaphore /t/ooo leases=3 timeout=20s;
            proxy_pass http://%%BACKEND%%;
        }
        location /st429 {
            zk_semaphore /t/st leases=1 timeout=1s;
            zk_lock_status 429;
            proxy_pass http://%%BACKEND%%;
        }
        location /st503 {
            zk_semaphore /t/st leases=1 timeout=1s;
            proxy_pass http://%%BACKEND%%;
        }
    }
EOF

my %nopt = (zk => $zk, backend => $be, workers => 2,
    log_level => $ENV{ZK_TEST_LOG_LEVEL} || 'info');
my $A = nginx_start($conf, %nopt);
my $B = nginx_start($conf, %nopt);
my ($PA, $PB) = ($A->port, $B->port);

# ------------------------------------------------------------ local helpers

sub children { return zk_children($zk, $_[0]) }

# New children of $path (not in @$old), polled until there are $n of them.
sub wait_new_children {
    my ($path, $old, $n, $timeout) = @_;
    my %old = map { $_ => 1 } @$old;
    my @new;
    wait_for(sub {
        @new = grep { !$old{$_} } children($path);
        return @new >= $n;
    }, $timeout // 3, 0.02);
    return @new;
}

# [alert]/[crit]/[emerg] and crash lines of $ng's error.log since the
# previous check (so a finding is reported by the scenario that caused it).
my %LOG_CHECKED;    # prefix => byte offset
sub bad_log_lines {
    my ($ng) = @_;
    my $log = $ng->error_log;
    my $from = $LOG_CHECKED{ $ng->prefix } // 0;
    $LOG_CHECKED{ $ng->prefix } = length $log;
    return grep { /\[(?:alert|crit|emerg)\]/ || /exited on signal/
        || /signal \d+ \(SIG(?:SEGV|ABRT|BUS|CHLD)\)/ }
        split /\n/, substr($log, $from);
}

# Assertions made after every scenario.
sub check_clean {
    my ($what) = @_;
    my @eph;
    my $ok = wait_for(sub { @eph = zk_ephemerals($zk, '/t'); !@eph }, 3, 0.1);
    ok($ok, "$what: no ephemeral node left under /t")
        or diag explain \@eph;
    for my $ng ([A => $A], [B => $B]) {
        my @bad = bad_log_lines($ng->[1]);
        ok(!@bad, "$what: error.log of $ng->[0] has no new alert/crit/"
            . "emerg/crash lines") or diag join "\n", @bad;
    }
}

sub fmt_t { sprintf '%.2f', $_[0] - $_[1] }

# Fair (FIFO) semaphore check: the waiters, in queue order, each take the
# earliest freed lease - from the holders' ends, then from the ends of the
# waiters before it. A waiter's backend start is estimated as its end minus
# its sleep. It must start at most $late s after that lease was freed (no
# idle lease) and not before it (exclusion, with 0.3 s of clock slack).
sub check_fair {
    my (%a) = @_;
    my ($t0, $late, $w_ms) = @a{qw(t0 late w_ms)};
    my @free = @{ $a{holder_ends} };
    my @w = @{ $a{waiters} };    # [name, result]
    for my $w (@w) {
        my ($name, $r) = @$w;
        @free = sort { $a <=> $b } @free;
        my $expect = shift @free;
        my $start = $r->{end} - $w_ms / 1000;
        cmp_ok($start, '<=', $expect + $late,
            "$name starts at most ${late}s after the lease it takes is freed"
            . " (freed +" . fmt_t($expect, $t0) . ", started ~+"
            . fmt_t($start, $t0) . ")") or diag $a{timeline};
        cmp_ok($start, '>=', $expect - 0.3,
            "$name does not start before that lease is freed");
        push @free, $r->{end};
    }
}

# ---------------------------------------------- 0. both fleets' sessions up

ok(wait_for(sub {
    my $n = 0;
    for my $ng ($A, $B) {
        my %w = map { $_ => 1 } $ng->worker_pids;
        my $log = $ng->error_log;
        my %c;
        $c{$1} = 1 while $log =~ /(\d+)#\d+: .*zookeeper session 0x[0-9a-f]+ connected/g;
        $n += grep { $c{$_} } keys %w;
    }
    return $n == 4;
}, 15, 0.1), 'the 4 workers have a connected ZooKeeper session');

# ------------------------------------------- 1. leases used, never exceeded

subtest 'leases=3: 30 concurrent requests over 2 instances' => sub {
    my $t0 = time;
    my $res = http_parallel([ map {
        [ $_ % 2 ? $PA : $PB, "/s?sleep=300&key=s1&id=$_" ] } 1 .. 30 ],
        timeout => 40);
    my $took = time - $t0;
    my @st = map { $_->{status} } @$res;
    is_deeply(\@st, [ (200) x 30 ], 'all 30 answered 200')
        or diag explain [ map { "$_->{status} " . ($_->{error} // '') }
            @$res ];
    my $s = $be->stats('s1');
    is($s->{max}, 3, 'backend max in flight is exactly 3');
    is($s->{count}, 30, 'backend saw 30 requests');
    is($s->{inflight}, 0, 'none in flight afterwards');
    # 30 requests of 300 ms, 3 at a time: at least 10 rounds.
    cmp_ok($took, '>=', 2.9, 'took at least 10 rounds of 300 ms');
    note sprintf 'took %.2fs', $took;
    check_clean('leases=3');
};

# --------------------------- 2. no idle lease when a waiter ahead leaves

# Two holders (H1 on A 4000 ms, H2 on B 5000 ms) occupy both leases; then W1
# (leaves while waiting: timeout or client abort), then W2 and W3 (long
# timeout). When a holder ends, the next waiter must get its lease at once.
sub idle_scenario {
    my ($variant) = @_;
    my $key = "idle-$variant";
    my @hold_ms = (4000, 5000);
    my $w_ms = 500;
    my $t0 = time;

    is_deeply([ zk_ephemerals($zk, '/t/idle') ], [], 'lock path starts empty');
    my $old = [ children('/t/idle') ];
    my $hb = http_parallel_bg([
        [ $PA, "/idle-long?sleep=$hold_ms[0]&key=$key&id=h1" ],
        [ $PB, "/idle-long?sleep=$hold_ms[1]&key=$key&id=h2" ] ],
        timeout => 30);
    ok(wait_for(sub { $be->stats($key)->{inflight} == 2 }, 5, 0.02),
        'both leases held');
    my @h_nodes = wait_new_children('/t/idle', $old, 2);
    is(scalar @h_nodes, 2, 'two holder nodes') or diag explain \@h_nodes;
    $old = [ children('/t/idle') ];

    my ($w1b, $w1pid);
    if ($variant eq 'timeout') {
        $w1b = http_parallel_bg([[ $PA, "/idle-short?sleep=$w_ms&key=$key&id=w1" ]],
            timeout => 30);
    } else {
        $w1pid = http_abort_after($PB,
            "/idle-long?sleep=$w_ms&key=$key&id=w1", 1.2);
    }
    my ($w1_node) = wait_new_children('/t/idle', $old, 1);
    ok($w1_node, 'W1 queued') or diag explain [children('/t/idle')];
    $old = [ children('/t/idle') ];

    my $w2b = http_parallel_bg([[ $PB, "/idle-long?sleep=$w_ms&key=$key&id=w2" ]],
        timeout => 30);
    my ($w2_node) = wait_new_children('/t/idle', $old, 1);
    ok($w2_node, 'W2 queued behind W1');
    $old = [ children('/t/idle') ];

    my $w3b = http_parallel_bg([[ $PA, "/idle-long?sleep=$w_ms&key=$key&id=w3" ]],
        timeout => 30);
    my ($w3_node) = wait_new_children('/t/idle', $old, 1);
    ok($w3_node, 'W3 queued behind W2');
    my $queued_at = time;

    # W1 leaves while the holders still hold.
    my $w1_gone = wait_for(sub {
        !grep { $_ eq ($w1_node // '') } children('/t/idle') }, 5, 0.05);
    my $w1_gone_at = time;
    ok($w1_gone, "W1's node is deleted when it leaves ($variant)");
    proc_wait($w1pid, 5) if $w1pid;

    my $h  = http_parallel_collect($hb);
    my $w1 = $w1b ? http_parallel_collect($w1b)->[0] : undef;
    my $w2 = http_parallel_collect($w2b)->[0];
    my $w3 = http_parallel_collect($w3b)->[0];

    my @h_end = sort { $a <=> $b } map { $_->{end} } @$h;
    my $timeline = join "\n",
        "queued all at +" . fmt_t($queued_at, $t0),
        "W1 node gone seen at +" . fmt_t($w1_gone_at, $t0),
        (map { "h$_: $h->[$_-1]{status} +" . fmt_t($h->[$_-1]{start}, $t0)
            . " .. +" . fmt_t($h->[$_-1]{end}, $t0) } 1 .. 2),
        (map { my ($n, $r) = @$_; $r ? "$n: $r->{status} +"
            . fmt_t($r->{start}, $t0) . " .. +" . fmt_t($r->{end}, $t0)
            . ($r->{error} ? " ($r->{error})" : '') : () }
            [w1 => $w1], [w2 => $w2], [w3 => $w3]);
    note $timeline;

    ok($queued_at < $h_end[0], 'all waiters queued before a holder ended')
        or diag $timeline;
    ok($w1_gone_at < $h_end[0], 'W1 left before a holder ended')
        or diag $timeline;
    is_deeply([ map { $_->{status} } @$h ], [200, 200], 'holders 200');
    if ($w1) {
        is($w1->{status}, 503, 'W1 (timeout=1s) answered 503');
        cmp_ok($w1->{time}, '>=', 0.8, 'W1 waited about its timeout');
        cmp_ok($w1->{time}, '<', 3.5, 'W1 did not wait much longer');
    } else {
        ok(wait_for(sub { ($A->access_log . $B->access_log)
            =~ m{"GET /idle-long\?\S*id=w1 HTTP/1\.0" 499 } }, 3),
            'W1 abort seen by nginx (499)');
    }
    is($w2->{status}, 200, 'W2 answered 200') or diag $timeline;
    is($w3->{status}, 200, 'W3 answered 200') or diag $timeline;
    # W2 takes the first lease freed (h1's), W3 the next one (W2's own or
    # h2's, whichever comes first), each within 1.5 s.
    check_fair(t0 => $t0, late => 1.5, w_ms => $w_ms, timeline => $timeline,
        holder_ends => \@h_end, waiters => [ [W2 => $w2], [W3 => $w3] ]);
    my $s = $be->stats($key);
    is($s->{max}, 2, 'backend max in flight is 2');
    is($s->{count}, 4, 'backend saw the 2 holders and W2, W3 only');
    is_deeply([ sort @{ $s->{order} }[0, 1] ], [qw(h1 h2)], 'holders first');
    is_deeply([ sort @{ $s->{order} }[2 .. $#{ $s->{order} }] ], [qw(w2 w3)],
        'then W2 and W3, never W1') or diag explain $s->{order};
    check_clean("idle lease ($variant)");
}

subtest 'no idle lease: a waiter ahead times out'  => sub { idle_scenario('timeout') };
subtest 'no idle lease: a waiter ahead aborts'     => sub { idle_scenario('abort') };

# ---------------------------------------------- 3. out-of-order releases

subtest 'out-of-order releases (leases=3)' => sub {
    my $key = 'ooo';
    # h1 is the oldest holder; the waiters queue after h2 and h3 hold,
    # which a loaded machine (CI's tests run in parallel) took 1.7 s to
    # see, so the first release comes 3 s in
    my @h_ms = (6000, 3000, 4500);
    my $w_ms = 800;
    my $t0 = time;
    my $old = [ children('/t/ooo') ];

    # h1 first (lowest sequence number), then h2 and h3.
    my $h1b = http_parallel_bg([[ $PA, "/ooo?sleep=$h_ms[0]&key=$key&id=h1" ]],
        timeout => 30);
    ok(wait_for(sub { $be->stats($key)->{inflight} == 1 }, 5, 0.02),
        'h1 holds');
    my $h23b = http_parallel_bg([
        [ $PB, "/ooo?sleep=$h_ms[1]&key=$key&id=h2" ],
        [ $PA, "/ooo?sleep=$h_ms[2]&key=$key&id=h3" ] ], timeout => 30);
    ok(wait_for(sub { $be->stats($key)->{inflight} == 3 }, 5, 0.02),
        'h2, h3 hold');
    my @hn = wait_new_children('/t/ooo', $old, 3);
    $old = [ children('/t/ooo') ];

    my $wb = http_parallel_bg([
        [ $PB, "/ooo?sleep=$w_ms&key=$key&id=w1" ],
        [ $PA, "/ooo?sleep=$w_ms&key=$key&id=w2" ],
        [ $PB, "/ooo?sleep=$w_ms&key=$key&id=w3" ] ],
        stagger => 0.1, timeout => 30);
    my @wn = wait_new_children('/t/ooo', $old, 3);
    my $queued_at = time;
    is(scalar @wn, 3, '3 waiters queued');
    is($be->stats($key)->{count}, 0, 'no request finished yet');

    my $h1 = http_parallel_collect($h1b)->[0];
    my ($h2, $h3) = @{ http_parallel_collect($h23b) };
    my @w = @{ http_parallel_collect($wb) };

    my @names = qw(h1 h2 h3 w1 w2 w3);
    my @all = ($h1, $h2, $h3, @w);
    my $timeline = join "\n", "queued at +" . fmt_t($queued_at, $t0),
        map { "$names[$_]: $all[$_]{status} +" . fmt_t($all[$_]{start}, $t0)
            . " .. +" . fmt_t($all[$_]{end}, $t0) } 0 .. 5;
    note $timeline;

    is_deeply([ map { $_->{status} } @all ], [ (200) x 6 ], 'all 200')
        or diag $timeline;
    ok($queued_at < $h2->{end}, 'waiters queued before the first release')
        or diag $timeline;

    # Estimated backend start of a waiter: its end minus its sleep.
    my @w_start = map { $_->{end} - $w_ms / 1000 } @w;
    cmp_ok($w_start[0], '<=', $h2->{end} + 1.0,
        "w1 starts as soon as the $h_ms[1] ms holder (h2) ends")
        or diag $timeline;
    cmp_ok($w_start[0], '<', $h1->{end} - 1.0,
        'w1 does not wait for the oldest holder (h1)') or diag $timeline;

    # Fair semaphore: each waiter, in order, takes the earliest lease that
    # is free (holders' ends, then the ends of the waiters before it).
    check_fair(t0 => $t0, late => 1.0, w_ms => $w_ms, timeline => $timeline,
        holder_ends => [ map { $_->{end} } $h1, $h2, $h3 ],
        waiters => [ map { [ "w" . ($_ + 1), $w[$_] ] } 0 .. 2 ]);

    my $s = $be->stats($key);
    is($s->{max}, 3, 'backend max in flight is 3');
    is($s->{count}, 6, 'backend saw 6 requests');
    is_deeply([ sort @{ $s->{order} }[0 .. 2] ], [qw(h1 h2 h3)],
        'holders first') or diag explain $s->{order};
    is($s->{order}[3], 'w1', 'w1 is the first waiter served')
        or diag explain $s->{order};
    check_clean('out-of-order');
};

# ---------------------------------------- 4. timeout answers zk_lock_status

subtest 'timeout answers zk_lock_status and leaves no node' => sub {
    # A foreign holder takes the only lease.
    my $holder = zk_hold($zk, '/t/st', seconds => 120);
    my $r = http_get($PA, '/st429?key=st&id=a');
    is($r->{status}, 429, 'configured zk_lock_status 429');
    cmp_ok($r->{time}, '>=', 0.8, 'after about the 1 s timeout');
    cmp_ok($r->{time}, '<', 4, 'not much later');
    my $r2 = http_get($PB, '/st503?key=st&id=b');
    is($r2->{status}, 503, 'default zk_lock_status 503');
    my @eph;
    ok(wait_for(sub {
        @eph = zk_ephemerals($zk, '/t');
        @eph == 1 && $eph[0] eq $holder->node }, 3, 0.1),
        'only the foreign holder node is left') or diag explain \@eph;
    ok(wait_for(sub {
        $A->error_log =~ /\[error\].*zk_semaphore "\/t\/st" not acquired in \d+ms/
    }, 3), 'A logged "not acquired" at [error]');
    is($be->stats('st')->{count}, 0, 'backend never reached');
    $holder->release;
    is(http_get($PB, '/st503?key=st&id=c')->{status}, 200,
        'lease free again after the holder released it');
    check_clean('zk_lock_status');
};

note sprintf 'total runtime %.1fs', time - $T_START;
done_testing;
