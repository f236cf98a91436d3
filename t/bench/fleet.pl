#!/usr/bin/perl
# A simulated fleet, run by hand (never by prove): many nginx on one
# semaphore path whose demand moves from some instances to others, with
# and without kept leases (zk_semaphore keep=), one after the other in one
# run.  For each: ZooKeeper writes per request (from the server's zxid),
# fairness (Jain's index of the requests of the instances loaded in a
# phase: 1 is equal shares), the longest wait for the lock and its p99
# ($zk_lock_wait_time), and bound violations (requests in flight at the
# backend above the leases: must be 0).
#
#   perl t/bench/fleet.pl [--instances 16] [--leases 32] [--seconds 5]
#                         [--keep 1s] [--connections 8]
#
# Phases (each --seconds long): the first half of the instances loaded,
# then the middle half, then the second half, then all of them with half
# the connections each: every phase moves the demand, so leases must move
# between workers.  One worker per instance; a 20 ms backend that ends a
# call when nginx closes it (hangup=1): when a phase ends, wrk cuts its
# requests and nginx frees their leases at once, and a backend that went
# on sleeping would count those calls beside the next ones.

use strict;
use warnings;
use FindBin;
use Getopt::Long;
use Time::HiRes qw(time sleep);
use lib "$FindBin::Bin/../lib";
use ZkLock::Test;

chdir "$FindBin::Bin/../.." or die "chdir: $!";

my $instances = 16;
my $leases = 32;
my $seconds = 5;
my $keep = '1s';
my $conns = 8;
GetOptions('instances=i' => \$instances, 'leases=i' => \$leases,
    'seconds=i' => \$seconds, 'keep=s' => \$keep,
    'connections=i' => \$conns) or exit 2;
$instances >= 4 or die "--instances: 4 at least\n";

system('which wrk >/dev/null 2>&1') == 0
    or die "wrk is missing: apt-get install wrk\n";

module_path();

my $zk = zk_start();
my $be = backend_start();

my $conf = <<"EOF";
    zk_hosts %%ZK%%;
    log_format wait \$zk_lock_wait_time;
    server {
        listen 127.0.0.1:%%PORT%%;
        access_log off;
        location = /keep {
            zk_semaphore /bench/fleet-keep leases=$leases keep=$keep
                         timeout=30s;
            access_log %%PREFIX%%/logs/wait.log wait buffer=64k flush=1s;
            proxy_pass http://%%BACKEND%%;
        }
        location = /nokeep {
            zk_semaphore /bench/fleet leases=$leases timeout=30s;
            access_log %%PREFIX%%/logs/wait.log wait buffer=64k flush=1s;
            proxy_pass http://%%BACKEND%%;
        }
    }
EOF

my @ng = map { nginx_start($conf, zk => $zk, backend => $be, workers => 1,
    log_level => 'warn') } 1 .. $instances;
sleep 3;    # sessions

sub zxid {
    my ($z) = (zk_4lw($zk->port, 'srvr') // '') =~ /Zxid: 0x([0-9a-f]+)/
        or die "no zxid from srvr\n";
    return hex($z) & 0xffffffff;
}

sub jain {
    my (@x) = @_;
    my ($s, $q) = (0, 0);
    $s += $_, $q += $_ * $_ for @x;
    return $q ? $s * $s / (@x * $q) : 0;
}

# the waits logged since the last call, in ms
sub waits {
    my @w;
    for my $ng (@ng) {
        my $f = $ng->prefix . '/logs/wait.log';
        next unless -f $f;
        open my $fh, '<', $f or die $!;
        push @w, map { /^(\d+)/ ? $1 : () } <$fh>;
        close $fh;
        truncate $f, 0;
    }
    return sort { $a <=> $b } @w;
}

# one phase: wrk on each [instance index, connections]; requests each
sub phase {
    my ($loc, $key, @spec) = @_;
    my @runs;
    for my $s (@spec) {
        my ($i, $c) = @$s;
        my $file = $ng[$i]->prefix . "/wrk.$$";
        my $pid = fork // die;
        if ($pid == 0) {
            exec "wrk -t1 -c$c -d${seconds}s 'http://127.0.0.1:"
                . $ng[$i]->port . "$loc?key=$key&sleep=20&hangup=1' > $file "
                . "2>&1";
        }
        push @runs, [$pid, $file];
    }
    my @n;
    for (@runs) {
        waitpid $_->[0], 0;
        my ($n) = slurp($_->[1]) =~ /(\d+) requests in/ or die "wrk failed";
        push @n, $n;
    }
    return @n;
}

my $h = int($instances / 2);
my $q = int($instances / 4);
my @phases = (
    [ 'first half', map { [$_, $conns] } 0 .. $h - 1 ],
    [ 'middle half', map { [$_, $conns] } $q .. $q + $h - 1 ],
    [ 'second half', map { [$_, $conns] } $h .. $instances - 1 ],
    [ 'all, half the connections',
      map { [$_, int($conns / 2) || 1] } 0 .. $instances - 1 ],
);

printf "%d nginx x 1 worker, leases=%d, 20 ms backend, %d s per phase, "
    . "%d connections per loaded instance\n\n", $instances, $leases,
    $seconds, $conns;
printf "%-14s %-26s %9s %10s %7s %9s %9s %10s\n", 'gate', 'phase',
    'requests', 'writes/req', 'Jain', 'wait p99', 'wait max', 'peak/bound';

my %total;
for my $loc ('/nokeep', '/keep') {
    my $name = $loc eq '/keep' ? "keep=$keep" : 'without keep';
    my ($all, $writes, $violations, $worst) = (0, 0, 0, 0);
    waits();
    for my $p (@phases) {
        my ($label, @spec) = @$p;
        my $key = "f$loc$label";
        $key =~ s/\W/_/g;
        my $z0 = zxid();
        my @n = phase($loc, $key, @spec);
        my $z1 = zxid();
        sleep 1.2;      # the access logs' flush
        my @w = waits();
        my $sum = 0;
        $sum += $_ for @n;
        my $peak = $be->stats($key)->{max};
        $violations++ if $peak > $leases;
        $all += $sum;
        $writes += $z1 - $z0;
        my $max = @w ? $w[-1] : 0;
        $worst = $max if $max > $worst;
        printf "%-14s %-26s %9d %10.4f %7.4f %7d ms %7d ms %6d/%d\n", $name,
            $label, $sum, $sum ? ($z1 - $z0) / $sum : 0, jain(@n),
            @w ? $w[int($#w * 0.99)] : 0, $max, $peak, $leases;
    }
    printf "%-14s %-26s %9d %10.4f %7s %9s %7d ms %7s\n\n", $name, 'whole run',
        $all, $all ? $writes / $all : 0, '', '', $worst,
        $violations ? "$violations BOUND VIOLATIONS" : '0 over';
    $total{$loc} = $all ? $writes / $all : 0;
}

printf "writes per request: %.4f with keep=%s, %.4f without (%.0fx fewer)\n",
    $total{'/keep'}, $keep, $total{'/nokeep'},
    $total{'/keep'} ? $total{'/nokeep'} / $total{'/keep'} : 0;
exit 0;
