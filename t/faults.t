#!/usr/bin/perl
# What requests see when ZooKeeper fails, option by option:
#
#  1. $zk_lock_status / $zk_lock_wait_time / $zk_lock_node in a header and
#     in an access log: ACQUIRED with the node's path, TIMEOUT
#  2. no ZooKeeper connection: zk_lock_fail open lets requests through at
#     once (BYPASSED, backend reached); closed answers 503 at the timeout
#     (ERROR); both take the lock again once ZooKeeper is back
#  3. reconnects are spaced out: a worker whose servers refuse it makes a
#     few attempts per second at first, then at most one every ~2 s,
#     never the ~9 per second of the client's own schedule
#  4. one server up among four listed: every worker finds it (the client
#     alone may not: ZOOKEEPER-2466)
#  5. connection lost (session alive): a waiter keeps its place in the
#     queue, a release that could not be sent is sent after the reconnect
#  6. session expiry (the connection is cut for longer than the session
#     timeout): a waiting request fails at once with 503 (closed) or
#     passes (open); a holder finishes with a warning (zk_lock_lost
#     finish) or is cut off (zk_lock_lost abort); the new session takes
#     locks at once; nothing is left behind
#  7. ZooKeeper paused (SIGSTOP) past the session timeout: no request
#     waits past its timeout, locks are taken again after it resumes
#  no [alert]/[crit]/[emerg] line, no crashed worker

use strict;
use warnings;
use Test::More;
use Time::HiRes qw(time sleep);
use IO::Socket::INET;
use lib 't/lib';
use ZkLock::Test;
use ZkLock::FaultProxy;

require_prereqs(qw(nginx zookeeper kazoo module));

my $zk = zk_start();
my $be = backend_start();

my $locations = <<'EOF';
        add_header X-Lock $zk_lock_status always;
        add_header X-Lock-Wait $zk_lock_wait_time always;
        add_header X-Lock-Node $zk_lock_node always;
        access_log %%PREFIX%%/logs/zk.log zk;

        location /closed {
            zk_mutex /f/closed timeout=1500ms;
            proxy_pass http://%%BACKEND%%;
        }
        location /open {
            zk_mutex /f/open timeout=1500ms;
            zk_lock_fail open;
            proxy_pass http://%%BACKEND%%;
        }
        location /closed-long {
            zk_mutex /f/closed timeout=20s;
            proxy_pass http://%%BACKEND%%;
        }
        location /open-long {
            zk_mutex /f/open timeout=20s;
            zk_lock_fail open;
            proxy_pass http://%%BACKEND%%;
        }
        location /finish {
            zk_mutex /f/finish timeout=10s;
            proxy_pass http://%%BACKEND%%;
        }
        location /abort {
            zk_mutex /f/abort timeout=10s;
            zk_lock_lost abort;
            proxy_pass http://%%BACKEND%%;
        }
EOF

sub conf {
    my ($hosts, $timeout) = @_;
    return <<"EOF";
    zk_hosts $hosts;
    zk_session_timeout $timeout;
    log_format zk '\$uri \$status \$zk_lock_status \$zk_lock_wait_time '
                  '\$zk_lock_node';
    server {
        listen 127.0.0.1:%%PORT%%;
$locations
    }
EOF
}

sub bad_lines {
    my ($ng, @allow) = @_;
    return grep { my $l = $_; !grep { $l =~ $_ } @allow }
        grep { /\[(?:alert|crit|emerg)\]/ || /exited on signal/ }
        split /\n/, $ng->error_log;
}

sub zk_log { ZkLock::Test::slurp($_[0]->prefix . '/logs/zk.log') }

my $ng = nginx_start(conf('%%ZK%%', '10s'), zk => $zk, backend => $be);
ok(sessions_connected($ng), 'every worker has a session');

###############################################################################

subtest 'variables: ACQUIRED with the node, TIMEOUT' => sub {
    my $r = $ng->get('/closed?key=v&sleep=10');
    is($r->{status}, 200, 'acquired');
    is($r->{headers}{'x-lock'}, 'ACQUIRED', '$zk_lock_status ACQUIRED');
    like($r->{headers}{'x-lock-wait'}, qr/^\d+$/, '$zk_lock_wait_time: ms');
    like($r->{headers}{'x-lock-node'},
        qr{^/f/closed/_c_[0-9a-f-]{36}-lock-\d{10}$},
        '$zk_lock_node: the node held');

    my $h = zk_hold($zk, '/f/closed', name => '_c_00000000-0000-4000-8000-'
        . '000000000000-lock-', seconds => 30);
    $r = $ng->get('/closed?key=v&sleep=10');
    is($r->{status}, 503, 'a foreign holder: 503');
    is($r->{headers}{'x-lock'}, 'TIMEOUT', '$zk_lock_status TIMEOUT');
    cmp_ok($r->{headers}{'x-lock-wait'} // 0, '>=', 1400,
        '$zk_lock_wait_time: the timeout');
    $h->release;

    ok(wait_for(sub { zk_log($ng) =~ m{^/closed 503 TIMEOUT \d+ -$}m }, 5),
        'access log: "/closed 503 TIMEOUT <ms> -"');
    like(zk_log($ng), qr{^/closed 200 ACQUIRED \d+ /f/closed/_c_\S+$}m,
        'access log: "/closed 200 ACQUIRED <ms> <node>"');
    no_ephemerals($zk, '/f', 'variables');
};

###############################################################################

subtest 'no connection: open passes, closed fails at the timeout' => sub {
    my $off = length $ng->error_log;
    $zk->stop;
    ok(wait_for(sub {
        (() = substr($ng->error_log, $off) =~ /zookeeper connection lost/g)
            >= 2 }, 10), 'both workers noticed the loss');

    $be->reset;
    my $res = http_parallel([
        [ $ng->port, '/open?key=open&sleep=10' ],
        [ $ng->port, '/open?key=open&sleep=10' ],
        [ $ng->port, '/closed?key=closed&sleep=10' ],
    ], timeout => 10);

    for my $r (@$res[0, 1]) {
        is($r->{status}, 200, 'open: 200');
        is($r->{headers}{'x-lock'}, 'BYPASSED', 'open: BYPASSED');
        cmp_ok($r->{time}, '<', 1, 'open: at once');
    }
    is($be->stats('open')->{count}, 2, 'open: the backend was reached');

    is($res->[2]{status}, 503, 'closed: 503');
    is($res->[2]{headers}{'x-lock'}, 'ERROR', 'closed: ERROR');
    cmp_ok($res->[2]{time}, '>=', 1.4, 'closed: at its 1.5 s timeout');
    cmp_ok($res->[2]{time}, '<', 5, 'closed: not later');
    is($be->stats('closed')->{count}, 0, 'closed: backend never reached');

    like($ng->error_log, qr/\[error\].*zk_mutex "\/f\/open" bypassed: no zookeeper connection/,
        'open: logged at warn');
    like($ng->error_log, qr/\[error\].*zk_mutex "\/f\/closed" not acquired in \d+ms: no zookeeper connection/,
        'closed: logged at error');

    $off = length $ng->error_log;
    $zk->start;
    ok(wait_for(sub {
        (() = substr($ng->error_log, $off) =~ /session 0x\S+ connected/g)
            >= 2 }, 15), 'both workers reconnected');

    for my $uri ('/open', '/closed') {
        my $r = $ng->get("$uri?key=back&sleep=10");
        is($r->{headers}{'x-lock'}, 'ACQUIRED', "$uri: ACQUIRED again");
    }
    no_ephemerals($zk, '/f', 'no connection');
};

###############################################################################

subtest 'reconnects back off, with jitter' => sub {
    # a "server" that accepts and closes at once, and one that refuses
    my $l = IO::Socket::INET->new(Listen => 128, LocalAddr => '127.0.0.1',
        LocalPort => 0, ReuseAddr => 1) or die "listen: $!";
    my $hosts = '127.0.0.1:' . $l->sockport . ',127.0.0.1:' . free_port();

    my $t0 = time;
    my $bo = nginx_start(conf($hosts, '10s'), backend => $be);
    my @t;
    $l->blocking(0);
    while (time - $t0 < 8) {
        if (my $c = $l->accept) {
            push @t, time - $t0;
            close $c;
        } else {
            sleep 0.01;
        }
    }
    close $l;
    note sprintf '%d attempts: %s', scalar @t,
        join ' ', map { sprintf '%.2f', $_ } @t;

    # the client alone would come back every 10 s * 2/3 / 60 = 111 ms:
    # 8 s * 2 workers, half of the attempts to this server -> ~70
    cmp_ok(scalar @t, '>=', 4, 'the workers keep trying');
    cmp_ok(scalar @t, '<=', 30, 'but back off (client alone: ~70)');
    my @late = grep { $_ > 4 } @t;
    cmp_ok(scalar @late, '<=', 10, 'at most ~one per second per worker '
        . 'after a few seconds');

    my $r = $bo->get('/closed?key=bo');
    is($r->{status}, 503, 'a gated request fails closed meanwhile');
    $bo->stop;
    is_deeply([ bad_lines($bo) ], [], 'no alert/crash lines');
};

###############################################################################

subtest 'one server up among four listed: every worker finds it' => sub {
    # the 3.8 client alone advances twice per failed attempt
    # (ZOOKEEPER-2466): with an even number of servers, once it has been
    # round them all, it only tries half of them
    $zk->stop;
    my @dead = map { '127.0.0.1:' . free_port() } 1 .. 3;
    my @fleet = map {
        my @h = (@dead, $zk->hosts);
        push @h, shift @h for 1 .. $_;          # the live one anywhere
        nginx_start(conf(join(',', @h), '10s'), backend => $be)
    } 0 .. 3;
    sleep 3;                                    # rounds through all four
    $zk->start;
    ok(sessions_connected(25, @fleet), 'all 8 workers connect');
    for my $i (0 .. $#fleet) {
        my $r = $fleet[$i]->get('/closed?key=four');
        is($r->{headers}{'x-lock'}, 'ACQUIRED', "instance $i: ACQUIRED");
    }
    $_->stop for @fleet;
    ok(wait_for(sub {
        ($ng->get('/closed?key=four')->{headers}{'x-lock'} // '') eq 'ACQUIRED'
    }, 15, 0.2), 'the first instance takes locks again');
};

###############################################################################

subtest 'connection lost, session alive: places kept, release retried' => sub {
    my $px = ZkLock::FaultProxy->start($zk);
    my $cl = nginx_start(conf($px->hosts, '10s'), backend => $be);
    ok(sessions_connected($cl), 'connected through the proxy');

    $be->reset;
    my $h = http_parallel_bg([
        [ $cl->port, '/finish?key=cl&sleep=3000&id=h' ] ], timeout => 30);
    ok(wait_for(sub { $be->stats('cl')->{inflight} }, 5), 'h holds');
    my $w = http_parallel_bg([
        [ $cl->port, '/finish?key=cl&sleep=10&id=w1' ],
        [ $ng->port, '/finish?key=cl&sleep=10&id=w2' ],
    ], timeout => 30, stagger => 0.5);
    ok(wait_for(sub { zk_children($zk, '/f/finish') == 3 }, 5),
        'w1, then w2 (another instance) queue behind it');

    my $off = length $cl->error_log;
    my $cut = $px->cut(5);
    my $hr = http_parallel_collect($h, 30)->[0];
    my $ended = time;
    is($hr->{status}, 200, 'h ends meanwhile: 200');
    SKIP: {
        skip 'h ended after the cut (slow machine)', 1
            if $ended > $cut + 4.5;
        is(scalar(() = zk_children($zk, '/f/finish')), 3,
            'its node is still there: the delete could not be sent');
    }

    my $res = http_parallel_collect($w, 30);
    is_deeply([ map { $_->{status} } @$res ], [200, 200],
        'both waiters get the lock after the reconnect');
    is($res->[0]{headers}{'x-lock'}, 'ACQUIRED', 'w1: ACQUIRED');
    is_deeply($be->stats('cl')->{order}, [qw(h w1 w2)],
        'in their order: w1 kept its place');
    cmp_ok($be->stats('cl')->{max}, '==', 1, 'one at a time');
    my $log = substr($cl->error_log, $off);
    like($log, qr/zookeeper connection lost/, 'the connection was lost');
    unlike($log, qr/expired/, 'the session was not');
    no_ephemerals($zk, '/f', 'connection loss');
    $cl->stop;
    $px->stop;
    is_deeply([ bad_lines($cl) ], [], 'no alert/crash lines');
};

###############################################################################

subtest 'session expiry: waiters fail or pass, holders finish or abort' => sub {
    # nginx reaches ZooKeeper through a proxy that can cut it off
    my $px = ZkLock::FaultProxy->start($zk);
    my $ex = nginx_start(conf($px->hosts, '2s'), backend => $be);
    ok(sessions_connected($ex), 'connected through the proxy');

    my $name = '_c_00000000-0000-4000-8000-000000000001-lock-';
    my @h = map { zk_hold($zk, $_, name => $name, seconds => 120,
        session_timeout => 30) } '/f/open', '/f/closed';

    $be->reset;
    my $bg = http_parallel_bg([
        [ $ex->port, '/open-long?key=xo&sleep=10' ],
        [ $ex->port, '/closed-long?key=xc&sleep=10' ],
        [ $ex->port, '/finish?key=xf&sleep=12000' ],
        [ $ex->port, '/abort?key=xa&sleep=12000' ],
    ], timeout => 40);

    ok(wait_for(sub {
        $be->stats('xf')->{inflight} && $be->stats('xa')->{inflight}
            && zk_children($zk, '/f/open') == 2
            && zk_children($zk, '/f/closed') == 2
    }, 10), 'two hold their locks, two wait behind foreign holders');

    my $off = length $ex->error_log;
    my $cut = $px->cut(5);          # the 2 s session expires meanwhile
    ok(wait_for(sub {
        substr($ex->error_log, $off) =~ /zookeeper session 0x\S+ expired/
    }, 15), 'the session expired');
    my $expired = time;

    my $res = http_parallel_collect($bg, 40);
    my ($open, $closed, $finish, $abort) = @$res;
    my $at = sub { $_[0]{end} - $cut };

    is($open->{status}, 200, 'waiting, zk_lock_fail open: 200');
    is($open->{headers}{'x-lock'}, 'BYPASSED', '... BYPASSED');
    is($be->stats('xo')->{count}, 1, '... the backend was reached');
    is($closed->{status}, 503, 'waiting, zk_lock_fail closed: 503');
    is($closed->{headers}{'x-lock'}, 'ERROR', '... ERROR');
    for ([open => $open], [closed => $closed]) {
        cmp_ok($at->($_->[1]), '<', 12, "$_->[0]: at the expiry, not at "
            . 'the 20 s timeout');
    }

    is($finish->{status}, 200, 'holding, zk_lock_lost finish: 200');
    is($finish->{headers}{'x-lock'}, 'LOST', '... $zk_lock_status LOST');
    cmp_ok($finish->{time}, '>=', 11, '... after its 12 s backend call');
    is($abort->{status}, 0, 'holding, zk_lock_lost abort: cut off');
    cmp_ok($abort->{time}, '<', 11, '... before its backend call ended');

    my $log = substr($ex->error_log, $off);
    # let go when no word came for 3/4 of the timeout, before the expiry
    like($log, qr{\[error\].*zk_mutex "/f/finish" lost while held(?: \(-112: session expired\)|: no word from zookeeper, the session may expire)(?!, aborting)},
        'finish: "lost while held" at error');
    like($log, qr{\[error\].*zk_mutex "/f/abort" lost while held.*, aborting the request},
        'abort: "lost while held ..., aborting the request"');

    $_->release for @h;
    my $r = $ex->get('/finish?key=after');
    is($r->{headers}{'x-lock'}, 'ACQUIRED', 'the new session takes locks');
    no_ephemerals($zk, '/f', 'expiry');
    $ex->stop;
    $px->stop;
    is_deeply([ bad_lines($ex) ], [], 'no alert/crash lines');
};

###############################################################################

subtest 'ZooKeeper paused past the session timeout' => sub {
    my $pz = nginx_start(conf('%%ZK%%', '2s'), zk => $zk, backend => $be);
    ok(sessions_connected($pz), 'connected (2 s session)');

    $be->reset;
    my $bg = http_parallel_bg([
        [ $pz->port, '/finish?key=pz&sleep=2000&id=h' ],
        (map { [ $pz->port, "/closed?key=pz&sleep=10&id=w$_" ] } 1 .. 3),
        [ $pz->port, '/open?key=pzo&sleep=10&id=o' ],
    ], timeout => 30, stagger => 0.2);
    ok(wait_for(sub { $be->stats('pz')->{inflight} }, 5), 'one holds');

    $zk->pause;
    my $paused = time;
    sleep 4;
    $zk->resume;

    my $res = http_parallel_collect($bg, 30);
    is($res->[0]{status}, 200, 'the holder finishes');
    for my $r (@$res[1 .. 3]) {
        ok($r->{status} == 503 && $r->{time} < 1.5 + 2,
            "a waiter: 503 at its 1.5 s timeout, not later "
            . "($r->{status} in " . sprintf('%.1f', $r->{time}) . ' s)');
    }
    ok($res->[4]{status} == 200 && $res->[4]{time} < 1.5 + 2,
        'zk_lock_fail open: 200 within its timeout');

    ok(wait_for(sub {
        ($pz->get('/closed?key=pz2')->{headers}{'x-lock'} // '')
            eq 'ACQUIRED' }, 15, 0.2), 'locks are taken again');
    note sprintf 'locks again %.1f s after the pause began', time - $paused;
    no_ephemerals($zk, '/f', 'pause');
    $pz->stop;
    is_deeply([ bad_lines($pz) ], [], 'no alert/crash lines');
};

###############################################################################

is_deeply([ bad_lines($ng) ], [], 'no alert/crash lines');

done_testing;
