#!/usr/bin/perl
# zk_hosts with host names (issue 17, item 6, first step): the names are
# resolved once, when nginx reads its configuration, and the C client is
# given addresses only.  Given names, the client would call getaddrinfo()
# from the worker at every connect, and a DNS that does not answer would
# stop every location of the worker meanwhile.
#
#  1. "localhost:<port>" works: the worker connects to 127.0.0.1:<port>,
#     requests take the lock
#  2. the worker reconnects after a ZooKeeper restart without resolving:
#     strace of the worker shows the connect to ZooKeeper's port and no
#     resolver file opened, no DNS server asked (skipped without strace)
#  3. a name that does not resolve fails nginx -t (t/config.t)

use strict;
use warnings;
use Test::More;
use Time::HiRes qw(time sleep);
use lib 't/lib';
use ZkLock::Test;

require_prereqs(qw(nginx zookeeper kazoo module));

my $zk = zk_start();
my $be = backend_start();
my $port = $zk->port;

my $ng = nginx_start(<<"EOF", backend => $be, workers => 1);
    zk_hosts localhost:$port;
    server {
        listen 127.0.0.1:%%PORT%%;
        add_header X-Lock \$zk_lock_status always;
        location /m {
            zk_mutex /dns/m timeout=10s;
            proxy_pass http://%%BACKEND%%;
        }
    }
EOF

ok(sessions_connected($ng), 'the worker connects');
like($ng->error_log, qr/zookeeper session \S+ connected to 127\.0\.0\.1:$port/,
    'to the address localhost resolved to, read at configuration');
is($ng->get('/m?key=a')->{headers}{'x-lock'}, 'ACQUIRED',
    'a request takes the lock');

SKIP: {
    my ($strace) = grep { -x } map { "$_/strace" } split /:/, $ENV{PATH};
    skip 'no strace', 5 unless $strace;

    my ($worker) = $ng->worker_pids;
    my $out = tempdir('dns') . '/strace.txt';
    my $st = spawn(cmd => [ $strace, '-f', '-p', $worker, '-o', $out,
        '-e', 'trace=openat,open,connect,sendto,sendmmsg' ],
        name => 'strace');
    ok(wait_for(sub { -s $out }, 5) || wait_for(sub { -e $out }, 5),
        'strace is attached to the worker');
    sleep 0.5;

    my $off = length $ng->error_log;
    $zk->restart;
    ok(wait_for(sub {
        substr($ng->error_log, $off) =~ /connected to 127\.0\.0\.1:$port/
    }, 20), 'the worker reconnects after a ZooKeeper restart');
    is($ng->get('/m?key=b')->{headers}{'x-lock'}, 'ACQUIRED',
        'and takes the lock again');

    kill 'INT', $st;
    ZkLock::Test::proc_wait($st, 5);
    my $trace = slurp($out);
    like($trace, qr/connect\(.*htons\($port\)/,
        'the trace saw the reconnect to ZooKeeper');
    my @resolving = grep {
        m{/etc/(?:hosts|resolv\.conf|nsswitch\.conf|gai\.conf|host\.conf)}
            || /htons\(53\)/
    } split /\n/, $trace;
    is_deeply(\@resolving, [], 'the worker opened no resolver file and '
        . 'asked no DNS server')
        or diag join "\n", @resolving[0 .. ($#resolving < 9 ? $#resolving : 9)];
}

$ng->stop;
done_testing();
