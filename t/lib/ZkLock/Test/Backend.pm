# The backend that records what is in flight (t/lib/backend.py), made by
# backend_start() of ZkLock::Test, documented there.

package ZkLock::Test;

use strict;
use warnings;

# ----------------------------------------------------------------- backend

sub backend_start {
    my (%opt) = @_;
    require_prereqs('python');
    return ZkLock::Test::Backend->new(%opt);
}

# =================================================================== classes

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
        $self->{pid} = ZkLock::Test::spawn(name => 'backend',
            cmd => [$ZkLock::Test::PYTHON,
                "$ZkLock::Test::LIB_DIR/backend.py", '--port', $self->{port}],
            log => "$self->{dir}/backend.log");
        my $up = ZkLock::Test::wait_for(sub {
            return -1 unless ZkLock::Test::_running($self->{pid});
            return ZkLock::Test::http_get($self->{port}, '/_stats',
                timeout => 2)->{status} == 200;
        }, $opt{timeout} // 15, 0.05);
        return $self if $up && $up != -1;
        my $log = ZkLock::Test::slurp("$self->{dir}/backend.log");
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

# { key => [ [start, end, w, id, hungup], ... ] }: the calls made with rec=1
sub calls { $_[0]->_get_json('/_calls') }

sub reset { $_[0]->_get_json('/_reset'); 1 }

sub stop {
    my ($self) = @_;
    ZkLock::Test::_terminate(delete $self->{pid}, 'TERM', 5) if $self->{pid};
}

1;
