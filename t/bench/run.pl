#!/usr/bin/perl
# Benchmark, run by hand (never by prove): the gate against its peers in
# one run on one local ZooKeeper - raw ZooKeeper create+delete pairs from
# the module's own C client (t/bench/zkpairs.c), Apache Curator 5.4 from
# Debian's jars (t/bench/CuratorBench.java) - so that ratios can be
# compared across machines.  Then the 10 000-waiter figures
# (t/bench/waiters.pl) unless --no-waiters.
#
#   perl t/bench/run.pl [--seconds 10] [--runs 3] [--sync] [--no-waiters]
#                       [--pin] [--markdown FILE]
#
# Needs wrk, javac and the Curator jars (t/lib/install-deps.sh installs
# them).  --sync runs ZooKeeper with forceSync=yes (its default; the tests
# turn it off).  --pin gives ZooKeeper a core of its own and the rest
# (nginx, wrk, the Curator JVM, the C client) the others, as if ZooKeeper
# ran on its own machine.
#
# "wait/handoff": with C clients in a FIFO queue each acquisition waits
# for the C-1 before it, so a request's lock wait divided by C-1 is the
# time one handoff takes (hold time included; the content here is instant).
# nginx's wait is $zk_lock_wait_time from the access log, Curator's the
# time acquire() took.  "CPU/req": user+system time of all nginx workers
# over the run, per request.  "ZK req/op" and "ZK CPU/op": the requests
# ZooKeeper received (its "srvr" count) and its user+system time, per pair
# or per request: on a small machine ZooKeeper's CPU bounds every rate.

use strict;
use warnings;
use FindBin;
use Getopt::Long;
use POSIX ();
use lib "$FindBin::Bin/../lib";
use ZkLock::Test;

chdir "$FindBin::Bin/../.." or die "chdir: $!";

my $seconds = 10;
my $sync = 0;
my $waiters = 1;
my $markdown;
my $runs = 3;
my $pin = 0;
GetOptions('seconds=i' => \$seconds, 'sync' => \$sync, 'runs=i' => \$runs,
    'waiters!' => \$waiters, 'pin' => \$pin, 'markdown=s' => \$markdown)
    or exit 2;

system('which wrk >/dev/null 2>&1') == 0
    or die "wrk is missing: apt-get install wrk\n";

my @jars = map { "/usr/share/java/$_.jar" }
    qw(curator-recipes curator-framework slf4j-nop);
my $cp = join ':', @jars;

mkdir 't/build';
system('cc -O2 -Wall -o t/build/zkpairs t/bench/zkpairs.c -lzookeeper_st') == 0
    or die "cannot build t/bench/zkpairs.c\n";
system("javac -nowarn -d t/build -cp $cp t/bench/CuratorBench.java") == 0
    or die "cannot build t/bench/CuratorBench.java (apt-get install "
         . "default-jdk-headless libcurator-recipes-java)\n";

module_path();

my $zk = zk_start($sync ? (cfg => { forceSync => 'yes' }) : ());

if ($pin) {
    chomp(my $cores = `nproc` || 1);
    die "--pin needs 2 cores or more\n" if $cores < 2;
    my $rest = $cores == 2 ? '1' : "1-" . ($cores - 1);
    # every thread of the JVM; what this script starts inherits its own
    system("taskset -a -p -c 0 ${\ $zk->pid} >/dev/null") == 0
        && system("taskset -p -c $rest $$ >/dev/null") == 0
        or die "taskset failed\n";
}

# a static file as the content: the cost measured is the gate's
my $conf = <<'EOF';
    zk_hosts %%ZK%%;

    log_format wait $zk_lock_wait_time;

    server {
        listen 127.0.0.1:%%PORT%%;
        access_log off;
        root %%PREFIX%%;

        location = /plain { try_files /index.html =404; }
        location = /mutex {
            zk_mutex /bench/mutex timeout=30s;
            access_log %%PREFIX%%/logs/wait.log wait buffer=64k flush=1s;
            try_files /index.html =404;
        }
        location = /kmutex {
            zk_mutex /bench/kmutex keep=1s timeout=30s;
            access_log %%PREFIX%%/logs/wait.log wait buffer=64k flush=1s;
            try_files /index.html =404;
        }
        location = /sem {
            zk_semaphore /bench/sem leases=3 timeout=30s;
            access_log %%PREFIX%%/logs/wait.log wait buffer=64k flush=1s;
            try_files /index.html =404;
        }
    }
EOF

my @fleet = map { nginx_start($conf, zk => $zk, log_level => 'warn') } 1 .. 2;

for my $ng (@fleet) {
    open my $fh, '>', $ng->prefix . '/index.html' or die $!;
    print $fh "ok\n";
    close $fh;
}

sleep 3;    # sessions (the log level here hides their "connected" line)

my @rows;

# name, rate, wait/handoff p50 and p99, request p50 and p99, CPU/req,
# the row it is compared with (undef: none)
sub row {
    my (%r) = @_;
    push @rows, \%r;
    printf STDERR "  %-46s %10.1f/s\n", $r{name}, $r{rate};
    return \%r;
}

# what ZooKeeper did while $code ran, per operation ("n", or rate*seconds)
sub zk_counters {
    my ($received) = zk_4lw($zk->port, 'srvr') =~ /Received: (\d+)/;
    return ($received // 0, cpu_seconds($zk->pid));
}

sub metered {
    my ($code) = @_;
    my ($r0, $c0) = zk_counters();
    my %r = $code->();
    my ($r1, $c1) = zk_counters();
    my $n = $r{n} || $r{rate} * $seconds || 1;
    return (%r, zk_req => ($r1 - $r0) / $n, zk_cpu => ($c1 - $c0) * 1e6 / $n);
}

sub raw_pairs {
    my ($depth) = @_;
    return metered(sub {
        my $out = `t/build/zkpairs ${\ $zk->hosts} /bench-raw-$depth $seconds $depth`;
        my ($rate) = $out =~ /pairs\/s ([\d.]+)/ or die "zkpairs: $out";
        return (rate => $rate);
    });
}

sub curator {
    my ($kind, $path, $clients, $leases) = @_;
    my $out = `java -cp $cp:t/build CuratorBench ${\ $zk->hosts} $kind $path $clients $seconds ${\ ($leases // 1)}`;
    my %r = $out =~ /(\w+) ([\d.]+)/g;
    defined $r{rate} or die "CuratorBench: $out";
    return %r;
}

sub cpu_workers { cpu_seconds(map { $_->worker_pids } @fleet) }

sub wait_log {
    my @w;
    for my $ng (@fleet) {
        my $f = $ng->prefix . '/logs/wait.log';
        next unless -f $f;
        open my $fh, '<', $f or die $!;
        push @w, map { /^(\d+)/ ? $1 : () } <$fh>;
        close $fh;
        truncate $f, 0;
    }
    return sort { $a <=> $b } @w;
}

sub pct {
    my ($p, @sorted) = @_;
    return undef unless @sorted;
    return $sorted[int($#sorted * $p / 100 + 0.5)];
}

# wrk on each [instance, connections]; requests, rate, worst p50 and p99
sub load {
    my ($uri, @spec) = @_;
    my @pids;

    wait_log();
    my $cpu = cpu_workers();

    for my $s (@spec) {
        my ($ng, $conns) = @$s;
        my $file = $ng->prefix . "/wrk.$$." . scalar(@pids);
        my $pid = fork // die;
        if ($pid == 0) {
            exec "wrk -t1 -c$conns -d${seconds}s --latency "
                . "http://127.0.0.1:" . $ng->port . "$uri > $file 2>&1";
        }
        push @pids, [$pid, $file];
    }

    my ($n, $rate, $p50, $p99) = (0, 0, 0, 0);

    for (@pids) {
        waitpid $_->[0], 0;
        open my $fh, '<', $_->[1] or die;
        my $out = do { local $/; <$fh> };
        my ($r) = $out =~ /Requests\/sec:\s+([\d.]+)/ or die "wrk: $out";
        my ($k) = $out =~ /(\d+) requests in/;
        $out =~ /Non-2xx|Socket errors/ and warn "errors:\n$out";
        $rate += $r;
        $n += $k;
        $p50 = max($p50, ms($out =~ /^\s+50%\s+(\S+)/m));
        $p99 = max($p99, ms($out =~ /^\s+99%\s+(\S+)/m));
    }

    sleep 2;    # the access log buffers are flushed every second
    my $us = (cpu_workers() - $cpu) * 1e6 / ($n || 1);

    return (n => $n, rate => $rate, req_p50 => $p50, req_p99 => $p99,
        cpu => $us);
}

sub ms {
    my ($v) = @_;
    return 0 unless defined $v;
    return $v =~ /^([\d.]+)us$/ ? $1 / 1000
         : $v =~ /^([\d.]+)ms$/ ? $1
         : $v =~ /^([\d.]+)s$/ ? $1 * 1000 : 0;
}

sub max { $_[0] > $_[1] ? $_[0] : $_[1] }

# nginx under wrk: C clients over the fleet.  How the kernel spreads the
# clients over each instance's workers changes the rate from one run to the
# next, and a single client's rate varies too: the median of --runs runs is
# kept.
sub gated {
    my ($name, $uri, $clients) = @_;
    my @spec = $clients == 1 ? ([$fleet[0], 1])
        : map { [$_, $clients / @fleet] } @fleet;
    my @runs;

    for (1 .. $runs) {
        my %r = metered(sub { load($uri, @spec) });
        my @w = wait_log();
        if ($clients > 1) {
            $r{wait_p50} = pct(50, @w) / ($clients - 1);
            $r{wait_p99} = pct(99, @w) / ($clients - 1);
            $r{wait_max} = $w[-1];
        }
        push @runs, \%r;
    }

    @runs = sort { $a->{rate} <=> $b->{rate} } @runs;
    return row(name => $name, %{ $runs[$#runs / 2] });
}

sub peer {
    my ($name, $clients, @args) = @_;
    my %c = metered(sub { curator(@args) });
    my %r = (name => $name, map { $_ => $c{$_} } qw(rate zk_req zk_cpu));
    if ($clients > 1) {
        $r{wait_p50} = $c{wait_p50} / ($clients - 1);
        $r{wait_p99} = $c{wait_p99} / ($clients - 1);
    } else {
        @r{qw(req_p50 req_p99)} = @c{qw(wait_p50 wait_p99)};
    }
    return row(%r);
}

# the reference comes first: without a warm-up it would be measured while
# ZooKeeper's JVM is still compiling, and every ratio would look better
print STDERR "warming ZooKeeper up\n";
`t/build/zkpairs ${\ $zk->hosts} /bench-warm 5 64`;

print STDERR "measuring, $seconds s each:\n";

my $raw1 = row(name => 'raw ZooKeeper create+delete, 1 at a time',
    raw_pairs(1))->{rate};
row(name => 'raw ZooKeeper create+delete, 64 in flight', raw_pairs(64));

row(name => 'nginx, no lock, 1 client',
    metered(sub { load('/plain', [$fleet[0], 1]) }));

my $cm1 = peer('Curator InterProcessMutex, 1 client', 1,
    'mutex', '/bench/cm1', 1);
gated('zk_mutex, 1 client (uncontended)', '/mutex', 1)->{vs} = $cm1;

my $cm8 = peer('Curator InterProcessMutex, 8 clients', 8,
    'mutex', '/bench/cm8', 8);
gated('zk_mutex, 8 clients over 2 nginx', '/mutex', 8)->{vs} = $cm8;

# kept (lock cohorting): an instance passes the mutex between its own
# requests for a quantum; the wait per handoff is no longer a FIFO's, so
# the longest wait is what is reported for it
my $km8 = gated('zk_mutex keep=1s, 8 clients over 2 nginx', '/kmutex', 8);
$km8->{vs} = $cm8;
my $km_longest = $km8->{wait_max};
delete @{$km8}{qw(wait_p50 wait_p99)};

my $cs8 = peer('Curator SemaphoreV2 3 leases, 8 clients', 8,
    'semv2', '/bench/cs8', 8, 3);
gated('zk_semaphore leases=3, 8 clients over 2 nginx', '/sem', 8)->{vs}
    = $cs8;

my $left = () = (zk_ephemerals($zk, '/bench'));

my @head = ('scenario', 'rate/s', 'vs raw 1', 'vs Curator',
    'wait/handoff p50 ms', 'p99 ms', 'request p50 ms', 'p99 ms',
    'worker CPU/req', 'ZK req/op', 'ZK CPU/op');
my @table;

for my $r (@rows) {
    push @table, [$r->{name}, sprintf('%.0f', $r->{rate}),
        sprintf('%.0f%%', 100 * $r->{rate} / $raw1),
        $r->{vs} ? sprintf('%.1fx', $r->{rate} / $r->{vs}{rate}) : '',
        f2($r->{wait_p50}), f2($r->{wait_p99}),
        f2($r->{req_p50}), f2($r->{req_p99}),
        defined $r->{cpu} ? sprintf('%.0f us', $r->{cpu}) : '',
        sprintf('%.2f', $r->{zk_req}), sprintf('%.0f us', $r->{zk_cpu})];
}

sub f2 { defined $_[0] ? sprintf('%.2f', $_[0]) : '' }

my @w = map { length } @head;
for my $t (@table) {
    $w[$_] = max($w[$_], length $t->[$_]) for 0 .. $#$t;
}

print "\n";
for my $t (\@head, @table) {
    print join('  ', map { sprintf($_ ? "%$w[$_]s" : "%-$w[$_]s", $t->[$_]) }
        0 .. $#$t), "\n";
}

my $foot = sprintf "ZooKeeper forceSync=%s%s; %d s per row; nodes left under "
    . "/bench: %d; zk_mutex keep=1s: longest wait %s ms", $sync ? 'yes' : 'no',
    $pin ? ', on a core of its own' : '', $seconds, $left,
    $km_longest // '?';
print "\n$foot\n";

if ($markdown) {
    open my $fh, '>', $markdown or die "$markdown: $!";
    print $fh '| ', join(' | ', @head), " |\n";
    print $fh '|', join('|', map { $_ ? '---:' : '---' } 0 .. $#head), "|\n";
    print $fh '| ', join(' | ', @$_), " |\n" for @table;
    print $fh "\n$foot\n";
    close $fh;
}

if ($waiters) {
    print "\n";
    system($^X, 't/bench/waiters.pl') == 0
        or warn "t/bench/waiters.pl failed\n";
}
