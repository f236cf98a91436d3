#!/usr/bin/perl
# A lock path built from a variable may name any node: the module deletes
# only what it can prove is its own, an empty container, at the version it
# saw, never after a failed create (issue 25, item 8).
#
#  1. zk_mutex /app/$arg_t with a persistent node /app/config holding
#     data: GET /t?t=config gets 400 with no node made, and /app/config is
#     still there, with its data; an empty persistent node may be a lock's
#     parent (200), and stays
#  2. zk_mutex /p beside zk_mutex /p/$arg_x: a request asks for a path
#     below a live holder's ephemeral node: 400; the
#     holder's node stays, and the next request on /p waits for the
#     holder (never two in the backend)
#  3. a variable path used and left: its containers are deleted, up to the
#     first variable segment, not the literal parent; an empty persistent
#     node named by a variable stays (the module deletes only containers
#     that carry its mark)
#  4. nginx -t refuses a leases=zk: count node below the literal part of a
#     variable lock path of the same directive, naming both
#  no [alert]/[crit]/[emerg] line, no crashed worker

use strict;
use warnings;
use Test::More;
use Time::HiRes qw(time sleep);
use lib 't/lib';
use ZkLock::Test;

require_prereqs(qw(nginx zookeeper kazoo module));

my $zk = zk_start();
my $be = backend_start();

my $ng = nginx_start(<<'EOF', zk => $zk, backend => $be, workers => 1);
    zk_hosts %%ZK%%;
    server {
        listen 127.0.0.1:%%PORT%%;
        add_header X-Lock $zk_lock_status always;
        add_header X-Lock-Node $zk_lock_node always;

        location /t {
            zk_mutex /app/$arg_t timeout=5s;
            proxy_pass http://%%BACKEND%%;
        }
        location /p {
            zk_mutex /p timeout=20s;
            proxy_pass http://%%BACKEND%%;
        }
        location /sub {
            zk_mutex /p/$arg_x timeout=2s;
            proxy_pass http://%%BACKEND%%;
        }
        location /v {
            zk_mutex /vars/fixed/$arg_v/leaf timeout=5s;
            proxy_pass http://%%BACKEND%%;
        }
    }
EOF
ok(sessions_connected($ng), 'connected');

subtest 'a persistent node named by a variable is not deleted' => sub {
    zk_create($zk, '/app/config', data => 'keep me', makepath => 1);
    $be->reset;
    my $r = $ng->get('/t?t=config&key=cfg');
    is($r->{status}, 400, 'GET /t?t=config: 400, no lock under it');
    is($be->stats('cfg')->{count}, 0, '... the backend never saw it');
    like($ng->error_log, qr{zk_mutex "/app/config" refused: its variable names a node that is no lock's},
        '... logged, naming the path');
    sleep 1;    # a clean-up would have had its round trips
    my $d = zk_get($zk, '/app/config');
    ok($d, '/app/config is still there');
    is($d && $d->{data}, 'keep me', '... with its data');
    is(scalar(zk_children($zk, '/app/config')), 0, '... and no child left');

    # an empty persistent node is no container of the module's either
    zk_create($zk, '/app/empty');
    is($ng->get('/t?t=empty&key=cfg')->{status}, 200, 'GET /t?t=empty: 200');
    sleep 1;
    ok(zk_get($zk, '/app/empty'), 'the empty persistent /app/empty stays');
};

subtest 'below a holder\'s node: the holder keeps it' => sub {
    $be->reset;
    my $h = http_parallel_bg([ [ $ng->port, '/p?key=p&sleep=4000&id=1' ] ],
        timeout => 30);
    ok(wait_for(sub { $be->stats('p')->{inflight} == 1 }, 5), 'one holds /p');
    my ($name) = zk_children($zk, '/p');
    ok($name, "its node: $name");

    my $r = $ng->get("/sub?x=$name&key=sub");
    is($r->{status}, 400, "a lock below the holder's node: 400");
    sleep 0.5;
    ok((grep { $_ eq $name } zk_children($zk, '/p')),
        "the holder's node is still there");

    my $n = http_parallel([ [ $ng->port, '/p?key=p&sleep=100&id=2' ] ],
        timeout => 30)->[0];
    is($n->{status}, 200, 'the next request on /p: 200');
    is($be->stats('p')->{max}, 1, '... after the holder: never two');
    is_deeply($be->stats('p')->{order}, [ 1, 2 ], '... in order');
    http_parallel_collect($h);
};

subtest 'an idle variable path goes, up to its variable segment' => sub {
    zk_create($zk, '/vars/fixed', makepath => 1);
    my $r = $ng->get('/v?v=tmp1&key=v');
    is($r->{status}, 200, 'GET /v?v=tmp1: 200');
    ok(wait_for(sub { !zk_get($zk, '/vars/fixed/tmp1') }, 5),
        '/vars/fixed/tmp1 and its leaf are deleted');
    ok(zk_get($zk, '/vars/fixed'), 'the literal parent /vars/fixed stays');
};

subtest 'nginx -t: a lease count where a variable may lead' => sub {
    for my $case ([ '/sem/$arg_pool', '/sem/limit', 1 ],
                  [ '/$arg_pool', '/cfg/limit', 1 ],
                  [ '/sem/$arg_pool', '/cfg/limit', 0 ],
                  [ '/sem/x/$arg_pool', '/sem/limit', 0 ])
    {
        my ($path, $count, $bad) = @$case;
        my ($rc, $out) = nginx_test_conf(<<"EOF");
    zk_hosts 127.0.0.1:1;
    server {
        listen 127.0.0.1:%%PORT%%;
        location / {
            zk_semaphore $path leases=zk:$count leases_default=5;
        }
    }
EOF
        if ($bad) {
            isnt($rc, 0, "$path with leases=zk:$count: nginx -t fails");
            like($out, qr/the lease count "\Q$count\E" is below .* lock path "\Q$path\E"/,
                '... naming both');
        } else {
            is($rc, 0, "$path with leases=zk:$count: accepted") or diag $out;
        }
    }
};

no_ephemerals($zk, '/p', 'at the end');

done_testing();
