#!/usr/bin/perl
# zk_lock_status_page: one instance, 2 workers, counts added up across them
#
#  1. JSON: both workers with their session (id as logged, connected,
#     server); per lock directive (named by its path as configured) the
#     totals of a known sequence: acquired, timeouts, rejected, and none
#     unreachable or let go at jeopardy; the wait histogram is cumulative
#     and ends at the count
#  2. while requests hold and wait: held and waiting gauges, summed over
#     the workers, then back to 0
#  3. Prometheus text: every line parsed; HELP and TYPE before each
#     family's samples; counters end in _total; the same numbers as JSON;
#     ?format= switches formats, a bad one is a 400
#  4. each worker's session timeout in force, as the server granted it:
#     zk_session_timeout's default, and one above the server's maximum cut
#     to it (JSON session_timeout_ms, zk_lock_session_timeout_seconds)

use strict;
use warnings;
use Test::More;
use Time::HiRes qw(time sleep);
use JSON::PP ();
use lib 't/lib';
use ZkLock::Test;

require_prereqs(qw(nginx zookeeper kazoo module));

my $zk = zk_start();
my $be = backend_start();

my $ng = nginx_start(<<'EOF', zk => $zk, backend => $be);
    zk_hosts %%ZK%%;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /m {
            zk_mutex /st/m timeout=1s max_waiting=2;
            proxy_pass http://%%BACKEND%%;
        }
        location /s {
            zk_semaphore /st/s/$arg_k leases=2 timeout=5s;
            proxy_pass http://%%BACKEND%%;
        }
        location = /status  { zk_lock_status_page; }
        location = /metrics { zk_lock_status_page prometheus; }
    }
EOF
ok(sessions_connected($ng), 'every worker has a session');

sub status {
    my $r = $ng->get('/status');
    is($r->{headers}{'content-type'}, 'application/json', 'JSON')
        if $_[0];
    return JSON::PP->new->decode($r->{body});
}

sub lock_of {
    my ($st, $path) = @_;
    my ($l) = grep { $_->{path} eq $path } @{ $st->{locks} };
    return $l;
}

subtest 'JSON: workers and totals' => sub {
    for (1 .. 4) {
        is($ng->get('/m?key=m')->{status}, 200, "mutex request $_");
    }
    my $h = zk_hold($zk, '/st/m', name => '_c_00000000-0000-4000-8000-'
        . '000000000003-lock-', seconds => 60);
    # a round trip apart: an arrival within the first round trip of its
    # worker's queue waits for nobody yet (see max_waiting= in the README)
    my $res = http_parallel([ map { [ $ng->port, '/m?key=m' ] } 1 .. 6 ],
        timeout => 10, stagger => 0.05);
    $h->release;
    my %by;
    $by{ $_->{status} }++ for @$res;
    note explain \%by;

    my $st = status(1);
    my @w = @{ $st->{workers} };
    is(scalar @w, 2, 'two workers');
    my %logged = map { lc $_ => 1 }
        $ng->error_log =~ /zookeeper session 0x([0-9a-f]+) connected/g;
    for my $w (@w) {
        ok($w->{connected}, "worker $w->{worker}: connected");
        my ($id) = $w->{session} =~ /^0x([0-9a-f]+)$/;
        ok($id && $logged{$id}, "worker $w->{worker}: session $w->{session}"
            . ' as logged');
        is($w->{server}, $zk->hosts, "worker $w->{worker}: server");
        is($w->{session_timeout_ms}, 10000, "worker $w->{worker}: the "
            . 'session timeout granted, zk_session_timeout\'s default');
        ok(grep({ $_ == $w->{pid} } $ng->worker_pids), 'a live pid');
    }

    my $m = lock_of($st, '/st/m');
    ok($m, 'the mutex, by its path') or return;
    is($m->{type}, 'mutex', 'type');
    is($m->{acquired}, 4, 'acquired 4');
    # 6 requests behind a foreign holder: per worker at most 2 wait
    is($m->{timeouts} + $m->{rejected}, 6, 'the 6 others: timeouts + '
        . 'rejected');
    cmp_ok($m->{rejected}, '>=', 2, 'some rejected (max_waiting=2)');
    # ZooKeeper was there throughout: no wait ended because it was not,
    # no hold was let go for its silence (issue 37, item 4)
    is($m->{unreachable}, 0, 'unreachable 0');
    is($m->{jeopardy}, 0, 'jeopardy 0');
    is($m->{wait}{count}, 4, 'histogram count: the acquired ones');
    my @b = map { $m->{wait}{buckets}{$_} }
        qw(0.001 0.005 0.01 0.025 0.05 0.1 0.25 0.5 1 2.5 5 10 +Inf);
    is_deeply([ sort { $a <=> $b } @b ], \@b, 'cumulative buckets');
    is($b[-1], 4, '+Inf is the count');
    ok(lock_of($st, '/st/s/$arg_k'), 'a path with variables, unexpanded');
};

subtest 'gauges while holding and waiting' => sub {
    my $bg = http_parallel_bg([ map { [ $ng->port,
        "/s?k=a&key=s&sleep=1500" ] } 1 .. 5 ], timeout => 20);
    my $s;
    ok(wait_for(sub {
        $s = lock_of(status(), '/st/s/$arg_k');
        $s->{held} == 2 && $s->{waiting} == 3 }, 5, 0.05),
        'held 2 and waiting 3, over both workers')
        or diag explain $s;
    http_parallel_collect($bg, 20);
    $s = lock_of(status(), '/st/s/$arg_k');
    is($s->{held}, 0, 'held 0 afterwards');
    is($s->{waiting}, 0, 'waiting 0 afterwards');
    is($s->{acquired}, 5, 'acquired 5');
};

subtest 'Prometheus' => sub {
    my $r = $ng->get('/metrics');
    like($r->{headers}{'content-type'}, qr{^text/plain; version=0\.0\.4},
        'exposition format content type');
    my (%help, %type, %value, @bad);
    for my $line (split /\n/, $r->{body}) {
        if ($line =~ /^# HELP (\w+) \S/) {
            $help{$1} = 1;
        } elsif ($line =~ /^# TYPE (\w+) (counter|gauge|histogram)$/) {
            $type{$1} = $2;
        } elsif ($line =~ /^(\w+)\{((?:\w+="(?:[^"\\]|\\.)*",?)*)\} (\d+(?:\.\d+)?)$/) {
            my ($name, $labels, $v) = ($1, $2, $3);
            my $family = $name;
            $family =~ s/_(bucket|sum|count)$// unless $type{$name};
            push @bad, "no TYPE before $line" unless $type{$family};
            push @bad, "no HELP before $line" unless $help{$family};
            push @bad, "counter without _total: $line"
                if ($type{$family} // '') eq 'counter' && $name !~ /_total$/;
            $value{"$name\{$labels\}"} = $v;
        } else {
            push @bad, "unparsed: $line";
        }
    }
    is_deeply(\@bad, [], 'every line parses, families declared');

    my $st = status();
    my $m = lock_of($st, '/st/m');
    is($value{'zk_lock_requests_total{path="/st/m",type="mutex",'
        . 'result="acquired"}'}, $m->{acquired}, 'acquired as in JSON');
    for my $r (qw(jeopardy unreachable)) {
        is($value{'zk_lock_requests_total{path="/st/m",type="mutex",'
            . "result=\"$r\"}"}, $m->{$r}, "result=\"$r\" as in JSON");
    }
    is($value{'zk_lock_wait_seconds_count{path="/st/m",type="mutex"}'},
        $m->{wait}{count}, 'histogram count as in JSON');
    is($value{'zk_lock_wait_seconds_bucket{path="/st/m",type="mutex",'
        . 'le="+Inf"}'}, $m->{wait}{count}, '+Inf bucket');
    is(scalar(grep { /^zk_lock_session_connected\{/ && $value{$_} == 1 }
        keys %value), 2, 'two connected sessions');
    is($type{zk_lock_session_timeout_seconds}, 'gauge',
        'zk_lock_session_timeout_seconds: a gauge');
    for my $w (@{ $st->{workers} }) {
        cmp_ok($value{"zk_lock_session_timeout_seconds{worker=\"$w->{worker}\"}"}
            // -1, '==', $w->{session_timeout_ms} / 1000,
            "worker $w->{worker}'s session timeout as in JSON, in seconds");
    }

    like($ng->get('/status?format=prometheus')->{body},
        qr/^# HELP zk_lock_session_connected /m, '?format=prometheus');
    like($ng->get('/metrics?format=json')->{body},
        qr/^\{"version":"[^"]+","build":"[^"]+","workers":/,
        '?format=json');
    is($ng->get('/status?format=xml')->{status}, 400, 'bad format: 400');
};

# issue 37, item 2: a zk_session_timeout above the server's maximum (20
# ticks: 60 s here) is cut; the page shows the timeout in force
subtest 'the session timeout the server granted' => sub {
    my $ng2 = nginx_start(<<'EOF', zk => $zk, workers => 1);
    zk_hosts %%ZK%%;
    zk_session_timeout 10h;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /m { zk_mutex /st/cut; return 204; }
        location = /status  { zk_lock_status_page; }
        location = /metrics { zk_lock_status_page prometheus; }
    }
EOF
    ok(sessions_connected($ng2), 'connected');
    my $w = JSON::PP->new->decode($ng2->get('/status')->{body})->{workers};
    is($w->[0]{session_timeout_ms}, 60000,
        'JSON: 60000 ms, the server\'s maximum, not 10h');
    like($ng2->get('/metrics')->{body},
        qr/^zk_lock_session_timeout_seconds\{worker="0"\} 60\.000$/m,
        'Prometheus: zk_lock_session_timeout_seconds 60');
    $ng2->stop;
};

no_ephemerals($zk, '/st', 'status');
is_deeply([ grep { /\[(?:alert|crit|emerg)\]/ || /exited on signal/ }
    split /\n/, $ng->error_log ], [], 'no alert/crash lines');

done_testing;
