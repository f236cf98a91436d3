#!/usr/bin/perl
# The status page at scale, run by hand (never by prove): one nginx worker
# with --locks lock directives (2 000 by default, each its own metrics
# entry), its Prometheus page scraped alone, then by --scrapers clients
# at once while a gated request (an uncontended zk_mutex) is timed on the
# same worker.  Reports the page's size, the time of one scrape, the
# worker's peak memory (VmHWM) grown by the scrapes, the worker's CPU
# time for a burst, and the gated request's time during the burst against
# its time alone.
#
#   perl t/bench/scrape.pl [--locks 2000] [--scrapers 100] [--rounds 3]
#
# ZK_LOCK_MODULE=path.so measures another build (the previous main, say).

use strict;
use warnings;
use FindBin;
use Getopt::Long;
use Time::HiRes qw(time sleep);
use lib "$FindBin::Bin/../lib";
use ZkLock::Test;

chdir "$FindBin::Bin/../.." or die "chdir: $!";

my $locks = 2000;
my $scrapers = 100;
my $rounds = 3;
GetOptions('locks=i' => \$locks, 'scrapers=i' => \$scrapers,
    'rounds=i' => \$rounds) or exit 2;

module_path();

my $zk = zk_start();
my $be = backend_start();

my $conf = "    zk_hosts %%ZK%%;\n    server {\n"
    . "        listen 127.0.0.1:%%PORT%%;\n        access_log off;\n"
    . "        location = /metrics { zk_lock_status_page prometheus; }\n"
    . "        location = /g { zk_mutex /bench/scrape/g;"
    . " proxy_pass http://%%BACKEND%%; }\n";
$conf .= "        location = /l$_ { zk_mutex /bench/scrape/l$_;"
    . " proxy_pass http://%%BACKEND%%; }\n" for 1 .. $locks;
$conf .= "    }\n";

my $ng = nginx_start($conf, zk => $zk, backend => $be, workers => 1,
    connections => 4096);
sessions_connected($ng) or die "no session\n";
my ($pid) = $ng->worker_pids;

sub hwm {
    my ($kb) = slurp("/proc/$pid/status") =~ /VmHWM:\s+(\d+) kB/;
    return $kb // 0;
}

sub gated {
    my $r = $ng->get('/g?key=g');
    $r->{status} == 200 or die "gated request: $r->{status}\n";
    return $r->{time};
}

# curl reads the pages: the harness's own client is slow with megabytes
sub curl_time {
    my $out = `curl -s -o /dev/null -w '%{http_code} %{time_total} %{size_download}' http://127.0.0.1:@{[ $ng->port ]}/metrics`;
    my ($code, $t, $size) = split ' ', $out;
    $code == 200 or die "scrape: $out\n";
    return ($t, $size);
}

# warm up: the lock's path exists, the page has been written once
gated() for 1 .. 3;
my (undef, $size) = curl_time();
my $hwm0 = hwm();

my (@alone, @burst, @scrape, @cpu);

for my $round (1 .. $rounds) {
    push @alone, gated();
    push @scrape, (curl_time())[0];

    my $url = 'http://127.0.0.1:' . $ng->port . '/metrics';
    my $cpu0 = ZkLock::Test::cpu_seconds($pid);
    my $burst = spawn(cmd => [ 'sh', '-c', "seq $scrapers | xargs -P "
        . "$scrapers -I{} curl -s -o /dev/null $url" ]);
    sleep 0.02;
    push @burst, gated();
    proc_wait($burst, 120);
    push @cpu, ZkLock::Test::cpu_seconds($pid) - $cpu0;
}

sub median { my @x = sort { $a <=> $b } @_; return $x[$#x / 2] }

printf "locks %d, page %.1f MB, one scrape %.1f ms (median of %d)\n",
    $locks, $size / 1e6, 1000 * median(@scrape), $rounds;
printf "worker peak memory grown by %d scrapes x %d rounds: %.1f MB\n",
    $scrapers, $rounds, (hwm() - $hwm0) / 1024;
printf "worker CPU for %d scrapes: %.0f ms (median of %d)\n", $scrapers,
    1000 * median(@cpu), $rounds;
printf "gated request alone %.1f ms, during %d scrapes %.1f ms "
    . "(median of %d)\n", 1000 * median(@alone), $scrapers,
    1000 * median(@burst), $rounds;

$ng->stop;
