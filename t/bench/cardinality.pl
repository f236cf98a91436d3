#!/usr/bin/perl
# fair= with a new key on every request, run by hand (never by prove):
# issue 39's cardinality case, "10 000 distinct keys a second for 60 s: no
# new znode, worker memory flat within 5 %".
#
#   perl t/bench/cardinality.pl [--rounds 3] [--seconds 20]
#                               [--connections 64] [--workers 2]
#
# One ZooKeeper, one nginx with --workers workers and
#
#     location = /c {
#         zk_semaphore /bench/card leases=4 keep=1s timeout=30s
#                      fair=$arg_tenant;
#         try_files /index.html =404;     # a static file: after the lock
#     }
#
# wrk (--connections keepalive connections, one thread) asks /c with a key
# drawn anew for each request (tenant=<random 31 bits>-<count>), so that
# every request is a flow of its own, and 4 leases for 64 connections keep
# most of them waiting: the flows of the worker that keeps the leases come
# and go with their requests.  The content is a static file, so that the
# lock (access phase) is taken: "return" would answer before it.  Per round of --seconds: the requests (each a
# new key) and their rate, the non-2xx answers, the flows in the pool in
# the middle of the round (the status page), the workers' resident
# memory (VmRSS, summed) after the round, and the nodes on the server
# (zk_znode_count of mntr) and under /bench after it.  At the end: the
# memory of the last round against the first, and the nodes against those
# before the first round.
#
# On the 2-core VM: see t/bench/README.md ("fair=: a new key a request").

use strict;
use warnings;
use FindBin;
use Getopt::Long;
use Time::HiRes qw(time sleep);
use lib "$FindBin::Bin/../lib";
use ZkLock::Test;

chdir "$FindBin::Bin/../.." or die "chdir: $!";

my $rounds = 3;
my $secs = 20;
my $conns = 64;
my $workers = 2;
GetOptions('rounds=i' => \$rounds, 'seconds=i' => \$secs,
    'connections=i' => \$conns, 'workers=i' => \$workers) or exit 2;

system('which wrk >/dev/null 2>&1') == 0
    or die "wrk is missing: apt-get install wrk\n";

my $zk = zk_start();
my $ng = nginx_start(<<'EOF', zk => $zk, workers => $workers,
    zk_hosts %%ZK%%;
    server {
        listen 127.0.0.1:%%PORT%%;
        access_log off;
        root %%PREFIX%%;
        location = /c {
            zk_semaphore /bench/card leases=4 keep=1s timeout=30s
                         fair=$arg_tenant;
            try_files /index.html =404;
        }
        location = /status { zk_lock_status_page; }
    }
EOF
    log_level => 'warn', connections => 4 * $conns);

open my $ix, '>', $ng->prefix . '/index.html' or die "index.html: $!";
print $ix "ok\n";
close $ix;

wait_for(sub { $ng->get('/c?tenant=warm', timeout => 5)->{status} == 200 },
    20) or die "no 200 from /c:\n" . $ng->error_log;

my $lua = $ng->prefix . '/keys.lua';
open my $fh, '>', $lua or die "$lua: $!";
print $fh <<'EOF';
-- a new key for every request: a random 31 bits and a count
local n = 0
math.randomseed(os.time())
request = function()
    n = n + 1
    return wrk.format("GET", "/c?tenant=" .. math.random(0, 2147483647)
                      .. "-" .. n)
end
EOF
close $fh;

sub rss {
    my $kb = 0;
    for my $pid ($ng->worker_pids) {
        open my $st, '<', "/proc/$pid/status" or next;
        while (<$st>) { $kb += $1 if /^VmRSS:\s+(\d+)/ }
    }
    return $kb;
}

sub znodes {
    my ($n) = (zk_4lw($zk->port, 'mntr') // '') =~ /zk_znode_count\s+(\d+)/;
    return $n // -1;
}

sub under { return scalar zk_tree($zk, '/bench') }

my ($z0, $t0) = (znodes(), under());
printf "before: %d nodes on the server, %d under /bench; workers' RSS "
    . "%d kB\n\n", $z0, $t0, rss();
printf "%5s %10s %9s %8s %6s %10s %8s %8s\n", 'round', 'requests',
    'keys/s', 'non-2xx', 'flows', 'RSS kB', 'nodes', '/bench';

my @rss;
for my $r (1 .. $rounds) {
    open my $wrk, '-|', "wrk -t1 -c$conns -d${secs}s -s $lua "
        . 'http://127.0.0.1:' . $ng->port . '/ 2>&1' or die "wrk: $!";

    # the flows of the pool in the middle of the round (status page)
    sleep $secs / 2;
    my ($flows) = ($ng->get('/status', timeout => 5)->{body} // '')
        =~ /"fair":\{"flows":(\d+)/;

    my $out = do { local $/; <$wrk> };
    close $wrk;
    my ($n) = $out =~ /(\d+) requests in/ or die "wrk: $out";
    my ($rate) = $out =~ /Requests\/sec:\s+([\d.]+)/;
    my ($bad) = $out =~ /Non-2xx or 3xx responses:\s+(\d+)/;
    sleep 2;    # the kept leases expire: the flows are all gone
    push @rss, rss();
    printf "%5d %10d %9.0f %8d %6s %10d %8d %8d\n", $r, $n, $rate,
        $bad // 0, $flows // '-', $rss[-1], znodes(), under();
}

printf "\nRSS, last round against the first: %+.1f%%; nodes: %d on the "
    . "server (%+d), %d under /bench (%+d)\n",
    100 * ($rss[-1] - $rss[0]) / ($rss[0] || 1), znodes(), znodes() - $z0,
    under(), under() - $t0;

$ng->stop;
$zk->stop;
