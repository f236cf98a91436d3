#!/usr/bin/perl
# The stream layer (ngx_stream_zk_lock_module): a TCP connection waits
# where its content handler would start, nothing sent upstream, until it
# holds its locks, and holds them for its life.  The backend is the HTTP
# one: an HTTP/1.0 request through the stream proxy is one connection, so
# its count in flight is the count of connections in flight.
#
#  1. nginx -t: the lock directives in "stream" are checked as in "http"
#  2. two nginx x 2 workers on one path, 3 x N clients: peak exactly N,
#     served in arrival order; a client over a short timeout is closed at
#     it, with TIMEOUT in the log, and leaves no node
#  3. a client that goes while waiting frees its node at once (kazoo)
#  4. max_waiting=: a connection over it is closed at once (REJECTED)
#  5. a Curator InterProcessSemaphore, an HTTP location and stream servers
#     on one path: never more than N together
#  6. (t/stream-faults.t: a partition under zk_lock_lost abort, and under
#     zk_lock_fail local=)
#  7. a reload under load: every connection served, never more than N
#  8. keep=: connections on kept leases make no ZooKeeper write (the
#     instance's: t/stream-sessions.t); with more workers than leases, the
#     bound holds
#  9. a UDP server: a datagram's session waits as a connection does
# 10. zk_lock_fail open / closed / local= without ZooKeeper (local leases:
#     one bound with HTTP on the same path); a path with variables;
#     $ssl_preread_server_name in a path, and a server chosen by its name
#     (nginx 1.25.5): the lock waits after the preread phase
#  the HTTP status page shows the stream locks (layer="stream"); the stream
#  module loaded before the HTTP one
#  no [alert]/[crit]/[emerg] line, no crashed worker (the harness)

use strict;
use warnings;
use Test::More;
use Time::HiRes qw(time sleep);
use IO::Socket::INET;
use IO::Select;
use lib 't/lib';
use ZkLock::Test;
use ZkLock::Curator;
use ZkLock::Test::Stream;

require_prereqs(qw(nginx zookeeper kazoo module stream));
curator_prereqs();

my $zk = zk_start();
my $be = backend_start();

my $HTTP = stream_http();
my $LOG = stream_log_conf();

# the server's last zxid: moves with every write
sub zxid {
    my ($z) = (zk_4lw($zk->port, 'srvr') // '') =~ /Zxid: 0x([0-9a-f]+)/;
    return defined $z ? hex $z : undef;
}

###############################################################################

subtest 'nginx -t checks the lock directives in stream' => sub {
    my @cases = (
        [ 'zk_semaphore /st/x timeout=1s;',
          qr/"zk_semaphore" must have "leases" parameter/ ],
        [ 'zk_mutex /st/x color=red;', qr/invalid parameter "color=red"/ ],
        [ 'zk_mutex st/x;', qr/lock path "st\/x" must be absolute/ ],
        [ 'zk_mutex /st/x; zk_lock_fail local=0;',
          qr/invalid number of local leases "local=0"/ ],
        [ 'zk_mutex /st/x reentrant=off;',
          qr/"reentrant=off" is not for "stream"/ ],
        [ 'zk_semaphore /st/x leases=2 keep=1s protocol=v2;',
          qr/"keep" is not for "protocol=v2"/ ],
        [ 'zk_rwlock /st/x write; zk_rwlock /st/x read;',
          qr/lock path "\/st\/x" is duplicate: a connection takes a lock once/ ],
        # issue 36, item 5: the checks of "http"
        [ 'zk_mutex /st/x; zk_mutex /st/x timeout=1s;',
          qr/lock path "\/st\/x" is duplicate/ ],
        [ 'zk_semaphore /st/x leases=100000000000;',
          qr/"leases=100000000000" is more than 2147483647/ ],
        [ 'zk_mutex /st/x weight=2;',
          qr/"weight" is only for "zk_semaphore"/ ],
        [ 'zk_mutex /' . 'a' x 1100 . ';',
          qr{lock path is 1101 bytes, longer than the 1024 that a stream lock path may have: "/a{20,200}\.\.\.a+" in \S+:\d+$}m ],
    );
    for my $c (@cases) {
        my ($rc, $out) = nginx_test_conf($HTTP, dummy => 1,
            stream => stream_conf('%%ZK%%', free_port() => $c->[0]));
        isnt($rc, 0, "refused: $c->[0]");
        like($out, $c->[1], '... naming the problem');
    }

    # one path, one recipe, in both blocks: the same nodes
    my ($rc, $out) = nginx_test_conf($HTTP, dummy => 1,
        stream => stream_conf('%%ZK%%', free_port() =>
            'zk_semaphore /st/mix leases=5;'));
    isnt($rc, 0, 'a stream lock of another recipe than http\'s is refused');
    like($out, qr/lock path "\/st\/mix" is already another kind of lock/,
        '... naming the problem');
    ($rc, $out) = nginx_test_conf($HTTP, dummy => 1,
        stream => stream_conf('%%ZK%%', free_port() =>
            'zk_mutex /st/two;', free_port() => 'zk_rwlock /st/two read;'));
    isnt($rc, 0, 'two stream servers with other recipes are refused');

    ($rc, $out) = nginx_test_conf($HTTP, dummy => 1, stream =>
        "    server { listen 127.0.0.1:1; zk_mutex /st/x; "
        . "proxy_pass 127.0.0.1:2; }\n");
    isnt($rc, 0, 'a lock without zk_hosts in stream is refused');
    like($out, qr/"zk_mutex" is used but "zk_hosts" is not set in "stream"/,
        '... naming the problem');

    ($rc, $out) = nginx_test_conf($HTTP, dummy => 1,
        stream => stream_conf('%%ZK%%', free_port() =>
            'zk_semaphore /st/x/$server_port leases=2 keep=1s;'));
    is($rc, 0, 'a good configuration passes') or diag $out;
};

###############################################################################

my ($P_SEM, $P_SHORT, $P_MAXW, $P_VAR, $P_MIX) = map { free_port() } 1 .. 5;

my %servers = (
    $P_SEM   => 'zk_semaphore /st/db leases=3 timeout=30s;',
    $P_SHORT => 'zk_mutex /st/short timeout=1s;',
    $P_MAXW  => 'zk_mutex /st/maxw max_waiting=1 timeout=30s;',
    $P_VAR   => 'zk_semaphore /st/var/$server_port leases=1;',
    $P_MIX   => 'zk_semaphore /st/mix leases=3 timeout=30s;',
);

# one instance owns the ports; the other has the same servers on others
my %servers2 = map { free_port() => $_ } values %servers;
my %port2 = map { my $p = $_; ($p => (grep { $servers2{$_} eq $servers{$p} }
    keys %servers2)[0]) } keys %servers;

my @fleet = (
    nginx_start($HTTP, zk => $zk, backend => $be,
        stream => stream_conf('%%ZK%%', %servers)),
    nginx_start($HTTP, zk => $zk, backend => $be,
        stream => stream_conf('%%ZK%%', %servers2)),
);

ok(sessions_connected(@fleet), 'every worker has a session');

subtest 'two nginx x 2 workers, 3 x N clients: peak N, in arrival order'
    => sub {
    $be->reset;
    my $n = 9;
    my $res = http_parallel([ map {
        [ $_ % 2 ? $P_SEM : $port2{$P_SEM},
          "/c?key=fleet&sleep=600&id=$_" ] } 1 .. $n ],
        stagger => 0.1, timeout => 60);

    is(scalar(grep { $_->{status} == 200 } @$res), $n,
        'every connection served');
    my $st = $be->stats('fleet');
    is($st->{max}, 3, 'peak exactly N = 3 at the backend');
    is_deeply($st->{order}, [ 1 .. $n ], 'served in arrival order (FIFO)');

    my $log = join '', map { stream_log($_) } @fleet;
    my $acq = () = $log =~ /^\d+ 200 ACQUIRED \d+ \d+ \/st\/db\//mg;
    is($acq, $n, 'each logged 200 ACQUIRED, with a token and its node');

    no_ephemerals($zk, '/st/db', 'the fleet');

    # the HTTP status page shows the stream locks, counted fleet-wide by
    # Prometheus as the sum over the instances
    my $acquired = 0;
    for my $ng (@fleet) {
        my $prom = $ng->get('/zk-status?format=prometheus')->{body};
        like($prom, qr/^zk_lock_held\{path="\/st\/db",type="semaphore",layer="stream"\} 0$/m,
            'Prometheus: zk_lock_held of the stream lock, layer="stream"');
        $acquired += $1 if $prom =~ /^zk_lock_requests_total\{path="\/st\/db",type="semaphore",layer="stream",result="acquired"\} (\d+)$/m;
        like($ng->get('/zk-status')->{body},
            qr/"stream":\[.*\{"path":"\/st\/db","type":"semaphore","held":0,"waiting":0,"acquired":\d+/,
            'JSON: the stream locks under "stream"');
    }
    is($acquired, $n, 'the acquisitions of both instances add up to 9');
};

subtest 'a client over the timeout is closed at it, without a node' => sub {
    $be->reset;
    my $hold = http_parallel_bg([ [ $P_SHORT, '/c?key=short&sleep=3000' ] ],
        timeout => 30);
    ok(wait_for(sub { $be->stats('short')->{inflight} == 1 }, 10),
        'a connection holds the mutex');

    like($fleet[0]->get('/zk-status?format=prometheus')->{body},
        qr/^zk_lock_held\{path="\/st\/short",type="mutex",layer="stream"\} 1$/m,
        'the status page shows it held');

    my $t0 = time;
    my $r = http_get($port2{$P_SHORT}, '/c?key=short&id=late', timeout => 10);
    my $took = time - $t0;
    is($r->{status}, 0, 'the late one is closed without an answer');
    cmp_ok($took, '>=', 0.8, '... at its timeout (1 s)');
    cmp_ok($took, '<', 2.5, '... not much later');
    like(stream_log($fleet[1]), qr/^$port2{$P_SHORT} 503 TIMEOUT \d+ - -$/m,
        '... logged 503 TIMEOUT, no token, no node');
    like($fleet[1]->error_log,
        qr/\[error\].*zk_mutex "\/st\/short" not acquired in \d+ms/,
        '... and at error in error_log');

    is(http_parallel_collect($hold, 30)->[0]{status}, 200,
        'the holder is served');
    is($be->stats('short')->{count}, 1, 'the late one never reached it');
    like($fleet[1]->get('/zk-status?format=prometheus')->{body},
        qr/^zk_lock_requests_total\{path="\/st\/short",type="mutex",layer="stream",result="timeout"\} 1$/m,
        'its timeout is counted');
    no_ephemerals($zk, '/st/short', 'after a timeout');
};

subtest 'a client gone while waiting frees its node at once' => sub {
    $be->reset;
    my $hold = http_parallel_bg([ [ $P_SHORT, '/c?key=gone&sleep=2500' ] ],
        timeout => 30);
    ok(wait_for(sub { $be->stats('gone')->{inflight} == 1 }, 10),
        'a connection holds the mutex');

    my $s = open_client($port2{$P_SHORT}, '/c?key=gone&id=gone');
    ok(wait_for(sub { zk_children($zk, '/st/short') == 2 }, 5),
        'a second connection waits in ZooKeeper');
    my $t0 = time;
    close $s;
    ok(wait_for(sub { zk_children($zk, '/st/short') == 1 }, 5),
        'its node goes once it closed');
    cmp_ok(time - $t0, '<', 0.7, '... at once, not at the timeout');
    like($fleet[1]->error_log,
        qr/client closed the connection while waiting for zk_mutex "\/st\/short"/,
        '... and the log says why');
    like(stream_log($fleet[1]), qr/^$port2{$P_SHORT} 499 GONE /m,
        '... logged 499 GONE');

    http_parallel_collect($hold, 30);
    is($be->stats('gone')->{count}, 1, 'the one that left never reached it');
};

subtest 'max_waiting=1: the next connection is closed at once' => sub {
    $be->reset;
    my $hold = http_parallel_bg([ [ $P_MAXW, '/c?key=maxw&sleep=2000' ] ],
        timeout => 30);
    ok(wait_for(sub { $be->stats('maxw')->{inflight} == 1 }, 10),
        'a connection holds the mutex');
    # 2 workers: of 3 waiters, 2 are in one of them; a round trip apart,
    # as one within the first round trip of its worker's queue waits for
    # nobody yet (see max_waiting= in the README)
    my @w = map { my $c = open_client($P_MAXW, "/c?key=maxw&id=w$_");
                  sleep 0.05; $c } 1 .. 3;
    my $ok = wait_for(sub { stream_log($fleet[0]) =~ /^$P_MAXW 503 REJECTED/m },
        5);
    ok($ok, 'a second waiter in a worker is refused at once');
    close $_ for @w;
    http_parallel_collect($hold, 30);
    no_ephemerals($zk, '/st/maxw', 'after max_waiting');
};

subtest 'Curator, HTTP and stream on one path: never more than N' => sub {
    $be->reset;
    my $c = curator($zk, 'semaphore', '/st/mix', 1500, 3);
    my $acq = curator_expect($c, qr/^ACQUIRED (\d+)/);
    ok($acq, 'Curator holds one of 3 leases');

    # 4 HTTP requests and 4 stream connections, over both instances
    my $res = http_parallel([ map {
        [ $fleet[$_ % 2]->port, "/mix?key=mix&sleep=700&rec=1&id=h$_" ],
        [ $_ % 2 ? $port2{$P_MIX} : $P_MIX,
          "/s?key=mix&sleep=700&rec=1&id=s$_" ] } 1 .. 4 ], timeout => 60);
    my $rel = curator_expect($c, qr/^RELEASED (\d+)/);
    ok($rel, 'Curator released');

    is(scalar(grep { $_->{status} == 200 } @$res), scalar @$res,
        'every HTTP request and stream connection served');

    my $calls = $be->calls->{mix} // [];
    is(scalar @$calls, scalar @$res, 'each reached the backend');
    # Curator holds from ACQUIRED until it starts to release, 1500 ms on:
    # its RELEASED comes once its delete is answered, and nginx may hear
    # of the delete, take the lease and reach the backend before that
    my $worst = 0;
    for my $t (map { $_->[0] } @$calls) {
        my $n = grep { $_->[0] <= $t && $t < $_->[1] } @$calls;
        $n++ if $t * 1000 >= $acq && $t * 1000 < $acq + 1500;
        $worst = $n if $n > $worst;
    }
    cmp_ok($worst, '<=', 3, 'Curator + nginx never above 3 at once');
    is($be->stats('mix')->{max}, 3, 'nginx alone reached 3 after Curator');
    no_ephemerals($zk, '/st/mix', 'the mixed path');
};

subtest 'a path with variables ($server_port)' => sub {
    my $r = http_get($P_VAR, '/c?key=var');
    is($r->{status}, 200, 'served');
    like(stream_log($fleet[0]), qr{^$P_VAR 200 ACQUIRED \d+ \d+ /st/var/$P_VAR/_c_}m,
        'the node is below the port\'s path');
    no_ephemerals($zk, '/st/var', 'variables');
};

$_->stop for @fleet;

###############################################################################

subtest 'a reload under load: all served, never more than N' => sub {
    my $port = free_port();
    my $ng = nginx_start($HTTP, zk => $zk, backend => $be,
        stream => stream_conf('%%ZK%%',
            $port => 'zk_semaphore /st/reload leases=2 timeout=30s;'));
    ok(sessions_connected($ng), 'connected');
    $be->reset;
    my $bg = http_parallel_bg([ map { [ $port, "/c?key=reload&sleep=300" ] }
        1 .. 24 ], stagger => 0.05, timeout => 60);
    sleep 0.5;
    ok($ng->reload, 'reloaded while connections wait and hold');
    my $res = http_parallel_collect($bg, 90);
    is(scalar(grep { $_->{status} == 200 } @$res), 24, 'every one served');
    cmp_ok($be->stats('reload')->{max}, '<=', 2, 'never more than 2');
    no_ephemerals($zk, '/st/reload', 'after the reload');
    $ng->stop;
};

###############################################################################

subtest 'keep=: connections on kept leases write nothing to ZooKeeper' => sub {
    my $port = free_port();
    my $ng = nginx_start($HTTP, zk => $zk, backend => $be,
        stream => stream_conf('%%ZK%%',
            $port => 'zk_semaphore /st/keep leases=2 keep=5s timeout=10s;'));
    ok(sessions_connected($ng), 'connected');

    # each worker keeps a lease once it has served on one
    http_get($port, "/c?key=keep&id=warm$_") for 1 .. 10;
    sleep 0.3;

    $be->reset;
    my $z0 = zxid();
    my @r = map { http_get($port, "/c?key=keep&id=$_") } 1 .. 20;
    my $z1 = zxid();
    is(scalar(grep { $_->{status} == 200 } @r), 20, '20 connections served');
    ok(defined $z0 && defined $z1, 'read the zxid');
    is($z1, $z0, 'ZooKeeper wrote nothing meanwhile: zxid unchanged');
    # the instance's leases are worker 0's: one that the other worker
    # keeps is recalled first, a round trip
    my @tail = (split /\n/, stream_log($ng))[-20 .. -1];
    is(scalar(grep { /^$port 200 ACQUIRED (\d+) \d+ \/st\/keep\//
                     && $1 < 50 } @tail), 20,
        '... each ACQUIRED at once (or after a recall), with a token')
        or diag(join "\n", @tail);
    $ng->stop;
    no_ephemerals($zk, '/st/keep', 'once nginx stopped');
};

###############################################################################

subtest 'keep= with more workers than leases: the bound holds' => sub {
    my $port = free_port();
    my $ng = nginx_start($HTTP, zk => $zk, backend => $be, workers => 4,
        stream => stream_conf('%%ZK%%',
            $port => 'zk_semaphore /st/few leases=1 keep=1s timeout=60s;'));
    ok(sessions_connected($ng), '4 workers connected');
    $be->reset;
    my $res = http_parallel([ map { [ $port, "/c?key=few&sleep=50&id=$_" ] }
        1 .. 30 ], stagger => 0.01, timeout => 90);
    is(scalar(grep { $_->{status} == 200 } @$res), 30,
        '30 connections over 4 workers on 1 lease: all served');
    is($be->stats('few')->{max}, 1, 'never two at once');
    $ng->stop;
    no_ephemerals($zk, '/st/few', 'once nginx stopped');
};

###############################################################################

# The two modules are two shared objects, each with the core: loaded in
# either order, the second one's core calls bind to the first one's copy
# (nginx loads modules RTLD_GLOBAL), and one path counts both layers

SKIP: {
    skip 'the modules are built into nginx', 1 if module_path() eq '';

subtest 'the stream module loaded before the HTTP one' => sub {
    my $so = module_path();
    (my $sso = $so) =~ s/ngx_http_zk_lock_module/ngx_stream_zk_lock_module/;
    my $port = free_port();
    my $ng = nginx_start(<<'EOF', zk => $zk, backend => $be, no_module => 1,
    zk_hosts %%ZK%%;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /h {
            zk_semaphore /st/order leases=2 keep=1s timeout=30s;
            proxy_pass http://%%BACKEND%%;
        }
    }
EOF
        main_conf => "load_module $sso;\nload_module $so;\n",
        stream => stream_conf('%%ZK%%', $port =>
            'zk_semaphore /st/order leases=2 keep=1s timeout=30s;'));
    ok(sessions_connected($ng), 'connected');
    $be->reset;
    my $res = http_parallel([ map {
        [ $_ % 2 ? $ng->port : $port, "/h?key=order&sleep=200&id=$_" ] }
        1 .. 12 ], timeout => 60);
    is(scalar(grep { $_->{status} == 200 } @$res), 12,
        'HTTP requests and stream connections served');
    is($be->stats('order')->{max}, 2, 'never more than 2 of both layers');
    $ng->stop;
    no_ephemerals($zk, '/st/order', 'once nginx stopped');
};
}

###############################################################################

# a TLS ClientHello naming $host (SNI): all that ssl_preread reads
sub client_hello {
    my ($host) = @_;
    my $name = pack('C n', 0, length $host) . $host;
    my $list = pack('n', length $name) . $name;
    my $sni = pack('n n', 0, length $list) . $list;     # server_name
    my $body = pack('n', 0x0303) . ("\x11" x 32) . "\x00"
        . pack('n n', 2, 0x002f) . "\x01\x00" . pack('n', length $sni) . $sni;
    my $hs = "\x01" . substr(pack('N', length $body), 1) . $body;
    return "\x16\x03\x01" . pack('n', length $hs) . $hs;
}

sub open_tls_client {
    my ($port, $host) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port,
        Proto => 'tcp', Timeout => 5) or die "connect $port: $!";
    $s->autoflush(1);
    print $s client_hello($host);
    return $s;
}

my $V = `'$ZkLock::Test::NGINX' -V 2>&1`;

SKIP: {
    skip 'nginx has no stream_ssl_preread_module', 1
        unless $V =~ /--with-stream_ssl_preread_module/;

subtest '$ssl_preread_server_name in a path: locks per name' => sub {
    # a sink: nginx connects upstream, and nothing answers
    my $sink = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0,
        Listen => 64, Proto => 'tcp') or die "sink: $!";
    my ($port, $vport) = (free_port(), free_port());
    my $sinkport = $sink->sockport;
    my ($maj, $min, $pat) = $V =~ m{nginx/(\d+)\.(\d+)\.(\d+)};
    my $named = $maj * 1e6 + $min * 1e3 + $pat >= 1_025_005;

    # nginx 1.25.5 chose a stream server by its name: each has its lock
    my $vservers = !$named ? '' : join '', map { <<"EOF" } qw(a b);
    server {
        listen 127.0.0.1:$vport;
        server_name $_.example;
        ssl_preread on;
        zk_mutex /st/vs/$_ timeout=30s;
        proxy_pass 127.0.0.1:$sinkport;
    }
EOF
    my $ng = nginx_start(<<'EOF', zk => $zk, backend => $be, workers => 1,
    server { listen 127.0.0.1:%%PORT%%; location / { return 204; } }
EOF
        stream => "    zk_hosts %%ZK%%;\n$LOG" . <<"EOF" . $vservers);
    server {
        listen 127.0.0.1:$port;
        ssl_preread on;
        zk_mutex /st/sni/\$ssl_preread_server_name timeout=30s;
        proxy_pass 127.0.0.1:$sinkport;
    }
EOF
    ok(sessions_connected($ng), 'connected');

    my $a1 = open_tls_client($port, 'a.example');
    ok(wait_for(sub { zk_children($zk, '/st/sni/a.example') == 1 }, 5),
        'a.example: the lock is below its name');
    my $a2 = open_tls_client($port, 'a.example');
    ok(wait_for(sub { zk_children($zk, '/st/sni/a.example') == 2 }, 5),
        'a second a.example waits behind it');
    my $b1 = open_tls_client($port, 'b.example');
    ok(wait_for(sub { zk_children($zk, '/st/sni/b.example') == 1 }, 5),
        'b.example has a lock of its own');
    sleep 1;
    close $a1;
    ok(wait_for(sub { zk_children($zk, '/st/sni/a.example') == 1 }, 5),
        'the first a.example gone, the second holds');
    close $_ for $a2, $b1;
    ok(wait_for(sub { (() = stream_log($ng) =~ /^$port /mg) == 3 }, 5),
        'three connections logged');
    my $log = stream_log($ng);
    my @w = map { [ /^$port \d+ ACQUIRED (\d+) \d+ (\S+)/ ] }
        grep { /^$port / } split /\n/, $log;
    is(scalar(grep { @$_ } @w), 3, 'each ACQUIRED, with its node');
    is(scalar(grep { @$_ && $_->[0] >= 900
        && $_->[1] =~ m{^/st/sni/a\.example/} } @w), 1,
        'the second a.example waited for the first (at least 0.9 s)');
    is(scalar(grep { @$_ && $_->[0] < 500
        && $_->[1] =~ m{^/st/sni/b\.example/} } @w), 1,
        'b.example did not wait');

    SKIP: {
        skip 'nginx before 1.25.5 has no server_name in stream', 2
            unless $named;
        my @c = map { open_tls_client($vport, $_) } qw(a.example b.example);
        ok(wait_for(sub { zk_children($zk, '/st/vs/a') == 1
            && zk_children($zk, '/st/vs/b') == 1 }, 5),
            'a server chosen by name takes its own lock');
        close $_ for @c;
        ok(wait_for(sub { zk_children($zk, '/st/vs/a') == 0 }, 5),
            '... and gives it back');
    }
    $ng->stop;
    close $sink;
    no_ephemerals($zk, '/st/sni', 'SNI paths');
};
}

###############################################################################

subtest 'a UDP server: a session waits, and its datagram goes on' => sub {
    my $sink = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0,
        Proto => 'udp') or die "sink: $!";
    my ($port, $sinkport) = (free_port(), $sink->sockport);
    my $ng = nginx_start(<<'EOF', zk => $zk, backend => $be, workers => 1,
    server { listen 127.0.0.1:%%PORT%%; location / { return 204; } }
EOF
        stream => "    zk_hosts %%ZK%%;\n$LOG" . <<"EOF");
    server {
        listen 127.0.0.1:$port udp;
        zk_mutex /st/udp timeout=30s;
        proxy_pass 127.0.0.1:$sinkport;
        proxy_timeout 1s;
    }
EOF
    ok(sessions_connected($ng), 'connected');

    my @c = map { IO::Socket::INET->new(PeerAddr => '127.0.0.1',
        PeerPort => $port, Proto => 'udp') or die "udp: $!" } 1 .. 2;
    $c[0]->send('one');
    ok(wait_for(sub { zk_children($zk, '/st/udp') == 1 }, 5),
        'a datagram\'s session holds the mutex');
    $c[1]->send('two');
    ok(wait_for(sub { zk_children($zk, '/st/udp') == 2 }, 5),
        'another client\'s waits behind it');

    my (%got, $buf);
    my $sel = IO::Select->new($sink);
    my $t0 = time;
    while (keys %got < 2 && time - $t0 < 10) {
        next unless $sel->can_read(0.2);
        $sink->recv($buf, 64);
        $got{$buf} = 1;
    }
    ok($got{one} && $got{two}, 'both datagrams reached the upstream');
    ok(wait_for(sub { (() = stream_log($ng) =~ /^$port 200 ACQUIRED /mg)
        == 2 }, 5), 'both logged 200 ACQUIRED');
    my @waits = sort { $a <=> $b }
        stream_log($ng) =~ /^$port 200 ACQUIRED (\d+) /mg;
    cmp_ok($waits[-1] // 0, '>=', 500,
        '... the second once the first session ended (proxy_timeout 1s)');
    $ng->stop;
    no_ephemerals($zk, '/st/udp', 'UDP');
};

subtest 'zk_lock_fail local= without ZooKeeper: one bound with HTTP' => sub {
    my $port = free_port();
    my $nowhere = '127.0.0.1:' . free_port();
    my $ng = nginx_start(<<"EOF", zk => $zk, backend => $be,
    zk_hosts $nowhere;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /loc {
            zk_semaphore /st/loc leases=5 timeout=30s;
            zk_lock_fail local=2;
            proxy_pass http://%%BACKEND%%;
        }
        location = /zk-status { zk_lock_status_page; }
    }
EOF
        stream => stream_conf($nowhere, $port =>
            'zk_semaphore /st/loc leases=5 timeout=30s; '
            . 'zk_lock_fail local=2;'));
    ok(wait_for(sub { $ng->error_log =~ /connect|refused|failed/i }, 10),
        'the workers tried ZooKeeper, in vain');
    sleep 1;

    $be->reset;
    my $res = http_parallel([ map {
        [ $_ % 2 ? $ng->port : $port, "/loc?key=loc&sleep=400&id=$_" ] }
        1 .. 8 ], timeout => 60);
    is(scalar(grep { $_->{status} == 200 } @$res), 8,
        'HTTP requests and stream connections all served');
    is($be->stats('loc')->{max}, 2,
        'never more than the 2 local leases, both layers together');
    my $n = () = stream_log($ng) =~ /^$port 200 LOCAL \d+ - -$/mg;
    is($n, 4, 'each connection logged 200 LOCAL');
    like($ng->error_log,
        qr/\[error\].*zk_semaphore "\/st\/loc" passed with a local lease: no zookeeper connection/,
        '... and the error log says so');
    like($ng->get('/zk-status?format=prometheus')->{body},
        qr/^zk_lock_requests_total\{path="\/st\/loc",type="semaphore",layer="stream",result="local"\} 4$/m,
        'the local leases are counted');
    $ng->stop;
};

subtest 'zk_lock_fail open and closed without ZooKeeper' => sub {
    my ($open, $closed) = (free_port(), free_port());
    my $ng = nginx_start(<<'EOF', zk => $zk, backend => $be, workers => 1,
    server {
        listen 127.0.0.1:%%PORT%%;
        location = /zk-status { zk_lock_status_page; }
    }
EOF
        stream => stream_conf('127.0.0.1:' . free_port(),
            $open => 'zk_mutex /st/fo timeout=5s; zk_lock_fail open;',
            $closed => 'zk_mutex /st/fc timeout=5s;'));
    ok(wait_for(sub { $ng->error_log =~ /connect|refused|failed/i }, 10),
        'the worker tried ZooKeeper, in vain');
    sleep 1;

    my $r = http_get($open, '/c?key=fo');
    is($r->{status}, 200, 'fail open: the connection is let through');
    like(stream_log($ng), qr/^$open 200 BYPASSED /m, '... logged BYPASSED');

    my $t0 = time;
    $r = http_get($closed, '/c?key=fc', timeout => 10);
    is($r->{status}, 0, 'fail closed: the connection is closed');
    cmp_ok(time - $t0, '<', 1, '... at once, not at its timeout');
    like(stream_log($ng), qr/^$closed 503 ERROR /m, '... logged 503 ERROR');
    is($be->stats('fc')->{count}, 0, '... and never reached the backend');

    my $json = $ng->get('/zk-status')->{body};
    like($json, qr/"locks":\[\],"stream":\[/,
        'a status page without HTTP locks shows the stream ones');
    like($json, qr/\{"path":"\/st\/fo","type":"mutex","held":0,"waiting":0,"acquired":0,"timeout":0,"error":0,"bypassed":1,/,
        '... with the bypass counted');
    # issue 37, item 4: a hold let go at jeopardy, a wait timed out while
    # ZooKeeper was unreachable, each a result of its own
    like($json, qr/\{"path":"\/st\/fo",[^}]*,"local":0,"jeopardy":0,"unreachable":0\}/,
        '... and the results jeopardy and unreachable');
    my $prom = $ng->get('/zk-status?format=prometheus')->{body};
    for my $r (qw(jeopardy unreachable)) {
        like($prom, qr/^zk_lock_requests_total\{path="\/st\/fc",type="mutex",layer="stream",result="$r"\} 0$/m,
            "Prometheus: result=\"$r\" of a stream lock");
    }
    $ng->stop;
};

done_testing;
