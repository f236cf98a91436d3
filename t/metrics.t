#!/usr/bin/perl
# The metrics zone is sized for what it holds:
#
#  1. 6000 lock directives (distinct paths): nginx starts and reloads
#     without "[crit] ngx_slab_alloc() failed" (about 4500 used to be the
#     most), and the status page lists all 6000 paths
#  2. 70 workers (more than the 64 slots there used to be): each has a slot
#     of its own, and the status page shows 70 distinct workers, each
#     connected, with its own pid

use strict;
use warnings;
use Test::More;
use JSON::PP ();
use lib 't/lib';
use ZkLock::Test;

require_prereqs(qw(nginx zookeeper kazoo module));

my $zk = zk_start(cfg => { maxClientCnxns => 0 });

# 1. many directives
{
    my $n = 6000;
    my $locs = join '', map {
        "        location /l$_ { zk_mutex /many/p$_ timeout=1s; }\n"
    } 1 .. $n;
    my $ng = nginx_start(<<"EOF", zk => $zk, workers => 1, timeout => 60);
    zk_hosts %%ZK%%;

    server {
        listen 127.0.0.1:%%PORT%%;
$locs
        location = /status { zk_lock_status_page; }
    }
EOF
    my $st = JSON::PP::decode_json($ng->get('/status', timeout => 30)->{body}
        || '{}');
    is(scalar @{ $st->{locks} // [] }, $n, "$n lock paths on the status page");
    ok($ng->reload, 'reloaded');
    unlike($ng->error_log, qr/\[(?:alert|crit|emerg)\]|no memory/,
        "$n directives: no alert, crit or emerg, at start and reload");
    $ng->stop;
}

# 2. many workers
{
    my $w = 70;
    my $ng = nginx_start(<<'EOF', zk => $zk, workers => $w, timeout => 60);
    zk_hosts %%ZK%%;

    server {
        listen 127.0.0.1:%%PORT%%;
        location /m { zk_mutex /many/m timeout=1s; }
        location = /status { zk_lock_status_page; }
    }
EOF
    my $st;
    ok(wait_for(sub {
        $st = eval { JSON::PP::decode_json($ng->get('/status')->{body}) };
        $st && (grep { $_->{connected} } @{ $st->{workers} }) == $w;
    }, 60), "$w workers connected on the status page")
        or diag scalar(@{ $st->{workers} // [] }) . ' workers listed';
    my %idx = map { $_->{worker} => 1 } @{ $st->{workers} // [] };
    my %pid = map { $_->{pid} => 1 } @{ $st->{workers} // [] };
    is(scalar keys %idx, $w, "$w distinct worker slots");
    is(scalar keys %pid, $w, "$w distinct pids");
    unlike($ng->error_log, qr/\[(?:alert|crit|emerg)\]|exited on signal/,
        "$w workers: no alert, crit or emerg, no crash");
    $ng->stop;
}

done_testing();
