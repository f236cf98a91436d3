#!/usr/bin/perl
# The noisy neighbour, run by hand (never by prove): how the leases of one
# semaphore path are shared between tenants today, first come, first
# served, when one tenant floods the path and others ask little; and the
# same with per-tenant fair shares (issue 39): --extra 'fair=$arg_tenant'.
#
#   perl t/bench/fair.pl [--seconds 10] [--scenarios spread,onebox]
#                        [--extra 'fair=$arg_tenant'] [--leases 16]
#                        [--noisy 200] [--quiet 9] [--rate 10]
#                        [--warmup 2] [--arrival]
#
# One ZooKeeper, one backend (t/lib/backend.py, 50 ms a call), 4 nginx x
# 2 workers, each with
#
#     location = /fair {
#         zk_semaphore /bench/fair leases=16 keep=1s timeout=30s[ EXTRA];
#         proxy_pass http://BACKEND;
#     }
#
# Tenants (the tenant is in the URL, tenant=NAME, for "fair=$arg_tenant";
# the backend records every call, rec=1, with id=NAME, all on one backend
# key, so that the backend's peak in flight is the global one):
#   * noisy: --noisy closed-loop clients spread evenly over the 4
#     instances, each a fresh connection per request and no pause
#     (t/lib/load.py's closed loop);
#   * q0 .. q8 (--quiet): each open-loop at --rate requests/s, a request
#     started every 1/rate s whatever became of the ones before, each on
#     a fresh connection (load.py's "rate"); it offers rate x 50 ms seats
#     (0.5 by default).
#
# Scenarios: "spread", quiet tenant i on instance i mod 4; "onebox", all
# the quiet tenants on instance 0 (the noisy one on all 4 in both).  Each
# runs two phases: A, the quiet tenants alone (their baseline), then B,
# quiet and noisy together.  A phase's load runs --warmup s, then the
# window of --seconds that is measured, then 1 s more (so that requests
# started late in the window wait as the others did); after the load, the
# kept leases expire (keep + 1 s) and no node is left on the path before
# the next phase, so every phase's figures are its own.
#
# Per phase and tenant: "served", the 200s that ended in the window, and
# "other", the other answers (or none) that did; rate/s, the served over
# the window; p50 and p99 of the client's latency (end - start) over the
# 200s of the requests started in the window; "seat-s", the seat-seconds
# the tenant used at the backend in the window (each call's (end - start)
# x w, clipped to the window); "fair", its max-min fair seat-seconds: the
# capacity (leases x seconds) water-filled over the tenants' demands, a
# quiet tenant's being what it offered (rate x 50 ms x seconds), the noisy
# one's unbounded; "x", seat-s over fair.  Per phase: Jain's index over
# the tenants' x, (sum x)^2 / (n sum x^2): 1 when every tenant got its
# max-min share (or the same fraction of it); the peak in flight at the
# backend (must never exceed the leases: a warning says so if it did);
# ZooKeeper writes per request (the server's zxid from before the load to
# after the kept leases expired, over every 200 of the phase, warm-up
# included); how late the open-loop requests started against their
# schedule (p99: if the load generator could not keep up, the quiet
# tenants offered less than --rate).  For B, each quiet tenant's p99
# against its own p99 in A.
#
# --arrival: in B, the noisy tenant starts alone, --warmup s before the
# quiet ones, which start with the window; then, per quantum (600 ms)
# from their start, the quiet tenants' seat-seconds at the backend over
# what they offered (1.00: all they ask), the first 10 quanta.
#
# The summary, one row per scenario: the quiet tenants' rate and pooled
# p99 in A and B, the worst quiet tenant's p99 in B, the noisy tenant's
# rate and its share of the capacity (seat-s / capacity) against its
# max-min share, Jain's index in A and B, the smallest x in B (Jain's
# index over 9 quiet tenants starved alike and one noisy tenant barely
# moves: 9 at 0.7 and 1 at 1.09 give 0.976), the peak in B and the writes
# per request in A and B.
#
# About 70 s with the defaults (35 s a scenario), ZooKeeper's start
# included.

use strict;
use warnings;
use FindBin;
use Getopt::Long;
use POSIX ();
use Time::HiRes qw(time sleep);
use lib "$FindBin::Bin/../lib";
use ZkLock::Test;

chdir "$FindBin::Bin/../.." or die "chdir: $!";

my $seconds = 10;
my $warmup = 2;
my $scenarios = 'spread,onebox';
my $extra = '';
my $leases = 16;
my $noisy = 200;
my $quiet = 9;
my $rate = 10;
my $arrival = 0;
my $QUANTUM = 0.6;
GetOptions('arrival' => \$arrival, 'seconds=i' => \$seconds, 'warmup=f' => \$warmup,
    'scenarios=s' => \$scenarios, 'extra=s' => \$extra,
    'leases=i' => \$leases, 'noisy=i' => \$noisy, 'quiet=i' => \$quiet,
    'rate=f' => \$rate) or exit 2;
my @scenarios = grep { length } split /,/, $scenarios;
/^(spread|onebox)$/ or die "--scenarios: spread, onebox\n" for @scenarios;
$seconds >= 1 or die "--seconds: 1 at least\n";
$leases >= 1 or die "--leases: 1 at least\n";
$noisy >= 1 or die "--noisy: 1 at least\n";
$quiet >= 1 or die "--quiet: 1 at least\n";
$rate > 0 or die "--rate: above 0\n";
$extra =~ /^[^;{}]*$/ or die "--extra: parameters of zk_semaphore only\n";

my $INSTANCES = 4;
my $WORKERS = 2;
my $CALL_MS = 50;      # the backend's call
my $KEEP_MS = 1000;    # keep=1s
my $TAIL = 1;          # the load goes on this long after the window
my $path = '/bench/fair';
my $key = 'fair';      # the backend's key: one for every tenant
my $INF = 9**9**9;

module_path();

my $zk = zk_start();
my $be = backend_start();

# ZooKeeper's open client connections, our own 4lw's among them
sub connections {
    my ($n) = (zk_4lw($zk->port, 'mntr') // '')
        =~ /^zk_num_alive_connections\s+(\d+)/m;
    return $n // -1;
}
my $base = connections();

my $ex = length $extra ? " $extra" : '';
my $conf = <<"EOF";
    zk_hosts %%ZK%%;
    server {
        listen 127.0.0.1:%%PORT%%;
        access_log off;
        location = /fair {
            zk_semaphore $path leases=$leases keep=1s timeout=30s$ex;
            proxy_pass http://%%BACKEND%%;
        }
    }
EOF

# up to a few hundred waiting requests on one instance in "onebox", each
# with its client's connection
my @ng = map { nginx_start($conf, zk => $zk, backend => $be,
    workers => $WORKERS, connections => 4096, log_level => 'warn') }
    1 .. $INSTANCES;
my $want = $base;
$want += scalar($_->worker_pids) for @ng;
wait_for(sub { connections() >= $want }, 20, 0.2)
    or warn sprintf "ZooKeeper has %d connections, %d expected\n",
        connections(), $want;

sub pct {
    my ($p, @v) = @_;    # @v sorted
    return undef unless @v;
    my $i = POSIX::ceil($p * @v) - 1;
    return $v[$i < 0 ? 0 : $i];
}

sub jain {
    my (@x) = @_;
    my ($s, $q) = (0, 0);
    $s += $_, $q += $_ * $_ for @x;
    return $q ? $s * $s / (@x * $q) : 0;
}

# max-min fair allocation (water-filling) of $cap over the demands
# (tenant => demand, $INF for unbounded)
sub maxmin {
    my ($cap, %d) = @_;
    my %a;
    my @left = sort { $d{$a} <=> $d{$b} || $a cmp $b } keys %d;
    while (@left) {
        my $share = $cap / @left;
        if ($d{ $left[0] } <= $share) {
            my $t = shift @left;
            $a{$t} = $d{$t};
            $cap -= $d{$t};
            next;
        }
        $a{$_} = $share for @left;
        last;
    }
    return %a;
}

sub tenant_of { return $_[0] =~ /[?&]tenant=([^&]+)/ ? $1 : '?' }

# one phase: the load, then the figures; $noisy_on: with the noisy tenant
sub phase {
    my ($scenario, $name, $noisy_on) = @_;
    my $place = sub { $scenario eq 'onebox' ? 0 : $_[0] % $INSTANCES };
    $be->reset;
    my $dir = $ng[0]->prefix;
    my $spec = "$dir/load.$$.json";
    my $out = "$dir/load.$$.out";
    unlink $out;
    my $uri = sub { "/fair?key=$key&sleep=$CALL_MS&rec=1&tenant=$_[0]"
        . "&id=$_[0]" };
    my $late = $arrival && $noisy_on ? $warmup : 0;
    my @clients = map { { port => $ng[ $place->($_) ]->port,
        uri => $uri->("q$_"), rate => $rate,
        offset => $late + $_ / ($quiet * $rate), timeout => 60 } }
        0 .. $quiet - 1;
    push @clients, map { { port => $ng[ $_ % $INSTANCES ]->port,
        uri => $uri->('noisy'), gap => 0, timeout => 60 } } 0 .. $noisy - 1
        if $noisy_on;

    my $z0 = zk_zxid($zk->port);
    my $w0 = time + 0.2 + $warmup;    # load.py starts within 0.2 s
    my $w1 = $w0 + $seconds;
    open my $fh, '>', $spec or die "$spec: $!";
    print $fh $ZkLock::Test::JSON->encode({ until => $w1 + $TAIL,
        clients => \@clients });
    close $fh;
    my $r = run_cmd([$ZkLock::Test::PYTHON, 't/lib/load.py', '--spec',
        $spec, '--out', $out], timeout => $warmup + $seconds + 120);
    $r->{rc} == 0 or die "load.py: $r->{err}";
    my $reqs = JSON::PP->new->decode(slurp($out));
    my $calls = $be->calls->{$key} // [];
    my $peak = $be->stats($key)->{max} // 0;

    sleep $KEEP_MS / 1000 + 1;    # kept leases expire
    wait_for(sub { !zk_ephemerals($zk, $path) }, 10, 0.2)
        or warn "nodes left on $path after $scenario $name\n";
    my $z1 = zk_zxid($zk->port);

    my @tenants = ((map { "q$_" } 0 .. $quiet - 1), $noisy_on ? 'noisy' : ());
    my %t = map { $_ => { served => 0, other => 0, lat => [], seat => 0,
        offered => 0 } } @tenants;
    my ($ok, @lag) = (0);
    for my $q (@$reqs) {
        my $s = $t{ tenant_of($q->{uri}) } or next;
        $ok++ if $q->{status} == 200;
        push @lag, 1000 * ($q->{start} - $q->{sched}) if defined $q->{sched};
        if ($q->{end} >= $w0 && $q->{end} < $w1) {
            $q->{status} == 200 ? $s->{served}++ : $s->{other}++;
        }
        if ($q->{start} >= $w0 && $q->{start} < $w1) {
            $s->{offered}++;
            push @{ $s->{lat} }, 1000 * ($q->{end} - $q->{start})
                if $q->{status} == 200;
        }
    }
    for my $c (@$calls) {
        my ($start, $end, $w, $id) = @$c;
        my $s = $t{$id} or next;
        $end //= $w1;
        my $lo = $start > $w0 ? $start : $w0;
        my $hi = $end < $w1 ? $end : $w1;
        $s->{seat} += ($hi - $lo) * $w if $hi > $lo;
    }
    # per quantum from the quiet tenants' start: their seat-s over demand
    my @arr;
    if ($late) {
        for my $k (0 .. 9) {
            my ($lo, $hi, $used) = ($w0 + $k * $QUANTUM,
                $w0 + ($k + 1) * $QUANTUM, 0);
            for my $c (@$calls) {
                my ($start, $end, $w, $id) = @$c;
                next if $id eq 'noisy';
                $end //= $w1;
                my $a = $start > $lo ? $start : $lo;
                my $b = $end < $hi ? $end : $hi;
                $used += ($b - $a) * $w if $b > $a;
            }
            push @arr, $used / ($quiet * $rate * $CALL_MS / 1000 * $QUANTUM);
        }
    }
    my $cap = $leases * $seconds;
    my %fair = maxmin($cap, map { $_ => $_ eq 'noisy' ? $INF
        : $rate * $CALL_MS / 1000 * $seconds } @tenants);
    my @quiet_lat;
    for my $n (@tenants) {
        my $s = $t{$n};
        $s->{lat} = [ sort { $a <=> $b } @{ $s->{lat} } ];
        push @quiet_lat, @{ $s->{lat} } if $n ne 'noisy';
        $s->{rate} = $s->{served} / $seconds;
        $s->{p50} = pct(0.50, @{ $s->{lat} });
        $s->{p99} = pct(0.99, @{ $s->{lat} });
        $s->{fair} = $fair{$n};
        $s->{x} = $fair{$n} ? $s->{seat} / $fair{$n} : 0;
        $s->{nginx} = $n eq 'noisy' ? '0-' . ($INSTANCES - 1)
            : $place->(substr $n, 1);
    }
    @quiet_lat = sort { $a <=> $b } @quiet_lat;
    my ($qrate, $used) = (0, 0);
    $qrate += $t{$_}{rate} for grep { $_ ne 'noisy' } @tenants;
    $used += $t{$_}{seat} for @tenants;
    return { name => $name, tenants => \@tenants, t => \%t, peak => $peak,
        arrival => \@arr,
        writes => $ok ? ($z1 - $z0) / $ok : 0, ok => $ok,
        jain => jain(map { $t{$_}{x} } @tenants), cap => $cap,
        xmin => (sort { $a <=> $b } map { $t{$_}{x} } @tenants)[0],
        used => $used, qrate => $qrate,
        lag => pct(0.99, sort { $a <=> $b } @lag),
        qp50 => pct(0.50, @quiet_lat), qp99 => pct(0.99, @quiet_lat),
        qworst => (sort { $b <=> $a } map { $t{$_}{p99} // 0 }
            grep { $_ ne 'noisy' } @tenants)[0] };
}

sub f { my ($fmt, $v) = @_; return defined $v ? sprintf($fmt, $v) : '-' }

my $fmt = "%-5s %-6s %5s %7s %7s %5s %7s %8s %8s %6s %8s %8s %6s\n";
sub show {
    my ($A, @phases) = @_;
    printf $fmt, 'phase', 'tenant', 'nginx', 'offered', 'served', 'other',
        'rate/s', 'p50 ms', 'p99 ms', 'p99/A', 'seat-s', 'fair', 'x';
    for my $p (@phases) {
        for my $n (@{ $p->{tenants} }) {
            my $s = $p->{t}{$n};
            my $pa = $p != $A && $A->{t}{$n} ? $A->{t}{$n}{p99} : undef;
            printf $fmt, $p->{name}, $n, $s->{nginx}, $s->{offered},
                $s->{served}, $s->{other}, f('%.1f', $s->{rate}),
                f('%.1f', $s->{p50}), f('%.1f', $s->{p99}),
                $pa && defined $s->{p99} ? sprintf("%.1fx", $s->{p99} / $pa)
                    : '', f('%.2f', $s->{seat}), f('%.2f', $s->{fair}),
                f('%.3f', $s->{x});
        }
        printf "%s: Jain's index %.4f over %d tenants; capacity used %.1f%% "
            . "(%.1f of %d seat-s); peak in flight %d/%d; %.4f ZooKeeper "
            . "writes/request (%d requests); the open-loop requests "
            . "started %s ms late at p99\n", $p->{name}, $p->{jain},
            scalar @{ $p->{tenants} }, 100 * $p->{used} / $p->{cap},
            $p->{used}, $p->{cap}, $p->{peak}, $leases, $p->{writes},
            $p->{ok}, f('%.1f', $p->{lag});
        printf "BOUND EXCEEDED: %d in flight at the backend, leases=%d\n",
            $p->{peak}, $leases if $p->{peak} > $leases;
    }
}

printf "4 nginx x %d workers, zk_semaphore %s leases=%d keep=1s "
    . "timeout=30s%s; %d ms backend; noisy: %d closed-loop clients; "
    . "%d quiet tenants at %s/s each; windows of %d s after %s s of "
    . "warm-up\n", $WORKERS, $path, $leases, $ex, $CALL_MS, $noisy, $quiet,
    $rate, $seconds, $warmup;

my @summary;
my $exceeded = 0;
for my $sc (@scenarios) {
    printf "\n%s: %s, the noisy tenant on all %d\n", $sc, $sc eq 'spread'
        ? "quiet tenant i on nginx i mod $INSTANCES"
        : 'every quiet tenant on nginx 0', $INSTANCES;
    my $A = phase($sc, 'A', 0);
    my $B = phase($sc, 'B', 1);
    show($A, $A, $B);
    printf "arrival: the quiet tenants' seat-s over their demand, per "
        . "quantum from their start: %s\n",
        join(' ', map { sprintf '%.2f', $_ } @{ $B->{arrival} })
        if $arrival;
    $exceeded++ for grep { $_->{peak} > $leases } $A, $B;
    push @summary, [ $sc, $A, $B ];
}

print "\n| scenario | quiet rate/s A | B | quiet p99 A | B | B/A | worst "
    . "quiet p99 B | noisy rate/s | noisy seats | max-min | Jain A | B | "
    . "min x B | peak B | writes/r A | B |\n";
print '|---', '|---:' x 15, "|\n";
for (@summary) {
    my ($sc, $A, $B) = @$_;
    my $n = $B->{t}{noisy};
    printf "| %s | %.1f | %.1f (%.0f%%) | %s ms | %s ms | %s | %s ms | "
        . "%.1f | %.1f%% | %.1f%% | %.4f | %.4f | %.3f | %d/%d | %.4f | "
        . "%.4f |\n",
        $sc, $A->{qrate}, $B->{qrate},
        $A->{qrate} ? 100 * $B->{qrate} / $A->{qrate} : 0,
        f('%.1f', $A->{qp99}), f('%.1f', $B->{qp99}),
        $A->{qp99} && defined $B->{qp99}
            ? sprintf('%.1fx', $B->{qp99} / $A->{qp99}) : '-',
        f('%.1f', $B->{qworst}), $n->{rate}, 100 * $n->{seat} / $B->{cap},
        100 * $n->{fair} / $B->{cap}, $A->{jain}, $B->{jain}, $B->{xmin},
        $B->{peak},
        $leases, $A->{writes}, $B->{writes};
}
print "\n", $exceeded
    ? "BOUND EXCEEDED in $exceeded phase(s): more than $leases in flight\n"
    : "bound held in every phase (peak <= $leases)\n";

$_->stop for @ng;
$be->stop;
$zk->stop;
exit 0;
