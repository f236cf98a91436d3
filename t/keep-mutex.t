#!/usr/bin/perl
# zk_mutex keep=<time> (issue 38, item 6): an instance that holds the mutex
# passes it to its own waiting requests, one at a time, for at most a
# quantum while others wait elsewhere, then hands it on (lock cohorting).
# The node is Curator's InterProcessMutex node, so Curator clients on the
# same path are excluded as ever.
#
#  1. the hot path (1 nginx, 2 workers): 20 requests on fresh connections
#     after the first run on its node: all 200, one token (the node's
#     czxid), ZooKeeper's zxid unchanged; one Curator mutex node on the
#     path; a Curator InterProcessMutex acquires within seconds while the
#     node idles (not after keep), and nginx's next request has a larger
#     token
#  2. a fleet: 3 nginx x 2 workers, 12 clients on fresh connections and
#     two Curator clients that hold the mutex for as long as their own GET
#     of the backend takes: never two at the backend, every request 200,
#     every instance served, both Curator clients served during the load,
#     tokens non-decreasing in the order the backend saw the requests,
#     several requests per node (cohorts) and far fewer ZooKeeper writes a
#     request than the same load on a mutex without keep, the longest
#     request within a wide margin of instances x quantum; no node left
#     once keep has passed
#  3. clients that hang up before the lock, while waiting, at the grant
#     and while holding (the first one surely): the others are served one
#     at a time, and no node is left once keep has passed
#  4. a reload of one instance in the middle of the load: every request
#     200, never two at the backend
#  no [alert]/[crit]/[emerg] line, no crashed worker (checked by the
#  harness at done_testing)

use strict;
use warnings;
use Test::More;
use Time::HiRes qw(time sleep);
use lib 't/lib';
use ZkLock::Test;
use ZkLock::Curator;

require_prereqs(qw(nginx zookeeper kazoo module));
curator_prereqs();

my $zk = zk_start();
my $be = backend_start();

# the backend is told the request's number (load.py's n) as its id
sub conf {
    my (%o) = @_;
    my $keep = $o{keep} // 'keep=1s';
    return <<"EOF";
    zk_hosts %%ZK%%;
    server {
        listen 127.0.0.1:%%PORT%%;
        add_header X-Lock \$zk_lock_token always;
        add_header X-Token \$zk_lock_token always;
        location /m {
            zk_mutex /km/$o{path} $keep timeout=20s;
            proxy_pass http://%%BACKEND%%/m?key=$o{path}&sleep=\$arg_sleep&rec=1&hangup=1&id=\$arg_n;
        }
    }
EOF
}

# closed-loop clients (t/lib/load.py) on fresh connections, until $secs
# have passed; $during runs meanwhile
sub load {
    my ($fleet, $clients, $secs, $during) = @_;
    my $dir = tempdir('km-load');
    my @c = map { { port => $fleet->[$_ % @$fleet]->port,
        uri => '/m?sleep=5', timeout => 25, gap => 0.002 } } 0 .. $clients - 1;
    open my $fh, '>', "$dir/spec.json" or die $!;
    print $fh $ZkLock::Test::JSON->encode({ until => time + $secs,
        n0 => 1, clients => \@c });
    close $fh;
    my $z0 = zk_zxid($zk->port);
    my $pid = spawn(name => 'load.py', log => "$dir/load.log",
        cmd => [ $ZkLock::Test::PYTHON, 't/lib/load.py',
            '--spec', "$dir/spec.json", '--out', "$dir/out.json" ]);
    $during->() if $during;
    proc_wait($pid, $secs + 40);
    my $res = eval { $ZkLock::Test::JSON->decode(slurp("$dir/out.json")) }
        // [];
    return { res => $res, writes => zk_zxid($zk->port) - $z0 };
}

###############################################################################

subtest 'the hot path: no ZooKeeper call on the kept mutex' => sub {
    my $ng = nginx_start(conf(path => 'hot', keep => 'keep=30s'),
        zk => $zk, backend => $be, workers => 2);
    ok(sessions_connected($ng), 'the workers have sessions');

    my $first = $ng->get('/m?sleep=0&n=1');
    is($first->{status}, 200, 'the first request: 200');
    my $token = $first->{headers}{'x-token'} // '';
    like($token, qr/^\d+$/, '... with a token');

    my $z0 = zk_zxid($zk->port);
    my @r = map { $ng->get("/m?sleep=0&n=$_") } 2 .. 21;
    my $z1 = zk_zxid($zk->port);
    is(scalar(grep { $_->{status} == 200 } @r), 20, '20 more: all 200');
    is(scalar(grep { ($_->{headers}{'x-token'} // '') eq $token } @r), 20,
        '... all with the first one\'s token');
    is($z1, $z0, '... and no ZooKeeper write (the zxid is unchanged)');

    my @kids = zk_children($zk, '/km/hot');
    is(scalar @kids, 1, 'one node on the path');
    like($kids[0] // '', qr/^_c_[0-9a-f-]{36}-lock-\d{10}\z/,
        '... named as Curator\'s InterProcessMutex names its own');

    my $t0 = time;
    my $c = curator($zk, 'mutex', '/km/hot', 300);
    ok(curator_expect($c, qr/^ACQUIRED/, 20), 'Curator acquires the mutex');
    cmp_ok(time - $t0, '<', 15, '... within seconds, not after keep (30 s)');
    ok(curator_expect($c, qr/^RELEASED/, 10), 'Curator released it');

    my $next = $ng->get('/m?sleep=0&n=99');
    is($next->{status}, 200, 'nginx\'s next request: 200');
    cmp_ok($next->{headers}{'x-token'} // 0, '>', $token,
        '... on a new node, with a larger token');
    $ng->stop;
    no_ephemerals($zk, '/km/hot', 'nginx stopped', 5);
};

###############################################################################

# what was in flight at the backend at once, from its recorded calls; a
# call that nginx hung up on (its client went away) ends a moment after
# nginx let go, when the backend notices: those are left out with $served
sub overlap {
    my ($key, $served) = @_;
    my @ev;
    for my $c (@{ $be->calls->{$key} // [] }) {
        next if $served && $c->[4];
        push @ev, [ $c->[0], 1 ], [ $c->[1] // time, -1 ];
    }
    my ($n, $max) = (0, 0);
    for (sort { $a->[0] <=> $b->[0] || $a->[1] <=> $b->[1] } @ev) {
        $n += $_->[1];
        $max = $n if $n > $max;
    }
    return $max;
}

subtest 'a fleet of 3 nginx x 2 workers and Curator' => sub {
    my @fleet = map { nginx_start(conf(path => 'fleet'), zk => $zk,
        backend => $be, workers => 2) } 1 .. 3;
    my @plain = map { nginx_start(conf(path => 'plain', keep => ''),
        zk => $zk, backend => $be, workers => 2) } 1 .. 3;
    ok(sessions_connected(@fleet, @plain), 'every worker has a session');
    $be->reset;

    my $base = load(\@plain, 12, 4);
    my @cur;
    my $kept = load(\@fleet, 12, 8, sub {
        sleep 2;
        for my $i (1 .. 2) {
            my $url = 'http://' . $be->addr
                . "/m?key=fleet&sleep=100&rec=1&id=curator$i";
            push @cur, curator($zk, 'mutex', '/km/fleet', 0, 1, 30000, $url);
            sleep 1;
        }
    });
    my @acq = map { curator_expect($_, qr/^ACQUIRED (\d+)/, 30) } @cur;

    my $res = $kept->{res};
    my $n = @$res;
    cmp_ok($n, '>', 50, "the load ran ($n requests)");
    is(scalar(grep { $_->{status} == 200 } @$res), $n, 'every request 200')
        or diag explain [ grep { $_->{status} != 200 } @$res ];
    is($be->stats('fleet')->{max}, 1, 'never two at the backend');
    is(overlap('fleet'), 1, '... also by the recorded calls');
    is(scalar(grep { defined } @acq), 2,
        'both Curator clients acquired during the load');

    my %per;
    $per{ $_->{port} }++ for @$res;
    is(scalar(grep { ($per{ $_->port } // 0) >= $n / 20 } @fleet), 3,
        'every instance served at least 5% of the requests')
        or diag explain \%per;

    # tokens in the order the backend started the requests
    my %token = map { $_->{n} => $_->{lock} } @$res;
    my @order = map { $token{ $_->[3] } } grep { $_->[3] =~ /^\d+$/ }
        @{ $be->calls->{fleet} // [] };
    my $back = grep { $order[$_] < $order[ $_ - 1 ] } 1 .. $#order;
    is($back, 0, 'tokens never go back in the order the backend saw them');
    my %nodes = map { $_ => 1 } @order;
    my $per_node = @order / (keys(%nodes) || 1);
    cmp_ok($per_node, '>=', 3, sprintf('%.1f requests a node (cohorts)',
        $per_node));

    my $wk = $kept->{writes} / ($n || 1);
    my $wp = $base->{writes} / (@{ $base->{res} } || 1);
    note sprintf 'without keep: %d requests in 4 s, %.2f writes a request; '
        . 'with keep: %d in 8 s, %.2f', scalar @{ $base->{res} }, $wp, $n, $wk;
    cmp_ok($wk, '<', $wp / 3, sprintf('ZooKeeper writes a request: %.2f, '
        . 'against %.2f without keep', $wk, $wp));

    my ($longest) = sort { $b <=> $a } map { $_->{end} - $_->{start} } @$res;
    cmp_ok($longest, '<', 8, sprintf('the longest request took %.2f s '
        . '(3 instances x 0.6 s quantum, wide margin)', $longest));

    $_->stop for @plain;
    no_ephemerals($zk, '/km/fleet', 'keep (1 s) passed', 6);
    $_->stop for @fleet;
};

###############################################################################

subtest 'clients that hang up at any moment' => sub {
    my @fleet = map { nginx_start(conf(path => 'hang'), zk => $zk,
        backend => $be, workers => 2) } 1 .. 2;
    ok(sessions_connected(@fleet), 'connected');
    $be->reset;

    # a holder that hangs up while it holds, then waiters on both
    # instances, some of which hang up (waiting, at the grant, holding)
    http_abort_after($fleet[0]->port, '/m?sleep=5000&n=90', 1.5);
    ok(wait_for(sub { $be->stats('hang')->{inflight} }, 5),
        'the first client holds');
    my $bg = http_parallel_bg([ map {
        [ $fleet[$_ % 2]->port, "/m?sleep=300&n=$_" ] } 1 .. 8 ],
        timeout => 30, stagger => 0.05);
    for my $i (0 .. 11) {
        http_abort_after($fleet[$i % 2]->port,
            '/m?sleep=200&n=' . (100 + $i), 0.05 + 0.15 * $i);
        sleep 0.02;
    }
    my $res = http_parallel_collect($bg, 40);
    is(scalar(grep { $_->{status} == 200 } @$res), 8,
        'the clients that stayed: all 200')
        or diag explain [ map { $_->{status} } @$res ];
    sleep 1;
    is(overlap('hang', 1), 1, 'never two at the backend (but for calls '
        . 'hung up on, which end when the backend notices)');
    my $hung = grep { $_->[4] } @{ $be->calls->{hang} // [] };
    cmp_ok($hung, '>', 0, "clients hung up while holding ($hung)");
    is($be->stats('hang')->{inflight}, 0, 'none left running');
    my $after = $fleet[0]->get('/m?sleep=0&n=200');
    is($after->{status}, 200, 'a request after them: 200');
    no_ephemerals($zk, '/km/hang', 'keep (1 s) passed', 6);
    $_->stop for @fleet;
};

###############################################################################

subtest 'a reload in the middle of the load' => sub {
    my @fleet = map { nginx_start(conf(path => 'reload'), zk => $zk,
        backend => $be, workers => 2) } 1 .. 2;
    ok(sessions_connected(@fleet), 'connected');
    $be->reset;
    my $kept = load(\@fleet, 8, 6, sub {
        sleep 2;
        ok($fleet[0]->reload, 'reload one instance');
    });
    my $res = $kept->{res};
    cmp_ok(scalar @$res, '>', 20, 'the load ran');
    is(scalar(grep { $_->{status} == 200 } @$res), scalar @$res,
        'every request 200')
        or diag explain [ grep { $_->{status} != 200 } @$res ];
    is($be->stats('reload')->{max}, 1, 'never two at the backend');
    no_ephemerals($zk, '/km/reload', 'keep (1 s) passed', 8);
    $_->stop for @fleet;
};

done_testing;
