#!/usr/bin/perl
# What the children of a lock path say: which are participants, in what
# order, and who holds them.
#
#  1. Only names as Curator writes them ("_c_" <UUID> "-" <kind> <10
#     digits>) are in the queue: the container of a deeper lock whose last
#     segment ends in 10 digits ("/p/a0000000000", as a request to
#     "/p/$arg_x" makes) and other children that merely end in digits do
#     not block the lock "/p".
#  2. A participant whose sequence number ZooKeeper wrote negative (past
#     2^31 changes under the parent: "-2147483638") means the queue's order
#     is lost: a request fails at once with zk_lock_status (ERROR), the log
#     says what to do, and its node is deleted.
#  3. The node data names the holder (host, pid, since, method, path)
#     without the query string, which may carry tokens, and is cut at 256
#     bytes on a character boundary.

use strict;
use warnings;
use Test::More;
use Time::HiRes qw(time);
use lib 't/lib';
use ZkLock::Test;

require_prereqs(qw(nginx zookeeper kazoo module));

my $zk = zk_start();
my $be = backend_start();

my $ng = nginx_start(<<'EOF', zk => $zk, backend => $be, workers => 1);
    zk_hosts %%ZK%%;
    log_format st '$request_uri $zk_lock_status';

    server {
        listen 127.0.0.1:%%PORT%%;
        access_log %%PREFIX%%/logs/st.log st;

        location /parent {
            zk_mutex /p timeout=3s;
            proxy_pass http://%%BACKEND%%;
        }

        location /data/ {
            zk_mutex /d timeout=5s;
            proxy_pass http://%%BACKEND%%;
        }

        location /wrapped {
            zk_mutex /w timeout=5s;
            proxy_pass http://%%BACKEND%%;
        }
    }
EOF
ok(sessions_connected($ng), 'session connected');

subtest 'children that are no participants are in nobody\'s way' => sub {
    # as a lock below /p, on /p/$arg_x, leaves its container (until the
    # server reaps it, or the module deletes it once idle)
    zk_create($zk, '/p/a0000000000', makepath => 1);
    zk_create($zk, "/p/$_", data => 'x')
        for 'lock-0000000001', 'x__WRIT__0000000002', '0000000003';
    zk_create($zk, '/p/' . curator_name('other-') . '0000000004');

    my $t0 = time;
    my $r = $ng->get('/parent?key=p');
    my $took = time - $t0;
    is($r->{status}, 200, '/p is taken');
    cmp_ok($took, '<', 2, sprintf('at once (%.2f s), not at its timeout',
        $took));
    no_ephemerals($zk, '/p', 'after');
};

subtest 'a sequence number past 2^31 refuses the path' => sub {
    my $wrapped = curator_name() . '-2147483638';
    zk_create($zk, "/w/$wrapped", makepath => 1);

    my $t0 = time;
    my $r = $ng->get('/wrapped?key=w');
    my $took = time - $t0;
    is($r->{status}, 503, 'zk_lock_status');
    cmp_ok($took, '<', 3, sprintf('at once (%.2f s)', $took));
    is($be->stats('w')->{count} // 0, 0, 'the backend saw nothing');
    like(ZkLock::Test::slurp($ng->prefix . '/logs/st.log'),
        qr{^/wrapped\?key=w ERROR$}m, '$zk_lock_status is ERROR');
    my $says = qq{zookeeper sequence numbers under "/w" have run past 2^31 }
        . qq{("$wrapped"): no lock can be had there until the path is }
        . 'deleted and created again';
    like($ng->error_log, qr/\[error\] .*\Q$says\E/,
        'the log says what happened and what to do');
    no_ephemerals($zk, '/w', 'its node was deleted');
};

subtest 'node data: the holder, without the query string' => sub {
    my @cases = (
        [ '/data/deploy?key=nd&sleep=1500&access_token=s3cr3t-T0KEN'
              . '&password=hunter2', 'GET /data/deploy' ],
        map { [ '/data/' . ('x' x $_) . ("\xe2\x82\xac" x 120)
                  . '?key=nd&sleep=1500', undef ] } 0 .. 2,
    );
    for my $c (@cases) {
        my ($uri, $want) = @$c;
        my $bg = http_parallel_bg([[ $ng->port, $uri ]]);
        my @kids;
        wait_for(sub { @kids = zk_children($zk, '/d') }, 5);
        my $data = @kids ? zk_get($zk, "/d/$kids[0]")->{data} : '';
        is(http_parallel_collect($bg, 10)->[0]{status}, 200, 'served');
        unlike($data, qr/s3cr3t|hunter2|\?/, 'no query string in the data');
        if (defined $want) {
            like($data, qr/ pid \d+ since \S+ \Q$want\E$/,
                'the data names the holder: host, pid, since, method, path');
        } else {
            my $bytes = $data;
            utf8::encode($bytes);
            cmp_ok(length $bytes, '<=', 256, 'at most 256 bytes');
            unlike($data, qr/\x{FFFD}/, 'no character cut in half');
            like($data, qr/\x{20AC}{20}$/, 'cut in the long path');
        }
    }
    no_ephemerals($zk, '/d', 'node data');
};

done_testing();
