#!/usr/bin/perl
# zk_rwlock read keep=<time> (issue 38, item 6): the readers of an instance
# share one kept read node, with no ZooKeeper call while no writer waits;
# a writer (nginx's or Curator's) waits for a quantum and the reads
# running then, at most.
#
#  1. the hot path (1 nginx, 2 workers): 16 reads at once all run together
#     on one read node (one token), and 20 more on fresh connections make
#     no ZooKeeper write; a Curator reader on the path is let in at once
#     (readers share), and the node is Curator's read lock node
#  2. writers under a steady read load (2 nginx x 2 workers, readers on
#     fresh connections): an nginx writer and a Curator writer each get the
#     lock within seconds, never beside a read; every request 200; reads
#     ran side by side; no node left once keep has passed
#  3. readers that hang up while a writer waits behind their node: the
#     writer gets in, every other request 200, no node left
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

# reads and writes on one backend key; the id says which is which
sub conf {
    my ($path) = @_;
    return <<"EOF";
    zk_hosts %%ZK%%;
    server {
        listen 127.0.0.1:%%PORT%%;
        add_header X-Lock \$zk_lock_token always;
        location /r {
            zk_rwlock /kr/$path read keep=1s timeout=20s;
            proxy_pass http://%%BACKEND%%/r?key=$path&sleep=\$arg_sleep&rec=1&hangup=1&id=r\$arg_n;
        }
        location /w {
            zk_rwlock /kr/$path write timeout=20s;
            proxy_pass http://%%BACKEND%%/w?key=$path&sleep=\$arg_sleep&rec=1&hangup=1&id=w\$arg_n;
        }
    }
EOF
}

# the most reads in flight at once, and the writes that overlapped any
# other call (calls hung up on end when the backend notices: left out)
sub exclusion {
    my ($key) = @_;
    my @calls = grep { !$_->[4] } @{ $be->calls->{$key} // [] };
    my (@ev, $bad);
    for my $c (@calls) {
        my $end = $c->[1] // time;
        push @ev, [ $c->[0], 1 ], [ $end, -1 ];
        next unless $c->[3] =~ /^w/;
        $bad += grep { $_ != $c && $_->[0] < $end
            && ($_->[1] // time) > $c->[0] } @calls;
    }
    my ($n, $max) = (0, 0);
    for (sort { $a->[0] <=> $b->[0] || $a->[1] <=> $b->[1] } @ev) {
        $n += $_->[1];
        $max = $n if $n > $max;
    }
    return ($max, $bad // 0);
}

###############################################################################

subtest 'the hot path: readers share one kept node' => sub {
    my $ng = nginx_start(conf('hot'), zk => $zk, backend => $be,
        workers => 2);
    ok(sessions_connected($ng), 'the workers have sessions');
    $be->reset;

    my $res = http_parallel([ map { [ $ng->port, "/r?sleep=400&n=$_" ] }
        1 .. 16 ], timeout => 20);
    is(scalar(grep { $_->{status} == 200 } @$res), 16, '16 reads: all 200');
    my %tokens = map { ($_->{headers}{'x-lock'} // '') => 1 } @$res;
    is(scalar(keys %tokens), 1, '... on one node (one token)')
        or diag explain \%tokens;
    cmp_ok($be->stats('hot')->{max}, '>=', 8,
        '... side by side (' . $be->stats('hot')->{max} . ' at once)');

    my @kids = zk_children($zk, '/kr/hot');
    is(scalar @kids, 1, 'one node on the path');
    like($kids[0] // '', qr/^_c_[0-9a-f-]{36}-__READ__\d{10}\z/,
        '... named as Curator names a read lock\'s');

    my $z0 = zk_zxid($zk->port);
    my @r = map { $ng->get("/r?sleep=0&n=$_") } 100 .. 119;
    is(scalar(grep { $_->{status} == 200 } @r), 20,
        '20 more on fresh connections: all 200');
    is(zk_zxid($zk->port), $z0, '... with no ZooKeeper write');

    my $t0 = time;
    my $c = curator($zk, 'read', '/kr/hot', 200, 1, 10000);
    ok(curator_expect($c, qr/^ACQUIRED/, 20), 'a Curator reader acquires');
    my $bg = http_parallel_bg([ [ $ng->port, '/r?sleep=0&n=200' ] ],
        timeout => 10);
    ok(curator_expect($c, qr/^RELEASED/, 10), '... and releases');
    is(http_parallel_collect($bg, 10)->[0]{status}, 200,
        'an nginx read meanwhile: 200');
    $ng->stop;
    no_ephemerals($zk, '/kr/hot', 'nginx stopped', 5);
};

###############################################################################

subtest 'writers under a steady read load' => sub {
    my @fleet = map { nginx_start(conf('mix'), zk => $zk, backend => $be,
        workers => 2) } 1 .. 2;
    ok(sessions_connected(@fleet), 'every worker has a session');
    $be->reset;

    my $dir = tempdir('kr-load');
    my @c = map { { port => $fleet[$_ % 2]->port, uri => '/r?sleep=30',
        timeout => 25, gap => 0.002 } } 0 .. 7;
    open my $fh, '>', "$dir/spec.json" or die $!;
    print $fh $ZkLock::Test::JSON->encode({ until => time + 7, n0 => 1,
        clients => \@c });
    close $fh;
    my $load = spawn(name => 'load.py', log => "$dir/load.log",
        cmd => [ $ZkLock::Test::PYTHON, 't/lib/load.py',
            '--spec', "$dir/spec.json", '--out', "$dir/out.json" ]);
    sleep 2;

    my $t0 = time;
    my $w = $fleet[1]->get('/w?sleep=200&n=1', timeout => 20);
    my $tw = time - $t0;
    is($w->{status}, 200, 'an nginx writer: 200');
    cmp_ok($tw, '<', 6, sprintf('... within %.2f s (a quantum and the '
        . 'reads running, wide margin)', $tw));

    my $url = 'http://' . $be->addr . '/w?key=mix&sleep=200&rec=1&id=wc';
    $t0 = time;
    my $cw = curator($zk, 'write', '/kr/mix', 0, 1, 20000, $url);
    ok(curator_expect($cw, qr/^ACQUIRED/, 25), 'a Curator writer acquires');
    ok(curator_expect($cw, qr/^RELEASED/, 10), '... and releases');
    my $tc = time - $t0;
    cmp_ok($tc, '<', 10, sprintf('... within %.2f s of starting', $tc));

    proc_wait($load, 40);
    my $res = eval { $ZkLock::Test::JSON->decode(slurp("$dir/out.json")) }
        // [];
    cmp_ok(scalar @$res, '>', 40, 'the reads ran (' . @$res . ')');
    is(scalar(grep { $_->{status} == 200 } @$res), scalar @$res,
        'every read 200')
        or diag explain [ grep { $_->{status} != 200 } @$res ];
    my ($max, $bad) = exclusion('mix');
    cmp_ok($max, '>=', 2, "reads ran side by side ($max at once)");
    is($bad, 0, 'no write beside any other call');
    my %tokens = map { $_->{lock} => 1 } @$res;
    cmp_ok(scalar(keys %tokens), '<', @$res / 5,
        scalar(keys %tokens) . ' read nodes for ' . @$res . ' reads');
    no_ephemerals($zk, '/kr/mix', 'keep (1 s) passed', 6);
    $_->stop for @fleet;
};

###############################################################################

subtest 'readers that hang up while a writer waits' => sub {
    my $ng = nginx_start(conf('hang'), zk => $zk, backend => $be,
        workers => 2);
    ok(sessions_connected($ng), 'connected');
    $be->reset;

    my $reads = http_parallel_bg([ map { [ $ng->port, "/r?sleep=800&n=$_" ] }
        1 .. 4 ], timeout => 20);
    ok(wait_for(sub { $be->stats('hang')->{inflight} >= 4 }, 5),
        '4 reads hold');
    for my $i (0 .. 5) {
        http_abort_after($ng->port, '/r?sleep=500&n=' . (50 + $i),
            0.1 + 0.2 * $i);
    }
    sleep 0.05;
    my $w = http_parallel_bg([ [ $ng->port, '/w?sleep=100&n=1' ] ],
        timeout => 20);
    my $more = http_parallel_bg([ map { [ $ng->port, "/r?sleep=50&n=$_" ] }
        10 .. 13 ], timeout => 20, stagger => 0.2);
    is(http_parallel_collect($w, 25)->[0]{status}, 200,
        'the writer: 200');
    is(scalar(grep { $_->{status} == 200 }
        @{ http_parallel_collect($reads, 25) },
        @{ http_parallel_collect($more, 25) }), 8, 'the reads: all 200');
    my (undef, $bad) = exclusion('hang');
    is($bad, 0, 'no write beside any other call');
    no_ephemerals($zk, '/kr/hang', 'keep (1 s) passed', 6);
    $ng->stop;
};

done_testing;
