#!/usr/bin/perl
# Benchmark, run by hand (never by prove): many requests waiting on one
# zk_mutex path across a fleet of two nginx (2 workers each) - the memory a
# waiting request costs, and what a wake-up costs as the queue grows: a
# per-handoff cost that grows with the number of waiters is O(n^2) work
# over the drain.
#
#   perl t/bench/waiters.pl [--sizes 100,1000,10000] [--limit 300]
#                           [--per-client 500] [--no-idle] [--json FILE]
#
# For each size n, on a fresh fleet (new nginx instances, so that memory
# freed by an earlier size is not reused unseen) and a fresh path
# /bench/waiters-<n>, behind a foreign holder at the head of the queue
# (zk_hold):
#
#   1. n idle connections, half to each nginx, that sent only a request
#      line ("GET /w/<n> HTTP/1.1\r\n", no end of headers): nginx's own
#      cost of a connection with a request being read (--no-idle: skipped);
#   2. n gated requests (HTTP/1.1, Connection: close), half to each nginx,
#      until ZooKeeper lists n+1 children and the status page counts n
#      waiting; the idle connections stay open meanwhile, then are closed;
#   3. the holder lets go, and the queue drains in FIFO order over the
#      fleet (the content is a static file).
#
# A warm-up round of 200 waiters (not reported) comes first.
# The clients are forked processes, --per-client connections each (poll()
# on non-blocking sockets), so that a response's arrival time is read
# within a moment whatever n is.
#
# Columns: "mem/waiter" the growth of the workers' VmRSS (sum over the 4
# workers) per waiting request, "(idle conn)" the same for an idle
# connection, "lock" their difference (the request past its headers and
# its lock); "queue s" the time until all n were queued; "first wake ms"
# from the holder's release (closing its stdin: its session close adds a
# few ms) to the first response; handoffs/s over the first and the last
# min(100, n) responses (queue still ~n long, queue nearly empty) and over
# the whole drain (from the first response to the last); CPU per handoff
# (user+system, over the drain) of the nginx workers and of ZooKeeper
# ("enqueue" is the workers' CPU per waiter while the queue was built);
# "errors" responses other than 200 (or none); "left" nodes under the path
# afterwards. A drain that did not end in --limit seconds is reported as
# partial ("done" < n) from the responses seen by then.
#
# Progress goes to STDERR, the table to STDOUT; --json FILE writes the rows.
# ZK_LOCK_MODULE=/path/to/module.so uses a prebuilt module.

use strict;
use warnings;
use utf8;
use FindBin;
use Getopt::Long;
use Errno qw(EINPROGRESS EAGAIN EWOULDBLOCK EINTR);
use Fcntl qw(F_GETFL F_SETFL O_NONBLOCK);
use IO::Poll qw(POLLIN POLLOUT POLLERR POLLHUP);
use IO::Select;
use JSON::PP ();
use POSIX ();
use Socket qw(AF_INET SOCK_STREAM SOL_SOCKET SO_ERROR inet_aton
    pack_sockaddr_in);
use Time::HiRes qw(time sleep);
use lib "$FindBin::Bin/../lib";
use ZkLock::Test;

chdir "$FindBin::Bin/../.." or die "chdir: $!";
$| = 1;

my %o = (sizes => '100,1000,10000', limit => 300, 'per-client' => 500,
    idle => 1);
GetOptions(\%o, 'sizes=s', 'limit=i', 'per-client=i', 'idle!', 'json=s')
    or exit 2;
my @sizes = split /,/, $o{sizes};
die "--sizes: a comma-separated list of numbers of waiters (at least 2)\n"
    if !@sizes || grep { !/^\d+$/ || $_ < 2 } @sizes;
die "--limit: seconds (at least 10)\n" if $o{limit} < 10;
die "--per-client: at least 1\n" if $o{'per-client'} < 1;

{
    # a missing prerequisite must fail loudly here, not "skip" with exit 0
    local $ENV{CI} = 'true';
    require_prereqs(qw(nginx zookeeper kazoo module));
}

my $max_n = (sort { $b <=> $a } @sizes)[0];
# the worst case, one worker accepting all of its instance's idle and
# waiting connections, plus its ZooKeeper socket and the status requests
my $connections = $max_n + 2000 > 12000 ? $max_n + 2000 : 12000;
my $tck = POSIX::sysconf(POSIX::_SC_CLK_TCK()) || 100;

sub progress { printf STDERR "%s %s\n", POSIX::strftime('%H:%M:%S',
    localtime), sprintf(shift, @_) }

my $t_start = time;
my $zk = zk_start();

my $locations = join '', map { <<"EOF" } @sizes, 'warmup';
        location = /w/$_ {
            zk_mutex /bench/waiters-$_ timeout=86400s;
            try_files /index.html =404;
        }
EOF

my $conf = <<"EOF";
    zk_hosts %%ZK%%;

    server {
        listen 127.0.0.1:%%PORT%% backlog=4096;
        access_log off;
        root %%PREFIX%%;
        # the idle connections must stay open for the whole measure
        client_header_timeout 86400s;

$locations
        location = /status { zk_lock_status_page json; }
        location = /stub   { stub_status; }
    }
EOF

my $json = JSON::PP->new->utf8->canonical;
my @fleet;
my @bad;    # [error], [crit], [alert] lines of the instances stopped

sub status_of {
    my ($ng) = @_;
    my $r = http_get($ng->port, '/status', timeout => 10);
    return $r->{status} == 200 ? eval { $json->decode($r->{body}) } : undef;
}

# A fresh fleet for each size: the RSS growth is not hidden by memory that
# the workers freed after the previous size and reuse.
sub fleet_start {
    @fleet = map {
        nginx_start($conf, zk => $zk, workers => 2,
            connections => $connections, log_level => 'warn')
    } 1 .. 2;

    for my $ng (@fleet) {
        open my $fh, '>', $ng->prefix . '/index.html' or die $!;
        print $fh "ok\n";
        close $fh or die $!;
    }

    # every worker of both instances has its session (the "connected"
    # line is logged at info, below this error_log's level)
    wait_for(sub {
        for my $ng (@fleet) {
            my $s = status_of($ng) or return 0;
            my @w = @{ $s->{workers} || [] };
            return 0 unless @w == 2 && !grep { !$_->{connected} } @w;
        }
        return 1;
    }, 30, 0.2) or die "the workers have no ZooKeeper session:\n"
        . join('', map { $_->error_log } @fleet);
}

sub fleet_stop {
    for my $ng (@fleet) {
        $ng->stop;
        push @bad, grep { /\[(?:alert|crit|emerg|error)\]/
            || /exited on signal/ } split /\n/, $ng->error_log;
    }
    @fleet = ();
}

# ------------------------------------------------------------ measures

sub workers { return map { $_->worker_pids } @fleet }

sub rss_kb {
    my $kb = 0;
    for my $pid (workers()) {
        open my $fh, '<', "/proc/$pid/status" or next;
        while (<$fh>) { $kb += $1 if /^VmRSS:\s+(\d+) kB/ }
    }
    return $kb;
}

sub workers_cpu { cpu_seconds(workers()) }
sub zk_cpu      { cpu_seconds($zk->pid) }

# requests waiting on a path, summed over the fleet (status page)
sub waiting {
    my ($path) = @_;
    my $n = 0;
    for my $ng (@fleet) {
        my $s = status_of($ng) or return -1;
        $n += $_->{waiting} for grep { $_->{path} eq $path }
            @{ $s->{locks} || [] };
    }
    return $n;
}

# requests whose headers are being read, summed over the fleet
sub reading {
    my $n = 0;
    for my $ng (@fleet) {
        my $r = http_get($ng->port, '/stub', timeout => 10);
        return -1 unless $r->{status} == 200 && $r->{body} =~ /Reading: (\d+)/;
        $n += $1;
    }
    return $n;
}

# ------------------------------------------------------------ clients

# A forked client: $n_idle idle connections and $n_wait gated requests to
# one nginx, on command from the parent (lines on its pipe: idle, wait,
# close-idle, quit). Reports "idle-ok E", "wait-ok E" (E: connections that
# failed), "closed", and "D <time> <status>" for each gated request that
# ended (status 0: no HTTP response).
sub client_main {
    my ($port, $uri, $n_idle, $n_wait, $cmd, $rep) = @_;
    $SIG{PIPE} = 'IGNORE';
    $SIG{$_} = 'DEFAULT' for qw(INT TERM);
    my $addr = pack_sockaddr_in($port, inet_aton('127.0.0.1'));
    my $full = "GET $uri HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    my $partial = "GET $uri HTTP/1.1\r\n";
    my %conn;                          # fileno => connection
    my %todo = (idle => 0, wait => 0); # still to open
    my %pending = (idle => 0, wait => 0);    # opened, not yet sent
    my %failed = (idle => 0, wait => 0);
    my %asked;
    my $cmdbuf = '';
    my $report = sub { syswrite $rep, join('', @_) };
    # one poll set kept up to date: a wake-up costs this client the ready
    # sockets, not all of its sockets
    my $poll = IO::Poll->new;
    $poll->mask($cmd => POLLIN);

    my $end = sub {
        my ($c, $status) = @_;
        delete $conn{ $c->{fd} };
        $poll->remove($c->{sock});
        close $c->{sock};
        if ($c->{kind} eq 'wait') {
            $report->(sprintf "D %.6f %d\n", time, $status);
        }
        if ($c->{phase} eq 'send') {
            $pending{ $c->{kind} }--;
            $failed{ $c->{kind} }++;
        }
    };

    while (1) {
        # open more, at most 64 connects in flight per client
        for my $kind (qw(idle wait)) {
            while ($todo{$kind} > 0 && $pending{idle} + $pending{wait} < 64) {
                $todo{$kind}--;
                socket(my $s, AF_INET, SOCK_STREAM, 0) or die "socket: $!";
                fcntl($s, F_SETFL, fcntl($s, F_GETFL, 0) | O_NONBLOCK);
                if (!connect($s, $addr) && $! != EINPROGRESS) {
                    $failed{$kind}++;
                    $report->(sprintf "D %.6f 0\n", time) if $kind eq 'wait';
                    next;
                }
                $pending{$kind}++;
                $conn{ fileno $s } = { sock => $s, fd => fileno $s,
                    kind => $kind, phase => 'send', rbuf => '',
                    wbuf => $kind eq 'wait' ? $full : $partial };
                $poll->mask($s => POLLOUT);
            }
            if ($asked{$kind} && !$todo{$kind} && !$pending{$kind}) {
                delete $asked{$kind};
                $report->("$kind-ok $failed{$kind}\n");
            }
        }

        $poll->poll(1);

        for my $h ($poll->handles(POLLIN | POLLOUT | POLLERR | POLLHUP)) {
            if ($h == $cmd) {
                my $r = sysread($cmd, $cmdbuf, 4096, length $cmdbuf);
                POSIX::_exit(0) unless $r;    # the parent is gone
                while ($cmdbuf =~ s/^(.*)\n//) {
                    my $line = $1;
                    if ($line eq 'idle') {
                        ($todo{idle}, $asked{idle}) = ($n_idle, 1);
                    } elsif ($line eq 'wait') {
                        ($todo{wait}, $asked{wait}) = ($n_wait, 1);
                    } elsif ($line eq 'close-idle') {
                        for my $c (grep { $_->{kind} eq 'idle' }
                                values %conn) {
                            delete $conn{ $c->{fd} };
                            $poll->remove($c->{sock});
                            close $c->{sock};
                        }
                        $todo{idle} = $pending{idle} = 0;
                        delete $asked{idle};
                        $report->("closed\n");
                    } elsif ($line eq 'quit') {
                        close $_->{sock} for values %conn;
                        POSIX::_exit(0);
                    }
                }
                next;
            }
            my $c = $conn{ fileno $h } or next;
            if ($c->{phase} eq 'send') {
                my $err = unpack 'i',
                    getsockopt($c->{sock}, SOL_SOCKET, SO_ERROR);
                if ($err) {
                    $end->($c, 0);
                    next;
                }
                my $w = syswrite($c->{sock}, $c->{wbuf});
                if (!defined $w) {
                    next if $! == EAGAIN || $! == EWOULDBLOCK || $! == EINTR;
                    $end->($c, 0);
                    next;
                }
                substr($c->{wbuf}, 0, $w, '');
                next if length $c->{wbuf};
                $c->{phase} = 'read';
                $pending{ $c->{kind} }--;
                $poll->mask($c->{sock} => POLLIN);
                next;
            }
            my $r = sysread($c->{sock}, $c->{rbuf}, 65536, length $c->{rbuf});
            if (!defined $r) {
                next if $! == EAGAIN || $! == EWOULDBLOCK || $! == EINTR;
                $end->($c, 0);
                next;
            }
            next if $r > 0;
            # EOF: the whole response (Connection: close), or an idle
            # connection closed by nginx
            my ($status) = $c->{rbuf} =~ m{^HTTP/\d\.\d (\d{3})};
            $end->($c, $status // 0);
        }
    }
}

my @clients;

sub start_clients {
    my ($n, $n_idle, $tag) = @_;
    my @c;
    for my $i (0 .. $#fleet) {
        # half of each kind to each instance (the first gets the odd one)
        my $w = int($n / 2) + ($i == 0 ? $n % 2 : 0);
        my $d = int($n_idle / 2) + ($i == 0 ? $n_idle % 2 : 0);
        my $k = int(($w > $d ? $w : $d) / $o{'per-client'} + 0.999999) || 1;
        for my $j (0 .. $k - 1) {
            my $cw = int($w / $k) + ($j < $w % $k ? 1 : 0);
            my $cd = int($d / $k) + ($j < $d % $k ? 1 : 0);
            pipe(my $cmd_r, my $cmd_w) or die "pipe: $!";
            pipe(my $rep_r, my $rep_w) or die "pipe: $!";
            my $pid = fork // die "fork: $!";
            if (!$pid) {
                close $_ for $cmd_w, $rep_r, map { @$_{qw(cmd rep)} } @c;
                eval { client_main($fleet[$i]->port, "/w/$tag", $cd, $cw,
                    $cmd_r, $rep_w) };
                print STDERR "client $$: $@" if $@;
                POSIX::_exit(1);
            }
            close $cmd_r;
            close $rep_w;
            my $old = select $cmd_w; $| = 1; select $old;
            push @c, { pid => $pid, cmd => $cmd_w, rep => $rep_r,
                buf => '', n_wait => $cw, n_idle => $cd };
        }
    }
    @clients = @c;
    progress('n=%d: %d client processes', $n, scalar @c);
}

sub tell_clients {
    my ($line) = @_;
    print { $_->{cmd} } "$line\n" for grep { $_->{cmd} } @clients;
}

# Reads the clients' reports for up to $timeout s; calls $on->($client,
# $line) for each line. Returns the number of lines read.
sub read_clients {
    my ($timeout, $on) = @_;
    my $sel = IO::Select->new(map { $_->{rep} } grep { $_->{rep} } @clients);
    my %by_fh = map { ($_->{rep} => $_) } grep { $_->{rep} } @clients;
    my $lines = 0;
    if (!$sel->count) {
        sleep $timeout;
        return 0;
    }
    for my $fh ($sel->can_read($timeout)) {
        my $c = $by_fh{$fh};
        my $r = sysread($fh, $c->{buf}, 65536, length $c->{buf});
        if (!$r) {
            close delete $c->{rep};
            next;
        }
        while ($c->{buf} =~ s/^(.*)\n//) {
            $lines++;
            $on->($c, $1);
        }
    }
    return $lines;
}

sub stop_clients {
    tell_clients('quit');
    for my $c (@clients) {
        close delete $c->{cmd} if $c->{cmd};
        close delete $c->{rep} if $c->{rep};
        waitpid $c->{pid}, 0;
    }
    @clients = ();
}

# waits until every client reported "$what"; returns the failures reported
sub wait_reports {
    my ($what, $timeout) = @_;
    my ($got, $failed) = (0, 0);
    my $deadline = time + $timeout;
    my $on = sub {
        my ($c, $line) = @_;
        if ($line =~ /^\Q$what\E(?: (\d+))?$/) {
            $got++;
            $failed += $1 // 0;
        }
    };
    while ($got < @clients && time < $deadline) {
        read_clients(1, $on);
    }
    warn "WARNING: $got of ${\ scalar @clients} clients reported $what\n"
        if $got < @clients;
    return $failed;
}

# ------------------------------------------------------------ one size

my @rows;

sub measure {
    my ($n, $tag) = @_;
    $tag //= $n;
    my $path = "/bench/waiters-$tag";
    my %row = (waiters => $n, path => $path);
    my $n_idle = $o{idle} ? $n : 0;
    my $t_n = time;
    fleet_start();

    my $holder = zk_hold($zk, $path, name => curator_name(),
        seconds => 86400);
    start_clients($n, $n_idle, $tag);
    sleep 1;
    my $rss0 = rss_kb();

    if ($n_idle) {
        tell_clients('idle');
        my $f = wait_reports('idle-ok', $o{limit});
        warn "WARNING: n=$n: $f idle connections failed\n" if $f;
        wait_for(sub { reading() >= $n_idle - $f }, 60, 0.2)
            or warn "WARNING: n=$n: nginx does not read $n_idle requests "
                . "(stub_status Reading: ${\ reading()})\n";
        sleep 1;
    }
    my $rss1 = rss_kb();
    $row{idle_conn_bytes} = $n_idle ? ($rss1 - $rss0) * 1024 / $n_idle
        : undef;
    progress('n=%d: %d idle connections: %+d kB RSS', $n, $n_idle,
        $rss1 - $rss0) if $n_idle;

    # queue the gated requests
    my $cpu_q = workers_cpu();
    my $t_q = time;
    my $done = 0;
    my (@times, %status);
    my $on_done = sub {
        my ($c, $line) = @_;
        return unless $line =~ /^D (\S+) (\d+)$/;
        push @times, $1;
        $status{$2}++;
        $done++;
    };
    tell_clients('wait');
    my $f = 0;
    my $sent = 0;
    my $on_q = sub {
        my ($c, $line) = @_;
        if ($line =~ /^wait-ok (\d+)$/) { $sent++; $f += $1 }
        else { $on_done->($c, $line) }
    };
    my ($children, $waiting) = (0, 0);
    my $t_report = 0;
    my $queued = wait_for(sub {
        read_clients(0, $on_q);
        return 0 if $sent < @clients && time - $t_q < $o{limit};
        $children = () = zk_children($zk, $path);
        $waiting = waiting($path);
        if (time - $t_report >= 5) {
            $t_report = time;
            progress('n=%d: %d/%d queued (%d waiting), %.0f s', $n,
                $children - 1, $n, $waiting, time - $t_q);
        }
        return $children >= $n + 1 - $f && $waiting >= $n - $f;
    }, $o{limit}, 0.5);
    $row{queue_s} = time - $t_q;
    my $cpu_q1 = workers_cpu();
    $row{enqueue_cpu_us} = ($cpu_q1 - $cpu_q) * 1e6 / $n;
    $row{queued} = $children - 1;
    if (!$queued) {
        warn "WARNING: n=$n: only $row{queued} of $n requests queued in "
            . "$o{limit} s ($waiting waiting)\n";
    }
    warn "WARNING: n=$n: $f gated requests failed before the drain\n" if $f;
    progress('n=%d: %d queued in %.1f s', $n, $row{queued}, $row{queue_s});
    sleep 1;
    my $rss2 = rss_kb();
    $row{mem_per_waiter_bytes} = ($rss2 - $rss1) * 1024 / $n;
    $row{lock_bytes} = defined $row{idle_conn_bytes}
        ? $row{mem_per_waiter_bytes} - $row{idle_conn_bytes} : undef;
    progress('n=%d: %d waiters: %+d kB RSS', $n, $n, $rss2 - $rss1);

    if ($n_idle) {
        tell_clients('close-idle');
        # responses are not expected yet, but would be counted
        my $got = 0;
        my $deadline = time + 30;
        while ($got < @clients && time < $deadline) {
            read_clients(1, sub {
                $_[1] eq 'closed' ? $got++ : $on_done->(@_) });
        }
        wait_for(sub { reading() == 0 }, 30, 0.2);
        sleep 1;
    }

    # drain
    my @cpids = map { $_->{pid} } @clients;
    my ($cpu_w0, $cpu_z0, $cpu_c0) = (workers_cpu(), zk_cpu(),
        cpu_seconds(@cpids));
    my $t0 = time;
    $holder->release;
    progress('n=%d: head released (%.0f ms to close its session)', $n,
        (time - $t0) * 1000);
    my $deadline = $t0 + $o{limit};
    $t_report = time;
    while ($done < $n && time < $deadline) {
        read_clients(0.5, $on_done);
        if (time - $t_report >= 5) {
            $t_report = time;
            progress('n=%d: %d/%d answered, %.0f s', $n, $done, $n,
                time - $t0);
        }
    }
    my ($cpu_w1, $cpu_z1, $cpu_c1) = (workers_cpu(), zk_cpu(),
        cpu_seconds(@cpids));
    my $t_end = time;
    stop_clients();

    @times = sort { $a <=> $b } @times;
    $row{done} = scalar @times;
    $row{partial} = $row{done} < $n ? 1 : 0;
    $row{errors} = $row{done} - ($status{200} // 0);
    $row{statuses} = \%status;
    $row{drain_s} = (@times ? $times[-1] : $t_end) - $t0;
    if (@times) {
        my $k = @times < 100 ? scalar @times : 100;
        $row{first_wake_ms} = ($times[0] - $t0) * 1000;
        $row{first100_rate} = rate(@times[0 .. $k - 1]);
        $row{last100_rate} = rate(@times[-$k .. -1]);
        $row{drain_rate} = rate(@times);
        $row{worker_cpu_us} = ($cpu_w1 - $cpu_w0) * 1e6 / @times;
        $row{zk_cpu_us} = ($cpu_z1 - $cpu_z0) * 1e6 / @times;
        # this script's own clients, on the same CPUs
        $row{client_cpu_us} = ($cpu_c1 - $cpu_c0) * 1e6 / @times;
        # handoffs/s over each tenth of the responses, queue longest first
        $row{rate_by_tenth} = [ map {
            my ($a, $b) = (int($_ * @times / 10), int(($_ + 1) * @times / 10));
            $b - $a >= 2 ? rate(@times[$a .. $b - 1]) : undef
        } 0 .. 9 ];
    }
    if ($row{partial}) {
        warn sprintf "WARNING: n=%d: only %d of %d answered in %d s "
            . "(partial drain)\n", $n, $row{done}, $n, $o{limit};
    }
    warn "WARNING: n=$n: $row{errors} requests without a 200 ("
        . join(', ', map { "$_: $status{$_}" } sort keys %status) . ")\n"
        if $row{errors};

    # the requests closed by the clients leave the queue too
    my @left;
    wait_for(sub { @left = zk_children($zk, $path); !@left }, 60, 1);
    $row{left} = scalar @left;
    warn "WARNING: n=$n: $row{left} nodes left under $path\n" if @left;
    fleet_stop();
    $row{total_s} = time - $t_n;
    progress('n=%d: %d answered in %.1f s, %.1f s in all', $n, $row{done},
        $row{drain_s}, $row{total_s});
    return \%row;
}

# handoffs per second between the first and the last of these responses
sub rate {
    my (@t) = @_;
    return undef if @t < 2 || $t[-1] <= $t[0];
    return (@t - 1) / ($t[-1] - $t[0]);
}

# a first, unreported round: ZooKeeper's JIT, the workers' first
# allocations
progress('ZooKeeper up; a fresh fleet of 2 nginx x 2 workers '
    . '(worker_connections %d) for each size', $connections);
progress('warm-up: 200 waiters');
measure(200, 'warmup');

for my $n (@sizes) {
    push @rows, measure($n);
}

# ------------------------------------------------------------ report


sub fmt {
    my ($fmt, $v) = @_;
    return defined $v ? sprintf($fmt, $v) : '-';
}

my @head = ('waiters', 'mem/waiter', '(idle conn)', 'lock', 'queue s',
    'first wake ms', 'first-100 handoffs/s', 'last-100 handoffs/s',
    'drain handoffs/s', 'worker CPU µs/handoff', 'ZK CPU µs/handoff',
    'enqueue CPU µs', 'errors', 'left');
my @table = map {
    my $r = $_;
    [ $r->{waiters} . ($r->{partial} ? " ($r->{done} done)" : ''),
      fmt('%.0f B', $r->{mem_per_waiter_bytes}),
      fmt('%.0f B', $r->{idle_conn_bytes}),
      fmt('%.0f B', $r->{lock_bytes}),
      fmt('%.1f', $r->{queue_s}),
      fmt('%.1f', $r->{first_wake_ms}),
      fmt('%.0f', $r->{first100_rate}),
      fmt('%.0f', $r->{last100_rate}),
      fmt('%.0f', $r->{drain_rate}),
      fmt('%.0f', $r->{worker_cpu_us}),
      fmt('%.0f', $r->{zk_cpu_us}),
      fmt('%.0f', $r->{enqueue_cpu_us}),
      $r->{errors}, $r->{left} ]
} @rows;

# widths in characters (µs is one)
my @w = map { length } @head;
for my $t (@table) {
    for (0 .. $#$t) { $w[$_] = length $t->[$_] if length $t->[$_] > $w[$_] }
}
binmode STDOUT, ':utf8';
print "\n";
for my $t (\@head, @table) {
    print join('  ', map { sprintf "%$w[$_]s", $t->[$_] } 0 .. $#$t), "\n";
}
printf "\n2 nginx x 2 workers, zk_mutex over one ZooKeeper; RSS: sum of the "
    . "workers' VmRSS; CPU: utime+stime (%d Hz ticks); %.0f s in all\n",
    $tck, time - $t_start;
print "handoffs/s by tenth of the drain (queue longest first):\n";
for my $r (grep { $_->{rate_by_tenth} } @rows) {
    printf "  %6d: %s\n", $r->{waiters},
        join(' ', map { fmt('%.0f', $_) } @{ $r->{rate_by_tenth} });
}
if (@bad) {
    my %seen;
    # one example of each message (without date, pid and connection)
    my @u = grep {
        (my $k = $_) =~ s/^\S+ \S+ \[\w+\] \d+#\d+: (?:\*\d+ )?//;
        $k =~ s/client: .*//;
        !$seen{$k}++;
    } @bad;
    printf "error.log: %d [error]/[crit]/[alert] lines, e.g.:\n", scalar @bad;
    print "  $_\n" for @u[0 .. ($#u > 9 ? 9 : $#u)];
} else {
    print "error.log: no [error], [crit] or [alert] line\n";
}

if ($o{json}) {
    open my $fh, '>', $o{json} or die "$o{json}: $!";
    print $fh JSON::PP->new->utf8->canonical->pretty->encode({
        rows => \@rows, limit_s => $o{limit},
        error_log_lines => scalar @bad });
    close $fh or die "$o{json}: $!";
}
exit 0;    # the harness's END block stops every process
