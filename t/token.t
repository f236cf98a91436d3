#!/usr/bin/perl
# $zk_lock_token, the fencing token of a grant: the czxid of the request's
# node, which grows with every node ZooKeeper creates.  Successive holders
# across a fleet get strictly increasing tokens, also once the lock's parent
# was removed and its sequence numbers started again; concurrent holders
# get distinct ones; several locks give one token each, in the order of
# $zk_lock_node; a token is the czxid that an independent client reads.
# A request whose node went with its expired session keeps its token and
# its node in its variables until it ends: in its headers and in the
# access log (issue 36, item 6).

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

my $conf = <<'EOF';
    zk_hosts %%ZK%%;
    zk_session_timeout 10s;

    server {
        listen 127.0.0.1:%%PORT%%;

        add_header X-Lock-Token $zk_lock_token always;
        add_header X-Lock-Node $zk_lock_node always;

        location /m {
            zk_mutex /tok/m timeout=20s;
            proxy_pass http://%%BACKEND%%;
        }

        location /s {
            zk_semaphore /tok/s leases=3 timeout=20s;
            proxy_pass http://%%BACKEND%%;
        }

        location /v2 {
            zk_semaphore /tok/v2 leases=2 protocol=v2 timeout=20s;
            proxy_pass http://%%BACKEND%%;
        }

        location /two {
            zk_mutex /tok/b timeout=20s;
            zk_rwlock /tok/a read timeout=20s;
            proxy_pass http://%%BACKEND%%;
        }

        location /free {
            proxy_pass http://%%BACKEND%%;
        }
    }
EOF

my @fleet = map { nginx_start($conf, zk => $zk, backend => $be) } 1 .. 2;
ok(sessions_connected(@fleet), 'every worker has a session');

sub token { ($_[0]{headers}{'x-lock-token'} // '') }

###############################################################################

subtest 'successive holders across the fleet: increasing tokens' => sub {
    my @tokens;
    for my $i (1 .. 10) {
        my $r = http_get($fleet[$i % 2]->port, "/m?key=seq&id=$i");
        is($r->{status}, 200, "request $i");
        like(token($r), qr/^\d+$/, "request $i has a token");
        push @tokens, token($r);
    }
    my @bad = grep { $tokens[$_] <= $tokens[$_ - 1] } 1 .. $#tokens;
    ok(!@bad, 'each token is higher than the one before')
        or diag "@tokens";
};

subtest 'the token is the czxid of the node' => sub {
    my $bg = http_parallel_bg([[$fleet[0]->port, '/m?key=cz&sleep=1500']],
        timeout => 20);
    my @kids;
    ok(wait_for(sub { @kids = zk_children($zk->hosts, '/tok/m') }, 10),
        'the holder\'s node is there');
    my $stat = zk_get($zk->hosts, "/tok/m/$kids[0]");
    my ($r) = @{ http_parallel_collect($bg) };
    is($r->{status}, 200, 'the holder is served');
    is(token($r), $stat->{czxid}, 'its token is its node\'s czxid');
    is($r->{headers}{'x-lock-node'}, "/tok/m/$kids[0]", 'of its node');
};

subtest 'across the removal of the parent' => sub {
    my $before = token(http_get($fleet[0]->port, '/m?key=rm'));
    ok(zk_delete($zk->hosts, '/tok/m', recursive => 1), 'parent removed');

    my $r = http_get($fleet[1]->port, '/m?key=rm');
    is($r->{status}, 200, 'the lock is taken again');
    like($r->{headers}{'x-lock-node'}, qr/-lock-0000000000$/,
        'the sequence numbers started again');
    cmp_ok(token($r), '>', $before, 'the token did not');
};

subtest 'concurrent holders: distinct tokens' => sub {
    $be->reset;
    my @req = map { [$fleet[$_ % 2]->port, "/s?key=conc&sleep=300&id=$_"] }
        1 .. 9;
    my $res = http_parallel(\@req, timeout => 30);
    is(scalar(grep { $_->{status} == 200 } @$res), 9, 'all served');
    is($be->stats('conc')->{max}, 3, 'three at a time');
    my %seen;
    $seen{ token($_) }++ for @$res;
    is(scalar(grep { /^\d+$/ } keys %seen), 9, 'nine distinct tokens');
};

subtest 'semaphore v2: the token of the lease' => sub {
    my $r = http_get($fleet[0]->port, '/v2?key=v2');
    is($r->{status}, 200, 'served');
    like(token($r), qr/^\d+$/, 'a token');
    like($r->{headers}{'x-lock-node'}, qr{^/tok/v2/leases/_c_.*-lease-\d+$},
        'of the lease node');
};

subtest 'several locks: one token each, in the order of the nodes' => sub {
    my $bg = http_parallel_bg([[$fleet[0]->port, '/two?key=two&sleep=1500']],
        timeout => 20);
    my (@a, @b);
    ok(wait_for(sub { @a = zk_children($zk->hosts, '/tok/a');
                      @b = zk_children($zk->hosts, '/tok/b'); @a && @b },
                10), 'both nodes are there');
    my $ca = zk_get($zk->hosts, "/tok/a/$a[0]")->{czxid};
    my $cb = zk_get($zk->hosts, "/tok/b/$b[0]")->{czxid};
    my ($r) = @{ http_parallel_collect($bg) };
    is($r->{status}, 200, 'served');

    my @nodes = split / /, $r->{headers}{'x-lock-node'} // '';
    my @tokens = split / /, token($r);
    is(scalar @tokens, 2, 'two tokens');
    my %czxid = ("/tok/a/$a[0]" => $ca, "/tok/b/$b[0]" => $cb);
    is_deeply(\@tokens, [map { $czxid{$_} } @nodes],
        'each the czxid of the node at its place in $zk_lock_node')
        or diag "nodes @nodes, tokens @tokens";
};

subtest 'no lock, no token' => sub {
    my $r = http_get($fleet[0]->port, '/free?key=free');
    is($r->{status}, 200, 'served');
    ok(!exists $r->{headers}{'x-lock-token'}, 'no X-Lock-Token header');
};

subtest 'a node lost with its session: the token stays' => sub {
    # nginx reaches ZooKeeper through a proxy that can cut it off
    my $px = ZkLock::FaultProxy->start($zk);
    my $ng = nginx_start(<<'EOF', zk => $px->hosts, backend => $be);
    zk_hosts %%ZK%%;
    zk_session_timeout 2s;

    log_format tok '$zk_lock_status token=$zk_lock_token node=$zk_lock_node';

    server {
        listen 127.0.0.1:%%PORT%%;
        access_log %%PREFIX%%/logs/access.log tok;

        add_header X-Lock-Token $zk_lock_token always;
        add_header X-Lock-Node $zk_lock_node always;

        location /exp {
            zk_mutex /tok/exp timeout=20s;
            proxy_pass http://%%BACKEND%%;
        }
    }
EOF
    ok(sessions_connected($ng), 'connected through the proxy');

    my $bg = http_parallel_bg([[$ng->port, '/exp?key=exp&sleep=8000']],
        timeout => 40);
    my @kids;
    ok(wait_for(sub { @kids = zk_children($zk->hosts, '/tok/exp') }, 10),
        'the request holds its node');
    my $czxid = zk_get($zk->hosts, "/tok/exp/$kids[0]")->{czxid};

    my $off = length $ng->error_log;
    $px->cut(5);                    # the 2 s session expires meanwhile
    ok(wait_for(sub {
        substr($ng->error_log, $off) =~ /lost while held \(-112: session expired\)/
    }, 20), 'the session expired under the request');

    my ($r) = @{ http_parallel_collect($bg, 40) };
    is($r->{status}, 200, 'the request finishes (zk_lock_lost finish)');
    is(token($r), $czxid, 'its header has the token of its node');
    is($r->{headers}{'x-lock-node'}, "/tok/exp/$kids[0]", '... and the node');

    my ($line) = grep { /^LOST / } split /\n/, $ng->access_log;
    is($line, "LOST token=$czxid node=/tok/exp/$kids[0]",
        'the access log has them too');

    $ng->stop;
    $px->stop;
};

no_ephemerals($zk, '/tok', 'all nodes deleted');

done_testing();
