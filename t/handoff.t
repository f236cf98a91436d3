#!/usr/bin/perl
# The fast handoff: a waiter counts the deletions of the nodes ahead of it
# (watch events, replies to its own worker's deletes) and takes the lock
# without a new listing once fewer than "leases" nodes are ahead.  A
# deletion counted twice, or counted for a node that was never ahead, lets a
# request in too early: these tests look for that.
#
#  1. mutex: foreign nodes ahead released out of order
#  2. semaphore leases=2: the same, with the "fewer than 2 ahead" rule
#  3. a chain of local waiters (one worker): FIFO, one at a time
#  4. a mixed chain over a fleet of two nginx (2 workers each)
#  5. a local waiter's node deleted by someone else
#  6. semaphore leases=3 under load: never more than 3, no idle lease
#  7. deep queues (mutex, semaphore): a worker watches the head of the queue
#     and hands off without listing it again, past waiters that gave up
#
# ZK_TEST_LOG_LEVEL=debug gives the module's "zk lock:" trace in error.log.

use strict;
use warnings;
use Test::More;
use Time::HiRes qw(time sleep);
use lib 't/lib';
use ZkLock::Test;

require_prereqs(qw(nginx zookeeper kazoo module));

my $T0 = time;
my $zk = zk_start();
my $be = backend_start();

my $conf = <<'EOF';
    zk_hosts %%ZK%%;
    zk_session_timeout 10s;

    server {
        listen 127.0.0.1:%%PORT%%;
        add_header X-Lock-Status $zk_lock_status always;

        location /m {
            zk_mutex /h/m/$arg_lk timeout=20s;
            proxy_pass http://%%BACKEND%%;
        }

        location /mt {
            zk_mutex /h/m/$arg_lk timeout=2s;
            proxy_pass http://%%BACKEND%%;
        }

        location /s2 {
            zk_semaphore /h/s2/$arg_lk leases=2 timeout=20s;
            proxy_pass http://%%BACKEND%%;
        }

        location /s3 {
            zk_semaphore /h/s3 leases=3 timeout=20s;
            proxy_pass http://%%BACKEND%%;
        }
    }
EOF

my %nopt = (zk => $zk, backend => $be,
    log_level => $ENV{ZK_TEST_LOG_LEVEL} || 'info');

# one worker: its requests share one session (local chains, scenario 5)
my $one = nginx_start($conf, %nopt, workers => 1);
my @fleet = map { nginx_start($conf, %nopt, workers => 2) } 1 .. 2;

# the deep queues' fleet logs each listing (scenario 7); with one worker
# each, their nodes take turns in the queue, where a worker that watches its
# first waiter's predecessor misses the deletion of the node before that one,
# and lists again at each handoff
my @deep = map { nginx_start($conf, %nopt, workers => 1, log_level => 'debug') }
    1 .. 3;
my @all = ($one, @fleet, @deep);

ok(sessions_connected(@all), 'every worker has a session');

# ------------------------------------------------------------ local helpers

sub seq_of { ($_[0] =~ /(\d+)$/)[0] }

# children of $path in sequence order (names sort by uuid, not by sequence)
sub queue { sort { seq_of($a) <=> seq_of($b) } zk_children($zk, $_[0]) }

sub base { ($_[0] =~ m{([^/]+)$})[0] }


sub wait_queue_len {
    my ($path, $n, $timeout) = @_;
    return wait_for(sub { my @q = queue($path); @q == $n }, $timeout // 5, 0.05);
}

# the request in $bg has not reached the backend, and is still pending
sub still_waiting {
    my ($bg, $key, $what) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    my $st = $be->stats($key);
    ok($st->{count} == 0 && $st->{inflight} == 0 && pid_alive($bg->{pid}),
        "$what: W still waits")
        or diag explain { stats => $st, pending => pid_alive($bg->{pid}) };
}

# the request in $bg ends 200 soon after $t (time of the release)
sub proceeds {
    my ($bg, $key, $t, $what) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    my $r = http_parallel_collect($bg, 15)->[0];
    is($r->{status}, 200, "$what: W gets 200")
        or diag explain $r;
    my $after = ($r->{end} // 1e9) - $t;
    ok($after < 3, "$what: W proceeds promptly")
        or diag sprintf 'answered %.2f s after the release', $after;
    is($be->stats($key)->{count}, 1, "$what: W ran once");
}

# A Curator client releases by deleting its node (the session stays): so do
# these foreign participants (faster than closing the holder's session).
my %DROPPED;
sub drop {
    my ($h) = @_;
    $DROPPED{ $h->node } = 1;
    zk_delete($zk, $h->node) or diag 'already gone: ' . $h->node;
}

# the holders' processes, once their nodes are gone
sub release_all { drop($_) for grep { !$DROPPED{ $_->node } } @_; $_->kill for @_ }

my %LOG_CHECKED;
sub bad_log_lines {
    my ($ng) = @_;
    my $log = $ng->error_log;
    my $from = $LOG_CHECKED{ $ng->prefix } // 0;
    $LOG_CHECKED{ $ng->prefix } = length $log;
    return grep { /\[(?:alert|crit|emerg)\]/ || /exited on signal/ }
        split /\n/, substr($log, $from);
}

sub check_logs {
    my ($what) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    my @bad = map { bad_log_lines($_) } @all;
    ok(!@bad, "$what: no alert/crit/emerg/crash lines") or diag join "\n", @bad;
}

###############################################################################
# 1. mutex: foreign nodes ahead released out of order

# Foreign nodes @$names queue on /h/<loc>/$lk, then W (an nginx request to
# /<loc>); $order: the names released, in order; $go: the index in $order
# from which W must hold (before it, it must wait)
sub deletions_case {
    my ($loc, $lk, $names, $order, $go) = @_;
    my $path = "/h/$loc/$lk";
    $be->reset;

    my %h;
    $h{$_} = zk_hold($zk, $path, name => curator_name()) for @$names;
    my $bg = http_parallel_bg(
        [[ $one->port, "/$loc?lk=$lk&key=$lk&sleep=100" ]], timeout => 30);
    my $n = @$names + 1;
    ok(wait_queue_len($path, $n), "$lk: W queued behind @$names")
        or diag explain [queue($path)];
    my $w = (queue($path))[$n - 1];
    ok($w && !grep({ base($_->node) eq $w } values %h), "$lk: W is last");
    still_waiting($bg, $lk, "$lk: queued");

    for my $i (0 .. $#$order) {
        my $name = $order->[$i];
        my $t = time;
        drop($h{$name});
        if ($i < $go) {
            sleep 1;
            still_waiting($bg, $lk, "$lk: after $name left");
        } else {
            proceeds($bg, $lk, $t, "$lk: after $name left");
        }
    }
    release_all(values %h);
    no_ephemerals($zk, '/h', $lk);
}

sub mutex_case { deletions_case('m', $_[0], [qw(H1 A2 A3)], @_[1, 2]) }

subtest 'mutex: out-of-order deletions ahead' => sub {
    # A3 (watched, W's predecessor), then A2, then the holder
    mutex_case('ooo1', [qw(A3 A2 H1)], 2);
    # the holder first (not watched by W), then A3 (watched): A2 is left
    mutex_case('ooo2', [qw(H1 A3 A2)], 2);
    # the holder, then A2 (neither watched), then A3
    mutex_case('ooo3', [qw(H1 A2 A3)], 2);
    check_logs('mutex out of order');
};

###############################################################################
# 2. semaphore leases=2: W holds when fewer than 2 nodes are ahead

sub sem_case { deletions_case('s2', @_) }

subtest 'semaphore leases=2: deletions ahead' => sub {
    # H1 H2 A3 W: A3 leaves (2 ahead: wait), H1 leaves (1 ahead: go)
    sem_case('s1', [qw(H1 H2 A3)], [qw(A3 H1)], 1);
    # H1 leaves first (not watched; H2 A3 ahead: wait), then H2 (go)
    sem_case('s2', [qw(H1 H2 A3)], [qw(H1 H2)], 1);
    # H1 H2 A3 A4 W: A4 (wait, 3 ahead), A3 (wait, 2 ahead), H2 (go)
    sem_case('s3', [qw(H1 H2 A3 A4)], [qw(A4 A3 H2)], 2);
    check_logs('semaphore out of order');
};

###############################################################################
# 3. a chain of local waiters behind a foreign holder

subtest 'local chain: FIFO, one at a time' => sub {
    $be->reset;
    my $path = '/h/m/chain';
    my $h = zk_hold($zk, $path, name => curator_name());

    my @req = map { [ $one->port, "/m?lk=chain&key=chain&sleep=200&id=$_" ] }
        0 .. 5;
    my $bg = http_parallel_bg(\@req, stagger => 0.2, timeout => 30);
    ok(wait_queue_len($path, 7), 'six waiters queued behind the holder')
        or diag explain [queue($path)];
    sleep 0.3;
    is($be->stats('chain')->{count}, 0, 'none ran while the holder holds');

    my $t = time;
    drop($h);
    $h->kill;
    my $res = http_parallel_collect($bg, 30);
    is(scalar(grep { $_->{status} == 200 } @$res), 6, 'all 6 get 200')
        or diag explain [map { "$_->{status} " . ($_->{error} // '') } @$res];
    my $st = $be->stats('chain');
    is($st->{max}, 1, 'one in flight at a time');
    is_deeply($st->{order}, [0 .. 5], 'served in arrival order');
    my $last = (sort { $b <=> $a } map { $_->{end} // 1e9 } @$res)[0];
    ok($last - $t < 6, 'the chain runs without stalls')
        or diag sprintf 'last answer %.2f s after the release', $last - $t;
    no_ephemerals($zk, '/h', 'chain');
    check_logs('local chain');
};

###############################################################################
# 4. a mixed chain over the fleet

# $rounds rounds of $clients concurrent requests to $uri (backend key
# $key) over the fleet: all get 200, at most (and at some point exactly)
# $max are in the backend at once, and no node is left
sub under_load {
    my ($what, $uri, $key, $rounds, $clients, $max, $max_what) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    $be->reset;
    my ($ok, $n) = (0, 0);
    for my $round (1 .. $rounds) {
        my @req = map { [ $fleet[$_ % 2]->port, "$uri&id=$round.$_" ] }
            0 .. $clients - 1;
        my $res = http_parallel(\@req, timeout => 30);
        $n += @$res;
        $ok += grep { $_->{status} == 200 } @$res;
    }
    is($ok, $n, "all $n get 200");
    my $st = $be->stats($key);
    is($st->{max}, $max, $max_what);
    is($st->{count}, $n, "the backend saw $n requests");
    no_ephemerals($zk, '/h', $what);
    check_logs($what);
}

subtest 'mixed fleet chain' => sub {
    under_load('fleet chain', '/m?lk=fleet&key=fleet&sleep=100', 'fleet',
        12, 8, 1, 'never more than one in flight');
};

###############################################################################
# 5. a local waiter's node deleted by someone else

# P (on $one) waits behind a foreign holder H, W (on $w_ng) behind P; P's
# node is deleted by someone else, then H leaves: W must get the lock at
# once, P must not (its node is gone: it holds nothing in ZooKeeper).
sub vanish_case {
    my ($lk, $w_ng, $what) = @_;
    $be->reset;
    my $path = "/h/m/$lk";
    my $h = zk_hold($zk, $path, name => curator_name());

    my $pb = http_parallel_bg(
        [[ $one->port, "/m?lk=$lk&key=$lk&sleep=2000&id=P" ]], timeout => 30);
    ok(wait_queue_len($path, 2), "$what: P queued behind H");
    my @q = queue($path);
    my $p = $q[1];

    my $wb = http_parallel_bg(
        [[ $w_ng->port, "/m?lk=$lk&key=$lk&sleep=300&id=W" ]], timeout => 30);
    ok(wait_queue_len($path, 3), "$what: W queued behind P");
    @q = queue($path);
    is_deeply([@q[0, 1]], [base($h->node), $p], "$what: H, P, W in line");

    ok(zk_delete($zk, "$path/$p"), "$what: P's node deleted by kazoo");
    sleep 0.5;
    is($be->stats($lk)->{count} + $be->stats($lk)->{inflight}, 0,
        "$what: nobody ran yet");

    my $t = time;
    drop($h);
    $h->kill;

    my $w = http_parallel_collect($wb, 30)->[0];
    my $pr = http_parallel_collect($pb, 30)->[0];
    my $at = sub { defined $_[0]{end} ? sprintf('%.2f', $_[0]{end} - $t) : '-' };
    my $desc = "P: $pr->{status} lock="
        . ($pr->{headers}{'x-lock-status'} // '-') . ' at ' . $at->($pr)
        . " s; W: $w->{status} lock=" . ($w->{headers}{'x-lock-status'} // '-')
        . ' at ' . $at->($w) . ' s after the release of H';
    is($w->{status}, 200, "$what: W gets 200") or diag $desc;
    ok(defined $w->{end} && $w->{end} - $t < 1.5,
        "$what: W proceeds promptly (not after P's 2 s)") or diag $desc;
    isnt($pr->{status}, 200, "$what: P does not get 200: its node is gone")
        or diag $desc;
    my $st = $be->stats($lk);
    is($st->{max}, 1, "$what: never more than one in flight")
        or diag explain $st;
    is_deeply($st->{order}, ['W'], "$what: only W ran")
        or diag explain $st;
    no_ephemerals($zk, '/h', $what);
    check_logs($what);
}

subtest "a waiter's node deleted by someone else" => sub {
    # W on the same worker as P (one session)
    vanish_case('vanish1', $one, 'same worker');
    # W on another nginx (another session): a second holder shows
    vanish_case('vanish2', $fleet[0], 'other nginx');
};

###############################################################################
# 6. semaphore leases=3 under load over the fleet

subtest 'semaphore leases=3 under load' => sub {
    under_load('s3 load', '/s3?key=s3&sleep=50', 's3', 5, 12, 3,
        'max in flight is exactly 3 (never more, no idle lease)');
};

###############################################################################
# 7. deep queues: handoffs without a listing of the queue

# the children of $path that the deep fleet's listings have returned so far
sub listed {
    my ($path) = @_;
    my $n = 0;
    $n += $_ for join('', map { $_->error_log } @deep)
        =~ /zk lock: listed "\Q$path\E" #\d+ rc:\d+ n:(\d+)/g;
    return $n;
}

# 200 waiters over the deep fleet (3 nginx) queue behind $max foreign holders (past the
# 64 children from which a worker watches the head of the queue); for the
# mutex, 10 more among them give up after 2 s and leave holes in the queue.
# Once the holders leave, every waiter runs, at most $max at a time, and the
# workers list few children: Curator would list the whole queue again at
# each handoff, about 20 000 names for 200 handoffs.
sub deep_case {
    my ($loc, $lk, $max, $holes) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    $be->reset;
    my $path = "/h/$loc/$lk";
    my @h = map { zk_hold($zk, $path, name => curator_name()) } 1 .. $max;

    my @req = map { [ $deep[$_ % 3]->port,
        "/$loc?lk=$lk&key=$lk&sleep=10&id=$_" ] } 0 .. 199;
    splice @req, 20 * $_, 0,
        [ $deep[$_ % 3]->port, "/mt?lk=$lk&key=$lk-gone&id=gone$_" ]
        for reverse 1 .. $holes;
    my $bg = http_parallel_bg(\@req, stagger => 0.005, timeout => 60);
    ok(wait_queue_len($path, $max + @req, 20),
        "$lk: @{[ scalar @req ]} queued") or diag scalar(queue($path)) . ' nodes';
    ok(wait_queue_len($path, $max + 200, 10), "$lk: $holes gave up")
        if $holes;

    my $before = listed($path);
    release_all(@h);
    my $res = http_parallel_collect($bg, 60);

    my @gone = grep { $_->[1] =~ m{^/mt} } @req;
    my @ok = grep { $req[$_][1] !~ m{^/mt} && $res->[$_]{status} == 200 }
        0 .. $#req;
    is(scalar @ok, 200, "$lk: the 200 waiters get 200")
        or diag explain [map { "$_->{status} " . ($_->{error} // '') } @$res];
    is($be->stats("$lk-gone")->{count}, 0, "$lk: those who gave up never ran")
        if $holes;
    my $st = $be->stats($lk);
    is($st->{count}, 200, "$lk: the backend saw 200");
    is($st->{max}, $max, "$lk: at most $max in flight");
    my $names = listed($path) - $before;
    note "listings of $path returned $names names for 200 handoffs";
    ok($names <= 2000, "$lk: no listing of the queue per handoff")
        or diag "listings of $path returned $names names for 200 handoffs";
    no_ephemerals($zk, '/h', $lk);
    check_logs($lk);
}

subtest 'deep queues: the head is watched' => sub {
    deep_case('m', 'deepm', 1, 10);
    deep_case('s2', 'deeps', 2, 0);
};

###############################################################################

diag sprintf 'handoff.t ran in %.1f s', time - $T0;

done_testing();

