#!/usr/bin/perl
# The instance's kept leases and the zk_sessions brokers where ordinary
# clients and deployments meet them (issue 36, items 1 to 3):
#
#  1. a borrower gone before worker 0 answers its ask: worker 0 holds idle
#     leases and is stopped (SIGSTOP) while the requests of worker 1 time
#     out and close their asks; resumed, it grants the idle leases to asks
#     whose worker is gone, and lives on (it used to read a freed ask)
#  1b. worker 0 stopped (SIGSTOP) for longer than its session timeout
#     while worker 1's requests wait for its kept leases: resumed, worker 0
#     finds its session expired and answers that it takes no asks; the
#     requests are served through worker 1's own session (they failed
#     with a connection loss before)
#  2. two nginx in containers that share a network namespace (each
#     master PID 1 of its own PID namespace): each serves its own lock
#     with its own bound, no broker name taken by the other
#  2b. fair= on one path, two such nginx x 4 workers: all served, never
#     more than the cap across the two, the board a node per instance
#  2c. the same with priority classes (zk_lock_class, priority=), gold
#     3 shares lending nothing and tin 1, closed loops of both classes on
#     both: all served, never more than the cap, each instance's nodes on
#     the board carry its classes' claims, and over 4.5 s gold holds 2.2
#     leases at least on average (its part 3) and tin 0.5 (its part 1)
#  3. keep= on a path built from the request, with 2 workers: 40 values
#     used once leave no node and no socket pair between the workers
#     behind them within 3 s, though keep is 30 s; and with two requests
#     at once on each value (the lease idle first, while the other was
#     busy, was kept for keep)
use strict;
use warnings;
use Test::More;
use Time::HiRes qw(time sleep);
use JSON::PP ();
use lib 't/lib';
use ZkLock::Test;
use ZkLock::Calls;

require_prereqs(qw(nginx zookeeper kazoo python module));

my $zk = zk_start();
my $be = backend_start();

subtest 'a borrower gone before worker 0 answers' => sub {
    my $ng = nginx_start(<<'EOF', zk => $zk, backend => $be, workers => 2);
    zk_hosts %%ZK%%;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /k {
            zk_semaphore /br/k leases=8 keep=30s timeout=300ms;
            add_header X-Pid $pid always;
            proxy_pass http://%%BACKEND%%;
        }
    }
EOF
    my ($w0, $w1) = sort { $a <=> $b } $ng->worker_pids;
    ok(sessions_connected(10, $ng), 'sessions up');

    # worker 0 serves some of its own: their leases stay idle in its pool
    my $own = 0;
    for (1 .. 20) {
        my $res = http_parallel([ map { [ $ng->port, "/k?key=k&sleep=50" ] }
            1 .. 8 ], timeout => 10);
        $own += grep { ($_->{headers}{'x-pid'} // 0) == $w0 } @$res;
        last if $own >= 2;
    }
    cmp_ok($own, '>=', 2, "worker 0 served $own of its own");

    # worker 1 alone accepts: its asks wait in worker 0's backlog, and
    # end with their requests (timeout=300ms) before worker 0 reads them
    kill 'STOP', $w0;
    my $res = http_parallel([ map { [ $ng->port, "/k?key=k&sleep=2000" ] }
        1 .. 16 ], timeout => 10);
    my $refused = grep { $_->{status} == 503 } @$res;
    cmp_ok($refused, '>=', 1, "$refused asks ended before worker 0 read "
        . 'them');
    kill 'CONT', $w0;
    sleep 1;

    ok(pid_alive($w0) && pid_alive($w1), 'both workers live on');
    unlike($ng->error_log, qr/exited on signal/, 'no worker exited on a '
        . 'signal');
    $be->reset;
    $res = http_parallel([ map { [ $ng->port, "/k?key=k&sleep=100" ] }
        1 .. 24 ], timeout => 10);
    is(scalar(grep { $_->{status} == 200 } @$res), 24, 'then 24 x 200')
        or diag(join ' ', map { $_->{status} } @$res);
    cmp_ok($be->stats('k')->{max}, '<=', 8, 'at most 8 at a time');
    $ng->stop;
    ok(wait_for(sub { !zk_ephemerals($zk, '/br/k') }, 8), 'no node left');
};

subtest "worker 0's session expires while asks wait for it" => sub {
    my $ng = nginx_start(<<'EOF', zk => $zk, backend => $be, workers => 2);
    zk_hosts %%ZK%%;
    zk_session_timeout 2s;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /e {
            zk_semaphore /br/e leases=4 keep=30s timeout=20s;
            add_header X-Pid $pid always;
            proxy_pass http://%%BACKEND%%;
        }
    }
EOF
    my ($w0, $w1) = sort { $a <=> $b } $ng->worker_pids;
    ok(sessions_connected(10, $ng), 'sessions up');

    # worker 1 alone accepts; its asks for worker 0's kept leases wait in
    # worker 0's backlog while worker 0's session expires on the server
    kill 'STOP', $w0;
    my $bg = http_parallel_bg([ map { [ $ng->port, "/e?key=e&sleep=100" ] }
        1 .. 6 ], timeout => 30);
    sleep 6;
    kill 'CONT', $w0;
    my $res = http_parallel_collect($bg, 40);
    is(scalar(grep { $_->{status} == 200 } @$res), 6,
        'every request served, by the session of worker 1 if need be')
        or diag(join(' ', map { $_->{status} } @$res), "\n",
                grep { m{br/e|broker} } split /^/m, $ng->error_log);
    cmp_ok($be->stats('e')->{max}, '<=', 4, 'at most 4 at a time');

    $be->reset;
    $res = http_parallel([ map { [ $ng->port, "/e?key=e&sleep=50" ] }
        1 .. 12 ], timeout => 30);
    is(scalar(grep { $_->{status} == 200 } @$res), 12, 'then 12 x 200')
        or diag(join ' ', map { $_->{status} } @$res);
    ok(pid_alive($w0) && pid_alive($w1), 'both workers live on');
    $ng->stop;
    ok(wait_for(sub { !zk_ephemerals($zk, '/br/e') }, 8), 'no node left');
};

subtest 'two nginx in containers that share a network namespace' => sub {
    plan skip_all => 'unshare(1) cannot make a PID namespace here'
        if system('unshare --pid --fork true >/dev/null 2>&1') != 0;

    my %ng;
    for (['a', 4], ['b', 1]) {
        my ($name, $leases) = @$_;
        $ng{$name} = nginx_start(<<"EOF", zk => $zk, backend => $be,
    zk_hosts %%ZK%%;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /ns {
            zk_semaphore /br/ns/$name leases=$leases keep=30s timeout=10s;
            proxy_pass http://%%BACKEND%%;
        }
    }
EOF
            workers => 4, pid_namespace => 1);
    }
    for my $name (qw(a b)) {
        ok(sessions_connected(10, $ng{$name}),
            "$name: sessions up");
        is(slurp('/proc/' . $ng{$name}->pid . '/status') =~ /^NSpid:.*\s1$/m
            ? 1 : 0, 1, "$name: the master is PID 1 of its namespace");
    }

    $be->reset;
    my $res = http_parallel([
        (map { [ $ng{a}->port, "/ns?key=a&sleep=200" ] } 1 .. 16),
        (map { [ $ng{b}->port, "/ns?key=b&sleep=200" ] } 1 .. 8) ],
        timeout => 20);
    is(scalar(grep { $_->{status} == 200 } @$res), 24, '24 x 200')
        or diag(join ' ', map { $_->{status} } @$res);
    is($be->stats('b')->{max}, 1, 'b: one at a time (leases=1)');
    cmp_ok($be->stats('a')->{max}, '<=', 4, 'a: 4 at a time at most');
    for my $name (qw(a b)) {
        unlike($ng{$name}->error_log, qr/cannot listen|not this configur/,
            "$name: each broker listens on its own name");
    }
    $_->stop for values %ng;
    ok(wait_for(sub { !zk_ephemerals($zk, '/br/ns') }, 8), 'no node left');
};

subtest 'fair= on one path, two nginx in containers sharing a network '
    . 'namespace' => sub {
    plan skip_all => 'unshare(1) cannot make a PID namespace here'
        if system('unshare --pid --fork true >/dev/null 2>&1') != 0;

    # the same worker numbers and pids in both: the instances must still
    # be two, each with its own pool, asks and claim on the board
    my @ng = map { nginx_start(<<'EOF', zk => $zk, backend => $be,
    zk_hosts %%ZK%%;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /fns {
            zk_semaphore /br/fns leases=4 keep=1s timeout=10s
                         fair=$arg_tenant;
            proxy_pass http://%%BACKEND%%;
        }
    }
EOF
        workers => 4, pid_namespace => 1) } 1 .. 2;
    ok(sessions_connected(10, @ng), 'sessions up');

    $be->reset;
    my $bg = http_parallel_bg([
        (map { [ $ng[ $_ % 2 ]->port, "/fns?key=fns&sleep=300&tenant=n" ] }
            1 .. 24),
        (map { [ $ng[0]->port, "/fns?key=fns&sleep=300&tenant=q$_" ] }
            1 .. 4) ], timeout => 20, stagger => 0.01);
    my %board;
    wait_for(sub {
        %board = map { $_ => 1 } zk_children($zk, '/br/fns.fair');
        keys %board == 2 }, 5, 0.1);
    my $res = http_parallel_collect($bg, 30);
    is(scalar(grep { $_->{status} == 200 } @$res), 28, '28 x 200, through '
        . "each instance's own workers")
        or diag(join ' ', map { $_->{status} } @$res);
    cmp_ok($be->stats('fns')->{max}, '<=', 4, 'never more than 4 at once, '
        . 'across the two');
    is(scalar keys %board, 2, 'the board has a node per instance, each its '
        . 'own prefix') or diag join ' ', keys %board;
    for my $i (0, 1) {
        unlike($ng[$i]->error_log, qr/cannot listen|not this configur/,
            "nginx $i: its brokers listen on their own names");
    }
    $_->stop for @ng;
    ok(wait_for(sub { !zk_ephemerals($zk, '/br') }, 8), 'no node left');
};

subtest 'priority= on one path, two nginx in containers sharing a '
    . 'network namespace' => sub {
    plan skip_all => 'unshare(1) cannot make a PID namespace here'
        if system('unshare --pid --fork true >/dev/null 2>&1') != 0;

    my @ng = map { nginx_start(<<'EOF', zk => $zk, backend => $be,
    zk_hosts %%ZK%%;
    zk_lock_class gold shares=3 lendable=0%;
    zk_lock_class tin  shares=1 lendable=100% default;
    server {
        listen 127.0.0.1:%%PORT%%;
        access_log off;
        location /pns {
            zk_semaphore /br/pns leases=4 keep=1s timeout=20s
                         fair=$arg_tenant priority=$arg_class;
            proxy_pass http://%%BACKEND%%;
        }
    }
EOF
        workers => 4, pid_namespace => 1) } 1 .. 2;
    ok(sessions_connected(10, @ng), 'sessions up');

    # closed loops, 12 clients of each class on each nginx, 8 s
    $be->reset;
    my $t0 = time;
    my ($spec, $out) = map { $ng[0]->prefix . "/pns.$_" } qw(json out);
    open my $fh, '>', $spec or die "$spec: $!";
    print $fh $ZkLock::Test::JSON->encode({ until => $t0 + 8,
        clients => [ map { my $c = $_ % 2 ? 'gold' : 'tin';
            { port => $ng[ int($_ / 2) % 2 ]->port, gap => 0, timeout => 30,
              uri => "/pns?key=pns&sleep=100&rec=1&tenant=$c&class=$c"
                  . "&id=$c" } } 0 .. 47 ] });
    close $fh;
    my $load = spawn(cmd => [$ZkLock::Test::PYTHON, 't/lib/load.py',
        '--spec', $spec, '--out', $out]);

    my %board;
    wait_for(sub {
        %board = map { $_ => (zk_get($zk, "/br/pns.fair/$_") // {})->{data} }
            zk_children($zk, '/br/pns.fair');
        my %i = map { substr($_, 0, 11) => 1 }
            grep { ($board{$_} // '') =~ /gold=/ } keys %board;
        keys %i == 2 }, 6, 0.1);
    proc_wait($load, 60);
    my $res = -s $out ? JSON::PP->new->decode(slurp($out)) : [];
    my @bad = grep { $_->{status} != 200 } @$res;
    ok(@$res > 100 && !@bad, scalar(@$res) . ' requests through each '
        . "instance's own workers, all 200")
        or diag(join ' ', map { $_->{status} } @bad);
    cmp_ok($be->stats('pns')->{max}, '<=', 4, 'never more than 4 at once, '
        . 'across the two');
    my %prefix = map { substr($_, 0, 11) => 1 }
        grep { ($board{$_} // '') =~ /^\d+ .*gold=\d+\/\d+/ } keys %board;
    is(scalar keys %prefix, 2, "each instance's nodes on the board carry "
        . "their classes' claims, under its own prefix")
        or diag explain \%board;

    my $calls = $be->calls->{pns} // [];
    my ($gold) = calls_held($calls, 'gold', $t0 + 3, $t0 + 7.5);
    my ($tin) = calls_held($calls, 'tin', $t0 + 3, $t0 + 7.5);
    diag(sprintf 'gold %.2f leases, tin %.2f on average (parts 3 and 1)',
        $gold, $tin);
    cmp_ok($gold, '>=', 2.2, 'gold (3 shares of 4, lends nothing) holds '
        . '2.2 leases at least on average');
    cmp_ok($tin, '>=', 0.5, '... and tin keeps its part (0.5 at least)');
    for my $i (0, 1) {
        unlike($ng[$i]->error_log, qr/cannot listen|not this configur/,
            "nginx $i: its brokers listen on their own names");
    }
    $_->stop for @ng;
    ok(wait_for(sub { !zk_ephemerals($zk, '/br') }, 8), 'no node left');
};

subtest 'keep= on a path from the request, 2 workers' => sub {
    my $ng = nginx_start(<<'EOF', zk => $zk, backend => $be, workers => 2);
    zk_hosts %%ZK%%;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /v {
            zk_semaphore /br/v/$arg_v leases=2 keep=30s timeout=5s;
            proxy_pass http://%%BACKEND%%;
        }
    }
EOF
    ok(sessions_connected(10, $ng), 'sessions up');
    my $res = http_parallel([ map { [ $ng->port, "/v?v=$_&key=v&sleep=20" ] }
        1 .. 40 ], timeout => 10, stagger => 0.01);
    is(scalar(grep { $_->{status} == 200 } @$res), 40, '40 values, 200 each')
        or diag(join ' ', map { $_->{status} } @$res);
    my $t0 = time;
    my $gone = wait_for(sub {
        !zk_ephemerals($zk, '/br/v') && !$ng->broker_pairs }, 3);
    my @left = zk_ephemerals($zk, '/br/v');
    ok($gone, sprintf('no node and no socket pair left within 3 s '
        . '(keep=30s): %d nodes, %d pairs', scalar @left, $ng->broker_pairs));
    $ng->stop;
};

subtest 'keep= on a path from the request, two requests on one value' => sub {
    # the lease that goes idle first, while the other is busy, used to
    # be kept for the whole keep: it goes with the other after the grace
    my $ng = nginx_start(<<'EOF', zk => $zk, backend => $be, workers => 1);
    zk_hosts %%ZK%%;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /v2 {
            zk_semaphore /br/v2/$arg_v leases=2 keep=30s timeout=5s;
            proxy_pass http://%%BACKEND%%;
        }
    }
EOF
    ok(sessions_connected(10, $ng), 'session up');
    my $res = http_parallel([ map { my $v = int(($_ + 1) / 2);
            [ $ng->port, "/v2?v=$v&key=v2&sleep=" . ($_ % 2 ? 100 : 60) ] }
        1 .. 40 ], timeout => 10, stagger => 0.02);
    is(scalar(grep { $_->{status} == 200 } @$res), 40,
        '20 values, two requests each 20 ms apart: 200 each')
        or diag(join ' ', map { $_->{status} } @$res);
    my $gone = wait_for(sub { !zk_ephemerals($zk, '/br/v2') }, 3);
    ok($gone, sprintf('no node left within 3 s (keep=30s): %d left',
        scalar(() = zk_ephemerals($zk, '/br/v2'))));
    $ng->stop;
};

done_testing;
