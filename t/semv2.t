#!/usr/bin/perl
# zk_semaphore protocol=v2 and zk_mutex reentrant=off: Curator's
# InterProcessSemaphoreV2 layout (<path>/locks, <path>/leases), shared with
# real Curator clients; a non-reentrant lock taken twice by one request
# answers 500 at once instead of waiting for itself.

use strict;
use warnings;
use Test::More;
use Time::HiRes qw(time sleep);
use POSIX ();
use lib 't/lib';
use ZkLock::Test;
use ZkLock::Curator;

require_prereqs(qw(nginx zookeeper kazoo module));
curator_prereqs();

my $zk = zk_start();
my $be = backend_start();

my $conf = <<'EOF';
    zk_hosts %%ZK%%;

    server {
        listen 127.0.0.1:%%PORT%%;

        location /v2 {
            zk_semaphore /v/sem leases=3 protocol=v2 timeout=20s;
            proxy_pass http://%%BACKEND%%;
        }

        location /v2short {
            zk_semaphore /v/sem leases=3 protocol=v2 timeout=1s;
            proxy_pass http://%%BACKEND%%;
        }

        location /shared {
            zk_semaphore /v/shared leases=2 protocol=v2 timeout=20s;
            proxy_pass http://%%BACKEND%%;
        }

        location /nr {
            zk_mutex /v/nr reentrant=off timeout=20s;
            proxy_pass http://%%BACKEND%%;
        }

        # takes the non-reentrant lock, then again through a redirect
        # (try_files runs after the lock is taken)
        location /nr-twice {
            zk_mutex /v/nr reentrant=off timeout=5s;
            root %%PREFIX%%;
            try_files /nonexistent @nr;
        }

        location @nr {
            zk_mutex /v/nr reentrant=off timeout=5s;
            proxy_pass http://%%BACKEND%%;
        }
    }
EOF

my @fleet = map { nginx_start($conf, zk => $zk, backend => $be, log_level => ($ENV{ZK_TEST_LOG_LEVEL} // 'info')) } 1 .. 2;

ok(sessions_connected(@fleet), 'every worker has a session');

sub no_nodes_left { no_ephemerals($zk, '/v', $_[0]) }

###############################################################################

my $peek_dir = tempdir('semv2');

subtest 'protocol=v2 caps the fleet' => sub {
    $be->reset;
    my $bg = fork // die;
    if ($bg == 0) {
        # the layout, seen while requests run
        sleep 0.6;
        my @l = zk_children($zk, '/v/sem/leases');
        print STDOUT '';
        open my $fh, '>', "$peek_dir/semv2-leases.$$" or POSIX::_exit(1);
        print $fh join("\n", @l);
        close $fh;
        POSIX::_exit(0);
    }
    ZkLock::Test::register_pid($bg, 'peek');

    my @req = map { [$fleet[$_ % 2]->port, "/v2?key=v2&sleep=400&id=$_"] }
        1 .. 15;
    my $res = http_parallel(\@req, timeout => 60);
    waitpid $bg, 0;

    is(scalar(grep { $_->{status} == 200 } @$res), 15, 'all succeed');
    is($be->stats('v2')->{max}, 3, 'exactly 3 in flight at most');

    my $file = "$peek_dir/semv2-leases.$bg";
    if (open my $fh, '<', $file) {
        my @l = grep { length } map { chomp; $_ } <$fh>;
        close $fh;
        unlink $file;
        ok(@l >= 1 && !grep({ !/^_c_[0-9a-f-]{36}-lease-\d{10}$/ } @l),
            'lease nodes are Curator\'s "_c_<uuid>-lease-<seq>"')
            or diag explain \@l;
    } else {
        fail('lease nodes seen');
    }
    no_nodes_left('v2 cap');
};

subtest 'InterProcessSemaphoreV2 and protocol=v2 share the leases' => sub {
    $be->reset;
    my $c = curator($zk, 'semv2', '/v/shared', 3000, 2);
    ok(curator_expect($c, qr/^ACQUIRED/), 'Curator holds one of 2 leases');

    my $res = http_parallel([ map { [$fleet[0]->port,
        "/shared?key=sh&sleep=500&id=$_"] } 1 .. 3 ], timeout => 30);
    is(scalar(grep { $_->{status} == 200 } @$res), 3, 'nginx requests succeed');
    is($be->stats('sh')->{max}, 1, 'nginx had one lease at a time');
    ok(curator_expect($c, qr/^RELEASED/), 'Curator released');

    # and the other way round: nginx holds both, Curator waits
    my @bg = map { bg_get($fleet[$_]->port, "/shared?key=sh2&sleep=1500") }
        0, 1;
    ok(wait_for(sub { $be->stats('sh2')->{inflight} == 2 }, 10),
        'nginx holds both leases');
    curator_after_nginx(curator($zk, 'semv2', '/v/shared', 0, 2), @bg);
    no_nodes_left('v2 shared');
};

subtest 'timeout with protocol=v2 leaves nothing behind' => sub {
    my @c = map { curator($zk, 'semv2', '/v/sem', 4000, 3) } 1 .. 3;
    my @at = map { curator_expect($_, qr/^ACQUIRED (\d+)/) } @c;
    is(scalar(grep { $_ } @at), 3, 'Curator holds the 3 leases');
    note sprintf "acquired %s, asking at %.3f", join(' ', @at), time;

    my $r = http_get($fleet[1]->port, '/v2short?key=to', timeout => 10);
    is($r->{status}, 503, 'no lease in time')
        or diag explain [zk_tree($zk, '/v/sem')];
    is_deeply([zk_children($zk, '/v/sem/locks')], [],
        'the protocol mutex was released');
    is(scalar(() = zk_children($zk, '/v/sem/leases')), 3,
        'only the Curator leases remain');
    ok(curator_expect($_, qr/^RELEASED/), 'Curator released') for @c;
    no_nodes_left('v2 timeout');
};

subtest 'InterProcessSemaphoreMutex and reentrant=off' => sub {
    $be->reset;
    my $c = curator($zk, 'semmutex', '/v/nr', 1500);
    ok(curator_expect($c, qr/^ACQUIRED/), 'Curator holds the mutex');
    my $r = http_get($fleet[0]->port, '/nr?key=nr', timeout => 20);
    is($r->{status}, 200, 'nginx gets it');
    nginx_after_curator($c, $r, 'after Curator released');

    my $bg = bg_get($fleet[1]->port, '/nr?key=nr2&sleep=1500');
    ok(wait_for(sub { $be->stats('nr2')->{inflight} == 1 }, 10),
        'nginx holds it');
    my $c2 = curator($zk, 'semmutex', '/v/nr', 0);
    my $at = curator_expect($c2, qr/^ACQUIRED (\d+)/);
    my ($st, $end) = bg_wait($bg);
    is($st, 200, 'nginx done');
    ok($at && $at / 1000 >= $end - 0.05, 'Curator got it once nginx was done')
        or diag sprintf 'Curator at %.3f, nginx end %.3f', ($at // 0) / 1000,
            $end;
    no_nodes_left('semaphore mutex');
};

subtest 'reentrant=off taken twice by one request' => sub {
    my $r = http_get($fleet[0]->port, '/nr-twice', timeout => 10);
    is($r->{status}, 500, 'answers 500');
    ok($r->{time} < 2, 'at once, not after the timeout');
    like($fleet[0]->error_log,
        qr/\[error\].*zk_mutex "\/v\/nr" with reentrant=off is already held by this request/,
        'and says why');
    no_nodes_left('twice');
};

done_testing();
