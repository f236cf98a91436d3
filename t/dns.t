#!/usr/bin/perl
# zk_hosts with host names (issue 17, item 6): the C client is given
# addresses only.  Given names, it would call getaddrinfo() from the
# worker at every connect, and a DNS that does not answer would stop every
# location of the worker meanwhile.
#
#  1. without a resolver, the names are resolved once, when nginx reads
#     its configuration: "localhost:<port>" works, and a worker that
#     reconnects after a ZooKeeper restart resolves nothing (strace of the
#     worker: the connect to ZooKeeper's port, no resolver file opened, no
#     DNS server asked; skipped without strace)
#  2. with "resolver" in the http block, the workers resolve the names
#     with nginx's resolver (a local DNS server, t/lib/dns.py): the session
#     connects to the address it answers; when the DNS server stops
#     answering and ZooKeeper restarts, the worker reconnects to the last
#     addresses while a location without a lock answers at once
#  3. a resolver that never answers from the start: no session, unlocked
#     locations answer at once, gated ones get zk_lock_status at their
#     timeout (zk_lock_fail open: through at once); once it answers, the
#     session starts
#  4. a name that moves (first where no ZooKeeper listens): the worker
#     asks again after a failed round and connects to the new address
#  5. a name that does not resolve fails nginx -t (t/config.t)
#  6. DNS stops answering, then nginx reloads (issue 25, item 5): the new
#     worker starts from the addresses the old one had resolved (kept in
#     shared memory) and connects at once: a gated request gets the lock
#     within its timeout, a zk_lock_fail open one is ACQUIRED, not
#     BYPASSED; so does a worker respawned after a SIGKILL meanwhile

use strict;
use warnings;
use Test::More;
use Time::HiRes qw(time sleep);
use lib 't/lib';
use ZkLock::Test;

require_prereqs(qw(nginx zookeeper kazoo module));

my $zk = zk_start();
my $be = backend_start();
my $port = $zk->port;

my $ng = nginx_start(<<"EOF", backend => $be, workers => 1);
    zk_hosts localhost:$port;
    server {
        listen 127.0.0.1:%%PORT%%;
        add_header X-Lock \$zk_lock_status always;
        location /m {
            zk_mutex /dns/m timeout=10s;
            proxy_pass http://%%BACKEND%%;
        }
    }
EOF

ok(sessions_connected($ng), 'the worker connects');
like($ng->error_log, qr/zookeeper session \S+ connected to 127\.0\.0\.1:$port/,
    'to the address localhost resolved to, read at configuration');
is($ng->get('/m?key=a')->{headers}{'x-lock'}, 'ACQUIRED',
    'a request takes the lock');

SKIP: {
    my ($strace) = grep { -x } map { "$_/strace" } split /:/, $ENV{PATH};
    skip 'no strace', 5 unless $strace;

    my ($worker) = $ng->worker_pids;
    my $out = tempdir('dns') . '/strace.txt';
    my $st = spawn(cmd => [ $strace, '-f', '-p', $worker, '-o', $out,
        '-e', 'trace=openat,open,connect,sendto,sendmmsg' ],
        name => 'strace');
    ok(wait_for(sub { -s $out }, 5) || wait_for(sub { -e $out }, 5),
        'strace is attached to the worker');
    sleep 0.5;

    my $off = length $ng->error_log;
    $zk->restart;
    ok(wait_for(sub {
        substr($ng->error_log, $off) =~ /connected to 127\.0\.0\.1:$port/
    }, 20), 'the worker reconnects after a ZooKeeper restart');
    is($ng->get('/m?key=b')->{headers}{'x-lock'}, 'ACQUIRED',
        'and takes the lock again');

    kill 'INT', $st;
    ZkLock::Test::proc_wait($st, 5);
    my $trace = slurp($out);
    like($trace, qr/connect\(.*htons\($port\)/,
        'the trace saw the reconnect to ZooKeeper');
    my @resolving = grep {
        m{/etc/(?:hosts|resolv\.conf|nsswitch\.conf|gai\.conf|host\.conf)}
            || /htons\(53\)/
    } split /\n/, $trace;
    is_deeply(\@resolving, [], 'the worker opened no resolver file and '
        . 'asked no DNS server')
        or diag join "\n", @resolving[0 .. ($#resolving < 9 ? $#resolving : 9)];
}

$ng->stop;

###############################################################################

# a DNS server on a free port: names from names.json, silent while "mute"
sub dns_start {
    my (%names) = @_;
    my $dir = tempdir('dns-server');
    my $port = free_port();
    open my $fh, '>', "$dir/names.json" or die $!;
    print $fh '{' . join(',', map { qq{"$_":["$names{$_}"]} } keys %names)
        . '}';
    close $fh;
    my $pid = spawn(cmd => [ '/usr/bin/python3', 't/lib/dns.py',
        '--port', $port, '--dir', $dir ], name => 'dns.py',
        log => "$dir/dns.log");
    sleep 0.3;
    return { dir => $dir, port => $port, pid => $pid };
}

sub dns_mute {
    my ($dns, $on) = @_;
    if ($on) { open my $fh, '>', "$dns->{dir}/mute" or die $!; close $fh }
    else     { unlink "$dns->{dir}/mute" }
}

sub resolver_conf {
    my ($dns) = @_;
    return <<"EOF";
    resolver 127.0.0.1:$dns->{port} valid=1s ipv6=off;
    resolver_timeout 1s;
    zk_hosts zk.test:$port;
    server {
        listen 127.0.0.1:%%PORT%%;
        add_header X-Lock \$zk_lock_status always;
        location /m {
            zk_mutex /dns/m timeout=2s;
            proxy_pass http://%%BACKEND%%;
        }
        location /open {
            zk_mutex /dns/o timeout=5s;
            zk_lock_fail open;
            proxy_pass http://%%BACKEND%%;
        }
        location /free {
            return 204;
        }
    }
EOF
}

# the slowest of the requests to /free made for $seconds, one every 50 ms
sub free_latency {
    my ($ng, $seconds) = @_;
    my $max = 0;
    my $end = time + $seconds;
    while (time < $end) {
        my $t = time;
        my $r = $ng->get('/free');
        my $d = time - $t;
        $max = $d if $d > $max;
        return 99 if ($r->{status} // 0) != 204;
        sleep 0.05;
    }
    return $max;
}

subtest 'with a resolver: names resolved without blocking' => sub {
    my $dns = dns_start('zk.test' => '127.0.0.1');
    my $rn = nginx_start(resolver_conf($dns), backend => $be, workers => 1);
    ok(sessions_connected($rn), 'the worker connects to what zk.test '
        . 'resolves to');
    like($rn->error_log, qr/connected to 127\.0\.0\.1:$port/,
        "... 127.0.0.1:$port");
    is($rn->get('/m?key=r1')->{headers}{'x-lock'}, 'ACQUIRED',
        'a request takes the lock');

    dns_mute($dns, 1);
    my $off = length $rn->error_log;
    $zk->stop;
    my $max = free_latency($rn, 3);
    $zk->start;
    my $m2 = free_latency($rn, 2);
    $max = $m2 if $m2 > $max;
    note sprintf 'DNS mute, ZooKeeper down then up: /free at most %.0f ms',
        $max * 1000;
    cmp_ok($max, '<', 0.5, 'a location without a lock answers at once '
        . 'meanwhile (< 500 ms; 100 ms expected)');
    ok(wait_for(sub {
        ($rn->get('/m?key=r2')->{headers}{'x-lock'} // '') eq 'ACQUIRED'
    }, 20, 0.3), 'the worker reconnects to the last addresses');
    like(substr($rn->error_log, $off),
        qr/could not resolve "zk\.test" of zk_hosts \(\d+: [^)]+\), its last addresses are kept/,
        'the failed resolution is logged, its addresses kept');
    $rn->stop;
    kill 'TERM', $dns->{pid};
};

subtest 'a resolver that never answers from the start' => sub {
    my $dns = dns_start('zk.test' => '127.0.0.1');
    dns_mute($dns, 1);
    my $rn = nginx_start(resolver_conf($dns), backend => $be, workers => 1);
    my $max = free_latency($rn, 2);
    note sprintf 'no answer from DNS: /free at most %.0f ms', $max * 1000;
    cmp_ok($max, '<', 0.5, 'a location without a lock answers at once');
    my $t = time;
    my $r = $rn->get('/m?key=r3');
    is($r->{status}, 503, 'a gated one gets zk_lock_status');
    cmp_ok(time - $t, '<', 4, '... at its 2 s timeout');
    unlike($rn->error_log, qr/zookeeper session \S+ connected/,
        'no session without an address');
    $t = time;
    $r = $rn->get('/open?key=r3o');
    is($r->{headers}{'x-lock'}, 'BYPASSED',
        'zk_lock_fail open: through, as when ZooKeeper is down');
    cmp_ok(time - $t, '<', 1, '... at once, not at its 5 s timeout');

    # issue 37, item 1: the outage names its cause
    ok(wait_for(sub { $rn->error_log =~ /\[error\] .*zookeeper unreachable for \d+ms: no address for zk_hosts from the resolver;/ }, 5),
        'the outage is said at error, with its cause: no address')
        or diag $rn->error_log;

    dns_mute($dns, 0);
    ok(sessions_connected(15, $rn), 'the session starts once DNS answers');
    is($rn->get('/m?key=r4')->{headers}{'x-lock'}, 'ACQUIRED',
        'and takes the lock');
    like($rn->error_log, qr/\[error\] .*zookeeper usable again after \d+\.\ds \(127\.0\.0\.1:\d+\): 1 refused, 0 timed out, 1 let through meanwhile/,
        'and its end, with the requests it refused and let through');
    $rn->stop;
    kill 'TERM', $dns->{pid};
};

subtest 'a name that moves: followed when the worker reconnects' => sub {
    # first an address where no ZooKeeper listens, then ZooKeeper's
    my $dns = dns_start('zk.test' => '127.0.0.3');
    my $rn = nginx_start(resolver_conf($dns), backend => $be, workers => 1);
    ok(wait_for(sub { $rn->error_log =~ /127\.0\.0\.3/ }, 10),
        'the worker tries the address first answered')
        or diag $rn->error_log;
    open my $fh, '>', "$dns->{dir}/names.json" or die $!;
    print $fh '{"zk.test":["127.0.0.1"]}';
    close $fh;
    ok(sessions_connected(20, $rn), 'and connects once zk.test moves to '
        . 'ZooKeeper, asked again after a failed round');
    like($rn->error_log, qr/zk_hosts "zk\.test:$port" now resolve to "127\.0\.0\.1:$port"/,
        'the new addresses are logged');
    is($rn->get('/m?key=r5')->{headers}{'x-lock'}, 'ACQUIRED',
        'a request takes the lock');
    $rn->stop;
    kill 'TERM', $dns->{pid};
};

subtest 'DNS mute, then a reload and a respawn: the last addresses' => sub {
    my $dns = dns_start('zk.test' => '127.0.0.1');
    my $rn = nginx_start(resolver_conf($dns), backend => $be, workers => 1);
    ok(sessions_connected($rn), 'the worker connects to what zk.test '
        . 'resolves to');
    is($rn->get('/m?key=r6')->{headers}{'x-lock'}, 'ACQUIRED',
        'a request takes the lock');

    dns_mute($dns, 1);
    my $off = length $rn->error_log;
    ok($rn->reload, 'nginx reloads while DNS does not answer');

    my $t = time;
    my $r = $rn->get('/m?key=r7', timeout => 10);
    is($r->{status}, 200, 'a gated request on the new worker gets the lock')
        or diag substr($rn->error_log, $off);
    is($r->{headers}{'x-lock'}, 'ACQUIRED', '... ACQUIRED');
    cmp_ok(time - $t, '<', 2, '... within its 2 s timeout');
    is($rn->get('/open?key=r7o', timeout => 10)->{headers}{'x-lock'},
        'ACQUIRED', 'zk_lock_fail open: protected, not BYPASSED');
    like(substr($rn->error_log, $off),
        qr/zk_hosts "zk\.test:$port" start from the last known addresses "127\.0\.0\.1:$port"/,
        'the new worker says where it starts from');
    ok(wait_for(sub { substr($rn->error_log, $off) =~
        /could not resolve "zk\.test" of zk_hosts \(\d+: [^)]+\), its last addresses are kept/
    }, 10), 'it asks DNS all the same; no answer, the addresses are kept');

    my ($victim) = $rn->worker_pids;
    $off = length $rn->error_log;
    kill 'KILL', $victim or die "kill: $!";
    $rn->expect_log(
        qr/\[alert\] \d+#\d+: worker process $victim exited on signal 9$/);
    ok(wait_for(sub {
        my @w = $rn->worker_pids;
        @w == 1 && $w[0] != $victim
    }, 10), 'a worker SIGKILLed is respawned');
    $t = time;
    $r = $rn->get('/m?key=r8', timeout => 10);
    is($r->{headers}{'x-lock'}, 'ACQUIRED',
        'the respawned worker takes the lock, DNS still mute')
        or diag substr($rn->error_log, $off);
    cmp_ok(time - $t, '<', 2, '... within its 2 s timeout');
    is($rn->get('/open?key=r8o', timeout => 10)->{headers}{'x-lock'},
        'ACQUIRED', 'zk_lock_fail open: ACQUIRED');
    like(substr($rn->error_log, $off),
        qr/zk_hosts "zk\.test:$port" start from the last known addresses/,
        'it started from the last known addresses too');

    $rn->stop;
    kill 'TERM', $dns->{pid};
};

done_testing();
