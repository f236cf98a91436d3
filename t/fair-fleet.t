#!/usr/bin/perl
# fair= across the fleet (issue 39): each instance claims a part of a
# path's leases by the flows it serves (src/ngx_zk_lock_fair.c), tells the
# others in "<path>.fair" (src/ngx_zk_lock_board.c), and the instances'
# shares are weighed by the claims (src/ngx_zk_lock_share.c).
#
# Two nginx x 2 workers, zk_semaphore leases=4 keep=1s fair=$arg_tenant, a
# backend of 100 ms that records every call (the independent witness):
#
#  A. five quiet tenants alone, all on nginx 0, each open loop at 5
#     requests/s (0.5 of a lease each, 2.5 in all): their rate alone
#  B. the same, and a noisy tenant with 8 closed-loop clients on each
#     nginx (fresh connections, no pause).  Max-min over the fleet gives
#     the quiet tenants all they ask (2.5 leases) and the noisy one the
#     other 1.5; shares computed per instance would give nginx 0 two
#     leases, and each quiet tenant a third of one (67 % of its rate).
#     So:
#       - the quiet tenants' rate in B is at least 75 % of A's, together,
#         and each one's at least 60 %
#       - the noisy tenant uses at least 75 % of its max-min seat-seconds
#       - never more than 4 calls at the backend
#       - while the load runs, "<path>.fair" has a node per instance (its
#         worker 0 keeps the leases), named as the workers' lock nodes,
#         whose data is a number (no key); nginx 0's claim is at least
#         twice nginx 1's (six flows against one)
#       - nginx 0's status page shows the lock's flows (2 at least), its
#         claim (2 flows at least) and the flows that hold the most (1 to
#         5, by hash, in order), its metrics zk_lock_fair_flows,
#         zk_lock_fair_claim and zk_lock_fair_flow_held; neither shows a
#         key
#  C. through a worker kill: as B, and 4 s in, nginx 0's worker 0 (which
#     keeps its leases and wrote its claim) is killed (SIGKILL); its
#     session's nodes stay until it expires (zk_session_timeout 3s), and
#     the new worker 0 starts from no lease and no claim.  From 6 s after
#     the kill, over 8 s: the quiet tenants at least 75% of their rate
#     alone; never more than 4 at the backend over the whole run; the
#     board has a node per instance again, not the killed worker's
#  D. once the load is over and the kept leases expired, no ephemeral node
#     is left under the path nor its board
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
my $QUIET = 5;
my $RATE = 5;       # each quiet tenant's requests/s
my $NOISY = 8;      # closed-loop clients per nginx
my $WARMUP = 4;     # claims settle within a few quanta
my $WINDOW = 10;
my $TAIL = 1;
my $PATH = '/t/ff';
my $KEY = 'ff';

my $zk = zk_start();
my $be = backend_start();

my $conf = <<"EOF";
    zk_hosts %%ZK%%;
    zk_session_timeout 3s;
    server {
        listen 127.0.0.1:%%PORT%%;
        access_log off;
        location = /status  { zk_lock_status_page; }
        location = /metrics { zk_lock_status_page prometheus; }
        location = /ff {
            zk_semaphore $PATH leases=$LEASES keep=1s timeout=30s
                         fair=\$arg_tenant;
            proxy_pass http://%%BACKEND%%;
        }
    }
EOF

my @ng = map { nginx_start($conf, zk => $zk, backend => $be, workers => 2,
    connections => 1024) } 1 .. 2;

sub uri { "/ff?key=$KEY&sleep=$CALL_MS&rec=1&tenant=$_[0]&id=$_[0]" }

sub tenant_of { return $_[0] =~ /[?&]tenant=([^&]+)/ ? $1 : '?' }

# one phase: [requests], [calls], peak, and what the board showed midway;
# $kill: the pid to kill 4 s after the load starts
sub phase {
    my ($noisy, $warmup, $kill) = @_;
    $be->reset;
    my $dir = $ng[0]->prefix;
    my ($spec, $out, $seen) = map { "$dir/$_.$$" } qw(load.json load.out
        board.json);
    unlink $out, $seen;
    my @clients = map { { port => $ng[0]->port, uri => uri("q$_"),
        rate => $RATE, offset => $_ / ($QUIET * $RATE), timeout => 60 } }
        0 .. $QUIET - 1;
    push @clients, map { { port => $ng[ $_ % 2 ]->port, uri => uri('noisy'),
        gap => 0, timeout => 60 } } 0 .. 2 * $NOISY - 1 if $noisy;

    my $w0 = time + 0.2 + $warmup;
    my $w1 = $w0 + $WINDOW;
    open my $fh, '>', $spec or die "$spec: $!";
    print $fh $ZkLock::Test::JSON->encode({ until => $w1 + $TAIL,
        clients => \@clients });
    close $fh;

    my $killer;
    if ($kill) {
        $killer = fork // die "fork: $!";
        if ($killer == 0) {
            sleep $w0 - $warmup + 4 - time;
            kill 'KILL', $kill;
            POSIX::_exit(0);
        }
    }

    # the board, read by an independent client in the middle of the window
    my $pid = fork // die "fork: $!";
    if ($pid == 0) {
        sleep $w0 + $WINDOW / 2 - time;
        my %b = map { $_ => zk_get($zk, "$PATH.fair/$_") }
            zk_children($zk, "$PATH.fair");
        my %page = (status => http_get($ng[0]->port, '/status')->{body},
            metrics => http_get($ng[0]->port, '/metrics')->{body});
        open my $o, '>', $seen or POSIX::_exit(1);
        print $o JSON::PP->new->encode({ board => { map { $_ => $b{$_}{data} }
            grep { $b{$_} } keys %b }, %page });
        close $o;
        POSIX::_exit(0);
    }

    my $r = run_cmd([$ZkLock::Test::PYTHON, 't/lib/load.py', '--spec',
        $spec, '--out', $out], timeout => $warmup + $WINDOW + 120);
    waitpid $_, 0 for grep { defined } $pid, $killer;
    $r->{rc} == 0 or die "load.py: $r->{err}";

    return { reqs => JSON::PP->new->decode(slurp($out)),
        calls => $be->calls->{$KEY} // [],
        peak => $be->stats($KEY)->{max} // 0,
        %{ -s $seen ? JSON::PP->new->decode(slurp($seen)) : {} },
        w0 => $w0, w1 => $w1 };
}

# per tenant: 200s ended in the window, and seat-seconds at the backend
sub tally {
    my ($p) = @_;
    my %t;
    for my $q (@{ $p->{reqs} }) {
        next unless $q->{status} == 200;
        $t{ tenant_of($q->{uri}) }{served}++
            if $q->{end} >= $p->{w0} && $q->{end} < $p->{w1};
    }
    for my $c (@{ $p->{calls} }) {
        my ($start, $end, $w, $id) = @$c;
        $end //= $p->{w1};
        my $lo = $start > $p->{w0} ? $start : $p->{w0};
        my $hi = $end < $p->{w1} ? $end : $p->{w1};
        $t{$id}{seat} += ($hi - $lo) * $w if $hi > $lo;
    }
    return \%t;
}

my @quiet = map { "q$_" } 0 .. $QUIET - 1;

my $A = phase(0, 1);
my $ta = tally($A);
my $alone = 0;
$alone += ($ta->{$_}{served} // 0) for @quiet;
cmp_ok($alone, '>=', 0.8 * $QUIET * $RATE * $WINDOW,
    "A: the quiet tenants alone get about what they ask ($alone)");

# the leases of A expire: B starts from none, as a fleet would
sleep 2;

my $B = phase(1, $WARMUP);
my $tb = tally($B);
my $with = 0;
$with += ($tb->{$_}{served} // 0) for @quiet;
my @each = map { ($tb->{$_}{served} // 0) / (($ta->{$_}{served} // 0) || 1) }
    @quiet;
my $noisy_fair = ($LEASES - $QUIET * $RATE * $CALL_MS / 1000) * $WINDOW;
my $noisy_seat = $tb->{noisy}{seat} // 0;

diag(sprintf "B: quiet %d served against %d alone (%.0f%%; each %s); "
    . "noisy %.2f seat-s against %.2f max-min; peak %d; board %s",
    $with, $alone, 100 * $with / ($alone || 1),
    join(' ', map { sprintf '%.0f%%', 100 * $_ } @each), $noisy_seat,
    $noisy_fair, $B->{peak}, JSON::PP->new->canonical->encode($B->{board}));

cmp_ok($with, '>=', 0.75 * $alone,
    'B: the quiet tenants, all on nginx 0, keep at least 75% of their '
    . 'rate alone beside a noisy tenant on both');
cmp_ok((sort { $a <=> $b } @each)[0], '>=', 0.6,
    'B: each quiet tenant at least 60% of its own rate alone');
cmp_ok($noisy_seat, '>=', 0.75 * $noisy_fair,
    'B: the noisy tenant uses at least 75% of its max-min seat-seconds');
cmp_ok($B->{peak}, '<=', $LEASES, "B: never more than $LEASES at the "
    . "backend ($B->{peak})");

my %board = %{ $B->{board} };
is(scalar keys %board, 2, 'B: the board has a node per instance');
ok(!(grep { !/^_c_[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}$/ } keys %board),
    "B: named by the workers' UUID prefix");
ok(!(grep { !defined || !/^\d+$/ } values %board),
    'B: a claim is a number, and no key');
my @claims = sort { $a <=> $b } grep { defined && /^\d+$/ } values %board;
ok(@claims == 2 && $claims[1] >= 2 * $claims[0],
    "B: nginx 0's claim is at least twice nginx 1's (@claims)");

# nginx 0's status page and metrics, read in the middle of B
my ($lock) = grep { $_->{path} eq $PATH }
    @{ (eval { $ZkLock::Test::JSON->decode($B->{status} // '') } // {})
        ->{locks} // [] };
my $fair = $lock->{fair} // {};
cmp_ok($fair->{flows} // 0, '>=', 2, 'B: the status page shows the flows '
    . 'of nginx 0 (' . ($fair->{flows} // 'none') . ')');
cmp_ok($fair->{claim} // 0, '>=', 2, 'B: ... and its claim, in flows ('
    . ($fair->{claim} // 'none') . ')');
like($B->{metrics} // '',
    qr/^zk_lock_fair_claim\{path="\Q$PATH\E",type="semaphore"\} \d+\.\d{3}$/m,
    'B: zk_lock_fair_claim in the metrics');
like($B->{metrics} // '',
    qr/^zk_lock_fair_flows\{path="\Q$PATH\E",type="semaphore"\} [1-9]\d*$/m,
    'B: zk_lock_fair_flows in the metrics');
my @top = @{ $fair->{top} // [] };
ok(@top >= 1 && @top <= 5 && !(grep { ($_->{flow} // '') !~ /^[0-9a-f]{16}$/ }
    @top), 'B: ... the flows that hold the most, 1 to 5, by their hash')
    or diag explain $fair;
cmp_ok($top[0]{held} // 0, '>=', 1, 'B: ... the first holds a lease at '
    . 'least');
ok(!(grep { $top[$_]{held} > $top[$_ - 1]{held} } 1 .. $#top),
    'B: ... in order of the leases they hold');
like($B->{metrics} // '',
    qr/^zk_lock_fair_flow_held\{path="\Q$PATH\E",type="semaphore",
        flow="[0-9a-f]{16}"\}\ [1-9]\d*$/mx,
    'B: zk_lock_fair_flow_held in the metrics');
ok(!grep({ /tenant|noisy|"q\d"/ } $B->{status} // '', $B->{metrics} // ''),
    'B: no key on either');

# C: the worker that keeps nginx 0's leases, the first forked, killed
sleep 2;
my ($victim) = sort { $a <=> $b } $ng[0]->worker_pids;
my $C = phase(1, 4 + 6, $victim);
$ng[0]->expect_log(
    qr/\[alert\] \d+#\d+: worker process $victim exited on signal 9$/);
my $tc = tally($C);
my $after = 0;
$after += ($tc->{$_}{served} // 0) for @quiet;
my ($killed) = grep { $board{$_} eq $claims[-1] } keys %board;
diag(sprintf "C: quiet %d served against %d alone (%.0f%%); peak %d; "
    . "board %s", $after, $alone, 100 * $after / ($alone || 1), $C->{peak},
    JSON::PP->new->canonical->encode($C->{board}));
cmp_ok($after, '>=', 0.75 * $alone,
    'C: from 6 s after the kill, the quiet tenants at least 75% of their '
    . 'rate alone');
cmp_ok($C->{peak}, '<=', $LEASES, "C: never more than $LEASES at the "
    . "backend, through the kill ($C->{peak})");
is(scalar keys %{ $C->{board} }, 2, 'C: the board has a node per instance');
ok($killed && !exists $C->{board}{$killed},
    "C: the killed worker's node went with its session");

ok(wait_for(sub { !zk_ephemerals($zk, '/t') }, 15, 0.2),
    'D: no ephemeral node left under the path or its board')
    or diag(join ' ', zk_ephemerals($zk, '/t'));

$_->stop for @ng;
$be->stop;
$zk->stop;

done_testing();
