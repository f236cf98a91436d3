#!/usr/bin/perl
# revocable=on, Curator's Revocable: "__REVOKE__" written into a request's
# node (Curator's Revoker.attemptRevoke(), or by hand) makes a holder cut
# off and a waiter leave the queue, with $zk_lock_status REVOKED, a warn
# line naming the path and the node, and the metrics counting it; the next
# request gets the lock at once.  Without revocable=on it is ignored.

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

my $conf = <<'EOF2';
    zk_hosts %%ZK%%;
    zk_session_timeout 10s;
    log_format zk '$uri $status $zk_lock_status';

    server {
        listen 127.0.0.1:%%PORT%%;
        access_log logs/zk.log zk;
        add_header X-Lock $zk_lock_status always;
        zk_lock_status 409;

        location /r {
            zk_mutex /rv/m revocable=on timeout=10s;
            proxy_pass http://%%BACKEND%%;
        }

        location /w {
            zk_rwlock /rv/rw write revocable=on timeout=10s;
            proxy_pass http://%%BACKEND%%;
        }

        location /plain {
            zk_mutex /rv/p timeout=10s;
            proxy_pass http://%%BACKEND%%;
        }

        location = /status { zk_lock_status_page; }
    }
EOF2

my ($A, $B) = map { nginx_start($conf, zk => $zk, backend => $be) } 1 .. 2;
ok(sessions_connected($A, $B), 'every worker has a session');

# the children of $path, oldest first
sub children {
    return sort { substr($a, -10) <=> substr($b, -10) }
        zk_children($zk->hosts, $_[0]);
}
sub nchildren { my @k = children($_[0]); return scalar @k }

# the node of the one request in the backend under $path
sub holder_node {
    my ($path, $key) = @_;
    my @kids;
    wait_for(sub { $be->stats($key)->{inflight} == 1
                   and @kids = children($path) }, 10)
        or return undef;
    return "$path/$kids[0]";
}

###############################################################################

subtest 'a holder revoked by hand: cut off, the next one gets the lock' => sub {
    my $hold = http_parallel_bg([[$A->port, '/r?key=h1&sleep=8000']],
        timeout => 20);
    my $node = holder_node('/rv/m', 'h1');
    ok($node, 'the holder is in the backend') or return;
    my $next = http_parallel_bg([[$B->port, '/r?key=h2']], timeout => 20);
    ok(wait_for(sub { nchildren('/rv/m') == 2 }, 10), 'another one waits');

    my $t0 = time;
    zk_set($zk->hosts, $node, '__REVOKE__');

    my ($n) = @{ http_parallel_collect($next, 20) };
    is($n->{status}, 200, 'the waiter gets the lock');
    cmp_ok($n->{end} - $t0, '<', 1.5,
        sprintf('within a second of the revocation (%.2fs)', $n->{end} - $t0));
    my ($h) = @{ http_parallel_collect($hold, 20) };
    is($h->{status}, 0, 'the holder is cut off');
    cmp_ok($h->{time}, '<', 6, 'before its backend call ended');
    ok(!zk_get($zk->hosts, $node), 'its node is deleted');
    like($A->error_log, qr{\[warn\].*zk_mutex "/rv/m" revoked while held: node "\Q$node\E", aborting the request},
        'a warn line names the path and the node');
    ok(wait_for(sub { slurp($A->prefix . '/logs/zk.log') =~ m{^/r \d+ REVOKED$}m }, 5),
        '$zk_lock_status REVOKED');
};

subtest 'a waiter revoked: it leaves the queue with zk_lock_status' => sub {
    my $hold = http_parallel_bg([[$A->port, '/r?key=w1&sleep=2500']],
        timeout => 20);
    ok(holder_node('/rv/m', 'w1'), 'a holder');
    my $wait = http_parallel_bg([[$B->port, '/r?key=w2']], timeout => 20);
    my @kids;
    ok(wait_for(sub { (@kids = children('/rv/m')) == 2 }, 10),
        'a waiter queues');
    my $t0 = time;
    zk_set($zk->hosts, "/rv/m/$kids[1]", '__REVOKE__');

    my ($w) = @{ http_parallel_collect($wait, 20) };
    is($w->{status}, 409, 'the waiter gets zk_lock_status');
    is($w->{headers}{'x-lock'}, 'REVOKED', '$zk_lock_status REVOKED');
    cmp_ok($w->{end} - $t0, '<', 1.5, 'at once');
    like($B->error_log, qr{\[warn\].*zk_mutex "/rv/m" revoked while waiting: node "/rv/m/\Q$kids[1]\E"},
        'a warn line');
    my ($h) = @{ http_parallel_collect($hold, 20) };
    is($h->{status}, 200, 'the holder is not touched');
    is($be->stats('w2')->{count}, 0, 'the waiter never reached the backend');
};

subtest "Curator's Revoker revokes an nginx holder" => sub {
    my $hold = http_parallel_bg([[$A->port, '/w?key=c1&sleep=8000']],
        timeout => 20);
    my $node = holder_node('/rv/rw', 'c1');
    ok($node, 'a write lock holder') or return;
    my $t0 = time;
    my $c = curator($zk, 'revoke', $node, 0);
    ok(defined curator_expect($c, qr/^REVOKE SENT$/, 30),
        'Revoker.attemptRevoke()');
    my ($h) = @{ http_parallel_collect($hold, 20) };
    is($h->{status}, 0, 'the holder is cut off');
    ok(wait_for(sub { !nchildren('/rv/rw') }, 2), 'its node is deleted');
    my $r = $B->get('/w?key=c2');
    is($r->{status}, 200, 'the next request gets the lock');
    is($r->{headers}{'x-lock'}, 'ACQUIRED', 'ACQUIRED');
};

subtest 'without revocable=on, __REVOKE__ is ignored' => sub {
    my $hold = http_parallel_bg([[$A->port, '/plain?key=p1&sleep=1500']],
        timeout => 20);
    my $node = holder_node('/rv/p', 'p1');
    ok($node, 'a holder') or return;
    zk_set($zk->hosts, $node, '__REVOKE__');
    my ($h) = @{ http_parallel_collect($hold, 20) };
    is($h->{status}, 200, 'it finishes');
    is($h->{headers}{'x-lock'}, 'ACQUIRED', 'ACQUIRED');
    unlike($A->error_log, qr{"/rv/p" revoked}, 'no revocation');
};

subtest 'the metrics count revocations' => sub {
    my $n = 0;
    for my $ng ($A, $B) {
        my $st = $ng->get('/status');
        $n += $_->{revoked} // 0
            for grep { $_->{path} =~ m{^/rv/} } @{ JSON::PP->new->decode($st->{body})->{locks} // [] };
    }
    is($n, 3, 'three revoked, over both instances');
};

subtest 'nginx -t' => sub {
    my ($rc, $out) = nginx_test_conf(<<'EOF2');
    zk_hosts 127.0.0.1:1;
    server { location / { zk_semaphore /x leases=2 revocable=on; } }
EOF2
    isnt($rc, 0, 'a semaphore is not revocable');
    like($out, qr/invalid parameter "revocable=on"/, 'named');
    ($rc, $out) = nginx_test_conf(<<'EOF2');
    zk_hosts 127.0.0.1:1;
    server { location / { zk_mutex /x reentrant=off revocable=on; } }
EOF2
    isnt($rc, 0, 'nor a reentrant=off mutex');
    like($out, qr/"revocable=on" is not for "reentrant=off"/, 'named');
};

no_ephemerals($zk, '/rv', 'all nodes deleted');

done_testing();
