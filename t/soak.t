#!/usr/bin/perl
# A randomized soak under AddressSanitizer (issue 36).  The crashes and
# leaks it is for need several features, ordinary client behaviour and
# time together: a worker that lends a kept lease to a sibling whose
# client has just hung up, a lease lent on a path built from a variable,
# a broker stalled while its siblings' asks go away.  A test that fixes
# one feature and one client behaviour does not meet them; this one runs
# them all at once, chosen at random, for SOAK_SECONDS (90), from a seed
# printed first (SOAK_SEED replays its choices; the timing of a run is
# the machine's).
#
# The fleet: ZooKeeper (zk_session_timeout 4s), the backend, and three
# nginx with more workers than leases, listening with reuseport so that
# the kernel spreads the clients over the workers:
#   A  4 workers, through the fault proxy, with a stream server
#   B  4 workers, zk_sessions 2 (workers 2 and 3 ask workers 0 and 1)
#   C  3 workers, with a stream server
# The locks, each on its own path and backend key (the backend records
# every call, rec=1):
#   m    zk_mutex revocable=on                      (finish)
#   s    zk_semaphore leases=3 keep=3s               (abort)
#   kv   zk_semaphore /soak/kv/$arg_v leases=2 keep=30s: a variable path,
#        400 values, most used once
#   sw   zk_semaphore leases=4 weight=$arg_w (1 or 2)
#   sl   zk_semaphore leases=2, zk_lock_fail local=1
#   so   zk_mutex, zk_lock_fail open
#   rw   zk_rwlock read / write                      (abort)
#   km   zk_mutex keep=3s
#   kr   zk_rwlock read keep=3s / write
#   s2   zk_semaphore leases=2 protocol=v2           (abort)
#   dry  zk_semaphore leases=1, zk_lock_dry_run on
#   st   a stream server: zk_semaphore leases=2 keep=1s
#   sf   zk_semaphore leases=2 keep=3s fair=$arg_t fair_weight=$fw
#        fair_max=1: 5 flows of weights 1 to 3 (a flow's requests asked of
#        worker 0 every time, their flows counted while they wait and run,
#        one lease a flow at most: the others wait in their flow), the
#        instances' claims in /soak/sf.fair
#   sp   zk_semaphore leases=3 keep=3s priority=$arg_c: classes gold (5
#        shares, lends none), silver (3, half, the default), bronze (2,
#        all) and an unknown one, their demands in /soak/sp.fair
#
# The clients: SOAK_CLIENTS (10) processes, each seeded with seed + i,
# each choosing per request an instance, a lock, an upstream time and a
# behaviour: a fresh HTTP/1.0 connection; a keepalive HTTP/1.1 connection
# of several requests (hanging up in the middle of one, now and then);
# hanging up right after the request is sent (before the lock), or at a
# random moment (while waiting or while holding); hanging up the moment
# another request on the lock gets its answer (at the grant); HTTP/2
# (t/lib/h2client.py) with streams reset at random and connections
# closed with streams open; a stream connection, hung up now and then.
# Beside them a scraper asks, one at a time, for the fleet view (JSON,
# and its page), the status page and the metrics of a random instance,
# and hangs up on one in five within 0.5 s (a fleet view request gone
# while it waits for the worker's read of ZooKeeper).
#
# The faults, chosen at random, one at a time until 12 s before the end
# of the traffic: reloads, SIGKILL and SIGSTOP/SIGCONT (0.3 to 1.5 s,
# under 3/4 of the session timeout) of a worker (worker 0 and B's
# brokers more often than the others), connection blips and partitions
# (short, and past the session timeout) of A, ZooKeeper restarts, and
# __REVOKE__ written into a node of the revocable mutex.
#
# Asserts:
#  1. AddressSanitizer is silent (ASAN_OPTIONS log_path: a report of any
#     nginx process is a file of this test's)
#  2. no worker exited on a signal but those the test killed, nothing at
#     alert, crit or emerg (the harness, at done_testing), no worker
#     exited with a code other than 0 (as one that ASan stops does)
#  3. per lock, at no instant more in flight at the backend than the
#     README's bound: the cap (weights counted, a writer alone), with
#     what the README lets pass beside it set apart and bounded on its
#     own: BYPASSED calls (zk_lock_fail open: unbounded); LOCAL ones (at
#     most 1 per instance, local=1); those that ended LOST under
#     zk_lock_lost finish (at most the cap among themselves: they held
#     together when their sessions went into jeopardy).  A call's end is
#     taken as the moment its client closed (the README: the lock goes
#     with the request, while the upstream may still be working), its
#     worker was killed, or it was revoked, if that came first
#  4. every request answered (a status; for stream, the connection
#     closed) within its lock's timeout + its upstream time + 5 s, or
#     ended by its client; a connection closed without an answer only
#     where the README says so (zk_lock_lost abort, a revoked holder, a
#     killed worker, an idle keepalive or HTTP/2 connection that a reload
#     closed); every status 200 or 503
#  5. within 12 s of the end of the traffic (longer than keep=3s and the
#     session timeout, shorter than keep=30s), with nginx running: no
#     node left below /soak, no unix socket pair left between the workers
#     of an instance (/proc/net/unix, the brokers' abstract names)
#  6. no node left once nginx stopped
#  7. every scrape answered 200 within the fleet view's 3 s wait for a
#     read and the margin, but where a fault on its instance (a worker
#     killed or stopped, a reload) explains it; the fleet view answered
#  and that the soak did its work: requests served on every lock, every
#  behaviour, some faults.
#
# What it found (issue 36): a worker 0 that granted an idle kept lease at
# once to a sibling whose ask was already closed read the ask it had just
# freed (heap-use-after-free in ngx_zk_lock_broker_read, within 30 s);
# leases lent on a path built from a variable kept, with their nodes and
# socket pairs, for the whole keep=30s.
#
# The nginx binary: ZK_LOCK_NGINX if it was built with -fsanitize=address
# (ZK_LOCK_MODULE= when the modules are built in), else the one
# t/lib/asan.sh builds (a minute or two the first time).  SOAK_SECONDS
# (0 skips the test), SOAK_SEED (CI=true: 36036, else drawn from the
# clock), SOAK_CLIENTS; ZK_TEST_KEEP=1 keeps the logs.
#
# To hunt a rare failure: SOAK_ODDS ("s2=10,kv=12,...", the locks the
# clients choose and how often; a lock left out fails its "requests
# served"), SOAK_FAULTS ("blip=3,stop=4,...", the faults and how often),
# SOAK_FAULT_INST (the instance whose workers are killed and stopped),
# SOAK_LOG_LEVEL_A (A's error log level: debug, with a build made by
# t/lib/asan.sh --with-debug).  t/lib/txncheck.py then lists the creates
# of A that ZooKeeper applied and A's debug log never saw answered, from
# ZooKeeper's transaction log: a node that may have leaked even when it
# went with its session before the end.

use strict;
use warnings;
use Test::More;
use Time::HiRes qw(time sleep);
use Errno qw(EAGAIN EINTR EWOULDBLOCK);
use Fcntl qw(LOCK_EX);
use IO::Handle;
use IO::Select;
use IO::Socket::INET;
use IPC::Open2 qw(open2);
use JSON::PP ();
use POSIX qw(_exit WNOHANG);
use lib 't/lib';
use ZkLock::Test;
use ZkLock::FaultProxy;

# CI runs one seed, the same each time; by hand, a new one each run
my $CI_RUN  = ($ENV{CI} // '') =~ /^(1|true|yes)$/i;
my $SEED    = $ENV{SOAK_SEED}
    // ($CI_RUN ? 36036 : int(time * 1000) % 1_000_000_007);
my $SECONDS = $ENV{SOAK_SECONDS} // 90;
my $CLIENTS = $ENV{SOAK_CLIENTS} // 10;
my $T       = 4;     # s, zk_session_timeout
my $MARGIN  = 5;     # s, over a lock's timeout and upstream time
my $SCRAPE_WAIT = 3 + $MARGIN;  # s: the fleet view waits 3 s for a read
my $SETTLE  = 12;    # s after the traffic: keep=3s and T are over
my $FAULTS_END = 12; # s before the end of the traffic: no more faults

diag "SOAK_SEED=$SEED SOAK_SECONDS=$SECONDS SOAK_CLIENTS=$CLIENTS";

# the choices' own generator (Park-Miller), so that the harness's use of
# rand (temporary files' names) does not move them: a seed replays them
my $RNG;
sub seed_rng { $RNG = $_[0] % 2147483646 + 1 }
sub rnd {
    $RNG = $RNG * 48271 % 2147483647;
    return $_[0] * $RNG / 2147483647;
}
seed_rng($SEED);

plan skip_all => 'SOAK_SECONDS=0' if $SECONDS == 0;
my $why = asan_nginx();
if ($why) {
    BAIL_OUT("missing prerequisite: $why")
        if ($ENV{CI} // '') =~ /^(1|true|yes)$/i;
    plan skip_all => $why;
}
require_prereqs(qw(nginx zookeeper kazoo python module stream));
if (system("$ZkLock::Test::PYTHON -c 'import h2' 2>/dev/null") != 0) {
    BAIL_OUT('python3-h2 missing') if ($ENV{CI} // '') =~ /^(1|true|yes)$/i;
    plan skip_all => "python3-h2 missing for $ZkLock::Test::PYTHON";
}

# ASan reads its options when the master starts, and the workers it forks
# keep them (nginx clears their environment, not the runtime's options):
# every report goes to a file asan.<pid> here, the process that makes one
# exits (halt_on_error), and nginx's pools, which it frees unevenly at
# exit, are not reported as leaks
my $DIR = tempdir('soak');
$ENV{ASAN_OPTIONS} = join ':', grep { length } $ENV{ASAN_OPTIONS} // '',
    "log_path=$DIR/asan", 'detect_leaks=0', 'halt_on_error=1',
    'abort_on_error=0', 'quarantine_size_mb=64', 'malloc_context_size=20';

###############################################################################
# The locks.  kind: mutex and sem count weights against cap; rw wants a
# writer alone; none is not bounded (the dry run lets everything through).

my @LOCKS = (
    { name => 'm',   kind => 'mutex', cap => 1,
      dir => 'zk_mutex /soak/m revocable=on' },
    { name => 's',   kind => 'sem', cap => 3, lost => 'abort',
      dir => 'zk_semaphore /soak/s leases=3 keep=3s' },
    { name => 'kv',  kind => 'sem', cap => 2, key => 'kv-$arg_v',
      dir => 'zk_semaphore /soak/kv/$arg_v leases=2 keep=30s' },
    { name => 'sw',  kind => 'sem', cap => 4, w => '$arg_w',
      dir => 'zk_semaphore /soak/sw leases=4 weight=$arg_w' },
    { name => 'sl',  kind => 'sem', cap => 2, fail => 'local=1', local => 1,
      dir => 'zk_semaphore /soak/sl leases=2' },
    { name => 'so',  kind => 'mutex', cap => 1, fail => 'open', timeout => 1,
      dir => 'zk_mutex /soak/so' },
    { name => 'rw-r', kind => 'rw', key => 'rw', lost => 'abort',
      dir => 'zk_rwlock /soak/rw read' },
    { name => 'rw-w', kind => 'rw', key => 'rw', lost => 'abort',
      dir => 'zk_rwlock /soak/rw write' },
    { name => 'km',  kind => 'mutex', cap => 1,
      dir => 'zk_mutex /soak/km keep=3s' },
    { name => 'kr-r', kind => 'rw', key => 'kr',
      dir => 'zk_rwlock /soak/kr read keep=3s' },
    { name => 'kr-w', kind => 'rw', key => 'kr',
      dir => 'zk_rwlock /soak/kr write' },
    { name => 's2',  kind => 'sem', cap => 2, lost => 'abort',
      dir => 'zk_semaphore /soak/s2 leases=2 protocol=v2' },
    { name => 'dry', kind => 'none', dry => 1,
      dir => 'zk_semaphore /soak/dry leases=1' },
    { name => 'sf',  kind => 'sem', cap => 2,
      dir => 'zk_semaphore /soak/sf leases=2 keep=3s fair=$arg_t '
             . 'fair_weight=$arg_fw fair_max=1' },
    { name => 'sp',  kind => 'sem', cap => 3,
      dir => 'zk_semaphore /soak/sp leases=3 keep=3s priority=$arg_c' },
);
my %LOCK = map { $_->{name} => $_ } @LOCKS;
for my $l (@LOCKS) {
    $l->{timeout} //= 2;
    $l->{fail} //= 'closed';
    $l->{lost} //= 'finish';
    $l->{key} //= $l->{name};
}
# the stream server's lock
my %ST = (name => 'st', kind => 'sem', cap => 2, timeout => 2,
    lost => 'finish', key => 'st');

# how often the clients choose each (the kept leases, which the bugs of
# issue 36 were in, more than the others)
my @LOCK_ODDS = (s => 20, kv => 20, m => 8, sw => 8, sl => 8, so => 5,
    'rw-r' => 7, 'rw-w' => 4, km => 8, 'kr-r' => 8, 'kr-w' => 3, s2 => 6,
    dry => 6, sf => 12, sp => 10);
@LOCK_ODDS = split /[=,]/, $ENV{SOAK_ODDS} if $ENV{SOAK_ODDS};
my @SLEEPS = (0, 0, 20, 50, 100, 200, 300);    # ms, the upstream's time

###############################################################################
# The fleet

my $zk = zk_start(cfg => { maxClientCnxns => 0 });
my $be = backend_start();
my $px = ZkLock::FaultProxy->start($zk);
my ($h2_suffix, $h2_on) = http2_listen();

my %NG;
my %H2PORT = map { $_ => free_port() } qw(A B C);
$NG{A} = nginx_start(http_conf('A', $px->hosts, ''), backend => $be,
    workers => 4, stream => stream_conf($px->hosts),
    log_level => $ENV{SOAK_LOG_LEVEL_A});
$NG{B} = nginx_start(http_conf('B', $zk->hosts, 'zk_sessions 2;'),
    backend => $be, workers => 4);
$NG{C} = nginx_start(http_conf('C', $zk->hosts, ''), backend => $be,
    workers => 3, stream => stream_conf($zk->hosts));
my @INST = sort keys %NG;
ok(wait_for(sub {
    my $n = () = join('', map { $_->error_log } values %NG)
        =~ /zookeeper session 0x[0-9a-f]+ connected/g;
    return $n >= 4 + 4 + 2 + 3 + 3;    # HTTP, stream; B's two brokers
}, 30), 'every session of the fleet is connected');

sub http_conf {
    my ($inst, $hosts, $extra) = @_;
    my $locations = '';
    for my $l (@LOCKS) {
        my $w = $l->{w} // 1;
        $locations .= <<"EOF";
        location = /l/$l->{name} {
            $l->{dir} timeout=$l->{timeout}s;
            zk_lock_fail $l->{fail};
            zk_lock_lost $l->{lost};
@{[ $l->{dry} ? "            zk_lock_dry_run on;\n" : '' ]}            proxy_pass http://%%BACKEND%%/w?rec=1&hangup=1&key=$l->{key}&w=$w&sleep=\$arg_sleep&id=\$arg_id.\$zk_lock_status.\$pid;
        }
EOF
    }
    return <<"EOF";
    zk_hosts $hosts;
    zk_session_timeout ${T}s;
    zk_lock_class gold shares=5 lendable=0%;
    zk_lock_class silver shares=3 lendable=50% default;
    zk_lock_class bronze shares=2 lendable=100%;
    $extra
    log_format soak '\$arg_id \$status \$zk_lock_status \$pid';
    server {
        listen 127.0.0.1:%%PORT%% reuseport;
        listen 127.0.0.1:$H2PORT{$inst}$h2_suffix reuseport;
        $h2_on
        access_log %%PREFIX%%/logs/soak.log soak;
$locations
        location = /zk-status { zk_lock_status_page json; }
        location = /zk-metrics { zk_lock_status_page prometheus; }
        location = /zk-fleet { zk_lock_fleet_view json; }
    }
EOF
}

sub stream_conf {
    my ($hosts) = @_;
    return <<"EOF";
    zk_hosts $hosts;
    zk_session_timeout ${T}s;
    log_format st '\$remote_port \$status \$zk_lock_status \$pid \$msec';
    access_log %%PREFIX%%/logs/stream.log st;
    server {
        listen 127.0.0.1:%%STREAM_PORT%% reuseport;
        zk_semaphore /soak/st leases=$ST{cap} keep=1s timeout=$ST{timeout}s;
        proxy_pass %%BACKEND%%;
    }
EOF
}

###############################################################################
# The run: the clients, and the faults meanwhile

my $t_start = time;
my $t_end = $t_start + $SECONDS;
my %PORTS = map { $_ => { http => $NG{$_}->port, h2 => $H2PORT{$_},
    stream => $NG{$_}->stream_port } } @INST;
my @clients = map { start_client($_) } 1 .. $CLIENTS;
push @clients, start_scraper();

my @EVENTS;    # the faults: { t, what, inst, pid, secs }
my $t_faults_end = $t_end - $FAULTS_END;
sleep 3;
while (time < $t_faults_end) {
    fault();
    sleep 1 + rnd(2);
}
my $faults = @EVENTS;
note "faults over; the traffic goes on until the end";
sleep $t_end - time if time < $t_end;

# every client ends its last request within its timeout and margin
my @stuck;
for my $pid (@clients) {
    my $st = proc_wait($pid, 2 + 0.3 + $MARGIN + 10);
    next if defined $st && $st == 0;
    push @stuck, $pid;
    kill 'KILL', $pid;
}
ok(!@stuck, 'every client ended by itself') or diag "not: @stuck";
my $t_traffic = time;
kill 'CONT', map { $_->child_pids } values %NG;    # in case

###############################################################################
# 5. once the traffic is over, nothing kept past keep= and the session
# timeout: no node, no socket pair between workers

wait_for(sub {
    return 0 if zk_ephemerals($zk, '/soak');
    return 0 if grep { $NG{$_}->broker_pairs } @INST;
    return 1;
}, $SETTLE, 0.5);
my @left = zk_ephemerals($zk, '/soak');
ok(!@left, sprintf('no node left below /soak %.0f s after the traffic, '
    . 'nginx running', time - $t_traffic))
    or diag scalar(@left) . " nodes, e.g.:\n" . join "\n", map {
        my $d = eval { zk_get($zk, $_) };
        my ($pid) = ($d->{data} // '') =~ / pid (\d+) /;
        my ($inst) = grep { my $i = $_; defined $pid
            && grep { $_ == $pid } $NG{$i}->child_pids } @INST;
        "  $_\n    " . ($inst ? "($inst) " : '') . ($d->{data} // '(gone)')
        . "\n    " . owner_of($d) . last_calls($_)
    } @left[0 .. ($#left < 4 ? $#left : 4)];
# a node left: whether it goes at its keep= (a lease kept as if its path
# were used) or stays (nothing will delete it)
if (@left) {
    my %gone;
    wait_for(sub {
        $gone{$_} //= time - $t_traffic
            for grep { !(eval { zk_get($zk, $_) } // {})->{exists} } @left;
        return keys %gone == @left;
    }, 40, 0.5);
    diag join "\n", map { "  $_: " . (defined $gone{$_}
        ? sprintf('went %.1f s after the traffic', $gone{$_})
        : 'still there 40 s later') } @left;
}
# whose session a leftover node is: the pid in its data is the requester's,
# which need not be the worker whose session holds it (a broker, worker
# 0's kept leases), and a session may outlive its worker (a ZooKeeper
# restart gives a dead one its whole timeout again)
sub owner_of {
    my ($d) = @_;
    return '' unless $d && $d->{exists};
    my $owner = sprintf '0x%x', $d->{ephemeral_owner};
    my $who = ' (no worker logged it)';
    for my $i (@INST) {
        my $log = $NG{$i}->error_log;
        while ($log =~ /(\d+)#\d+: zookeeper session (0x[0-9a-f]+) connected/g) {
            next if $2 ne $owner;
            $who = sprintf ' of %s worker %d (%s)', $i, $1,
                pid_alive($1) ? 'alive' : 'gone';
        }
    }
    return sprintf 'session %s%s, made %.1f s ago', $owner, $who,
        time - $d->{ctime} / 1000;
}

# the last calls at the backend on a leftover node's lock, if a value of
# kv: when its path was last used, and how
sub last_calls {
    my ($path) = @_;
    my ($v) = $path =~ m{^/soak/kv/([^/]+)/} or return '';
    my @c = sort { $a->[0] <=> $b->[0] } @{ $be->calls->{"kv-$v"} // [] };
    return "\n    no call on kv-$v" unless @c;
    return join '', map {
        my ($start, $end, $w, $bid, $hung) = @$_;
        sprintf "\n    call %s (id.status.pid) %+.3f..%s s after the "
            . "traffic%s", $bid // '?', $start - $t_traffic,
            defined $end ? sprintf('%+.3f', $end - $t_traffic) : 'open',
            $hung ? ' (hung up)' : '';
    } @c[($#c < 3 ? 0 : $#c - 3) .. $#c];
}

for my $inst (@INST) {
    my $n = $NG{$inst}->broker_pairs;
    is($n, 0, "$inst: no socket pair left between its workers");
}

my $calls = $be->calls;
$_->stop for values %NG;
no_ephemerals($zk, '/soak', 'nginx stopped', 10);

###############################################################################
# 1. AddressSanitizer

my @reports = grep { -s $_ } glob "$DIR/asan.*";
ok(!@reports, 'AddressSanitizer is silent')
    or diag join "\n", map { "== $_\n" . asan_excerpt(slurp($_)) }
        @reports[0 .. ($#reports < 2 ? $#reports : 2)];

# a worker that ASan stopped exits with code 1, which nginx logs at notice
# and the harness does not look for
for my $inst (@INST) {
    my @bad = grep { /exited with code (?!0\b)/ }
        split /\n/, $NG{$inst}->error_log;
    ok(!@bad, "$inst: no worker exited with a code other than 0")
        or diag join "\n", @bad;
}

###############################################################################
# 3 and 4: what the clients saw, what the backend saw

my @REQ = map { read_jsonl("$DIR/client-$_.jsonl") } 1 .. $CLIENTS;
my %REQ = map { $_->{id} => $_ } @REQ;
my %FINAL = read_access_logs();
my %STREAM_LOG = read_stream_logs();
for my $r (grep { $_->{lock} eq 'st' } @REQ) {
    $r->{final} = stream_final($r);
}
$_->{final} //= $FINAL{ $_->{id} } for @REQ;

summary();
cmp_ok($faults, '>=', $SECONDS >= 60 ? 10 : 1,
    "faults were applied ($faults)");
for my $l (@LOCKS, \%ST) {
    my $n = grep { $_->{lock} eq $l->{name} && $_->{status} == 200 } @REQ;
    cmp_ok($n, '>', 0, "lock $l->{name}: requests served ($n)");
}
for my $how (qw(fresh keepalive at-once hangup grant h2 stream)) {
    my $n = grep { $_->{how} eq $how } @REQ;
    cmp_ok($n, '>', 0, "behaviour $how: requests made ($n)");
}

check_answered();
check_scrapes();
check_bounds($calls);

done_testing();

###############################################################################
# The nginx binary

# undef when an AddressSanitizer build is there, else why not
sub asan_nginx {
    if (my $bin = $ENV{ZK_LOCK_NGINX}) {
        return "ZK_LOCK_NGINX=$bin: no such binary" unless -x $bin;
        my $v = `$bin -V 2>&1`;
        return "ZK_LOCK_NGINX=$bin was not built with -fsanitize=address "
            . '(t/lib/asan.sh builds one)' unless $v =~ /-fsanitize=address/;
        # built in, or the user says where the module is
        $ENV{ZK_LOCK_MODULE} //= '' if $v =~ /--add-module=/;
        return undef;
    }
    my $script = "$ZkLock::Test::LIB_DIR/asan.sh";
    # prove -j: one build at a time
    open my $lock, '<', $script or return "$script: $!";
    flock $lock, LOCK_EX;
    my $r = run_cmd([ '/bin/sh', $script ], timeout => 1800);
    close $lock;
    my ($bin) = grep { m{/nginx$} } split /\n/, $r->{out};
    return "t/lib/asan.sh failed (exit $r->{rc}): $r->{err}"
        if $r->{rc} != 0 || !$bin || !-x $bin;
    $ZkLock::Test::NGINX = $ENV{ZK_LOCK_NGINX} = $bin;
    $ENV{ZK_LOCK_MODULE} = '';
    return undef;
}

sub asan_excerpt {
    my ($text) = @_;
    my @l = split /\n/, $text;
    my ($first) = grep { $l[$_] =~ /ERROR: AddressSanitizer/ } 0 .. $#l;
    $first //= 0;
    my $last = $first + 40 < $#l ? $first + 40 : $#l;
    return join "\n", @l[ $first .. $last ];
}

###############################################################################
# The faults

sub pick { return $_[ int rnd(scalar @_) ] }

sub pick_weighted {
    my (@odds) = @_;
    my $sum = 0;
    $sum += $odds[ 2 * $_ + 1 ] for 0 .. $#odds / 2;
    my $x = rnd($sum);
    for (my $i = 0; $i < @odds; $i += 2) {
        return $odds[$i] if ($x -= $odds[ $i + 1 ]) < 0;
    }
    return $odds[-2];
}

# worker number => pid, from the status page (worker 0 keeps the kept
# leases, B's workers 0 and 1 are the brokers)
sub worker_slots {
    my ($ng) = @_;
    my $r = http_get($ng->port, '/zk-status', timeout => 3);
    my $doc = $r->{status} == 200
        ? eval { JSON::PP->new->decode($r->{body}) } : undef;
    my %live = map { $_ => 1 } $ng->worker_pids;
    return map { $_->{worker} => $_->{pid} }
        grep { $live{ $_->{pid} } } @{ $doc->{workers} // [] };
}

# a worker to kill or stop: worker 0 or a broker half the time
sub victim {
    my ($inst) = @_;
    my %slot = worker_slots($NG{$inst});
    my @special = grep { defined } $slot{0}, $inst eq 'B' ? $slot{1} : ();
    my @all = $NG{$inst}->worker_pids;
    return rnd(1) < 0.5 && @special ? pick(@special) : pick(@all);
}

sub event {
    my (%e) = @_;
    $e{t} //= time;
    push @EVENTS, \%e;
    note sprintf '%+6.1f %s', $e{t} - $t_start, join ' ',
        map { "$_=$e{$_}" } grep { $_ ne 't' } sort keys %e;
}

sub fault {
    my $what = pick_weighted($ENV{SOAK_FAULTS}
        ? split(/[=,]/, $ENV{SOAK_FAULTS})
        : (reload => 3, kill => 3, stop => 4, blip => 2,
        partition => 2, long_partition => 1, zk_restart => 1, revoke => 2));
    if ($what eq 'reload') {
        my $inst = pick(@INST);
        event(what => 'reload', inst => $inst);
        $NG{$inst}->reload or note "reload of $inst: old workers remain";
    } elsif ($what eq 'kill') {
        my $inst = $ENV{SOAK_FAULT_INST} // pick(@INST);
        my $pid = victim($inst) or return;
        $NG{$inst}->expect_log(qr/worker process $pid exited on signal 9$/);
        event(what => 'kill', inst => $inst, pid => $pid);
        kill 'KILL', $pid;
    } elsif ($what eq 'stop') {
        my $inst = $ENV{SOAK_FAULT_INST} // pick(@INST);
        my $pid = victim($inst) or return;
        my $secs = 0.3 + rnd(1.2);
        event(what => 'stop', inst => $inst, pid => $pid,
            secs => sprintf '%.2f', $secs);
        kill 'STOP', $pid;
        sleep $secs;
        kill 'CONT', $pid;
    } elsif ($what eq 'blip') {
        my $secs = 0.2 + rnd(0.8);
        event(what => 'blip', inst => 'A', secs => sprintf '%.2f', $secs);
        $px->cut($secs);
        sleep $secs;
    } elsif ($what =~ /partition/) {
        # short: no jeopardy; long: A's sessions expire
        my $secs = $what eq 'partition' ? 0.5 + rnd(1) : $T + 1.5;
        event(what => $what, inst => 'A', secs => sprintf '%.2f', $secs);
        $px->partition($secs);
        sleep $secs;
    } elsif ($what eq 'zk_restart') {
        event(what => 'zk_restart');
        $zk->stop;
        $zk->start;
    } elsif ($what eq 'revoke') {
        my @kids = eval { zk_children($zk, '/soak/m') };
        return unless @kids;
        my $node = "/soak/m/" . pick(@kids);
        event(what => 'revoke', node => $node);
        eval { zk_set($zk, $node, '__REVOKE__') };
    }
}


###############################################################################
# The clients: forked processes, each with its own seed, each writing a
# JSON line per request to client-<i>.jsonl:
#   id, inst, lock, how, start, end, status (0: none), outcome, allowed,
#   reused (a keepalive connection's later request), lport (stream)
# outcome: answered (a status; for stream, the connection closed),
# client (the client closed first), closed (closed by the server without
# a status), reset (HTTP/2: the server reset the stream), goaway (HTTP/2:
# the server sent GOAWAY, on which h2client.py closes), timeout (no answer
# within allowed), error (no connection)

my ($CI, $OUT, $SEQ);

sub start_client {
    my ($i) = @_;
    my $pid = fork // die "fork: $!";
    if ($pid) {
        register_pid($pid, "soak client $i");
        return $pid;
    }
    $SIG{$_} = 'DEFAULT' for qw(INT TERM);
    $SIG{PIPE} = 'IGNORE';
    seed_rng($SEED + $i);
    $CI = $i;
    open $OUT, '>', "$DIR/client-$i.jsonl" or _exit(2);
    $OUT->autoflush(1);
    my $ok = eval { client_loop(); 1 };
    print STDERR "soak client $i: $@" unless $ok;
    close $OUT;
    _exit($ok ? 0 : 1);
}

# The scraper: the fleet view (JSON and its page), the status page and
# the metrics of a random instance, one at a time and 0 to 0.3 s apart,
# reading each answer whole or, one in five, hanging up within 0.5 s of
# asking (a fleet view request that waits for a read, gone); a JSON line
# each to scrape.jsonl: inst, uri, start, end, status, outcome
sub start_scraper {
    my $pid = fork // die "fork: $!";
    if ($pid) {
        register_pid($pid, 'soak scraper');
        return $pid;
    }
    $SIG{$_} = 'DEFAULT' for qw(INT TERM);
    $SIG{PIPE} = 'IGNORE';
    seed_rng($SEED + 1000);
    open $OUT, '>', "$DIR/scrape.jsonl" or _exit(2);
    $OUT->autoflush(1);
    my $ok = eval {
        scrape(pick(@INST), pick(qw(/zk-fleet /zk-fleet /zk-fleet?format=html
            /zk-metrics /zk-status))) while time < $t_end;
        1;
    };
    print STDERR "soak scraper: $@" unless $ok;
    close $OUT;
    _exit($ok ? 0 : 1);
}

sub scrape {
    my ($inst, $uri) = @_;
    my $r = { inst => $inst, uri => $uri, start => time, status => 0 };
    my $s = h1_connect($PORTS{$inst}{http});
    if (!$s) {
        $r->{outcome} = 'error';
    } elsif (!defined syswrite($s, "GET $uri HTTP/1.0\r\nHost: soak\r\n\r\n")) {
        $r->{outcome} = 'closed';
    } elsif (rnd(1) < 0.2) {
        sleep rnd(0.5);
        $r->{outcome} = 'client';
    } else {
        my $a = h1_read($s, time + $SCRAPE_WAIT, 1);
        $r->{status} = $a->{status};
        $r->{outcome} = $a->{timeout} ? 'timeout'
            : $a->{status} > 0 ? 'answered' : 'closed';
    }
    close $s if $s;
    $r->{end} = time;
    print {$OUT} JSON::PP->new->canonical->encode($r), "\n";
    sleep rnd(0.3);
}

# every scrape answered 200 within the view's wait for a read and a
# margin, or closed where a fault on its instance (a worker killed or
# stopped, a reload) explains it
sub check_scrapes {
    my @s = read_jsonl("$DIR/scrape.jsonl");
    my (@bad, %n);
    for my $r (@s) {
        $n{"$r->{uri} $r->{outcome}"}++;
        next if $r->{outcome} eq 'client';
        next if $r->{outcome} eq 'answered' && $r->{status} == 200;
        next if grep { ($_->{inst} // '') eq $r->{inst}
            && $_->{what} =~ /^(kill|stop|reload)$/
            && $_->{t} > $r->{start} - 2 && $_->{t} < $r->{end} + 1 } @EVENTS;
        push @bad, $r;
    }
    note 'scrapes: ' . join ', ', map { "$n{$_} $_" } sort keys %n;
    cmp_ok($n{'/zk-fleet answered'} // 0, '>', 0, 'the fleet view answered '
        . 'through the faults (' . scalar(@s) . ' scrapes)');
    ok(!@bad, 'every scrape of the fleet view, status page and metrics '
        . "answered 200 within $SCRAPE_WAIT s, but where a fault explains it")
        or diag join "\n", map { sprintf '  %s %s %+.2f..%+.2f %s %s',
            $_->{inst}, $_->{uri}, $_->{start} - $t_start,
            $_->{end} - $t_start, $_->{outcome}, $_->{status} }
            @bad[0 .. ($#bad < 9 ? $#bad : 9)];
}

sub client_loop {
    my %behaviour = (fresh => \&client_fresh,
        keepalive => \&client_keepalive, 'at-once' => \&client_at_once,
        hangup => \&client_hangup, grant => \&client_grant,
        h2 => \&client_h2, stream => \&client_stream);
    while (time < $t_end) {
        my $how = pick_weighted(fresh => 30, keepalive => 15, 'at-once' => 12,
            hangup => 12, grant => 8, h2 => 10, stream => 10);
        my $inst = $how eq 'stream' ? pick(qw(A C)) : pick(@INST);
        $behaviour{$how}->($inst);
    }
}

sub new_request {
    my ($inst, $how, $lock) = @_;
    $lock //= pick_weighted(@LOCK_ODDS);
    my $l = $lock eq 'st' ? \%ST : $LOCK{$lock};
    my $sleep = pick(@SLEEPS);
    my $id = "$CI-" . ++$SEQ;
    my $uri = $lock eq 'st'
        ? "/w?rec=1&hangup=1&key=st&sleep=$sleep&id=$id"
        : "/l/$lock?id=$id&sleep=$sleep";
    $uri .= '&v=v' . (1 + int rnd(400)) if $lock eq 'kv';
    $uri .= '&w=' . (1 + int rnd(2)) if $lock eq 'sw';
    $uri .= '&t=t' . int(rnd(5)) . '&fw=' . (1 + int rnd(3))
        if $lock eq 'sf';
    $uri .= '&c=' . pick(qw(gold gold silver bronze nosuch))
        if $lock eq 'sp';
    return { id => $id, inst => $inst, lock => $lock, how => $how,
        uri => $uri, status => 0,
        allowed => $l->{timeout} + $sleep / 1000 + $MARGIN };
}

sub record {
    my ($r, $outcome) = @_;
    $r->{end} //= time;
    $r->{outcome} = $outcome;
    print {$OUT} JSON::PP->new->canonical->encode($r), "\n";
}

sub h1_connect {
    my ($port) = @_;
    return IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port,
        Proto => 'tcp', Timeout => 5);
}

sub h1_send {
    my ($s, $r, $keepalive) = @_;
    $r->{start} = time;
    my $req = "GET $r->{uri} HTTP/" . ($keepalive ? '1.1' : '1.0') . "\r\n"
        . "Host: soak\r\n" . ($keepalive ? '' : "Connection: close\r\n")
        . "\r\n";
    return defined syswrite($s, $req);
}

# reads a response until it is whole (with $eof: until the connection
# closes), the connection closes or $until; returns { status, whole, eof,
# close, bytes, timeout }
sub h1_read {
    my ($s, $until, $eof) = @_;
    my ($buf, $sel) = ('', IO::Select->new($s));
    my ($status, $head_end, $need, $chunked, $close);
    while (1) {
        if (!defined $status && (my $i = index $buf, "\r\n\r\n") >= 0) {
            my $head = substr $buf, 0, $i;
            ($status) = $head =~ m{^HTTP/\d\.\d (\d{3})};
            $status //= -1;
            $head_end = $i + 4;
            $need = $head =~ /^content-length:\s*(\d+)/mi ? $1 : undef;
            $chunked = $head =~ /^transfer-encoding:\s*chunked/mi;
            $close = $head =~ /^connection:\s*close/mi
                || $head =~ m{^HTTP/1\.0};
        }
        if (defined $status && $status > 0 && !$eof) {
            my $body = length($buf) - $head_end;
            return { status => $status, whole => 1, close => $close,
                bytes => length $buf }
                if (defined $need && $body >= $need)
                || ($chunked && $buf =~ /\r\n0\r\n\r\n\z/);
        }
        my $left = $until - time;
        return { status => $status // 0, timeout => 1, bytes => length $buf }
            if $left <= 0;
        next unless $sel->can_read($left);
        my $n = sysread $s, $buf, 65536, length $buf;
        next if !defined $n && ($! == EAGAIN || $! == EINTR);
        if (!$n) {
            return { status => $status // 0, eof => 1, bytes => length $buf,
                whole => defined $status && !defined $need && !$chunked };
        }
    }
}

# a fresh HTTP/1.0 connection, one request
sub client_fresh {
    my ($inst) = @_;
    my $r = new_request($inst, 'fresh');
    h1_one($r, $PORTS{$inst}{http}, undef);
}

# connects, sends $r, reads its answer; hangs up at $hangup (time) if the
# answer has not come by then
sub h1_one {
    my ($r, $port, $hangup) = @_;
    my $s = h1_connect($port);
    $r->{start} = time;
    return record($r, 'error') unless $s && h1_send($s, $r, 0);
    my $until = $r->{start} + $r->{allowed};
    my $res = h1_read($s, defined $hangup && $hangup < $until
        ? $hangup : $until);
    h1_outcome($r, $res, $hangup);
    close $s;
}

sub h1_outcome {
    my ($r, $res, $hangup) = @_;
    $r->{status} = $res->{status} > 0 ? $res->{status} : 0;
    $r->{bytes} = $res->{bytes};
    if ($r->{status}) {
        record($r, 'answered');
    } elsif ($res->{timeout}) {
        record($r, defined $hangup && time < $r->{start} + $r->{allowed}
            ? 'client' : 'timeout');
    } else {
        record($r, 'closed');
    }
}

# a keepalive connection of 2 to 5 requests, one after the other; now and
# then the client hangs up in the middle of one
sub client_keepalive {
    my ($inst) = @_;
    my $s = h1_connect($PORTS{$inst}{http});
    my $n = 2 + int rnd(4);
    for my $k (1 .. $n) {
        my $r = new_request($inst, 'keepalive');
        $r->{reused} = $k > 1 ? 1 : 0;
        if (!$s) {
            $r->{start} = time;
            return record($r, 'error');
        }
        return record($r, 'closed') unless h1_send($s, $r, 1);
        my $until = $r->{start} + $r->{allowed};
        my $hangup = rnd(1) < 0.15
            ? $r->{start} + rnd($r->{allowed} - $MARGIN) : undef;
        my $res = h1_read($s, defined $hangup ? $hangup : $until);
        h1_outcome($r, $res, $hangup);
        last if !$res->{whole} || $res->{close};
        sleep rnd(0.1);
    }
    close $s if $s;
}

# sends the request and hangs up at once, before the lock: the worker
# reads a request whose client is gone
sub client_at_once {
    my ($inst) = @_;
    my $r = new_request($inst, 'at-once');
    my $s = h1_connect($PORTS{$inst}{http});
    $r->{start} = time;
    return record($r, 'error') unless $s && h1_send($s, $r, 0);
    sleep rnd(0.003) if rnd(1) < 0.5;
    close $s;
    record($r, 'client');
}

# hangs up at a random moment: while waiting, or while holding
sub client_hangup {
    my ($inst) = @_;
    my $r = new_request($inst, 'hangup');
    h1_one($r, $PORTS{$inst}{http},
        time + 0.01 + rnd($r->{allowed} - $MARGIN));
}

# two requests on one lock: the second hangs up the moment the first gets
# its answer, when the lock is handed to it
sub client_grant {
    my ($inst) = @_;
    my $lock = pick(qw(m s s kv sl s2 rw-w sw));
    my $first = new_request($inst, 'grant', $lock);
    $first->{uri} =~ s/sleep=\d+/sleep=150/;
    $first->{allowed} = $LOCK{$lock}{timeout} + 0.15 + $MARGIN;
    my $second = new_request(pick(@INST), 'grant', $lock);
    # the same value of a variable path
    if ($lock eq 'kv') {
        my ($v) = $first->{uri} =~ /&v=(v\d+)/;
        $second->{uri} =~ s/&v=v\d+/&v=$v/;
    }
    my $s1 = h1_connect($PORTS{$inst}{http});
    $first->{start} = time;
    return record($first, 'error') unless $s1 && h1_send($s1, $first, 0);
    sleep 0.02 + rnd(0.03);
    my $s2 = h1_connect($PORTS{ $second->{inst} }{http});
    $second->{start} = time;
    if (!$s2 || !h1_send($s2, $second, 0)) {
        record($second, 'error');
        $s2 = undef;
    }
    my $res = h1_read($s1, $first->{start} + $first->{allowed});
    h1_outcome($first, $res, undef);
    close $s1;
    return unless $s2;
    # the second may have had its answer meanwhile
    sleep rnd(0.002) if rnd(1) < 0.5;
    my $sel = IO::Select->new($s2);
    if ($sel->can_read(0)) {
        h1_outcome($second, h1_read($s2, $second->{start}
            + $second->{allowed}), undef);
    } else {
        record($second, 'client');
    }
    close $s2;
}

# HTTP/2: one connection, 2 to 6 streams opened a moment apart, some reset
# at a random moment, the connection closed with streams open now and then
sub client_h2 {
    my ($inst) = @_;
    my $pid = open2(my $ev, my $cmd, $ZkLock::Test::PYTHON,
        "$ZkLock::Test::LIB_DIR/h2client.py", $PORTS{$inst}{h2});
    $cmd->autoflush(1);
    my $sel = IO::Select->new($ev);
    my $buf = '';
    # its first word, once its preface is sent
    while ($buf !~ /\n/ && $sel->can_read(5)) {
        sysread($ev, $buf, 4096, length $buf) or last;
    }
    $buf =~ s/^connected\n//;
    my $t0 = time;
    my (%st, @plan, $gone);
    for my $k (1 .. 2 + int rnd(5)) {
        my $r = new_request($inst, 'h2');
        my $at = $t0 + rnd(0.3);
        $st{"s$k"} = $r;
        push @plan, [ $at, get => "s$k" ];
        push @plan, [ $at + 0.01 + rnd($r->{allowed} - $MARGIN),
            reset => "s$k" ] if rnd(1) < 0.3;
    }
    push @plan, [ $t0 + rnd(2), 'close' ] if rnd(1) < 0.2;
    @plan = sort { $a->[0] <=> $b->[0] } @plan;
    my $open = sub { grep { defined $_->{start} && !defined $_->{outcome} }
        values %st };
    my $pending = sub { grep { !defined $_->{start} } values %st };
    while (!$gone && ($open->() || $pending->())) {
        my $now = time;
        while (@plan && $plan[0][0] <= $now) {
            my ($at, $what, $name) = @{ shift @plan };
            my $r = $name ? $st{$name} : undef;
            if ($what eq 'get') {
                $r->{start} = time;
                print {$cmd} "get $name $r->{uri}\n";
            } elsif ($what eq 'reset') {
                next if defined $r->{outcome};
                print {$cmd} "reset $name\n";
                record($r, 'client');
            } else {
                print {$cmd} "close\n";
                record($_, 'client') for $open->();
                $gone = 1;
                last;
            }
        }
        last if $gone;
        # a stream past its time: no answer; it is reset
        for my $r ($open->()) {
            next if time < $r->{start} + $r->{allowed};
            my ($name) = grep { $st{$_} == $r } keys %st;
            print {$cmd} "reset $name\n";
            record($r, 'timeout');
        }
        my $wait = @plan ? $plan[0][0] - time : 0.05;
        $wait = 0.05 if $wait > 0.05;
        $wait = 0 if $wait < 0;
        next unless $sel->can_read($wait);
        my $n = sysread $ev, $buf, 65536, length $buf;
        if (!$n) { $gone = 'closed'; last }
        while ($buf =~ s/^(.*)\n//) {
            my $line = $1;
            my ($e, $name, $code) = split ' ', $line;
            my $r = defined $name ? $st{$name} : undef;
            if ($e eq 'status' && $r) {
                $r->{status} = $code;
            } elsif ($e eq 'done' && $r && !defined $r->{outcome}) {
                record($r, $r->{status} ? 'answered' : 'closed');
            } elsif ($e eq 'reset' && $r && !defined $r->{outcome}) {
                record($r, $r->{status} ? 'answered' : 'reset');
            } elsif ($e eq 'closed') {
                $gone = defined $name && $name eq 'goaway' ? 'goaway'
                    : 'closed';
            } elsif ($e eq 'error') {
                # the client's own failure, shown with the streams it left
                $gone = 'closed';
                $_->{h2error} = $line =~ s/^error //r for $open->();
            }
        }
    }
    # streams open when the server went away; those never sent are not
    # requests
    record($_, $_->{status} ? 'answered' : $gone) for $open->();
    close $cmd;
    close $ev;
    wait_pid($pid, 5);
}

sub wait_pid {
    my ($pid, $secs) = @_;
    my $until = time + $secs;
    while (waitpid($pid, WNOHANG) == 0) {
        if (time > $until) { kill 'KILL', $pid; waitpid $pid, 0; last }
        sleep 0.01;
    }
}

# a connection to a stream server, an HTTP/1.0 request through it; hung up
# at a random moment now and then
sub client_stream {
    my ($inst) = @_;
    my $r = new_request($inst, 'stream', 'st');
    my $s = h1_connect($PORTS{$inst}{stream});
    $r->{start} = time;
    return record($r, 'error') unless $s;
    $r->{lport} = $s->sockport;
    syswrite $s, "GET $r->{uri} HTTP/1.0\r\nHost: soak\r\n\r\n";
    my $until = $r->{start} + $r->{allowed};
    my $hangup = rnd(1) < 0.25
        ? $r->{start} + rnd($r->{allowed} - $MARGIN) : undef;
    my $res = h1_read($s, defined $hangup ? $hangup : $until, 1);
    $r->{status} = $res->{status} > 0 ? $res->{status} : 0;
    $r->{bytes} = $res->{bytes};
    close $s;
    # closed by the server, with or without a response: an answer (a
    # refused connection is closed without a byte); hung up by the client
    # before its deadline, with or without a status read (the server may
    # have answered a moment before the hang-up and not closed yet): the
    # client's doing, not a late answer
    record($r, $res->{eof} ? 'answered' : defined $hangup
        && time < $until ? 'client' : 'timeout');
}

###############################################################################
# Reading the results

sub read_jsonl {
    my ($file) = @_;
    my $json = JSON::PP->new;
    return map { $json->decode($_) } grep { length }
        split /\n/, slurp($file);
}

# request id => final $zk_lock_status, from the access logs
sub read_access_logs {
    my %final;
    for my $inst (@INST) {
        for (split /\n/, slurp($NG{$inst}->prefix . '/logs/soak.log')) {
            my ($id, $status, $zk, $pid) = split ' ';
            next unless defined $pid && $id ne '-';
            $final{$id} = $zk;
            $final{"$id status"} = $status;
        }
    }
    return %final;
}

sub read_stream_logs {
    my %log;
    for my $inst (qw(A C)) {
        for (split /\n/, slurp($NG{$inst}->prefix . '/logs/stream.log')) {
            my ($port, $status, $zk, $pid, $msec) = split ' ';
            push @{ $log{"$inst $port"} }, { status => $status, zk => $zk,
                pid => $pid, t => $msec };
        }
    }
    return %log;
}

# a stream connection's final $zk_lock_status: its client port's line
# that ended nearest to its end
sub stream_final {
    my ($r) = @_;
    my @l = @{ $STREAM_LOG{"$r->{inst} " . ($r->{lport} // '')} // [] };
    my ($best) = sort { abs($a->{t} - $r->{end}) <=> abs($b->{t} - $r->{end}) }
        grep { abs($_->{t} - $r->{end}) < 10 } @l;
    return $best ? $best->{zk} : undef;
}

sub summary {
    my (%how, %out, %status, %lock);
    for my $r (@REQ) {
        $how{ $r->{how} }++;
        $out{ $r->{outcome} }++;
        $status{ $r->{status} }++;
        $lock{ $r->{lock} }++;
    }
    my $fmt = sub { my ($h) = @_;
        join ', ', map { "$_ $h->{$_}" } sort keys %$h };
    my %ev;
    $ev{ $_->{what} }++ for @EVENTS;
    note sprintf "%d requests in %.0f s\n  behaviours: %s\n  outcomes: %s\n"
        . "  statuses: %s\n  locks: %s\n  faults: %s", scalar @REQ,
        $SECONDS, $fmt->(\%how), $fmt->(\%out), $fmt->(\%status),
        $fmt->(\%lock), $fmt->(\%ev);
}

###############################################################################
# 4. every request answered in time, or closed where the README says so

sub check_answered {
    my (@late, @closed, @odd, %excused);
    for my $r (@REQ) {
        my $o = $r->{outcome};
        if ($o eq 'answered') {
            push @late, $r if $r->{end} - $r->{start} > $r->{allowed};
            push @odd, $r if $r->{lock} ne 'st'
                && $r->{status} != 200 && $r->{status} != 503;
        } elsif ($o eq 'timeout') {
            push @late, $r;
        } elsif ($o ne 'client') {
            my $why = excused($r);
            $why ? $excused{$why}++ : push @closed, $r;
        }
    }
    note 'closed by nginx without an answer, as the README says: '
        . join ', ', map { "$excused{$_} $_" } sort keys %excused
        if %excused;
    my $show = sub { join "\n", map { sprintf '  %s %s %s %s %+.2f..%+.2f '
        . '%s status %s final %s%s%s', $_->{id}, $_->{inst}, $_->{how},
        $_->{uri}, $_->{start} - $t_start, $_->{end} - $t_start,
        $_->{outcome}, $_->{status}, $_->{final} // '(not logged)',
        $_->{reused} ? ' (reused connection)' : '',
        $_->{h2error} ? " (h2client.py: $_->{h2error})" : '' }
        @_[ 0 .. ($#_ < 9 ? $#_ : 9) ] };
    ok(!@late, 'every request answered within its timeout + upstream time '
        . "+ $MARGIN s (" . scalar(@REQ) . ' requests)')
        or diag scalar(@late) . " late or never answered:\n"
            . $show->(@late);
    ok(!@closed, 'no connection or stream closed without an answer but '
        . 'where the README says so')
        or diag scalar(@closed) . " closed:\n" . $show->(@closed);
    ok(!@odd, 'every status 200 or 503')
        or diag scalar(@odd) . " others:\n" . $show->(@odd);
}

# closed by nginx without an answer, as the README says it may be: why
# (false if not)
sub excused {
    my ($r) = @_;
    my $l = $r->{lock} eq 'st' ? \%ST : $LOCK{ $r->{lock} };
    my $final = $r->{final} // '';
    # zk_lock_lost abort, a revoked holder: cut off
    return 'revoked' if $final eq 'REVOKED';
    return 'lost (abort)' if $final eq 'LOST' && $l->{lost} eq 'abort';
    for my $e (grep { ($_->{inst} // '') eq $r->{inst} } @EVENTS) {
        # its worker killed: it went unlogged
        return 'worker killed' if $e->{what} eq 'kill'
            && !defined $r->{final}
            && $e->{t} >= $r->{start} - 0.1 && $e->{t} <= $r->{end} + 0.5;
        # a reload closes idle keepalive connections, and sends GOAWAY
        # on HTTP/2 ones (on which h2client.py closes the connection)
        return 'reload' if $e->{what} eq 'reload'
            && $r->{outcome} ne 'reset'
            && ($r->{reused} || $r->{outcome} eq 'goaway')
            && !$r->{bytes} && $e->{t} >= $r->{start} - 2
            && $e->{t} <= $r->{end} + 0.5;
    }
    return '';
}

###############################################################################
# 3. the bounds, per lock

sub check_bounds {
    my ($calls) = @_;
    my @revokes = map { $_->{t} } grep { $_->{what} eq 'revoke' } @EVENTS;
    my @kills = grep { $_->{what} eq 'kill' } @EVENTS;
    my %by;
    for my $key (keys %$calls) {
        for my $raw (@{ $calls->{$key} }) {
            my ($start, $end, $w, $bid, $hung) = @$raw;
            my ($id, $status, $pid) = split /\./, $bid, -1;
            my $r = $REQ{$id} // {};
            my $c = { key => $key, start => $start, end => $end // time,
                w => $w, id => $id, status => $status // '', pid => $pid,
                hung => $hung, lock => $r->{lock} // '?',
                inst => $r->{inst} // '?', final => $r->{final} };
            # the moment the request let go, if before the backend ended:
            # its client closed, its worker was killed, it was revoked
            my @ends = ($c->{end});
            push @ends, $r->{end} if ($r->{outcome} // '') eq 'client';
            push @ends, map { $_->{t} } grep { defined $pid
                && ($_->{pid} // 0) == $pid } @kills;
            push @ends, grep { $_ >= $start } @revokes
                if ($c->{final} // '') eq 'REVOKED';
            my ($first) = sort { $a <=> $b } @ends;
            $c->{cut} = $first < $c->{end};
            $c->{end} = $first < $start ? $start : $first;
            my $name = $key =~ /^kv-/ ? 'kv' : $key;
            push @{ $by{$name}{$key} }, $c;
        }
    }
    for my $l (grep { $_->{kind} ne 'none' && $_->{name} !~ /-w\z/ } @LOCKS,
        \%ST)
    {
        my $name = $l->{key} =~ /^kv-/ ? 'kv' : $l->{key};
        my ($n, $max, $bad, $then) = (0, 0, '', []);
        my %aside;
        # per backend key: a value of kv is a lock of its own
        for my $key (sort keys %{ $by{$name} // {} }) {
            my @all = @{ $by{$name}{$key} };
            $n += @all;
            for (@all) {
                $aside{ $_->{status} }++
                    if $_->{status} =~ /^(?:BYPASSED|LOCAL)$/;
                $aside{LOST}++ if ($_->{final} // '') eq 'LOST'
                    && $l->{lost} eq 'finish';
                $aside{'ended early'}++ if $_->{cut};
            }
            for my $part (parts($l, \@all)) {
                my ($desc, $cap, $kind, $calls) = @$part;
                my ($peak, $at, $in) = peak_in_flight($calls,
                    $kind eq 'rw' ? sub { $_[0]{lock} =~ /-w\z/ } : undef);
                $max = $peak if $desc eq 'through ZooKeeper' && $peak > $max;
                next if $peak <= $cap || length $bad;
                $bad = sprintf '%s, %s: %d in flight, at most %d, at %+.3f',
                    $key, $desc, $peak, $cap, $at - $t_start;
                $then = $in;
            }
        }
        my $desc = $l->{kind} eq 'rw' ? 'a writer alone'
            : "at most $l->{cap}";
        $desc .= ', BYPASSED aside' if $l->{fail} && $l->{fail} eq 'open';
        $desc .= ', LOCAL at most 1 per instance' if $l->{local};
        $desc .= ', LOST at most the cap among themselves'
            if $l->{lost} eq 'finish';
        note "lock $name: " . join(', ', map { "$aside{$_} $_" }
            sort keys %aside) if %aside;
        ok(!length $bad, "lock $name: in flight at the backend $desc "
            . "(max $max, $n calls)")
            or diag "$bad:\n" . join "\n", map { sprintf '  %s %s %s w=%s '
                . '%s final=%s pid=%s %+.3f..%+.3f%s', $_->{id}, $_->{inst},
                $_->{lock}, $_->{w}, $_->{status}, $_->{final} // '-',
                $_->{pid} // '-', $_->{start} - $t_start,
                $_->{end} - $t_start, $_->{hung} ? ' (hung up)' : '' } @$then;
    }
}

# the parts of a lock's calls that the README bounds each on its own:
# [ description, bound, kind, calls ]
sub parts {
    my ($l, $calls) = @_;
    my $kind = $l->{kind} eq 'mutex' ? 'sem' : $l->{kind};
    my $cap = $l->{kind} eq 'rw' ? 1 : $l->{cap};
    my @c = grep { $_->{status} ne 'BYPASSED' } @$calls;
    my @local = grep { $_->{status} eq 'LOCAL' } @c;
    @c = grep { $_->{status} ne 'LOCAL' } @c;
    my @lost = $l->{lost} eq 'finish'
        ? grep { ($_->{final} // '') eq 'LOST' } @c : ();
    my %lost = map { $_ => 1 } @lost;
    @c = grep { !$lost{$_} } @c;
    my @parts = ([ 'through ZooKeeper', $cap, $kind, \@c ]);
    push @parts, [ 'LOST holders', $cap, $kind, \@lost ] if @lost;
    for my $inst (@INST) {
        my @mine = grep { $_->{inst} eq $inst } @local;
        push @parts, [ "LOCAL in $inst", 1, 'sem', \@mine ] if @mine;
    }
    return @parts;
}

