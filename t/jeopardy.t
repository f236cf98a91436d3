#!/usr/bin/perl
# A partitioned holder lets go before its session can expire (issue 17,
# item 4): nginx A holds a mutex in a long upstream call, nginx B waits;
# A is partitioned from ZooKeeper (a relay that swallows every byte both
# ways and leaves the sockets open, so that A's client notices only by its
# own timeout).  The server expires A's session a session timeout after it
# last heard from A and hands the lock to B; A must have cut its holder off
# before that, with zk_lock_lost abort, even though it is still
# disconnected.  The backend ends a request as soon as nginx closes its
# connection (hangup=1), so its peak count in flight shows any overlap.
#
#  1. session timeouts of 4 s and 10 s: the backend never sees A's and
#     B's requests at once; A's request is cut off (the client sees the
#     connection close), its log says why; B gets the lock; nothing is
#     left behind once A is back
#  2. a blip shorter than the margin (a 6 s session: a 1 s partition,
#     then a 1 s outage that refuses connections) cuts nobody: the
#     holder's request ends with 200 and ACQUIRED
#  3. zk_lock_lost finish: the holder is told (LOST, a warn line) and
#     finishes its call
#  4. connections refused for 1.5 s of a 4 s session (a restart): the
#     reconnection comes in time, nobody is cut
#  5. finish, a partition between 3/4 T and T that the session survives:
#     the holder keeps its node, the waiter of another instance gets the
#     lock only after the holder's call (never two in the backend)
#  no [alert]/[crit]/[emerg] line, no crashed worker

use strict;
use warnings;
use Test::More;
use Time::HiRes qw(time sleep);
use lib 't/lib';
use ZkLock::Test;
use ZkLock::FaultProxy;

require_prereqs(qw(nginx zookeeper kazoo module));

my $zk = zk_start();
my $be = backend_start();

sub conf {
    my ($hosts, $timeout) = @_;
    return <<"EOF";
    zk_hosts $hosts;
    zk_session_timeout $timeout;
    server {
        listen 127.0.0.1:%%PORT%%;
        add_header X-Lock \$zk_lock_status always;

        location /abort {
            zk_mutex /j/abort timeout=60s;
            zk_lock_lost abort;
            proxy_pass http://%%BACKEND%%;
        }
        location /finish {
            zk_mutex /j/finish timeout=60s;
            proxy_pass http://%%BACKEND%%;
        }
        location = /metrics {
            zk_lock_status_page prometheus;
        }
    }
EOF
}

# A reaches ZooKeeper through the relay, B directly
sub pair {
    my ($timeout) = @_;
    my $px = ZkLock::FaultProxy->start($zk);
    my $a = nginx_start(conf($px->hosts, $timeout), backend => $be,
        workers => 1);
    my $b = nginx_start(conf('%%ZK%%', $timeout), zk => $zk, backend => $be,
        workers => 1);
    ok(sessions_connected($a, $b), "A (through the relay) and B connected, "
        . "$timeout sessions");
    return ($px, $a, $b);
}

###############################################################################

for my $t (4, 10) {
    subtest "partitioned holder, ${t} s session: let go before the expiry"
        => sub {
        my ($px, $a, $b) = pair("${t}s");
        my $key = "part$t";
        $be->reset;

        my $ha = http_parallel_bg([ [ $a->port,
            "/abort?key=$key&sleep=120000&hangup=1&id=a" ] ], timeout => 150);
        ok(wait_for(sub { $be->stats($key)->{inflight} == 1 }, 10),
            'A holds, in a long upstream call');
        my $hb = http_parallel_bg([ [ $b->port,
            "/abort?key=$key&sleep=500&hangup=1&id=b" ] ], timeout => 150);
        ok(wait_for(sub { zk_children($zk, '/j/abort') == 2 }, 10),
            'B waits behind it');

        my $off = length $a->error_log;
        my $cut = $px->partition(3 * $t);

        my $rb = http_parallel_collect($hb, 150)->[0];
        is($rb->{status}, 200, 'B gets the lock once A\'s session expired');
        is($rb->{headers}{'x-lock'}, 'ACQUIRED', '... ACQUIRED');
        cmp_ok($rb->{end} - $cut, '>=', $t * 0.75,
            '... not before A\'s session could expire');

        my $ra = http_parallel_collect($ha, 150)->[0];
        is($ra->{status}, 0, 'A\'s request is cut off');
        cmp_ok($ra->{end} - $cut, '<', $t,
            '... before the server could expire its session');

        note sprintf 'partition at 0: A cut off at %.2f s, B done at %.2f s',
            $ra->{end} - $cut, $rb->{end} - $cut;

        my $st = $be->stats($key);
        is($st->{max}, 1, 'the backend never had A and B at once');
        is_deeply($st->{order}, [qw(a b)], '... A, then B');
        is($st->{hangups}, 1, '... A\'s call was hung up on');

        my $log = substr($a->error_log, $off);
        like($log, qr/\[error\].*no word from zookeeper for \d+ms, 3\/4 of the session timeout \(\d+ms\): session \S+ may expire, so its locks are let go now/,
            'A: "no word from zookeeper" at error');
        like($log, qr{\[error\].*zk_mutex "/j/abort" lost while held: no word from zookeeper, the session may expire, aborting the request},
            'A: "lost while held ..., aborting the request"');

        # the partition heals: A learns of the expiry and takes locks again
        ok(wait_for(sub {
            $a->error_log =~ /zookeeper session \S+ expired/
        }, 4 * $t), 'A hears of the expiry once the relay heals');

        # issue 37, item 4: let go at jeopardy, before the session could
        # expire: nobody else held it meanwhile, so not "lost" (which pages)
        my $m = $a->get('/metrics')->{body};
        like($m, qr/^zk_lock_requests_total\{path="\/j\/abort",type="mutex",result="jeopardy"\} 1$/m,
            'A: counted "jeopardy"');
        like($m, qr/^zk_lock_requests_total\{path="\/j\/abort",type="mutex",result="lost"\} 0$/m,
            '... not "lost", although the session then expired');
        ok(wait_for(sub {
            ($a->get("/abort?key=$key-after")->{headers}{'x-lock'} // '')
                eq 'ACQUIRED'
        }, 4 * $t, 0.5), 'A takes the lock again');
        no_ephemerals($zk, '/j', 'after the partition');

        $_->stop for $a, $b;
        $px->stop;
    };
}

###############################################################################

subtest 'a blip shorter than the margin cuts nobody' => sub {
    # 6 s: the reconnect after a 1 s outage took over 2 s once on a
    # loaded CI machine, and a 4 s session lets go at 3 s without word
    my ($px, $a, $b) = pair('6s');
    $be->reset;

    for my $blip ([ partition => sub { $px->partition(1) } ],
                  [ outage    => sub { $px->cut(1) } ])
    {
        my ($name, $do) = @$blip;
        my $off = length $a->error_log;
        my $h = http_parallel_bg([ [ $a->port,
            "/abort?key=blip-$name&sleep=5000&hangup=1" ] ], timeout => 30);
        ok(wait_for(sub { $be->stats("blip-$name")->{inflight} == 1 }, 10),
            "$name: A holds");
        $do->();
        my $r = http_parallel_collect($h, 30)->[0];
        is($r->{status}, 200, "$name of 1 s: the holder finishes, 200");
        is($r->{headers}{'x-lock'}, 'ACQUIRED', '... ACQUIRED');
        is($be->stats("blip-$name")->{hangups}, 0, '... not hung up on');
        my $log = substr($a->error_log, $off);
        unlike($log, qr/no word from zookeeper|lost while held|expired/,
            '... no jeopardy, no loss, no expiry');
    }

    $_->stop for $a, $b;
    $px->stop;
};

###############################################################################

# Refused connections (a server that restarts) for about a third of a 4 s
# session: the reconnection back-off comes closer as the jeopardy point
# nears, so the session is heard from again in time (t/matrix.t found
# that a 1.5 s refusal put a 4 s session in jeopardy every time)
subtest 'refused for 1.5 s of a 4 s session: nobody cut' => sub {
    my ($px, $a, $b) = pair('4s');
    $be->reset;
    for my $round (1 .. 2) {
        my $off = length $a->error_log;
        my $h = http_parallel_bg([ [ $a->port,
            "/abort?key=refused$round&sleep=5000&hangup=1" ] ], timeout => 30);
        ok(wait_for(sub { $be->stats("refused$round")->{inflight} == 1 }, 10),
            "round $round: A holds");
        $px->cut(1.5);
        my $r = http_parallel_collect($h, 30)->[0];
        is($r->{status}, 200, "round $round: the holder finishes, 200");
        is($r->{headers}{'x-lock'}, 'ACQUIRED', '... ACQUIRED');
        unlike(substr($a->error_log, $off),
            qr/no word from zookeeper|lost while held|expired/,
            '... no jeopardy, no loss, no expiry');
    }
    $_->stop for $a, $b;
    $px->stop;
};

###############################################################################

subtest 'zk_lock_lost finish: told, and finishes its call' => sub {
    my ($px, $a, $b) = pair('4s');
    $be->reset;

    my $h = http_parallel_bg([ [ $a->port,
        '/finish?key=fin&sleep=8000&hangup=1' ] ], timeout => 30);
    ok(wait_for(sub { $be->stats('fin')->{inflight} == 1 }, 10), 'A holds');
    my $off = length $a->error_log;
    $px->partition(12);

    my $r = http_parallel_collect($h, 30)->[0];
    is($r->{status}, 200, 'the holder finishes its call: 200');
    is($r->{headers}{'x-lock'}, 'LOST', '... $zk_lock_status LOST');
    like(substr($a->error_log, $off),
        qr{\[error\].*zk_mutex "/j/finish" lost while held: no word from zookeeper, the session may expire(?!, aborting)},
        '... "lost while held: no word from zookeeper" at error');

    ok(wait_for(sub {
        ($a->get('/finish?key=fin-after')->{headers}{'x-lock'} // '')
            eq 'ACQUIRED'
    }, 40, 0.5), 'A takes the lock again after the partition');
    no_ephemerals($zk, '/j', 'after the partition');

    $_->stop for $a, $b;
    $px->stop;
};

###############################################################################

# Issue 25, item 1: with finish, a partition between 3/4 T and T puts the
# session in jeopardy but it lives; the holder keeps its node, and the
# waiter in another instance does not get the lock while the holder runs
subtest 'finish, a partition the session survives: no second holder' => sub {
    my ($px, $a, $b) = pair('10s');
    $be->reset;

    my $ha = http_parallel_bg([ [ $a->port,
        '/finish?key=jf&sleep=14000&hangup=1&id=a' ] ], timeout => 60);
    ok(wait_for(sub { $be->stats('jf')->{inflight} == 1 }, 10), 'A holds');
    my $hb = http_parallel_bg([ [ $b->port,
        '/finish?key=jf&sleep=500&hangup=1&id=b' ] ], timeout => 60);
    ok(wait_for(sub { zk_children($zk, '/j/finish') == 2 }, 10),
        'B waits behind it');
    my $off = length $a->error_log;
    $px->partition(8);

    ok(wait_for(sub {
        substr($a->error_log, $off) =~ /zookeeper session \S+ is heard from again/
    }, 30), 'the partition heals, the session is heard from again');
    my $log = substr($a->error_log, $off);
    like($log, qr{zk_mutex "/j/finish" lost while held: no word from zookeeper},
        'A was in jeopardy: its holder was told');

    my $ra = http_parallel_collect($ha, 60)->[0];
    my $rb = http_parallel_collect($hb, 60)->[0];
    SKIP: {
        skip 'the session expired (a loaded machine): the documented overlap',
            4 if $log =~ /expired/;
        is($ra->{status}, 200, 'A finishes its call: 200');
        is($ra->{headers}{'x-lock'}, 'LOST', '... LOST');
        is($rb->{status}, 200, 'B gets the lock after A');
        is($be->stats('jf')->{max}, 1,
            'the backend never had A and B at once: A kept its node');
    }
    no_ephemerals($zk, '/j', 'after the partition');

    $_->stop for $a, $b;
    $px->stop;
};

done_testing();
