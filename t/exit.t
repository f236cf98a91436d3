#!/usr/bin/perl
# A worker that exits takes its nodes with it at once, not a session
# timeout later.
#
# nginx A (one worker, worker_shutdown_timeout 1s) has 30 requests waiting
# behind a foreign holder, as 30 HTTP/2 streams of one connection (nghttp),
# and is reloaded: its old worker cuts them off a
# second later, deletes their nodes and closes its session as it exits.
# The single-threaded client's zookeeper_close() reads one reply and closes
# a socket with replies still unread; the connection is reset, ZooKeeper
# drops what it had not answered yet (deletes, the closeSession itself)
# and the nodes stay until the session expires (10 s here). So:
#
#  - every node of the old worker is gone within 2 s of its exit;
#  - its session is closed, not expired (ZooKeeper's log);
#  - once the foreign holder leaves, a request on nginx B gets the lock
#    at once rather than waiting for the ghosts;
#  - no [alert]/[crit]/[emerg], no worker exited on a signal.

use strict;
use warnings;
use Test::More;
use Time::HiRes qw(time sleep);
use lib 't/lib';
use ZkLock::Test;

require_prereqs(qw(nginx zookeeper kazoo module));

my $zk = zk_start();
my $be = backend_start();

# HTTP/2 without TLS: "listen ... http2" before nginx 1.25, "http2 on" since
my ($minor) = `$ZkLock::Test::NGINX -v 2>&1` =~ m{nginx/1\.(\d+)\.};
my ($listen, $h2) = ($minor // 0) >= 25 ? ('', 'http2 on;') : (' http2', '');

sub conf {
    my ($http2) = @_;
    my ($l, $on) = !$http2 ? ('', '') : $listen ? ($listen, '') : ('', $h2);
    return <<"EOF";
    zk_hosts %%ZK%%;
    zk_session_timeout 10s;

    server {
        listen 127.0.0.1:%%PORT%%$l;
        $on

        location /x {
            zk_mutex /t/exit timeout=60s;
            proxy_pass http://%%BACKEND%%;
        }
    }
EOF
}

my $a = nginx_start(conf(1), zk => $zk, backend => $be, workers => 1,
    main_conf => "worker_shutdown_timeout 1s;\n");
my $b = nginx_start(conf(0), zk => $zk, backend => $be, workers => 1);
ok(sessions_connected($a, $b), 'both workers connected');

my $holder = zk_hold($zk, '/t/exit');
my ($old) = $a->worker_pids;

my $n = 30;
my $client = ZkLock::Test::spawn(name => 'nghttp', cmd => ['nghttp', '-n',
    '-t', '30', '-m', $n, 'http://127.0.0.1:' . $a->port . '/x?key=exit']);

ok(wait_for(sub { zk_children($zk, '/t/exit') == $n + 1 }, 15),
    "$n requests queued on nginx A")
    or diag explain [zk_children($zk, '/t/exit')];

ok($a->reload, 'nginx A reloaded');

ok(wait_for(sub { !pid_alive($old) }, 10), 'the old worker exited');
my $exited = time;

my $gone = wait_for(sub { zk_children($zk, '/t/exit') == 1 }, 2);
my $took = time - $exited;
ok($gone, sprintf('its nodes are gone within 2 s of its exit (%.1f s)',
    $took)) or diag explain [zk_children($zk, '/t/exit')];

is($be->stats('exit')->{count} // 0, 0,
    'no stream cut off by the shutdown reached the backend');

$holder->release;

my $t0 = time;
my $r = $b->get('/x?key=after', timeout => 30);
is($r->{status}, 200, 'a request on nginx B gets the lock') or diag $r->{error};
cmp_ok(time - $t0, '<', 3, 'at once, not after the session timeout');

unlike($zk->log, qr/Expiring session/,
    'no session of nginx A expired: it was closed');

no_ephemerals($zk, '/t', 'at the end');

done_testing();
