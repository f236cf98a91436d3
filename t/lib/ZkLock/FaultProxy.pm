package ZkLock::FaultProxy;

=head1 NAME

ZkLock::FaultProxy - a TCP proxy in front of ZooKeeper that loses replies
on demand (core Perl only)

=head1 SYNOPSIS

    use ZkLock::Test;
    use ZkLock::FaultProxy;

    my $zk = zk_start();
    my $px = ZkLock::FaultProxy->start($zk);    # or a port
    my $ng = nginx_start($conf, zk => $px->hosts, ...);
    $px->blackhole(close_after => 0.3);
    ... send a request: its create reaches ZooKeeper, the reply is lost ...
    my $st = $px->stats;     # { faults => [ { creates => [...] } ], ... }
    $px->stop;

=head1 DESCRIPTION

A forked child process (its own process group, registered with
ZkLock::Test so that the test's END block kills it by pid) listens on a
free loopback port and forwards every connection to the ZooKeeper server.
It reads the ZooKeeper wire protocol on both sides (length-prefixed
frames; the first frame each way is the connect request / response, then
request headers C<xid, type> and reply headers C<xid, zxid, err>), and
records every create request (ops create, create2, createContainer,
createTTL) with its path, and from its reply the error code and the name
ZooKeeper gave the node.

The parent controls it over a socketpair; each command is answered once
it took effect.

=over

=item start($target) -> $px

$target: a port, "host:port", or an object with a port method (zk_start's).

=item port, hosts ("127.0.0.1:PORT"), pid

=item blackhole(close_after => 0.3, max => 10)

From now on, every connection open at this moment keeps forwarding
client-to-server bytes, but the server-to-client bytes are read and
swallowed. C<close_after> seconds after the first swallowed reply to a
create (or after C<max> seconds if none comes), both sides of every such
connection are closed, and the proxy is back to normal: the client's
reconnect is forwarded as usual. Connections accepted meanwhile are not
affected. Returns the time the mode was switched (Time::HiRes time).

=item cut($seconds)

Closes both sides of every open connection at once, and for $seconds
closes every new connection as soon as it is accepted: the client sees its
server go away and stay away, while ZooKeeper sees a silent client (its
session expires once $seconds exceed the session timeout). Returns the
time of the cut.

=item partition($seconds)

For $seconds, every connection, open or accepted meanwhile, is a
partition: both sides' bytes are read and swallowed, and the sockets stay
open, so that the client hears nothing and sees no error (it notices only
by its own timeout), and ZooKeeper hears nothing (the session expires once
$seconds exceed its timeout).  Then those connections are closed and new
ones are forwarded again. Returns the time the partition started.

=item stats -> { accepted, open, mode, faults => [...], creates => [...] }

faults: one entry per blackhole, { started, closed (time or undef), conns,
swallowed_bytes, creates => [ records whose reply was swallowed ] }.
creates: every create seen (the last 500), { t, conn, xid, op, path,
err (undef until the reply came), created (the node name from the
reply), reply_t, swallowed (0/1) }.

=item stop

Kills the child (TERM, then KILL) and reaps it.

=back

=cut

use strict;
use warnings;

use Carp qw(croak);
use Errno qw(EINTR);
use IO::Select;
use IO::Socket::INET;
use JSON::PP ();
use POSIX qw(setpgid _exit);
use Socket qw(AF_UNIX SOCK_STREAM PF_UNSPEC);
use Time::HiRes qw(time);

use ZkLock::Test ();

my $JSON = JSON::PP->new->canonical;

# ZooKeeper opcodes of the create family.
my %CREATE_OP = (1 => 'create', 15 => 'create2', 19 => 'createContainer',
    21 => 'createTTL');

sub start {
    my ($class, $target) = @_;
    my $tport = ref $target ? $target->port : $target;
    my ($thost, $tp) = $tport =~ /^(.+):(\d+)$/ ? ($1, $2)
                                                : ('127.0.0.1', $tport);
    # Bound here, before the fork: no race for the port.
    my $listen = IO::Socket::INET->new(LocalAddr => '127.0.0.1',
        LocalPort => 0, Proto => 'tcp', Listen => 64, ReuseAddr => 1)
        or croak "fault proxy: listen: $!";
    socketpair(my $ctl_parent, my $ctl_child, AF_UNIX, SOCK_STREAM, PF_UNSPEC)
        or croak "fault proxy: socketpair: $!";
    my $pid = fork;
    croak "fault proxy: fork: $!" unless defined $pid;
    if (!$pid) {
        setpgid(0, 0);
        $SIG{$_} = 'DEFAULT' for qw(INT TERM CHLD);
        $SIG{PIPE} = 'IGNORE';
        close $ctl_parent;
        my $rc = eval { _serve($listen, $ctl_child, $thost, $tp); 0 } // do {
            print STDERR "fault proxy: $@";
            1;
        };
        _exit($rc);    # no END blocks of the test in the child
    }
    setpgid($pid, $pid);
    close $ctl_child;
    my $self = bless { pid => $pid, port => $listen->sockport,
        ctl => $ctl_parent }, $class;
    close $listen;
    ZkLock::Test::register_pid($pid, 'fault_proxy');
    return $self;
}

sub port  { $_[0]{port} }
sub pid   { $_[0]{pid} }
sub hosts { "127.0.0.1:$_[0]{port}" }

# One command line, one answer line (JSON).
sub _command {
    my ($self, $cmd) = @_;
    croak 'fault proxy stopped' unless $self->{ctl};
    my $fh = $self->{ctl};
    syswrite($fh, "$cmd\n") or croak "fault proxy: write: $!";
    my ($buf, $sel) = ('', IO::Select->new($fh));
    while ($buf !~ /\n/) {
        croak "fault proxy: no answer to '$cmd'" unless $sel->can_read(10);
        my $n = sysread($fh, $buf, 65536, length $buf);
        croak 'fault proxy: exited' unless $n;
    }
    return $JSON->decode($buf);
}

sub blackhole {
    my ($self, %opt) = @_;
    my $r = $self->_command(sprintf 'blackhole %s %s',
        $opt{close_after} // 0.3, $opt{max} // 10);
    return $r->{started};
}

sub cut {
    my ($self, $seconds) = @_;
    return $self->_command("cut $seconds")->{started};
}

sub partition {
    my ($self, $seconds) = @_;
    return $self->_command("partition $seconds")->{started};
}

sub stats { $_[0]->_command('stats') }

sub stop {
    my ($self) = @_;
    return unless $self->{pid};
    close delete $self->{ctl} if $self->{ctl};
    kill 'TERM', $self->{pid};
    if (!defined ZkLock::Test::proc_wait($self->{pid}, 5)) {
        kill 'KILL', $self->{pid};
        ZkLock::Test::proc_wait($self->{pid}, 5);
    }
    delete $self->{pid};
}

# ------------------------------------------------------------ the child

sub _serve {
    my ($listen, $ctl, $thost, $tport) = @_;
    my $sel = IO::Select->new($listen, $ctl);
    my %by_fd;        # fileno => [ $conn, 'cli' | 'srv' ]
    my %conns;        # id => conn
    my $next_id = 0;
    my ($accepted, @creates, @faults, $fault) = (0);
    my ($cut_until, $part_until) = (0, 0);
    my $ctl_buf = '';

    my $close = sub {
        my ($c) = @_;
        for my $side (qw(cli srv)) {
            my $s = delete $c->{$side} or next;
            delete $by_fd{ fileno $s };
            $sel->remove($s);
            close $s;
        }
        delete $conns{ $c->{id} };
    };

    my $write_all = sub {
        my ($s, $data) = @_;
        while (length $data) {
            my $n = syswrite($s, $data);
            if (!defined $n) {
                next if $! == EINTR;
                return 0;
            }
            substr($data, 0, $n, '');
        }
        return 1;
    };

    my $answer = sub { $write_all->($ctl, $JSON->encode($_[0]) . "\n") };

    while (1) {
        my $timeout;
        if ($fault) {
            my $at = $fault->{close_at} // $fault->{max_at};
            $timeout = $at - time;
            $timeout = 0 if $timeout < 0;
        }
        if ($part_until) {
            my $left = $part_until - time;
            $left = 0 if $left < 0;
            $timeout = $left if !defined $timeout || $left < $timeout;
        }
        my @ready = $sel->can_read($timeout);
        for my $fh (@ready) {
            if ($fh == $listen) {
                my $cli = $listen->accept or next;
                if (time < $cut_until) {
                    close $cli;
                    next;
                }
                if ($part_until) {
                    my $c = { id => ++$next_id, cli => $cli, parted => 1 };
                    $conns{ $c->{id} } = $c;
                    $by_fd{ fileno $cli } = [ $c, 'cli' ];
                    $sel->add($cli);
                    next;
                }
                my $srv = IO::Socket::INET->new(PeerAddr => $thost,
                    PeerPort => $tport, Proto => 'tcp', Timeout => 2);
                if (!$srv) {
                    close $cli;    # server down: the client sees a reset
                    next;
                }
                $accepted++;
                my $c = { id => ++$next_id, cli => $cli, srv => $srv,
                    up => '', down => '', up_started => 0,
                    down_started => 0, pending => {} };
                $conns{ $c->{id} } = $c;
                $by_fd{ fileno $cli } = [ $c, 'cli' ];
                $by_fd{ fileno $srv } = [ $c, 'srv' ];
                $sel->add($cli, $srv);
                next;
            }
            if ($fh == $ctl) {
                my $n = sysread($ctl, $ctl_buf, 65536, length $ctl_buf);
                return unless $n;    # the test is gone
                while ($ctl_buf =~ s/^([^\n]*)\n//) {
                    my @w = split ' ', $1;
                    my $cmd = shift @w // '';
                    if ($cmd eq 'blackhole') {
                        my ($after, $max) = @w;
                        my $now = time;
                        $fault = { started => $now, closed => undef,
                            close_after => $after, max_at => $now + $max,
                            close_at => undef, swallowed_bytes => 0,
                            creates => [],
                            conns => scalar(keys %conns) };
                        $_->{blackholed} = $fault for values %conns;
                        push @faults, $fault;
                        $answer->({ started => $now });
                    } elsif ($cmd eq 'cut') {
                        my $now = time;
                        $close->($_) for values %conns;
                        $cut_until = $now + $w[0];
                        $answer->({ started => $now });
                    } elsif ($cmd eq 'partition') {
                        my $now = time;
                        $_->{parted} = 1 for values %conns;
                        $part_until = $now + $w[0];
                        $answer->({ started => $now });
                    } elsif ($cmd eq 'stats') {
                        $answer->({ accepted => $accepted,
                            open => scalar(keys %conns),
                            mode => $part_until ? 'partition'
                                  : $fault ? 'blackhole' : 'normal',
                            faults => [ map { _public($_) } @faults ],
                            creates => \@creates });
                    } else {
                        $answer->({ error => "unknown command '$cmd'" });
                    }
                }
                next;
            }
            # (closed meanwhile by a cut, earlier in this round)
            my $fd = fileno $fh;
            next unless defined $fd;
            my $e = $by_fd{$fd} or next;
            my ($c, $side) = @$e;
            my $data = '';
            my $n = sysread($fh, $data, 65536);
            next if !defined $n && $! == EINTR;
            if (!$n) {
                $close->($c);
                next;
            }
            next if $c->{parted};
            if ($side eq 'cli') {
                for my $rec (_parse_requests($c, $data)) {
                    push @creates, $rec;
                    shift @creates if @creates > 500;
                }
                $close->($c) unless $write_all->($c->{srv}, $data);
                next;
            }
            my @replies = _parse_replies($c, $data);
            if (my $f = $c->{blackholed}) {
                $f->{swallowed_bytes} += length $data;
                for my $rec (@replies) {
                    $rec->{swallowed} = 1;
                    push @{ $f->{creates} }, $rec;
                    $f->{close_at} //= time + $f->{close_after};
                }
                next;
            }
            $close->($c) unless $write_all->($c->{cli}, $data);
        }
        if ($part_until && time >= $part_until) {
            $close->($_) for grep { $_->{parted} } values %conns;
            $part_until = 0;
        }
        if ($fault && time >= ($fault->{close_at} // $fault->{max_at})) {
            my @victims = grep { $_->{blackholed} } values %conns;
            $close->($_) for @victims;
            $fault->{closed} = time;
            $fault->{closed_conns} = scalar @victims;
            undef $fault;
        }
    }
}

sub _public {
    my ($f) = @_;
    return { map { $_ => $f->{$_} } qw(started closed conns closed_conns
        swallowed_bytes creates) };
}

# A ZooKeeper string (or buffer) at $off: (value, next offset).
sub _zk_string {
    my ($buf, $off) = @_;
    return (undef, $off) if length($buf) < $off + 4;
    my $len = unpack 'l>', substr($buf, $off, 4);
    return (undef, $off + 4) if $len < 0;
    return (substr($buf, $off + 4, $len), $off + 4 + $len);
}

# Complete frames of $c's direction $dir ('up' or 'down'), without the
# first one (connect request / response).
sub _frames {
    my ($c, $dir, $data) = @_;
    $c->{$dir} .= $data;
    my @frames;
    while (length $c->{$dir} >= 4) {
        my $len = unpack 'N', $c->{$dir};
        last if length $c->{$dir} < 4 + $len;
        my $frame = substr($c->{$dir}, 0, 4 + $len, '');
        if (!$c->{"${dir}_started"}) {
            $c->{"${dir}_started"} = 1;
            next;
        }
        push @frames, substr($frame, 4);
    }
    return @frames;
}

# The create requests in $data (client to server): new records.
sub _parse_requests {
    my ($c, $data) = @_;
    my @recs;
    for my $f (_frames($c, 'up', $data)) {
        next if length $f < 8;
        my ($xid, $op) = unpack 'l> l>', $f;
        next unless $CREATE_OP{$op};
        my ($path) = _zk_string($f, 8);
        my $rec = { t => time, conn => $c->{id}, xid => $xid,
            op => $CREATE_OP{$op}, path => $path, err => undef,
            created => undef, reply_t => undef, swallowed => 0 };
        $c->{pending}{$xid} = $rec;
        push @recs, $rec;
    }
    return @recs;
}

# The replies to creates in $data (server to client): their records.
sub _parse_replies {
    my ($c, $data) = @_;
    my @recs;
    for my $f (_frames($c, 'down', $data)) {
        next if length $f < 16;
        my ($xid, $zxid, $err) = unpack 'l> q> l>', $f;
        my $rec = delete $c->{pending}{$xid} or next;
        $rec->{err} = $err;
        $rec->{reply_t} = time;
        ($rec->{created}) = _zk_string($f, 16) if $err == 0;
        push @recs, $rec;
    }
    return @recs;
}

1;
