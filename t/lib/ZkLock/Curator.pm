package ZkLock::Curator;

# Apache Curator 5.4 participants (Debian's jars) for the interop tests,
# and requests run in the background while a test watches ZooKeeper.
#
#   curator_prereqs();                      # skip, or BAIL_OUT under CI
#   my $c = curator($zk, 'mutex', '/path', $hold_ms [, $leases, $wait_ms]);
#   my $ms = curator_expect($c, qr/^ACQUIRED (\d+)/);   # epoch ms, or undef
#   my $bg = bg_get($port, $uri);  my ($status, $end) = bg_wait($bg);
#   curator_after_nginx($c, @bg);  # tests: @bg end 200, $c acquired after
#   nginx_after_curator($c, $r, $what);  # test: $r (http_get) ended after
#                                        # $c said RELEASED

use strict;
use warnings;
use Exporter 'import';
use IO::Select;
use POSIX ();
use Test::More;
use Time::HiRes qw(time);
use ZkLock::Test;

our @EXPORT = qw(curator_prereqs curator curator_expect bg_get bg_wait
    curator_after_nginx nginx_after_curator);

my @JARS = map { "/usr/share/java/$_.jar" }
    qw(curator-recipes curator-framework slf4j-nop);
my $CP;

sub curator_prereqs {
    my $javac = `which javac 2>/dev/null`;
    chomp $javac;

    unless ($javac && !grep { !-f } @JARS) {
        my $why = 'javac or the Curator jars are missing (apt-get install '
            . 'default-jdk-headless libcurator-recipes-java)';
        BAIL_OUT($why) if ($ENV{CI} // '') =~ /^(1|true|yes)$/i;
        plan skip_all => $why;
    }

    my $classes = tempdir('curator');
    my $cp = join ':', @JARS;
    my $out = `$javac -nowarn -d $classes -cp $cp $ZkLock::Test::LIB_DIR/CuratorLock.java 2>&1`;
    $? == 0 or BAIL_OUT("cannot compile t/lib/CuratorLock.java: $out");

    $CP = "$cp:$classes";
}

# java CuratorLock <hosts> <kind> <path> <hold ms> [leases] [wait ms]
sub curator {
    my ($zk, @args) = @_;
    my $hosts = ref $zk ? $zk->hosts : $zk;
    my $pid = open(my $fh, '-|', 'java', '-cp', $CP, 'CuratorLock', $hosts,
        @args) // die "java: $!";
    ZkLock::Test::register_pid($pid, 'curator');
    return { pid => $pid, fh => $fh, sel => IO::Select->new($fh) };
}

# the first capture (or the line) of the next line matching $re; the pipe
# is read with sysread: a buffered readline would hide lines from select
sub curator_expect {
    my ($c, $re, $timeout) = @_;
    my $deadline = time + ($timeout // 30);
    $c->{buf} //= '';

    for (;;) {
        while ($c->{buf} =~ s/^([^\n]*)\n//) {
            my $line = $1;
            return ($1 // $line) if $line =~ $re;
        }

        my $left = $deadline - time;
        return undef if $left <= 0 || !$c->{sel}->can_read($left);
        return undef unless sysread($c->{fh}, $c->{buf}, 4096,
            length $c->{buf});
    }
}

sub bg_get {
    my ($port, $uri) = @_;
    pipe(my $r, my $w) or die "pipe: $!";
    my $pid = fork // die "fork: $!";
    if ($pid == 0) {
        close $r;
        my $res = http_get($port, $uri, timeout => 30);
        print $w "$res->{status} $res->{end}\n";
        close $w;
        POSIX::_exit(0);
    }
    close $w;
    return { pid => $pid, fh => $r };
}

# its status, and in list context the time it ended
sub bg_wait {
    my ($bg) = @_;
    my $line = readline($bg->{fh}) // '0 0';
    waitpid $bg->{pid}, 0;
    my ($status, $end) = split ' ', $line;
    return wantarray ? ($status, $end) : $status;
}

# tests: the nginx requests @bg (bg_get) end with 200, and the Curator
# participant $c acquires only once the first of them has ended
sub curator_after_nginx {
    my ($c, @bg) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    my $at = curator_expect($c, qr/^ACQUIRED (\d+)/);
    my @end = map { my ($st, $end) = bg_wait($_); is($st, 200, 'nginx done');
        $end } @bg;
    my ($first) = sort { $a <=> $b } @end;
    ok($at && $at / 1000 >= $first - 0.05,
        'Curator got a lease only once an nginx holder was done')
        or diag sprintf 'Curator at %.3f, first nginx end %.3f',
            ($at // 0) / 1000, $first;
}

# test: the nginx request $r (http_get's result) ended once the Curator
# participant $c had released.  Curator prints RELEASED once the reply to
# its delete is back; nginx hears of the deletion from the same server at
# the same moment, hence 50 ms of slack.
sub nginx_after_curator {
    my ($c, $r, $what) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    my $released = curator_expect($c, qr/^RELEASED (\d+)/);
    ok($released && $r->{end} * 1000 >= $released - 50, $what)
        or diag sprintf 'nginx done at %.3f, Curator released at %.3f',
            $r->{end}, ($released // 0) / 1000;
}

1;
