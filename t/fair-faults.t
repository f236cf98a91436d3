#!/usr/bin/perl
# fair= under a ZooKeeper that hangs rather than refuses (issue 39): the
# claims of the instances (src/ngx_zk_lock_board.c) and the kept leases
# of the flows, through a ZooKeeper server stopped (SIGSTOP) for longer
# than the session timeout while the path is contended, then resumed.
#
# Two nginx x 2 workers, zk_session_timeout 3s, zk_semaphore leases=4
# keep=1s timeout=3s fair=$arg_tenant, a backend of 100 ms that records
# every call (the independent witness).  A noisy tenant with 6 closed-loop
# clients on each nginx (50 ms apart), three quiet tenants on nginx 0 at 3 requests/s
# each (0.9 of a lease in all), all on fresh connections: 4 s of load,
# then ZooKeeper stopped for 6 s, then 10 s more.
#
#  - every request is answered, 200 or 503, within its 3 s timeout, the
#    call and 3 s of slack: none hangs on the stopped server
#  - never more than 4 calls at the backend, over the whole run
#  - the quiet tenants, in the last 5 s (the sessions new and the claims
#    written again), get at least 75% of the requests they sent then
#  - before the hang, "<path>.fair" has a node per instance; after the
#    resume, a node per instance again (read by an independent client;
#    a session that expired in the hang makes its node again, one that
#    the server kept keeps it: both happen)
#  - once the load is over and the kept leases expired, no ephemeral node
#    is left under the path or its board
#  - nginx logged the outage (the outage line, at error)
#  no [alert]/[crit]/[emerg] line, no crashed worker (checked by the
#  harness at done_testing)

use strict;
use warnings;
use Test::More;
use Time::HiRes qw(time sleep);
use JSON::PP ();
use POSIX ();
use lib 't/lib';
use ZkLock::Test;

require_prereqs(qw(nginx zookeeper kazoo module));

my $LEASES = 4;
my $CALL_MS = 100;
my $TIMEOUT = 3;
my $QUIET = 3;
my $RATE = 3;
my $NOISY = 6;
my $BEFORE = 4;
my $PAUSE = 6;
my $AFTER = 10;
my $PATH = '/t/fz';
my $KEY = 'fz';

my $zk = zk_start();
my $be = backend_start();

my $conf = <<"EOF";
    zk_hosts %%ZK%%;
    zk_session_timeout 3s;
    server {
        listen 127.0.0.1:%%PORT%%;
        access_log off;
        location = /fz {
            zk_semaphore $PATH leases=$LEASES keep=1s timeout=${TIMEOUT}s
                         fair=\$arg_tenant;
            proxy_pass http://%%BACKEND%%;
        }
    }
EOF

my @ng = map { nginx_start($conf, zk => $zk, backend => $be, workers => 2,
    connections => 1024) } 1 .. 2;

sub uri { "/fz?key=$KEY&sleep=$CALL_MS&rec=1&tenant=$_[0]&id=$_[0]" }

$be->reset;
my $dir = $ng[0]->prefix;
my ($spec, $out) = map { "$dir/$_.$$" } qw(load.json load.out);
my $t0 = time + 0.2;
my $end = $t0 + $BEFORE + $PAUSE + $AFTER;
my @clients = map { { port => $ng[0]->port, uri => uri("q$_"), rate => $RATE,
    offset => $_ / ($QUIET * $RATE), timeout => 30 } } 0 .. $QUIET - 1;
# 50 ms between a client's requests: a refusal while ZooKeeper is stopped
# is at once, and a client without a pause would spin
push @clients, map { { port => $ng[ $_ % 2 ]->port, uri => uri('noisy'),
    gap => 0.05, timeout => 30 } } 0 .. 2 * $NOISY - 1;
open my $fh, '>', $spec or die "$spec: $!";
print $fh $ZkLock::Test::JSON->encode({ until => $end, clients => \@clients });
close $fh;

my $load = fork // die "fork: $!";
if ($load == 0) {
    my $r = run_cmd([$ZkLock::Test::PYTHON, 't/lib/load.py', '--spec', $spec,
        '--out', $out], timeout => $end - time + 120);
    POSIX::_exit($r->{rc} == 0 ? 0 : 1);
}

# the board's nodes and their sessions
sub board {
    my %b;
    for my $n (zk_children($zk, "$PATH.fair")) {
        my $g = zk_get($zk, "$PATH.fair/$n");
        $b{$n} = $g->{ephemeral_owner} if $g;
    }
    return \%b;
}

# the board while the path is contended, before the hang
sleep $t0 + $BEFORE - 0.5 - time;
my $before = board();

$zk->pause;
my $paused = time;
sleep $t0 + $BEFORE + $PAUSE - time;
$zk->resume;
my $resumed = time;

# a node per instance again: a session that expired in the hang made its
# node again with its new session; one that the server kept (its client's
# reconnection came before the server's expiry) kept it
my %old = map { $_ => 1 } values %$before;
my $after = {};
ok(wait_for(sub { $after = board(); keys %$after == 2 }, $AFTER - 2, 0.2),
    'after the resume, the board has a node per instance again')
    or diag explain $after;
my $renewed = grep { !$old{$_} } values %$after;

waitpid $load, 0;
is($?, 0, 'the load ran');

my @reqs = @{ JSON::PP->new->decode(slurp($out)) };
my @bad = grep { $_->{status} != 200 && $_->{status} != 503 } @reqs;
my @slow = grep { $_->{end} - $_->{start} > $TIMEOUT + $CALL_MS / 1000 + 3 }
    @reqs;
my %by;
$by{$_->{status}}++ for @reqs;
my ($sent, $served) = (0, 0);
for my $q (grep { $_->{uri} =~ /tenant=q/ && $_->{start} >= $end - 5 }
    @reqs)
{
    $sent++;
    $served++ if $q->{status} == 200;
}
my $peak = $be->stats($KEY)->{max} // 0;

diag(sprintf 'paused %.1f s; %s; quiet in the last 5 s: %d of %d; peak %d; '
    . 'board before: %s, after: %s (%d of new sessions)', $resumed - $paused,
    join(' ', map { "$_: $by{$_}" } sort keys %by), $served, $sent, $peak,
    join(' ', sort keys %$before), join(' ', sort keys %$after), $renewed);

is(scalar @bad, 0, 'every request answered, 200 or 503')
    or diag explain [ map { "$_->{status} $_->{error}" } @bad[0 .. 4] ];
is(scalar @slow, 0, "none longer than its ${TIMEOUT} s timeout, the call "
    . 'and 3 s')
    or diag explain [ map { sprintf '%.1f s', $_->{end} - $_->{start} }
        @slow[0 .. 4] ];
cmp_ok($peak, '<=', $LEASES, "never more than $LEASES at the backend "
    . "($peak)");
cmp_ok($served, '>=', 0.75 * $sent, 'the quiet tenants, in the last 5 s, '
    . 'served at least 75% of what they sent');
is(scalar keys %$before, 2, 'before the hang, the board had a node per '
    . 'instance');

ok(wait_for(sub { !zk_ephemerals($zk, '/t') }, 15, 0.2),
    'no ephemeral node left under the path or its board')
    or diag(join ' ', zk_ephemerals($zk, '/t'));

like($ng[0]->error_log, qr/\[error\].*zookeeper unreachable for/,
    'nginx logged the outage, at error');

$_->stop for @ng;
$be->stop;
$zk->stop;

done_testing();
