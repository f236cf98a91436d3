#!/usr/bin/perl
# zk_lock_fail local=<n> (issue 25, item 4): n per lock and instance, with
# any number of workers and across reloads.  ZooKeeper is out of reach (its
# address is a port nothing listens on: every connect is refused), so every
# gated request takes a local lease or waits for one.
#
#  1. 66 workers: a request holds the local lease (local=1) in a worker
#     whose number is 0, 1, 64 or 65 (the workers that shared a count with
#     another, worker number modulo 64); that other worker is killed and
#     started again by the master; requests that come meanwhile, in any
#     worker, wait and get zk_lock_status at their timeout: the backend
#     never sees 2 at a time; once the holder ends, the lease is there
#  2. a reload storm: a request holds the local lease in the first
#     generation of workers, nginx is reloaded twice; requests to the second
#     and third generations wait and get zk_lock_status while it holds
#     (never 2 at a time), and get the lease once it ended
#  3. local=1 becomes local=2 at a reload while the old generation holds a
#     lease: the new one takes one more, not two; and back to local=1: the
#     new generation waits until both leases are given back
#  4. five reloads, each with 300 locks of its own: the zone (room for
#     about 1000) takes the places of the removed locks again
#  no [alert]/[crit]/[emerg] line other than the killed worker's, and no
#  crash with error_log at debug level (2 to 4)

use strict;
use warnings;
use Test::More;
use Time::HiRes qw(time sleep);
use IO::Socket::INET;
use lib 't/lib';
use ZkLock::Test;

require_prereqs(qw(nginx python module));

my $be = backend_start();
my $closed = free_port();    # nobody listens there

sub conf {
    my (%o) = @_;
    my $n = $o{local} // 1;
    my $listen = $o{reuseport} ? ' reuseport' : '';
    return <<"EOF";
    zk_hosts 127.0.0.1:$closed;
    zk_session_timeout 2s;
    server {
        listen 127.0.0.1:%%PORT%%$listen;
        add_header X-Lock \$zk_lock_status always;

        location /one {
            zk_mutex /lb/one timeout=2s;
            zk_lock_fail local=$n;
            proxy_pass http://%%BACKEND%%;
        }
        location = /pid {
            return 200 "\$pid";
        }
    }
EOF
}

# a request on a connection of its own, HTTP/1.1 kept alive: the response
sub ask {
    my ($s, $uri, $close) = @_;
    my $conn = $close ? "Connection: close\r\n" : '';
    print {$s} "GET $uri HTTP/1.1\r\nHost: localhost\r\n$conn\r\n";
}

sub answer {
    my ($s) = @_;
    my $head = '';
    while ($head !~ /\r\n\r\n/) {
        my $n = sysread($s, $head, 1, length $head);
        return undef unless $n;
    }
    my ($len) = $head =~ /^Content-Length:\s*(\d+)/mi;
    my $body = '';
    while (length $body < ($len // 0)) {
        my $n = sysread($s, $body, $len - length $body, length $body);
        last unless $n;
    }
    my ($status) = $head =~ m{^HTTP/1\.\d (\d+)};
    my ($lock) = $head =~ /^X-Lock:\s*(\S+)/mi;
    return { status => $status, lock => $lock // '', body => $body };
}

###############################################################################

subtest '66 workers: a worker that starts again counts no lease away' => sub {
    my $ng = nginx_start(conf(reuseport => 1), backend => $be, workers => 66,
        timeout => 60);

    # the master starts worker 0, 1, ... in this order, and says so
    my @order = $ng->error_log =~ /start worker process (\d+)/g;
    is(scalar @order, 66, 'the master started 66 workers');
    my %number = map { $order[$_] => $_ } 0 .. $#order;
    my %partner = (0 => 64, 1 => 65, 64 => 0, 65 => 1);

    # a connection served by one of the workers that have a partner
    my ($s, $k);
    for (1 .. 500) {
        my $c = IO::Socket::INET->new(PeerAddr => '127.0.0.1',
            PeerPort => $ng->port, Proto => 'tcp', Timeout => 5) or next;
        ask($c, '/pid');
        my $r = answer($c) or next;
        my $w = $number{ $r->{body} };
        if (defined $w && exists $partner{$w}) {
            ($s, $k) = ($c, $w);
            last;
        }
        close $c;
    }
    ok($s, "a connection to worker $k") or return;

    $be->reset;
    ask($s, '/one?key=coll&sleep=8000&id=holder', 1);
    ok(wait_for(sub { $be->stats('coll')->{inflight} == 1 }, 10),
        "a request holds the local lease in worker $k");

    my $victim = $order[ $partner{$k} ];
    kill 'KILL', $victim or die "kill $victim: $!";
    ok(wait_for(sub {
        my @w = $ng->worker_pids;
        @w == 66 && !grep { $_ == $victim } @w
    }, 20), "worker $partner{$k} killed, and started again");
    $ng->expect_log(
        qr/\[alert\] \d+#\d+: worker process $victim exited on signal 9$/);
    sleep 0.5;    # the new worker's start (where it cleared a count)

    my $res = http_parallel([ map { [ $ng->port,
        "/one?key=coll&sleep=300&id=$_" ] } 1 .. 6 ], timeout => 10);
    is($be->stats('coll')->{max}, 1, 'never 2 at a time');
    is(scalar(grep { $_->{status} == 503 } @$res), 6,
        'the others get zk_lock_status at their timeout')
        or diag(explain([ map { "$_->{status} "
            . ($_->{headers}{'x-lock'} // '') } @$res ]));

    my $h = answer($s);
    is($h->{status}, 200, 'the holder: 200');
    is($h->{lock}, 'LOCAL', '... LOCAL');
    close $s;

    my $r = $ng->get('/one?key=coll&id=after');
    is($r->{headers}{'x-lock'}, 'LOCAL', 'then the lease is there');
    is($be->stats('coll')->{max}, 1, '... never 2 at a time');
    $ng->stop;
};

###############################################################################

# at debug level: a waiter's poll timer logged the fd of a connection it
# does not have, and the worker crashed
my $ng = nginx_start(conf(), backend => $be, log_level => 'debug');

subtest 'a reload storm: the lease of the old generation still counts' => sub {
    $be->reset;
    my $h = http_parallel_bg([ [ $ng->port,
        '/one?key=storm&sleep=10000&id=first' ] ], timeout => 30);
    ok(wait_for(sub { $be->stats('storm')->{inflight} == 1 }, 10),
        'a request holds the local lease');

    my @mid;
    for my $gen (2, 3) {
        ok($ng->reload, "reload: generation $gen");
        my $r = $ng->get("/one?key=storm&sleep=300&id=gen$gen");
        is($r->{status}, 503,
            "generation $gen: zk_lock_status at the timeout")
            or diag("$r->{status} " . ($r->{headers}{'x-lock'} // ''));
        push @mid, $r;
    }
    is($be->stats('storm')->{max}, 1, 'never 2 at a time');

    my $first = http_parallel_collect($h, 30)->[0];
    is($first->{status}, 200, 'the holder: 200');
    my $r = $ng->get('/one?key=storm&id=last');
    is($r->{headers}{'x-lock'}, 'LOCAL',
        'once it ended, the new generation gets the lease');
    is($be->stats('storm')->{max}, 1, '... never 2 at a time');
};

subtest 'local=n changes at a reload' => sub {
    $be->reset;
    my $h = http_parallel_bg([ [ $ng->port,
        '/one?key=grow&sleep=10000&id=old' ] ], timeout => 30);
    ok(wait_for(sub { $be->stats('grow')->{inflight} == 1 }, 10),
        'local=1: a request holds the local lease');

    ok($ng->reload(conf(local => 2)), 'reload: local=2');
    my $g = http_parallel_bg([ [ $ng->port,
        '/one?key=grow&sleep=9000&id=new' ] ], timeout => 30);
    ok(wait_for(sub { $be->stats('grow')->{inflight} == 2 }, 10),
        'the new generation takes the second lease');
    my $r = $ng->get('/one?key=grow&id=third');
    is($r->{status}, 503, 'not a third one');

    ok($ng->reload(conf(local => 1)), 'reload: local=1 again');
    $r = $ng->get('/one?key=grow&id=fourth');
    is($r->{status}, 503, 'local=1 with 2 held: none more');
    is($be->stats('grow')->{max}, 2, 'never more than 2 at a time');

    is(http_parallel_collect($h, 30)->[0]{status}, 200, 'the old one: 200');
    is(http_parallel_collect($g, 30)->[0]{status}, 200, 'the other: 200');
    $r = $ng->get('/one?key=grow&id=fifth');
    is($r->{headers}{'x-lock'}, 'LOCAL', 'then local=1 has its lease');
};

###############################################################################

# 300 locks of their own per configuration: the zone (1 MB) has room for
# about 1000, so the fourth one finds it full of removed locks
sub many {
    my ($gen) = @_;
    my $locs = join '', map { <<"EOF" } 1 .. 300;
        location /m$_ {
            zk_mutex /lb/gen$gen/lock$_ timeout=1s;
            zk_lock_fail local=1;
            proxy_pass http://%%BACKEND%%;
        }
EOF
    return conf() =~ s/(        location = \/pid)/$locs$1/r;
}

subtest 'locks removed by reloads: their places are taken again' => sub {
    my $off = length $ng->error_log;
    for my $gen (1 .. 5) {
        ok($ng->reload(many($gen)), "reload: 300 locks of generation $gen");
        my $r = $ng->get("/m$gen?key=many$gen");
        is($r->{headers}{'x-lock'}, 'LOCAL', '... a local lease');
    }
    unlike(substr($ng->error_log, $off), qr/no room/, 'never "no room"');
};

$ng->stop;

done_testing();
