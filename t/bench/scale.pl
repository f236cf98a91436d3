#!/usr/bin/perl
# Kept leases at fleet scale, run by hand (never by prove): 2 to 32 nginx
# x 2 workers on one semaphore path, a 20 ms backend, a fixed number of
# clients spread evenly over the instances, on a fresh TCP connection per
# request (as most HTTP clients) or on keepalive connections, with and
# without kept leases (zk_semaphore keep=); one table, one row per case.
# For each case: requests served (status 200) and the others, ZooKeeper
# writes per request (from the server's zxid), ZooKeeper packets per
# request (mntr: zk_packets_received + zk_packets_sent) and per write
# ("pkts/w": what a lease change costs, the packets of the sessions' pings
# and probes left out, counted over two probe periods idle before the
# case),
# fairness (Jain's index of the requests served per client of each
# loaded instance: 1 is
# equal shares), the longest wait for the lock ($zk_lock_wait_time), and
# the peak in flight at the backend (must never exceed the leases).
#
#   perl t/bench/scale.pl [--sizes 2,6,12,32] [--leases 8,64]
#                         [--clients fresh,keepalive] [--keep 1s,0]
#                         [--seconds 6] [--conns 24] [--no-curator]
#                         [--curator-seconds 12] [--sessions N]
#                         [--reloads MS] [--workers 2] [--shift MS]
#
# --reloads MS: a reload storm: while each case's load runs, the first
# instance is reloaded (SIGHUP to its master) every MS milliseconds, give
# or take a quarter; compare its rows with those of a run without.
#
# --shift MS: demand that moves ("fresh" clients only): every other MS
# milliseconds, the clients of each odd instance go to the even one before
# it, and come back for the next MS: the odd instances' leases move to the
# even ones and back, a lease change at a steady rate rather than only as
# the load starts and its kept leases expire; "pkts/w" is then the cost of
# such a move (Jain's index and min..max count the clients where they
# started).
#
# --workers N: the workers of each instance (2 by default; 1 is how many
# container deployments run nginx).
#
# --sessions N: "zk_sessions N" in every instance (N of its 2 workers keep
# a ZooKeeper session and take the locks of the other: with 1, an nginx is
# one participant).
#
# One row (about 15 s, ZooKeeper's start included):
#
#   perl t/bench/scale.pl --sizes 2 --leases 8 --clients fresh --keep 1s \
#                         --no-curator
#
# The full matrix (4 sizes x 2 leases x 2 clients x 2 keeps, 32 cases of
# 6 s, and the Curator case) takes about 5 minutes on 2 cores.
#
# Every case runs on the path /bench/scale, with
# "zk_semaphore /bench/scale leases=L [keep=K] timeout=20s" and a
# proxy_pass to t/lib/backend.py (sleep=20, and hangup=1: a call ends when
# nginx closes it, so that the requests wrk cuts when it stops do not count
# beside the next ones).  The instances of a size are started once and
# reloaded with the next configuration (leases, keep); between two cases
# the load stops, the kept leases expire (keep + 1 s) and no node is left
# on the path, so that every figure is the case's own: the zxid and the
# packets are read before the load and after that pause, so a case pays
# for the deletions of its kept leases (and for its sessions' pings).
#
# Clients: "fresh" is t/lib/load.py (one thread per client, HTTP/1.0, a
# new connection per request, no pause between requests); "keepalive" is
# one wrk per loaded instance with that instance's connections.  Client i
# goes to instance i mod N: with more instances than clients (32 and 24)
# some instances get none and Jain's index is over the loaded ones.
# "cut" counts 499s: wrk closes its connections mid-request when it stops.
# "min..max": the requests served by the least and the most served loaded
# instance; "starved" counts the loaded instances that served none (their
# clients waited for the lock the whole case).  "wait max" is the
# longest $zk_lock_wait_time; a request cut while it waits logs none, so
# when one had waited longer (its $request_time), that is shown with a +.
# "peak/L": the most calls in flight at once at the backend; a * marks a
# peak above L only with calls that a client abort cut (nginx frees the
# lease when it ends the request, the backend sees the close a little
# later; see the README on proxy_ignore_client_abort), a ! a peak above L
# among the calls that ran to their end: a broken bound.
# "use" is the requests served per second against min(clients, leases) /
# 20 ms, the most the bound allows.
#
# The Curator case (--curator, on by default): 2 nginx x 2 workers,
# leases=8 keep=1s, 32 fresh-connection clients for --curator-seconds, and
# a Curator InterProcessSemaphore (v1, 8 leases, t/lib/CuratorLock.java)
# started 2 s into the load: how long it took to acquire, from its READY
# (its session connected) to ACQUIRED.
#
# ZooKeeper gets maxClientCnxns=0: 32 nginx x 2 workers are more sessions
# from 127.0.0.1 than its default 60.  Needs wrk, and for the Curator case
# javac with the Curator jars (t/lib/install-deps.sh).

use strict;
use warnings;
use FindBin;
use Getopt::Long;
use POSIX ();
use Time::HiRes qw(time sleep);
use lib "$FindBin::Bin/../lib";
use ZkLock::Test;
use ZkLock::Curator;

chdir "$FindBin::Bin/../.." or die "chdir: $!";

my $sizes = '2,6,12,32';
my $leases = '8,64';
my $clients = 'fresh,keepalive';
my $keeps = '1s,0';
my $seconds = 6;
my $conns = 24;
my $curator = 1;
my $curator_seconds = 12;
my $zk_sessions = 0;
my $reloads = 0;
my $workers = 2;
my $shift = 0;
GetOptions('sessions=i' => \$zk_sessions, 'reloads=i' => \$reloads,
    'workers=i' => \$workers,
    'sizes=s' => \$sizes, 'leases=s' => \$leases,
    'clients=s' => \$clients, 'keep=s' => \$keeps,
    'seconds=i' => \$seconds, 'conns=i' => \$conns, 'shift=i' => \$shift,
    'curator!' => \$curator, 'curator-seconds=i' => \$curator_seconds)
    or exit 2;
my @sizes = grep { length } split /,/, $sizes;
my @leases = grep { length } split /,/, $leases;
my @clients = grep { length } split /,/, $clients;
my @keeps = grep { length } split /,/, $keeps;
/^\d+$/ && $_ >= 1 or die "--sizes: numbers of instances\n" for @sizes;
/^\d+$/ && $_ >= 1 or die "--leases: numbers\n" for @leases;
/^(fresh|keepalive)$/ or die "--clients: fresh, keepalive\n" for @clients;
$conns >= 1 or die "--conns: 1 at least\n";

sub ms {
    my ($t) = @_;
    return $t =~ /^(\d+)ms$/ ? $1 : $t =~ /^(\d+)s?$/ ? $1 * 1000
        : die "--keep: a time in s or ms, or 0\n";
}
ms($_) for @keeps;

system('which wrk >/dev/null 2>&1') == 0
    or die "wrk is missing: apt-get install wrk\n"
    if grep { $_ eq 'keepalive' } @clients;
$curator and curator_prereqs();

module_path();

my $zk = zk_start(cfg => { maxClientCnxns => 0 });
my $be = backend_start();
my $path = '/bench/scale';

sub mntr {
    my %m = map { /^(\S+)\s+(\S+)/ ? ($1 => $2) : () }
        split /\n/, zk_4lw($zk->port, 'mntr') // '';
    defined $m{zk_packets_received} or die "no packets from mntr\n";
    return \%m;
}

sub zxid {
    my ($z) = (zk_4lw($zk->port, 'srvr') // '') =~ /Zxid: 0x([0-9a-f]+)/
        or die "no zxid from srvr\n";
    return hex($z) & 0xffffffff;
}

sub packets {
    my $m = mntr();
    return $m->{zk_packets_received} + $m->{zk_packets_sent};
}

# ZooKeeper's open client connections, our own mntr's among them
sub connections { return mntr()->{zk_num_alive_connections} }
my $base = connections();

sub jain {
    my (@x) = @_;
    my ($s, $q) = (0, 0);
    $s += $_, $q += $_ * $_ for @x;
    return $q ? $s * $s / (@x * $q) : 0;
}

sub conf {
    my ($l, $keep) = @_;
    my $k = ms($keep) ? " keep=$keep" : '';
    my $zs = $zk_sessions ? "zk_sessions $zk_sessions;" : '';
    return <<"EOF";
    zk_hosts %%ZK%%;
    $zs
    log_format scale '\$status \$zk_lock_wait_time \$request_time';
    server {
        listen 127.0.0.1:%%PORT%%;
        access_log off;
        location = /scale {
            zk_semaphore $path leases=$l$k timeout=20s;
            access_log %%PREFIX%%/logs/scale.log scale buffer=64k flush=1s;
            proxy_pass http://%%BACKEND%%;
        }
    }
EOF
}

# every worker of @ng has its ZooKeeper connection, the old ones are gone
sub settled {
    my (@ng) = @_;
    my $want = $base;
    $want += scalar($_->worker_pids) for @ng;
    wait_for(sub { connections() == $want }, 20, 0.2)
        or warn sprintf "ZooKeeper has %d connections, %d expected\n",
            connections(), $want;
    wait_for(sub { !zk_ephemerals($zk, $path) }, 20, 0.2)
        or warn "nodes left on $path\n";
}

sub fleet {
    my ($n, $l, $keep) = @_;
    my @ng = map { nginx_start(conf($l, $keep), zk => $zk, backend => $be,
        workers => $workers, log_level => 'warn') } 1 .. $n;
    settled(@ng);
    return @ng;
}

# per instance: [status 200, other statuses but 499, 499]; the waits; the
# longest time a request cut while it waited had waited (0 if none)
sub logs {
    my (@ng) = @_;
    my (@per, @w);
    my $cut = 0;
    for my $ng (@ng) {
        my $f = $ng->prefix . '/logs/scale.log';
        my @c = (0, 0, 0);
        if (open my $fh, '<', $f) {
            while (my $line = <$fh>) {
                my ($st, $wait, $rt) = split ' ', $line;
                $c[$st == 200 ? 0 : $st == 499 ? 2 : 1]++;
                if (defined $wait && $wait =~ /^\d+$/) {
                    push @w, $wait;
                } elsif (defined $rt && $rt * 1000 > $cut) {
                    $cut = int($rt * 1000);
                }
            }
            close $fh;
            truncate $f, 0;
        }
        push @per, \@c;
    }
    return (\@per, [sort { $a <=> $b } @w], $cut);
}

# the clients, $c in all, client i on instance i mod N, for $secs: the
# client side's failures (no response at all)
sub load {
    my ($mode, $c, $secs, $uri, @ng) = @_;
    my $dir = $ng[0]->prefix;
    my @on = map { 0 } @ng;
    $on[$_ % @ng]++ for 0 .. $c - 1;
    if ($mode eq 'fresh') {
        my $spec = "$dir/load.$$.json";
        my $out = "$dir/load.$$.out";
        unlink $out;
        open my $fh, '>', $spec or die "$spec: $!";
        print $fh $ZkLock::Test::JSON->encode({ until => time + $secs,
            clients => [ map { { port => $ng[$_ % @ng]->port, uri => $uri,
                gap => 0, timeout => 30, $shift ? (shift => $shift / 1000,
                alt_port => $ng[($_ % @ng) & ~1]->port) : () } }
                0 .. $c - 1 ] });
        close $fh;
        my $r = run_cmd([$ZkLock::Test::PYTHON, 't/lib/load.py', '--spec',
            $spec, '--out', $out], timeout => $secs + 60);
        $r->{rc} == 0 or die "load.py: $r->{err}";
        my $n = () = slurp($out) =~ /"status": 0,/g;
        return ($n, @on);
    }
    my @runs;
    for my $i (grep { $on[$_] } 0 .. $#ng) {
        my $file = "$dir/wrk.$$.$i";
        my $pid = fork // die;
        if ($pid == 0) {
            exec "wrk -t1 -c$on[$i] -d${secs}s --timeout 30s "
                . "'http://127.0.0.1:" . $ng[$i]->port . "$uri' > $file 2>&1";
        }
        push @runs, [$pid, $file];
    }
    my $fail = 0;
    for (@runs) {
        waitpid $_->[0], 0;
        my $o = slurp($_->[1]);
        $o =~ /requests in/ or die "wrk: $o";
        # connect, read and write errors; timeouts come with a status
        $fail += $1 + $2 + $3 if $o =~ /Socket errors: connect (\d+), read
            (\d+), write (\d+)/x;
    }
    return ($fail, @on);
}

my @rows;
my $fmt = "%5s %4s %5s %-9s %8s %6s %7s %5s %5s %8s %8s %7s %8s %7s %9s "
    . "%7s %10s %7s\n";
sub header {
    printf $fmt, 'nginx', 'L', 'keep', 'clients', 'sessions', '200',
        'non-200', 'cut', 'use', 'writes/r', 'pkts/r', 'pkts/w',
        'steady/w', 'Jain',
        'min..max',
        'starved', 'wait max', 'peak/L';
}

sub row {
    my ($r) = @_;
    printf $fmt, $r->{n}, $r->{l}, $r->{keep}, $r->{mode}, $r->{sessions},
        $r->{ok}, $r->{bad}, $r->{cut}, sprintf('%.0f%%', 100 * $r->{use}),
        sprintf('%.4f', $r->{writes}), sprintf('%.2f', $r->{packets}),
        sprintf('%.1f', $r->{per_write}),
        defined $r->{steady} ? sprintf('%.1f', $r->{steady}) : '-',
        sprintf('%.4f', $r->{jain}), "$r->{min}..$r->{max}",
        "$r->{starved}/$r->{loaded}",
        $r->{waited} > $r->{wait} ? "$r->{waited}+ ms" : "$r->{wait} ms",
        "$r->{peak}/$r->{l}" . ($r->{clean} > $r->{l} ? '!'
            : $r->{peak} > $r->{l} ? '*' : '');
}

# the peak in flight at the backend over the calls of $key that ran to
# their end, leaving out those that ended because nginx closed them (a
# client abort: nginx ends the request and frees its lease at once, and the
# backend sees the close a little later)
sub clean_peak {
    my ($key) = @_;
    my @ev;
    for my $c (@{ $be->calls->{$key} // [] }) {
        my ($start, $end, $w, undef, $gone) = @$c;
        next if $gone || !defined $end;
        push @ev, [$start, $w], [$end, -$w];
    }
    my ($n, $max) = (0, 0);
    for (sort { $a->[0] <=> $b->[0] || $a->[1] <=> $b->[1] } @ev) {
        $n += $_->[1];
        $max = $n if $n > $max;
    }
    return $max;
}

# --reloads: a child that reloads the instance until the load ends
sub storm {
    my ($ng, $secs) = @_;
    my $master = $ng->pid;
    my $pid = fork // die "fork: $!";
    return $pid if $pid;
    my $end = time + $secs;
    while (time < $end) {
        sleep $reloads / 1000 * (0.75 + rand 0.5);
        kill 'HUP', $master;
    }
    POSIX::_exit(0);
}

# The steady state, in the background: zxid and packets from
# $STEADY_FROM s into the load (its start is over by then: the first nodes
# queued and the shares found, in about 2.5 s at 32 nginx) to 1 s before
# its end, written to a file that steady_per_write() reads
my $STEADY_FROM = 4;
sub steady {
    my ($dir, $secs) = @_;
    return undef if $secs < $STEADY_FROM + 3;
    my $file = "$dir/steady.$$";
    unlink $file;
    my $pid = fork // die "fork: $!";
    if ($pid == 0) {
        # no die here: the parent's END blocks would stop the fleet
        eval {
            sleep $STEADY_FROM;
            my @a = (zxid(), packets(), time);
            sleep $secs - $STEADY_FROM - 1;
            my @b = (zxid(), packets(), time);
            open my $fh, '>', $file or die;
            print $fh "@a @b\n";
            close $fh;
        };
        POSIX::_exit(0);
    }
    return [$pid, $file];
}

# what a lease change costs in the steady state ("steady/w"), the probes
# left out as for pkts/w; undefined (printed "-") with fewer than 20 writes
# in the window, as without --shift, where nearly all are at the start and
# the end
sub steady_per_write {
    my ($steady, $idle) = @_;
    return undef unless $steady;
    waitpid $steady->[0], 0;
    return undef unless -s $steady->[1];
    my ($z0, $p0, $t0, $z1, $p1, $t1) = split ' ', slurp($steady->[1]);
    return undef unless defined $t1 && $z1 - $z0 >= 20;
    return ($p1 - $p0 - $idle * ($t1 - $t0)) / ($z1 - $z0);
}

sub case {
    my ($ng, $l, $keep, $mode, $c, $secs) = @_;
    my $key = join '-', 'scale', scalar(@$ng), $l, $keep, $mode, $c;
    logs(@$ng);
    $be->reset;
    my $sessions = connections() - $base;

    # the sessions' probes, idle, first: each session probes every
    # zk_session_timeout / 6 (1.67 s by default; its library then never
    # pings), so over two such periods every session counts two, whatever
    # its phase (over one second, some counted one and some none: with
    # 32 sessions "pkts/w" moved by a fifth from run to run)
    my ($pi, $ti) = (packets(), time);
    sleep 2 * 10 / 6;
    my $idle = (packets() - $pi) / (time - $ti);

    my ($z0, $p0) = (zxid(), packets());
    my $t0 = time;
    my $storm = $reloads ? storm($ng->[0], $secs) : undef;
    my $steady = steady($ng->[0]->prefix, $secs);
    my ($fail, @on) = load($mode, $c, $secs,
        "/scale?key=$key&sleep=20&hangup=1&rec=1", @$ng);
    my $took = time - $t0;
    if ($storm) {
        kill 'TERM', $storm;
        waitpid $storm, 0;
        sleep 1;    # the last reload's old workers finish
    }
    sleep ms($keep) / 1000 + 1.2;    # kept leases expire, logs flushed
    wait_for(sub { !zk_ephemerals($zk, $path) }, 10, 0.2)
        or warn "nodes left on $path after the case\n";
    my ($z1, $p1) = (zxid(), packets());
    my $pinged = $idle * (time - $t0);
    my ($per, $w, $waited) = logs(@$ng);
    my ($ok, $bad, $cut) = (0, $fail, 0);
    for (@$per) { $ok += $_->[0]; $bad += $_->[1]; $cut += $_->[2] }
    my $bound = $c < $l ? $c : $l;
    my @served = map { $per->[$_][0] } grep { $on[$_] } 0 .. $#on;
    my $r = { n => scalar(@$ng), l => $l, keep => $keep, mode => $mode,
        sessions => $sessions, ok => $ok, bad => $bad, cut => $cut,
        use => $ok / $took * 0.020 / $bound,
        writes => $ok ? ($z1 - $z0) / $ok : 0,
        packets => $ok ? ($p1 - $p0) / $ok : 0,
        per_write => $z1 > $z0 ? ($p1 - $p0 - $pinged) / ($z1 - $z0) : 0,
        steady => steady_per_write($steady, $idle),
        jain => jain(map { $per->[$_][0] / $on[$_] } grep { $on[$_] }
            0 .. $#on),
        loaded => scalar(grep { $_ } @on),
        min => (sort { $a <=> $b } @served)[0] // 0,
        max => (sort { $b <=> $a } @served)[0] // 0,
        starved => scalar(grep { $on[$_] && !$per->[$_][0] } 0 .. $#on),
        wait => @$w ? $w->[-1] : 0, waited => $waited,
        peak => $be->stats($key)->{max} // 0, clean => clean_peak($key),
        rate => $ok / $took };
    row($r);
    push @rows, $r;
    return $r;
}

printf "%d clients, %d s per case, 20 ms backend, %d workers per nginx, "
    . "timeout=20s\n\n", $conns, $seconds, $workers;
header() if @sizes;

for my $n (@sizes) {
    my @ng;
    for my $l (@leases) {
        for my $keep (@keeps) {
            if (!@ng) {
                @ng = fleet($n, $l, $keep);
            } else {
                for my $ng (@ng) {
                    $ng->reload(conf($l, $keep)) or die "reload failed\n";
                }
                settled(@ng);
            }
            for my $mode (@clients) {
                case(\@ng, $l, $keep, $mode, $conns, $seconds);
            }
        }
    }
    $_->stop for @ng;
}

my $cur;
if ($curator) {
    my @ng = fleet(2, 8, '1s');
    my $key = 'scale-curator';
    my $pid = fork // die;
    if ($pid == 0) {
        # the child only runs load.py (and waits for it), the parent keeps
        # every other process; POSIX::_exit skips the END blocks; its exit
        # code: the requests that got no response
        my ($fail) = load('fresh', 32, $curator_seconds,
            "/scale?key=$key&sleep=20&hangup=1", @ng);
        POSIX::_exit($fail > 255 ? 255 : $fail);
    }
    register_pid($pid, 'load');
    my $t0 = time;
    sleep 2;
    my $busy = $be->stats($key)->{max} // 0;
    my $c = curator($zk, 'semaphore', $path, 0, 8, 60000);
    my $ready = curator_expect($c, qr/^READY/, 30) ? time : undef;
    my $at = $ready ? curator_expect($c, qr/^ACQUIRED (\d+)/, 60) : undef;
    my $fail = proc_wait($pid, $curator_seconds + 90) // 0;
    my $end = time;
    $cur = { busy => $busy, ready => $ready ? $ready - $t0 : undef,
        took => $at ? $at / 1000 - $ready : undef,
        during => $at && $at / 1000 < $end - 0.1,
        after => $at ? $at / 1000 - $end : undef,
        peak => $be->stats($key)->{max} // 0 };
    sleep 2.2;
    my ($per, $w) = logs(@ng);
    my ($ok, $bad) = (0, $fail >> 8);
    for (@$per) { $ok += $_->[0]; $bad += $_->[1] + $_->[2] }
    $cur->{ok} = $ok;
    $cur->{bad} = $bad;
    $cur->{wait} = @$w ? $w->[-1] : 0;
    printf "\nCurator case: 2 nginx x 2 workers, leases=8 keep=1s, 32 fresh "
        . "clients for %d s (peak %d in flight before it), %d served, %d "
        . "others, longest nginx wait %d ms, peak %d/8\n", $curator_seconds,
        $busy, $ok, $bad, $cur->{wait}, $cur->{peak};
    printf "    a Curator InterProcessSemaphore ready %.1f s into the load "
        . "acquired %s\n", $cur->{ready} // -1,
        !defined $cur->{took} ? 'never (TIMEOUT or no answer in 60 s)'
        : sprintf('in %.3f s, %s', $cur->{took}, $cur->{during}
            ? 'during the load' : sprintf('%.3f s after the load ended',
                $cur->{after}));
    $_->stop for @ng;
}

my @over = grep { $_->{clean} > $_->{l} } @rows;
my @abort = grep { $_->{peak} > $_->{l} && $_->{clean} <= $_->{l} } @rows;
my @failed = grep { $_->{bad} } @rows;
print "\n";
printf "BOUND EXCEEDED in %d case(s)\n", scalar @over if @over;
printf "the bound exceeded only with calls cut by a client abort (*) in %d "
    . "case(s)\n", scalar @abort if @abort;
printf "non-200 or failed requests in %d case(s)\n", scalar @failed
    if @failed;
print "bound held in every case\n" if @rows && !@over && !@abort;
exit 0;
