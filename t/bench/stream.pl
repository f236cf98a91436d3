#!/usr/bin/perl
# Benchmark of the stream module, run by hand (never by prove): TCP
# connections per second through a gated stream server (zk_semaphore in
# preaccess, then proxy_pass) against the same stream server ungated, with
# and without keep=, in one run on one local ZooKeeper, beside the raw
# ZooKeeper write rate of the module's own C client (t/bench/zkpairs.c, as
# in t/bench/run.pl).  Compare ratios, not rates.
#
#   perl t/bench/stream.pl [--seconds 5] [--runs 3] [--clients 32]
#                          [--leases 64] [--workers 2] [--keep 1s]
#                          [--threads 1] [--bound 4] [--no-raw]
#
# One nginx (--workers), three stream servers on their own ports, each
# proxying to a "return 200" location of the same nginx's http block (a
# Python backend would be the bottleneck): no lock; zk_semaphore
# leases=--leases; the same with keep=--keep.  Each lock has a path of its
# own.
#
# The load is wrk, -c --clients, -H 'Connection: close': wrk sends one
# HTTP/1.1 request per connection, the upstream closes after its answer,
# the stream session ends and wrk connects again, so every request is a new
# TCP connection and a new session (the stream access log's line count is
# checked against wrk's request count).  On 2 cores a client in Perl or
# Python costs more CPU per connection than nginx does and measures itself
# (32 forked Perl clients: about 2/3 of wrk's rate on the ungated server).
#
# Every round measures the three servers and the raw reference, one after
# the other, each round starting one row further (each server after 1 s of
# warm-up, which also grows keep's pool); rates and latencies are the
# median of --runs rounds, per-connection figures pool every round.  The
# raw reference has the gate's shape: --workers sessions (zkpairs
# processes), the clients spread over them in flight; run.pl has the
# 1-at-a-time figure.  "ZK writes/conn": the zxid delta (srvr: its low 32
# bits count transactions) over the connections wrk completed.
# "CPU/conn": user + system time of the nginx workers, of ZooKeeper.  After
# the keep row the kept leases are let expire, so that no row is charged
# another's deletes.
#
# --bound N (0: off): afterwards, the two gates again with leases=N,
# proxying to t/lib/backend.py (20 ms a connection), 4N clients for 3 s:
# the backend's peak of connections in flight must be N, never more.
# (backend.py answers HTTP/1.1 without "Connection: close" before it
# closes, which wrk counts as a read error: the statuses there are the
# stream access log's.)
#
# Needs wrk, and cc with libzookeeper-mt-dev for the raw row
# (t/lib/install-deps.sh installs them).

use strict;
use warnings;
use FindBin;
use Getopt::Long;
use POSIX ();
use Time::HiRes qw(time sleep);
use lib "$FindBin::Bin/../lib";
use ZkLock::Test;

chdir "$FindBin::Bin/../.." or die "chdir: $!";

my $seconds = 5;
my $runs = 3;
my $clients = 32;
my $leases = 64;
my $workers = 2;
my $keep = '1s';
my $threads = 1;
my $bound = 4;
my $raw = 1;
GetOptions('seconds=i' => \$seconds, 'runs=i' => \$runs,
    'clients=i' => \$clients, 'leases=i' => \$leases,
    'workers=i' => \$workers, 'keep=s' => \$keep, 'threads=i' => \$threads,
    'bound=i' => \$bound, 'raw!' => \$raw)
    or exit 2;

my $keep_s = $keep =~ /^(\d+)ms$/ ? $1 / 1000 : $keep =~ /^(\d+)s?$/ ? $1
    : die "--keep: a time in s or ms\n";

system('which wrk >/dev/null 2>&1') == 0
    or die "wrk is missing: apt-get install wrk\n";

if ($raw) {
    mkdir 't/build';
    system('cc -O2 -Wall -o t/build/zkpairs t/bench/zkpairs.c '
        . '-lzookeeper_st') == 0
        or die "cannot build t/bench/zkpairs.c (--no-raw to go without)\n";
}

module_path();
# the harness's own check of prerequisites, without a test plan to skip
if (my $why = ZkLock::Test::_missing('stream')) {
    die "$why\n";
}

my $zk = zk_start();
my $be = $bound ? backend_start() : undef;

my %port = map { $_ => free_port() } qw(nokeep keep bound_nokeep bound_keep);
my %path = (nokeep => '/bench/stream-nokeep', keep => '/bench/stream-keep',
    bound_nokeep => '/bench/stream-bound-nokeep',
    bound_keep => '/bench/stream-bound-keep');

my $bound_conf = !$bound ? '' : <<"EOF";
    server {
        listen 127.0.0.1:$port{bound_nokeep};
        zk_semaphore $path{bound_nokeep} leases=$bound timeout=30s;
        access_log %%PREFIX%%/logs/bound_nokeep.log s;
        proxy_pass %%BACKEND%%;
    }
    server {
        listen 127.0.0.1:$port{bound_keep};
        zk_semaphore $path{bound_keep} leases=$bound keep=$keep timeout=30s;
        access_log %%PREFIX%%/logs/bound_keep.log s;
        proxy_pass %%BACKEND%%;
    }
EOF

# the same access log everywhere, the ungated server's included: every row
# pays for it alike
my $stream = <<"EOF";
    zk_hosts %%ZK%%;
    log_format s '\$status \$zk_lock_status';
    server {
        listen 127.0.0.1:%%STREAM_PORT%%;
        access_log %%PREFIX%%/logs/plain.log s buffer=64k flush=1s;
        proxy_pass 127.0.0.1:%%PORT%%;
    }
    server {
        listen 127.0.0.1:$port{nokeep};
        zk_semaphore $path{nokeep} leases=$leases timeout=30s;
        access_log %%PREFIX%%/logs/nokeep.log s buffer=64k flush=1s;
        proxy_pass 127.0.0.1:%%PORT%%;
    }
    server {
        listen 127.0.0.1:$port{keep};
        zk_semaphore $path{keep} leases=$leases keep=$keep timeout=30s;
        access_log %%PREFIX%%/logs/keep.log s buffer=64k flush=1s;
        proxy_pass 127.0.0.1:%%PORT%%;
    }
$bound_conf
EOF

# the upstream of every stream server
my $http = <<'EOF';
    server {
        listen 127.0.0.1:%%PORT%%;
        access_log off;
        location / { return 200 "ok\n"; }
    }
EOF

my $ng = nginx_start($http, zk => $zk, ($be ? (backend => $be) : ()),
    workers => $workers, log_level => 'warn', stream => $stream,
    connections => 4096);
$port{plain} = $ng->stream_port;

# the sessions connect after nginx_start returns: wait for a lease
for my $k (qw(nokeep keep)) {
    wait_for(sub { http_get($port{$k}, '/', timeout => 10)->{status} == 200 },
        20, 0.2) or die "no answer through the $k server\n"
        . $ng->error_log;
}

sub zxid {
    my ($z) = (zk_4lw($zk->port, 'srvr') // '') =~ /Zxid: 0x([0-9a-f]+)/
        or die "no zxid from srvr\n";
    return hex($z) & 0xffffffff;
}

sub ms {
    my ($v, $u) = @_;
    return undef unless defined $v;
    return $u eq 'us' ? $v / 1000 : $u eq 's' ? $v * 1000 : $v;
}

# per server, warm-ups included: requests wrk completed, wrk runs, and
# connections open at the ends of the runs (at most the sum of -c)
my (%wrk_total, %wrk_runs, %wrk_conns);

sub wrk {
    my ($k, $secs, $conns, $uri) = @_;
    my $r = run_cmd(['wrk', "-t$threads", "-c$conns", "-d${secs}s",
        '--timeout', '30s', '--latency', '-H', 'Connection: close',
        "http://127.0.0.1:$port{$k}" . ($uri // '/')],
        timeout => $secs + 60);
    my $o = $r->{out};
    my ($n) = $o =~ /(\d+) requests in/ or die "wrk: $o$r->{err}";
    my ($rate) = $o =~ /Requests\/sec:\s+([\d.]+)/;
    my $errors = 0;
    $errors += $1 if $o =~ /Non-2xx or 3xx responses: (\d+)/;
    if ($o =~ /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/) {
        $errors += $1 + $2 + $3 + $4;
    }
    $wrk_total{$k} += $n;
    $wrk_runs{$k}++;
    $wrk_conns{$k} += $conns;
    return { n => $n, rate => $rate, errors => $errors,
        p50 => ms($o =~ /^\s+50%\s+([\d.]+)(us|ms|s)/m),
        p99 => ms($o =~ /^\s+99%\s+([\d.]+)(us|ms|s)/m) };
}

sub metered {
    my ($k) = @_;
    my @w = $ng->worker_pids;
    my ($z0, $cw0, $cz0) = (zxid(), cpu_seconds(@w), cpu_seconds($zk->pid));
    my $r = wrk($k, $seconds, $clients);
    my ($z1, $cw1, $cz1) = (zxid(), cpu_seconds(@w), cpu_seconds($zk->pid));
    @$r{qw(writes cpu_w cpu_z)} = ($z1 - $z0, $cw1 - $cw0, $cz1 - $cz0);
    return $r;
}

sub median {
    my @s = sort { $a <=> $b } grep { defined } @_;
    return @s ? $s[$#s / 2] : undef;
}

printf "stream: 1 nginx x %d workers, %d clients (wrk -t%d, a new connection "
    . "per request), leases=%d, keep=%s, %d s per row, %d rounds\n",
    $workers, $clients, $threads, $leases, $keep, $seconds, $runs;

# ZooKeeper's JVM compiles its hot paths first: without this the first rows
# would be measured against a slower server
if ($raw) {
    print STDERR "warming ZooKeeper up\n";
    `t/build/zkpairs ${\ $zk->hosts} /bench/warm 5 64`;
}

# the raw reference with the gate's shape: one session per worker, the
# clients spread over them
my $depth = int(($clients + $workers - 1) / $workers);
my $raw_name = "raw ZooKeeper create+delete, $workers session"
    . ($workers > 1 ? 's' : '') . " x $depth in flight";

sub raw_pairs {
    my ($z0, $c0) = (zxid(), cpu_seconds($zk->pid));
    my @fh = map {
        open my $fh, '-|', 't/build/zkpairs', $zk->hosts, "/bench/raw-$_",
            $seconds, $depth or die "zkpairs: $!";
        $fh } 1 .. $workers;
    my $pairs = 0;
    for my $fh (@fh) {
        my $out = do { local $/; <$fh> };
        close $fh;
        my ($rate) = ($out // '') =~ /pairs\/s ([\d.]+)/
            or die "zkpairs: " . ($out // '');
        $pairs += $rate;
    }
    my ($z1, $c1) = (zxid(), cpu_seconds($zk->pid));
    # n: writes, two a pair
    return { rate => 2 * $pairs, n => 2 * $pairs * $seconds,
        writes => $z1 - $z0, cpu_z => $c1 - $c0 };
}

my @rows = (['plain', 'ungated stream proxy'],
    ['nokeep', "zk_semaphore leases=$leases"],
    ['keep', "zk_semaphore leases=$leases keep=$keep"],
    $raw ? ['raw', $raw_name] : ());
my %m;

# each round starts one row further, so that no row is always first or
# always after the same one
for my $round (1 .. $runs) {
    print STDERR "round $round of $runs\n";
    for my $i (0 .. $#rows) {
        my ($k, $name) = @{ $rows[($i + $round - 1) % @rows] };
        my $r;
        if ($k eq 'raw') {
            $r = raw_pairs();
        } else {
            wrk($k, 1, $clients);
            $r = metered($k);
        }
        push @{ $m{$k} }, $r;
        printf STDERR "  %-54s %8.0f/s %7.4f writes/%s\n", $name,
            $r->{rate}, $r->{writes} / ($r->{n} || 1),
            $k eq 'raw' ? 'write' : 'conn';
        # kept leases go back after keep: not in the next row's writes
        next unless $k eq 'keep';
        wait_for(sub { !zk_children($zk, $path{keep}) }, $keep_s + 5, 0.3)
            or warn "kept leases still held ${\ ($keep_s + 5)} s after the "
                . "load\n";
    }
}

my %bound;
if ($bound) {
    for my $k (qw(bound_nokeep bound_keep)) {
        $be->reset;
        my $r = wrk($k, 3, 4 * $bound, "/?key=$k&sleep=20&hangup=1");
        $bound{$k} = { %$r, peak => $be->stats($k)->{max} };
    }
}

sleep 1.5;    # the access logs' buffers are flushed every second

# ------------------------------------------------------------------ report

my $plain = median(map { $_->{rate} } @{ $m{plain} });
my @head = ('scenario', 'conn/s', 'vs ungated', 'p50 ms', 'p99 ms',
    'ZK writes/conn', 'ZK writes/s', 'worker CPU/conn', 'ZK CPU/conn',
    'errors');
my @table;

for my $row (@rows) {
    my ($k, $name) = @$row;
    my @r = @{ $m{$k} };
    my ($n, $w, $cw, $cz, $err) = (0) x 5;
    for (@r) {
        $n += $_->{n};
        $w += $_->{writes};
        $cw += $_->{cpu_w} // 0;
        $cz += $_->{cpu_z};
        $err += $_->{errors} // 0;
    }
    $n ||= 1;
    my $rate = median(map { $_->{rate} } @r);
    if ($k eq 'raw') {
        push @table, [$name, '', '', '', '', sprintf('%.2f', $w / $n),
            sprintf('%.0f', $rate), '', sprintf('%.0f us', $cz * 1e6 / $n),
            ''];
        next;
    }
    push @table, [$name, sprintf('%.0f', $rate),
        sprintf('%.0f%%', 100 * $rate / $plain),
        sprintf('%.2f', median(map { $_->{p50} } @r)),
        sprintf('%.2f', median(map { $_->{p99} } @r)),
        sprintf('%.4f', $w / $n), sprintf('%.0f', $rate * $w / $n),
        sprintf('%.0f us', $cw * 1e6 / $n), sprintf('%.0f us', $cz * 1e6 / $n),
        $err];
}

my @w = map { length } @head;
for my $t (@table) {
    $w[$_] < length $t->[$_] and $w[$_] = length $t->[$_] for 0 .. $#$t;
}
print "\n";
for my $t (\@head, @table) {
    print join('  ', map { sprintf($_ ? "%$w[$_]s" : "%-$w[$_]s", $t->[$_]) }
        0 .. $#$t), "\n";
}
if ($raw) {
    print "\n(the raw row's ZK writes/conn and CPU are per write)\n";
    # without keep, every connection is two writes: ZooKeeper's write rate
    # bounds the gate
    printf "without keep, ZooKeeper wrote %s/s for the gate: %.0f%% of the "
        . "raw rate\n", $table[1][6], 100 * $table[1][6] / $table[3][6];
}

# the stream access logs: one line a connection, with its status
print "\n";
for my $k ((grep { $_ ne 'raw' } map { $_->[0] } @rows),
    $bound ? qw(bound_nokeep bound_keep) : ()) {
    my %st;
    my $lines = 0;
    if (open my $fh, '<', $ng->prefix . "/logs/$k.log") {
        while (<$fh>) {
            chomp;
            $st{$_}++;
            $lines++;
        }
    }
    # wrk's end closes the connections it has open: those still waiting
    # for their lease then are "499 GONE", at most the sum of -c
    my $want = $k eq 'plain' ? '200 -' : '200 ACQUIRED';
    my $cut = $st{'499 GONE'} // 0;
    $cut = 0 if $cut > ($wrk_conns{$k} // 0);
    my @other = grep { $_ ne $want && !($_ eq '499 GONE' && $cut) }
        sort keys %st;
    printf "%-12s %7d connections logged for %7d requests (%.3f a request)"
        . "; %d \"%s\"%s%s\n", $k, $lines, $wrk_total{$k} // 0,
        $lines / ($wrk_total{$k} || 1), $st{$want} // 0, $want,
        $cut ? sprintf(', %d "499 GONE" (closed by the ends of %d wrk runs '
            . 'while they waited)', $cut, $wrk_runs{$k}) : '',
        @other ? '; OTHERS: ' . join(', ', map { "\"$_\" x $st{$_}" } @other)
               : '';
}

if ($bound) {
    print "\n";
    for my $k (qw(bound_nokeep bound_keep)) {
        my $b = $bound{$k};
        printf "bound, %-12s leases=%d, %d clients, 20 ms backend: %.0f "
            . "conn/s, backend peak %d in flight (%s)\n", $k,
            $bound, 4 * $bound, $b->{rate}, $b->{peak},
            $b->{peak} == $bound ? 'ok' : $b->{peak} > $bound
                ? 'LEASES EXCEEDED' : 'fewer than the leases';
    }
}

my @log = grep { /\[(?:warn|error|crit|alert|emerg)\]/ }
    split /\n/, $ng->error_log;
printf "\nnginx error.log: %d lines at warn or above%s\n", scalar @log,
    @log ? ":\n" . join("\n", map { "  $_" } @log[0 .. ($#log < 9 ? $#log : 9)])
         : '';
my @left = (zk_ephemerals($zk, '/bench'));
printf "ZooKeeper nodes left under /bench: %d\n", scalar @left;
exit 0;
