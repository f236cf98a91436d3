#!/usr/bin/perl
# zk_semaphore leases=zk:<path>: the lease count comes from a znode (Curator
# SharedCount's 4-byte big-endian integer, or ASCII decimal), and a change
# of it changes the limit of the whole fleet without a reload; a missing or
# invalid node falls back to leases_default.

use strict;
use warnings;
use Test::More;
use Time::HiRes qw(time sleep);
use POSIX ();
use lib 't/lib';
use ZkLock::Test;

require_prereqs(qw(nginx zookeeper kazoo module));

my $zk = zk_start();
my $be = backend_start();

zk_set($zk, '/config/limit', '2');

my $conf = <<'EOF';
    zk_hosts %%ZK%%;

    server {
        listen 127.0.0.1:%%PORT%%;

        location /s {
            zk_semaphore /l/sem leases=zk:/config/limit leases_default=1
                         timeout=30s;
            proxy_pass http://%%BACKEND%%;
        }

        location /v2 {
            zk_semaphore /l/v2 leases=zk:/config/limit leases_default=1
                         protocol=v2 timeout=30s;
            proxy_pass http://%%BACKEND%%;
        }
    }
EOF

my @fleet = map { nginx_start($conf, zk => $zk, backend => $be) } 1 .. 2;

ok(sessions_connected(@fleet), 'every worker has a session');

sub burst {
    my ($uri, $key, $n) = @_;
    $be->reset;
    my $res = http_parallel([ map {
        [$fleet[$_ % 2]->port, "$uri?key=$key&sleep=400&id=$_"] } 1 .. $n ],
        timeout => 60);
    is(scalar(grep { $_->{status} == 200 } @$res), $n, "$key: all succeed");
    return $be->stats($key)->{max};
}

# every worker of the fleet has read the value once it logged it
sub fleet_sees {
    my ($v) = @_;
    return wait_for(sub {
        my $n = () = join('', map { $_->error_log } @fleet)
            =~ /lease count "\/config\/limit" is now $v\b/g;
        return $n >= 4;
    }, 10);
}

###############################################################################

# every worker reads the node when its session connects, before any request
ok(fleet_sees(2), 'the fleet read 2 before any request');
is(burst('/s', 'two', 10), 2, 'ASCII "2": 2 in flight');

zk_set($zk, '/config/limit', 4, int => 1);
ok(fleet_sees(4), 'the fleet sees the change within seconds');
is(burst('/s', 'four', 12), 4, 'big-endian 4: 4 in flight');

subtest 'raised under load, the waiters use the new leases' => sub {
    zk_set($zk, '/config/limit', '1');
    ok(fleet_sees(1), 'lowered to 1');

    $be->reset;
    my $pid = fork // die;
    if ($pid == 0) {
        sleep 1.5;
        zk_set($zk, '/config/limit', '3');
        POSIX::_exit(0);
    }
    ZkLock::Test::register_pid($pid, 'setter');

    my $t0 = time;
    my $res = http_parallel([ map {
        [$fleet[$_ % 2]->port, "/s?key=load&sleep=500&id=$_"] } 1 .. 12 ],
        timeout => 60);
    waitpid $pid, 0;

    is(scalar(grep { $_->{status} == 200 } @$res), 12, 'all succeed');
    is($be->stats('load')->{max}, 3, 'up to the new 3 in flight');
    my $took = time - $t0;
    ok($took < 4.5, 'faster than 12 one at a time') or diag "took $took";
};

subtest 'lowered under load, new grants follow' => sub {
    zk_set($zk, '/config/limit', '3');
    ok(fleet_sees(3), 'set to 3');

    $be->reset;
    my $bg = http_parallel_bg([ map {
        [$fleet[$_ % 2]->port, "/s?key=low&sleep=600&id=$_"] } 1 .. 10 ],
        timeout => 60);
    ok(wait_for(sub { $be->stats('low')->{inflight} == 3 }, 5),
        '3 in flight');
    zk_set($zk, '/config/limit', '1');
    my $changed = time;
    my $res = http_parallel_collect($bg);

    is(scalar(grep { $_->{status} == 200 } @$res), 10, 'all succeed');

    # those that started a second after the change found nobody else
    my @late = grep { $_->{end} - 0.6 > $changed + 1.2 } @$res;
    ok(@late >= 3, 'several started well after the change');
    is(scalar(grep { $_->{body} !~ / inflight=1$/m } @late), 0,
        'they ran alone: the new limit of 1')
        or diag explain [map { $_->{body} } @late];
};

subtest 'missing or invalid: leases_default' => sub {
    zk_set($zk, '/config/limit', 'many');
    ok(wait_for(sub { $fleet[0]->error_log =~
        /\[warn\].*lease count in "\/config\/limit" is invalid/ }, 10),
        'an invalid value is logged');
    is(burst('/s', 'invalid', 6), 1, 'leases_default applies');

    zk_set($zk, '/config/limit', '2');
    ok(fleet_sees(2), 'valid again');
    zk_delete($zk, '/config/limit');
    ok(wait_for(sub { $fleet[1]->error_log =~
        /\[warn\].*lease count "\/config\/limit" is missing/ }, 10),
        'a missing node is logged');
    is(burst('/s', 'missing', 6), 1, 'leases_default applies');

    zk_set($zk, '/config/limit', '2');
    ok(fleet_sees(2), 'created again: seen');

    # the count in use is leases_default, not 0 (issue 25, item 10)
    my $log = join '', map { $_->error_log } @fleet;
    unlike($log, qr/lease count "\/config\/limit" is now 0\b/,
        'no "is now 0" for a count that is missing or invalid');
};

subtest 'protocol=v2 reads the same count' => sub {
    zk_set($zk, '/config/limit', '3');
    ok(fleet_sees(3), 'set to 3');
    is(burst('/v2', 'v2', 12), 3, 'v2: 3 in flight');
};

ok(wait_for(sub { !zk_ephemerals($zk, '/l') }, 5), 'no node left');

done_testing();
