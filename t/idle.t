#!/usr/bin/perl
# Lock paths built from the request ("/locks/tenant/$arg_t") are deleted
# once no node of theirs is left, from the lock up to the first variable
# segment: ZooKeeper reaps empty containers at most 10000 a minute, and
# clients choosing new values faster would otherwise grow it without bound.
#
#  1. 100 distinct values of a last segment: no container left after them
#  2. a variable segment in the middle ("/n/$arg_a/inner"): both levels go
#  3. semaphore v2 ("P/locks", "P/leases"): P goes too
#  4. a literal path stays (deleting it would only cost round trips)
#  5. exclusion holds while the path of one value is deleted and created
#     again under 30 concurrent requests over two workers: at most one in
#     the backend at a time, every request served, nothing left behind
#  6. the chroot, created by the module when missing, is persistent: the
#     server does not reap it as it does the lock paths' containers; and
#     below it "/zookeeper" is not the server's own but a path like others;
#     a chroot whose parent is missing: the log names both

use strict;
use warnings;
use Test::More;
use lib 't/lib';
use ZkLock::Test;

require_prereqs(qw(nginx zookeeper kazoo module));

my $zk = zk_start();
my $be = backend_start();

my $ng = nginx_start(<<'EOF', zk => $zk, backend => $be, workers => 2);
    zk_hosts %%ZK%%;

    server {
        listen 127.0.0.1:%%PORT%%;

        location /t {
            zk_mutex /locks/tenant/$arg_t timeout=10s;
            proxy_pass http://%%BACKEND%%;
        }

        location /n {
            zk_mutex /n/$arg_a/inner timeout=10s;
            proxy_pass http://%%BACKEND%%;
        }

        location /v2 {
            zk_semaphore /v/$arg_a leases=2 protocol=v2 timeout=10s;
            proxy_pass http://%%BACKEND%%;
        }

        location /lit {
            zk_mutex /lit/m timeout=10s;
            proxy_pass http://%%BACKEND%%;
        }
    }
EOF
ok(sessions_connected($ng), 'sessions connected');

sub all_ok {
    my ($res, $name) = @_;
    my @bad = grep { $_->{status} != 200 } @$res;
    is(scalar @bad, 0, "$name: every request served")
        or diag explain [ map { "$_->{status} $_->{error}" } @bad[0 .. 2] ];
}

sub gone {
    my ($path, $name) = @_;
    my $ok = wait_for(sub { !zk_tree($zk, $path) }, 3);
    ok($ok, "$name: nothing left below $path")
        or diag scalar(my @t = zk_tree($zk, $path)), ' left, e.g. ',
            explain [ (zk_tree($zk, $path))[0 .. 4] ];
}

all_ok(http_parallel([ map { [$ng->port, "/t?t=tenant$_&key=t"] } 1 .. 100 ]),
    '100 tenants');
gone('/locks/tenant', '100 tenants');

all_ok(http_parallel([ map { [$ng->port, "/n?a=a$_&key=n"] } 1 .. 20 ]),
    'a variable segment in the middle');
gone('/n', 'a variable segment in the middle');

all_ok(http_parallel([ map { [$ng->port, "/v2?a=v$_&key=v"] } 1 .. 10 ]),
    'semaphore v2');
gone('/v', 'semaphore v2');

is($ng->get('/lit?key=l')->{status}, 200, 'a literal path');
ok(zk_get($zk, '/lit/m'), 'a literal path stays');

$be->reset;
my $res = http_parallel([ map { [$ng->port, "/t?t=same&key=same&sleep=20"] }
    1 .. 30 ]);
all_ok($res, 'one value, 30 at once');
is($be->stats('same')->{max}, 1, 'one value, 30 at once: one at a time');
is($be->stats('same')->{count}, 30, 'one value, 30 at once: all reached it');
gone('/locks/tenant', 'one value, 30 at once');

# the chroot is the fleet's: persistent, not a container the server reaps
# (a ZooKeeper of its own, whose container reaper runs every 200 ms)
my $zr = zk_start(jvm => ['-Dznode.container.checkIntervalMs=200']);
my $ch = nginx_start(<<'EOF', zk => $zr, backend => $be, workers => 1);
    zk_hosts %%ZK%%/chr;

    server {
        listen 127.0.0.1:%%PORT%%;

        location / {
            zk_mutex /locks/c timeout=10s;
            proxy_pass http://%%BACKEND%%;
        }

        location /top {
            zk_mutex /$arg_top/x timeout=10s;
            proxy_pass http://%%BACKEND%%;
        }
    }
EOF
ok(sessions_connected($ch), 'with a chroot: connected');
is($ch->get('/?key=c')->{status}, 200, 'with a chroot: served');
is($ch->get('/top?top=zookeeper&key=z')->{status}, 200,
    'with a chroot: "/zookeeper" is a path like any other');
is($be->stats('z')->{count}, 1, 'with a chroot: and reached the backend');
ok(wait_for(sub { !zk_get($zr, '/chr/locks') }, 20),
    'with a chroot: the server reaps the lock path\'s empty containers');
sleep 2;    # ten more rounds of the reaper
ok(zk_get($zr, '/chr'), 'but not the chroot, a persistent node');
unlike($ch->error_log, qr/\[(?:alert|crit|emerg|error)\]|exited on signal/,
    'with a chroot: no error, no crash');
$ch->stop;

# issue 27, item 2: a chroot whose parent is missing says which node is
my $mp = nginx_start(<<'EOF', zk => $zr, backend => $be, workers => 1);
    zk_hosts %%ZK%%/missing/chr;
    zk_lock_status 503;
    server {
        listen 127.0.0.1:%%PORT%%;
        location / {
            zk_mutex /locks/m timeout=2s;
            proxy_pass http://%%BACKEND%%;
        }
    }
EOF
ok(sessions_connected($mp), 'a chroot with a missing parent: connected');
my $off = length $mp->error_log;
is($mp->get('/?key=mp')->{status}, 503, '... a request gets zk_lock_status');
my $mlog = substr($mp->error_log, $off);
like($mlog, qr{\[error\].*the chroot "/missing/chr" of zk_hosts cannot be created: its parent "/missing" is missing},
    '... the log names the chroot and its missing parent');
my @errs = $mlog =~ /\[error\]/g;
cmp_ok(scalar @errs, '<=', 3, '... in a few lines, not one per parent')
    or diag $mlog;
$mp->stop;
$zr->stop;

no_ephemerals($zk, '/', 'at the end');

my $log = $ng->error_log;
unlike($log, qr/\[error\]/, 'no error');

done_testing();
