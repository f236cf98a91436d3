#!/usr/bin/perl
# fair=<key> fair_weight=<n|$var> fair_max=<n|n%> on kept leases (issue
# 39: weighted fair queuing between the flows of one instance's requests;
# across the fleet, t/fair-fleet.t).
#
#  1. nginx -t: fair= without keep=, on zk_rwlock, with weight=, empty;
#     fair_weight=0, =1001, without fair=; fair_max=0, =101%, =x, without
#     fair=, on zk_mutex: each fails naming the problem; valid uses pass
#     (zk_semaphore, zk_mutex, fair_weight from a variable, fair_max=2,
#     fair_max=25%)
#  2. a quiet flow is not behind a noisy one's backlog (1 worker,
#     leases=2): 12 requests of one tenant queue, then one of another;
#     with fair= the quiet one starts at the backend before at least 6 of
#     the noisy ones that came before it, without fair= (FIFO) before none
#     of them; never more than 2 at the backend; all 200
#  3. the same through the instance pool (2 workers: the requests of the
#     worker that does not keep the leases are asked for over a unix
#     socket, with their flows), and on a kept zk_mutex
#  4. weights (fair_weight=$arg_w): two tenants, 3 and 1, each with 12
#     requests queued in turns on one lease: of the first 12 served, the
#     heavier tenant has at least 8, the lighter at least 2
#  4b. fair_max=50% on 4 leases (2 workers): 8 requests of one tenant
#     at once run 2 at a time (never more at the backend, though 4 leases
#     are free); beside another tenant's, the two take the 4 leases
#  5. a bad fair_weight from a variable: 400, and no node made
#  6. the key stays in nginx: $zk_lock_flow is 16 hex digits, one per
#     tenant, the same for each of its requests; neither the error log (at
#     info) nor any node's data on the path has the key
#  7. a reload while a noisy flow's requests wait (2 workers): every
#     request of the old generation served (200), never more than 2 at the
#     backend; the new generation (a new secret, new workers) is fair too:
#     the quiet request ahead of most of the noisy ones
#  8. stream: nginx -t refuses fair= without keep=; two servers on one
#     path, fair=$server_port: the quiet server's connection starts before
#     most of the noisy server's that came before it; $zk_lock_flow in the
#     stream log, one per server; while both wait, the HTTP status page
#     shows the stream lock's 2 flows, its claim and its flows that hold
#     the most (the noisy one, by its $zk_lock_flow, with its requests),
#     and zk_lock_fair_flows has them with layer="stream"
#  no [alert]/[crit]/[emerg] line, no crashed worker (checked by the
#  harness at done_testing)

use strict;
use warnings;
use Test::More;
use Time::HiRes qw(time sleep);
use lib 't/lib';
use ZkLock::Test;
use ZkLock::Test::Stream;

require_prereqs(qw(nginx zookeeper kazoo module stream));

my $zk = zk_start();
my $be = backend_start();

sub conf {
    my ($extra) = @_;
    $extra //= '';
    return <<"EOF";
    zk_hosts %%ZK%%;
    map \$arg_w \$fair_w { "" 1; default \$arg_w; }
    log_format fair '\$arg_id \$zk_lock_flow \$status';

    server {
        listen 127.0.0.1:%%PORT%%;
        access_log logs/fair.log fair;

        location /fair {
            zk_semaphore /t/fair leases=2 keep=5s timeout=20s
                         fair=\$http_x_tenant fair_weight=\$fair_w;
            proxy_pass http://%%BACKEND%%;
        }

        location /fifo {
            zk_semaphore /t/fifo leases=2 keep=5s timeout=20s;
            proxy_pass http://%%BACKEND%%;
        }

        location /one {
            zk_semaphore /t/one leases=1 keep=5s timeout=30s
                         fair=\$http_x_tenant fair_weight=\$fair_w;
            proxy_pass http://%%BACKEND%%;
        }

        location /mutex {
            zk_mutex /t/mutex keep=5s timeout=20s fair=\$http_x_tenant;
            proxy_pass http://%%BACKEND%%;
        }
        $extra
    }
EOF
}

sub tenant { return { headers => { 'X-Tenant' => $_[0] } } }

# the backend's calls of $key, in the order they started
sub calls {
    my ($key) = @_;
    return @{ $be->calls->{$key} // [] };
}

subtest 'nginx -t names what is wrong' => sub {
    my @bad = (
        [ 'zk_semaphore /a leases=2 fair=$arg_t;', qr/"fair" needs "keep"/ ],
        [ 'zk_rwlock /a read keep=1s fair=$arg_t;',
          qr/"fair" is for "zk_semaphore" and "zk_mutex"/ ],
        [ 'zk_semaphore /a leases=4 keep=1s weight=2 fair=$arg_t;',
          qr/"fair" is not for "weight"/ ],
        [ 'zk_semaphore /a leases=2 keep=1s fair=;', qr/invalid fair "fair="/ ],
        [ 'zk_semaphore /a leases=2 keep=1s fair=$arg_t fair_weight=0;',
          qr/invalid fair_weight "fair_weight=0", 1 to 1000/ ],
        [ 'zk_semaphore /a leases=2 keep=1s fair=$arg_t fair_weight=1001;',
          qr/invalid fair_weight/ ],
        [ 'zk_semaphore /a leases=2 keep=1s fair_weight=3;',
          qr/"fair_weight" is only for "fair"/ ],
        [ 'zk_semaphore /a leases=2 keep=1s fair=$arg_t fair=$arg_u;',
          qr/"fair" parameter is duplicate/ ],
        [ 'zk_semaphore /a leases=4 keep=1s fair=$arg_t fair_max=0;',
          qr/invalid fair_max "fair_max=0": the leases a flow may hold/ ],
        [ 'zk_semaphore /a leases=4 keep=1s fair=$arg_t fair_max=101%;',
          qr/invalid fair_max "fair_max=101%"/ ],
        [ 'zk_semaphore /a leases=4 keep=1s fair=$arg_t fair_max=x;',
          qr/invalid fair_max "fair_max=x"/ ],
        [ 'zk_semaphore /a leases=4 keep=1s fair_max=2;',
          qr/"fair_max" is only for "fair"/ ],
        [ 'zk_mutex /a keep=1s fair=$arg_t fair_max=1;',
          qr/"fair_max" is for "zk_semaphore": a mutex has one lease/ ],
    );
    for my $b (@bad) {
        my ($rc, $out) = nginx_test_conf(<<"EOF");
    zk_hosts 127.0.0.1:1;
    server { listen 127.0.0.1:%%PORT%%; location / { $b->[0] } }
EOF
        isnt($rc, 0, "refused: $b->[0]");
        like($out, $b->[1], '... naming the problem');
    }
    my ($rc, $out) = nginx_test_conf(<<'EOF');
    zk_hosts 127.0.0.1:1;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /s { zk_semaphore /s leases=2 keep=1s fair=$arg_t; }
        location /w {
            zk_semaphore /w leases=2 keep=1s fair=$arg_t fair_weight=$arg_w;
        }
        location /m { zk_mutex /m keep=1s fair=$remote_addr fair_weight=5; }
        location /x {
            zk_semaphore /x leases=8 keep=1s fair=$arg_t fair_max=2;
        }
        location /p {
            zk_semaphore /p leases=8 keep=1s fair=$arg_t fair_max=25%;
        }
    }
EOF
    is($rc, 0, 'valid uses pass') or diag $out;
};

# 12 requests of "noisy" queue (staggered, so they queue in order), then
# one of "quiet": how many of the noisy ones start at the backend after
# the quiet one does
sub quiet_ahead {
    my ($ng, $loc, $key) = @_;
    my $n = 12;
    my @req = map {
        [ $ng->port, "/$loc?key=$key&sleep=150&rec=1&id=noisy-$_",
          tenant('noisy') ]
    } 1 .. $n;
    push @req, [ $ng->port, "/$loc?key=$key&sleep=150&rec=1&id=quiet",
                 tenant('quiet') ];
    my $res = http_parallel(\@req, stagger => 0.02, timeout => 30);
    is(scalar(grep { $_->{status} == 200 } @$res), $n + 1,
       "$loc: every request 200")
        or diag explain [ map { "$_->{status} $_->{error}" } @$res ];
    my @c = calls($key);
    my ($q) = grep { $c[$_][3] eq 'quiet' } 0 .. $#c;
    return (undef, 0) unless defined $q;
    my $peak = (peak_in_flight([ map { { start => $_->[0], end => $_->[1],
        w => 1 } } @c ]))[0];
    return (scalar(@c) - 1 - $q, $peak);
}

subtest 'a quiet flow is not behind a noisy one (1 worker)' => sub {
    my $ng = nginx_start(conf(), zk => $zk, backend => $be, workers => 1);
    wait_for(sub { $ng->get('/fifo?key=warm')->{status} == 200 }, 15)
        or BAIL_OUT('nginx never served');

    my ($after, $peak) = quiet_ahead($ng, 'fair', 'q-fair');
    cmp_ok($after, '>=', 6,
        "fair=: the quiet request started before $after of the 12 noisy "
        . "ones queued before it");
    cmp_ok($peak, '<=', 2, "never more than 2 at the backend ($peak)");

    ($after, $peak) = quiet_ahead($ng, 'fifo', 'q-fifo');
    is($after, 0, 'without fair=: first come, first served');
    cmp_ok($peak, '<=', 2, "never more than 2 at the backend ($peak)");
    $ng->stop;
};

subtest 'through the instance pool (2 workers), and a kept mutex' => sub {
    my $ng = nginx_start(conf(), zk => $zk, backend => $be, workers => 2);
    wait_for(sub { $ng->get('/fifo?key=warm2')->{status} == 200 }, 15)
        or BAIL_OUT('nginx never served');

    my ($after, $peak) = quiet_ahead($ng, 'fair', 'p-fair');
    cmp_ok($after, '>=', 5,
        "2 workers: the quiet request started before $after of the noisy "
        . 'ones');
    cmp_ok($peak, '<=', 2, "never more than 2 at the backend ($peak)");

    ($after, $peak) = quiet_ahead($ng, 'mutex', 'p-mutex');
    cmp_ok($after, '>=', 6,
        "zk_mutex keep=: the quiet request started before $after of the "
        . 'noisy ones');
    is($peak, 1, 'the mutex: one at a time');
    $ng->stop;
};

subtest 'weights' => sub {
    my $ng = nginx_start(conf(), zk => $zk, backend => $be, workers => 1);
    wait_for(sub { $ng->get('/fifo?key=warm3')->{status} == 200 }, 15)
        or BAIL_OUT('nginx never served');

    # one request holds the lease while both tenants queue, in turns
    my @req = ([ $ng->port, '/one?key=w&sleep=400&rec=1&id=first',
                 tenant('first') ]);
    for my $i (1 .. 12) {
        push @req,
            [ $ng->port, "/one?key=w&sleep=60&rec=1&id=heavy-$i&w=3",
              tenant('heavy') ],
            [ $ng->port, "/one?key=w&sleep=60&rec=1&id=light-$i&w=1",
              tenant('light') ];
    }
    my $res = http_parallel(\@req, stagger => 0.01, timeout => 30);
    is(scalar(grep { $_->{status} == 200 } @$res), scalar(@req),
       'every request 200');
    my @order = map { $_->[3] } calls('w');
    shift @order;
    my @first = @order[0 .. 11];
    my $heavy = grep { /^heavy/ } @first;
    my $light = grep { /^light/ } @first;
    cmp_ok($heavy, '>=', 8, "fair_weight 3: $heavy of the first 12");
    cmp_ok($light, '>=', 2, "fair_weight 1: $light of the first 12");
    $ng->stop;
};

# fair_max=: a flow never holds more than its cap, even with leases idle;
# another flow takes the rest
subtest 'fair_max' => sub {
    my $ng = nginx_start(conf(<<'EOF'), zk => $zk, backend => $be,
        location /capped {
            zk_semaphore /t/capped leases=4 keep=5s timeout=20s
                         fair=$http_x_tenant fair_max=50%;
            proxy_pass http://%%BACKEND%%;
        }
EOF
        workers => 2);
    wait_for(sub { $ng->get('/fifo?key=warm5')->{status} == 200 }, 15)
        or BAIL_OUT('nginx never served');
    my $t0 = time;
    my $res = http_parallel([ map { [ $ng->port,
        "/capped?key=cap-a&sleep=400", tenant('a') ] } 1 .. 8 ],
        timeout => 30);
    my $took = time - $t0;
    is(scalar(grep { $_->{status} == 200 } @$res), 8, 'every request 200');
    is($be->stats('cap-a')->{max}, 2, 'fair_max=50% of 4: 2 at once, '
       . 'never more, though 4 leases are free');
    cmp_ok($took, '>=', 1.4, sprintf('8 requests of 400 ms, 2 at a time '
       . '(%.1f s)', $took));

    # the other flow takes the other two, beside it
    $res = http_parallel([ (map { [ $ng->port,
        "/capped?key=cap-ab&sleep=400&id=a$_", tenant('a') ] } 1 .. 6),
        (map { [ $ng->port, "/capped?key=cap-ab&sleep=400&id=b$_",
        tenant('b') ] } 1 .. 6) ], timeout => 30);
    is(scalar(grep { $_->{status} == 200 } @$res), 12, 'two flows: every '
       . 'request 200');
    is($be->stats('cap-ab')->{max}, 4, 'the two flows use the 4 leases');
    $ng->stop;
    ok(wait_for(sub { !zk_ephemerals($zk, '/t/capped') }, 10),
       'no node left');
};

subtest 'a bad fair_weight from a variable: 400, no node' => sub {
    my $ng = nginx_start(conf(), zk => $zk, backend => $be, workers => 1);
    my $r = $ng->get('/fair?key=bad&w=0', headers => { 'X-Tenant' => 'a' });
    is($r->{status}, 400, 'fair_weight=0 from $arg_w: 400');
    $r = $ng->get('/fair?key=bad&w=x', headers => { 'X-Tenant' => 'a' });
    is($r->{status}, 400, 'fair_weight=x: 400');
    is(scalar(zk_ephemerals($zk, '/t/fair')), 0, 'no node on the path');
    like($ng->error_log, qr/invalid fair_weight "0", 1 to 1000 expected/,
         'the error log says why');
    $ng->stop;
};

subtest 'the key stays in nginx' => sub {
    my $ng = nginx_start(conf(), zk => $zk, backend => $be, workers => 2);
    my $key = 'tenant-key-5f1c0e';
    my @req;
    for my $i (1 .. 4) {
        push @req, [ $ng->port, "/fair?key=k&sleep=50&id=a$i",
                     tenant($key) ],
                   [ $ng->port, "/fair?key=k&sleep=50&id=b$i",
                     tenant('other') ];
    }
    my $res = http_parallel(\@req, timeout => 20);
    is(scalar(grep { $_->{status} == 200 } @$res), 8, 'all 200');

    # the nodes' data while they are kept
    my @data = map { (zk_get($zk, $_) // {})->{data} // '' }
        zk_tree($zk, '/t/fair');
    ok(@data, 'nodes kept on the path');
    ok(!grep({ index($_, $key) >= 0 } @data), 'no node has the key');

    my %flow;
    for (split /\n/, slurp($ng->prefix . '/logs/fair.log')) {
        my ($id, $f) = split ' ';
        next unless defined $f && $id =~ /^([ab])\d$/;
        $flow{$1}{$f}++;
    }
    is(scalar(keys %{ $flow{a} // {} }), 1, 'one flow for the key');
    is(scalar(keys %{ $flow{b} // {} }), 1, 'one for the other');
    my ($fa) = keys %{ $flow{a} // {} };
    my ($fb) = keys %{ $flow{b} // {} };
    like($fa // '', qr/^[0-9a-f]{16}\z/, '$zk_lock_flow: 16 hex digits');
    isnt($fa // '', $fb // '', 'two tenants, two flows');
    ok(index($ng->error_log, $key) < 0, 'the error log has no key');
    $ng->stop;
};

subtest 'a reload while flows wait' => sub {
    my $ng = nginx_start(conf(), zk => $zk, backend => $be, workers => 2);
    wait_for(sub { $ng->get('/fifo?key=warm4')->{status} == 200 }, 15)
        or BAIL_OUT('nginx never served');

    my @req = map {
        [ $ng->port, "/fair?key=rl&sleep=100&rec=1&id=n$_",
          tenant('noisy') ]
    } 1 .. 16;
    push @req, [ $ng->port, '/fair?key=rl&sleep=100&rec=1&id=q',
                 tenant('quiet') ];
    my $bg = http_parallel_bg(\@req, stagger => 0.02, timeout => 30);
    sleep 0.5;
    ok($ng->reload, 'reloaded while they wait');
    my $res = http_parallel_collect($bg, 40);
    is(scalar(grep { $_->{status} == 200 } @$res), scalar(@req),
       'every request of the old generation 200')
        or diag explain [ map { "$_->{status} $_->{error}" } @$res ];
    my $peak = (peak_in_flight([ map { { start => $_->[0], end => $_->[1],
        w => 1 } } calls('rl') ]))[0];
    cmp_ok($peak, '<=', 2, "never more than 2 at the backend ($peak)");

    my $after;
    ($after, $peak) = quiet_ahead($ng, 'fair', 'rl-after');
    cmp_ok($after, '>=', 5,
        "the new generation: the quiet request before $after of the noisy");
    cmp_ok($peak, '<=', 2, "never more than 2 at the backend ($peak)");
    $ng->stop;
};

subtest 'stream' => sub {
    my ($rc, $out) = nginx_test_conf(stream_http(), dummy => 1,
        stream => stream_conf('%%ZK%%', free_port() =>
            'zk_semaphore /st/fair leases=2 fair=$server_port;'));
    isnt($rc, 0, 'fair= without keep= refused in stream');
    like($out, qr/"fair" needs "keep"/, '... naming the problem');

    my ($noisy, $quiet) = (free_port(), free_port());
    my $lock = 'zk_semaphore /st/fair leases=2 keep=5s timeout=20s '
        . 'fair=$server_port;';
    my $ng = nginx_start(stream_http(), zk => $zk, backend => $be,
        workers => 1,
        stream => stream_conf('%%ZK%%', $noisy => $lock, $quiet => $lock)
            . "    log_format flow '\$server_port \$zk_lock_flow';\n"
            . "    access_log %%PREFIX%%/logs/flow.log flow;\n");
    ok(wait_for(sub { http_get($quiet, '/c?key=st-warm')->{status} == 200 },
                15), 'served');

    my @req = map { [ $noisy, "/c?key=st&sleep=300&rec=1&id=noisy-$_" ] }
        1 .. 12;
    push @req, map { [ $quiet, '/c?key=st&sleep=300&rec=1&id=quiet' ] }
        1 .. 3;
    my $bg = http_parallel_bg(\@req, stagger => 0.02, timeout => 30);

    # the HTTP status page shows the stream lock's flows, counted every
    # quantum (600 ms) by the pool
    my ($entry, $metrics);
    wait_for(sub {
        my $st = eval { $ZkLock::Test::JSON->decode(
            http_get($ng->port, '/zk-status')->{body}) } // {};
        ($entry) = grep { $_->{path} eq '/st/fair' } @{ $st->{stream} // [] };
        $metrics = http_get($ng->port, '/zk-metrics')->{body} // '';
        ($entry->{fair}{flows} // 0) >= 2;
    }, 3, 0.1);
    my $res = http_parallel_collect($bg, 40);
    is(scalar(grep { $_->{status} == 200 } @$res), 15, 'all served');
    is($entry->{fair}{flows} // 0, 2, 'the status page: the stream lock\'s '
       . 'flows (2) while both servers wait') or diag explain $entry;
    ok(defined $entry->{fair}{claim} && $entry->{fair}{claim} >= 0,
       '... and the claim');
    like($metrics, qr/^zk_lock_fair_flows\{path="\/st\/fair",
        type="semaphore",layer="stream"\}\ 2$/mx,
        '... zk_lock_fair_flows with layer="stream"');
    my %top = map { $_->{flow} => $_ } @{ $entry->{fair}{top} // [] };
    my @c = calls('st');
    my ($q) = grep { $c[$_][3] eq 'quiet' } 0 .. $#c;
    cmp_ok(defined $q ? $#c - $q : 0, '>=', 6,
        'the quiet server\'s connection started before most of the noisy');
    my $peak = (peak_in_flight([ map { { start => $_->[0], end => $_->[1],
        w => 1 } } @c ]))[0];
    cmp_ok($peak, '<=', 2, "never more than 2 at the backend ($peak)");

    my %flow;
    for (split /\n/, slurp($ng->prefix . '/logs/flow.log')) {
        my ($port, $f) = split ' ';
        $flow{$port}{$f}++ if defined $f && $f =~ /^[0-9a-f]{16}\z/;
    }
    is(scalar(keys %{ $flow{$noisy} // {} }), 1,
       '$zk_lock_flow: one flow for the noisy server');
    is(scalar(keys %{ $flow{$quiet} // {} }), 1, '... one for the quiet');
    my ($nf) = keys %{ $flow{$noisy} // {} };
    ok($nf && $top{$nf} && $top{$nf}{held} + $top{$nf}{waiting} >= 2,
       'the status page: the noisy flow, by its $zk_lock_flow, among the '
       . 'top flows with its requests') or diag explain \%top;
    $ng->stop;
};

done_testing;
