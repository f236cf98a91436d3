#!/usr/bin/perl
# Benchmark of kept leases (zk_semaphore keep=), run by hand (never by
# prove), with the targets of issue 18; every figure of one scenario comes
# from the same run, so compare ratios, not rates.
#
#   perl t/bench/keep.pl [--seconds 10] [--keep 1s] [--only a,b,c,d]
#                        [--sessions N]
#
# --sessions N: "zk_sessions N" in every nginx (N workers keep a session
# and take the locks of the others).
#
#   a. hot path: 1 nginx x 2 workers, leases=64 keep=, 32 connections, a
#      static file: rate against the same location without a lock (>= 80%),
#      ZooKeeper writes per request (<= 0.01), p99 against the unlocked
#      p99 (<= 2x); the same location without keep for comparison
#   b. fleet under contention: 4 nginx x 2 workers, leases=16 keep=, a
#      20 ms backend, 64 connections (16 per instance): backend peak in
#      flight (exactly 16), writes per request (<= 0.1), each instance's
#      requests against the mean (within 25%), Jain's index; without keep
#      for comparison
#   c. unequal demand: 48 connections on one instance, 8 on another, same
#      path (leases=16): the small one's rate against its rate alone (>= 80%)
#   d. Curator arrives: while (b)'s load keeps every lease busy, a Curator
#      InterProcessSemaphore (v1, 16 leases) acquires (< 1 s); after the
#      load, no node left after keep + 1 s
#
# ZooKeeper writes are read from the server's zxid, whose low 32 bits count
# its transactions.  Shares are fair between nginx instances first, then
# between the workers of each, however the kernel spread the connections.
# Needs wrk, and javac with the Curator jars (t/lib/install-deps.sh).

use strict;
use warnings;
use FindBin;
use Getopt::Long;
use POSIX ();
use Time::HiRes qw(time sleep);
use lib "$FindBin::Bin/../lib";
use ZkLock::Test;
use ZkLock::Curator;

chdir "$FindBin::Bin/../.." or die "chdir: $!";

my $seconds = 10;
my $keep = '1s';
my $only = 'a,b,c,d';
my $sessions = 0;
GetOptions('seconds=i' => \$seconds, 'keep=s' => \$keep, 'only=s' => \$only,
    'sessions=i' => \$sessions)
    or exit 2;
my %run = map { $_ => 1 } split /,/, $only;

system('which wrk >/dev/null 2>&1') == 0
    or die "wrk is missing: apt-get install wrk\n";
$run{d} and curator_prereqs();

module_path();

my $zk = zk_start();
my $be = backend_start();
my $keep_ms = $keep =~ /^(\d+)ms$/ ? $1 : $keep =~ /^(\d+)s?$/ ? $1 * 1000
    : die "--keep: a time in s or ms\n";
my @fails;

sub zxid {
    my ($z) = (zk_4lw($zk->port, 'srvr') // '') =~ /Zxid: 0x([0-9a-f]+)/
        or die "no zxid from srvr\n";
    return hex($z) & 0xffffffff;
}

sub conf {
    my ($leases, $keep_param, $content) = @_;
    my $zs = $sessions ? "zk_sessions $sessions;" : '';
    return <<"EOF";
    zk_hosts %%ZK%%;
    $zs
    server {
        listen 127.0.0.1:%%PORT%%;
        access_log off;
        root %%PREFIX%%;
        location = /plain { try_files /index.html =404; }
        location = /keep {
            zk_semaphore /bench/keep leases=$leases keep=$keep_param
                         timeout=10s;
            $content
        }
        location = /nokeep {
            zk_semaphore /bench/nokeep leases=$leases timeout=10s;
            $content
        }
        location = /status { zk_lock_status_page; }
    }
EOF
}

sub fleet {
    my ($n, $leases, $content) = @_;
    my @ng = map { nginx_start(conf($leases, $keep, $content), zk => $zk,
        backend => $be, workers => 2, log_level => 'warn') } 1 .. $n;
    for my $ng (@ng) {
        open my $fh, '>', $ng->prefix . '/index.html' or die $!;
        print $fh "ok\n";
        close $fh;
    }
    sleep 3;    # sessions (the log level here hides their "connected" line)
    return @ng;
}

sub ms {
    my ($v, $unit) = @_;
    return $unit eq 'us' ? $v / 1000 : $unit eq 's' ? $v * 1000 : $v;
}

# one wrk per [nginx, connections, uri]: requests, rate, p99 (ms) each
sub load {
    my (@spec) = @_;
    my @runs;
    for my $s (@spec) {
        my ($ng, $conns, $uri) = @$s;
        my $file = $ng->prefix . "/wrk.$$." . scalar(@runs);
        my $threads = $conns >= 4 ? 2 : 1;
        my $pid = fork // die;
        if ($pid == 0) {
            exec "wrk -t$threads -c$conns -d${seconds}s --latency "
                . "'http://127.0.0.1:" . $ng->port . "$uri' > $file 2>&1";
        }
        push @runs, [$pid, $file];
    }
    my @out;
    for (@runs) {
        waitpid $_->[0], 0;
        my $o = slurp($_->[1]);
        my ($n) = $o =~ /(\d+) requests in/ or die "wrk: $o";
        my ($rate) = $o =~ /Requests\/sec:\s+([\d.]+)/;
        my ($p99, $u) = $o =~ /\s99%\s+([\d.]+)(us|ms|s)/;
        my ($non2xx) = $o =~ /Non-2xx or 3xx responses: (\d+)/;
        push @out, { n => $n, rate => $rate, p99 => ms($p99 // 0, $u // 'ms'),
            errors => $non2xx // 0 };
    }
    return @out;
}

sub metered {
    my ($code) = @_;
    my $z0 = zxid();
    my @r = $code->();
    my $z1 = zxid();
    my $n = 0;
    $n += $_->{n} for @r;
    return ([@r], $n ? ($z1 - $z0) / $n : 0);
}

sub jain {
    my (@x) = @_;
    my ($s, $q) = (0, 0);
    $s += $_, $q += $_ * $_ for @x;
    return $q ? $s * $s / (@x * $q) : 0;
}

sub check {
    my ($what, $ok) = @_;
    printf "    %-60s %s\n", $what, $ok ? 'PASS' : 'FAIL';
    push @fails, $what unless $ok;
}

sub status {
    my ($ng, $path) = @_;
    my $j = $ZkLock::Test::JSON->decode($ng->get('/status')->{body});
    my ($l) = grep { $_->{path} eq $path } @{ $j->{locks} };
    return $l // {};
}

print "keep=$keep, $seconds s per row\n";

if ($run{a}) {
    my ($ng) = fleet(1, 64, 'try_files /index.html =404;');
    load([$ng, 32, '/keep']);        # warm: the pool grows
    my ($plain) = load([$ng, 32, '/plain']);
    my ($r, $w) = metered(sub { load([$ng, 32, '/keep']) });
    my ($r0, $w0) = metered(sub { load([$ng, 32, '/nokeep']) });
    my ($k, $n0) = ($r->[0], $r0->[0]);
    print "\na. hot path, 1 nginx x 2 workers, leases=64, 32 connections\n";
    printf "    %-22s %9s %8s %9s %8s\n", '', 'rate/s', 'vs plain', 'writes/req',
        'p99 ms';
    printf "    %-22s %9.0f %8s %9s %8.2f\n", 'no lock', $plain->{rate}, '100%',
        '', $plain->{p99};
    printf "    %-22s %9.0f %7.0f%% %9.4f %8.2f\n", "keep=$keep", $k->{rate},
        100 * $k->{rate} / $plain->{rate}, $w, $k->{p99};
    printf "    %-22s %9.0f %7.0f%% %9.4f %8.2f\n", 'without keep',
        $n0->{rate}, 100 * $n0->{rate} / $plain->{rate}, $w0, $n0->{p99};
    check('rate >= 80% of the unlocked rate',
        $k->{rate} >= 0.8 * $plain->{rate});
    check('ZooKeeper writes per request <= 0.01', $w <= 0.01);
    check('p99 <= 2x the unlocked p99', $k->{p99} <= 2 * $plain->{p99});
    check('no error', !$k->{errors});
    $ng->stop;
}

# hangup=1: a call ends when nginx closes it, as wrk's last requests make
# nginx do, so that the backend's peak counts only calls nginx let through
my $sleep = '?key=%s&sleep=20&hangup=1';

if ($run{b} || $run{d}) {
    my @ng = fleet(4, 16, 'proxy_pass http://%%BACKEND%%;');
    for my $loc ($run{b} ? ('/nokeep', '/keep') : ()) {
        $be->reset;
        my ($r, $w) = metered(sub {
            load(map { [$_, 16, $loc . sprintf($sleep, "b$loc")] } @ng) });
        my @n = map { $_->{n} } @$r;
        my $mean = 0;
        $mean += $_ / @n for @n;
        my $dev = 0;
        for (@n) { my $d = abs($_ - $mean) / $mean; $dev = $d if $d > $dev }
        my $peak = $be->stats("b$loc")->{max};
        print "\nb. fleet, 4 nginx x 2 workers, leases=16, 20 ms backend, "
            . "64 connections, $loc\n";
        printf "    per instance: %s; %.0f requests/s\n", join(' ', @n),
            ($n[0] + $n[1] + $n[2] + $n[3]) / $seconds;
        printf "    backend peak %d, writes/request %.4f, largest deviation "
            . "from the mean %.1f%%, Jain's index %.4f\n", $peak, $w,
            100 * $dev, jain(@n);
        next unless $loc eq '/keep';
        check('backend peak in flight exactly 16', $peak == 16);
        check('ZooKeeper writes per request <= 0.1', $w <= 0.1);
        check('each instance within 25% of the mean', $dev <= 0.25);
        my $st = status($ng[0], '/bench/keep');
        printf "    instance 1: reused %d of %d acquired, given back %d\n",
            $st->{reused}, $st->{acquired}, $st->{given_back};
    }

    if ($run{d}) {
        $be->reset;
        my $pid = fork // die;
        if ($pid == 0) {
            load(map { [$_, 16, '/keep' . sprintf($sleep, 'd')] } @ng);
            POSIX::_exit(0);
        }
        sleep 2;
        my $busy = $be->stats('d')->{max};
        my $c = curator($zk, 'semaphore', '/bench/keep', 0, 16, 10000);
        curator_expect($c, qr/^READY/, 30) or die "Curator not ready\n";
        my $t0 = time;
        my $at = curator_expect($c, qr/^ACQUIRED (\d+)/, 15);
        my $took = $at ? $at / 1000 - $t0 : undef;
        waitpid $pid, 0;
        my $end = time;
        sleep $keep_ms / 1000 + 1;
        my @left = zk_children($zk, '/bench/keep');
        print "\nd. Curator arrives while the fleet keeps all 16 leases "
            . "busy (a peak of $busy in flight before it)\n";
        printf "    Curator acquired in %s; %d nodes left %.1f s after the "
            . "load\n", defined $took ? sprintf('%.3f s', $took) : 'never',
            scalar @left, time - $end;
        check('Curator acquires within 1 s', defined $took && $took < 1);
        check('no node left after keep + 1 s', !@left);
    }
    $_->stop for @ng;
}

if ($run{c}) {
    my @ng = fleet(2, 16, 'proxy_pass http://%%BACKEND%%;');
    my ($alone) = load([$ng[1], 8, '/keep' . sprintf($sleep, 'c1')]);
    my (undef, $both) = load([$ng[0], 48, '/keep' . sprintf($sleep, 'c2')],
        [$ng[1], 8, '/keep' . sprintf($sleep, 'c3')]);
    print "\nc. unequal demand, leases=16, 20 ms backend\n";
    printf "    small instance (8 connections): %.0f/s alone, %.0f/s beside "
        . "48 connections: %.0f%%\n", $alone->{rate}, $both->{rate},
        100 * $both->{rate} / $alone->{rate};
    check('the small one keeps >= 80% of its rate alone',
        $both->{rate} >= 0.8 * $alone->{rate});
    $_->stop for @ng;
}

print @fails ? "\nFAILED: " . join('; ', @fails) . "\n" : "\nall targets met\n";
exit 0;
