#!/usr/bin/perl
# Wire compatibility with Apache Curator 5.4 (Debian's jars): a Curator
# participant and nginx requests on the same path exclude each other, and
# queue together in one FIFO order.

use strict;
use warnings;
use Test::More;
use IO::Handle;
use POSIX ();
use IO::Select;
use Time::HiRes qw(time sleep);
use lib 't/lib';
use ZkLock::Test;
use ZkLock::Curator;

require_prereqs(qw(nginx zookeeper kazoo module));

curator_prereqs();

my $zk = zk_start();
my $be = backend_start();

my $ng = nginx_start(<<'EOF', zk => $zk, backend => $be);
    zk_hosts %%ZK%%;

    server {
        listen 127.0.0.1:%%PORT%%;

        location /m {
            zk_mutex /c/mutex timeout=20s;
            proxy_pass http://%%BACKEND%%;
        }

        location /s {
            zk_semaphore /c/sem leases=2 timeout=20s;
            proxy_pass http://%%BACKEND%%;
        }

        location /read {
            zk_rwlock /c/rw read timeout=20s;
            proxy_pass http://%%BACKEND%%;
        }

        location /write {
            zk_rwlock /c/rw write timeout=20s;
            proxy_pass http://%%BACKEND%%;
        }
    }
EOF

ok(wait_for(sub { $ng->error_log =~ /session 0x\S+ connected/ }, 15),
    'nginx is connected');

sub no_nodes_left { no_ephemerals($zk, '/c', $_[0]) }

###############################################################################

subtest 'a Curator InterProcessMutex holder blocks nginx' => sub {
    $be->reset;
    my $c = curator($zk, 'mutex', '/c/mutex', 2000);
    ok(curator_expect($c, qr/^ACQUIRED (\d+)/), 'Curator holds the mutex');

    my $r = http_get($ng->port, '/m?key=cm', timeout => 20);
    is($r->{status}, 200, 'the nginx request gets it afterwards');
    nginx_after_curator($c, $r, 'not before Curator released it');
    ok($r->{time} > 0.5, 'it did wait');
    no_nodes_left('Curator first');
};

subtest 'an nginx holder blocks a Curator InterProcessMutex' => sub {
    $be->reset;
    my $bg = bg_get($ng->port, '/m?key=mc&sleep=2000');
    ok(wait_for(sub { $be->stats('mc')->{inflight} == 1 }, 10),
        'nginx holds the mutex');
    my $t_held = time;

    my $c = curator($zk, 'mutex', '/c/mutex', 0);
    my $acquired = curator_expect($c, qr/^ACQUIRED (\d+)/);
    my $r = bg_wait($bg);

    is($r, 200, 'the nginx request succeeded');
    ok($acquired && $acquired / 1000 >= $t_held + 1.5,
        'Curator got the mutex only once nginx was done')
        or diag sprintf 'acquired %.2f s after nginx took it',
            ($acquired // 0) / 1000 - $t_held;
    no_nodes_left('nginx first');
};

subtest 'InterProcessSemaphore (v1) and zk_semaphore share the leases' => sub {
    $be->reset;
    my $c = curator($zk, 'semaphore', '/c/sem', 4000, 2);
    ok(curator_expect($c, qr/^ACQUIRED (\d+)/), 'Curator holds one of 2 leases');

    my $res = http_parallel([ map { [$ng->port, "/s?key=cs&sleep=600&id=$_"] }
        1 .. 3 ], timeout => 30);

    is(scalar(grep { $_->{status} == 200 } @$res), 3, 'nginx requests succeed');
    is($be->stats('cs')->{max}, 1, 'nginx got one lease at a time');
    ok(curator_expect($c, qr/^RELEASED/), 'Curator released');
    no_nodes_left('semaphore');
};

subtest 'zk_semaphore holders block an InterProcessSemaphore (v1)' => sub {
    $be->reset;
    my @bg = map { bg_get($ng->port, "/s?key=sc&sleep=1500") } 1 .. 2;
    ok(wait_for(sub { $be->stats('sc')->{inflight} == 2 }, 10),
        'nginx holds both leases');
    curator_after_nginx(curator($zk, 'semaphore', '/c/sem', 0, 2), @bg);
    no_nodes_left('semaphore, nginx first');
};

subtest 'one FIFO queue for Curator and nginx' => sub {
    $be->reset;
    # held long enough for a second JVM to start while the suite runs
    # three files at once (prove -j3): the queue must form behind it
    my $holder = curator($zk, 'mutex', '/c/mutex', 8000);
    ok(curator_expect($holder, qr/^ACQUIRED/), 'a Curator holder');

    my $n1 = bg_get($ng->port, '/m?key=fifo&id=n1&sleep=300');
    ok(wait_for(sub { zk_children($zk, '/c/mutex') == 2 }, 5), 'nginx queues');

    my $c2 = curator($zk, 'mutex', '/c/mutex', 300);
    ok(curator_expect($c2, qr/^READY/), 'a second Curator client');
    ok(wait_for(sub { zk_children($zk, '/c/mutex') == 3 }, 5),
        'it queues behind nginx');

    my $n3 = bg_get($ng->port, '/m?key=fifo&id=n3&sleep=300');
    ok(wait_for(sub { zk_children($zk, '/c/mutex') == 4 }, 5),
        'nginx queues again');

    my $c2_at = curator_expect($c2, qr/^ACQUIRED (\d+)/);
    my ($s1, $end1) = bg_wait($n1);
    my ($s3, $end3) = bg_wait($n3);

    is($s1, 200, 'first nginx waiter served');
    is($s3, 200, 'second nginx waiter served');
    is_deeply($be->stats('fifo')->{order}, ['n1', 'n3'], 'nginx order');
    ok($c2_at && $c2_at / 1000 >= $end1 - 0.05 && $c2_at / 1000 <= $end3,
        'the Curator waiter got the lock between the two nginx waiters')
        or diag "n1 ended $end1, Curator at " . ($c2_at // 0) / 1000
            . ", n3 ended $end3";
    no_nodes_left('fifo');
};

subtest 'InterProcessReadWriteLock and zk_rwlock' => sub {
    $be->reset;

    # a Curator reader shares with nginx readers
    my $cr = curator($zk, 'read', '/c/rw', 1500);
    ok(curator_expect($cr, qr/^ACQUIRED/), 'Curator holds a read lock');
    my $r = http_get($ng->port, '/read?key=rw', timeout => 20);
    is($r->{status}, 200, 'an nginx reader');
    ok($r->{time} < 1, 'shares it at once');
    ok(curator_expect($cr, qr/^RELEASED/), 'Curator reader released');

    # a Curator writer holds nginx readers back
    my $cw = curator($zk, 'write', '/c/rw', 1500);
    ok(curator_expect($cw, qr/^ACQUIRED/), 'Curator holds the write lock');
    $r = http_get($ng->port, '/read?key=rw', timeout => 20);
    is($r->{status}, 200, 'the nginx reader gets in');
    nginx_after_curator($cw, $r, 'after the writer left');

    # nginx readers hold a Curator writer back
    my $bg = bg_get($ng->port, '/read?key=rw2&sleep=2000');
    ok(wait_for(sub { $be->stats('rw2')->{inflight} == 1 }, 10),
        'an nginx reader holds');
    my $t_held = time;
    my $cw2 = curator($zk, 'write', '/c/rw', 0);
    my $acquired = curator_expect($cw2, qr/^ACQUIRED (\d+)/);
    is(bg_wait($bg), 200, 'the reader finished');
    ok($acquired && $acquired / 1000 >= $t_held + 1.5,
        'the Curator writer waited for it');
    no_nodes_left('rwlock');
};

done_testing();
