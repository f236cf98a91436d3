#!/usr/bin/perl
# zk_lock_dry_run (issue 27, item 8): every request goes on at once, and
# what the lock would have done is counted fleet-wide on a shadow path
# ("<path>.dry-run"), which neither Curator clients nor the locations that
# enforce the lock see.
#
#  1. two nginx, zk_semaphore leases=2 in dry run: 6 requests at once, all
#     served at once (6 at the backend), 2 ACQUIRED_DRY_RUN and 4
#     WAITED_DRY_RUN across the fleet ($zk_lock_status in the access log,
#     the metrics, a log line per request that would have waited)
#  2. meanwhile a location that enforces the same lock is not slowed by
#     them, and the lock's own path never sees a node of theirs
#  3. a request redirected from a dry-run location to one that enforces
#     the same lock takes the lock there (it waits behind a holder)
#  4. no node left on either path; nginx -t refuses a bad value

use strict;
use warnings;
use Test::More;
use Time::HiRes qw(time sleep);
use lib 't/lib';
use ZkLock::Test;

require_prereqs(qw(nginx zookeeper kazoo python module));

my $zk = zk_start();
my $be = backend_start();

my $conf = <<'EOF';
    zk_hosts %%ZK%%;
    log_format dry "$arg_id $zk_lock_status";
    server {
        listen 127.0.0.1:%%PORT%%;
        location /d {
            zk_semaphore /dr/s leases=2 timeout=5s;
            zk_lock_dry_run on;
            access_log %%PREFIX%%/logs/dry.log dry;
            proxy_pass http://%%BACKEND%%;
        }
        location /e {
            zk_semaphore /dr/s leases=2 timeout=5s;
            add_header X-Wait $zk_lock_wait_time always;
            proxy_pass http://%%BACKEND%%;
        }
        location /dr2 {
            zk_mutex /dr/r timeout=5s;
            zk_lock_dry_run on;
            proxy_intercept_errors on;
            error_page 404 = /enforce;
            proxy_pass http://%%BACKEND%%;
        }
        location /enforce {
            zk_mutex /dr/r timeout=1s;
            zk_lock_status 429;
            add_header X-Lock $zk_lock_status always;
            proxy_pass http://%%BACKEND%%;
        }
        location = /status {
            zk_lock_status_page json;
        }
    }
EOF

my @fleet = map { nginx_start($conf, zk => $zk, backend => $be,
    workers => 1) } 1 .. 2;
ok(sessions_connected(@fleet), 'connected');

subtest 'dry run: all through, counted fleet-wide' => sub {
    $be->reset;
    my $bg = http_parallel_bg([ map { [ $fleet[$_ % 2]->port,
        "/d?key=d&sleep=800&id=$_" ] } 1 .. 6 ], timeout => 10,
        stagger => 0.05);
    ok(wait_for(sub { $be->stats('d')->{inflight} == 6 }, 3),
        'all 6 at the backend at once: nothing waits');
    ok(wait_for(sub { zk_children($zk, '/dr/s.dry-run') == 2 }, 3),
        'the two that would hold keep their shadow nodes');
    is(scalar(zk_children($zk, '/dr/s')), 0, 'the lock\'s path: no node');

    # the enforcing location takes both leases at once meanwhile
    my $res = http_parallel([ map { [ $fleet[0]->port,
        "/e?key=e&sleep=10" ] } 1 .. 2 ], timeout => 10);
    is(scalar(grep { $_->{status} == 200 } @$res), 2, 'enforcing: 200');
    cmp_ok((sort { $b <=> $a } map { $_->{headers}{'x-wait'} // 9999 }
        @$res)[0], '<', 500, '... without waiting for the dry run');

    my $dres = http_parallel_collect($bg, 15);
    is(scalar(grep { $_->{status} == 200 } @$dres), 6, 'dry run: 6 x 200');
    is($be->stats('d')->{max}, 6, 'the backend saw all 6 at once');

    my %status;
    for my $ng (@fleet) {
        for (split /\n/, slurp($ng->prefix . '/logs/dry.log')) {
            my (undef, $st) = split ' ';
            $status{$st}++;
        }
    }
    is($status{ACQUIRED_DRY_RUN} // 0, 2, '2 would have held')
        or diag(explain(\%status));
    is($status{WAITED_DRY_RUN} // 0, 4, '4 would have waited');
    my $lines = 0;
    $lines += () = $_->error_log =~ /zk_semaphore "\/dr\/s" would have waited, dry run/g
        for @fleet;
    is($lines, 4, 'a log line for each that would have waited');

    # at the lock's log level (zk_lock_log_level, "error" by default), as
    # limit_req_dry_run's, saying how full the lock was (issue 37, item 6)
    my @full = map { /(\[\w+\] .*would have waited, dry run: [^,]*),/g }
        map { $_->error_log } @fleet;
    is(scalar(grep { /^\[error\] .*: 2 of 2 leases held while / } @full),
        4, 'each at error, with the leases held')
        or diag(explain(\@full));

    my ($acq, $wait, $dry) = (0, 0, 0);
    for my $ng (@fleet) {
        my $j = $ng->get('/status')->{body};
        ($acq += $1) if $j =~ /"acquired_dry_run":(\d+)/;
        ($wait += $1) if $j =~ /"waited_dry_run":(\d+)/;
        ($dry += $1) if $j =~ /"dry_run":(\d+)/;
    }
    is($dry, 6, 'metrics: 6 in dry run');
    is($acq, 2, 'metrics: 2 would have held');
    is($wait, 4, 'metrics: 4 would have waited');
};

subtest 'redirected to a location that enforces the lock' => sub {
    my $h = zk_hold($zk, '/dr/r', seconds => 60);
    my $r = $fleet[0]->get('/dr2?key=r&status=404');
    is($r->{status}, 429, 'it waited for the holder there, and timed out');
    $h->release;
    $r = $fleet[0]->get('/dr2?key=r&status=404');
    is($r->{status}, 200, 'the holder gone: through');
    is($r->{headers}{'x-lock'}, 'ACQUIRED', '... with the lock');
};

subtest 'no node left' => sub {
    ok(wait_for(sub { !zk_ephemerals($zk, '/dr') }, 5),
        'none on the lock\'s path or the shadow');
};

subtest 'nginx -t' => sub {
    my ($rc, $out) = nginx_test_conf(<<'EOF');
    zk_hosts 127.0.0.1:2181;
    server {
        listen 127.0.0.1:8080;
        location / {
            zk_mutex /x;
            zk_lock_dry_run maybe;
        }
    }
EOF
    isnt($rc, 0, 'zk_lock_dry_run maybe: refused');
    like($out, qr/zk_lock_dry_run/, '... naming the directive')
        or diag($out);
};

done_testing;
