package ZkLock::Test;

=head1 NAME

ZkLock::Test - harness for the ngx_http_zk_lock_module tests (core Perl only)

=head1 SYNOPSIS

    use Test::More;
    use lib 't/lib';
    use ZkLock::Test;

    require_prereqs(qw(nginx zookeeper kazoo module));   # skip/bail early
    my $zk = zk_start();
    my $be = backend_start();
    my $ng = nginx_start(<<'EOF', zk => $zk->hosts, backend => $be);
        server {
            listen 127.0.0.1:%%PORT%%;
            location / { proxy_pass http://%%BACKEND%%; }
        }
    EOF
    is(http_get($ng->port, '/x?sleep=10')->{status}, 200);
    done_testing;      # END block stops every process started here

=head1 API (all functions exported by default)

Processes. Every process is started in its own process group, recorded by
pid, and killed (TERM to the group, KILL after 5 s) by an END block and on
SIGINT/SIGTERM. Temp dirs are removed unless ZK_TEST_KEEP=1 (then their
paths are printed with diag).

=over

=item require_prereqs(@what)

@what among nginx, java, zookeeper, python, kazoo, module, stream (nginx's
stream module, built in or loadable, and ours). A missing one
means skip_all (BAIL_OUT when CI=true). Call it before the first test.
The start functions check their own needs too.

=item module_path() -> $so

Path of the module .so: $ENV{ZK_LOCK_MODULE} or built once per process by
t/lib/build.sh (BAIL_OUT with the build errors on failure). An empty
ZK_LOCK_MODULE (set, but empty) means the nginx binary has the module built
in (--add-module): module_path() returns '' and no load_module is written.

=item zk_start(%opt) -> $zk

Standalone ZooKeeper on 127.0.0.1:<free port>, tickTime=500 (minimum
session timeout 1 s), maxSessionTimeout=60000. Waits (opt timeout, 60 s)
for ruok/imok, srvr "Mode:" and a kazoo connection; dies with the log
tail otherwise. Options: tick_time, max_session_timeout, timeout, cfg
(hashref of extra zoo.cfg lines), jvm (arrayref of extra java flags, say
"-Dznode.container.checkIntervalMs=200").
Methods: port, hosts ("127.0.0.1:PORT"), pid, dir, stop (TERM+wait),
kill (SIGKILL+wait: crash), start, restart (same port and dataDir),
pause / resume (SIGSTOP / SIGCONT), srvr (4lw text), mode
("standalone"/"leader"/"follower"/undef), log (server log text).

=item zk_ensemble_start($n, %opt) -> $ens

$n-node quorum (QuorumPeerMain) on loopback. Methods: hosts (comma list),
nodes (list), node($id) with $id = myid 1..$n (same methods as $zk; start
takes wait => 0 when no quorum can form), leader_index (myid of the node
whose srvr says "Mode: leader", undef if none), wait_quorum($timeout),
stop.

=item backend_start(%opt) -> $be

t/lib/backend.py on a free port. Methods: port, addr ("127.0.0.1:PORT"),
pid, stats($key) -> {inflight, max, count, order => [...]}, stats() ->
{ key => {...}, ... }, calls -> { key => [[start, end, w, id, hungup],
...] } (the calls made with rec=1, see t/lib/backend.py), reset, stop.

=item nginx_start($http_body, %opt) -> $ng

Writes <prefix>/nginx.conf (load_module unless no_module => 1, daemon off,
master_process on, logs and *_temp_path inside the prefix) and starts
/usr/sbin/nginx (or $ENV{ZK_LOCK_NGINX}, or $ENV{TEST_NGINX_BINARY}) in the
foreground. Placeholders
in $http_body and opt main_conf: %%ZK%% (opt zk: hosts string or $zk),
%%BACKEND%% (opt backend: $be, a port or "host:port"), %%PORT%% (a free
port, or opt port), %%PREFIX%%. Waits (opt timeout, 10 s) until the port
accepts connections and all workers exist; dies with error.log otherwise.
Options: workers (2), log_level ('info'), main_conf (text for the main
context), connections (worker_connections, 1024; more also raises
worker_rlimit_nofile), no_module, port, timeout, pid_namespace (the master
is PID 1 of a PID namespace of its own, as in a container: unshare(1)
starts it; pid is still the master's).
Note: "ready" means the workers exist; the module's own ZooKeeper
session may still be connecting - poll with wait_for if it matters.
Methods: port, pid (master), prefix, worker_pids (current workers, not
those "shutting down"), child_pids (all children of the master),
broker_pairs (the unix socket pairs open between its workers: kept
leases lent, zk_sessions asks),
error_log (text), access_log (text), conf (text), get($uri, %o)
(= http_get on its port), reload([$new_http_body]) (HUP; returns true
once only new workers remain - old ones exited or are "shutting down" -
false after 10 s, e.g. when the new conf is invalid), stop (QUIT,
10 s, then TERM/KILL), start (again, same prefix and port),
expect_log(qr/.../) (lines at alert, crit or emerg, or "exited on signal",
that the test causes on purpose).
Every nginx started is checked when the test calls done_testing: one test
per instance asserts that no worker exited on a signal and nothing was
logged at alert, crit or emerg, other than the lines it expects. Tests
need not check that themselves.

=item nginx_test_conf($http_body, %opt) -> ($exit_code, $output)

"nginx -t" on the same wrapping (dummy values for omitted zk/backend).

=item http_get($port, $uri, %opt) -> {status, body, headers, time, start, end, error}

HTTP/1.0 + Connection: close to 127.0.0.1:$port ($port may be
"host:port"). status is 0 on connection error / timeout (error says why).
headers: lowercase names. Options: timeout (30 s), method, headers
(hashref), body, http_version ('1.0' or '1.1').

=item http_parallel(\@requests, %opt) -> [ result, ... ]

Each request is [$port, $uri] or [$port, $uri, \%per_request_opt]. All
run concurrently in this process (non-blocking sockets + IO::Select);
results in request order, shaped like http_get's. Option stagger => $s
starts request $i at $i * $s seconds (connect + send), for FIFO tests;
timeout applies per request from its own start.

=item http_abort_after($port, $uri, $seconds) -> $pid

Background (forked) client: connects, sends the request, never reads, and
closes the socket $seconds later, then exits. Returns its pid; use
proc_wait($pid) to wait for the abort to have happened.

=item ZooKeeper inspection (independent kazoo client, t/lib/zkctl.py)

$hosts may be a string or any object with a hosts method.
zk_children($hosts, $path) -> @names (sorted; () if no node);
zk_tree($hosts, $path) -> @paths (all descendants, sorted);
zk_ephemerals($hosts, $path) -> @paths (descendants with ephemeralOwner);
zk_get($hosts, $path) -> {data, ephemeral_owner, version, num_children,
ctime, mtime, czxid} or undef if absent;
zk_create($hosts, $path, ephemeral => 1, sequence => 1, data => $d,
makepath => 1) -> created path (an ephemeral dies with zkctl's session
at once: use zk_hold for a lasting foreign holder);
zk_delete($hosts, $path, recursive => 1) -> 1 deleted / 0 absent;
zk_churn($hosts, $path, $n, $pause) -> 2n changes of $path's children: n
participants in Curator's form, each created then deleted, $pause s apart;
zk_wait_gone($hosts, $path, $timeout) -> bool;
zk_hold($hosts, $parent, name => $n, seconds => 300, session_timeout => 10,
data => $d) -> $holder (name: the prefix of its sequential node, by default
a Curator mutex's, curator_name()) with node, session_id, pid, release (close the
session: node gone when it returns; waits for a reconnect first if the
holder is disconnected, e.g. right after $zk->restart), kill (SIGKILL: node stays until the
session expires on the server);
zk_4lw($port, $cmd, $timeout) -> reply text or undef;
zk_zxid($port) -> the server's last zxid (moves with every write), 0 if
it does not answer;
http2_listen() -> ($listen_suffix, $server_directive): cleartext HTTP/2
for the nginx under test: (" http2", "") before 1.25, ("", "http2 on;")
since; use as "listen 127.0.0.1:%%PORT%%$suffix; $directive";
h2_client($port) -> $h2: t/lib/h2client.py on one HTTP/2 connection,
commanded line by line. Methods: get($name, $path) (a stream), reset($name)
(RST_STREAM CANCEL), close (the TCP connection, at once), events (its
event log: "status NAME CODE", "done NAME", "reset NAME CODE", "closed"),
wait($regex, $timeout) -> bool (the event log matches), stop;
h3_browser($url, $spki) -> $h3: headless Chromium (prerequisite chromium)
on QUIC, t/lib/h3_browser.py: loads $url, a page of the nginx under test
defining get/reset/drain in JavaScript (see that script; t/http3.t has
one), accepting the certificate whose public key hashes to $spki; the
same methods as h2_client's (reset aborts the fetch: Chromium cancels
its stream), events "connected PROTO", "status NAME CODE", "done NAME
PROTO", "aborted NAME", "error TEXT";
curator_name($kind) -> "_c_<random uuid>-$kind", the prefix of a Curator
participant's node ($kind "lock-" by default; "__READ__", "__WRIT__" for a
rwlock, "lease-" for a semaphore v2 lease): the module reads sequence
numbers only from names of this form.

=item Helpers

wait_for(sub {...}, $timeout = 10, $interval = 0.05) -> the sub's first
true value, or false on timeout. free_port() -> port. proc_wait($pid,
$timeout = 10) -> exit status (undef on timeout). pid_alive($pid) -> bool
(zombies count as dead). started_pids() -> every pid this process started.
tempdir($tag) -> new temp dir. slurp($file) -> its text ('' if missing).
peak_in_flight(\@calls, $writer) -> (most, when, [calls then]): the most
calls ({start, end, w}) in flight at once, weights added up, or with a
writer predicate (a read/write lock) all beside a writer, else 1.

=item Processes of a test's own

Every process is killed, by its process group, when the test exits.
run_cmd(\@cmd, timeout => 60) -> {rc, out, err, timed_out}: runs to
completion. spawn(name => $name, cmd => \@cmd, log => $file, stdin =>
$handle) -> $pid: runs in the background. register_pid($pid, $name): a
process the test forked itself, to be reaped and killed the same way.

=item Files

t/lib/ZkLock/Test.pm holds the functions above and the process registry;
ZkLock/Test/Zk.pm the ZooKeeper servers, their inspection and foreign
holders; ZkLock/Test/Nginx.pm the nginx instances and the HTTP/2 client;
ZkLock/Test/Backend.pm the backend. "use ZkLock::Test" loads them all.

=back

=cut

use strict;
use warnings;

use Exporter 'import';
use Carp qw(croak);
# croak reports the test file's line, not the harness's.
our @CARP_NOT = qw(ZkLock::Test ZkLock::Test::ZkNode ZkLock::Test::Ensemble
    ZkLock::Test::Holder ZkLock::Test::Backend ZkLock::Test::Nginx);
use Errno qw(EINPROGRESS EAGAIN EWOULDBLOCK EINTR);
use Fcntl qw(F_GETFL F_SETFL O_NONBLOCK LOCK_EX);
use File::Basename qw(dirname);
use File::Spec;
use File::Temp ();
use IO::Select;
use IO::Socket::INET;
use JSON::PP ();
use POSIX qw(WNOHANG setpgid _exit);
use Socket qw(AF_INET SOCK_STREAM SOL_SOCKET SO_ERROR inet_aton
    pack_sockaddr_in);
use Test::More ();
use Test2::API qw(test2_add_callback_testing_done);
use Time::HiRes qw(time sleep);

our @EXPORT = qw(
    require_prereqs module_path
    zk_start zk_ensemble_start backend_start nginx_start nginx_test_conf
    http_get http_parallel http_parallel_bg http_parallel_collect
    http_abort_after
    zk_children zk_tree zk_ephemerals zk_get zk_create zk_set zk_delete
    zk_wait_gone zk_hold zk_4lw zk_zxid zk_churn curator_name
    http2_listen h2_client h3_browser
    wait_for free_port proc_wait pid_alive started_pids tempdir
    sessions_connected nginx_start_refused no_ephemerals cpu_seconds
    peak_in_flight
    run_cmd spawn register_pid slurp
);

# ---------------------------------------------------------------- settings

# t/lib, computed from this file so the checkout can live anywhere.
our $LIB_DIR = File::Spec->rel2abs(dirname(dirname(__FILE__)));
our $PYTHON  = '/usr/bin/python3';    # the one with kazoo, not pyenv's
our $NGINX   = $ENV{ZK_LOCK_NGINX} || $ENV{TEST_NGINX_BINARY}
    || '/usr/sbin/nginx';
our $ZK_JAR  = '/usr/share/java/zookeeper.jar';
our $SLF4J_SIMPLE = '/usr/share/java/slf4j-simple.jar';    # log binding
our $KEEP    = $ENV{ZK_TEST_KEEP} ? 1 : 0;

# Every nginx a test started is checked when the test calls done_testing,
# as nginx-tests checks each instance's log at teardown: no worker exited
# on a signal or with an error code, nothing logged at alert, crit or
# emerg, but for the lines
# the test said it expects ($ng->expect_log(qr/.../)).
our @NGINX_STARTED;

# only in a test (*.t): the callback makes any script count as one,
# and the demo and the benchmarks are not
test2_add_callback_testing_done(sub {
    for my $ng (@NGINX_STARTED) {
        # AddressSanitizer ends a worker with code 1, at notice
        my @bad = grep { /\[(?:alert|crit|emerg)\]|exited on signal
                           |exited\ with\ code\ [1-9]/x
                         && !$ng->expected($_) } split /\n/, $ng->error_log;
        Test::More::ok(!@bad, "nginx on port $ng->{port}: no worker "
            . 'crashed, nothing logged at alert, crit or emerg')
            or Test::More::diag(join "\n", @bad);
    }
}) if $0 =~ /\.t\z/;

our $JSON    = JSON::PP->new->utf8->canonical;

# ---------------------------------------------------------- process registry

my $OWNER = $$;     # forked helpers must not run the cleanup
my %PROCS;          # pid => { name => ..., status => exit status once reaped }
my @STARTED;        # every pid ever started, for the "all gone" checks

sub register_pid {
    my ($pid, $name) = @_;
    $PROCS{$pid} = { name => $name };
    push @STARTED, $pid;
    return $pid;
}

# Run $cmd (arrayref) as a child in its own process group, stdout+stderr
# appended to $opt{log} (default /dev/null), stdin from $opt{stdin} (a
# handle) or /dev/null. Returns the pid.
sub spawn {
    my (%opt) = @_;
    my @cmd = @{ $opt{cmd} };
    my $pid = fork;
    croak "fork: $!" unless defined $pid;
    if (!$pid) {
        # Own group: cleanup can kill a whole tree (nginx master+workers)
        # even after the leader died.
        setpgid(0, 0);
        $SIG{$_} = 'DEFAULT' for qw(INT TERM PIPE CHLD);
        if ($opt{stdin}) { open STDIN, '<&', $opt{stdin} or _exit(126) }
        else             { open STDIN, '<', '/dev/null' or _exit(126) }
        my $log = $opt{log} // '/dev/null';
        open STDOUT, '>>', $log or _exit(126);
        open STDERR, '>&', \*STDOUT or _exit(126);
        exec { $cmd[0] } @cmd or print STDERR "exec $cmd[0]: $!\n";
        _exit(127);
    }
    setpgid($pid, $pid);    # also from the parent: no race with kill -pgid
    return register_pid($pid, $opt{name} // $cmd[0]);
}

# Non-blocking reap. True while $pid (our child) is running.
sub _running {
    my ($pid) = @_;
    my $p = $PROCS{$pid} or return pid_alive($pid);
    return 0 if defined $p->{status};
    my $r = waitpid($pid, WNOHANG);
    return 1 if $r == 0;
    $p->{status} = $r == $pid ? $? : -1;
    return 0;
}

sub proc_wait {
    my ($pid, $timeout) = @_;
    $timeout //= 10;
    return undef unless wait_for(sub { !_running($pid) }, $timeout, 0.02);
    my $p = delete $PROCS{$pid};
    return $p ? $p->{status} : 0;
}

# Signal $pid, wait up to $grace seconds, then SIGKILL its whole group.
# Returns the exit status.
sub _terminate {
    my ($pid, $sig, $grace) = @_;
    return 0 unless $PROCS{$pid};
    kill $sig // 'TERM', $pid if _running($pid);
    my $status = proc_wait($pid, $grace // 5);
    if (!defined $status) {
        kill 'KILL', $pid;
        $status = proc_wait($pid, 5);
    }
    # Leftovers of the group (orphaned nginx workers after a master KILL).
    kill '-KILL', $pid if _live_groups()->{$pid};
    return $status;
}

sub pid_alive {
    my ($pid) = @_;
    return 0 unless kill 0, $pid;
    open my $fh, '<', "/proc/$pid/stat" or return 0;
    my $stat = <$fh> // '';
    return $stat =~ /^\d+ \(.*\) (\S)/s && $1 ne 'Z' ? 1 : 0;
}

# user+system CPU seconds of the processes @pids (those gone count 0)
sub cpu_seconds {
    my $ticks = 0;
    for my $pid (@_) {
        open my $fh, '<', "/proc/$pid/stat" or next;
        my @f = split ' ', (<$fh> =~ s/^.*\) //sr);
        $ticks += $f[11] + $f[12];    # utime, stime
    }
    return $ticks / (POSIX::sysconf(POSIX::_SC_CLK_TCK()) || 100);
}

sub started_pids { return @STARTED }

# Process group ids that still have members (from /proc).
sub _live_groups {
    my %g;
    opendir my $d, '/proc' or return {};
    for my $pid (grep { /^\d+$/ } readdir $d) {
        open my $fh, '<', "/proc/$pid/stat" or next;
        my $stat = <$fh> // next;
        # comm may contain spaces and ')': anchor on the last ')'.
        $g{$2}++ if $stat =~ /^\d+ \(.*\) (\S) \d+ (\d+)/s && $1 ne 'Z';
    }
    return \%g;
}

# Kill everything we started that is still around, in parallel: TERM to
# each group, 5 s grace, then KILL. Groups whose leader already died are
# included: nginx workers outlive a killed master.
sub _cleanup {
    return unless $$ == $OWNER;
    my $alive = sub {
        my $g = _live_groups();
        return grep { _running($_) || $g->{$_} } keys %PROCS;
    };
    my @pids = $alive->();
    for my $pid (@pids) {
        kill '-TERM', $pid;
        kill '-CONT', $pid;    # a paused ZooKeeper cannot die of TERM
    }
    wait_for(sub { !$alive->() }, 5, 0.05) if @pids;
    for my $pid ($alive->()) {
        kill '-KILL', $pid;
        kill 'KILL', $pid;
    }
    proc_wait($_, 5) for keys %PROCS;
    %PROCS = ();
}

END {
    local $?;    # waitpid in cleanup must not change the test's exit code
    _cleanup();
}

for my $sig (qw(INT TERM)) {
    $SIG{$sig} = sub {
        _cleanup();
        exit($sig eq 'INT' ? 130 : 143);    # END blocks remove temp dirs
    };
}

# Run a command to completion: { rc, out, err }. Killed after $timeout s.
sub run_cmd {
    my ($cmd, %opt) = @_;
    my $out = File::Temp->new;
    my $err = File::Temp->new;
    my $pid = fork;
    croak "fork: $!" unless defined $pid;
    if (!$pid) {
        setpgid(0, 0);
        $SIG{$_} = 'DEFAULT' for qw(INT TERM PIPE CHLD);
        open STDIN, '<', '/dev/null';
        open STDOUT, '>&', $out or _exit(126);
        open STDERR, '>&', $err or _exit(126);
        exec { $cmd->[0] } @$cmd or print STDERR "exec $cmd->[0]: $!\n";
        _exit(127);
    }
    register_pid($pid, $cmd->[0]);
    my $status = proc_wait($pid, $opt{timeout} // 60);
    my $timed_out = !defined $status;
    $status = _terminate($pid, 'KILL', 1) if $timed_out;
    return {
        rc        => $timed_out ? -1 : ($status >> 8),
        timed_out => $timed_out,
        out       => slurp("$out"),
        err       => slurp("$err") . ($timed_out ? "(timed out)\n" : ''),
    };
}

# ----------------------------------------------------------- small helpers

sub slurp {
    my ($file) = @_;
    open my $fh, '<', $file or return '';
    local $/;
    return scalar <$fh> // '';
}

sub _spew {
    my ($file, $text) = @_;
    open my $fh, '>', $file or croak "write $file: $!";
    print {$fh} $text;
    close $fh or croak "close $file: $!";
}

sub _tail {
    my ($text, $n) = @_;
    my @l = split /\n/, $text // '';
    @l = @l[-$n .. -1] if @l > $n;
    return join("\n", @l) . "\n";
}

sub tempdir {
    my ($tag) = @_;
    my $dir = File::Temp::tempdir("zklock-" . ($tag // 'tmp') . "-XXXXXX",
        TMPDIR => 1, CLEANUP => !$KEEP);
    Test::More::diag("ZK_TEST_KEEP: keeping $dir") if $KEEP;
    return $dir;
}

my $MISC_DIR;    # logs of short-lived helpers (holders, abort clients)
sub _misc_dir { return $MISC_DIR //= tempdir('misc') }

sub wait_for {
    my ($cond, $timeout, $interval) = @_;
    my $deadline = time + ($timeout // 10);
    while (1) {
        my $v = $cond->();
        return $v if $v;
        return 0 if time >= $deadline;
        sleep($interval // 0.05);
    }
}

# A free loopback port. bind(0) lets the kernel pick one; we close it again,
# so a server may still lose it to someone else - callers retry on EADDRINUSE.
my %HANDED_OUT;
sub free_port {
    for (1 .. 50) {
        my $s = IO::Socket::INET->new(LocalAddr => '127.0.0.1',
            LocalPort => 0, Proto => 'tcp', Listen => 1)
            or croak "bind port 0: $!";
        my $port = $s->sockport;
        close $s;
        next if $HANDED_OUT{$port}++;
        return $port;
    }
    croak "no free port found";
}

sub _hosts_of {
    my ($h) = @_;
    croak "zk hosts missing" unless defined $h;
    return ref $h && eval { $h->can('hosts') } ? $h->hosts : $h;
}

# -------------------------------------------------------------- prereqs

sub _find_in_path {
    my ($prog) = @_;
    for my $d (split /:/, $ENV{PATH} // '') {
        return "$d/$prog" if -x "$d/$prog";
    }
    return undef;
}

my %MISSING_CACHE;
# Reason why $what is unusable, or undef when it is fine.
sub _missing {
    my ($what) = @_;
    my $why = $MISSING_CACHE{$what} //= do {
        my $r = '';
        if ($what eq 'nginx') {
            $r = "nginx binary $NGINX not found" unless -x $NGINX;
        } elsif ($what eq 'java') {
            $r = "java not found in PATH" unless _find_in_path('java');
        } elsif ($what eq 'zookeeper') {
            $r = _missing('java') || (-r $ZK_JAR ? '' : "$ZK_JAR not found");
        } elsif ($what eq 'python') {
            $r = "$PYTHON not found" unless -x $PYTHON;
        } elsif ($what eq 'kazoo') {
            $r = _missing('python')
                || (run_cmd([$PYTHON, '-c', 'import kazoo.client'],
                        timeout => 30)->{rc} == 0
                    ? '' : "python module kazoo missing for $PYTHON");
        } elsif ($what eq 'chromium') {
            # a real browser for the HTML pages: t/fleet-view.t
            $r = join '; ', grep { length }
                (_find_in_path('chromium') ? '' : 'chromium not found'),
                (_find_in_path('chromedriver')
                    ? '' : 'chromedriver not found'),
                (_missing('python') || run_cmd([$PYTHON, '-c',
                        'import selenium.webdriver'], timeout => 30)->{rc} == 0
                    ? '' : "python module selenium missing for $PYTHON");
            $r .= ' (apt-get install chromium chromium-driver '
                . 'python3-selenium)' if length $r;
        } elsif ($what eq 'stream') {
            # nginx's stream, built in or a module (libnginx-mod-stream),
            # and ours built beside the HTTP module (or built in)
            my $v = run_cmd([$NGINX, '-V'], timeout => 120);
            my $so = module_path();
            $so =~ s/ngx_http_zk_lock_module\.so$/ngx_stream_zk_lock_module.so/;
            $r = "$NGINX has no stream module (apt-get install "
                . "libnginx-mod-stream)"
                unless "$v->{out}$v->{err}" =~ /--with-stream(?!=dynamic)/
                    || stream_core_path() ne '';
            $r ||= "$so not built" if $so ne '' && !-f $so;
        } elsif ($what eq 'module') {
            module_path();    # BAILs out itself on failure
        } else {
            croak "unknown prerequisite '$what'";
        }
        $r;
    };
    return length $why ? $why : undef;
}

sub require_prereqs {
    my @why = grep { defined } map { _missing($_) } @_;
    return 1 unless @why;
    my $why = join('; ', @why);
    # CI must never go green by skipping everything.
    Test::More::BAIL_OUT("missing prerequisite: $why") if _ci();
    my $tb = Test::More->builder;
    if (!$tb->has_plan && $tb->current_test == 0) {
        Test::More::plan(skip_all => $why);
    }
    croak "missing prerequisite: $why";
}

sub _ci { return ($ENV{CI} // '') =~ /^(1|true|yes)$/i }

# ------------------------------------------------------------- module build

my $MODULE;
# nginx's stream module, for a binary that has it as a dynamic module
# (Debian's libnginx-mod-stream): $ENV{ZK_LOCK_STREAM_CORE}, or read off
# "nginx -V" of the binary under test ('' when stream is built in)
my $STREAM_CORE;
sub stream_core_path {
    return $ENV{ZK_LOCK_STREAM_CORE} if defined $ENV{ZK_LOCK_STREAM_CORE};
    return $STREAM_CORE if defined $STREAM_CORE;
    my $v = run_cmd([$NGINX, '-V'], timeout => 120);
    my $text = "$v->{out}$v->{err}";
    return $STREAM_CORE = '' unless $text =~ /--with-stream=dynamic/;
    my ($dir) = $text =~ /--modules-path=(\S+)/;
    my $so = ($dir // '/usr/lib/nginx/modules') . '/ngx_stream_module.so';
    return $STREAM_CORE = -f $so ? $so : '';
}

sub module_path {
    return $MODULE if defined $MODULE;
    # set but empty: the binary was built with --add-module
    return $MODULE = '' if defined $ENV{ZK_LOCK_MODULE}
        && $ENV{ZK_LOCK_MODULE} eq '';
    if (my $so = $ENV{ZK_LOCK_MODULE}) {
        Test::More::BAIL_OUT("ZK_LOCK_MODULE=$so: no such file") unless -f $so;
        return $MODULE = File::Spec->rel2abs($so);
    }
    my $script = "$LIB_DIR/build.sh";
    # prove -j runs test files in parallel; serialise the shared make.
    open my $lock, '<', $script or Test::More::BAIL_OUT("$script: $!");
    flock $lock, LOCK_EX;
    my $r = run_cmd(['/bin/sh', $script], timeout => 900);
    close $lock;
    my ($so) = grep { /\.so$/ } split /\n/, $r->{out};
    if ($r->{rc} != 0 || !$so || !-f $so) {
        my $msg = "module build failed (t/lib/build.sh exit $r->{rc}):\n"
            . $r->{err} . $r->{out};
        Test::More::diag($msg);
        Test::More::BAIL_OUT($msg);
    }
    return $MODULE = $so;
}

# ------------------------------------------------------------ HTTP client

sub http_get {
    my ($port, $uri, %opt) = @_;
    return http_parallel([[$port, $uri]], %opt)->[0];
}

sub _split_addr {
    my ($addr) = @_;
    return $addr =~ /^(.+):(\d+)$/ ? ($1, $2) : ('127.0.0.1', $addr);
}

sub _build_request {
    my ($host, $port, $uri, %o) = @_;
    my $method = $o{method} // 'GET';
    my $ver    = $o{http_version} // '1.0';
    my %h = (Host => "$host:$port", Connection => 'close',
        'User-Agent' => 'zklock-test', %{ $o{headers} // {} });
    $h{'Content-Length'} = length $o{body} if defined $o{body};
    return "$method $uri HTTP/$ver\r\n"
        . join('', map { "$_: $h{$_}\r\n" } sort keys %h) . "\r\n"
        . ($o{body} // '');
}

# Start a non-blocking connect; the socket becomes writable when done.
sub _nb_connect {
    my ($host, $port) = @_;
    socket(my $s, AF_INET, SOCK_STREAM, 0) or return (undef, "socket: $!");
    fcntl($s, F_SETFL, fcntl($s, F_GETFL, 0) | O_NONBLOCK);
    my $addr = inet_aton($host) or return (undef, "bad host $host");
    if (!connect($s, pack_sockaddr_in($port, $addr)) && $! != EINPROGRESS) {
        return (undef, "connect: $!");
    }
    return ($s, undef);
}

sub _parse_response {
    my ($c) = @_;
    my $raw = $c->{rbuf};
    my $res = $c->{res};
    my ($head, $body) = split /\r\n\r\n/, $raw, 2;
    if (!defined $body || $head !~ m{^HTTP/\d\.\d (\d{3})}) {
        $res->{status} = 0;
        $res->{body}   = '';
        $res->{error} //= length $raw ? 'unparsable response' : 'empty reply';
        return;
    }
    $res->{status} = $1 + 0;
    my %h;
    for my $line (split /\r\n/, $head) {
        next unless $line =~ /^([^:\s]+):\s*(.*)$/;
        my $k = lc $1;
        $h{$k} = exists $h{$k} ? "$h{$k}, $2" : $2;
    }
    if (($h{'transfer-encoding'} // '') =~ /chunked/i) {
        my $out = '';
        while ($body =~ s/^([0-9a-fA-F]+)[^\r\n]*\r\n//) {
            my $len = hex $1;
            last if $len == 0;
            $out .= substr($body, 0, $len, '');
            $body =~ s/^\r\n//;
        }
        $body = $out;
    }
    $res->{headers} = \%h;
    $res->{body}    = $body;
}

sub _finish {
    my ($c, $error) = @_;
    close $c->{sock} if $c->{sock};
    delete $c->{sock};
    $c->{phase} = 'done';
    my $res = $c->{res};
    $res->{end}  = time;
    $res->{time} = $res->{end} - $res->{start};
    # A timeout is a failure even after a partial response (kept in
    # partial); a reset after a complete response is not.
    if ($error && ($error eq 'timeout' || !length $c->{rbuf})) {
        @$res{qw(status body error partial)} = (0, '', $error, $c->{rbuf});
        return;
    }
    $res->{error} = $error if $error;
    _parse_response($c);
}

sub _start_conn {
    my ($c) = @_;
    my ($port, $uri, $o) = @{ $c->{req} };
    my %o = (%{ $c->{opt} }, %{ $o // {} });
    my ($host, $p) = _split_addr($port);
    $c->{res}      = { start => time, headers => {} };
    $c->{deadline} = time + ($o{timeout} // 30);
    $c->{wbuf}     = _build_request($host, $p, $uri, %o);
    $c->{rbuf}     = '';
    my ($s, $err) = _nb_connect($host, $p);
    return _finish($c, $err) unless $s;
    $c->{sock}  = $s;
    $c->{phase} = 'connecting';
}

# One step of a connection whose socket select() reported ready.
sub _progress {
    my ($c) = @_;
    if ($c->{phase} eq 'connecting') {
        my $err = unpack 'i', getsockopt($c->{sock}, SOL_SOCKET, SO_ERROR);
        return _finish($c, 'connect: ' . ($! = $err)) if $err;
        $c->{phase} = 'sending';
    }
    if ($c->{phase} eq 'sending') {
        my $n = syswrite($c->{sock}, $c->{wbuf});
        if (!defined $n) {
            return if $! == EAGAIN || $! == EWOULDBLOCK || $! == EINTR;
            return _finish($c, "write: $!");
        }
        substr($c->{wbuf}, 0, $n, '');
        $c->{phase} = 'reading' unless length $c->{wbuf};
        return;
    }
    my $n = sysread($c->{sock}, $c->{rbuf}, 65536, length $c->{rbuf});
    if (!defined $n) {
        return if $! == EAGAIN || $! == EWOULDBLOCK || $! == EINTR;
        return _finish($c, "read: $!");
    }
    _finish($c) if $n == 0;    # Connection: close - EOF ends the response
}

sub http_parallel {
    my ($reqs, %opt) = @_;
    local $SIG{PIPE} = 'IGNORE';    # a server closing early must not kill us
    my $stagger = delete $opt{stagger} // 0;
    my $t0 = time;
    my @conns = map {
        { req => $reqs->[$_], opt => \%opt, phase => 'pending',
          at => $t0 + $_ * $stagger }
    } 0 .. $#$reqs;

    while (my @live = grep { $_->{phase} ne 'done' } @conns) {
        my $now = time;
        my ($rd, $wr) = (IO::Select->new, IO::Select->new);
        my (%by_fd, $wake);
        for my $c (@live) {
            _start_conn($c) if $c->{phase} eq 'pending' && $c->{at} <= $now;
            if ($c->{phase} eq 'pending') {
                $wake = $c->{at} if !defined $wake || $c->{at} < $wake;
                next;
            }
            next if $c->{phase} eq 'done';
            if ($now >= $c->{deadline}) { _finish($c, 'timeout'); next }
            $wake = $c->{deadline} if !defined $wake || $c->{deadline} < $wake;
            ($c->{phase} eq 'reading' ? $rd : $wr)->add($c->{sock});
            $by_fd{ fileno $c->{sock} } = $c;
        }
        next unless defined $wake;
        my $wait = $wake - time;
        $wait = 0 if $wait < 0;
        my ($r, $w) = IO::Select->select($rd, $wr, undef, $wait);
        _progress($by_fd{ fileno $_ }) for @{ $r // [] }, @{ $w // [] };
    }
    return [ map { $_->{res} } @conns ];
}

# http_parallel in a forked child, so that a test can act (poll ZooKeeper,
# restart it, start more requests) while these run; http_parallel_collect
# waits for the child and returns http_parallel's results.
my %BG;

# nginx_start(@args), again until ZooKeeper ($zk: its maxClientCnxns one
# below the workers) refused exactly one worker a session: connections
# that arrive at once may all get in, the server counting those it has
# registered.  Returns the nginx and the refused worker's pid (undef if
# 5 starts did not come to that).
sub nginx_start_refused {
    my ($zk, @args) = @_;
    my %opt = @args[1 .. $#args];
    my $made = sub { my %m = map { $_ => 1 } $_[0]->error_log
        =~ /(\d+)#\d+: zookeeper session 0x[0-9a-f]+ connected/g; %m };
    my $ng;
    for my $try (1 .. 5) {
        my $before = () = $zk->log =~ /Too many connections/g;
        $ng = nginx_start(@args);
        wait_for(sub { my %m = $made->($ng); keys %m == $opt{workers}
            || (() = $zk->log =~ /Too many connections/g) > $before }, 15);
        sleep 1;
        my %m = $made->($ng);
        if (keys %m == $opt{workers} - 1) {
            my ($refused) = grep { !$m{$_} } $ng->worker_pids;
            return ($ng, $refused);
        }
        $ng->stop if $try < 5;
    }
    return ($ng, undef);
}

# true once every worker of these nginx instances has logged that its
# ZooKeeper session is connected (they connect after nginx_start returns)
# (opt: a number as first argument is the timeout, 15 s)
sub sessions_connected {
    my $timeout = !ref $_[0] ? shift : 15;
    my (@fleet) = @_;
    my $want = 0;
    $want += scalar($_->worker_pids) for @fleet;
    return wait_for(sub {
        my $n = () = join('', map { $_->error_log } @fleet)
            =~ /zookeeper session 0x[0-9a-f]+ connected/g;
        return $n >= $want;
    }, $timeout);
}

# test: within $timeout (5 s), no ephemeral node is left below $path
sub no_ephemerals {
    my ($hosts, $path, $name, $timeout) = @_;
    my $ok = wait_for(sub { !zk_ephemerals($hosts, $path) }, $timeout // 5);
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    Test::More::ok($ok, "$name: no node left below $path")
        or Test::More::diag(Test::More::explain([zk_ephemerals($hosts, $path)]));
    return $ok;
}

# The most in flight at once among @$calls ({start, end, w}): weights
# added up, or with $writer (a predicate on a call: a read/write lock)
# all that run beside a writer, else 1.  Returns (the most, when, the
# calls then, by start).  Ends come before starts at the same instant; a
# call that ended as it started was never in flight.
sub peak_in_flight {
    my ($calls, $writer) = @_;
    my @ev = sort { $a->[0] <=> $b->[0] || $a->[1] <=> $b->[1] }
        map { ([ $_->{start}, 1, $_ ], [ $_->{end}, 0, $_ ]) }
        grep { $_->{end} > $_->{start} } @$calls;
    my (%in, $at, @then);
    my $max = 0;
    for my $e (@ev) {
        if (!$e->[1]) { delete $in{ $e->[2] }; next }
        $in{ $e->[2] } = $e->[2];
        my @now = values %in;
        my $load = 0;
        if ($writer) {
            $load = (grep { $writer->($_) } @now) ? scalar @now : 1;
        } else {
            $load += $_->{w} for @now;
        }
        ($max, $at, @then) = ($load, $e->[0], @now) if $load > $max;
    }
    return ($max, $at // 0, [ sort { $a->{start} <=> $b->{start} } @then ]);
}

sub http_parallel_bg {
    my ($reqs, %opt) = @_;
    my $tmp = File::Temp->new(UNLINK => 1);
    my $pid = fork;
    croak "fork: $!" unless defined $pid;
    if (!$pid) {
        my $res = eval { http_parallel($reqs, %opt) }
            || [ map { { status => 0, error => "child: $@" } } @$reqs ];
        open my $fh, '>', "$tmp" or _exit(2);
        print {$fh} JSON::PP->new->encode($res);
        close $fh;
        _exit(0);
    }
    $BG{$pid} = 1;
    return { pid => $pid, file => $tmp, n => scalar @$reqs };
}

sub http_parallel_collect {
    my ($h, $timeout) = @_;
    my $deadline = time + ($timeout // 60);
    while (waitpid($h->{pid}, WNOHANG) == 0) {
        if (time > $deadline) {
            kill 'KILL', $h->{pid};
            waitpid($h->{pid}, 0);
            last;
        }
        sleep 0.02;
    }
    delete $BG{ $h->{pid} };
    open my $fh, '<', "$h->{file}" or return [ map { { status => 0,
        error => 'no result' } } 1 .. $h->{n} ];
    local $/;
    my $text = <$fh>;
    return eval { JSON::PP->new->decode($text) }
        || [ map { { status => 0, error => 'bad result' } } 1 .. $h->{n} ];
}

END { kill 'KILL', $_ for keys %BG }

sub http_abort_after {
    my ($port, $uri, $seconds, %opt) = @_;
    my ($host, $p) = _split_addr($port);
    my $req = _build_request($host, $p, $uri, %opt);
    my $pid = fork;
    croak "fork: $!" unless defined $pid;
    if (!$pid) {
        $SIG{$_} = 'DEFAULT' for qw(INT TERM);
        $SIG{PIPE} = 'IGNORE';
        my $s = IO::Socket::INET->new(PeerAddr => $host, PeerPort => $p,
            Proto => 'tcp', Timeout => 5) or _exit(2);
        syswrite($s, $req);
        sleep $seconds;
        close $s;    # abort: the response is never read
        _exit(0);
    }
    return register_pid($pid, 'http_abort_after');
}

# The classes of the objects that the functions above return

use ZkLock::Test::Zk;
use ZkLock::Test::Backend;
use ZkLock::Test::Nginx;

1;
