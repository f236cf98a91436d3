#!/usr/bin/perl
# Wire compatibility with Apache Curator 5.4 (Debian's jars): a Curator
# participant and nginx requests on the same path exclude each other, and
# queue together in one FIFO order.

use strict;
use warnings;
use Test::More;
use IO::Handle;
use POSIX ();
use IO::Select;
use Time::HiRes qw(time sleep);
use lib 't/lib';
use ZkLock::Test;

require_prereqs(qw(nginx zookeeper kazoo module));

my @jars = map { "/usr/share/java/$_.jar" }
    qw(curator-recipes curator-framework slf4j-nop);
my $javac = `which javac 2>/dev/null`;
chomp $javac;

unless ($javac && !grep { !-f } @jars) {
    my $why = 'javac or the Curator jars are missing '
        . '(apt-get install default-jdk-headless libcurator-recipes-java)';
    BAIL_OUT($why) if $ENV{CI};
    plan skip_all => $why;
}

my $classes = tempdir('curator');
my $cp = join ':', @jars;
my $out = `$javac -nowarn -d $classes -cp $cp t/lib/CuratorLock.java 2>&1`;
$? == 0 or BAIL_OUT("cannot compile t/lib/CuratorLock.java: $out");
$cp .= ":$classes";

my $zk = zk_start();
my $be = backend_start();

my $ng = nginx_start(<<'EOF', zk => $zk, backend => $be);
    zk_hosts %%ZK%%;

    server {
        listen 127.0.0.1:%%PORT%%;

        location /m {
            zk_mutex /c/mutex timeout=20s;
            proxy_pass http://%%BACKEND%%;
        }

        location /s {
            zk_semaphore /c/sem leases=2 timeout=20s;
            proxy_pass http://%%BACKEND%%;
        }

        location /read {
            zk_rwlock /c/rw read timeout=20s;
            proxy_pass http://%%BACKEND%%;
        }

        location /write {
            zk_rwlock /c/rw write timeout=20s;
            proxy_pass http://%%BACKEND%%;
        }
    }
EOF

ok(wait_for(sub { $ng->error_log =~ /session 0x\S+ connected/ }, 15),
    'nginx is connected');

# a Curator participant in the background; its lines come with their time
sub curator {
    my (@args) = @_;
    my $pid = open(my $fh, '-|', 'java', '-cp', $cp, 'CuratorLock',
        $zk->hosts, @args) // die "java: $!";
    ZkLock::Test::_register($pid, "curator");
    return { pid => $pid, fh => $fh, sel => IO::Select->new($fh) };
}

sub expect {
    my ($c, $re, $timeout) = @_;
    my $deadline = time + ($timeout // 30);
    while (time < $deadline) {
        next unless $c->{sel}->can_read($deadline - time);
        my $line = readline($c->{fh});
        return undef unless defined $line;
        return ($1 // $line) if $line =~ $re;
    }
    return undef;
}

sub no_nodes_left {
    ok(wait_for(sub { !zk_ephemerals($zk, '/c') }, 5), "$_[0]: no node left")
        or diag explain [zk_ephemerals($zk, '/c')];
}

###############################################################################

subtest 'a Curator InterProcessMutex holder blocks nginx' => sub {
    $be->reset;
    my $c = curator('mutex', '/c/mutex', 2000);
    ok(expect($c, qr/^ACQUIRED (\d+)/), 'Curator holds the mutex');

    my $r = http_get($ng->port, '/m?key=cm', timeout => 20);
    my $released = expect($c, qr/^RELEASED (\d+)/);

    is($r->{status}, 200, 'the nginx request gets it afterwards');
    ok($released && $r->{end} * 1000 >= $released,
        'not before Curator released it');
    ok($r->{time} > 0.5, 'it did wait');
    no_nodes_left('Curator first');
};

subtest 'an nginx holder blocks a Curator InterProcessMutex' => sub {
    $be->reset;
    my $bg = fork_get('/m?key=mc&sleep=2000');
    ok(wait_for(sub { $be->stats('mc')->{inflight} == 1 }, 10),
        'nginx holds the mutex');
    my $t_held = time;

    my $c = curator('mutex', '/c/mutex', 0);
    my $acquired = expect($c, qr/^ACQUIRED (\d+)/);
    my $r = wait_child($bg);

    is($r, 200, 'the nginx request succeeded');
    ok($acquired && $acquired / 1000 >= $t_held + 1.5,
        'Curator got the mutex only once nginx was done')
        or diag sprintf 'acquired %.2f s after nginx took it',
            ($acquired // 0) / 1000 - $t_held;
    no_nodes_left('nginx first');
};

subtest 'InterProcessSemaphore (v1) and zk_semaphore share the leases' => sub {
    $be->reset;
    my $c = curator('semaphore', '/c/sem', 4000, 2);
    ok(expect($c, qr/^ACQUIRED (\d+)/), 'Curator holds one of 2 leases');

    my $res = http_parallel([ map { [$ng->port, "/s?key=cs&sleep=600&id=$_"] }
        1 .. 3 ], timeout => 30);

    is(scalar(grep { $_->{status} == 200 } @$res), 3, 'nginx requests succeed');
    is($be->stats('cs')->{max}, 1, 'nginx got one lease at a time');
    ok(expect($c, qr/^RELEASED/), 'Curator released');
    no_nodes_left('semaphore');
};

subtest 'one FIFO queue for Curator and nginx' => sub {
    $be->reset;
    my $holder = curator('mutex', '/c/mutex', 1500);
    ok(expect($holder, qr/^ACQUIRED/), 'a Curator holder');

    my $n1 = fork_get('/m?key=fifo&id=n1&sleep=300');
    ok(wait_for(sub { zk_children($zk, '/c/mutex') == 2 }, 5), 'nginx queues');

    my $c2 = curator('mutex', '/c/mutex', 300);
    ok(expect($c2, qr/^READY/), 'a second Curator client');
    ok(wait_for(sub { zk_children($zk, '/c/mutex') == 3 }, 5),
        'it queues behind nginx');

    my $n3 = fork_get('/m?key=fifo&id=n3&sleep=300');
    ok(wait_for(sub { zk_children($zk, '/c/mutex') == 4 }, 5),
        'nginx queues again');

    my $c2_at = expect($c2, qr/^ACQUIRED (\d+)/);
    my ($s1, $end1) = wait_child($n1);
    my ($s3, $end3) = wait_child($n3);

    is($s1, 200, 'first nginx waiter served');
    is($s3, 200, 'second nginx waiter served');
    is_deeply($be->stats('fifo')->{order}, ['n1', 'n3'], 'nginx order');
    ok($c2_at && $c2_at / 1000 >= $end1 - 0.05 && $c2_at / 1000 <= $end3,
        'the Curator waiter got the lock between the two nginx waiters')
        or diag "n1 ended $end1, Curator at " . ($c2_at // 0) / 1000
            . ", n3 ended $end3";
    no_nodes_left('fifo');
};

subtest 'InterProcessReadWriteLock and zk_rwlock' => sub {
    $be->reset;

    # a Curator reader shares with nginx readers
    my $cr = curator('read', '/c/rw', 1500);
    ok(expect($cr, qr/^ACQUIRED/), 'Curator holds a read lock');
    my $r = http_get($ng->port, '/read?key=rw', timeout => 20);
    is($r->{status}, 200, 'an nginx reader');
    ok($r->{time} < 1, 'shares it at once');
    ok(expect($cr, qr/^RELEASED/), 'Curator reader released');

    # a Curator writer holds nginx readers back
    my $cw = curator('write', '/c/rw', 1500);
    ok(expect($cw, qr/^ACQUIRED/), 'Curator holds the write lock');
    $r = http_get($ng->port, '/read?key=rw', timeout => 20);
    my $released = expect($cw, qr/^RELEASED (\d+)/);
    is($r->{status}, 200, 'the nginx reader gets in');
    ok($released && $r->{end} * 1000 >= $released, 'after the writer left');

    # nginx readers hold a Curator writer back
    my $bg = fork_get('/read?key=rw2&sleep=2000');
    ok(wait_for(sub { $be->stats('rw2')->{inflight} == 1 }, 10),
        'an nginx reader holds');
    my $t_held = time;
    my $cw2 = curator('write', '/c/rw', 0);
    my $acquired = expect($cw2, qr/^ACQUIRED (\d+)/);
    is(wait_child($bg), 200, 'the reader finished');
    ok($acquired && $acquired / 1000 >= $t_held + 1.5,
        'the Curator writer waited for it');
    no_nodes_left('rwlock');
};

unlike($ng->error_log, qr/\[(alert|crit|emerg)\]/, 'no alerts');

done_testing();


# a request in a child process; wait_child returns its status
sub fork_get {
    my ($uri) = @_;
    pipe(my $r, my $w) or die;
    my $pid = fork // die;
    if ($pid == 0) {
        close $r;
        my $res = http_get($ng->port, $uri, timeout => 30);
        print $w "$res->{status} $res->{end}\n";
        close $w;
        POSIX::_exit(0);
    }
    close $w;
    return { pid => $pid, fh => $r };
}

# its status, and in list context the time it ended
sub wait_child {
    my ($c) = @_;
    my $line = readline($c->{fh}) // '0 0';
    waitpid $c->{pid}, 0;
    my ($status, $end) = split ' ', $line;
    return wantarray ? ($status, $end) : $status;
}
