# ZooKeeper servers for the tests: one standalone server or a node of a
# quorum (ZkLock::Test::ZkNode), an ensemble (ZkLock::Test::Ensemble) and a
# foreign holder of a lock node (ZkLock::Test::Holder). Made by zk_start(),
# zk_ensemble_start() and zk_hold() of ZkLock::Test, documented there.

package ZkLock::Test;

use strict;
use warnings;
use Carp qw(croak);
use IO::Select;
use IO::Socket::INET;
use Time::HiRes qw(time);

our ($PYTHON, $LIB_DIR, $JSON);

# The functions of ZkLock::Test that start ZooKeeper and look into it

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

# the server's last zxid (0 if it does not answer): it moves with every
# write, so that a test can count the writes made meanwhile
sub zk_zxid {
    my ($port) = @_;
    my ($z) = (zk_4lw($port, 'srvr') // '') =~ /Zxid: 0x([0-9a-f]+)/;
    return defined $z ? hex $z : 0;
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
    my $r = run_cmd([$PYTHON, "$LIB_DIR/zkctl.py", '--hosts', _hosts_of($hosts),
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

sub zk_churn {
    my ($hosts, $path, $n, $pause) = @_;
    return _zkctl($hosts, 'churn', $path, '--count', $n,
        '--pause', $pause // 0)->{changes};
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

sub zk_hold {
    my ($hosts, $path, %opt) = @_;
    return ZkLock::Test::Holder->new(_hosts_of($hosts), $path, %opt);
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
sub log   { ZkLock::Test::slurp("$_[0]{dir}/zookeeper.log") }
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
    $self->{pid} = ZkLock::Test::spawn(
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
        my $r = ZkLock::Test::run_cmd([$ZkLock::Test::PYTHON,
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
# SIGSTOP stops every thread of the JVM, but not at once: on a loaded
# machine a thread already running could still answer a request, so
# pause() returns once the kernel shows each of its threads stopped (at
# most 2 s)
sub pause {
    my ($self) = @_;
    CORE::kill('STOP', $self->{pid}) or croak "pause: $!";
    for (1 .. 200) {
        my @run = grep { ZkLock::Test::slurp($_) !~ /^\d+ \(.*\) [tTXZ] /s }
            glob "/proc/$self->{pid}/task/*/stat";
        last unless @run;
        sleep 0.01;
    }
}
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
    ZkLock::Test::register_pid($pid, 'zk_hold');
    close $in_r;
    close $out_w;
    my $self = bless { pid => $pid, stdin => $in_w, log => $log,
        hosts => $hosts,
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
            . ZkLock::Test::slurp($log);
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
    # A close that the loaded server did not answer in time (kazoo gives
    # up and drops the connection) leaves the node until the session
    # expires: the lock is free once it is gone, not before.
    ZkLock::Test::zk_wait_gone($self->{hosts}, $self->{node},
        $self->{session_timeout} + 2) if $self->{node};
}

# Crash: the session stays open on the server until it expires.
sub kill {
    my ($self) = @_;
    return unless $self->{pid};
    ZkLock::Test::_terminate(delete $self->{pid}, 'KILL', 5);
    close delete $self->{stdin} if $self->{stdin};
}

1;
