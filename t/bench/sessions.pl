#!/usr/bin/perl
# Benchmark, run by hand (never by prove): what zk_sessions' default costs
# (issue 38, item 1).  One nginx of 8 workers with no zk_sessions has 4
# brokers (workers 0-3, a session each) and 4 siblings (workers 4-7, whose
# locks a broker takes over a unix socket); "zk_sessions 8" gives every
# worker a session of its own, as the default did before.  Both run side
# by side on one ZooKeeper, and are measured in turn, A B A B ...:
#
#   A  the default (no zk_sessions): 4 brokers + 4 siblings
#   B  zk_sessions 8: a session per worker
#
#   perl t/bench/sessions.pl [--seconds 10] [--runs 3] [--requests 500]
#                            [--workers 8] [--lost abort|finish]
#                            [--only seq,wrk,kill]
#
#   seq   one request at a time, each on a fresh connection (HTTP/1.0),
#         --requests of them: a location without a lock, then a zk_mutex
#         nobody else wants; the time from connect to the response's end
#         as this client sees it, p50 and p99, and apart for the requests
#         that landed on workers 0-3 (brokers in A) and 4-7 (siblings in
#         A), told by the worker's pid in a response header.  The
#         listening socket is "reuseport": the kernel spreads connections
#         over the workers, about half on 4-7.
#   wrk   wrk for --seconds, 8 connections (one thread): a zk_semaphore
#         leases=1000 (nobody waits: a literal path cannot be a path per
#         connection) and a contended zk_mutex, each on keepalive
#         connections (where the kernel puts 8 connections varies from run
#         to run: the share of requests on workers 4-7 is shown) and on
#         a fresh connection per request ("Connection: close", spread
#         evenly).  Rate, wrk's p50 and p99, CPU of all workers and of
#         ZooKeeper per request.
#   kill  the failure domain: a fresh nginx per variant and run (4 s
#         session timeout, zk_semaphore leases=16 timeout=20s,
#         zk_lock_lost --lost), 64 requests on fresh connections at once
#         to a backend that answers in 1 s: 16 hold, 48 wait.  Worker 0 (a
#         broker in A) is killed with SIGKILL 0.3 s after the 16 hold.
#         Each request is then counted by what became of it: gone with
#         the killed worker (no answer, no access log line), cut off (held,
#         lost: 499 under abort), asked again ("asking again" in the error
#         log) and served, served, timed out (503).  And the time until
#         the last request ended, and the most at the backend at once
#         (the cap, 16).
#
# The medians of --runs runs are compared, A/B.  ZooKeeper runs with
# forceSync=no, as in the tests.  Needs wrk.

use strict;
use warnings;
use FindBin;
use Getopt::Long;
use POSIX ();
use Socket qw(PF_INET SOCK_STREAM inet_aton pack_sockaddr_in);
use Time::HiRes qw(time sleep);
use lib "$FindBin::Bin/../lib";
use ZkLock::Test;

chdir "$FindBin::Bin/../.." or die "chdir: $!";

my $seconds = 10;
my $runs = 3;
my $requests = 500;
my $workers = 8;
my $lost = 'abort';
my $only = 'seq,wrk,kill';
GetOptions('seconds=i' => \$seconds, 'runs=i' => \$runs,
    'requests=i' => \$requests, 'workers=i' => \$workers,
    'lost=s' => \$lost, 'only=s' => \$only)
    or exit 2;
my %run = map { $_ => 1 } split /,/, $only;
$lost =~ /^(abort|finish)$/ or die "--lost: abort or finish\n";
$workers > 4 or die "--workers: more than 4 (else no sibling)\n";

system('which wrk >/dev/null 2>&1') == 0
    or die "wrk is missing: apt-get install wrk\n";

module_path();

my $zk = zk_start();
my $be = backend_start();

my %variant = (
    A => { name => 'default (4 brokers)', sessions => '' },
    B => { name => "zk_sessions $workers", sessions =>
        "zk_sessions $workers;" },
);

# ------------------------------------------------------------- the nginx

sub conf {
    my ($v) = @_;
    return <<"EOF";
    zk_hosts %%ZK%%;
    $variant{$v}{sessions}
    log_format who "\$pid \$status";
    server {
        listen 127.0.0.1:%%PORT%% reuseport;
        access_log %%PREFIX%%/logs/who.log who buffer=64k flush=1s;
        add_header X-Pid \$pid always;
        root %%PREFIX%%;
        location = /plain { try_files /index.html =404; }
        location = /mutex {
            zk_mutex /bench/sessions/$v/mutex timeout=30s;
            try_files /index.html =404;
        }
        location = /sem {
            zk_semaphore /bench/sessions/$v/sem leases=1000 timeout=30s;
            try_files /index.html =404;
        }
        location = /status { access_log off; zk_lock_status_page; }
    }
EOF
}

# worker number and role of each worker pid, from the status page
sub workers_of {
    my ($ng) = @_;
    my $j = $ZkLock::Test::JSON->decode($ng->get('/status')->{body});
    my %w;
    for (@{ $j->{workers} }) {
        $w{ $_->{pid} } = { n => $_->{worker},
            sibling => $_->{server} eq 'broker' ? 1 : 0,
            session => $_->{session} };
    }
    return \%w;
}

sub start_variant {
    my ($v, $body, %o) = @_;
    my $ng = nginx_start($body, zk => $zk, backend => $be,
        workers => $workers, log_level => 'warn', %o);
    open my $fh, '>', $ng->prefix . '/index.html' or die $!;
    print $fh "ok\n";
    close $fh;
    # every worker's session (A: 4, the siblings' "broker") connected
    my $want = $v eq 'A' ? 4 : $workers;
    wait_for(sub {
        my $w = eval { workers_of($ng) } or return 0;
        my @s = grep { $_->{session} ne '0x0' } values %$w;
        keys %$w == $workers && @s == $want;
    }, 15) or die "$v: sessions not connected:\n" . $ng->error_log;
    return $ng;
}

# ------------------------------------------------------------ measuring

sub pct {
    my ($p, @sorted) = @_;
    return undef unless @sorted;
    return $sorted[int($#sorted * $p / 100 + 0.5)];
}

sub median {
    my @s = sort { $a <=> $b } grep { defined } @_;
    return undef unless @s;
    return @s % 2 ? $s[$#s / 2] : ($s[@s / 2 - 1] + $s[@s / 2]) / 2;
}

sub ms {
    my ($v) = @_;
    return 0 unless defined $v;
    return $v =~ /^([\d.]+)us$/ ? $1 / 1000
         : $v =~ /^([\d.]+)ms$/ ? $1
         : $v =~ /^([\d.]+)s$/ ? $1 * 1000 : 0;
}

# one request on a fresh connection: seconds, status, the worker's pid
sub fresh_get {
    my ($port, $uri) = @_;
    my $t0 = time;
    socket(my $s, PF_INET, SOCK_STREAM, 0) or die "socket: $!";
    connect($s, pack_sockaddr_in($port, inet_aton('127.0.0.1')))
        or die "connect: $!";
    my $req = "GET $uri HTTP/1.0\r\nHost: bench\r\n\r\n";
    syswrite($s, $req) == length $req or die "write: $!";
    my $buf = '';
    1 while sysread($s, $buf, 4096, length $buf);
    my $t = time - $t0;
    close $s;
    my ($status) = $buf =~ m{^HTTP/1\.\d (\d+)};
    my ($pid) = $buf =~ /^X-Pid: (\d+)/mi;
    return ($t, $status // 0, $pid // 0);
}

# --requests one after the other: p50, p99 (ms) over all, on workers
# 0-3, on workers 4-7; errors
sub sequential {
    my ($ng, $w, $uri) = @_;
    my (@all, @lo, @hi);
    my $errors = 0;
    for (1 .. $requests) {
        my ($t, $status, $pid) = fresh_get($ng->port, $uri);
        $errors++, next if $status != 200;
        push @all, $t * 1000;
        my $n = $w->{$pid} ? $w->{$pid}{n} : -1;
        push @{ $n >= 4 ? \@hi : \@lo }, $t * 1000;
    }
    my %r = (errors => $errors, n_hi => scalar @hi);
    for ([all => \@all], [lo => \@lo], [hi => \@hi]) {
        my ($k, $l) = @$_;
        my @s = sort { $a <=> $b } @$l;
        $r{"${k}_p50"} = pct(50, @s);
        $r{"${k}_p99"} = pct(99, @s);
    }
    return \%r;
}

sub zk_counters {
    my ($received) = (zk_4lw($zk->port, 'srvr') // '') =~ /Received: (\d+)/;
    return ($received // 0, cpu_seconds($zk->pid));
}

# the access log since the last call: requests on workers 0-3 and 4-7,
# and those not 200 (but 499: wrk closes its connections at its end with
# a request in flight on each)
sub who_log {
    my ($ng, $w) = @_;
    my $f = $ng->prefix . '/logs/who.log';
    my ($lo, $hi, $bad) = (0, 0, 0);
    for (split /\n/, slurp($f)) {
        my ($pid, $status) = split ' ';
        $bad++ if $status ne '200' && $status ne '499';
        ($w->{$pid} && $w->{$pid}{n} >= 4) ? $hi++ : $lo++;
    }
    truncate $f, 0;
    return ($lo, $hi, $bad);
}

sub wrk {
    my ($ng, $w, $uri, $fresh) = @_;
    sleep 1.2;
    who_log($ng, $w);
    my @pids = $ng->worker_pids;
    my $cpu = cpu_seconds(@pids);
    my ($r0, $c0) = zk_counters();
    my $hdr = $fresh ? "-H 'Connection: close' " : '';
    my $out = `wrk -t1 -c8 -d${seconds}s --latency ${hdr}'http://127.0.0.1:${\ $ng->port}$uri' 2>&1`;
    my ($r1, $c1) = zk_counters();
    my $cpu1 = cpu_seconds(@pids);
    my ($rate) = $out =~ /Requests\/sec:\s+([\d.]+)/ or die "wrk: $out";
    my ($n) = $out =~ /(\d+) requests in/;
    my ($non2xx) = $out =~ /Non-2xx or 3xx responses: (\d+)/;
    my ($sock) = $out =~ /(Socket errors:.*)/;
    sleep 1.2;    # the access log's buffer is flushed every second
    my ($lo, $hi, $bad) = who_log($ng, $w);
    return { rate => $rate, p50 => ms($out =~ /^\s+50%\s+(\S+)/m),
        p99 => ms($out =~ /^\s+99%\s+(\S+)/m),
        cpu => (($cpu1 - $cpu) * 1e6 / ($n || 1)),
        zk_cpu => (($c1 - $c0) * 1e6 / ($n || 1)),
        zk_req => (($r1 - $r0) / ($n || 1)),
        hi => ($lo + $hi ? $hi / ($lo + $hi) : 0),
        errors => ($non2xx // 0) + $bad, sock => $sock };
}

# ------------------------------------------------------ the failure domain

sub fd_conf {
    my ($v, $path) = @_;
    return <<"EOF";
    zk_hosts %%ZK%%;
    $variant{$v}{sessions}
    zk_session_timeout 4s;
    log_format fd "\$arg_id \$pid \$status \$zk_lock_status \$request_time";
    server {
        listen 127.0.0.1:%%PORT%% reuseport;
        access_log off;
        location = /fd {
            zk_semaphore $path leases=16 timeout=20s;
            zk_lock_lost $lost;
            access_log %%PREFIX%%/logs/fd.log fd;
            proxy_pass http://%%BACKEND%%;
        }
        location = /status { zk_lock_status_page; }
    }
EOF
}

sub failure_domain {
    my ($v, $i) = @_;
    my $path = "/bench/sessions/fd-$v-$i";
    my $key = "fd$v$i";
    my $ng = start_variant($v, fd_conf($v, $path));
    my $w = workers_of($ng);
    my ($victim) = grep { $w->{$_}{n} == 0 } keys %$w;
    my $t0 = time;
    my $bg = http_parallel_bg([ map { [ $ng->port,
        "/fd?key=$key&sleep=1000&hangup=1&id=$_" ] } 1 .. 64 ],
        timeout => 40, stagger => 0.002);
    wait_for(sub { ($be->stats($key)->{inflight} // 0) >= 16 }, 10)
        or die "$v: the 16 leases were never all held\n";
    sleep 0.3;
    kill 'KILL', $victim or die "kill $victim: $!";
    my $killed = time;
    $ng->expect_log(qr/worker process $victim exited on signal 9/);
    my $res = http_parallel_collect($bg, 60);
    my $end = 0;
    for (@$res) { $end = $_->{end} if ($_->{end} // 0) > $end }

    my %log;
    for (split /\n/, slurp($ng->prefix . '/logs/fd.log')) {
        my ($id, $pid, $status, $zs, $t) = split ' ';
        $log{$id} = { pid => $pid, status => $status, zs => $zs, t => $t };
    }
    my %again;
    for (split /\n/, $ng->error_log) {
        $again{$1}++ if /asking again.*[?&]id=(\d+)/;
    }
    my $again_lines = () = $ng->error_log =~ /asking again/g;

    # what became of each request, and in which worker it ran: the killed
    # one, a sibling whose broker was the killed one ((n - 0) % 4 == 0 in
    # A), any other
    my %c = map { $_ => 0 } qw(gone cut again_served served timeout other
        in_victim in_dependent in_others);
    for my $id (1 .. 64) {
        my $l = $log{$id};
        my $r = $res->[$id - 1];
        if (!$l) {
            $c{gone}++;
            $c{in_victim}++;
            next;
        }
        my $n = $w->{ $l->{pid} } ? $w->{ $l->{pid} }{n} : 0;  # respawned: 0
        my $dependent = $v eq 'A' && $n >= 4 && $n % 4 == 0;
        $c{ $n == 0 ? 'in_victim' : $dependent ? 'in_dependent'
            : 'in_others' }++;
        if ($l->{status} eq '499' || $l->{zs} eq 'LOST') {
            $c{cut}++;
        } elsif ($l->{status} eq '503') {
            $c{timeout}++;
        } elsif ($l->{status} eq '200' && $r->{status} == 200) {
            my $k = $again{$id} ? 'again_served' : 'served';
            $c{$k}++;
            push @{ $c{"${k}_t"} }, $l->{t};
        } else {
            $c{other}++;
            print STDERR "    request $id: $l->{status} $l->{zs}, client "
                . "$r->{status}\n";
        }
    }
    $c{again_lines} = $again_lines;
    $c{drain} = $end - $t0;
    $c{after_kill} = $end - $killed;
    $c{peak} = $be->stats($key)->{max};
    $ng->stop;
    wait_for(sub { !zk_ephemerals($zk, $path) }, 10);
    return \%c;
}

# ------------------------------------------------------------- the runs

my (%seq, %wrk, %fd);
my @wrk_rows = (
    [ 'sem_keep',    '/sem',   0, 'zk_semaphore leases=1000, 8 keepalive connections' ],
    [ 'sem_fresh',   '/sem',   1, 'zk_semaphore leases=1000, 8 connections, fresh per request' ],
    [ 'mutex_keep',  '/mutex', 0, 'zk_mutex contended, 8 keepalive connections' ],
    [ 'mutex_fresh', '/mutex', 1, 'zk_mutex contended, 8 connections, fresh per request' ],
);

if ($run{seq} || $run{wrk}) {
    my %ng = map { $_ => start_variant($_, conf($_)) } qw(A B);
    my %w = map { $_ => workers_of($ng{$_}) } qw(A B);

    # ZooKeeper's JVM compiles its hot paths during the first seconds
    print STDERR "warming up\n";
    for my $v (qw(A B)) {
        `wrk -t1 -c8 -d3s http://127.0.0.1:${\ $ng{$v}->port}/mutex 2>&1`;
        `wrk -t1 -c8 -d2s http://127.0.0.1:${\ $ng{$v}->port}/sem 2>&1`;
        sequential($ng{$v}, $w{$v}, "/mutex");
    }

    for my $i (1 .. $runs) {
        for my $v (qw(A B)) {
            print STDERR "run $i, $v ($variant{$v}{name})\n";
            if ($run{seq}) {
                for my $what (qw(plain mutex)) {
                    my $r = sequential($ng{$v}, $w{$v}, "/$what");
                    push @{ $seq{$what}{$v} }, $r;
                    printf STDERR "  %-6s sequential, fresh: p50 %.3f p99 "
                        . "%.3f ms (0-3: %.3f/%.3f, 4-7: %.3f/%.3f, %d "
                        . "on 4-7)%s\n", $what, @$r{qw(all_p50 all_p99
                        lo_p50 lo_p99 hi_p50 hi_p99 n_hi)},
                        $r->{errors} ? " $r->{errors} errors" : '';
                }
            }
            if ($run{wrk}) {
                for my $row (@wrk_rows) {
                    my ($k, $uri, $fresh) = @$row;
                    my $r = wrk($ng{$v}, $w{$v}, $uri, $fresh);
                    push @{ $wrk{$k}{$v} }, $r;
                    printf STDERR "  %-12s %7.0f/s p50 %.2f p99 %.2f ms, "
                        . "%3.0f us/req workers, %3.0f us/req ZooKeeper, "
                        . "%2.0f%% on 4-7%s%s\n", $k, @$r{qw(rate p50 p99
                        cpu zk_cpu)}, 100 * $r->{hi},
                        $r->{errors} ? ", $r->{errors} errors" : '',
                        $r->{sock} ? ", $r->{sock}" : '';
                }
            }
        }
    }
    $_->stop for values %ng;
}

if ($run{kill}) {
    for my $i (1 .. $runs) {
        for my $v (qw(A B)) {
            my $c = failure_domain($v, $i);
            push @{ $fd{$v} }, $c;
            printf STDERR "kill %d, %s: gone %d, cut off %d, asked again "
                . "and served %d, served %d, timed out %d, other %d (in "
                . "the killed worker %d, in its siblings %d, elsewhere "
                . "%d); \"asking again\" %d; last answer %.1f s after the "
                . "kill, peak %d\n", $i, $v, @$c{qw(gone cut again_served
                served timeout other in_victim in_dependent in_others
                again_lines after_kill peak)};
        }
    }
}

# ------------------------------------------------------------ the report

sub f { defined $_[0] ? sprintf($_[1] // '%.2f', $_[0]) : '-' }

sub line {
    my ($what, $a, $b, $fmt) = @_;
    my $ratio = defined $a && defined $b && $b ? sprintf('%.2f', $a / $b)
        : '-';
    printf "| %s | %s | %s | %s |\n", $what, f($a, $fmt), f($b, $fmt),
        $ratio;
}

sub runs_of {
    my ($list, $k, $fmt) = @_;
    return join ' / ', map { f($_->{$k}, $fmt) } @$list;
}

print "\n$workers workers; medians of $runs alternating runs (A B A B ...)"
    . "; each run's values in brackets\n\n";
print "| measure | A: default (4 brokers) | B: zk_sessions $workers | A/B |\n";
print "|---|---:|---:|---:|\n";

if (%seq) {
    for my $what (qw(plain mutex)) {
        for my $m ([all => 'all'], [lo => 'workers 0-3'],
                   [hi => 'workers 4-7']) {
            next if $what eq 'plain' && $m->[0] ne 'all';
            for my $p (qw(p50 p99)) {
                my $k = "$m->[0]_$p";
                line("sequential fresh, $what, $m->[1], $p ms ["
                    . runs_of($seq{$what}{A}, $k) . ' | '
                    . runs_of($seq{$what}{B}, $k) . ']',
                    median(map { $_->{$k} } @{ $seq{$what}{A} }),
                    median(map { $_->{$k} } @{ $seq{$what}{B} }));
            }
        }
    }
    # the hop, within each run: p50 on workers 4-7 less p50 on 0-3
    my %d = map { my $v = $_; $v => [ map { { d => $_->{hi_p50}
        - $_->{lo_p50} } } @{ $seq{mutex}{$v} } ] } qw(A B);
    printf "| sequential fresh, mutex, p50 on workers 4-7 less on 0-3, ms "
        . "[%s | %s] | %s | %s | - |\n", runs_of($d{A}, 'd', '%.3f'),
        runs_of($d{B}, 'd', '%.3f'), f(median(map { $_->{d} } @{ $d{A} }),
        '%.3f'), f(median(map { $_->{d} } @{ $d{B} }), '%.3f');
}

if (%wrk) {
    for my $row (@wrk_rows) {
        my ($k, undef, undef, $name) = @$row;
        my ($a, $b) = @{ $wrk{$k} }{qw(A B)};
        line("$name, requests/s [" . runs_of($a, 'rate', '%.0f') . ' | '
            . runs_of($b, 'rate', '%.0f') . ']',
            median(map { $_->{rate} } @$a), median(map { $_->{rate} } @$b),
            '%.0f');
        for my $m ([p50 => 'p50 ms'], [p99 => 'p99 ms'],
                   [cpu => 'worker CPU us/req', '%.0f'],
                   [zk_cpu => 'ZooKeeper CPU us/req', '%.0f'],
                   [zk_req => 'ZooKeeper requests/req'],
                   [hi => 'share on workers 4-7']) {
            line("... $m->[1] [" . runs_of($a, $m->[0], $m->[2]) . ' | '
                . runs_of($b, $m->[0], $m->[2]) . ']',
                median(map { $_->{ $m->[0] } } @$a),
                median(map { $_->{ $m->[0] } } @$b), $m->[2]);
        }
    }
}

if (%fd) {
    print "\nWorker 0 killed (SIGKILL), 64 requests: 16 hold, 48 wait "
        . "(zk_lock_lost $lost); sums over $runs runs each\n\n";
    print "| what became of the requests | A: default (4 brokers) | "
        . "B: zk_sessions $workers |\n|---|---:|---:|\n";
    for my $m ([gone => 'gone with the killed worker (no answer)'],
               [cut => 'cut off (held, lost)'],
               [again_served => 'asked again, then served'],
               [served => 'served'],
               [timeout => 'timed out (503)'],
               [other => 'other'],
               [in_victim => 'ran in the killed worker'],
               [in_dependent => 'ran in a sibling of the killed broker'],
               [in_others => 'ran elsewhere'],
               [again_lines => '"asking again" lines logged']) {
        my ($a, $b) = (0, 0);
        $a += $_->{ $m->[0] } for @{ $fd{A} };
        $b += $_->{ $m->[0] } for @{ $fd{B} };
        printf "| %s | %d | %d |\n", $m->[1], $a, $b;
    }
    for my $k (qw(again_served served)) {
        printf "| %s, request time p50 s | %s | %s |\n",
            $k eq 'served' ? 'served' : 'asked again, then served',
            map { f(median(map { @{ $_->{"${k}_t"} // [] } } @{ $fd{$_} }),
                '%.3f') } qw(A B);
    }
    for my $m ([after_kill => 'last answer after the kill, s (each run)',
                '%.1f'],
               [peak => 'most at the backend at once (each run)', '%d']) {
        printf "| %s | %s | %s |\n", $m->[1], runs_of($fd{A}, $m->[0],
            $m->[2]), runs_of($fd{B}, $m->[0], $m->[2]);
    }
}

my $left = () = zk_ephemerals($zk, '/bench');
print "\nZooKeeper forceSync=no; $seconds s per wrk row, $requests "
    . "sequential requests; nodes left under /bench: $left\n";
