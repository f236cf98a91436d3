#!/usr/bin/perl
# Priority classes under a flood, run by hand (never by prove): issue 39's
# "classes under a flood" and "borrow and reclaim", each against fair=
# alone and first come, first served on the same load, in the same run.
#
#   perl t/bench/classes.pl [--seconds 20] [--warmup 4] [--leases 16]
#                           [--batch 200] [--standard 100] [--rate 20]
#                           [--lend 0] [--modes classes,fair,fifo]
#                           [--scenarios flood,reclaim,pause]
#                           [--pauses 6] [--back 40]
#
# One ZooKeeper, one backend (t/lib/backend.py, 50 ms a call), 4 nginx x
# 2 workers, each with the classes
#
#     zk_lock_class critical shares=50 lendable=LEND%;
#     zk_lock_class standard shares=30 lendable=50% default;
#     zk_lock_class batch    shares=20 lendable=90%;
#
# and three locations, one a mode, each on its own path:
#
#     classes: zk_semaphore /bench/c leases=16 keep=1s timeout=60s
#                           fair=$arg_tenant priority=$arg_class;
#     fair:    ... /bench/f ... fair=$arg_tenant;
#     fifo:    ... /bench/o ... (first come, first served)
#
# A request's tenant is its class (one flow a class); the backend records
# every call with its class (id=), all on one backend key per mode, so
# that its peak in flight is the global one.  On 16 leases the nominal
# parts are 8, 4.8 and 3.2 leases.
#
# flood: batch with --batch closed-loop clients and standard with
#   --standard (fresh connections, no pause), both spread over the 4
#   instances; critical open-loop at --rate requests/s in all (a client
#   per instance, at rate/4 each): it offers rate x 50 ms = 1 lease.  The
#   classes' parts: critical its 1 (the other 7 of its 8 reserved, with
#   lendable=0%), standard 4.8, batch 3.2.  Per class over the window:
#   leases held on average (seat-seconds at the backend over the window)
#   against that part ("x"), the 200s, the p99 of the client's latency
#   and of the wait (latency - 50 ms), the fewest batch requests served
#   in a 5 s slice of the window.
#
# reclaim: standard and batch as in flood for 2 x --seconds; critical
#   idle for the first half (what do the others use of the 16 - its
#   reserved seats?), then critical back with --back closed-loop clients on
#   nginx 0: how long until it has its nominal 8 leases at once, and
#   what it holds on average over the rest.  Meaningful with --lend above
#   0 (with 0, its 8 seats stay idle for it and it takes them at once).
#
# pause: standard and batch as in flood; critical on and off, --pauses
#   times: --back clients on nginx 0 for 4 s, then idle for 3 s, while
#   what it wanted still decays on the board.  How long until it has its
#   nominal leases at once, the first time (a class new to the path) and
#   each time after a pause (median and slowest).
#
# Every phase: the peak in flight at the backend (never above the
# leases), and the ZooKeeper writes per request (zxids, warm-up included).
# About 4 minutes with the defaults.

use strict;
use warnings;
use FindBin;
use Getopt::Long;
use POSIX ();
use Time::HiRes qw(time sleep);
use lib "$FindBin::Bin/../lib";
use ZkLock::Test;
use ZkLock::Calls;

chdir "$FindBin::Bin/../.." or die "chdir: $!";

my $seconds = 20;
my $warmup = 4;
my $leases = 16;
my $batch = 200;
my $standard = 100;
my $rate = 20;
my $lend = 0;
my $modes = 'classes,fair,fifo';
my $scenarios = 'flood,reclaim';
my $pauses = 6;
my $back = 40;
GetOptions('seconds=i' => \$seconds, 'warmup=f' => \$warmup,
    'leases=i' => \$leases, 'batch=i' => \$batch,
    'standard=i' => \$standard, 'rate=f' => \$rate, 'lend=i' => \$lend,
    'modes=s' => \$modes, 'scenarios=s' => \$scenarios,
    'pauses=i' => \$pauses, 'back=i' => \$back) or exit 2;
my @modes = grep { length } split /,/, $modes;
/^(classes|fair|fifo)$/ or die "--modes: classes, fair, fifo\n" for @modes;
my @scenarios = grep { length } split /,/, $scenarios;
/^(flood|reclaim|pause)$/ or die "--scenarios: flood, reclaim, pause\n"
    for @scenarios;
$lend >= 0 && $lend <= 100 or die "--lend: 0 to 100\n";

my $INSTANCES = 4;
my $WORKERS = 2;
my $CALL_MS = 50;
my $BACK = $back;       # critical's clients when it comes back
my ($ON, $OFF) = (4, 3);  # pause: critical on, then idle, s
my %SHARES = (critical => 50, standard => 30, batch => 20);
my %LEND = (critical => $lend, standard => 50, batch => 90);
my %PATH = (classes => '/bench/c', fair => '/bench/f', fifo => '/bench/o');
my %EXTRA = (classes => ' fair=$arg_tenant priority=$arg_class',
    fair => ' fair=$arg_tenant', fifo => '');

module_path();

my $zk = zk_start();
my $be = backend_start();

my $locations = join '', map { <<"EOF" } @modes;
        location = /$_ {
            zk_semaphore $PATH{$_} leases=$leases keep=1s timeout=60s$EXTRA{$_};
            proxy_pass http://%%BACKEND%%;
        }
EOF
my $conf = <<"EOF";
    zk_hosts %%ZK%%;
    zk_lock_class critical shares=$SHARES{critical} lendable=$LEND{critical}%;
    zk_lock_class standard shares=$SHARES{standard}
                  lendable=$LEND{standard}% default;
    zk_lock_class batch    shares=$SHARES{batch} lendable=$LEND{batch}%;
    server {
        listen 127.0.0.1:%%PORT%%;
        access_log off;
        location = /status { zk_lock_status_page; }
$locations    }
EOF

my @ng = map { nginx_start($conf, zk => $zk, backend => $be,
    workers => $WORKERS, connections => 4096, log_level => 'warn') }
    1 .. $INSTANCES;

sub pct {
    my ($p, @v) = @_;    # @v sorted
    return undef unless @v;
    my $i = POSIX::ceil($p * @v) - 1;
    return $v[$i < 0 ? 0 : $i];
}

sub class_of { return $_[0] =~ /[?&]class=([^&]+)/ ? $1 : '?' }

# the APF parts of the leases for the classes' demands (leases; a closed
# loop wants them all)
sub parts {
    my (%d) = @_;
    my ($all, %a, %hold) = (0);
    $all += $SHARES{$_} for keys %SHARES;
    my $kept = 0;
    for my $c (keys %SHARES) {
        my $nominal = $leases * $SHARES{$c} / $all;
        my $reserved = $nominal * (100 - $LEND{$c}) / 100;
        $a{$c} = $d{$c} < $nominal ? $d{$c} : $nominal;
        $kept += $a{$c} > $reserved ? $a{$c} : $reserved;
    }
    my $spare = $leases - $kept;
    while ($spare > 1e-9) {
        my @want = grep { $d{$_} > $a{$_} + 1e-9 } keys %a;
        last unless @want;
        my $s = 0;
        $s += $SHARES{$_} for @want;
        my ($short, $left) = (0, $spare);
        for my $c (@want) {
            my $part = $spare * $SHARES{$c} / $s;
            if ($d{$c} - $a{$c} <= $part) {
                $left -= $d{$c} - $a{$c};
                $a{$c} = $d{$c};
                $short = 1;
            }
        }
        if ($short) { $spare = $left; next }
        $a{$_} += $spare * $SHARES{$_} / $s for @want;
        last;
    }
    return %a;
}

# one load.py run; the clients' requests and the backend's calls
sub run_load {
    my ($mode, $until, @clients) = @_;
    my $dir = $ng[0]->prefix;
    my ($spec, $out) = map { "$dir/load.$$.$_" } qw(json out);
    unlink $out;
    open my $fh, '>', $spec or die "$spec: $!";
    print $fh $ZkLock::Test::JSON->encode({ until => $until,
        clients => \@clients });
    close $fh;
    my $r = run_cmd([$ZkLock::Test::PYTHON, 't/lib/load.py', '--spec',
        $spec, '--out', $out], timeout => $until - time + 120);
    $r->{rc} == 0 or die "load.py: $r->{err}";
    return JSON::PP->new->decode(slurp($out));
}

sub uri {
    my ($mode, $class) = @_;
    return "/$mode?key=$mode&sleep=$CALL_MS&rec=1&tenant=$class"
        . "&class=$class&id=$class";
}

sub flood_clients {
    my ($mode) = @_;
    return ((map { { port => $ng[ $_ % $INSTANCES ]->port,
            uri => uri($mode, 'batch'), gap => 0, timeout => 90 } }
            0 .. $batch - 1),
        (map { { port => $ng[ $_ % $INSTANCES ]->port,
            uri => uri($mode, 'standard'), gap => 0, timeout => 90 } }
            0 .. $standard - 1));
}

sub settle {
    my ($mode) = @_;
    sleep 2;    # kept leases expire
    wait_for(sub { !zk_ephemerals($zk, $PATH{$mode}) }, 10, 0.2)
        or warn "nodes left on $PATH{$mode}\n";
}

sub flood {
    my ($mode) = @_;
    $be->reset;
    my $z0 = zk_zxid($zk->port);
    my $w0 = time + 0.3 + $warmup;
    my $w1 = $w0 + $seconds;
    my @clients = flood_clients($mode);
    push @clients, map { { port => $ng[$_]->port,
        uri => uri($mode, 'critical'), rate => $rate / $INSTANCES,
        offset => $_ / $rate, timeout => 90 } } 0 .. $INSTANCES - 1;
    my $seen = $ng[0]->prefix . "/status.$$.txt";
    unlink $seen;
    my $pid = fork // die "fork: $!";
    if ($pid == 0) {
        # each instance's classes, held and parts, in the middle
        sleep $w0 + $seconds / 2 - time;
        open my $o, '>', $seen or POSIX::_exit(1);
        for my $j (0 .. $#ng) {
            my $st = eval { JSON::PP->new->decode(
                http_get($ng[$j]->port, '/status')->{body}) } or next;
            my ($l) = grep { $_->{path} eq $PATH{$mode} } @{ $st->{locks} };
            next unless $l;
            printf $o "  nginx %d: held %d, waiting %d%s\n", $j, $l->{held},
                $l->{waiting}, join '', map { sprintf '; %s %d+%d, part %.2f',
                @$_{qw(class held waiting part)} }
                @{ $l->{fair}{classes} // [] };
        }
        close $o;
        POSIX::_exit(0);
    }
    my $reqs = run_load($mode, $w1 + 1, @clients);
    waitpid $pid, 0;
    my $calls = $be->calls->{$mode} // [];
    settle($mode);
    my $z1 = zk_zxid($zk->port);

    my %part = parts(critical => $rate * $CALL_MS / 1000, standard => 1e9,
        batch => 1e9);
    my (%r, $ok);
    for my $c (qw(critical standard batch)) {
        my @mine = grep { class_of($_->{uri}) eq $c } @$reqs;
        my @lat = sort { $a <=> $b } map { 1000 * ($_->{end} - $_->{start}) }
            grep { $_->{status} == 200 && $_->{start} >= $w0
                   && $_->{start} < $w1 } @mine;
        my ($mean) = calls_held($calls, $c, $w0, $w1);
        my @slice = map { my $lo = $w0 + 5 * $_; scalar grep {
                $_->{status} == 200 && $_->{end} >= $lo && $_->{end} < $lo + 5
            } @mine } 0 .. int($seconds / 5) - 1;
        $r{$c} = { mean => $mean, part => $part{$c},
            x => $part{$c} ? $mean / $part{$c} : 0,
            ok => scalar(grep { $_->{status} == 200 } @mine),
            bad => scalar(grep { $_->{status} != 200 } @mine),
            p99 => pct(0.99, @lat), p50 => pct(0.50, @lat),
            slice => (sort { $a <=> $b } @slice)[0] };
        $ok += $r{$c}{ok};
    }
    my (undef, $peak) = calls_held($calls, undef, $w0 - $warmup, $w1 + 1);
    return { r => \%r, peak => $peak, writes => $ok ? ($z1 - $z0) / $ok : 0,
        status => -s $seen ? slurp($seen) : '' };
}

sub reclaim {
    my ($mode) = @_;
    $be->reset;
    my $t0 = time + 0.3;
    my $tb = $t0 + $warmup + $seconds;    # critical comes back
    my $end = $tb + $seconds;
    my @clients = flood_clients($mode);
    my $pid = fork // die "fork: $!";
    if ($pid == 0) {
        sleep $tb - time;
        run_load($mode, $end, map { { port => $ng[0]->port,
            uri => uri($mode, 'critical'), gap => 0, timeout => 90 } }
            1 .. $BACK);
        POSIX::_exit(0);
    }
    run_load($mode, $end, @clients);
    waitpid $pid, 0;
    my $calls = $be->calls->{$mode} // [];
    settle($mode);

    my ($others) = calls_held($calls, undef, $t0 + $warmup, $tb);
    my %idle = parts(critical => 0, standard => 1e9, batch => 1e9);
    my $lent = $idle{standard} + $idle{batch};
    my %back = parts(critical => 1e9, standard => 1e9, batch => 1e9);
    my $all = 0;
    $all += $SHARES{$_} for keys %SHARES;
    my $nominal = $leases * $SHARES{critical} / $all;
    my $took = calls_reached($calls, 'critical', $tb, POSIX::floor($nominal));
    my ($c_mean) = calls_held($calls, 'critical', $tb + 2, $end);
    my (undef, $peak) = calls_held($calls, undef, $t0, $end);
    return { others => $others, lent => $lent, took => $took,
        c_mean => $c_mean, c_part => $back{critical}, peak => $peak,
        nominal => $nominal };
}

sub pause {
    my ($mode) = @_;
    $be->reset;
    my $z0 = zk_zxid($zk->port);
    my $t0 = time + 0.3 + $warmup;
    my @starts = map { $t0 + $_ * ($ON + $OFF) } 0 .. $pauses - 1;
    my $end = $starts[-1] + $ON + $OFF;
    my $pid = fork // die "fork: $!";
    if ($pid == 0) {
        for my $s (@starts) {
            sleep $s - time if $s > time;
            run_load($mode, $s + $ON, map { { port => $ng[0]->port,
                uri => uri($mode, 'critical'), gap => 0, timeout => 90 } }
                1 .. $BACK);
        }
        POSIX::_exit(0);
    }
    run_load($mode, $end, flood_clients($mode));
    waitpid $pid, 0;
    my $calls = $be->calls->{$mode} // [];
    settle($mode);
    my $z1 = zk_zxid($zk->port);

    my $all = 0;
    $all += $SHARES{$_} for keys %SHARES;
    my $nominal = POSIX::floor($leases * $SHARES{critical} / $all);
    my @took = map { calls_reached($calls, 'critical', $_, $nominal) }
        @starts;
    my $first = shift @took;
    my @back = sort { $a <=> $b } map { $_ // 99 } @took;
    my (undef, $peak) = calls_held($calls, undef, $t0 - $warmup, $end);
    return { first => $first, median => $back[ $#back / 2 ],
        max => $back[-1], nominal => $nominal, peak => $peak,
        writes => @$calls ? ($z1 - $z0) / @$calls : 0 };
}

sub f { my ($fmt, $v) = @_; return defined $v ? sprintf($fmt, $v) : '-' }

printf "4 nginx x %d workers, leases=%d keep=1s, %d ms backend; classes "
    . "critical %d%% lendable=%d%%, standard %d%% 50%%, batch %d%% 90%%; "
    . "batch %d and standard %d closed-loop clients, critical %s/s; "
    . "windows of %d s after %s s\n", $WORKERS, $leases, $CALL_MS,
    @SHARES{qw(critical)}, $lend, @SHARES{qw(standard batch)}, $batch,
    $standard, $rate, $seconds, $warmup;

if (grep { $_ eq 'flood' } @scenarios) {
    print "\nflood\n| mode | class | part | held | x | 200s | other | "
        . "p50 ms | p99 ms | fewest 200s in 5 s |\n";
    print '|---|---', '|---:' x 8, "|\n";
    my @tail;
    for my $m (@modes) {
        my $p = flood($m);
        for my $c (qw(critical standard batch)) {
            my $r = $p->{r}{$c};
            printf "| %s | %s | %.2f | %.2f | %.3f | %d | %d | %s | %s | "
                . "%d |\n", $m, $c, $r->{part}, $r->{mean}, $r->{x},
                $r->{ok}, $r->{bad}, f('%.0f', $r->{p50}),
                f('%.0f', $r->{p99}), $r->{slice};
        }
        push @tail, sprintf "%s: peak %d/%d, %.4f writes/request; in the "
            . "middle (class held+waiting):\n%s", $m, $p->{peak}, $leases,
            $p->{writes}, $p->{status};
    }
    print "$_\n" for @tail;
}

if (grep { $_ eq 'reclaim' } @scenarios) {
    print "\nreclaim (critical lendable=$lend%)\n| mode | others' leases "
        . "while critical idle | what they may use | critical at "
        . "$BACK clients: s to its nominal | then held | its part | "
        . "peak |\n|---", '|---:' x 6, "|\n";
    for my $m (@modes) {
        my $p = reclaim($m);
        printf "| %s | %.2f | %.2f | %s | %.2f | %.2f | %d/%d |\n", $m,
            $p->{others}, $p->{lent}, f('%.2f', $p->{took}), $p->{c_mean},
            $p->{c_part}, $p->{peak}, $leases;
    }
}

if (grep { $_ eq 'pause' } @scenarios) {
    print "\npause (critical on $ON s with $BACK clients, then idle $OFF s, "
        . "$pauses times)\n| mode | s to its nominal, the first time | "
        . "after a pause: median | slowest | peak | writes/request |\n"
        . '|---', '|---:' x 5, "|\n";
    for my $m (@modes) {
        my $p = pause($m);
        printf "| %s | %s | %s | %s | %d/%d | %.4f |\n", $m,
            f('%.2f', $p->{first}), f('%.2f', $p->{median}),
            f('%.2f', $p->{max}), $p->{peak}, $leases, $p->{writes};
    }
}

$_->stop for @ng;
$be->stop;
$zk->stop;
exit 0;
