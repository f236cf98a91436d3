#!/usr/bin/perl
# Priority classes (issue 39): zk_lock_class <name> shares=<n>
# lendable=<n>% [default], and priority= on a kept semaphore.  Each class
# has a nominal part of the fleet's leases; what it does not lend stays
# idle for it; the rest goes to the classes that want more, by shares
# (src/ngx_zk_lock_class.c), computed alike by every instance from the
# demands on the board (src/ngx_zk_lock_board.c, keep.c).
#
#  1. nginx -t names what is wrong: a class without shares, shares=0 or
#     1001, lendable=101% or without "%", a bad name, a duplicate, two
#     defaults, a ninth class, priority= without zk_lock_class before it,
#     priority= naming no class, priority= without keep=, on zk_rwlock;
#     valid uses pass (a name, a variable, with fair= and without)
#
# Then two nginx x 2 workers, zk_semaphore leases=10 keep=1s
# fair=$arg_tenant priority=$arg_class, classes critical (70 shares,
# lendable 50%), standard (20, 50%, the default) and batch (10, 90%): on
# 10 leases, nominal 7, 2 and 1, of which 3.5, 1 and 0.1 reserved.  A
# backend of 100 ms records every call with its class (the independent
# witness):
#
#  2. batch alone, 12 clients on each nginx (fresh connections, no pause):
#     it gets its nominal lease and what the others lend (3.5 and 1), not
#     their reserved seats: over 5 s after a warm-up, batch holds 4 to
#     6.5 leases on average (5.5 computed, 5 in whole seats), never more
#     than 7 at once (without classes it takes all 10)
#  3. critical comes back, 16 clients on nginx 0 only, beside the batch
#     flood on both: its reserved seats are idle, and it takes them at
#     once; the 3.5 it lent come back as batch's requests end on them,
#     within a quantum (600 ms) or two: it has 7 leases at once within
#     3 s.  Over the next 5 s, critical holds 6.5 leases at least on
#     average (7.9 computed) and batch 0.6 at least (1.1 computed: its
#     nominal lease is not starved); then nginx 0 is reloaded: from 3 s
#     after, critical holds 6 leases at least on average again; never
#     more than 10 at the backend, the reload included.
#     Meanwhile nginx 0's status page shows the lock's classes in order, critical
#     holding 4 at least and its part 5 at least, and the metrics
#     zk_lock_class_held and zk_lock_class_part
#  3b. critical stops, and comes back 3 s later (16 clients on nginx 0
#     again) while its claim and demand of before still decay on the
#     board: it has its nominal 7 leases at once within 1 s (1.1 to 2.1 s
#     before its instance told the others at once, see board_behind())
#  4. an unknown class is the default's: a request with class=nosuch is
#     served (200), and the error log says so once, at warn
#  4b. one path with a directive without priority= (first) and one with
#     it: all served
#  5. once the load is over and the kept leases expired, no ephemeral node
#     is left under the path nor its board
#  6. stream (1 worker): classes high (3 shares) and low (1, the
#     default) in the stream block, two servers on one path with
#     leases=2, priority=low and priority=high: 12 connections of the low
#     one wait, then 3 of the high one come; the high ones start before
#     at least 6 of the low ones that came before them; all served, never
#     more than 2 at the backend; while they wait, the HTTP status page
#     shows the stream lock's classes (under "stream"), and
#     zk_lock_class_held has them with layer="stream"
#  no [alert]/[crit]/[emerg] line, no crashed worker (checked by the
#  harness at done_testing)

use strict;
use warnings;
use Test::More;
use Time::HiRes qw(time sleep);
use JSON::PP ();
use POSIX ();
use lib 't/lib';
use ZkLock::Test;
use ZkLock::Test::Stream;
use ZkLock::Calls;

require_prereqs(qw(nginx zookeeper kazoo module stream));

my $CLASSES = <<'EOF';
    zk_lock_class critical shares=70 lendable=50%;
    zk_lock_class standard shares=20 lendable=50% default;
    zk_lock_class batch    shares=10 lendable=90%;
EOF

subtest 'nginx -t names what is wrong' => sub {
    my $lock = 'zk_semaphore /a leases=4 keep=1s';
    my @bad = (
        [ 'zk_lock_class a;', '', qr/invalid number of arguments/ ],
        [ 'zk_lock_class a lendable=10%;', '', qr/class "a" needs "shares"/ ],
        [ 'zk_lock_class a shares=0;', '', qr/invalid shares "shares=0"/ ],
        [ 'zk_lock_class a shares=1001;', '', qr/invalid shares/ ],
        [ 'zk_lock_class a shares=1 lendable=101%;', '',
          qr/invalid lendable "lendable=101%"/ ],
        [ 'zk_lock_class a shares=1 lendable=50;', '', qr/invalid lendable/ ],
        [ 'zk_lock_class a/b shares=1;', '', qr/invalid class name "a\/b"/ ],
        [ 'zk_lock_class a shares=1; zk_lock_class a shares=2;', '',
          qr/duplicate class "a"/ ],
        [ 'zk_lock_class a shares=1 default; zk_lock_class b shares=1 '
          . 'default;', '', qr/class "b": "a" is the default already/ ],
        [ join(' ', map { "zk_lock_class c$_ shares=1;" } 1 .. 9), '',
          qr/too many classes: 8 at most/ ],
        [ 'zk_lock_class a shares=1 weight=3;', '',
          qr/invalid parameter "weight=3"/ ],
        [ '', "$lock priority=\$arg_c;",
          qr/"priority" needs "zk_lock_class" directives before it/ ],
        [ 'zk_lock_class a shares=1;', "$lock priority=b;",
          qr/invalid priority "priority=b"/ ],
        [ 'zk_lock_class a shares=1;', 'zk_semaphore /a leases=4 priority=a;',
          qr/"priority" needs "keep"/ ],
        [ 'zk_lock_class a shares=1;', 'zk_rwlock /a read keep=1s priority=a;',
          qr/"priority" is for "zk_semaphore" and "zk_mutex"/ ],
    );
    for my $b (@bad) {
        my ($rc, $out) = nginx_test_conf(<<"EOF");
    zk_hosts 127.0.0.1:1;
    $b->[0]
    server { listen 127.0.0.1:%%PORT%%; location / { $b->[1] } }
EOF
        isnt($rc, 0, "refused: $b->[0] $b->[1]");
        like($out, $b->[2], '... naming the problem');
    }
    my ($rc, $out) = nginx_test_conf(<<"EOF");
    zk_hosts 127.0.0.1:1;
$CLASSES
    server {
        listen 127.0.0.1:%%PORT%%;
        location /a { $lock priority=critical; }
        location /b { $lock fair=\$arg_t priority=\$arg_c; }
        location /c { zk_mutex /c keep=1s priority=batch; }
    }
EOF
    is($rc, 0, 'valid uses pass') or diag $out;
};

my $LEASES = 10;
my $CALL_MS = 100;
my $PATH = '/t/prio';
my $KEY = 'prio';

my $zk = zk_start();
my $be = backend_start();

my $conf = <<"EOF";
    zk_hosts %%ZK%%;
    zk_session_timeout 3s;
$CLASSES
    server {
        listen 127.0.0.1:%%PORT%%;
        access_log off;
        location = /status { zk_lock_status_page; }
        location = /metrics { zk_lock_status_page prometheus; }
        location = /p {
            zk_semaphore $PATH leases=$LEASES keep=1s timeout=30s
                         fair=\$arg_tenant priority=\$arg_class;
            proxy_pass http://%%BACKEND%%;
        }
        location = /mix-fair {
            zk_semaphore /t/mix leases=2 keep=1s timeout=30s
                         fair=\$arg_tenant;
            proxy_pass http://%%BACKEND%%;
        }
        location = /mix-class {
            zk_semaphore /t/mix leases=2 keep=1s timeout=30s
                         fair=\$arg_tenant priority=\$arg_class;
            proxy_pass http://%%BACKEND%%;
        }
    }
EOF

my @ng = map { nginx_start($conf, zk => $zk, backend => $be, workers => 2,
    connections => 1024) } 1 .. 2;

sub uri {
    my ($class, $tenant) = @_;
    return "/p?key=$KEY&sleep=$CALL_MS&rec=1&tenant=$tenant"
        . "&class=$class&id=$class";
}

# closed-loop clients of one class, as a load.py run in the background
sub load {
    my ($name, $until, @clients) = @_;
    my $dir = $ng[0]->prefix;
    my ($spec, $out) = map { "$dir/$name.$_.$$" } qw(json out);
    open my $fh, '>', $spec or die "$spec: $!";
    print $fh $ZkLock::Test::JSON->encode({ until => $until,
        clients => [ map { { %$_, gap => 0, timeout => 60 } } @clients ] });
    close $fh;
    my $pid = spawn(cmd => [$ZkLock::Test::PYTHON, 't/lib/load.py',
        '--spec', $spec, '--out', $out]);
    return { pid => $pid, out => $out };
}

sub results {
    my ($l) = @_;
    proc_wait($l->{pid}, 120);
    return -s $l->{out} ? JSON::PP->new->decode(slurp($l->{out})) : [];
}

sub held { return calls_held($be->calls->{$KEY} // [], @_) }

sub reached { return calls_reached($be->calls->{$KEY} // [], @_) }

$be->reset;
my $t0 = time;
my $end = $t0 + 40;

my $batch = load('batch', $end, map { { port => $ng[ $_ % 2 ]->port,
    uri => uri('batch', 'b' . ($_ % 3)) } } 0 .. 23);

# 2. batch alone
sleep $t0 + 9 - time;
my ($b_mean, $b_peak) = held('batch', $t0 + 4, $t0 + 9);
if ($b_mean < 1.2) {
    my @kids = zk_children($zk, $PATH);
    my %board = map { $_ => (zk_get($zk, "$PATH.fair/$_") // {})->{data} }
        zk_children($zk, "$PATH.fair");
    diag explain { nodes => \@kids, board => \%board,
        status => [ map { http_get($_->port, '/status')->{body} } @ng ] };
}
diag(sprintf 'batch alone: %.2f leases on average, %d at most', $b_mean,
    $b_peak);
cmp_ok($b_mean, '>=', 4, 'batch alone has its nominal lease and what '
    . 'the others lend (4 at least on average)');
cmp_ok($b_mean, '<=', 6.5, '... but not their reserved seats (6.5 at most '
    . 'on average)');
cmp_ok($b_peak, '<=', 7, '... never more than 7 at once');

# 3. critical comes back, on nginx 0
my $tc = time;
my $critical = load('critical', $t0 + 30, map { { port => $ng[0]->port,
    uri => uri('critical', "c$_") } } 0 .. 15);

# the status page of nginx 0 meanwhile
sleep $tc + 5 - time;
my $json = JSON::PP->new->decode(http_get($ng[0]->port, '/status')->{body});
my $prom = http_get($ng[0]->port, '/metrics')->{body};

sleep $tc + 8.2 - time;
my $took = reached('critical', $tc, 7);
sub after {
    my $t = reached('critical', $tc, $_[0]);
    return defined $t ? sprintf('%.2f s', $t) : 'never';
}
diag('critical at once: ' . join ', ', map { "$_ after " . after($_) } 1 .. 8)
    if $ENV{TEST_VERBOSE};
diag(sprintf 'critical came back: 3 at once after %s, 7 after %s',
    after(3), after(7));
ok(defined $took && $took <= 3,
    'critical has its nominal 7 leases at once within 3 s of its return');

my ($c_mean) = held('critical', $tc + 3, $tc + 8);
my ($b2_mean) = held('batch', $tc + 3, $tc + 8);
my (undef, $peak) = held(undef, $t0, $tc + 8);
diag(sprintf 'beside batch: critical %.2f, batch %.2f on average; %d at '
    . 'most in all', $c_mean, $b2_mean, $peak);
cmp_ok($c_mean, '>=', 6.5, 'critical holds 6.5 leases at least on '
    . 'average beside the batch flood (7.9 its part: 7 and 0.9 of the 1 '
    . 'standard lends)');
cmp_ok($b2_mean, '>=', 0.6, 'batch keeps its nominal lease (0.6 at least '
    . 'on average)');

# a reload of nginx 0 amid it: its new workers start from no lease
ok($ng[0]->reload, 'nginx 0 reloaded while critical and batch run');
my $tr = time;
sleep $tr + 8.2 - time;
my ($c_after) = held('critical', $tr + 3, $tr + 8);
diag(sprintf 'after the reload: critical %.2f on average', $c_after);
cmp_ok($c_after, '>=', 6, 'critical holds 6 leases at least on average '
    . 'from 3 s after the reload');
($peak) = (held(undef, $t0, $tr + 8))[1];
cmp_ok($peak, '<=', $LEASES, "never more than $LEASES at the backend, the "
    . 'reload included');

my ($lock) = grep { $_->{path} eq $PATH } @{ $json->{locks} };
my @cls = @{ $lock->{fair}{classes} // [] };
is(join(',', map { $_->{class} } @cls), 'critical,standard,batch',
    'the status page shows the classes, in their order');
my ($c) = grep { $_->{class} eq 'critical' } @cls;
diag(sprintf 'nginx 0: %s', join '; ', map { sprintf '%s held %d, '
    . 'waiting %d, part %.3f', @$_{qw(class held waiting part)} } @cls);
ok($c && $c->{held} >= 4 && $c->{part} >= 5,
    '... critical holding most of its part there');
like($prom, qr/^zk_lock_class_held\{path="\/t\/prio",[^}]*class="critical"\}
    \s+([4-9]|\d\d)$/mx, 'and so do the metrics (zk_lock_class_held)');
like($prom, qr/^zk_lock_class_part\{[^}]*class="batch"\}\s+\d+\.\d{3}$/m,
    '... and zk_lock_class_part, in leases');

# 3b. critical back after a pause of 3 s, what it wanted before still
# decaying on the board
sleep $t0 + 33 - time if time < $t0 + 33;
my $tb = time;
my $again = load('critical2', $tb + 4, map { { port => $ng[0]->port,
    uri => uri('critical', "c$_") } } 0 .. 15);
sleep $tb + 4.2 - time;
my $back = reached('critical', $tb, 7);
diag(sprintf 'critical back after a pause: 7 after %s',
    defined $back ? sprintf('%.2f s', $back) : 'never');
ok(defined $back && $back <= 1, 'critical back after a pause of 3 s has '
    . 'its nominal 7 leases at once within 1 s');

my @crit = (@{ results($critical) }, @{ results($again) });
my @all = (@{ results($batch) }, @crit);
my @lat = sort { $a <=> $b } map { $_->{end} - $_->{start} }
    grep { $_->{start} >= $tc + 3 && $_->{end} < $tc + 8 } @crit;
diag(sprintf 'critical requests: median %.0f ms, 90th %.0f ms (the call '
    . 'is %d ms)', 1000 * ($lat[@lat / 2] // 0),
    1000 * ($lat[int(0.9 * @lat)] // 0), $CALL_MS) if @lat;
my @bad = grep { $_->{status} != 200 } @all;
is(scalar @bad, 0, scalar(@all) . ' requests, all 200')
    or diag explain [ @bad[0 .. ($#bad < 4 ? $#bad : 4)] ];

# 4. an unknown class
is(http_get($ng[1]->port, uri('nosuch', 'x'))->{status}, 200,
    'an unknown class is served, as the default class');
my $log = slurp($ng[1]->prefix . '/logs/error.log');
my @said = $log =~ /\[warn\].*no class "nosuch", the default class "standard"/g;
is(scalar @said, 1, 'the error log says so once, at warn');

# 4b. one path, a directive without priority= first, then one with it
my $mix = http_parallel([ map { [ $ng[1]->port, $_ ] }
    (map { "/mix-fair?key=mix&sleep=300&tenant=t$_" } 1 .. 3),
    (map { "/mix-class?key=mix&sleep=100&tenant=u&class=critical" } 1 .. 3)
], stagger => 0.05, timeout => 20);
is(scalar(grep { $_->{status} == 200 } @$mix), 6, 'one path, with and '
    . 'without priority=: all served');

# 5. nothing left behind
no_ephemerals($zk, $PATH, 'no node left under the path', 10);
no_ephemerals($zk, "$PATH.fair", 'nor under its board', 10);

subtest 'stream' => sub {
    my ($low, $high) = (free_port(), free_port());
    my $lock = 'zk_semaphore /st/prio leases=2 keep=5s timeout=20s';
    my $ng = nginx_start(stream_http(), zk => $zk, backend => $be,
        workers => 1,
        stream => "    zk_lock_class high shares=3;\n"
            . "    zk_lock_class low shares=1 default;\n"
            . stream_conf('%%ZK%%', $low => "$lock priority=low;",
                          $high => "$lock priority=high;"));
    ok(wait_for(sub { http_get($high, '/c?key=sp-warm')->{status} == 200 },
                15), 'served');

    my @req = map { [ $low, "/c?key=sp&sleep=300&rec=1&id=low-$_" ] } 1 .. 12;
    push @req, map { [ $high, '/c?key=sp&sleep=300&rec=1&id=high' ] } 1 .. 3;
    my $bg = http_parallel_bg(\@req, stagger => 0.02, timeout => 30);

    my ($entry, $metrics);
    wait_for(sub {
        my $st = eval { $ZkLock::Test::JSON->decode(
            http_get($ng->port, '/zk-status')->{body}) } // {};
        ($entry) = grep { $_->{path} eq '/st/prio' } @{ $st->{stream} // [] };
        $metrics = http_get($ng->port, '/zk-metrics')->{body} // '';
        my ($h) = grep { $_->{class} eq 'high' }
            @{ $entry->{fair}{classes} // [] };
        $h && $h->{held} + $h->{waiting} >= 1;
    }, 4, 0.1);
    my $res = http_parallel_collect($bg, 40);
    is(scalar(grep { $_->{status} == 200 } @$res), 15, 'all served');
    is(join(',', map { $_->{class} } @{ $entry->{fair}{classes} // [] }),
       'high,low', 'the status page: the stream lock\'s classes')
        or diag explain $entry;
    like($metrics, qr/^zk_lock_class_held\{path="\/st\/prio",
        type="semaphore",layer="stream",class="high"\}\ \d+$/mx,
        '... zk_lock_class_held with layer="stream"');
    my @c = @{ $be->calls->{sp} // [] };
    my ($last) = grep { $c[$_][3] eq 'high' } reverse 0 .. $#c;
    cmp_ok(defined $last ? $#c - $last : 0, '>=', 6,
        'the high class\'s connections started before most of the low ones');
    my ($mean, $peak) = calls_held(\@c, undef, 0, 9e9);
    cmp_ok($peak, '<=', 2, "never more than 2 at the backend ($peak)");
    $ng->stop;
};

done_testing();
