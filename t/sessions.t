#!/usr/bin/perl
# zk_sessions <n> (issue 26, item 6): the first n workers of an nginx have
# a ZooKeeper session each and take the locks of the other workers for
# them, so that an nginx with more workers than ZooKeeper lets one host
# connect (maxClientCnxns) serves every request.
#
#  1. 4 workers, 1 session: a mutex holds one at a time across the
#     workers, one session is made, no node is left
#  2. 70 workers against a ZooKeeper with maxClientCnxns=60, zk_sessions
#     8: 60 requests on fresh connections, all 200, none slower than 1 s,
#     and the server never refuses a connection
#  3. keep= through a broker: the instance's kept leases serve the
#     requests of every worker, bound exact
#  4. the broker killed (SIGKILL) while a sibling's request holds through
#     it (zk_lock_lost abort): the request is cut off, nobody else gets the
#     lock before the killed session's node goes, every request ends by
#     its timeout, the respawned broker serves again; with a mutex, and
#     with keep= (the sibling's request runs on the instance's kept lease)
#  5. a reload while a sibling's request waits through the old broker: it
#     is served once the lock frees, and the new workers serve too

use strict;
use warnings;
use Test::More;
use Time::HiRes qw(time sleep);
use lib 't/lib';
use ZkLock::Test;

require_prereqs(qw(nginx zookeeper kazoo python module));

my $zk = zk_start(cfg => { maxClientCnxns => 60 });
my $be = backend_start();

sub sessions_made {
    my ($ng) = @_;
    my @pids = $ng->error_log =~ /(\d+)#\d+: zookeeper session 0x[0-9a-f]+ connected/g;
    return @pids;
}
subtest 'smoke: 4 workers, 1 session' => sub {
    my $ng = nginx_start(<<'EOF', zk => $zk, backend => $be, workers => 4);
    zk_hosts %%ZK%%;
    zk_sessions 1;
    server {
        listen 127.0.0.1:%%PORT%% reuseport;
        add_header X-Lock $zk_lock_status always;
        location /m {
            zk_mutex /ss/m timeout=10s;
            proxy_pass http://%%BACKEND%%;
        }
    }
EOF
    ok(wait_for(sub { $ng->error_log =~ /session 0x[0-9a-f]+ connected/ },
        10), 'the one session connected');
    $be->reset;
    my $res = http_parallel([ map { [ $ng->port, "/m?key=m&sleep=50" ] }
        1 .. 20 ], timeout => 20);
    is(scalar(grep { $_->{status} == 200 } @$res), 20, '20 x 200')
        or diag(join ' ', map { $_->{status} } @$res);
    is($be->stats('m')->{max}, 1, 'one at a time');
    ok(wait_for(sub { !zk_ephemerals($zk, '/ss/m') }, 5), 'no node left');
    is(scalar(sessions_made($ng)), 1, 'one session made');
    $ng->stop;
};

subtest '70 workers, maxClientCnxns=60' => sub {
    my $ng = nginx_start(<<'EOF', zk => $zk, backend => $be, workers => 70);
    zk_hosts %%ZK%%;
    zk_sessions 8;
    server {
        listen 127.0.0.1:%%PORT%% reuseport;
        location /w {
            zk_semaphore /ss/w leases=100 timeout=5s;
            proxy_pass http://%%BACKEND%%;
        }
    }
EOF
    ok(wait_for(sub { sessions_made($ng) >= 8 }, 15), '8 sessions');
    $be->reset;
    my $res = http_parallel([ map { [ $ng->port, "/w?key=w&sleep=20" ] }
        1 .. 60 ], timeout => 10);
    is(scalar(grep { $_->{status} == 200 } @$res), 60, '60 x 200')
        or diag(join ' ', map { $_->{status} } @$res);
    my ($slowest) = sort { $b <=> $a } map { $_->{time} } @$res;
    cmp_ok($slowest, '<', 1, sprintf('none slower than 1 s (%.2f s)',
        $slowest));
    is(scalar(sessions_made($ng)), 8, 'still 8 sessions');
    unlike($zk->log, qr/Too many connections/, 'no connection refused');
    $ng->stop;
    ok(wait_for(sub { !zk_ephemerals($zk, '/ss/w') }, 5), 'no node left');
};

subtest 'keep= through a broker' => sub {
    my $ng = nginx_start(<<'EOF', zk => $zk, backend => $be, workers => 4);
    zk_hosts %%ZK%%;
    zk_sessions 1;
    server {
        listen 127.0.0.1:%%PORT%% reuseport;
        add_header X-Reused $zk_lock_status always;
        location /k {
            zk_semaphore /ss/k leases=3 keep=2s timeout=10s;
            proxy_pass http://%%BACKEND%%;
        }
    }
EOF
    ok(wait_for(sub { sessions_made($ng) == 1 }, 10), 'one session');
    $be->reset;
    my $res = http_parallel([ map { [ $ng->port, "/k?key=k&sleep=30" ] }
        1 .. 60 ], timeout => 20);
    is(scalar(grep { $_->{status} == 200 } @$res), 60, '60 x 200');
    is($be->stats('k')->{max}, 3, 'three at a time, never more');
    cmp_ok(scalar(zk_children($zk, '/ss/k')), '<=', 3,
        'the instance keeps 3 nodes at most');
    $ng->stop;
};

sub broker_killed {
    my ($lock, $path) = @_;
    my $ng = nginx_start(<<"EOF", zk => $zk, backend => $be, workers => 6);
    zk_hosts %%ZK%%;
    zk_sessions 1;
    zk_session_timeout 4s;
    log_format who "\$arg_id \$pid \$status";
    server {
        listen 127.0.0.1:%%PORT%% reuseport;
        location /x {
            $lock
            zk_lock_lost abort;
            access_log %%PREFIX%%/logs/who.log who;
            proxy_pass http://%%BACKEND%%;
        }
    }
EOF
    ok(wait_for(sub { sessions_made($ng) == 1 }, 10), 'one session');
    my ($broker) = sessions_made($ng);
    $be->reset;
    my $t0 = time;
    my $bg = http_parallel_bg([ map { [ $ng->port,
        "/x?key=x&sleep=" . ($_ == 1 ? 3000 : 300) . "&hangup=1&id=$_" ] }
        1 .. 8 ], timeout => 20, stagger => 0.05);
    ok(wait_for(sub { $be->stats('x')->{inflight} == 1 }, 5), 'one holds');
    sleep 0.5;
    kill 'KILL', $broker or die "kill $broker: $!";
    $ng->expect_log(
        qr/\[alert\] \d+#\d+: worker process $broker exited on signal 9$/);
    my $res = http_parallel_collect($bg, 25);
    my $took = time - $t0;
    is($be->stats('x')->{max}, 1, 'never two at the backend');
    cmp_ok($took, '<', 15, sprintf('within the timeouts (%.1f s)', $took));
    my %who = map { (split ' ')[0] => [ (split ' ')[1, 2] ] }
        split /\n/, slurp($ng->prefix . '/logs/who.log');

    # those in the killed worker went with it (no answer, no log line)
    my @sibling = grep { $who{$_} } 2 .. 8;
    is(scalar(grep { $res->[$_ - 1]{status} == 200 } @sibling),
        scalar(@sibling), 'the waiters in siblings asked again, and were '
        . 'served (' . scalar(@sibling) . ' of 7)')
        or diag(join ' ', map { $_->{status} } @$res);
    cmp_ok(scalar(@sibling), '>=', 3, '... most of them in siblings');
  SKIP: {
        skip 'the holder ran in the broker itself', 1
            if !$who{1} || $who{1}[0] == $broker;
        is($who{1}[1], 499, 'the holder, in a sibling, was cut off (499)');
    }
    like($ng->error_log, qr/"\Q$path\E" lost while held/,
        'logged as lost') if $who{1} && $who{1}[0] != $broker;
    ok(wait_for(sub { sessions_made($ng) == 2 }, 10),
        'the respawned broker has a session');
    my $r = $ng->get('/x?key=x2');
    is($r->{status}, 200, 'served again');
    $ng->stop;
    ok(wait_for(sub { !zk_ephemerals($zk, $path) }, 8), 'no node left');
}

subtest 'the broker killed under a sibling\'s request' => sub {
    broker_killed('zk_mutex /ss/x timeout=10s;', '/ss/x');
};

subtest '... on a lease the broker keeps for the instance' => sub {
    broker_killed('zk_semaphore /ss/xk leases=1 keep=2s timeout=10s;',
        '/ss/xk');
};

subtest 'a reload while a sibling waits through the old broker' => sub {
    my $ng = nginx_start(<<'EOF', zk => $zk, backend => $be, workers => 3);
    zk_hosts %%ZK%%;
    zk_sessions 1;
    server {
        listen 127.0.0.1:%%PORT%% reuseport;
        location /r {
            zk_mutex /ss/r timeout=15s;
            proxy_pass http://%%BACKEND%%;
        }
    }
EOF
    ok(wait_for(sub { sessions_made($ng) == 1 }, 10), 'one session');
    $be->reset;
    my $bg = http_parallel_bg([ map { [ $ng->port,
        "/r?key=r&sleep=1500&id=$_" ] } 1 .. 4 ],
        timeout => 20, stagger => 0.1);
    ok(wait_for(sub { $be->stats('r')->{inflight} == 1 }, 5), 'one holds');
    sleep 0.3;
    ok($ng->reload, 'reload');
    my $r = $ng->get('/r?key=r&sleep=10', timeout => 20);
    is($r->{status}, 200, 'the new workers serve');
    my $res = http_parallel_collect($bg, 25);
    is(scalar(grep { $_->{status} == 200 } @$res), 4,
        'the old workers\' requests all served')
        or diag(join ' ', map { $_->{status} } @$res);
    is($be->stats('r')->{max}, 1, 'one at a time');
    $ng->stop;
    ok(wait_for(sub { !zk_ephemerals($zk, '/ss/r') }, 5), 'no node left');
};

subtest 'nginx -t' => sub {
    for my $v ('0', 'two') {
        my ($rc, $out) = nginx_test_conf(<<"EOF");
    zk_hosts 127.0.0.1:2181;
    zk_sessions $v;
EOF
        isnt($rc, 0, "zk_sessions $v: refused");
        like($out, qr/\[emerg\].*"zk_sessions"|zk_sessions.*invalid|must be/,
            '... naming the directive') or diag($out);
    }
};

done_testing;
