#!/usr/bin/perl
# Parallel subrequests of one client request (SSI includes) share its
# locks; while one of them waits, the others are blocked behind it. When
# that wait fails, the blocked ones get its answer at once rather than a
# wait of their own: a page with 4 includes of a taken lock takes one
# timeout, not four.
#
#  1. the lock is taken by a foreign holder: the page with 4 parallel
#     includes is answered within 1 timeout (1 s) plus a margin (< 2.5 s;
#     it took 4 s before); the log has one "not acquired", no node is left
#  2. the lock is free: the 4 includes each reach the backend (the first
#     one's lock is re-entered by the others)

use strict;
use warnings;
use Test::More;
use Time::HiRes qw(time);
use lib 't/lib';
use ZkLock::Test;

require_prereqs(qw(nginx zookeeper kazoo module));

my $zk = zk_start();
my $be = backend_start();

my $ng = nginx_start(<<'EOF', zk => $zk, backend => $be, workers => 1);
    zk_hosts %%ZK%%;
    zk_lock_status 409;

    server {
        listen 127.0.0.1:%%PORT%%;
        root %%PREFIX%%/html;

        location /page {
            ssi on;
        }

        location /g {
            zk_mutex /ssi/lock timeout=1s;
            proxy_pass http://%%BACKEND%%;
        }
    }
EOF
ok(sessions_connected($ng), 'connected');

mkdir $ng->prefix . '/html';
open my $fh, '>', $ng->prefix . '/html/page.html' or die $!;
print $fh map { "[<!--# include virtual=\"/g?key=inc&n=$_\" -->]\n" } 1 .. 4;
close $fh;

{
    my $h = zk_hold($zk, '/ssi/lock', seconds => 60);
    my $t0 = time;
    my $r = $ng->get('/page.html', timeout => 20);
    my $took = time - $t0;
    is($r->{status}, 200, 'taken: the page is served');
    cmp_ok($took, '<', 2.5,
        sprintf('taken: in one timeout, not four (%.2f s)', $took));
    is($be->stats('inc')->{count} // 0, 0, 'taken: no include got through');
    my $n = () = $ng->error_log =~ /zk_mutex "\/ssi\/lock" not acquired/g;
    is($n, 1, 'taken: one wait, one "not acquired" line');
    $h->release;
}

{
    $be->reset;
    my $r = $ng->get('/page.html', timeout => 20);
    is($r->{status}, 200, 'free: the page is served');
    is($be->stats('inc')->{count}, 4, 'free: every include reached the backend');
}

no_ephemerals($zk, '/ssi', 'at the end');

done_testing();
