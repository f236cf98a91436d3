#!/usr/bin/perl
# Benchmark, run by hand (never by prove): request rates through the gate
# against one local ZooKeeper, next to the raw ZooKeeper reference measured
# in the same run, so that ratios can be compared across machines.
#
#   perl t/bench/run.pl [--seconds 10] [--sync]
#
# Needs wrk (apt-get install wrk).  --sync runs ZooKeeper with forceSync=yes
# (its default; the tests turn it off).

use strict;
use warnings;
use FindBin;
use Getopt::Long;
use lib "$FindBin::Bin/../lib";
use ZkLock::Test;

chdir "$FindBin::Bin/../.." or die "chdir: $!";

my $seconds = 10;
my $sync = 0;
GetOptions('seconds=i' => \$seconds, 'sync' => \$sync) or exit 2;

system('which wrk >/dev/null 2>&1') == 0
    or die "wrk is missing: apt-get install wrk\n";

mkdir 't/build';
system('cc -O2 -Wall -o t/build/zkpairs t/bench/zkpairs.c -lzookeeper_st') == 0
    or die "cannot build t/bench/zkpairs.c\n";

module_path();

my $zk = zk_start($sync ? (cfg => { forceSync => 'yes' }) : ());

# a static file as the content: the cost measured is the gate's
my $conf = <<'EOF';
    zk_hosts %%ZK%%;

    server {
        listen 127.0.0.1:%%PORT%%;
        access_log off;
        root %%PREFIX%%;

        location = /plain { try_files /index.html =404; }
        location = /mutex {
            zk_mutex /bench/mutex timeout=30s;
            try_files /index.html =404;
        }
        location = /sem {
            zk_semaphore /bench/sem leases=3 timeout=30s;
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

sleep 2;    # sessions

my @rows;

sub row {
    my ($name, $rate, $p50, $p99, $note) = @_;
    push @rows, [$name, $rate, $p50, $p99, $note // ''];
    printf STDERR "  %-44s %10.1f/s\n", $name, $rate;
}

sub raw_pairs {
    my ($depth) = @_;
    my $out = `t/build/zkpairs ${\ $zk->hosts} /bench-raw-$depth $seconds $depth`;
    my ($rate) = $out =~ /pairs\/s ([\d.]+)/ or die "zkpairs: $out";
    return $rate;
}

# wrk on each [instance, connections]; returns total rate, worst p50, p99
sub load {
    my ($uri, @spec) = @_;
    my @pids;

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

    my ($rate, $p50, $p99) = (0, 0, 0);

    for (@pids) {
        waitpid $_->[0], 0;
        open my $fh, '<', $_->[1] or die;
        my $out = do { local $/; <$fh> };
        my ($r) = $out =~ /Requests\/sec:\s+([\d.]+)/ or die "wrk: $out";
        $out =~ /Non-2xx/ and warn "non-2xx answers:\n$out";
        $rate += $r;
        $p50 = max($p50, ms($out =~ /^\s+50%\s+(\S+)/m));
        $p99 = max($p99, ms($out =~ /^\s+99%\s+(\S+)/m));
    }

    return ($rate, $p50, $p99);
}

sub ms {
    my ($v) = @_;
    return 0 unless defined $v;
    return $v =~ /^([\d.]+)us$/ ? $1 / 1000
         : $v =~ /^([\d.]+)ms$/ ? $1
         : $v =~ /^([\d.]+)s$/ ? $1 * 1000 : 0;
}

sub max { $_[0] > $_[1] ? $_[0] : $_[1] }

print STDERR "measuring, $seconds s each:\n";

my $raw1 = raw_pairs(1);
row('raw ZooKeeper create+delete, 1 at a time', $raw1, 0, 0, 'reference');
my $raw64 = raw_pairs(64);
row('raw ZooKeeper create+delete, 64 in flight', $raw64, 0, 0);

row('nginx, no lock, 1 client', load('/plain', [$fleet[0], 1]));
row('zk_mutex, 1 client (uncontended)', load('/mutex', [$fleet[0], 1]));
row('zk_mutex, 8 clients over 2 nginx', load('/mutex', [$fleet[0], 4],
    [$fleet[1], 4]));
row('zk_semaphore leases=3, 8 clients over 2 nginx',
    load('/sem', [$fleet[0], 4], [$fleet[1], 4]));

my $left = () = (zk_ephemerals($zk, '/bench'));

printf "\n%-46s %12s %9s %9s %9s\n", 'scenario', 'rate', 'p50 ms', 'p99 ms',
    'vs raw 1';
for my $r (@rows) {
    printf "%-46s %10.1f/s %9s %9s %8.0f%%\n", $r->[0], $r->[1],
        $r->[2] ? sprintf('%.2f', $r->[2]) : '-',
        $r->[3] ? sprintf('%.2f', $r->[3]) : '-', 100 * $r->[1] / $raw1;
}
printf "\nZooKeeper forceSync=%s; nodes left under /bench: %d\n",
    $sync ? 'yes' : 'no', $left;
