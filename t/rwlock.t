#!/usr/bin/perl
# zk_rwlock: readers share, a writer runs alone, a waiting writer holds back
# later readers; the owner of the write lock takes the read lock too; node
# names and data; several locks in one location without deadlock.

use strict;
use warnings;
use Test::More;
use Time::HiRes qw(time sleep);
use POSIX ();
use lib 't/lib';
use ZkLock::Test;

require_prereqs(qw(nginx zookeeper kazoo module));

my $zk = zk_start();
my $be = backend_start();

my $conf = <<'EOF';
    zk_hosts %%ZK%%;

    server {
        listen 127.0.0.1:%%PORT%%;

        location /r {
            zk_rwlock /rw/doc read timeout=20s;
            proxy_pass http://%%BACKEND%%;
        }

        location /w {
            zk_rwlock /rw/doc write timeout=20s;
            proxy_pass http://%%BACKEND%%;
        }

        # the writer reads through a redirect: it holds the read lock too
        # (try_files runs after the lock is taken)
        location /wr {
            zk_rwlock /rw/doc write timeout=3s;
            root %%PREFIX%%;
            try_files /nonexistent @read;
        }

        location @read {
            zk_rwlock /rw/doc read timeout=3s;
            proxy_pass http://%%BACKEND%%;
        }

        # two locks in opposite orders: taken in one global order
        location /ab {
            zk_mutex /rw/a timeout=20s;
            zk_mutex /rw/b timeout=20s;
            proxy_pass http://%%BACKEND%%;
        }

        location /ba {
            zk_mutex /rw/b timeout=20s;
            zk_mutex /rw/a timeout=20s;
            proxy_pass http://%%BACKEND%%;
        }

        location /a-then-held-b {
            zk_mutex /rw/a timeout=20s;
            zk_mutex /rw/held timeout=1s;
            proxy_pass http://%%BACKEND%%;
        }
    }
EOF

my @fleet = map { nginx_start($conf, zk => $zk, backend => $be) } 1 .. 2;

ok(sessions_connected(@fleet), 'every worker has a session');

sub no_nodes_left { no_ephemerals($zk, '/rw', $_[0]) }

###############################################################################

subtest 'readers share, writers exclude' => sub {
    $be->reset;
    my @req = ((map { [$fleet[$_ % 2]->port, "/r?key=doc&sleep=600&id=r$_"] }
                1 .. 6),
               (map { [$fleet[$_ % 2]->port, "/w?key=doc&sleep=300&id=w$_"] }
                1 .. 2));
    my $res = http_parallel(\@req, timeout => 30);

    is(scalar(grep { $_->{status} == 200 } @$res), 8, 'all succeed');
    my $st = $be->stats('doc');
    cmp_ok($st->{max}, '>=', 2, 'readers overlapped');
    cmp_ok($st->{max}, '<=', 6, 'at most the readers at once');

    # a writer started when nothing else ran
    for my $w (@$res[6, 7]) {
        like($w->{body}, qr/ inflight=1$/m, 'a writer ran alone');
    }
    no_nodes_left('shared');
};

subtest 'a waiting writer holds back later readers' => sub {
    $be->reset;
    my $first = [$fleet[0]->port, '/r?key=ww&sleep=1500&id=r1'];
    my $writer = [$fleet[1]->port, '/w?key=ww&sleep=500&id=w'];
    my $late = [$fleet[0]->port, '/r?key=ww&sleep=100&id=r2'];
    my $res = http_parallel([$first, $writer, $late], stagger => 0.4,
        timeout => 30);

    is(join(',', map { $_->{status} } @$res), '200,200,200', 'all succeed');
    is_deeply($be->stats('ww')->{order}, [qw(r1 w r2)],
        'the late reader came after the writer (no writer starvation)');
    is($be->stats('ww')->{max}, 1, 'nothing ran alongside the writer');
    no_nodes_left('starvation');
};

subtest 'node names and data' => sub {
    my $res_pid = fork // die;
    if ($res_pid == 0) {
        http_get($fleet[0]->port, '/w?key=names&sleep=3000');
        POSIX::_exit(0);
    }
    ZkLock::Test::register_pid($res_pid, 'client');

    my @c;
    ok(wait_for(sub { @c = zk_children($zk, '/rw/doc'); @c == 1 }, 5),
        'the writer has its node');
    like($c[0], qr/^_c_[0-9a-f-]{36}-__WRIT__\d{10}$/,
        'Curator\'s write lock name');
    my $data = zk_get($zk, "/rw/doc/$c[0]")->{data};
    like($data, qr/^\S+ pid \d+ since \S+ GET \/w$/,
        'the node data names the holder') or diag $data;

    my $r = http_get($fleet[1]->port, '/r?key=names', timeout => 10);
    is($r->{status}, 200, 'a reader after it');
    waitpid $res_pid, 0;
    no_nodes_left('names');
};

subtest 'the writer also holds the read lock' => sub {
    my $r = http_get($fleet[0]->port, '/wr?key=wr', timeout => 10);
    is($r->{status}, 200, 'write, then read through a redirect');
    ok($r->{time} < 2, 'without waiting for itself');
    no_nodes_left('downgrade');
};

subtest 'several locks in opposite orders do not deadlock' => sub {
    $be->reset;
    my @req = map {
        [$fleet[$_ % 2]->port, ($_ % 3 ? '/ab' : '/ba') . "?key=ab&sleep=50"]
    } 1 .. 24;
    my $res = http_parallel(\@req, timeout => 60);

    is(scalar(grep { $_->{status} == 200 } @$res), 24, 'all succeed');
    is($be->stats('ab')->{max}, 1, 'both locks held by one at a time');
    no_nodes_left('multi');
};

subtest 'a timeout on the second lock gives the first back' => sub {
    my $h = zk_hold($zk, '/rw/held');

    my $r = http_get($fleet[0]->port, '/a-then-held-b?key=x', timeout => 10);
    is($r->{status}, 503, 'not acquired');
    is_deeply([zk_children($zk, '/rw/a')], [], 'the first lock was released');

    my $r2 = http_get($fleet[1]->port, '/ab?key=y', timeout => 5);
    is($r2->{status}, 200, 'and is free for others');

    $h->release;
    no_nodes_left('give back');
};

done_testing();
