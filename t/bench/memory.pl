#!/usr/bin/perl
# Memory benchmark, run by hand (never by prove): do the workers' RSS stay
# flat over many gated requests, whatever the outcome of the requests?
#
#   perl t/bench/memory.pl [--requests 100000] [--concurrency 32]
#                          [--warmup 5000] [--threshold-mb 2]
#                          [--abort-delays 0,10,20,30,40]
#
# Starts ZooKeeper, the backend and one nginx (2 workers) with the module,
# through the test harness, then sends a warm-up and the measured run of
# the same mix of requests (HTTP/1.0, one connection each, non-blocking
# sockets in this process):
#
#   80%  pass:    zk_semaphore leases=16 (no foreign holder), proxied to the
#                 backend: they get the lease at once or after a short wait
#   10%  timeout: zk_semaphore leases=1 held by a foreign client (zk_hold),
#                 timeout=50ms: 503 after 50 ms
#   10%  abort:   the same held semaphore, timeout=60s: the client closes
#                 its connection 0-40 ms after sending the request (in
#                 turn, --abort-delays): before or after its node was
#                 created; with 0 ms nginx often reads the request and the
#                 end of the stream at once
#
# The workers' VmRSS and RssAnon (/proc/<pid>/status) are read after the
# warm-up, half-way and after the run. Prints the requests by outcome and
# the RSS per worker; exits 1 when a worker's VmRSS grew over the run by
# more than --threshold-mb, when a request had an unexpected outcome, when a
# lock node is left behind 10 s after the run, or when a worker logged an
# alert or crashed; 2 on bad options, 255 on setup errors. Nodes still
# left after 10 s are counted again 70 s after the run (beyond the aborted
# requests' 60 s timeout).

use strict;
use warnings;
use FindBin;
use Getopt::Long;
use Errno qw(EINPROGRESS EAGAIN EWOULDBLOCK EINTR);
use Fcntl qw(F_GETFL F_SETFL O_NONBLOCK);
use IO::Poll qw(POLLIN POLLOUT POLLERR POLLHUP);
use Socket qw(AF_INET SOCK_STREAM SOL_SOCKET SO_ERROR inet_aton
    pack_sockaddr_in);
use Time::HiRes qw(time sleep);
use lib "$FindBin::Bin/../lib";
use ZkLock::Test;

chdir "$FindBin::Bin/../.." or die "chdir: $!";
$| = 1;

my %o = (requests => 100_000, concurrency => 32, warmup => 5000,
    'threshold-mb' => 2, 'abort-delays' => '0,10,20,30,40');
GetOptions(\%o, 'requests=i', 'concurrency=i', 'warmup=i',
    'threshold-mb=f', 'abort-delays=s') or exit 2;
my @abort_ms = split /,/, $o{'abort-delays'};
die "--abort-delays: a comma-separated list of milliseconds\n"
    if !@abort_ms || grep { !/^\d+$/ } @abort_ms;

{
    # a missing prerequisite must fail loudly here, not "skip" with exit 0
    local $ENV{CI} = 'true';
    require_prereqs(qw(nginx zookeeper kazoo module));
}

my $zk = zk_start();
my $be = backend_start();

my $conf = <<'EOF';
    zk_hosts %%ZK%%;
    zk_session_timeout 10s;

    server {
        listen 127.0.0.1:%%PORT%%;
        access_log off;

        location = /pass {
            zk_semaphore /b/sem leases=16 timeout=30s;
            proxy_pass http://%%BACKEND%%;
        }
        location = /timeout {
            zk_semaphore /b/held leases=1 timeout=50ms;
            zk_lock_log_level info;
            proxy_pass http://%%BACKEND%%;
        }
        location = /abort {
            zk_semaphore /b/held leases=1 timeout=60s;
            proxy_pass http://%%BACKEND%%;
        }
    }
EOF

my $ng = nginx_start($conf, zk => $zk, backend => $be, workers => 2,
    log_level => 'notice');
my @workers = $ng->worker_pids;
die "expected 2 workers, got @workers\n" unless @workers == 2;

# the foreign holder of the only lease of /b/held (Curator's node name)
my $name = curator_name();
my $holder = zk_hold($zk, '/b/held', name => $name,
    seconds => 36000);

# the sessions connect in the background (their "connected" line is
# logged at info, below this error_log's level): wait for gated answers
wait_for(sub {
    my $r = http_parallel([ map { [ $ng->port, '/pass?key=pass' ] } 1 .. 8 ],
        timeout => 5);
    !grep { $_->{status} != 200 } @$r }, 20, 0.2)
    or die "gated requests do not pass:\n" . $ng->error_log;

# ------------------------------------------------------------ load client

sub kind_of {
    my ($i) = @_;
    my $m = $i % 20;
    return $m < 2 ? 'timeout' : $m < 4 ? 'abort' : 'pass';
}

# Runs requests $first .. $first + $n - 1 of the mix, $c at a time.
# Returns ({ outcome => count }, seconds).
sub run_mix {
    my ($first, $n, $c, $label) = @_;
    local $SIG{PIPE} = 'IGNORE';
    my $addr = pack_sockaddr_in($ng->port, inet_aton('127.0.0.1'));
    my %out;
    my %live;    # fileno => connection
    my ($next, $done) = (0, 0);
    my ($t0, $t_report) = (time, time);

    my $finish = sub {
        my ($conn, $outcome) = @_;
        close $conn->{sock};
        delete $live{ $conn->{fd} };
        $out{$outcome}++;
        $done++;
    };

    while ($done < $n) {
        while ($next < $n && keys %live < $c) {
            my $i = $first + $next++;
            my $kind = kind_of($i);
            socket(my $s, AF_INET, SOCK_STREAM, 0) or die "socket: $!";
            fcntl($s, F_SETFL, fcntl($s, F_GETFL, 0) | O_NONBLOCK);
            if (!connect($s, $addr) && $! != EINPROGRESS) {
                $out{"error: connect: $!"}++;
                $done++;
                next;
            }
            $live{ fileno $s } = { sock => $s, fd => fileno $s,
                kind => $kind, phase => 'send', rbuf => '',
                wbuf => "GET /$kind?key=$kind HTTP/1.0\r\n"
                    . "Host: 127.0.0.1\r\n\r\n",
                abort_ms => $abort_ms[ int($i / 20) % @abort_ms ],
                deadline => time + 70 };
        }

        my $now = time;
        my $wake = $now + 1;
        my $poll = IO::Poll->new;
        for my $conn (values %live) {
            if ($now >= $conn->{deadline}) {
                $finish->($conn, "error: no answer in 70 s ($conn->{kind})");
                next;
            }
            if ($conn->{phase} eq 'abort') {
                if ($now >= $conn->{abort_at}) {
                    $finish->($conn, 'aborted');
                    next;
                }
                $wake = $conn->{abort_at} if $conn->{abort_at} < $wake;
            }
            $poll->mask($conn->{sock} =>
                $conn->{phase} eq 'send' ? POLLOUT : POLLIN);
        }
        my $wait = $wake - time;
        $poll->poll($wait > 0 ? $wait : 0);

        for my $conn (values %live) {
            my $ev = $poll->events($conn->{sock}) or next;
            if ($conn->{phase} eq 'send') {
                my $err = unpack 'i',
                    getsockopt($conn->{sock}, SOL_SOCKET, SO_ERROR);
                if ($err) {
                    $finish->($conn, 'error: connect: ' . ($! = $err));
                    next;
                }
                my $w = syswrite($conn->{sock}, $conn->{wbuf});
                if (!defined $w) {
                    next if $! == EAGAIN || $! == EWOULDBLOCK || $! == EINTR;
                    $finish->($conn, "error: write: $!");
                    next;
                }
                substr($conn->{wbuf}, 0, $w, '');
                next if length $conn->{wbuf};
                if ($conn->{kind} eq 'abort') {
                    $conn->{phase} = 'abort';
                    $conn->{abort_at} = time + $conn->{abort_ms} / 1000;
                } else {
                    $conn->{phase} = 'read';
                }
                next;
            }
            my $r = sysread($conn->{sock}, $conn->{rbuf}, 65536,
                length $conn->{rbuf});
            if (!defined $r) {
                next if $! == EAGAIN || $! == EWOULDBLOCK || $! == EINTR;
                $finish->($conn, "error: read: $!");
                next;
            }
            next if $r > 0;
            # EOF: the whole response (Connection: close)
            my ($status) = $conn->{rbuf} =~ m{^HTTP/\d\.\d (\d{3})};
            my $what = !defined $status ? 'error: empty or bad response'
                : $conn->{phase} eq 'abort' ? "answered before the abort"
                : $status;
            $finish->($conn, "$conn->{kind} $what");
        }

        if (time - $t_report >= 10) {
            $t_report = time;
            printf STDERR "  %s: %d/%d requests, %.0f/s\n", $label, $done,
                $n, $done / ($t_report - $t0);
        }
    }
    return (\%out, time - $t0);
}

sub rss {
    my ($pid) = @_;
    open my $fh, '<', "/proc/$pid/status" or return {};
    my %m;
    while (my $line = <$fh>) {
        $m{$1} = $2 if $line =~ /^(VmRSS|RssAnon|VmHWM):\s+(\d+) kB/;
    }
    return \%m;
}

# ------------------------------------------------------------------ run

printf STDERR "warm-up: %d requests\n", $o{warmup};
run_mix(0, $o{warmup}, $o{concurrency}, 'warm-up');
sleep 1;
my %before = map { $_ => rss($_) } @workers;

printf STDERR "measured run: %d requests, %d at a time\n", $o{requests},
    $o{concurrency};
my $half = int($o{requests} / 2);
my ($out, $secs) = run_mix(0, $half, $o{concurrency}, 'run, 1st half');
my %mid = map { $_ => rss($_) } @workers;
my ($out2, $secs2) = run_mix($half, $o{requests} - $half, $o{concurrency},
    'run, 2nd half');
$out->{$_} += $out2->{$_} for keys %$out2;
$secs += $secs2;
sleep 1;
my %after = map { $_ => rss($_) } @workers;

my @now = $ng->worker_pids;
my $same_workers = "@now" eq "@workers";
# the last aborted requests' nodes may still be on their way out
my (@sem_left, @held_left);
wait_for(sub {
    @sem_left = zk_children($zk, '/b/sem');
    @held_left = grep { !/\Q$name\E/ } zk_children($zk, '/b/held');
    !@sem_left && !@held_left }, 10, 0.5);
my $left_10s = @sem_left + @held_left;
if ($left_10s) {
    printf STDERR "%d lock nodes left 10 s after the run; waiting 60 s "
        . "more\n", $left_10s;
    wait_for(sub {
        @sem_left = zk_children($zk, '/b/sem');
        @held_left = grep { !/\Q$name\E/ } zk_children($zk, '/b/held');
        !@sem_left && !@held_left }, 60, 1);
}
my @bad_log = grep { /\[(?:alert|crit|emerg)\]/ || /exited on signal/ }
    split /\n/, $ng->error_log;

# ---------------------------------------------------------------- report

my %expected = ('pass 200' => 1, 'timeout 503' => 1, aborted => 1);
my @unexpected = grep { !$expected{$_} } sort keys %$out;

print "\nrequests by outcome (measured run, ${\ sprintf '%.1f', $secs} s, "
    . sprintf('%.0f', $o{requests} / $secs) . " req/s):\n";
printf "  %-40s %8d\n", $_, $out->{$_} for sort keys %$out;
printf "  %-40s %8d\n", 'total', $o{requests};

my $k = $o{requests} / 1000;
my $worst = 0;
print "\nworker RSS (kB)       VmRSS before     mid   after  growth"
    . "  per 1000 req  2nd half   RssAnon before   after\n";
for my $pid (@workers) {
    my ($b, $m, $a) = map { $_->{$pid} } \%before, \%mid, \%after;
    my $g = ($a->{VmRSS} // 0) - ($b->{VmRSS} // 0);
    $worst = $g if $g > $worst;
    printf "  worker %-10d %16d %7d %7d %7d %13.2f %9d   %14d %7d\n", $pid,
        $b->{VmRSS} // 0, $m->{VmRSS} // 0, $a->{VmRSS} // 0, $g, $g / $k,
        ($a->{VmRSS} // 0) - ($m->{VmRSS} // 0),
        $b->{RssAnon} // 0, $a->{RssAnon} // 0;
}
printf "\nthreshold: %.1f MB VmRSS growth per worker over the run "
    . "(%.1f kB per 1000 requests)\n", $o{'threshold-mb'},
    $o{'threshold-mb'} * 1024 / $k;
printf "lock nodes left besides the foreign holder: %d 10 s after the run, "
    . "%d 70 s after\n", $left_10s, scalar(@sem_left) + scalar(@held_left)
    if $left_10s;
print "lock nodes left besides the foreign holder: none\n" unless $left_10s;

my @fail;
push @fail, sprintf('VmRSS grew by %d kB (> %.1f MB)', $worst,
    $o{'threshold-mb'}) if $worst > $o{'threshold-mb'} * 1024;
push @fail, 'unexpected outcomes: ' . join(', ', @unexpected) if @unexpected;
push @fail, 'workers changed (crash?): ' . "@workers -> @now"
    unless $same_workers;
push @fail, "$left_10s lock nodes left 10 s after the run"
    . (@sem_left || @held_left ? ', still there 70 s after' : '')
    if $left_10s;
push @fail, "error.log:\n" . join("\n", @bad_log[0 .. ($#bad_log > 9 ? 9
    : $#bad_log)]) if @bad_log;

$holder->release;
print @fail ? "\nFAIL:\n" . join('', map { "  $_\n" } @fail) : "\nPASS\n";
exit(@fail ? 1 : 0);    # the harness's END block stops every process
