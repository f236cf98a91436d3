#!/usr/bin/perl
# A ZooKeeper outage at Debian's default log level, "error" (issue 37,
# items 1 and 2): each worker says once when its ZooKeeper becomes
# unreachable, naming the server and the cause, and once when it is usable
# again, with how long it was out and what became of the requests
# meanwhile; the requests' own lines refer to the outage.
#
#  1. zk_hosts names a closed port (a typo, a firewall): one line per
#     worker, "127.0.0.1:<port> (111: Connection refused)", with no traffic
#     at all; a request is refused, its line says for how long ZooKeeper
#     has been unreachable; still one line seconds later
#  2. ZooKeeper stopped, then started: one line each way per worker; the
#     refused requests are counted in the end line
#  3. ZooKeeper hangs (SIGSTOP): "no answer from <server>", a request that
#     times out meanwhile says so ("no answer from zookeeper", not the
#     cap), and is counted "timed out" in the end line
#  4. zk_session_timeout above the server's maximum: a warning with what
#     the server granted

use strict;
use warnings;
use Test::More;
use Time::HiRes qw(time sleep);
use lib 't/lib';
use ZkLock::Test;

require_prereqs(qw(nginx zookeeper module));

my $zk = zk_start();
my $be = backend_start();

sub lines {
    my ($ng, $re) = @_;
    return grep { /$re/ } split /\n/, $ng->error_log;
}

my $UNREACHABLE = qr/\[error\] .*zookeeper unreachable for \d+ms: /;
my $USABLE = qr/\[error\] .*zookeeper usable again after (\d+\.\d)s \([^)]*\): (\d+) refused, (\d+) timed out, (\d+) let through meanwhile/;

# --- 1. a closed port ----------------------------------------------------

my $closed = free_port();
my $a = nginx_start(<<"EOF", backend => $be, workers => 2, log_level => 'error');
    zk_hosts 127.0.0.1:$closed;
    zk_session_timeout 3s;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /m { zk_mutex /o/m timeout=500ms; proxy_pass http://%%BACKEND%%; }
    }
EOF

ok(wait_for(sub { lines($a, $UNREACHABLE) >= 2 }, 8),
    'closed port: each worker says that zookeeper is unreachable, '
    . 'with no request at all');
my @said = lines($a, $UNREACHABLE);
like($said[0] // '', qr/unreachable for \d+ms: 127\.0\.0\.1:$closed \(111: Connection refused\); .* zk_lock_fail .*, zookeeper: 127\.0\.0\.1:$closed$/,
    'closed port: the line names the server and the cause, and what '
    . 'happens next');

my $r = $a->get('/m');
is($r->{status}, 503, 'closed port: a request is refused');
like(join("\n", lines($a, qr/refused: no zookeeper connection/)),
    qr/\[error\] .*zk_mutex "\/o\/m" refused: no zookeeper connection \(zookeeper unreachable for \d+\.\ds\)/,
    'closed port: its line refers to the outage');

sleep 2;
is(scalar(lines($a, $UNREACHABLE)), 2,
    'closed port: still one line per worker, seconds later');

# --- 2. ZooKeeper stopped, then started ------------------------------------

my $b = nginx_start(<<'EOF', zk => $zk, backend => $be, workers => 2, log_level => 'error');
    zk_hosts %%ZK%%;
    zk_session_timeout 3s;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /m { zk_mutex /o/b timeout=500ms; proxy_pass http://%%BACKEND%%; }
    }
EOF

ok(wait_for(sub { $b->get('/m')->{status} == 200
                  && $b->get('/m')->{status} == 200 }, 15),
    'stopped: serving before the outage');
is(scalar(lines($b, qr/zookeeper (unreachable|usable)/)), 0,
    'stopped: nothing said of a start that connected at once');

$zk->stop;
ok(wait_for(sub { lines($b, $UNREACHABLE) >= 2 }, 8),
    'stopped: each worker says that zookeeper is unreachable');
like((lines($b, $UNREACHABLE))[0] // '',
    qr/unreachable for \d+ms: (127\.0\.0\.1:\d+ \(\d+: [^)]+\)|no connection to 127\.0\.0\.1:\d+);/,
    'stopped: with the server and the cause');

my $refused = 0;
for (1 .. 6) {
    $refused++ if $b->get('/m')->{status} == 503;
}
is($refused, 6, 'stopped: requests are refused');

$zk->start;
ok(wait_for(sub { lines($b, $USABLE) >= 2 }, 20),
    'started: each worker says that zookeeper is usable again');
my ($n, $out_ok) = (0, 1);
for (lines($b, $USABLE)) {
    my ($secs, $ref, $to, $through) = /$USABLE/;
    $n += $ref;
    $out_ok &&= $secs >= 1 && $secs < 30;
}
is($n, $refused, 'started: the end lines count the refused requests');
ok($out_ok, 'started: and say how long it was out');
is(scalar(lines($b, $UNREACHABLE)), 2, 'started: one outage line a worker');
ok(wait_for(sub { $b->get('/m')->{status} == 200 }, 10),
    'started: serving again');

# --- 3. ZooKeeper hangs -----------------------------------------------------

# 9 s: unreachable after 3 s of silence, holders let go at 6.75 s
my %c = (zk => $zk, backend => $be, workers => 1, log_level => 'error');
my $c = nginx_start(<<'EOF', %c);
    zk_hosts %%ZK%%;
    zk_session_timeout 9s;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /m {
            zk_mutex /o/c timeout=4500ms;
            proxy_pass http://%%BACKEND%%;
        }
        location = /metrics {
            zk_lock_status_page prometheus;
        }
    }
EOF

ok(wait_for(sub { $c->get('/m')->{status} == 200 }, 15),
    'hang: serving before it');
my $holder = http_parallel_bg([ [ $c->port, '/m?sleep=8000&key=c' ] ]);
ok(wait_for(sub { ($be->stats('c')->{inflight} // 0) == 1 }, 5),
    'hang: a request holds the mutex');
my $waiter = http_parallel_bg([ [ $c->port, '/m?key=c2' ] ]);
sleep 0.2;
$zk->pause;
my ($w) = @{ http_parallel_collect($waiter) };
$zk->resume;
is($w->{status}, 503, 'hang: the waiter times out');
like(join("\n", lines($c, qr/not acquired/)),
    qr/\[error\] .*zk_mutex "\/o\/c" not acquired in \d+ms: no answer from zookeeper \(zookeeper unreachable for \d+\.\ds\)/,
    'hang: its line says that zookeeper did not answer, not the cap');
like((lines($c, $UNREACHABLE))[0] // '',
    qr/unreachable for \d+ms: (no answer from 127\.0\.0\.1:\d+ for \d+ms|127\.0\.0\.1:\d+ \(\d+: [^)]+\));/,
    'hang: the outage line names the server that does not answer');
ok(wait_for(sub { lines($c, $USABLE) >= 1 }, 15),
    'hang: usable again once it answers');
my ($to) = ((lines($c, $USABLE))[0] // '') =~ /refused, (\d+) timed out/;
is($to, 1, 'hang: the end line counts the request that timed out');
my $m = $c->get('/metrics')->{body};
like($m, qr/^zk_lock_requests_total\{path="\/o\/c",type="mutex",result="unreachable"\} 1$/m,
    'hang: counted "unreachable" (issue 37, item 4)');
like($m, qr/^zk_lock_requests_total\{path="\/o\/c",type="mutex",result="timeout"\} 0$/m,
    '... not "timeout", which says that the cap is too low');
http_parallel_collect($holder);

# --- 4. a session timeout the server cuts ---------------------------------

my $d = nginx_start(<<'EOF', zk => $zk, backend => $be, workers => 1, log_level => 'warn');
    zk_hosts %%ZK%%;
    zk_session_timeout 10h;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /m { zk_mutex /o/d; proxy_pass http://%%BACKEND%%; }
    }
EOF

ok(wait_for(sub { lines($d, qr/zookeeper granted/) }, 15),
    'cut timeout: said');
like((lines($d, qr/zookeeper granted/))[0] // '',
    qr/\[warn\] .*zk_session_timeout 36000000ms: zookeeper granted 60000ms/,
    'cut timeout: at warn, with what the server granted');

done_testing();
