#!/usr/bin/perl
# Priority classes under faults (issue 39): zk_lock_class and priority= on
# a kept zk_semaphore (src/ngx_zk_lock_class.c, board.c, keep.c) through a
# worker killed, a ZooKeeper that hangs, and clients that hang up.
#
# Two nginx x 2 workers, zk_session_timeout 3s, zk_semaphore leases=10
# keep=1s fair=$arg_tenant priority=$arg_class (timeout=30s, and 3s on a
# second location of the same path for case 2), the classes of
# t/priority.t: critical (70 shares, lendable 50%), standard (20, 50%, the
# default) and batch (10, 90%), nominal 7, 2 and 1 of the 10 leases.  A
# backend of 100 ms records every call with its class (the independent
# witness).  Clients on fresh connections, closed loop (t/lib/load.py).
#
#  1. a worker killed: batch floods both nginx (12 clients each), critical
#     comes back with 16 clients on nginx 0; once critical holds about its
#     nominal, the worker of nginx 0 that keeps the instance's leases (the
#     pid in its lease nodes' data; its board node named by the same UUID
#     prefix) is killed (SIGKILL).  Asserts:
#       - before the kill, that worker had lease nodes and a board node
#       - never more than 10 calls at the backend, the kill included
#       - from 5 s after the kill (session timeout 3 s, a quantum, slack),
#         over 5 s: critical holds 6 leases at least on average, batch 0.5
#         at least (its nominal lease is not starved)
#       - the killed worker's lease nodes and board node go with its
#         session (within 10 s of the kill), the board has a node per
#         instance again
#       - every request is answered 200 but those that were in flight on
#         nginx 0 at the kill, which got no answer (the connection reset),
#         no more of them than nginx 0's 28 clients
#       - the error log names no zk_sessions broker (none is configured:
#         the requests that waited for the killed worker's kept leases
#         ask again, logged "keep=: the worker that keeps the leases of")
#  2. ZooKeeper hangs: critical (16 clients on nginx 0) and batch (12 on
#     each) on the 3 s location, 50 ms between a client's requests; 4 s
#     in, ZooKeeper is stopped (SIGSTOP) for 6 s, longer than the session
#     timeout, then resumed; 10 s more.  Asserts:
#       - every request answered, 200 or 503, within its 3 s timeout, the
#         call and 3 s of slack: none hangs on the stopped server
#       - never more than 10 at the backend, over the whole run
#       - from 6 s to 10 s after the resume, critical holds 6 leases at
#         least on average
#       - before the hang and again after the resume, the board has a node
#         per instance (read by an independent client)
#       - nginx logged the outage (the outage line, at error)
#  3. clients that hang up at each moment: a steady load of critical (16
#     clients on nginx 0) and batch (4 on each nginx), and meanwhile 32
#     clients of both classes on both nginx, 0.1 s apart, that send a
#     request and hang up: at once (before the lock); while waiting
#     (behind their flow's queue, 0.15 to 0.6 s); 30 to 360 ms after
#     sending, in a flow of their own (served among the first of their
#     class; critical on nginx 0: some at the grant); and while holding
#     (a 3 s call, a flow of its own, hung up at 1 s).  A call's end is
#     taken as the moment its client closed, if that came first (the
#     README: the lock goes with the request, while the upstream may
#     still be working).  Asserts:
#       - every such client sent its request and hung up
#       - never more than 10 calls at the backend
#       - clients of both classes hung up while holding (the backend saw
#         them go), and 4 at least before their request reached it
#       - no request reached the backend later than 0.2 s after its client
#         hung up (a client gone while waiting leaves the queue)
#       - from 1 s after the last hang-up, over 4 s, critical holds 6
#         leases at least on average
#       - the requests of the steady load are all 200
#  4. once the load is over and the kept leases expired, no ephemeral node
#     is left under the path nor its board
#  no [alert]/[crit]/[emerg] line (but the killed worker's exit), no
#  crashed worker (checked by the harness at done_testing)

use strict;
use warnings;
use Test::More;
use Time::HiRes qw(time sleep);
use JSON::PP ();
use POSIX ();
use IO::Socket::INET;
use lib 't/lib';
use ZkLock::Test;
use ZkLock::Calls;

require_prereqs(qw(nginx zookeeper kazoo module));

my $CLASSES = <<'EOF';
    zk_lock_class critical shares=70 lendable=50%;
    zk_lock_class standard shares=20 lendable=50% default;
    zk_lock_class batch    shares=10 lendable=90%;
EOF

my $LEASES = 10;
my $CALL_MS = 100;
my $TIMEOUT = 3;    # the location of case 2
my $PATH = '/t/pfault';
my $KEY = 'pfault';
my $PREFIX = qr/^(_c_[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4})/;

my $zk = zk_start();
my $be = backend_start();

my $conf = <<"EOF";
    zk_hosts %%ZK%%;
    zk_session_timeout 3s;
$CLASSES
    server {
        listen 127.0.0.1:%%PORT%%;
        access_log off;
        location = /p {
            zk_semaphore $PATH leases=$LEASES keep=1s timeout=30s
                         fair=\$arg_tenant priority=\$arg_class;
            proxy_pass http://%%BACKEND%%;
        }
        location = /f {
            zk_semaphore $PATH leases=$LEASES keep=1s timeout=${TIMEOUT}s
                         fair=\$arg_tenant priority=\$arg_class;
            proxy_pass http://%%BACKEND%%;
        }
    }
EOF

my @ng = map { nginx_start($conf, zk => $zk, backend => $be, workers => 2,
    connections => 1024) } 1 .. 2;
ok(sessions_connected(@ng), 'every worker has a session');

sub uri {
    my ($class, $tenant, %o) = @_;
    my $loc = $o{loc} // 'p';
    my $id = $o{id} // $class;
    my $sleep = $o{sleep} // $CALL_MS;
    return "/$loc?key=$KEY&sleep=$sleep&rec=1&tenant=$tenant&class=$class"
        . "&id=$id" . ($o{hangup} ? '&hangup=1' : '');
}

# closed-loop clients, as a load.py run in the background; it ends at
# $until or once the file $l->{stop} exists
sub load {
    my ($name, $until, @clients) = @_;
    my $dir = $ng[0]->prefix;
    my ($spec, $out, $stop) = map { "$dir/$name.$_.$$" } qw(json out stop);
    unlink $out, $stop;
    open my $fh, '>', $spec or die "$spec: $!";
    print $fh $ZkLock::Test::JSON->encode({ until => $until, stop => $stop,
        clients => [ map { { gap => 0, timeout => 60, %$_ } } @clients ] });
    close $fh;
    my $pid = spawn(cmd => [$ZkLock::Test::PYTHON, 't/lib/load.py',
        '--spec', $spec, '--out', $out]);
    return { pid => $pid, out => $out, stop => $stop };
}

sub stop_load {
    my ($l) = @_;
    open my $fh, '>', $l->{stop} or die "$l->{stop}: $!";
    close $fh;
}

sub results {
    my ($l) = @_;
    proc_wait($l->{pid}, 120);
    return -s $l->{out} ? JSON::PP->new->decode(slurp($l->{out})) : [];
}

# sleeps until the time $t (at once if it passed)
sub sleep_until {
    my ($t) = @_;
    my $d = $t - time;
    sleep $d if $d > 0;
}

sub calls { return $be->calls->{$KEY} // [] }

sub held { return calls_held(calls(), @_) }

# the board's nodes and their sessions
sub board {
    my %b;
    for my $n (zk_children($zk, "$PATH.fair")) {
        my $g = zk_get($zk, "$PATH.fair/$n");
        $b{$n} = $g->{ephemeral_owner} if $g;
    }
    return \%b;
}

sub by_status {
    my %by;
    $by{ $_->{status} }++ for @_;
    return join ' ', map { "$_: $by{$_}" } sort keys %by;
}

###########################################################################
# 1. a worker killed

{
    $be->reset;
    my $t0 = time;
    my @batch_clients = map { { port => $ng[ $_ % 2 ]->port,
        uri => uri('batch', 'b' . ($_ % 3)) } } 0 .. 23;
    my $batch = load('batch1', $t0 + 60, @batch_clients);
    sleep_until($t0 + 3);
    my $tc = time;
    my $critical = load('critical1', $t0 + 60, map { { port => $ng[0]->port,
        uri => uri('critical', "c$_") } } 0 .. 15);

    # critical about its nominal: 6 at least over the last second
    my $near = wait_for(sub {
        my $now = time;
        return $now > $tc + 1 && (held('critical', $now - 1, $now))[0] >= 6;
    }, 10, 0.25);
    ok($near, 'critical comes near its nominal 7 beside the batch flood');

    # the worker of nginx 0 that keeps the leases: its pid is in the data
    # of its lease nodes, their names' prefix is its board node's name
    my %w0 = map { $_ => 1 } $ng[0]->worker_pids;
    my (%nodes, %pid);
    for my $n (zk_children($zk, $PATH)) {
        push @{ $nodes{$1} }, $n if $n =~ $PREFIX;
    }
    for my $pre (keys %nodes) {
        for my $n (@{ $nodes{$pre} }) {
            my $g = zk_get($zk, "$PATH/$n") or next;
            ($pid{$pre}) = ($g->{data} // '') =~ /\bpid (\d+)\b/;
            last;
        }
    }
    my $bd = board();
    my ($victim_pre) = sort { @{ $nodes{$b} } <=> @{ $nodes{$a} } }
        grep { $pid{$_} && $w0{ $pid{$_} } } keys %nodes;
    my $victim = $victim_pre ? $pid{$victim_pre} : undef;
    diag(sprintf 'lease nodes by worker: %s; board: %s; nginx 0 workers %s',
        join(' ', map { "$_ (pid " . ($pid{$_} // '?') . '): '
            . scalar @{ $nodes{$_} } } sort keys %nodes),
        join(' ', sort keys %$bd), join(' ', sort keys %w0));
    ok($victim, 'a worker of nginx 0 holds lease nodes');
    ok($victim_pre && exists $bd->{$victim_pre},
        '... and has a board node, named by the same prefix');

    my ($tk, $r1);
    if ($victim) {
        $ng[0]->expect_log(
            qr/\[alert\] \d+#\d+: worker process $victim exited on signal 9$/);
        kill 'KILL', $victim or die "kill $victim: $!";
        $tk = time;
        diag(sprintf 'killed worker %d (%s, %d lease nodes) %.2f s after '
            . 'critical came', $victim, $victim_pre,
            scalar @{ $nodes{$victim_pre} }, $tk - $tc);

        # its nodes go with its session; a node per instance again
        my @left;
        my $gone = wait_for(sub {
            @left = grep { m{/\Q$victim_pre\E} } zk_ephemerals($zk, $PATH),
                map { "$PATH.fair/$_" } zk_children($zk, "$PATH.fair");
            return !@left;
        }, $tk + 10 - time, 0.2);
        my $t_gone = time - $tk;
        ok($gone, sprintf("the killed worker's lease nodes and board node "
            . 'went with its session (%.1f s after the kill)', $t_gone))
            or diag explain \@left;
        my $b2 = {};
        ok(wait_for(sub { $b2 = board(); keys %$b2 == 2 }, 8, 0.2),
            'the board has a node per instance again')
            or diag explain $b2;
    } else {
        $tk = time;
        fail("the killed worker's nodes went with its session: no victim");
        fail('the board has a node per instance again: no victim');
    }

    sleep_until($tk + 10);
    stop_load($_) for $batch, $critical;
    my @crit = @{ results($critical) };
    my @bat = @{ results($batch) };

    my ($c_mean) = held('critical', $tk + 5, $tk + 10);
    my ($b_mean) = held('batch', $tk + 5, $tk + 10);
    my ($c_before) = held('critical', $tc + 1, $tk);
    my (undef, $peak) = held(undef, $t0, time);
    # (once the calls that ran at the kill ended)
    my $back = calls_reached(calls(), 'critical', $tk + 0.2, 7);
    $back += 0.2 if defined $back;
    diag(sprintf 'critical %.2f on average before the kill; from 5 s '
        . 'after: critical %.2f, batch %.2f; critical at 7 again %s after '
        . 'the kill; peak %d', $c_before, $c_mean, $b_mean,
        defined $back ? sprintf('%.2f s', $back) : 'never', $peak);
    cmp_ok($peak, '<=', $LEASES, "1: never more than $LEASES at the "
        . 'backend, the kill included');
    cmp_ok($c_mean, '>=', 6, '1: from 5 s after the kill, critical holds '
        . '6 leases at least on average');
    cmp_ok($b_mean, '>=', 0.5, '1: ... and batch 0.5 at least (its '
        . 'nominal lease)');

    my $p0 = $ng[0]->port;
    my @failed = grep { $_->{status} != 200 } @crit, @bat;
    my @cut = grep { $_->{status} == 0 && $_->{port} == $p0
        && $_->{start} < $tk + 0.05 && $_->{end} > $tk - 0.05 } @failed;
    my %cut = map { $_->{n} => 1 } @cut;
    my @other = grep { !$cut{ $_->{n} } } @failed;
    diag(sprintf '%d requests: %s; %d cut at the kill (%s)',
        scalar(@crit) + scalar(@bat), by_status(@crit, @bat), scalar @cut,
        join(', ', map { sprintf '%+.3f s %s', $_->{end} - $tk,
            $_->{error} } @cut[0 .. ($#cut < 2 ? $#cut : 2)]));
    is(scalar @other, 0, '1: every request 200 but those in flight on '
        . 'nginx 0 at the kill')
        or diag explain [ map { sprintf '%d %s port %d %.3f..%.3f s',
            $_->{status}, $_->{error}, $_->{port}, $_->{start} - $tk,
            $_->{end} - $tk } @other[0 .. ($#other < 5 ? $#other : 5)] ];
    # no zk_sessions here: the siblings asked the worker that keeps the
    # instance's leases, and the log says so
    my $log0 = $ng[0]->error_log;
    my $again = 'keep=: the worker that keeps the leases of "'
        . $PATH . '" went, asking again';
    my $asked = () = $log0 =~ /\Q$again\E/g;
    diag("nginx 0: $asked requests asked again for the kept leases");
    unlike($log0, qr/zk_sessions:/, '1: the log names no zk_sessions broker '
        . '(none is configured)');
    cmp_ok(scalar @cut, '<=', 28, '1: those cut at the kill are no more '
        . "than nginx 0's clients");
}

sleep 1.5;

###########################################################################
# 2. ZooKeeper hangs

{
    $be->reset;
    my $t0 = time + 0.2;
    my $end = $t0 + 4 + 6 + 10;
    my @clients = map { { port => $ng[0]->port, gap => 0.05, timeout => 30,
        uri => uri('critical', "c$_", loc => 'f') } } 0 .. 15;
    push @clients, map { { port => $ng[ $_ % 2 ]->port, gap => 0.05,
        timeout => 30, uri => uri('batch', 'b' . ($_ % 3), loc => 'f') } }
        0 .. 23;
    my $l = load('hang', $end, @clients);

    sleep_until($t0 + 3.5);
    my $before = board();
    sleep_until($t0 + 4);
    $zk->pause;
    my $paused = time;
    sleep_until($t0 + 10);
    $zk->resume;
    my $resumed = time;

    my $after = {};
    ok(wait_for(sub { $after = board(); keys %$after == 2 }, 8, 0.2),
        '2: after the resume, the board has a node per instance again')
        or diag explain $after;
    my %old = map { $_ => 1 } values %$before;
    my $renewed = grep { !$old{$_} } values %$after;

    my @reqs = @{ results($l) };
    my @bad = grep { $_->{status} != 200 && $_->{status} != 503 } @reqs;
    my $limit = $TIMEOUT + $CALL_MS / 1000 + 3;
    my @slow = grep { $_->{end} - $_->{start} > $limit } @reqs;
    my ($longest) = sort { $b <=> $a } map { $_->{end} - $_->{start} } @reqs;
    my (undef, $peak) = held(undef, $t0, time);
    my ($c_before) = held('critical', $t0 + 1, $paused);
    my ($c_after) = held('critical', $resumed + 6, $resumed + 10);
    my @sec = map { sprintf '%.1f', (held('critical', $resumed + $_,
        $resumed + $_ + 1))[0] } 0 .. 9;
    diag(sprintf '2: paused %.1f s; %s; longest %.2f s; peak %d; critical '
        . '%.2f before, %.2f from 6 to 10 s after the resume (each second '
        . 'after: %s); board before: %s, after: %s (%d of new sessions)',
        $resumed - $paused, by_status(@reqs), $longest // 0, $peak,
        $c_before, $c_after, join(' ', @sec), join(' ', sort keys %$before),
        join(' ', sort keys %$after), $renewed);

    is(scalar keys %$before, 2, '2: before the hang, the board had a node '
        . 'per instance');
    is(scalar @bad, 0, '2: every request answered, 200 or 503')
        or diag explain [ map { "$_->{status} $_->{error}" }
            @bad[0 .. ($#bad < 4 ? $#bad : 4)] ];
    is(scalar @slow, 0, "2: none longer than its ${TIMEOUT} s timeout, the "
        . 'call and 3 s')
        or diag explain [ map { sprintf '%.1f s from %+.1f s', $_->{end}
            - $_->{start}, $_->{start} - $paused }
            @slow[0 .. ($#slow < 4 ? $#slow : 4)] ];
    cmp_ok($peak, '<=', $LEASES, "2: never more than $LEASES at the "
        . 'backend, through the hang');
    cmp_ok($c_after, '>=', 6, '2: from 6 to 10 s after the resume, '
        . 'critical holds 6 leases at least on average');
    like($ng[0]->error_log, qr/\[error\].*zookeeper unreachable for/,
        '2: nginx logged the outage, at error');
}

sleep 1.5;

###########################################################################
# 3. clients that hang up at each moment

# a client that sends its request and hangs up $secs later (0: at once),
# never reading; it writes the moment it closed to $file
sub hang_up {
    my ($port, $uri, $secs, $file) = @_;
    my $pid = fork // die "fork: $!";
    if (!$pid) {
        $SIG{$_} = 'DEFAULT' for qw(INT TERM);
        $SIG{PIPE} = 'IGNORE';
        my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1',
            PeerPort => $port, Proto => 'tcp', Timeout => 5)
            or POSIX::_exit(2);
        syswrite($s, "GET $uri HTTP/1.0\r\nHost: 127.0.0.1:$port\r\n"
            . "Connection: close\r\n\r\n");
        my $sent = time;
        sleep $secs if $secs > 0;
        close $s;
        my $closed = time;
        open my $fh, '>', $file or POSIX::_exit(3);
        print $fh "$sent $closed\n";
        close $fh;
        POSIX::_exit(0);
    }
    return register_pid($pid, 'hang_up');
}

{
    $be->reset;
    my $t0 = time;
    my $dir = $ng[0]->prefix;
    my $l = load('steady', $t0 + 60,
        (map { { port => $ng[0]->port, uri => uri('critical', "c$_") } }
            0 .. 15),
        (map { { port => $ng[ $_ % 2 ]->port,
            uri => uri('batch', 'b' . ($_ % 3)) } } 0 .. 7));

    # who hangs up when: [kind, class, seconds, call ms, its own flow]
    my @who;
    for my $i (0 .. 3) {
        my $class = $i % 2 ? 'batch' : 'critical';
        my $flow = $class eq 'batch' ? 'b' . ($i % 3) : "c$i";
        push @who, [ 'before', $class, 0, $CALL_MS, $flow ],
            [ 'before', $class, 0, $CALL_MS, $flow ],
            [ 'waiting', $class, 0.15 + 0.15 * $i, $CALL_MS, $flow ],
            [ 'waiting', $class, 0.2 + 0.1 * $i, $CALL_MS, $flow ],
            [ 'holding', $class, 1.0, 3000, "h$i" ];
    }
    # a flow of its own is served among the first of its class: within
    # 50 to 400 ms here
    for my $i (0 .. 11) {
        my $class = $i % 3 == 2 ? 'batch' : 'critical';
        push @who, [ 'grant', $class, 0.03 * ($i + 1), $CALL_MS, "g$i" ];
    }
    my @order = map { $_->[1] } sort { $a->[0] <=> $b->[0] }
        map { [ ($_ * 7919) % 97, $_ ] } 0 .. $#who;

    sleep_until($t0 + 2);
    my %hung;
    for my $k (0 .. $#order) {
        my ($kind, $class, $secs, $ms, $flow) = @{ $who[ $order[$k] ] };
        my $id = "gone-$kind-$class-$k";
        my $file = "$dir/$id.$$";
        # critical is served on nginx 0: there a flow of its own is
        # served at once
        my $port = $ng[ $kind eq 'grant' && $class eq 'critical' ? 0
            : $k % 2 ]->port;
        hang_up($port, uri($class, $flow, id => $id,
            sleep => $ms, hangup => 1), $secs, $file);
        $hung{$id} = { file => $file, kind => $kind, class => $class };
        sleep 0.1;
    }
    my $last = 0;
    for my $h (values %hung) {
        wait_for(sub { -s $h->{file} }, 10, 0.05);
        @$h{qw(sent closed)} = split ' ', slurp($h->{file});
        $last = $h->{closed} if ($h->{closed} // 0) > $last;
    }
    my $missing = grep { !$_->{closed} } values %hung;
    is($missing, 0, '3: every client that hangs up sent its request and '
        . 'hung up');
    $last ||= time;

    sleep_until($last + 5);
    stop_load($l);
    my @steady = @{ results($l) };

    # the calls, each ended by its client's hang-up if that came first;
    # per kind of client: [clients, never reached the backend, reached it
    # less than 30 ms before the hang-up (at the grant) or after it,
    # hung up on at the backend (while holding)]
    my (@cut, %reached, %held_up, @late, %kind);
    for my $c (@{ calls() }) {
        my ($start, $end, $w, $id, $hungup) = @$c;
        my $h = $hung{$id};
        if ($h && $h->{closed}) {
            $reached{$id} = 1;
            $kind{ $h->{kind} }[2]++ if $start > $h->{closed} - 0.03;
            $kind{ $h->{kind} }[3]++ if $hungup;
            $held_up{ $h->{class} }++ if $hungup && $h->{kind} eq 'holding';
            push @late, sprintf('%s %.3f s after', $id, $start - $h->{closed})
                if $start > $h->{closed} + 0.2;
            $end = $h->{closed} if $start < $h->{closed}
                && (!defined $end || $h->{closed} < $end);
        }
        push @cut, [ $start, $end, $w, $id ];
    }
    if ($ENV{TEST_VERBOSE}) {
        my %start = map { $_->[3] => $_->[0] } @{ calls() };
        diag(join "\n", map { sprintf '%-28s sent %+.3f closed %+.3f '
            . 'reached %s', $_, $hung{$_}{sent} - $t0,
            ($hung{$_}{closed} // 0) - $t0, defined $start{$_}
            ? sprintf('%+.3f', $start{$_} - $t0) : 'never' }
            sort { $hung{$a}{sent} <=> $hung{$b}{sent} } keys %hung);
    }
    for my $id (keys %hung) {
        $kind{ $hung{$id}{kind} }[0]++;
        $kind{ $hung{$id}{kind} }[1]++ unless $reached{$id};
    }
    my (undef, $peak) = calls_held(\@cut, undef, $t0, time);
    my ($c_mean) = calls_held(\@cut, 'critical', $last + 1, $last + 5);
    diag(sprintf '3: hung up (clients/never reached the backend/at the '
        . 'grant/hung up on): %s; holding: critical %d, batch %d; peak %d; '
        . 'critical %.2f from 1 s after the last; steady: %s',
        join(' ', map { "$_ " . join('/', map { $_ // 0 }
            @{ $kind{$_} }[0 .. 3]) } sort keys %kind),
        $held_up{critical} // 0, $held_up{batch} // 0, $peak, $c_mean,
        by_status(@steady));

    cmp_ok($peak, '<=', $LEASES, "3: never more than $LEASES at the backend "
        . '(a call ended at its hang-up)');
    cmp_ok($held_up{critical} // 0, '>=', 1, '3: critical clients hung up '
        . 'while holding');
    cmp_ok($held_up{batch} // 0, '>=', 1, '3: ... and batch clients');
    cmp_ok(scalar(grep { !$reached{$_} } keys %hung), '>=', 4,
        '3: clients hung up before their request reached the backend');
    is(scalar @late, 0, '3: no request reached the backend 0.2 s after its '
        . 'client hung up')
        or diag explain \@late;
    cmp_ok($c_mean, '>=', 6, '3: from 1 s after the last hang-up, critical '
        . 'holds 6 leases at least on average');
    my @bad = grep { $_->{status} != 200 } @steady;
    is(scalar @bad, 0, '3: the ' . scalar(@steady) . ' requests of the '
        . 'steady load, all 200')
        or diag explain [ map { "$_->{status} $_->{error}" }
            @bad[0 .. ($#bad < 4 ? $#bad : 4)] ];
}

###########################################################################
# 4. nothing left behind

no_ephemerals($zk, $PATH, '4: the load over and keep=1s passed', 10);
no_ephemerals($zk, "$PATH.fair", '4: the board too', 10);

$_->stop for @ng;
$be->stop;
$zk->stop;

done_testing();
