#!/usr/bin/perl
# The fault matrix (issue 25): every lock kind with every option that
# changes what happens at a fault, under every fault, with two nginx
# instances under load: A (2 workers) reaches ZooKeeper through the fault
# proxy, by a host name that its resolver asks t/lib/dns.py for; B (1
# worker) directly, by address.  One fleet per fault carries every lock of
# the table below at once, each its own path and backend key, each loaded
# from both instances by closed-loop clients (t/lib/load.py, 250 ms calls),
# and, when the fault comes, held on A by a long call; then the fault is
# applied once.
#
# Locks: mutex; semaphore v1; semaphore v2 (protocol=v2); rwlock (read and
# write on one path).  Options: keep=1s, weight=2 (beside weight 1 on the
# same path), revocable=on, zk_lock_fail closed (the default) / open /
# local=1, zk_lock_lost finish (the default) / abort, zk_hosts by name
# with a resolver (instance A, in every fault).
#
# Faults: f1 connection cut shorter than T/2; f2 partition between 3/4 T
# and T (the session lives); f3 partition past T (it expires); f4
# ZooKeeper restart (short); f5 leader loss in a 3-node ensemble; f6
# SIGKILL of a worker of A; f7 reload of A; f8 DNS stops answering, then
# reload of A.  T is the session timeout, 4 or 10 s (see @FAULTS).
# Every lock meets every fault, so every option meets every fault, and
# abort meets every kind, local=1 and keep=1s both finish and abort.
# About 15 s per fault, 2 minutes in all.
#
# The witness: nginx passes $zk_lock_status, $zk_lock_token, the request's
# number and $pid to the backend (t/lib/backend.py, rec=1), which records
# each call's start and end; the access logs give each request's final
# $zk_lock_status.  Per lock and fault, it asserts:
#  1. at no instant more in flight than the bound of the README: the cap
#     (mutex 1; semaphore 2, or 3 counting weights; rwlock: a writer
#     alone), but for BYPASSED calls (zk_lock_fail open: unbounded), +1
#     for local=1 in f2 and f3 (A's one local lease: the holders through
#     ZooKeeper stay within the cap, LOCAL ones are 1 at most), and, with
#     zk_lock_lost finish after a real expiry (f3), or after the worker
#     that lent their kept lease was killed (f6: its session expires while
#     its borrowers finish), the calls that ended LOST run beside the next
#     holders: the others stay within the cap, and so do the LOST ones
#     among themselves
#  2. mutex and rwlock writers: the tokens of successive ACQUIRED holders
#     strictly increase in the order they started
#  3. every request is answered (a status, or its connection closed: not a
#     hang) within its lock timeout + its upstream time + 5 s
#  4. local=1: no local lease but in f2 and f3, there only on A, in a
#     worker between the moment its session went into jeopardy and the
#     moment it was connected again
#  5. each instance takes every lock again after the fault (a call that
#     started ACQUIRED at the backend once the fault was over, from a
#     worker that runs at the end: after a reload, a new one)
#  6. no node left below the lock paths once both instances stopped
#     (independent kazoo client)
#  and, per fault, that it was the one the bounds assume: A's sessions went
#  into jeopardy and lived (f2), expired (f3), no session went into
#  jeopardy (the others)
#  no [alert]/[crit]/[emerg] line, no crashed worker but the one f6 kills
#  (the harness checks every nginx at done_testing)
#
# MATRIX_ONLY=f2,f3 runs those faults only; ZK_TEST_KEEP=1 keeps the logs.

use strict;
use warnings;
use Test::More;
use Time::HiRes qw(time sleep);
use JSON::PP ();
use lib 't/lib';
use ZkLock::Test;
use ZkLock::FaultProxy;

require_prereqs(qw(nginx zookeeper kazoo module));

my $TIMEOUT = 4;      # s, every lock's timeout=
my $SLEEP   = 250;    # ms, the upstream time of the load's calls
my $MARGIN  = 5;      # s, over timeout + upstream time: "answered"
my $AFTER   = 3;      # s of load after the fault and the long calls

###############################################################################
# The locks: one row, one lock path (/mx/<fault>/<name>) and backend key.
# kind: mutex and sem count weights against cap, rw wants a writer alone.
# A plain directive is role "x", weight 1, 2 clients per instance; or
# roles: [ name, directive, weight, clients per instance, timeout (s,
# default $TIMEOUT) ], the first is the one the long holder on A takes.
# "%p" is the lock path.  The local=1 locks have a role "q" with a 1 s
# timeout, so that requests come in while the connection is down.

my @CELLS = (
  # name              kind   cap  directive or roles                options
  cell('m',           mutex => 1, 'zk_mutex %p'),
  cell('m_abort',     mutex => 1, 'zk_mutex %p',                 lost => 'abort'),
  cell('m_revocable', mutex => 1, 'zk_mutex %p revocable=on'),
  cell('m_local',     mutex => 1, [ [ x => 'zk_mutex %p', 1, 2 ],
                                    [ q => 'zk_mutex %p', 1, 1, 1 ] ], fail => 'local=1'),
  cell('m_open',      mutex => 1, 'zk_mutex %p',                 fail => 'open'),
  cell('s1',          sem   => 2, 'zk_semaphore %p leases=2'),
  cell('s1_keep',     sem   => 2, 'zk_semaphore %p leases=2 keep=1s'),
  cell('s1_keep_abort', sem => 2, 'zk_semaphore %p leases=2 keep=1s', lost => 'abort'),
  cell('s1_weight',   sem   => 3, [ [ h => 'zk_semaphore %p leases=3 weight=2', 2, 1 ],
                                    [ l => 'zk_semaphore %p leases=3', 1, 1 ] ]),
  cell('s1_local',    sem   => 2, [ [ x => 'zk_semaphore %p leases=2', 1, 2 ],
                                    [ q => 'zk_semaphore %p leases=2', 1, 1, 1 ] ],
                                                   fail => 'local=1', lost => 'abort'),
  cell('s1_open',     sem   => 2, 'zk_semaphore %p leases=2',    fail => 'open'),
  cell('s2',          sem   => 2, 'zk_semaphore %p leases=2 protocol=v2'),
  cell('s2_weight',   sem   => 3, [ [ h => 'zk_semaphore %p leases=3 protocol=v2 weight=2', 2, 1 ],
                                    [ l => 'zk_semaphore %p leases=3 protocol=v2', 1, 1 ] ]),
  cell('s2_abort',    sem   => 2, 'zk_semaphore %p leases=2 protocol=v2', lost => 'abort'),
  cell('rw',          rw    => 1, [ [ w => 'zk_rwlock %p write', 1, 1 ],
                                    [ r => 'zk_rwlock %p read', 1, 2 ] ]),
  cell('rw_abort',    rw    => 1, [ [ w => 'zk_rwlock %p write', 1, 1 ],
                                    [ r => 'zk_rwlock %p read', 1, 2 ] ], lost => 'abort'),
  cell('rw_revocable', rw   => 1, [ [ w => 'zk_rwlock %p write revocable=on', 1, 1 ],
                                    [ r => 'zk_rwlock %p read revocable=on', 1, 2 ] ]),
);

sub cell {
    my ($name, $kind, $cap, $roles, %opt) = @_;
    $roles = [ [ x => $roles, 1, 2 ] ] unless ref $roles;
    return { name => $name, kind => $kind, cap => $cap, roles => $roles,
        fail => $opt{fail} // 'closed', lost => $opt{lost} // 'finish' };
}

###############################################################################
# The faults.  T: zk_session_timeout (s).  long: the upstream time of the
# long call each lock has on A when the fault comes (s).  fault: applies
# it, returns how long it lasts from then (s); heal, if any, ends it
# then.  The load goes on until the fault is over, every long call ended
# and every session is connected again, then $AFTER s more.  jeopardy:
# A's session goes into jeopardy (local leases allowed); expiry: it really
# expires (LOST holders of finish allowed beside the next ones); broker:
# a session that lent kept leases to other workers may go with its
# worker (the same allowance for the borrowers).
#
# The margins: jeopardy comes 3/4 T after the last answered probe, which
# is at most T/6 old: 5.8 to 7.5 s into a silence with T = 10 s.  f1, f4,
# f5: the workers were back within 4.2 s in every run (their reconnect
# backoff), none in jeopardy.  f2: the partition heals at 8.5 s, A is
# back 0.2 s later, the server keeps the session until 10 s.  f3: 7 s of
# silence expire a 4 s session.

my @FAULTS = (
    { id => 'f1', name => 'connection cut shorter than T/2', T => 10,
      long => 5,
      fault => sub { $_[0]{px}->cut(1); 1 } },
    { id => 'f2', name => 'partition between 3/4 T and T', T => 10,
      long => 12, jeopardy => 1,
      fault => sub { $_[0]{px}->partition(8.5); 8.5 } },
    { id => 'f3', name => 'partition past T', T => 4,
      long => 6, jeopardy => 1, expiry => 1,
      fault => sub { $_[0]{px}->partition(7); 7 } },
    { id => 'f4', name => 'ZooKeeper restart', T => 10,
      long => 5,
      fault => sub { $_[0]{zk}->stop; 0.5 },
      heal => sub { $_[0]{zk}->start } },
    { id => 'f5', name => 'leader loss in a 3-node ensemble', T => 10,
      long => 5, ensemble => 1,
      fault => sub {
          my $ens = $_[0]{ens};
          my $old = $_[0]{leader} = $ens->leader_index or die "no leader\n";
          $ens->node($old)->kill;
          0 },
      heal => sub {
          my ($ctx) = @_;
          wait_for(sub { my $l = $ctx->{ens}->leader_index;
              $l && $l != $ctx->{leader} }, 20, 0.1)
              or die "no new leader\n";
      } },
    { id => 'f6', name => 'SIGKILL of a worker of A', T => 4,
      long => 6, broker => 1,
      fault => sub {
          # the worker with the most holders; its nodes stay until its
          # session expires, T (and a tick) later
          my ($ctx) = @_;
          my %held;
          $held{ (split /\./, $_->[3])[4] }++ for grep { !defined $_->[1] }
              map { @$_ } values %{ $ctx->{be}->calls };
          my ($victim) = sort { ($held{$b} // 0) <=> ($held{$a} // 0) }
              $ctx->{a}->worker_pids;
          $ctx->{a}->expect_log(qr/exited on signal 9/);
          # the time before the kill: a test descheduled between the two
          # would place the end of the victim's calls after the start of
          # the next holder's (CI saw 3 on 2 leases, all at +0.04 s)
          $ctx->{killed} = { pid => $victim, at => time };
          kill 'KILL', $victim;
          note "killed worker $victim, which held " . ($held{$victim} // 0);
          $ctx->{T} + 0.5 } },
    { id => 'f7', name => 'reload of A', T => 4,
      long => 4,
      fault => sub { $_[0]{a}->reload or die "reload failed\n"; 0 } },
    { id => 'f8', name => 'DNS mute, then reload of A', T => 4,
      long => 4,
      fault => sub {
          dns_mute(1);
          $_[0]{a}->reload or die "reload failed\n";
          0 },
      end => sub { dns_mute(0) } },
);

###############################################################################

my $zk = zk_start();
my $be = backend_start();
my $dns = dns_start();
my $JSON = JSON::PP->new;
my $T0 = time;

my %only = map { $_ => 1 } split /,/, $ENV{MATRIX_ONLY} // '';
for my $f (@FAULTS) {
    next if %only && !$only{ $f->{id} };
    subtest "$f->{id}: $f->{name}" => sub { run_fault($f) };
}
note sprintf 'the matrix took %.0f s', time - $T0;

done_testing();

###############################################################################

sub run_fault {
    my ($f) = @_;
    my $t_begin = time;
    my $ctx = fleet($f);
    my ($A, $B) = @$ctx{qw(a b)};
    @$ctx{qw(T be)} = ($f->{T}, $be);
    $be->reset;

    # the load: closed-loop clients on every lock, from both instances
    my $dir = tempdir("matrix-$f->{id}");
    my (@clients, %inst_of_port, %timeout_of);
    %inst_of_port = ($A->port => 'A', $B->port => 'B');
    for my $c (@CELLS) {
        for my $r (@{ $c->{roles} }) {
            my ($role, undef, undef, $k, $timeout) = @$r;
            $timeout_of{"$c->{name}/$role"} = $timeout // $TIMEOUT;
            for my $ng ($A, $B) {
                push @clients, map { { port => $ng->port,
                    uri => "/c/$c->{name}/$role?sleep=$SLEEP",
                    timeout => $TIMEOUT + $SLEEP / 1000 + $MARGIN + 10,
                    gap => 0.05 } } 1 .. $k;
            }
        }
    }
    open my $fh, '>', "$dir/spec.json" or die $!;
    print $fh $JSON->encode({ until => time + 120, stop => "$dir/stop",
        n0 => 1, clients => \@clients });
    close $fh;
    my $load = spawn(name => 'load.py', log => "$dir/load.log",
        cmd => [ $ZkLock::Test::PYTHON, 't/lib/load.py',
            '--spec', "$dir/spec.json", '--out', "$dir/out.json" ]);
    sleep 1.5;

    # the long calls on A, one per lock, held when the fault comes
    my $long_n0 = 900_000;
    my @long = map { my $c = $CELLS[$_]; [ $A->port,
        "/c/$c->{name}/$c->{roles}[0][0]?sleep=" . $f->{long} * 1000
        . '&n=' . ($long_n0 + $_) ] } 0 .. $#CELLS;
    my $hl = http_parallel_bg(\@long,
        timeout => $TIMEOUT + $f->{long} + $MARGIN + 10);
    my $holding = wait_for(sub {
        my $calls = $be->calls;
        my %held = map { (split /\./, $_->[3])[3] => 1 }
            grep { !defined $_->[1] } map { @$_ } values %$calls;
        my @missing = grep { !$held{ $long_n0 + $_ } } 0 .. $#CELLS;
        return @missing ? 0 : 1;
    }, $TIMEOUT + 2, 0.2);
    note $holding ? 'every lock has its long call on A'
        : 'not every lock got its long call on A in time';

    # the fault
    $ctx->{events} = [];
    $ctx->{off} = { a => length $A->error_log, b => length $B->error_log };
    my $t_fault = time;
    my $lasts = eval { $f->{fault}->($ctx) };
    if (!defined $lasts) {
        fail("$f->{id}: the fault could not be applied: $@");
        $lasts = 0;
    }
    watch_logs($ctx, time + $lasts);
    if ($f->{heal} && !eval { $f->{heal}->($ctx); 1 }) {
        fail("$f->{id}: the fault could not be healed: $@");
    }
    my $t_over = time;
    # the load goes on until every long call ended and every worker that
    # lost its connection has it back, and $AFTER s more
    my $long_end = time + $TIMEOUT + $f->{long} + 5;
    while (time < $long_end) {
        watch_logs($ctx, time + 0.3);
        my %down;
        $down{ $_->{pid} } = $_->{ev} ne 'connected' for grep {
            $_->{ev} =~ /^(?:disconnected|jeopardy|expired|connected)$/
        } @{ $ctx->{events} };
        next if grep { $_ } values %down;
        last unless grep { !defined $_->[1]
            && (split /\./, $_->[3])[3] >= $long_n0 }
            map { @$_ } values %{ $be->calls };
    }
    watch_logs($ctx, time + $AFTER);

    # the end of the load
    open my $stop, '>', "$dir/stop" or die $!;
    close $stop;
    proc_wait($load, $TIMEOUT + $SLEEP / 1000 + $MARGIN + 20);
    my $long_res = http_parallel_collect($hl, $TIMEOUT + $f->{long} + 30);
    watch_logs($ctx, time);
    $f->{end}->($ctx) if $f->{end};
    my $res = eval { $JSON->decode(slurp("$dir/out.json")) } || [];
    ok(@$res > 100, "$f->{id}: the load ran (" . scalar(@$res)
        . ' requests)') or diag slurp("$dir/load.log");

    # every request: instance, times, final status (access logs)
    my %req;
    for my $r (@$res) {
        my ($name, $role) = $r->{uri} =~ m{^/c/([^/]+)/(\w+)};
        $req{ $r->{n} } = { %$r, inst => $inst_of_port{ $r->{port} },
            cell => $name, role => $role, sleep => $SLEEP / 1000,
            timeout => $timeout_of{"$name/$role"} };
    }
    for my $i (0 .. $#long) {
        my $c = $CELLS[$i];
        my $r = $long_res->[$i];
        $req{ $long_n0 + $i } = { %$r, n => $long_n0 + $i, inst => 'A',
            cell => $c->{name}, role => $c->{roles}[0][0],
            sleep => $f->{long}, timeout => $TIMEOUT,
            lock => $r->{headers}{'x-lock'} // '',
            error => $r->{error} // '' };
    }
    for my $ng ($A, $B) {
        for (split /\n/, slurp($ng->prefix . '/logs/matrix.log')) {
            my ($n, $st, $http) = split / /;
            next unless $n && $req{$n};
            $req{$n}{final} = $st eq '-' ? '' : $st;
            $req{$n}{http} = $http;
        }
    }
    my $calls = $be->calls;
    my %current = map { $_ => 1 } $A->worker_pids, $B->worker_pids;

    # both instances stopped: nothing left behind
    $_->stop for $A, $B;
    no_ephemerals($ctx->{hosts}, "/mx/$f->{id}", "$f->{id}",
        $f->{T} + 5);

    # the session events, for the record
    my @events = @{ $ctx->{events} };
    my %seen;
    $seen{"$_->{side} $_->{ev}"}++ for @events;
    note join "\n", "$f->{id}: fault at 0, over at "
        . sprintf('%+.2f', $t_over - $t_fault), (map {
        sprintf '  %+.2f %s %s %s', $_->{t} - $t_fault, $_->{side}, $_->{pid},
            $_->{msg} } grep { $_->{ev} ne 'lost-held' && $_->{ev} ne 'local' }
        @events), map { "  $_: " . ($seen{$_} // 0) . ' lines' }
        'A lost-held', 'B lost-held', 'A local', 'B local';

    # the fault was the one the bounds assume
    if ($f->{expiry}) {
        ok($seen{'A expired'}, "$f->{id}: A's sessions expired");
    } elsif ($f->{jeopardy}) {
        ok($seen{'A jeopardy'} && !$seen{'A expired'}, "$f->{id}: A's "
            . 'sessions went into jeopardy, and lived');
    } else {
        ok(!grep({ $seen{$_} } 'A jeopardy', 'B jeopardy', 'A expired',
            'B expired'), "$f->{id}: no session went into jeopardy");
    }

    # a killed worker holds nothing from the kill on: its leases go back as
    # its sockets close, and the backend hears of its calls' end a moment
    # later, when another holder may have started (CI saw 0.01 s)
    my $dead = $ctx->{killed};
    for my $c (@CELLS) {
        my @calls = map { call($_, \%req, $t_fault) }
            @{ $calls->{ $c->{name} } // [] };
        $_->{end} = $dead->{at} for grep { $dead && $_->{hung}
            && $_->{pid} eq $dead->{pid} && $_->{end} > $dead->{at} } @calls;
        check_cell($f, $c, \@calls,
            [ grep { $_->{cell} eq $c->{name} } values %req ],
            { fault => $t_fault, over => $t_over, events => \@events,
              current => \%current });
    }

    $ctx->{px}->stop if $ctx->{px};
    $ctx->{ens}->stop if $ctx->{ens};
    note sprintf '%s took %.1f s', $f->{id}, time - $t_begin;
}

# a backend call: [start, end, w, id, hungup], id
# "<role>.<status at start>.<token>.<request number>.<worker pid>"
sub call {
    my ($raw, $req, $t0) = @_;
    my ($start, $end, $w, $id, $hung) = @$raw;
    my ($role, $status, $token, $n, $pid) = split /\./, $id, -1;
    my $r = $req->{$n} // {};
    return { start => $start, end => $end // time, running => !defined $end,
        w => $w, role => $role, status => $status, token => $token,
        n => $n, pid => $pid, hung => $hung, inst => $r->{inst} // '?',
        final => $r->{final}, t0 => $t0 };
}

sub show {
    my ($c) = @_;
    return sprintf '%s %s %s token=%s n=%s pid=%s %+.2f..%+.2f%s final=%s',
        $c->{inst}, $c->{role}, $c->{status}, $c->{token} || '-', $c->{n},
        $c->{pid}, $c->{start} - $c->{t0}, $c->{end} - $c->{t0},
        $c->{running} ? ' (running)' : $c->{hung} ? ' (hung up)' : '',
        $c->{final} // '(not logged)';
}

###############################################################################
# The checks of one lock under one fault.

sub check_cell {
    my ($f, $c, $calls, $reqs, $t) = @_;
    my $what = "$f->{id} $c->{name}";

    # 1. the bound
    my $finish_lost = ($f->{expiry} || $f->{broker})
        && $c->{lost} eq 'finish';
    my $extra = $c->{fail} eq 'local=1' && $f->{jeopardy} ? 1 : 0;
    my @bounded = grep { $_->{status} ne 'BYPASSED' } @$calls;
    my @lost = $finish_lost
        ? grep { ($_->{final} // '') eq 'LOST' } @bounded : ();
    my %is_lost = map { $_ => 1 } @lost;
    my @rest = grep { !$is_lost{$_} } @bounded;
    my $desc = $c->{kind} eq 'rw' ? 'a writer alone'
        : 'at most ' . ($c->{cap} + $extra);
    $desc .= ' (the cap + 1 local lease)' if $extra;
    $desc .= ', the LOST holders aside' if @lost;
    $desc .= ', BYPASSED aside' if $c->{fail} eq 'open';
    within($what, "in flight: $desc", $c->{kind}, \@rest,
        $c->{cap} + $extra, $t);
    if ($extra) {
        within($what, 'through ZooKeeper: ' . ($c->{kind} eq 'rw'
            ? 'a writer alone' : "at most $c->{cap}"), $c->{kind},
            [ grep { $_->{status} ne 'LOCAL' } @rest ], $c->{cap}, $t);
        within($what, 'with a local lease: at most 1', 'sem',
            [ grep { $_->{status} eq 'LOCAL' } @rest ], 1, $t);
    }
    within($what, 'the LOST holders among themselves: '
        . ($c->{kind} eq 'rw' ? 'a writer alone' : "at most $c->{cap}"),
        $c->{kind}, \@lost, $c->{cap}, $t) if @lost;

    # 2. fencing tokens
    if ($c->{kind} ne 'sem') {
        my @h = sort { $a->{start} <=> $b->{start} } grep {
            $_->{status} eq 'ACQUIRED' && length $_->{token}
                && (!defined $_->{final} || $_->{final} eq 'ACQUIRED')
                && ($c->{kind} eq 'mutex' || $_->{role} eq 'w')
        } @$calls;
        my @bad = grep { $h[$_]{token} <= $h[ $_ - 1 ]{token} } 1 .. $#h;
        ok(!@bad, "$what: tokens of successive holders increase ("
            . scalar(@h) . ' holders)')
            or diag_calls('out of order', [ map { @h[ $_ - 1, $_ ] }
                @bad[ 0 .. ($#bad < 2 ? $#bad : 2) ] ], $t);
    }

    # 3. every request answered in time
    my @late = grep {
        $_->{error} eq 'timeout' || !defined $_->{end}
            || $_->{end} - $_->{start} > $_->{timeout} + $_->{sleep} + $MARGIN
    } @$reqs;
    ok(!@late, "$what: every request answered within timeout + upstream "
        . "time + ${MARGIN} s (" . scalar(@$reqs) . ' requests)')
        or diag join "\n", map { sprintf '%s n=%d %+.2f..%+.2f status %s '
            . '%s %s', $_->{inst}, $_->{n}, ($_->{start} // 0) - $t->{fault},
            ($_->{end} // 0) - $t->{fault}, $_->{status}, $_->{lock},
            $_->{error} } @late[ 0 .. ($#late < 5 ? $#late : 5) ];

    # 4. local leases only while A's worker had no usable session
    if ($c->{fail} eq 'local=1') {
        my @local = grep { $_->{status} eq 'LOCAL' } @$calls;
        my @wrong = grep { !local_allowed($f, $_, $t) } @local;
        ok(!@wrong, "$what: " . ($f->{jeopardy} ? 'local leases only on '
            . 'A, between jeopardy and reconnection' : 'no local lease')
            . ' (' . scalar(@local) . ' LOCAL)')
            or diag_calls('granted', \@wrong, $t);
    }

    # 5. both instances take the lock again once the fault is over
    for my $inst (qw(A B)) {
        my $n = grep { $_->{inst} eq $inst && $_->{start} >= $t->{over}
            && $_->{status} eq 'ACQUIRED' && $t->{current}{ $_->{pid} } }
            @$calls;
        ok($n, "$what: $inst takes the lock again after the fault, in its "
            . "current workers ($n ACQUIRED)")
            or diag summary($reqs, $inst, $t);
    }
}

# test: at no instant more than $bound of @$calls in flight
sub within {
    my ($what, $desc, $kind, $calls, $bound, $t) = @_;
    my ($peak, $at, $then) = peak_in_flight($calls,
        $kind eq 'rw' ? sub { $_[0]{role} eq 'w' } : undef);
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    return ok($peak <= $bound, "$what: $desc (max $peak)")
        || diag_calls(sprintf('at %+.2f', $at - $t->{fault}), $then, $t);
}


# may this LOCAL call have been granted?  Only on A, in f2 and f3, by a
# worker whose session went into jeopardy, before it was connected again
# (the watcher sees a line up to 0.1 s after it is written: 0.3 s of
# slack before; after, 0.3 s for the call to reach the backend)
sub local_allowed {
    my ($f, $c, $t) = @_;
    return 0 unless $f->{jeopardy} && $c->{inst} eq 'A';
    my ($from, $to);
    for my $e (@{ $t->{events} }) {
        next unless $e->{side} eq 'A' && $e->{pid} == $c->{pid};
        $from //= $e->{t} if $e->{ev} eq 'jeopardy';
        $to //= $e->{t} if $e->{ev} eq 'connected' && defined $from;
    }
    return 0 unless defined $from;
    return $c->{start} >= $from - 0.3
        && (!defined $to || $c->{start} <= $to + 0.3);
}

sub diag_calls {
    my ($title, $calls, $t) = @_;
    diag join "\n", "$title (times from the fault):", map { '  ' . show($_) }
        @$calls;
}

sub summary {
    my ($reqs, $inst, $t) = @_;
    my %n;
    $n{ ($_->{lock} || $_->{error} || $_->{status}) }++ for grep {
        $_->{inst} eq $inst && $_->{end} >= $t->{over} } @$reqs;
    return "$inst, the requests that ended after the fault: "
        . join(', ', map { "$n{$_} $_" } sort keys %n);
}

###############################################################################
# Servers

# ZooKeeper (or the ensemble), the proxy, and the two instances
sub fleet {
    my ($f) = @_;
    my %ctx;
    my ($hosts_a, $hosts_b);
    if ($f->{ensemble}) {
        my $ens = $ctx{ens} = zk_ensemble_start(3);
        $hosts_a = join ',', map { 'zk.test:' . $_->port } $ens->nodes;
        $hosts_b = $ens->hosts;
        $ctx{hosts} = $ens;
    } else {
        my $px = $ctx{px} = ZkLock::FaultProxy->start($zk);
        $hosts_a = 'zk.test:' . $px->port;
        $hosts_b = $zk->hosts;
        $ctx{zk} = $ctx{hosts} = $zk;
    }
    $ctx{a} = nginx_start(conf($f, $hosts_a, <<"EOF"), backend => $be,
    resolver 127.0.0.1:$dns->{port} valid=1s ipv6=off;
    resolver_timeout 1s;
EOF
        workers => 2);
    $ctx{b} = nginx_start(conf($f, $hosts_b, ''), backend => $be,
        workers => 1);
    ok(sessions_connected(20, @ctx{qw(a b)}),
        "$f->{id}: every worker of A and B has a session");
    return \%ctx;
}

sub conf {
    my ($f, $hosts, $resolver) = @_;
    my $locations = '';
    for my $c (@CELLS) {
        for my $r (@{ $c->{roles} }) {
            my ($role, $directive, $w, undef, $timeout) = @$r;
            $directive =~ s{%p}{/mx/$f->{id}/$c->{name}};
            $timeout //= $TIMEOUT;
            $locations .= <<"EOF";
        location = /c/$c->{name}/$role {
            $directive timeout=${timeout}s;
            zk_lock_fail $c->{fail};
            zk_lock_lost $c->{lost};
            proxy_pass http://%%BACKEND%%/w?rec=1&key=$c->{name}&w=$w&sleep=\$arg_sleep&hangup=1&id=$role.\$zk_lock_status.\$zk_lock_token.\$arg_n.\$pid;
        }
EOF
        }
    }
    return <<"EOF";
$resolver
    zk_hosts $hosts;
    zk_session_timeout $f->{T}s;
    log_format matrix '\$arg_n \$zk_lock_status \$status \$pid';
    server {
        listen 127.0.0.1:%%PORT%%;
        add_header X-Lock \$zk_lock_status always;
        access_log %%PREFIX%%/logs/matrix.log matrix;
$locations    }
EOF
}

# t/lib/dns.py: zk.test is 127.0.0.1; dns_mute(1) makes it stop answering
sub dns_start {
    my $dir = tempdir('matrix-dns');
    my $port = free_port();
    open my $fh, '>', "$dir/names.json" or die $!;
    print $fh '{"zk.test":["127.0.0.1"]}';
    close $fh;
    spawn(name => 'dns.py', log => "$dir/dns.log",
        cmd => [ $ZkLock::Test::PYTHON, 't/lib/dns.py', '--port', $port,
            '--dir', $dir ]);
    sleep 0.3;
    return { dir => $dir, port => $port };
}

sub dns_mute {
    my ($on) = @_;
    if ($on) { open my $fh, '>', "$dns->{dir}/mute" or die $!; close $fh }
    else     { unlink "$dns->{dir}/mute" }
}

# until $until, read the new lines of A's and B's error logs every 0.1 s,
# and note when each session event was seen (per side and worker pid)
sub watch_logs {
    my ($ctx, $until) = @_;
    while (1) {
        for my $side (qw(a b)) {
            my $file = $ctx->{$side}->prefix . '/logs/error.log';
            open my $fh, '<', $file or next;
            seek $fh, $ctx->{off}{$side}, 0;
            local $/;
            my $new = <$fh> // '';
            my $end = rindex $new, "\n";
            next if $end < 0;
            $new = substr $new, 0, $end + 1;
            $ctx->{off}{$side} += length $new;
            my $now = time;
            for my $line (split /\n/, $new) {
                my ($pid, $msg) = $line =~ /\] (\d+)#\d+: (?:\*\d+ )?(.*)/
                    or next;
                my $ev = $msg =~ /zookeeper session \S+ connected/ ? 'connected'
                    : $msg =~ /no word from zookeeper for/ ? 'jeopardy'
                    : $msg =~ /zookeeper session \S+ expired/ ? 'expired'
                    : $msg =~ /is heard from again/ ? 'heard'
                    : $msg =~ /zookeeper connection lost/ ? 'disconnected'
                    : $msg =~ /lost while held/ ? 'lost-held'
                    : $msg =~ /passed with a local lease/ ? 'local'
                    : $msg =~ /could not resolve/ ? 'dns'
                    : next;
                $msg =~ s/(?:, client: | while talking to zookeeper).*//;
                push @{ $ctx->{events} }, { t => $now, side => uc $side,
                    pid => $pid, ev => $ev, msg => $msg };
            }
        }
        last if time >= $until;
        sleep 0.1;
    }
}
