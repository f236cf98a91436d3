#!/usr/bin/perl
# Surviving faults of the clients and of nginx itself, across a fleet of two
# nginx instances (2 workers each):
#
#  1. 1000 clients queued on one zk_mutex (behind a foreign holder) close
#     their connections while waiting: ZooKeeper really held ~1000 waiting
#     nodes, every one of them is deleted within seconds, the holder's node
#     is untouched, the backend never sees an aborted request, the next
#     request gets the lock at once, no worker crashed
#  2. nginx reload (HUP, twice) under a steady stream of gated requests:
#     mutual exclusion holds throughout, every request ends 200, requests
#     waiting in the old workers are served by them while they shut down,
#     the old workers exit once their requests ended and close their
#     sessions, the new workers connect sessions of their own, no node left
#  3. binary upgrade (USR2 to the master, then WINCH and QUIT to the old
#     master, as in nginx's documentation) while a request holds the lock:
#     the lock is not released early (a request to the other instance waits
#     until the holder ends), the new master's workers serve gated
#     requests, no node left
#  4. 200 clients that close their connection right
#     after sending the request, so that nginx often reads the request and
#     the end of the stream at once: no node of theirs may stay queued
#  no [alert]/[crit]/[emerg] or "exited on signal" lines in any error.log
#
# For 3 the upgraded instance runs with "daemon on" (started here, outside
# the harness's nginx_start, which runs nginx in the foreground): nginx
# ignores USR2 while the master's parent is the process that started it,
# and WINCH when it is not daemonized. Its processes are killed by their
# process group at the end.

use strict;
use warnings;
use Test::More;
use Time::HiRes qw(time sleep);
use Errno qw(EINPROGRESS EAGAIN EWOULDBLOCK EINTR);
use Fcntl qw(F_GETFL F_SETFL O_NONBLOCK);
use IO::Poll qw(POLLIN POLLOUT POLLERR POLLHUP);
use POSIX qw(WNOHANG _exit);
use Socket qw(AF_INET SOCK_STREAM SOL_SOCKET SO_ERROR inet_aton
    pack_sockaddr_in);
use lib 't/lib';
use ZkLock::Test;

require_prereqs(qw(nginx zookeeper kazoo module));

my $T_START = time;
my $NGINX = $ZkLock::Test::NGINX;    # as the harness
my $zk = zk_start();
my $be = backend_start();

# add_header $pid: each response says which worker served it.
my $conf = <<'EOF';
    zk_hosts %%ZK%%;
    zk_session_timeout 10s;

    server {
        listen 127.0.0.1:%%PORT%%;
        add_header X-Pid $pid always;

        location /q {
            zk_mutex /t/abort timeout=120s;
            proxy_pass http://%%BACKEND%%;
        }

        location /m {
            zk_mutex /t/reload timeout=60s;
            proxy_pass http://%%BACKEND%%;
        }

        location /up {
            zk_mutex /t/up timeout=60s;
            proxy_pass http://%%BACKEND%%;
        }

        location /e {
            zk_mutex /t/eof timeout=30s;
            proxy_pass http://%%BACKEND%%;
        }
    }
EOF

my %nopt = (zk => $zk, backend => $be, workers => 2);
my $A = nginx_start($conf, %nopt);
my $B = nginx_start($conf, %nopt);

ok(sessions_connected($A, $B), 'every worker has a session');

# ------------------------------------------------------------ local helpers

# pid => session id of the "connected" lines of $log after byte $from
sub connected_sessions {
    my ($log, $from) = @_;
    my $text = substr($log, $from // 0);
    my %s;
    $s{$1} = lc $2 while $text
        =~ /(\d+)#\d+: .*?zookeeper session 0x([0-9a-fA-F]+) connected/g;
    return \%s;
}

# pids that logged "closing zookeeper session" after byte $from
sub closing_pids {
    my ($log, $from) = @_;
    my $text = substr($log, $from // 0);
    my %p;
    $p{$1} = 1 while $text
        =~ /(\d+)#\d+: .*?closing zookeeper session 0x[0-9a-f]+/g;
    return \%p;
}

# [alert]/[crit]/[emerg] and crash lines of an error.log not checked yet
my %LOG_CHECKED;
sub check_log {
    my ($what, $name, $log_of) = @_;
    my $log = $log_of->();
    my $from = $LOG_CHECKED{$name} // 0;
    $LOG_CHECKED{$name} = length $log;
    my @bad = grep { /\[(?:alert|crit|emerg)\]/ || /exited on signal/ }
        split /\n/, substr($log, $from);
    ok(!@bad, "$what: error.log of $name has no alert/crit/emerg/crash "
        . "lines") or diag join "\n", @bad;
}

sub check_fleet_logs {
    my ($what) = @_;
    check_log($what, 'A', sub { $A->error_log });
    check_log($what, 'B', sub { $B->error_log });
}


# /proc scan: [pid, ppid, pgid] of every live (non-zombie) process
sub procs {
    my @p;
    opendir my $d, '/proc' or return ();
    for my $pid (grep { /^\d+$/ } readdir $d) {
        my $stat = slurp("/proc/$pid/stat");
        # comm may contain spaces and ')': anchor on the last ')'
        push @p, [$pid + 0, $2 + 0, $3 + 0]
            if $stat =~ /^\d+ \(.*\) (\S) (\d+) (\d+)/s && $1 ne 'Z';
    }
    return @p;
}

sub children_of {
    my ($ppid) = @_;
    my @k = sort { $a <=> $b } map { $_->[0] } grep { $_->[1] == $ppid }
        procs();
    return @k;
}

# the worker processes among the children of a master (after USR2 the
# new master is a child of the old one)
sub workers_of {
    my ($master) = @_;
    return grep { slurp("/proc/$_/cmdline") =~ /worker process/ }
        children_of($master);
}

sub group_members {
    my ($pgid) = @_;
    return map { $_->[0] } grep { $_->[2] == $pgid } procs();
}

# Opens one connection per [$port, $uri], sends the request and leaves it
# waiting for its answer (with close => 1: closes it at once): non-blocking
# connects in batches, poll(2) (no select() and its 1024 descriptors
# limit). Returns (\@sockets, \@errors).
sub open_clients {
    my ($reqs, %o) = @_;
    my $batch = $o{batch} // 100;
    local $SIG{PIPE} = 'IGNORE';
    my (@open, @errors);
    for (my $i = 0; $i < @$reqs; $i += $batch) {
        my $last = $i + $batch - 1;
        $last = $#$reqs if $last > $#$reqs;
        my %pending;
        for my $r (@$reqs[$i .. $last]) {
            my ($port, $uri) = @$r;
            socket(my $s, AF_INET, SOCK_STREAM, 0)
                or do { push @errors, "socket: $!"; next };
            fcntl($s, F_SETFL, fcntl($s, F_GETFL, 0) | O_NONBLOCK);
            if (!connect($s, pack_sockaddr_in($port, inet_aton('127.0.0.1')))
                && $! != EINPROGRESS)
            {
                push @errors, "connect: $!";
                next;
            }
            $pending{ fileno $s } = { sock => $s,
                buf => "GET $uri HTTP/1.0\r\nHost: 127.0.0.1:$port\r\n"
                    . "User-Agent: zklock-reload\r\n\r\n" };
        }
        my $deadline = time + 15;
        while (%pending && time < $deadline) {
            my $poll = IO::Poll->new;
            $poll->mask($_->{sock} => POLLOUT) for values %pending;
            $poll->poll(0.5);
            for my $fd (keys %pending) {
                my $c = $pending{$fd};
                next unless $poll->events($c->{sock});
                my $err = unpack 'i',
                    getsockopt($c->{sock}, SOL_SOCKET, SO_ERROR);
                if ($err) {
                    push @errors, 'connect: ' . ($! = $err);
                    delete $pending{$fd};
                    next;
                }
                my $n = syswrite($c->{sock}, $c->{buf});
                if (!defined $n) {
                    next if $! == EAGAIN || $! == EWOULDBLOCK || $! == EINTR;
                    push @errors, "write: $!";
                    delete $pending{$fd};
                    next;
                }
                substr($c->{buf}, 0, $n, '');
                next if length $c->{buf};
                if ($o{close}) { close $c->{sock} }
                else           { push @open, $c->{sock} }
                delete $pending{$fd};
            }
        }
        push @errors, ('connect/send: timeout') x keys %pending;
    }
    return (\@open, \@errors);
}

# Sockets among @$socks with something to read (an answer, or EOF).
sub answered {
    my ($socks) = @_;
    my @r;
    for (my $i = 0; $i < @$socks; $i += 200) {
        my $last = $i + 199;
        $last = $#$socks if $last > $#$socks;
        my $poll = IO::Poll->new;
        $poll->mask($_ => POLLIN) for @$socks[$i .. $last];
        $poll->poll(0);
        push @r, grep { $poll->events($_) & (POLLIN | POLLERR | POLLHUP) }
            @$socks[$i .. $last];
    }
    return @r;
}

# --------------------------------- 1. 1000 clients abort while queued
#
# 500 clients per instance stay below the harness's worker_connections
# (1024) even if one worker accepts all of them; ulimit -n is checked.

subtest '1000 client aborts while queued' => sub {
    my $N = 1000;
    my $nofile = `sh -c 'ulimit -n'` // '';
    chomp $nofile;
    plan skip_all => "ulimit -n is $nofile, needs > " . ($N + 100)
        if $nofile =~ /^\d+$/ && $nofile < $N + 100;

    $be->reset;
    my @workers = ($A->worker_pids, $B->worker_pids);
    my $h = zk_hold($zk, '/t/abort', name => curator_name(), seconds => 600);
    my ($hname) = $h->node =~ m{([^/]+)$};

    my $t0 = time;
    my ($socks, $errors) = open_clients([ map {
        [ ($_ % 2 ? $A : $B)->port, "/q?key=ab&id=$_" ] } 1 .. $N ]);
    is(scalar @$socks, $N, "$N clients connected and sent their request")
        or diag explain [ @$errors[0 .. ($#$errors > 9 ? 9 : $#$errors)] ];
    note sprintf '%d requests sent in %.2fs', scalar @$socks, time - $t0;

    # the peak: every queued request has its node behind the holder's
    my $peak = 0;
    wait_for(sub {
        my $n = () = zk_children($zk, '/t/abort');
        $peak = $n - 1 if $n - 1 > $peak;
        return $peak >= $N;
    }, 40, 0.2);
    note sprintf 'peak: %d waiting nodes after %.2fs', $peak, time - $t0;
    cmp_ok($peak, '>', 500, "ZooKeeper held many waiting nodes ($peak)");
    is($peak, $N, 'one node per queued request');
    is(scalar(answered($socks)), 0, 'no client got an answer while queued');

    my $t_abort = time;
    close $_ for @$socks;
    @$socks = ();
    my @left;
    my $clean = wait_for(sub {
        @left = zk_children($zk, '/t/abort');
        return @left == 1;
    }, 30, 0.2);
    my $took = time - $t_abort;
    ok($clean, 'every waiting node is deleted after the aborts')
        or diag scalar(@left) . ' nodes left';
    cmp_ok($took, '<=', 10, sprintf('within seconds (%.2fs)', $took));
    is_deeply(\@left, [$hname], "the holder's node is untouched");

    $h->release;
    no_ephemerals($zk, '/t/abort', 'after the holder ends');

    my $r = http_get($A->port, '/q?key=after', timeout => 10);
    is($r->{status}, 200, 'the next request gets the lock');
    cmp_ok($r->{time}, '<', 2, sprintf('at once (%.2fs)', $r->{time}));
    is(http_get($B->port, '/q?key=after', timeout => 10)->{status}, 200,
        'on the other instance too');
    is($be->stats('ab')->{count}, 0, 'no aborted request reached the backend');
    no_ephemerals($zk, '/t/abort', 'after the aborts');

    is_deeply([ sort { $a <=> $b } $A->worker_pids, $B->worker_pids ],
        [ sort { $a <=> $b } @workers ], 'the same workers are still running');
    check_fleet_logs('aborts');
};

# -------------------------------------------- 2. reload under load

subtest 'reload (HUP) twice under a stream of gated requests' => sub {
    $be->reset;
    my $N = 60;
    my $stagger = 0.1;

    my @gen = ([ $A->worker_pids ]);
    my $off0 = length $A->error_log;
    # 150 ms each, one arrival every 100 ms: a queue builds up, so that
    # the old workers still have waiting requests when they are told to
    # shut down
    my $h = http_parallel_bg([ map {
        [ ($_ % 2 ? $A : $B)->port, "/m?key=rl&sleep=150&id=$_" ] }
        0 .. $N - 1 ], stagger => $stagger, timeout => 90);
    my $t0 = time;

    my (@t_reload, @off, @waiting);
    for my $at (1.5, 3.2) {
        sleep $at - (time - $t0) if time - $t0 < $at;
        my $n;
        wait_for(sub { $n = () = zk_children($zk, '/t/reload'); $n >= 5 },
            5, 0.1);
        push @waiting, $n;
        push @off, length $A->error_log;
        push @t_reload, time;
        ok($A->reload, sprintf('A reloaded at +%.1fs with %d nodes queued',
            time - $t0, $n));
        push @gen, [ $A->worker_pids ];
    }
    my $res = http_parallel_collect($h, 120);

    my @bad = grep { $res->[$_]{status} != 200 } 0 .. $N - 1;
    is(scalar @bad, 0, "all $N requests end 200")
        or diag explain [ map { "id $_: $res->[$_]{status} "
            . ($res->[$_]{error} // '') } @bad ];
    my $st = $be->stats('rl');
    is($st->{max}, 1, 'mutual exclusion held throughout (max in flight 1)');
    is($st->{count}, $N, "backend saw $N requests");

    # who served what: X-Pid of A's answers by generation of workers
    for my $g (0, 1) {
        my %old = map { $_ => 1 } @{ $gen[$g] };
        my @late = grep { $old{ $_->{headers}{'x-pid'} // 0 }
            && $_->{end} > $t_reload[$g] + 0.2 } @$res;
        cmp_ok(scalar @late, '>=', 1, "reload " . ($g + 1) . ': '
            . scalar(@late) . ' requests queued in the old workers were '
            . 'served by them while they shut down');
    }
    my %last = map { $_ => 1 } @{ $gen[2] };
    cmp_ok(scalar(grep { $last{ $_->{headers}{'x-pid'} // 0 } } @$res),
        '>=', 1, 'the newest workers serve gated requests');

    ok(wait_for(sub { (() = $A->child_pids) == 2 }, 15, 0.1),
        'the old workers exit once their requests ended')
        or diag explain [ $A->child_pids ];
    my @old = (@{ $gen[0] }, @{ $gen[1] });
    is_deeply([ grep { pid_alive($_) } @old ], [], 'none of them is left');

    my $log = $A->error_log;
    my $closing = closing_pids($log, $off0);
    is_deeply([ grep { !$closing->{$_} } @old ], [],
        'each old worker closed its session on exit');
    my $before = connected_sessions($log, 0);
    for my $g (1, 2) {
        my $s = connected_sessions($log, $off[$g - 1]);
        my @new = @{ $gen[$g] };
        is(scalar(grep { $s->{$_} } @new), 2, "reload $g: both new workers "
            . "logged 'zookeeper session 0x... connected'")
            or diag explain $s;
        my %old_ids = map { $before->{$_} => 1 }
            grep { $before->{$_} } @{ $gen[$g - 1] };
        is(scalar(grep { $s->{$_} && !$old_ids{ $s->{$_} } } @new), 2,
            "reload $g: with sessions of their own");
    }

    my $r = http_get($A->port, '/m?key=rl2', timeout => 10);
    is($r->{status}, 200, 'A serves gated requests after the reloads');
    no_ephemerals($zk, '/t/reload', 'after the reloads');
    check_fleet_logs('reload');
};

# ------------------------------------------- 3. binary upgrade (USR2)

my @UPGRADE_GROUPS;    # process groups of the daemonized nginx of test 3

END {
    local $?;
    for my $g (@UPGRADE_GROUPS) {
        kill 'TERM', -$g;
        wait_for(sub { !group_members($g) }, 5, 0.05);
        kill 'KILL', -$g if group_members($g);
    }
}

subtest 'binary upgrade while a request holds the lock' => sub {
    $be->reset;
    # the harness writes the conf (and picks the port); rerun it daemonized
    my $ng = nginx_start($conf, %nopt);
    $ng->stop;
    my $p = $ng->prefix;
    my $port = $ng->port;
    (my $text = $ng->conf) =~ s/^daemon off;$/daemon on;/m
        or return fail('a "daemon off;" line in the generated nginx.conf');
    open my $fh, '>', "$p/upgrade.conf" or die "$p/upgrade.conf: $!";
    print {$fh} $text;
    close $fh or die "close: $!";

    my $launcher = fork // die "fork: $!";
    if (!$launcher) {
        open STDIN, '<', '/dev/null';
        open STDOUT, '>>', "$p/logs/upgrade-stderr.log" or _exit(126);
        open STDERR, '>&', \*STDOUT or _exit(126);
        { exec $NGINX, '-p', "$p/", '-e', "$p/logs/error.log",
            '-c', "$p/upgrade.conf" }
        _exit(127);
    }
    wait_for(sub { waitpid($launcher, WNOHANG) != 0 }, 10, 0.02)
        or kill 'KILL', $launcher;
    my $m1;
    wait_for(sub { ($m1) = slurp("$p/nginx.pid") =~ /^(\d+)/; $m1 }, 10);
    if (!$m1) {
        fail('daemonized nginx started');
        diag slurp("$p/logs/upgrade-stderr.log") . $ng->error_log;
        return;
    }
    push @UPGRADE_GROUPS, $m1;    # setsid: the master leads its group
    my @w1;
    ok(wait_for(sub { @w1 = workers_of($m1); @w1 == 2 }, 10, 0.05),
        'U (daemonized) runs 2 workers');
    ok(wait_for(sub {
        my $s = connected_sessions($ng->error_log);
        !grep { !$s->{$_} } @w1 }, 15, 0.1), "U's workers are connected");

    my $t0 = time;
    my $hold = http_parallel_bg([[ $port, '/up?key=up&sleep=20000&id=h' ]],
        timeout => 60);
    ok(wait_for(sub { $be->stats('up')->{inflight} == 1 }, 5, 0.02),
        'a request to U holds the lock');
    my $wait = http_parallel_bg([[ $A->port, '/up?key=up&id=a' ]],
        timeout => 60);
    ok(wait_for(sub { zk_children($zk, '/t/up') == 2 }, 5, 0.1),
        'a request to A waits behind it');

    # USR2: a new master with new workers, next to the old ones
    my $off = length $ng->error_log;
    note sprintf '+%.1fs: USR2', time - $t0;
    kill 'USR2', $m1 or die "USR2: $!";
    my $m2;
    ok(wait_for(sub {
        ($m2) = slurp("$p/nginx.pid") =~ /^(\d+)/;
        $m2 && $m2 != $m1 }, 10, 0.05), 'USR2: a new master started')
        or diag substr($ng->error_log, $off);
    $m2 //= 0;
    is((slurp("$p/nginx.pid.oldbin") =~ /^(\d+)/)[0], $m1,
        'the old master moved to nginx.pid.oldbin');
    my @w2;
    ok(wait_for(sub { @w2 = workers_of($m2); @w2 == 2 }, 10, 0.05),
        'the new master runs 2 workers');
    ok(wait_for(sub {
        my $s = connected_sessions($ng->error_log, $off);
        !grep { !$s->{$_} } @w2 }, 15, 0.1),
        'the new workers connected sessions of their own');
    note sprintf '+%.1fs: new workers connected', time - $t0;

    # WINCH: the old workers stop accepting and shut down gracefully
    note sprintf '+%.1fs: WINCH', time - $t0;
    kill 'WINCH', $m1 or die "WINCH: $!";
    ok(wait_for(sub { workers_of($m1) <= 1 }, 10, 0.05),
        'WINCH: the idle old worker exits');
    my @still = workers_of($m1);
    is(scalar @still, 1, 'the old worker holding the lock stays');
    is($be->stats('up')->{inflight}, 1, 'the holder is still running');
    is(scalar(() = zk_children($zk, '/t/up')), 2,
        'the holder and the waiter keep their nodes');

    # a gated request through the new workers queues behind both
    my $new = http_parallel_bg([[ $port, '/up?key=up&id=n' ]], timeout => 60);
    ok(wait_for(sub { zk_children($zk, '/t/up') == 3 }, 5, 0.1),
        'a request to U (new workers) queues');

    # QUIT: the old master exits once its last worker is done
    note sprintf '+%.1fs: QUIT', time - $t0;
    kill 'QUIT', $m1 or die "QUIT: $!";
    my $rh = http_parallel_collect($hold, 30)->[0];
    my $ra = http_parallel_collect($wait, 30)->[0];
    my $rn = http_parallel_collect($new, 30)->[0];
    is($rh->{status}, 200, 'the holder completes (200)');
    cmp_ok($rh->{end} - $t0, '>=', 19.5, 'after its full 20 s');
    is($rh->{headers}{'x-pid'}, $still[0],
        'served by the old worker that stayed');
    is($ra->{status}, 200, 'the waiter on A gets the lock');
    cmp_ok($ra->{end}, '>=', $rh->{end} - 0.5,
        'only once the holder ended (not released early)');
    is($rn->{status}, 200, 'the request to the new workers gets the lock');
    ok((grep { $_ == ($rn->{headers}{'x-pid'} // 0) } @w2),
        'served by a new worker');
    my $st = $be->stats('up');
    is_deeply($st->{order}, [qw(h a n)], 'served in queue order');
    is($st->{max}, 1, 'one at a time');

    ok(wait_for(sub { !pid_alive($m1) }, 10, 0.05), 'the old master exits');
    is_deeply([ grep { pid_alive($_) } @w1 ], [], 'so do the old workers');
    my $closing = closing_pids($ng->error_log);
    is_deeply([ grep { !$closing->{$_} } @w1 ], [],
        'the old workers closed their sessions');

    my $res = http_parallel([ map { [ $port, "/up?key=up2&id=$_" ] } 1 .. 4 ],
        timeout => 20);
    is_deeply([ map { $_->{status} } @$res ], [ (200) x 4 ],
        'the upgraded instance serves gated requests');
    my %w2 = map { $_ => 1 } @w2;
    is(scalar(grep { $w2{ $_->{headers}{'x-pid'} // 0 } } @$res), 4,
        'all through the new workers');
    no_ephemerals($zk, '/t/up', 'after the upgrade');

    kill 'QUIT', $m2;
    ok(wait_for(sub { !group_members($m1) }, 10, 0.05),
        'the new master and its workers exit on QUIT');
    no_ephemerals($zk, '/t', 'at the end');
    check_log('upgrade', 'U', sub { $ng->error_log });
    check_fleet_logs('upgrade');
};

# ----------------- 4. clients that close right after sending
#
# nginx reads the request and the end of the stream in one recv() (the
# debug log says "recv: eof:1" before the request line): epoll reported
# EPOLLRDHUP already, so no read event comes after the module suspends the
# request; the module must look for it itself.

subtest 'clients that close right after sending their request' => sub {
    $be->reset;
    my $h = zk_hold($zk, '/t/eof', name => curator_name(), seconds => 600);
    my ($hname) = $h->node =~ m{([^/]+)$};
    my $N = 200;
    my (undef, $errors) = open_clients([ map {
        [ ($_ % 2 ? $A : $B)->port, "/e?key=eof&id=$_" ] } 1 .. $N ],
        close => 1, batch => $N);
    is(scalar @$errors, 0, "$N clients sent their request and closed")
        or diag explain [ @$errors[0 .. ($#$errors > 9 ? 9 : $#$errors)] ];
    my @left;
    my $gone = wait_for(sub {
        @left = grep { $_ ne $hname } zk_children($zk, '/t/eof');
        !@left }, 5, 0.5);
    note scalar(@left) . " of $N aborted requests still queued after 5 s";
    ok($gone, 'no node of theirs stays queued');
    is($be->stats('eof')->{count}, 0, 'none reached the backend');
    $h->release;
};

note sprintf 'total runtime %.1fs', time - $T_START;
done_testing;
