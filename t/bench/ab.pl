#!/usr/bin/perl
# Benchmark, run by hand (never by prove): the gated request path of two
# or more revisions of the module, measured in turn in one run on one
# ZooKeeper, so that a slowdown between them stands out of the spread from
# one run to the next (issue 38, item 7).
#
#   perl t/bench/ab.pl [--rounds 6] [--secs 8] [--warmup 2] [--callgrind]
#                      [--requests 500] [--markdown FILE] [REV_A REV_B ...]
#
# REV: anything git names (default: d830c00 HEAD).  Each revision is
# built from its committed sources (git archive into t/build/ab-<commit>/,
# then a copy of Debian's nginx tree configured as t/lib/build.sh does:
# --with-compat --with-debug --with-stream); a build found there is
# reused.  Uncommitted changes are not measured: commit them first.
#
# Each revision gets the fleet of t/bench/run.pl, 2 nginx of 2 workers, a
# static file behind a zk_mutex, all the fleets on one ZooKeeper
# (forceSync=no) at once.  A round measures every revision in turn,
# A B A B ..., in two scenarios, each after a --warmup of the same load
# (and a first round, not counted, while ZooKeeper's JIT compiles):
#
#   uncontended  wrk, 1 keepalive connection to the first nginx
#   contended    wrk, 8 keepalive connections, 4 on each nginx
#
# for --secs each.  Reported per revision and scenario: requests/s, mean
# and sd over the rounds; the ratio to A, each round's rate over A's rate
# of the same round, mean and sd; the workers' CPU per request (utime +
# stime from /proc/<pid>/stat of the fleet's workers, over the run) and
# ZooKeeper's.  Each round also shows how much CPU the machine's other
# processes took meanwhile (/proc/stat's busy time less the fleet's
# workers, ZooKeeper and wrk), in cores: a round where it is not near 0
# was measured on a busy machine.  --callgrind: then, for each revision,
# one nginx under valgrind's callgrind, as a single process (master_process
# off: callgrind_control does not reach a worker forked under valgrind),
# --requests uncontended requests on one keepalive connection after 100
# not counted; its instructions per request (callgrind_control zeroes the
# counters before and dumps them after).  Needs wrk (and valgrind for
# --callgrind).

use strict;
use warnings;
use FindBin;
use File::Spec;
use Getopt::Long;
use IO::Socket::INET;
use POSIX ();
use Time::HiRes qw(time sleep);
use lib "$FindBin::Bin/../lib";
use ZkLock::Test;

chdir "$FindBin::Bin/../.." or die "chdir: $!";

my $rounds = 6;
my $secs = 8;
my $warmup = 2;
my $callgrind = 0;
my $requests = 500;
my $markdown;
GetOptions('rounds=i' => \$rounds, 'secs=i' => \$secs,
    'warmup=i' => \$warmup, 'callgrind' => \$callgrind,
    'requests=i' => \$requests, 'markdown=s' => \$markdown)
    or exit 2;
my @revs = @ARGV ? @ARGV : qw(d830c00 HEAD);
@revs >= 2 or die "two revisions or more\n";
$rounds >= 2 or die "--rounds: 2 or more (for a spread)\n";

system('which wrk >/dev/null 2>&1') == 0
    or die "wrk is missing: apt-get install wrk\n";
!$callgrind || system('which valgrind callgrind_control >/dev/null 2>&1') == 0
    or die "--callgrind: valgrind is missing: apt-get install valgrind\n";

# ------------------------------------------------------------- the builds

my $src = '/usr/share/nginx/src';
-f "$src/configure" or die "$src not found (apt-get install nginx-dev)\n";
mkdir 't/build';

sub build {
    my ($rev) = @_;
    chomp(my $sha = `git rev-parse --verify --quiet '$rev^{commit}'`);
    $sha or die "$rev: no such revision\n";
    my $dir = 't/build/ab-' . substr($sha, 0, 12);
    my $so = "$dir/nginx/objs/ngx_http_zk_lock_module.so";
    my $abs = File::Spec->rel2abs($dir);
    if (!-f $so) {
        print STDERR "building $rev ($dir)\n";
        system("rm -rf '$dir' && mkdir -p '$dir/src' "
            . "&& git archive --format=tar $sha | tar -x -C '$dir/src' "
            . "&& cp -a '$src' '$dir/nginx'") == 0
            or die "$rev: cannot unpack the sources\n";
        # NGX_ZK_LOCK_BUILD: the build identity, where the revision has one
        system("cd '$dir/nginx' && NGX_ZK_LOCK_BUILD=" . substr($sha, 0, 12)
            . " ./configure --with-compat --with-debug --with-stream "
            . "--add-dynamic-module='$abs/src' > ../configure.log 2>&1 "
            . "&& make -f objs/Makefile modules > ../make.log 2>&1") == 0
            && -f $so
            or die "$rev: the build failed, see $dir/configure.log and "
                . "$dir/make.log\n";
    }
    chomp(my $subject = `git log -1 --format=%s $sha`);
    return { rev => $rev, sha => substr($sha, 0, 7),
        so => File::Spec->rel2abs($so),
        subject => length $subject > 60
            ? substr($subject, 0, 57) . '...' : $subject };
}

my @v = map { build($_) } @revs;
my @label = ('A' .. 'Z')[0 .. $#v];
$v[$_]{label} = $label[$_] for 0 .. $#v;

# ------------------------------------------------------------- the fleets

my $zk = zk_start();

# run.pl's: a static file as the content, so that the gate is measured;
# the paths of all revisions have one length
sub conf {
    my ($l) = @_;
    return <<"EOF";
    zk_hosts %%ZK%%;
    server {
        listen 127.0.0.1:%%PORT%%;
        access_log off;
        root %%PREFIX%%;
        location = /mutex {
            zk_mutex /bench/ab/$l/mutex timeout=30s;
            try_files /index.html =404;
        }
    }
EOF
}

sub index_html {
    my ($prefix) = @_;
    open my $fh, '>', "$prefix/index.html" or die "$prefix: $!";
    print $fh "ok\n";
    close $fh;
}

for my $v (@v) {
    $v->{fleet} = [map {
        my $ng = nginx_start(conf($v->{label}), zk => $zk, no_module => 1,
            main_conf => "load_module $v->{so};", log_level => 'warn');
        index_html($ng->prefix);
        $ng;
    } 1 .. 2];
}

# every worker's session: a first request through each nginx is served
for my $v (@v) {
    for my $ng (@{ $v->{fleet} }) {
        wait_for(sub { $ng->get('/mutex', timeout => 5)->{status} == 200 },
            20) or die "$v->{label}: no 200 from /mutex:\n" . $ng->error_log;
    }
}

# ------------------------------------------------------------ measuring

my $tck = POSIX::sysconf(POSIX::_SC_CLK_TCK()) || 100;

sub workers { map { $_->worker_pids } @{ $_[0]{fleet} } }

# wrk on each [nginx, connections] for $s seconds: requests, rate
sub wrk {
    my ($s, @spec) = @_;
    my @pids;
    for my $sp (@spec) {
        my ($ng, $c) = @$sp;
        my $file = $ng->prefix . "/wrk.out";
        my $pid = fork // die "fork: $!";
        if ($pid == 0) {
            exec "wrk -t1 -c$c -d${s}s http://127.0.0.1:" . $ng->port
                . "/mutex > $file 2>&1";
        }
        push @pids, [$pid, $file];
    }
    my ($n, $rate) = (0, 0);
    for (@pids) {
        waitpid $_->[0], 0;
        open my $fh, '<', $_->[1] or die "$_->[1]: $!";
        my $out = do { local $/; <$fh> };
        my ($r) = $out =~ /Requests\/sec:\s+([\d.]+)/ or die "wrk: $out";
        my ($k) = $out =~ /(\d+) requests in/;
        $out =~ /Non-2xx|Socket errors/ and warn "errors:\n$out";
        $rate += $r;
        $n += $k;
    }
    return ($n, $rate);
}

# the CPU seconds of wrk (children reaped) and of the whole machine
sub wrk_cpu { my @t = POSIX::times(); return ($t[3] + $t[4]) / $tck }

sub busy {
    open my $fh, '<', '/proc/stat' or die "/proc/stat: $!";
    my (undef, @f) = split ' ', scalar <$fh>;
    # user nice system idle iowait irq softirq steal
    return ($f[0] + $f[1] + $f[2] + $f[5] + $f[6] + ($f[7] // 0)) / $tck;
}

my %scenario = (
    uncontended => sub { ([$_[0]{fleet}[0], 1]) },
    contended => sub { map { [$_, 4] } @{ $_[0]{fleet} } },
);
my @scenarios = qw(uncontended contended);

# $res{$scenario}{$label}: [ {rate, cpu, zk}, ... ] one per round
my %res;

my $total = ($rounds + 1) * @scenarios * @v * ($secs + $warmup + 0.5);
printf STDERR "%d revisions, %d rounds of %d s (+%d s warm-up): about "
    . "%.0f minutes\n", scalar @v, $rounds, $secs, $warmup, $total / 60;

# ZooKeeper's JIT first: a round that is not counted, or the first
# rounds come out slower than the others
print STDERR "round 0, not counted\n";
for my $s (@scenarios) {
    wrk($secs, $scenario{$s}->($_)) for @v;
}

for my $round (1 .. $rounds) {
    for my $s (@scenarios) {
        for my $v (@v) {
            my @spec = $scenario{$s}->($v);
            wrk($warmup, @spec) if $warmup;
            my @w = workers($v);
            my @c0 = (cpu_seconds(@w), cpu_seconds($zk->pid), wrk_cpu(),
                busy());
            my ($n, $rate) = wrk($secs, @spec);
            my @c1 = (cpu_seconds(@w), cpu_seconds($zk->pid), wrk_cpu(),
                busy());
            my @d = map { $c1[$_] - $c0[$_] } 0 .. 3;
            $n ||= 1;
            my %r = (rate => $rate, cpu => $d[0] * 1e6 / $n,
                zk => $d[1] * 1e6 / $n,
                other => ($d[3] - $d[0] - $d[1] - $d[2]) / $secs);
            push @{ $res{$s}{ $v->{label} } }, \%r;
            printf STDERR "round %d %-11s %s %8.1f/s  worker %5.1f us/req  "
                . "others %.2f cores\n", $round, $s, $v->{label}, $rate,
                $r{cpu}, $r{other};
            sleep 0.5;
        }
    }
}

my $left = () = zk_ephemerals($zk, '/bench');

# ------------------------------------------------------------ callgrind

# one keepalive connection, $n requests one after the other
sub keepalive_gets {
    my ($port, $n) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port,
        Proto => 'tcp', Timeout => 30) or die "connect: $!";
    for (1 .. $n) {
        print $s "GET /mutex HTTP/1.1\r\nHost: bench\r\n\r\n";
        my $head = '';
        while ($head !~ /\r\n\r\n/) {
            sysread($s, $head, 4096, length $head) or die "read: $!";
        }
        my ($h, $body) = split /\r\n\r\n/, $head, 2;
        $h =~ m{^HTTP/1\.1 200 } or die "not 200: $h\n";
        my ($len) = $h =~ /^Content-Length: (\d+)/mi;
        while (length $body < $len) {
            sysread($s, $body, 4096, length $body) or die "read: $!";
        }
    }
    close $s;
}

# callgrind_control exits with 0 even when it finds no such process
sub cg_control {
    my ($what, $pid) = @_;
    my $out = `callgrind_control $what $pid 2>&1`;
    $out =~ /\bOK\b/ or die "callgrind_control $what $pid: $out";
}

sub instructions {
    my ($v) = @_;
    my $ng = ZkLock::Test::Nginx->_prepare(conf("cg$v->{label}"), zk => $zk,
        no_module => 1, main_conf => "load_module $v->{so};",
        log_level => 'warn', workers => 1);
    my $p = $ng->prefix;
    index_html($p);
    # one process, master and worker (callgrind_control does not see a
    # child forked under valgrind)
    my $c = slurp("$p/nginx.conf");
    $c =~ s/^master_process on;$/master_process off;/m
        or die "$p/nginx.conf: no master_process\n";
    open my $fh, '>', "$p/nginx.conf" or die "$p: $!";
    print $fh $c;
    close $fh;
    my $worker = spawn(name => 'callgrind', log => "$p/logs/valgrind.log",
        cmd => ['valgrind', '--tool=callgrind',
            "--callgrind-out-file=$p/callgrind.%p", $ZkLock::Test::NGINX,
            '-p', "$p/", '-e', "$p/logs/error.log", '-c', "$p/nginx.conf"]);
    wait_for(sub {
        IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $ng->port,
            Proto => 'tcp', Timeout => 1);
    }, 60) or die "nginx under callgrind did not start:\n"
        . slurp("$p/logs/valgrind.log") . slurp("$p/logs/error.log");
    # the session, then 100 requests not counted
    wait_for(sub { $ng->get('/mutex', timeout => 10)->{status} == 200 }, 60)
        or die "no 200 under callgrind:\n" . slurp("$p/logs/error.log");
    keepalive_gets($ng->port, 100);
    cg_control('-z', $worker);
    keepalive_gets($ng->port, $requests);
    cg_control('-d', $worker);
    my $ir = wait_for(sub {
        my ($f) = glob "$p/callgrind.$worker.*";
        $f && slurp($f) =~ /^totals: (\d+)/m ? $1 : 0;
    }, 30) or die "no callgrind dump for the worker\n";
    kill 'TERM', $worker;
    proc_wait($worker, 30);
    return $ir / $requests;
}

if ($callgrind) {
    for my $v (@v) {
        $v->{ir} = instructions($v);
        printf STDERR "callgrind %s: %.0f instructions/request\n",
            $v->{label}, $v->{ir};
    }
}

# ------------------------------------------------------------ the report

sub mean { my $t = 0; $t += $_ for @_; return $t / @_ }

sub sd {
    my $m = mean(@_);
    my $t = 0;
    $t += ($_ - $m) ** 2 for @_;
    return sqrt($t / (@_ - 1));
}

my @out;

push @out, "Revisions (ZooKeeper forceSync=no, 2 nginx x 2 workers each, "
    . "$rounds rounds of $secs s, in turn " . join(' ', @label, '...') . "):",
    '';
push @out, "| | revision | |", '|---|---|---|';
push @out, "| $_->{label} | $_->{sha} ($_->{rev}) | $_->{subject} |" for @v;
push @out, '';

my @head = ('scenario', 'revision', 'requests/s', "ratio to A",
    'worker CPU/req', 'ZooKeeper CPU/req', $callgrind ? 'instructions/req'
    : ());
push @out, '| ' . join(' | ', @head) . ' |',
    '|' . join('|', map { $_ < 2 ? '---' : '---:' } 0 .. $#head) . '|';

for my $s (@scenarios) {
    my $base = $res{$s}{A};
    for my $v (@v) {
        my $r = $res{$s}{ $v->{label} };
        my @rate = map { $_->{rate} } @$r;
        my @ratio = map { $r->[$_]{rate} / $base->[$_]{rate} } 0 .. $#$r;
        my @cpu = map { $_->{cpu} } @$r;
        push @out, '| ' . join(' | ', $s, "$v->{label} $v->{sha}",
            sprintf('%.0f +- %.0f', mean(@rate), sd(@rate)),
            $v->{label} eq 'A' ? '1' : sprintf('%.3f +- %.3f', mean(@ratio),
                sd(@ratio)),
            sprintf('%.1f +- %.1f us', mean(@cpu), sd(@cpu)),
            sprintf('%.0f us', mean(map { $_->{zk} } @$r)),
            $callgrind ? ($s eq 'uncontended' ? sprintf('%.0f', $v->{ir})
                : '') : ()) . ' |';
    }
}

push @out, '', 'Each round (requests/s; "others": the most CPU that other '
    . 'processes of the machine took meanwhile, in cores):', '',
    '| scenario | round | ' . join(' | ', @label) . ' | others |',
    '|---|---:|' . join('|', map { '---:' } @label, 'others') . '|';
for my $s (@scenarios) {
    for my $i (0 .. $rounds - 1) {
        my @o = sort { $b <=> $a } map { $res{$s}{$_}[$i]{other} } @label;
        push @out, "| $s | " . ($i + 1) . ' | ' . join(' | ',
            (map { sprintf '%.0f', $res{$s}{$_}[$i]{rate} } @label),
            sprintf('%.2f', $o[0])) . ' |';
    }
}
push @out, '', "Nodes left under /bench: $left";

print "\n", join("\n", @out), "\n";

if ($markdown) {
    open my $fh, '>', $markdown or die "$markdown: $!";
    print $fh join("\n", @out), "\n";
    close $fh;
}
