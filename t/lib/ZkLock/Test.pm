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

@what among nginx, java, zookeeper, python, kazoo, module. A missing one
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
{ key => {...}, ... }, reset, stop.

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
worker_rlimit_nofile), no_module, port, timeout.
Note: "ready" means the workers exist; the module's own ZooKeeper
session may still be connecting - poll with wait_for if it matters.
Methods: port, pid (master), prefix, worker_pids (current workers, not
those "shutting down"), child_pids (all children of the master),
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
zk_wait_gone($hosts, $path, $timeout) -> bool;
zk_hold($hosts, $parent, name => $n, seconds => 300, session_timeout => 10,
data => $d) -> $holder (name: the prefix of its sequential node, by default
a Curator mutex's, curator_name()) with node, session_id, pid, release (close the
session: node gone when it returns; waits for a reconnect first if the
holder is disconnected, e.g. right after $zk->restart), kill (SIGKILL: node stays until the
session expires on the server);
zk_4lw($port, $cmd, $timeout) -> reply text or undef;
http2_listen() -> ($listen_suffix, $server_directive): cleartext HTTP/2
for the nginx under test: (" http2", "") before 1.25, ("", "http2 on;")
since; use as "listen 127.0.0.1:%%PORT%%$suffix; $directive";
h2_client($port) -> $h2: t/lib/h2client.py on one HTTP/2 connection,
commanded line by line. Methods: get($name, $path) (a stream), reset($name)
(RST_STREAM CANCEL), close (the TCP connection, at once), events (its
event log: "status NAME CODE", "done NAME", "reset NAME CODE", "closed"),
wait($regex, $timeout) -> bool (the event log matches), stop;
curator_name($kind) -> "_c_<random uuid>-$kind", the prefix of a Curator
participant's node ($kind "lock-" by default; "__READ__", "__WRIT__" for a
rwlock, "lease-" for a semaphore v2 lease): the module reads sequence
numbers only from names of this form.

=item Helpers

wait_for(sub {...}, $timeout = 10, $interval = 0.05) -> the sub's first
true value, or false on timeout. free_port() -> port. proc_wait($pid,
$timeout = 10) -> exit status (undef on timeout). pid_alive($pid) -> bool
(zombies count as dead). started_pids() -> every pid this process started.
tempdir($tag) -> new temp dir.

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
    zk_wait_gone zk_hold zk_4lw curator_name
    http2_listen h2_client
    wait_for free_port proc_wait pid_alive started_pids tempdir
    sessions_connected no_ephemerals cpu_seconds
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
# on a signal, nothing logged at alert, crit or emerg, but for the lines
# the test said it expects ($ng->expect_log(qr/.../)).
our @NGINX_STARTED;

# only in a test (*.t): the callback makes any script count as one,
# and the demo and the benchmarks are not
test2_add_callback_testing_done(sub {
    for my $ng (@NGINX_STARTED) {
        my @bad = grep { /\[(?:alert|crit|emerg)\]|exited on signal/
                         && !$ng->expected($_) } split /\n/, $ng->error_log;
        Test::More::ok(!@bad, "nginx on port $ng->{port}: no worker "
            . 'crashed, nothing logged at alert, crit or emerg')
            or Test::More::diag(join "\n", @bad);
    }
}) if $0 =~ /\.t\z/;

my  $JSON    = JSON::PP->new->utf8->canonical;

# ---------------------------------------------------------- process registry

my $OWNER = $$;     # forked helpers must not run the cleanup
my %PROCS;          # pid => { name => ..., status => exit status once reaped }
my @STARTED;        # every pid ever started, for the "all gone" checks

sub _register {
    my ($pid, $name) = @_;
    $PROCS{$pid} = { name => $name };
    push @STARTED, $pid;
    return $pid;
}

# Run $cmd (arrayref) as a child in its own process group, stdout+stderr
# appended to $opt{log} (default /dev/null), stdin from $opt{stdin} (a
# handle) or /dev/null. Returns the pid.
sub _spawn {
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
    return _register($pid, $opt{name} // $cmd[0]);
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
sub _run {
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
    _register($pid, $cmd->[0]);
    my $status = proc_wait($pid, $opt{timeout} // 60);
    my $timed_out = !defined $status;
    $status = _terminate($pid, 'KILL', 1) if $timed_out;
    return {
        rc        => $timed_out ? -1 : ($status >> 8),
        timed_out => $timed_out,
        out       => _slurp("$out"),
        err       => _slurp("$err") . ($timed_out ? "(timed out)\n" : ''),
    };
}

# ----------------------------------------------------------- small helpers

sub _slurp {
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
                || (_run([$PYTHON, '-c', 'import kazoo.client'],
                        timeout => 30)->{rc} == 0
                    ? '' : "python module kazoo missing for $PYTHON");
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
    my $r = _run(['/bin/sh', $script], timeout => 900);
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

# -------------------------------------------------------------- ZooKeeper

sub zk_4lw {
    my ($port, $cmd, $timeout) = @_;
    $timeout //= 2;
    local $SIG{PIPE} = 'IGNORE';
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port,
        Proto => 'tcp', Timeout => $timeout) or return undef;
    print {$s} $cmd;
    my $sel = IO::Select->new($s);
    my ($buf, $deadline) = ('', time + $timeout);
    while ((my $left = $deadline - time) > 0) {
        last unless $sel->can_read($left);
        my $n = sysread($s, $buf, 65536, length $buf);
        last unless $n;    # EOF: the server closes after answering
    }
    close $s;
    return length $buf ? $buf : undef;
}

sub zk_start {
    my (%opt) = @_;
    require_prereqs(qw(zookeeper kazoo));
    my $node = ZkLock::Test::ZkNode->new(%opt);
    # A port picked by free_port can be grabbed before the JVM binds it.
    for my $try (1 .. 5) {
        $node->{port} = free_port();
        $node->_write_cfg;
        return $node if $node->start(timeout => $opt{timeout} // 60,
            retry_bind => $try < 5);
    }
}

sub zk_ensemble_start {
    my ($n, %opt) = @_;
    require_prereqs(qw(zookeeper kazoo));
    return ZkLock::Test::Ensemble->new($n, %opt);
}

# zkctl.py call -> decoded JSON (dies with zkctl's error otherwise).
sub _zkctl {
    my ($hosts, @args) = @_;
    my $r = _run([$PYTHON, "$LIB_DIR/zkctl.py", '--hosts', _hosts_of($hosts),
        @args], timeout => 60);
    my $doc = eval { $JSON->decode($r->{out}) };
    croak "zkctl @args failed (rc $r->{rc}): $r->{err}$r->{out}"
        if !defined $doc || ($r->{rc} != 0 && $r->{rc} != 3);
    return $doc;
}

sub zk_children   { return @{ _zkctl($_[0], 'children',   $_[1]) } }
sub zk_tree       { return @{ _zkctl($_[0], 'tree',       $_[1]) } }
sub zk_ephemerals { return @{ _zkctl($_[0], 'ephemerals', $_[1]) } }

sub zk_get {
    my ($hosts, $path) = @_;
    my $d = _zkctl($hosts, 'get', $path);
    return $d->{exists} ? $d : undef;
}

sub zk_create {
    my ($hosts, $path, %opt) = @_;
    my @a = ('create', $path);
    push @a, '--ephemeral' if $opt{ephemeral};
    push @a, '--sequence'  if $opt{sequence};
    push @a, '--makepath'  if $opt{makepath};
    push @a, '--data', $opt{data} if defined $opt{data};
    return _zkctl($hosts, @a)->{node};
}

# set a node's data (creating it); int => 1 stores a 4-byte big-endian int
sub zk_set {
    my ($hosts, $path, $data, %opt) = @_;
    return _zkctl($hosts, 'set', $path, '--data', $data,
        $opt{int} ? '--int' : ())->{node};
}

sub zk_delete {
    my ($hosts, $path, %opt) = @_;
    return _zkctl($hosts, 'delete', $path,
        $opt{recursive} ? '--recursive' : ())->{deleted} ? 1 : 0;
}

sub zk_wait_gone {
    my ($hosts, $path, $timeout) = @_;
    return _zkctl($hosts, 'wait-gone', $path, '--timeout', $timeout // 10)
        ->{gone} ? 1 : 0;
}

sub curator_name {
    my ($kind) = @_;
    my @h = map { sprintf '%04x', int(rand(65536)) } 1 .. 8;
    return '_c_' . "$h[0]$h[1]-$h[2]-4" . substr($h[3], 1) . '-a'
        . substr($h[4], 1) . "-$h[5]$h[6]$h[7]-" . ($kind // 'lock-');
}

sub http2_listen {
    my ($minor) = `$NGINX -v 2>&1` =~ m{nginx/1\.(\d+)\.};
    return ($minor // 0) >= 25 ? ('', 'http2 on;') : (' http2', '');
}

sub h2_client {
    my ($port) = @_;
    require_prereqs('python');
    return ZkLock::Test::H2->new($port);
}

sub zk_hold {
    my ($hosts, $path, %opt) = @_;
    return ZkLock::Test::Holder->new(_hosts_of($hosts), $path, %opt);
}

# ----------------------------------------------------------------- backend

sub backend_start {
    my (%opt) = @_;
    require_prereqs('python');
    return ZkLock::Test::Backend->new(%opt);
}

# ------------------------------------------------------------------ nginx

sub nginx_start {
    my ($body, %opt) = @_;
    require_prereqs('nginx');
    return ZkLock::Test::Nginx->new($body, %opt);
}

sub nginx_test_conf {
    my ($body, %opt) = @_;
    require_prereqs('nginx');
    my $ng = ZkLock::Test::Nginx->_prepare($body, %opt, dummy => 1);
    my $r = _run([$NGINX, '-t', '-p', "$ng->{prefix}/", '-e',
        "$ng->{prefix}/logs/error.log", '-c', "$ng->{prefix}/nginx.conf"],
        timeout => 60);
    return ($r->{rc}, $r->{out} . $r->{err});
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
    return _register($pid, 'http_abort_after');
}

# =================================================================== classes

package ZkLock::Test::ZkNode;

use strict;
use warnings;
use Carp qw(croak);
# croak reports the test file's line, not the harness's.
our @CARP_NOT = qw(ZkLock::Test ZkLock::Test::ZkNode ZkLock::Test::Ensemble
    ZkLock::Test::Holder ZkLock::Test::Backend ZkLock::Test::Nginx);
use Time::HiRes qw(time sleep);

# One ZooKeeper server process. Standalone (ZooKeeperServerMain) unless
# {servers} lists the quorum (then QuorumPeerMain with a myid file).
sub new {
    my ($class, %opt) = @_;
    my $self = bless {
        id        => $opt{id} // 0,
        dir       => $opt{dir} // ZkLock::Test::tempdir('zk'),
        tick_time => $opt{tick_time} // 500,
        max_session_timeout => $opt{max_session_timeout} // 60000,
        cfg_extra => $opt{cfg} // {},
        jvm       => $opt{jvm} // [],    # extra -D flags
        servers   => $opt{servers},    # [ [id, quorum port, election port] ]
        port      => $opt{port},
    }, $class;
    mkdir "$self->{dir}/data";
    return $self;
}

sub port  { $_[0]{port} }
sub hosts { "127.0.0.1:$_[0]{port}" }
sub pid   { $_[0]{pid} }
sub dir   { $_[0]{dir} }
sub id    { $_[0]{id} }
sub log   { ZkLock::Test::_slurp("$_[0]{dir}/zookeeper.log") }
sub _name { $_[0]{id} ? "ZooKeeper node $_[0]{id}" : 'ZooKeeper' }

sub _write_cfg {
    my ($self) = @_;
    my %cfg = (
        tickTime           => $self->{tick_time},
        maxSessionTimeout  => $self->{max_session_timeout},
        dataDir            => "$self->{dir}/data",
        clientPort         => $self->{port},
        clientPortAddress  => '127.0.0.1',
        'admin.enableServer'     => 'false',
        '4lw.commands.whitelist' => '*',
        # Test speed: no fsync per write, no 64 MB preallocated txn logs.
        forceSync          => 'no',
        preAllocSize       => 1024,
        %{ $self->{cfg_extra} },
    );
    if ($self->{servers}) {
        %cfg = (%cfg, initLimit => 10, syncLimit => 5,
            reconfigEnabled => 'false');
        $cfg{"server.$_->[0]"} = "127.0.0.1:$_->[1]:$_->[2]"
            for @{ $self->{servers} };
        ZkLock::Test::_spew("$self->{dir}/data/myid", "$self->{id}\n");
    }
    ZkLock::Test::_spew("$self->{dir}/zoo.cfg",
        join('', map { "$_=$cfg{$_}\n" } sort keys %cfg));
}

sub _cmd {
    my ($self) = @_;
    my $cp = $ZkLock::Test::ZK_JAR;
    # Without an slf4j binding ZooKeeper logs nothing; slf4j-simple writes
    # to stderr, which goes to zookeeper.log for failure diagnostics.
    $cp .= ":$ZkLock::Test::SLF4J_SIMPLE" if -r $ZkLock::Test::SLF4J_SIMPLE;
    return ['java', '-Xmx256m', '-XX:+UseSerialGC', '-XX:TieredStopAtLevel=1',
        '-Djava.net.preferIPv4Stack=true',
        '-Dzookeeper.admin.enableServer=false',
        '-Dzookeeper.4lw.commands.whitelist=*',
        '-Dzookeeper.jmx.log4j.disable=true',
        '-Dorg.slf4j.simpleLogger.showDateTime=true',
        '-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS',
        @{ $self->{jvm} },
        '-cp', $cp,
        $self->{servers}
            ? 'org.apache.zookeeper.server.quorum.QuorumPeerMain'
            : 'org.apache.zookeeper.server.ZooKeeperServerMain',
        "$self->{dir}/zoo.cfg"];
}

# Start the process; with wait (default) also wait until it serves.
# Returns 1, or 0 when retry_bind is set and the port was taken.
sub start {
    my ($self, %opt) = @_;
    croak $self->_name . " already running" if $self->running;
    $self->{pid} = ZkLock::Test::_spawn(
        name => "zookeeper$self->{id}", cmd => $self->_cmd,
        log  => "$self->{dir}/zookeeper.log");
    return 1 if defined $opt{wait} && !$opt{wait};
    return $self->wait_serving($opt{timeout} // 60, %opt);
}

sub running { $_[0]{pid} && ZkLock::Test::_running($_[0]{pid}) }

sub srvr { ZkLock::Test::zk_4lw($_[0]{port}, 'srvr', $_[1] // 2) }

sub mode {
    my $s = $_[0]->srvr // '';
    return $s =~ /^Mode: (\S+)/m ? $1 : undef;
}

sub wait_serving {
    my ($self, $timeout, %opt) = @_;
    my $ok = ZkLock::Test::wait_for(sub {
        if (!$self->running) {
            $self->{died} = 1;
            return 1;
        }
        my $ruok = ZkLock::Test::zk_4lw($self->{port}, 'ruok', 1) // '';
        return 0 unless $ruok eq 'imok' && defined $self->mode;
        # The 4lw port answers before sessions are accepted in every case;
        # a real client session is the readiness that tests need.
        my $r = ZkLock::Test::_run([$ZkLock::Test::PYTHON,
            "$ZkLock::Test::LIB_DIR/zkctl.py", '--hosts', $self->hosts,
            '--timeout', 2, 'children', '/'], timeout => 10);
        return $r->{rc} == 0;
    }, $timeout, 0.1);
    if (delete $self->{died}) {
        return 0 if $opt{retry_bind}
            && $self->log =~ /Address already in use/;
        croak $self->_name . " exited during startup:\n"
            . ZkLock::Test::_tail($self->log, 40);
    }
    return 1 if $ok;
    my $log = $self->log;
    $self->stop;
    croak $self->_name . " on port $self->{port} not ready after "
        . "${timeout}s:\n" . ZkLock::Test::_tail($log, 40);
}

sub stop {
    my ($self, $sig) = @_;
    return unless $self->{pid};
    CORE::kill('CONT', $self->{pid});    # a stopped JVM cannot handle TERM
    ZkLock::Test::_terminate($self->{pid}, $sig // 'TERM', 5);
    delete $self->{pid};
}

sub kill    { $_[0]->stop('KILL') }
sub restart { my ($s, %o) = @_; $s->stop; $s->start(%o) }
sub pause   { CORE::kill('STOP', $_[0]{pid}) or croak "pause: $!" }
sub resume  { CORE::kill('CONT', $_[0]{pid}) or croak "resume: $!" }

package ZkLock::Test::Ensemble;

use strict;
use warnings;
use Carp qw(croak);
# croak reports the test file's line, not the harness's.
our @CARP_NOT = qw(ZkLock::Test ZkLock::Test::ZkNode ZkLock::Test::Ensemble
    ZkLock::Test::Holder ZkLock::Test::Backend ZkLock::Test::Nginx);

sub new {
    my ($class, $n, %opt) = @_;
    my $self = bless { nodes => [] }, $class;
    # Every node's config lists the quorum and election ports of all
    # nodes, so all ports are chosen before any node is configured.
    my @servers = map { [ $_, ZkLock::Test::free_port(),
        ZkLock::Test::free_port() ] } 1 .. $n;
    for my $s (@servers) {
        my $node = ZkLock::Test::ZkNode->new(%opt, id => $s->[0],
            servers => \@servers, port => ZkLock::Test::free_port(),
            dir => ZkLock::Test::tempdir("zk$s->[0]"));
        $node->_write_cfg;
        push @{ $self->{nodes} }, $node;
    }
    $_->start(wait => 0) for $self->nodes;
    $self->wait_quorum($opt{timeout} // 60);
    return $self;
}

sub nodes { @{ $_[0]{nodes} } }
sub node  { $_[0]{nodes}[ $_[1] - 1 ] or croak "no node $_[1]" }
sub hosts { join ',', map { $_->hosts } $_[0]->nodes }
sub stop  { $_->stop for $_[0]->nodes }

sub leader_index {
    my ($self) = @_;
    for my $n ($self->nodes) {
        next unless $n->running;
        return $n->id if ($n->mode // '') eq 'leader';
    }
    return undef;
}

# Wait until every running node serves (is leader or follower).
sub wait_quorum {
    my ($self, $timeout) = @_;
    for my $n (grep { $_->running } $self->nodes) {
        $n->wait_serving($timeout);
    }
    return 1;
}

package ZkLock::Test::Holder;

use strict;
use warnings;
use Carp qw(croak);
# croak reports the test file's line, not the harness's.
our @CARP_NOT = qw(ZkLock::Test ZkLock::Test::ZkNode ZkLock::Test::Ensemble
    ZkLock::Test::Holder ZkLock::Test::Backend ZkLock::Test::Nginx);
use IO::Select;
use POSIX qw(setpgid _exit);

# A foreign lock holder: a zkctl.py "hold" process owning an ephemeral
# sequential node. Its stdin is a pipe from us: closing it releases.
sub new {
    my ($class, $hosts, $path, %opt) = @_;
    pipe(my $in_r, my $in_w) or croak "pipe: $!";
    pipe(my $out_r, my $out_w) or croak "pipe: $!";
    my $log = ZkLock::Test::_misc_dir() . "/hold-$$-" . int(rand 1e9) . '.log';
    my @cmd = ($ZkLock::Test::PYTHON, "$ZkLock::Test::LIB_DIR/zkctl.py",
        '--hosts', $hosts, 'hold', $path,
        '--name', $opt{name} // ZkLock::Test::curator_name(),
        '--seconds', $opt{seconds} // 300,
        '--session-timeout', $opt{session_timeout} // 10,
        defined $opt{data} ? ('--data', $opt{data}) : ());
    my $pid = fork;
    croak "fork: $!" unless defined $pid;
    if (!$pid) {
        setpgid(0, 0);
        $SIG{$_} = 'DEFAULT' for qw(INT TERM PIPE CHLD);
        open STDIN, '<&', $in_r or _exit(126);
        open STDOUT, '>&', $out_w or _exit(126);
        open STDERR, '>>', $log or _exit(126);
        exec { $cmd[0] } @cmd or _exit(127);
        _exit(127);
    }
    ZkLock::Test::_register($pid, 'zk_hold');
    close $in_r;
    close $out_w;
    my $self = bless { pid => $pid, stdin => $in_w, log => $log,
        session_timeout => $opt{session_timeout} // 10 }, $class;
    my $line = '';
    my $sel = IO::Select->new($out_r);
    while ($line !~ /\n/ && $sel->can_read(30)) {
        last unless sysread($out_r, $line, 4096, length $line);
    }
    close $out_r;
    my $doc = eval { JSON::PP->new->decode($line) };
    if (!$doc || !$doc->{node}) {
        $self->kill;
        croak "zk_hold $path failed: $line"
            . ZkLock::Test::_slurp($log);
    }
    @$self{qw(node session_id)} = @$doc{qw(node session_id)};
    return $self;
}

sub node       { $_[0]{node} }
sub session_id { $_[0]{session_id} }
sub pid        { $_[0]{pid} }

# Graceful: the session is closed, so the node is gone when this returns.
sub release {
    my ($self) = @_;
    return unless $self->{pid};
    close delete $self->{stdin} if $self->{stdin};
    # It may first have to reconnect (up to a session timeout) to close.
    ZkLock::Test::_terminate(delete $self->{pid}, 'TERM',
        $self->{session_timeout} + 5);
}

# Crash: the session stays open on the server until it expires.
sub kill {
    my ($self) = @_;
    return unless $self->{pid};
    ZkLock::Test::_terminate(delete $self->{pid}, 'KILL', 5);
    close delete $self->{stdin} if $self->{stdin};
}

package ZkLock::Test::Backend;

use strict;
use warnings;
use Carp qw(croak);
# croak reports the test file's line, not the harness's.
our @CARP_NOT = qw(ZkLock::Test ZkLock::Test::ZkNode ZkLock::Test::Ensemble
    ZkLock::Test::Holder ZkLock::Test::Backend ZkLock::Test::Nginx);

sub new {
    my ($class, %opt) = @_;
    my $self = bless { dir => ZkLock::Test::tempdir('backend') }, $class;
    for my $try (1 .. 5) {
        $self->{port} = $opt{port} // ZkLock::Test::free_port();
        $self->{pid} = ZkLock::Test::_spawn(name => 'backend',
            cmd => [$ZkLock::Test::PYTHON,
                "$ZkLock::Test::LIB_DIR/backend.py", '--port', $self->{port}],
            log => "$self->{dir}/backend.log");
        my $up = ZkLock::Test::wait_for(sub {
            return -1 unless ZkLock::Test::_running($self->{pid});
            return ZkLock::Test::http_get($self->{port}, '/_stats',
                timeout => 2)->{status} == 200;
        }, $opt{timeout} // 15, 0.05);
        return $self if $up && $up != -1;
        my $log = ZkLock::Test::_slurp("$self->{dir}/backend.log");
        ZkLock::Test::_terminate(delete $self->{pid}, 'KILL', 1);
        next if $log =~ /cannot bind/ && !$opt{port};
        croak "backend did not start:\n$log";
    }
    croak "backend: no bindable port";
}

sub port { $_[0]{port} }
sub addr { "127.0.0.1:$_[0]{port}" }
sub pid  { $_[0]{pid} }

sub _get_json {
    my ($self, $uri) = @_;
    my $r = ZkLock::Test::http_get($self->{port}, $uri, timeout => 10);
    croak "backend $uri: status $r->{status} " . ($r->{error} // '')
        unless $r->{status} == 200;
    return JSON::PP->new->decode($r->{body});
}

sub stats {
    my ($self, $key) = @_;
    return $self->_get_json('/_stats') unless defined $key;
    $key =~ s/([^A-Za-z0-9_.~-])/sprintf '%%%02X', ord $1/ge;
    return $self->_get_json("/_stats?key=$key");
}

sub reset { $_[0]->_get_json('/_reset'); 1 }

sub stop {
    my ($self) = @_;
    ZkLock::Test::_terminate(delete $self->{pid}, 'TERM', 5) if $self->{pid};
}

package ZkLock::Test::Nginx;

use strict;
use warnings;
use Carp qw(croak);
# croak reports the test file's line, not the harness's.
our @CARP_NOT = qw(ZkLock::Test ZkLock::Test::ZkNode ZkLock::Test::Ensemble
    ZkLock::Test::Holder ZkLock::Test::Backend ZkLock::Test::Nginx);
use IO::Socket::INET;
use Time::HiRes qw(time);

my @TEMP_DIRS = qw(client_body proxy fastcgi uwsgi scgi);

# Prefix dir + nginx.conf, without starting anything (also for nginx -t).
sub _prepare {
    my ($class, $body, %opt) = @_;
    my $self = bless {
        body    => $body,
        opt     => \%opt,
        prefix  => ZkLock::Test::tempdir('nginx'),
        port    => $opt{port},
        workers => $opt{workers} // 2,
    }, $class;
    mkdir "$self->{prefix}/$_" for 'logs', map { "${_}_temp" } @TEMP_DIRS;
    $self->{port} //= ZkLock::Test::free_port();
    $self->_write_conf;
    return $self;
}

sub new {
    my ($class, $body, %opt) = @_;
    my $self = $class->_prepare($body, %opt);
    $self->start;
    return $self;
}

sub _subst {
    my ($self, $text) = @_;
    my $o = $self->{opt};
    my %v = (PORT => $self->{port}, PREFIX => $self->{prefix});
    if (defined $o->{zk}) {
        $v{ZK} = ZkLock::Test::_hosts_of($o->{zk});
    } elsif ($o->{dummy}) {
        $v{ZK} = '127.0.0.1:2181';
    }
    if (defined(my $b = $o->{backend})) {
        $v{BACKEND} = ref $b ? $b->addr : $b =~ /:/ ? $b : "127.0.0.1:$b";
    } elsif ($o->{dummy}) {
        $v{BACKEND} = '127.0.0.1:1';
    }
    $text =~ s/%%(\w+)%%/
        defined $v{$1} ? $v{$1} : croak "placeholder %%$1%% has no value"/ge;
    return $text;
}

sub _write_conf {
    my ($self) = @_;
    my $o = $self->{opt};
    my $p = $self->{prefix};
    my $so = $o->{no_module} ? '' : ZkLock::Test::module_path();
    my $load = $so eq '' ? '' : "load_module $so;\n";
    # As root, workers would run as nobody and could not write the temp
    # dirs inside our 0700 prefix.
    my $user = $> == 0 ? "user root;\n" : '';
    my $temp = join '', map { "    ${_}_temp_path $p/${_}_temp;\n" }
        @TEMP_DIRS;
    my $conf = "# generated by t/lib/ZkLock/Test.pm\n"
        . $load . $user
        . "worker_processes $self->{workers};\n"
        . "daemon off;\nmaster_process on;\n"
        . "pid $p/nginx.pid;\n"
        . "error_log $p/logs/error.log " . ($o->{log_level} // 'info') . ";\n"
        . $self->_subst($o->{main_conf} // '') . "\n"
        . ($o->{connections}
            ? "worker_rlimit_nofile " . ($o->{connections} + 1024) . ";\n" : '')
        . "events { worker_connections " . ($o->{connections} // 1024)
        . "; }\n"
        . "http {\n    access_log $p/logs/access.log;\n$temp"
        . $self->_subst($self->{body}) . "\n}\n";
    ZkLock::Test::_spew("$p/nginx.conf", $conf);
}

sub port       { $_[0]{port} }
sub pid        { $_[0]{pid} }
sub prefix     { $_[0]{prefix} }
sub conf       { ZkLock::Test::_slurp("$_[0]{prefix}/nginx.conf") }

# alert/crit/emerg or crash lines the test causes on purpose
sub expect_log { push @{ $_[0]{expect} }, $_[1]; $_[0] }
sub expected   { my ($s, $l) = @_; grep { $l =~ $_ } @{ $s->{expect} // [] } }

sub error_log  { ZkLock::Test::_slurp("$_[0]{prefix}/logs/error.log") }
sub access_log { ZkLock::Test::_slurp("$_[0]{prefix}/logs/access.log") }
sub get        { my $s = shift; ZkLock::Test::http_get($s->{port}, @_) }

sub start {
    my ($self) = @_;
    croak "nginx already running" if $self->{pid};
    my $fixed = defined $self->{opt}{port};
    for my $try (1 .. 5) {
        my $p = $self->{prefix};
        $self->{pid} = ZkLock::Test::_spawn(name => 'nginx',
            cmd => [$ZkLock::Test::NGINX, '-p', "$p/", '-e',
                "$p/logs/error.log", '-c', "$p/nginx.conf"],
            log => "$p/logs/stderr.log");
        my $up = ZkLock::Test::wait_for(sub {
            return -1 unless ZkLock::Test::_running($self->{pid});
            return -1 if $self->_startup_log =~ /Address already in use/;
            return 0 unless IO::Socket::INET->new(PeerAddr => '127.0.0.1',
                PeerPort => $self->{port}, Proto => 'tcp', Timeout => 1);
            my $n = () = $self->worker_pids;
            return $self->{workers} =~ /^\d+$/ ? $n == $self->{workers} : $n;
        }, $self->{opt}{timeout} // 10, 0.05);
        if ($up && $up != -1) {
            push @ZkLock::Test::NGINX_STARTED, $self
                unless $self->{checked}++;
            return $self;
        }
        my $log = $self->_startup_log;
        ZkLock::Test::_terminate(delete $self->{pid}, 'TERM', 2);
        if ($log =~ /Address already in use/ && !$fixed) {
            # Lost the port race: pick another and rewrite the conf.
            $self->{port} = ZkLock::Test::free_port();
            $self->_write_conf;
            next;
        }
        croak "nginx did not start (port $self->{port}):\n$log";
    }
    croak "nginx: no bindable port";
}

sub _startup_log {
    my ($self) = @_;
    return ZkLock::Test::_slurp("$self->{prefix}/logs/stderr.log")
        . ZkLock::Test::_tail($self->error_log, 40);
}

sub child_pids {
    my ($self) = @_;
    return () unless $self->{pid};
    my @kids;
    opendir my $d, '/proc' or return ();
    for my $pid (grep { /^\d+$/ } readdir $d) {
        open my $fh, '<', "/proc/$pid/stat" or next;
        my $stat = <$fh> // next;
        next unless $stat =~ /^\d+ \(.*\) (\S) (\d+)/s;    # see _live_groups
        push @kids, $pid + 0 if $2 == $self->{pid} && $1 ne 'Z';
    }
    return sort { $a <=> $b } @kids;
}

sub worker_pids {
    my ($self) = @_;
    return grep {
        my $cmd = ZkLock::Test::_slurp("/proc/$_/cmdline");
        $cmd =~ /worker process/ && $cmd !~ /shutting down/;
    } $self->child_pids;
}

sub reload {
    my ($self, $body) = @_;
    if (defined $body) {
        $self->{body} = $body;
        $self->_write_conf;
    }
    my %old = map { $_ => 1 } $self->worker_pids;
    kill 'HUP', $self->{pid} or croak "reload: $!";
    return ZkLock::Test::wait_for(sub {
        # Old workers that have not yet noticed the QUIT still look
        # like workers; wait until they exit or say "shutting down".
        my @now = $self->worker_pids;
        return 0 if grep { $old{$_} } @now;
        return $self->{workers} =~ /^\d+$/ ? @now == $self->{workers} : @now;
    }, 10, 0.05);
}

sub stop {
    my ($self) = @_;
    return unless $self->{pid};
    ZkLock::Test::_terminate(delete $self->{pid}, 'QUIT', 10);
}

package ZkLock::Test;

# ------------------------------------------------------------------ HTTP/2

package ZkLock::Test::H2;

use strict;
use warnings;
use Carp;
use IO::Handle;

# t/lib/h2client.py: commands on a pipe to its stdin, events to a log file
sub new {
    my ($class, $port) = @_;
    pipe(my $r, my $w) or croak "pipe: $!";
    $w->autoflush(1);
    my $log = ZkLock::Test::_misc_dir() . "/h2-$$-" . int(rand 1e9) . '.log';
    my $pid = ZkLock::Test::_spawn(name => 'h2client', stdin => $r,
        log => $log, cmd => [$ZkLock::Test::PYTHON,
            "$ZkLock::Test::LIB_DIR/h2client.py", $port]);
    CORE::close $r;
    my $self = bless { pid => $pid, w => $w, log => $log }, $class;
    $self->wait(qr/^connected$/m, 10)
        or croak "h2client: no connection: " . $self->events;
    return $self;
}

sub events { my $t = ZkLock::Test::_slurp($_[0]{log}); $t // '' }

sub wait {
    my ($self, $re, $timeout) = @_;
    return ZkLock::Test::wait_for(sub { $self->events =~ $re }, $timeout);
}

sub _cmd {
    my ($self, $line) = @_;
    local $SIG{PIPE} = 'IGNORE';
    print { $self->{w} } "$line\n";
}

sub get   { $_[0]->_cmd("get $_[1] $_[2]") }
sub reset { $_[0]->_cmd("reset $_[1]") }
sub close { $_[0]->_cmd('close'); ZkLock::Test::proc_wait($_[0]{pid}, 10) }

sub stop {
    my ($self) = @_;
    CORE::close delete $self->{w} if $self->{w};
    defined ZkLock::Test::proc_wait($self->{pid}, 10)
        or kill 'KILL', -$self->{pid};
}

1;
