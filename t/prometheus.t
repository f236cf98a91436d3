#!/usr/bin/perl
# The Prometheus exposition scrapes clean:
#
#  1. promtool check metrics (Debian's prometheus package, unpacked by
#     t/lib/promtool.sh) accepts it, zk_lock_fair_flows and
#     zk_lock_fair_claim among its families (a location with fair=),
#     and zk_lock_class_part (with priority=);
#  2. one lock path in two locations is one series per family, counting the
#     requests of both (Prometheus drops a repeated label set, and with it
#     the counts of one location);
#  3. every histogram's _count is its +Inf bucket, scraped while requests
#     come and go;
#  4. no pid label (a new series at every reload and respawn), the worker
#     index instead; the JSON keeps the pid;
#  5. a request let through by zk_lock_fail open and redirected to a
#     location with the same lock is counted bypassed once;
#  6. with no lock configured yet, the page answers all the same: the
#     JSON with the version, the build and no worker or lock, the text
#     with zk_lock_build_info, and promtool accepts it (issue 37, item 4).

use strict;
use warnings;
use Test::More;
use JSON::PP ();
use lib 't/lib';
use ZkLock::Test;

require_prereqs(qw(nginx zookeeper kazoo module));

my $zk = zk_start();
my $be = backend_start();

my $ng = nginx_start(<<'EOF', zk => $zk, backend => $be, workers => 2);
    zk_hosts %%ZK%%;
    zk_session_timeout 4s;
    zk_lock_class gold shares=3 lendable=0%;
    zk_lock_class silver shares=1 lendable=100% default;

    server {
        listen 127.0.0.1:%%PORT%%;

        location /a {
            zk_semaphore /p/shared leases=2 timeout=10s;
            proxy_pass http://%%BACKEND%%;
        }
        location /b {
            zk_semaphore /p/shared leases=2 timeout=10s;
            proxy_pass http://%%BACKEND%%;
        }
        location /m {
            zk_mutex /p/m/$arg_t timeout=10s;
            zk_rwlock /p/rw read timeout=10s;
            proxy_pass http://%%BACKEND%%;
        }
        location /open {
            zk_lock_fail open;
            zk_mutex /p/open timeout=2s;
            error_page 502 = @open;
            proxy_pass http://127.0.0.1:1;
        }
        location @open {
            zk_lock_fail open;
            zk_mutex /p/open timeout=2s;
            proxy_pass http://%%BACKEND%%;
        }
        location /fair {
            zk_semaphore /p/fair leases=2 keep=1s fair=$arg_t
                         priority=$arg_c;
            proxy_pass http://%%BACKEND%%;
        }
        location = /metrics {
            zk_lock_status_page prometheus;
        }
        location = /status {
            zk_lock_status_page;
        }
    }
EOF
ok(sessions_connected($ng), 'connected');

sub scrape { $ng->get('/metrics')->{body} // '' }

sub series {
    my ($text, $re) = @_;
    return grep { /$re/ } split /\n/, $text;
}

# traffic through both locations of the shared path, and the others
my @reqs = ((map { [$ng->port, "/a?key=a&sleep=50&n=$_"] } 1 .. 6),
    (map { [$ng->port, "/b?key=b&sleep=50&n=$_"] } 1 .. 4),
    (map { [$ng->port, "/m?t=$_&key=m&sleep=20"] } 1 .. 3));

# scrape while they run: _count and +Inf must agree in every scrape
my $bg = http_parallel_bg(\@reqs, timeout => 30);
my @scrapes = map { my $t = scrape(); select(undef, undef, undef, 0.05); $t }
    1 .. 10;
my $res = http_parallel_collect($bg, 30);
is(scalar(grep { $_->{status} == 200 } @$res), scalar @reqs,
    'every request served');
push @scrapes, scrape();

my $mismatch = 0;
for my $text (@scrapes) {
    my %inf = map { /^zk_lock_wait_seconds_bucket\{(.*),le="\+Inf"\} (\d+)$/
        ? ($1 => $2) : () } split /\n/, $text;
    my %count = map { /^zk_lock_wait_seconds_count\{(.*)\} (\d+)$/
        ? ($1 => $2) : () } split /\n/, $text;
    for my $k (keys %count) {
        $mismatch++ unless defined $inf{$k} && $inf{$k} == $count{$k};
    }
}
is($mismatch, 0, '_count is the +Inf bucket in each of 11 scrapes');

my $text = $scrapes[-1];

# no label set twice
my %seen;
my @dups = grep { $seen{$_}++ } map { /^([^ #]+) / ? $1 : () }
    split /\n/, $text;
is_deeply(\@dups, [], 'no series twice') or diag explain \@dups;

my @acq = series($text,
    qr/^zk_lock_requests_total\{path="\/p\/shared",type="semaphore",result="acquired"\} /);
is(scalar @acq, 1, 'one path in two locations: one series');
like($acq[0] // '', qr/ 10$/, 'counting the requests of both locations');
like($text, qr/^zk_lock_wait_seconds_count\{path="\/p\/shared",type="semaphore"\} 10$/m,
    'and one histogram');
like($text, qr/^zk_lock_requests_total\{path="\/p\/m\/\$arg_t",type="mutex",result="acquired"\} 3$/m,
    'a path with variables: one series, as configured');

unlike($text, qr/pid=/, 'no pid label');
like($text, qr/^zk_lock_session_connected\{worker="0"\} 1$/m, 'worker 0');
like($text, qr/^zk_lock_session_connected\{worker="1"\} 1$/m, 'worker 1');
like($text, qr/^zk_lock_session_timeout_seconds\{worker="$_"\} 4\.000$/m,
    "worker $_: the session timeout granted, 4 s") for 0, 1;
like($ng->get('/status')->{body}, qr/"pid":\d+/, 'the JSON keeps the pid');

# promtool
my $promtool = `sh t/lib/promtool.sh 2>&1`;
chomp $promtool;
($promtool) = (split /\n/, $promtool)[-1];

sub promtool_ok {
    my ($text, $name) = @_;
    SKIP: {
        skip "no promtool: $promtool", 1 unless $promtool && -x $promtool;
        my $file = ZkLock::Test::tempdir('prom') . '/metrics.txt';
        open my $fh, '>', $file or die $!;
        print $fh $text;
        close $fh;
        my $out = `$promtool check metrics < $file 2>&1`;
        is($? >> 8, 0, $name) or diag $out;
    }
}

like($text, qr/^zk_lock_fair_claim\{path="\/p\/fair",type="semaphore"\} \d+\.\d{3}$/m,
    'a fair= lock has its claim');
like($text, qr/^zk_lock_fair_flows\{path="\/p\/fair",type="semaphore"\} \d+$/m,
    '... and its flows');
unlike($text, qr/^zk_lock_fair_\w+\{path="\/p\/shared"/m,
    'a lock without fair= has neither');
like($text, qr/^zk_lock_class_part\{path="\/p\/fair",type="semaphore",
    class="gold"\}\s\d+\.\d{3}$/mx, 'its classes have their part '
    . '(priority=)');
promtool_ok($text, 'promtool check metrics accepts it');

# bypassed, then redirected to the same lock: counted once
{
    $zk->stop;
    ok(wait_for(sub {
        (() = $ng->error_log =~ /zookeeper connection lost/g) >= 2 }, 15),
        'ZooKeeper stopped: both workers noticed');
    my $r = $ng->get('/open?key=open');
    is($r->{status}, 200, 'zk_lock_fail open: let through, redirected, served');
    my ($n) = scrape() =~ /^zk_lock_requests_total\{path="\/p\/open",type="mutex",result="bypassed"\} (\d+)$/m;
    is($n, 1, 'counted bypassed once, not again after the redirect');
    my $lines = () = $ng->error_log =~ /zk_mutex "\/p\/open" bypassed/g;
    is($lines, 1, 'and logged once');
}

# no lock configured yet: a scrape set up first does not fail
{
    my $ng0 = nginx_start(<<'EOF', zk => $zk, workers => 1);
    zk_hosts %%ZK%%;

    server {
        listen 127.0.0.1:%%PORT%%;
        location = /metrics { zk_lock_status_page prometheus; }
        location = /status  { zk_lock_status_page; }
    }
EOF
    my $r = $ng0->get('/status');
    is($r->{status}, 200, 'no lock configured: the JSON page answers');
    my $st = eval { JSON::PP::decode_json($r->{body}) } // {};
    like($st->{version} // '', qr/^\d+\.\d+\.\d+$/, '... with the version');
    like($st->{build} // '', qr/^\S+$/, '... and the build');
    is_deeply([ $st->{workers}, $st->{locks} ], [ [], [] ],
        '... no worker session and no lock');

    $r = $ng0->get('/metrics');
    is($r->{status}, 200, 'the Prometheus page answers');
    like($r->{body},
        qr/^zk_lock_build_info\{version="\Q$st->{version}\E",build="\Q$st->{build}\E"\} 1$/m,
        '... with zk_lock_build_info');
    unlike($r->{body}, qr/^zk_lock_(?!build_info)\w+\{/m,
        '... and no other series');
    promtool_ok($r->{body}, '... which promtool accepts');
    $ng0->stop;
}

done_testing();
