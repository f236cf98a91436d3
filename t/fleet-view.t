#!/usr/bin/perl
# zk_lock_fleet_view: who holds and who waits, fleet-wide, from ZooKeeper
#
# A fleet of two nginx (one worker, two workers) and a Curator client on
# one mutex path:
#  1. JSON, while one request holds and a Curator client and three requests
#     wait, from either nginx: the one holder is the request that the
#     backend has in flight; the waiters in FIFO order, numbered, the
#     Curator node marked as Curator's; host, pid (a worker of the right
#     nginx), since, method and URI path of each request; how long each
#     has waited; the type as configured (a zk_semaphore with one lease is
#     a semaphore)
#  2. a kept lease (keep=) is marked kept; a path from a variable shows in
#     the worker whose request uses it, with its directive's type
#  3. zk_lock_dry_run: the requests on the shadow path are shown under
#     their lock (a literal path and one from a variable), fleet-wide,
#     never as a lock "<path>.dry-run"
#  4. the snapshot is shared: many requests at once, one read a second
#  5. the HTML page in headless Chromium while the queue is there: one
#     table per lock, the holder's row highlighted, the waiting rows
#     numbered in order, the dry run's rows under their lock, redrawn
#     every 2 s from the JSON, nothing fetched from elsewhere (no
#     favicon either, nor an error logged for one); every time on the
#     page an age (held for, waiting for, arrived, read); a foreign
#     node's long data with control bytes escaped and cut, the table
#     within the window
#  6. afterwards the queue drains in the order shown
#  7. held for: since the grant, not since the request came: exact from
#     the nginx whose request it is; from another, at most since the last
#     read that saw it wait
#  7b. fair=: the lock's board ("<path>.fair") with a claim for each
#     nginx that contends, by its instance's prefix, and anybody's node
#     there with its name escaped and no claim; each nginx node with its
#     instance's claim, a foreign node with none; no "fair" on a lock
#     without fair=
#  8. a read that takes too long (replies swallowed by a proxy): the last
#     snapshot after the wait, marked stale; a client that closes while
#     it waits is unlinked
#  9. ZooKeeper down: an answer at once, from the last snapshot, saying
#     the session is down; in Chromium the tables say they are stale, and
#     no row is green

use strict;
use warnings;
use Test::More;
use Time::HiRes qw(time sleep);
use JSON::PP ();
use Sys::Hostname ();
use lib 't/lib';
use ZkLock::Test;
use ZkLock::Curator;
use ZkLock::FaultProxy;

require_prereqs(qw(nginx zookeeper kazoo module chromium));

curator_prereqs();

my $zk = zk_start();
my $be = backend_start();

my $conf = <<'EOF';
    zk_hosts %%ZK%%;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /m/ {
            zk_mutex /fv/m timeout=60s;
            proxy_pass http://%%BACKEND%%;
        }
        location /k/ {
            zk_semaphore /fv/k leases=2 keep=60s timeout=10s;
            proxy_pass http://%%BACKEND%%;
        }
        location /v/ {
            zk_mutex /fv/v/$arg_t timeout=10s;
            proxy_pass http://%%BACKEND%%;
        }
        location /s1/ {
            zk_semaphore /fv/s1 leases=1 timeout=10s;
            proxy_pass http://%%BACKEND%%;
        }
        location /sv/ {
            zk_semaphore /fv/sv/$arg_t leases=1 timeout=10s;
            proxy_pass http://%%BACKEND%%;
        }
        location /a/ {
            zk_mutex /fv/a timeout=30s;
            proxy_pass http://%%BACKEND%%;
        }
        location /d/ {
            zk_mutex /fv/d timeout=10s;
            zk_lock_dry_run on;
            proxy_pass http://%%BACKEND%%;
        }
        location /dv/ {
            zk_mutex /fv/dv/$arg_t timeout=10s;
            zk_lock_dry_run on;
            proxy_pass http://%%BACKEND%%;
        }
        location /f/ {
            zk_mutex /fv/f timeout=1s;
            return 204;
        }
        location /fr/ {
            zk_semaphore /fv/fr leases=2 keep=1s timeout=10s
                         fair=$arg_tenant;
            proxy_pass http://%%BACKEND%%;
        }
        location = /fleet      { zk_lock_fleet_view; }
        location = /fleet.json { zk_lock_fleet_view json; }
    }
EOF

# the page's one format of a time: an age
my $AGE = qr/(?:\d+\.\ds|\d+s|\d+m \d\ds|\d+h \d\dm|\d+d \d+h)/;

# what it must not show: a date, a time of day
my $CLOCK = qr/\d{4}-\d\d-\d\d|\d:\d\d|\b[AP]M\b/;

my $ng1 = nginx_start($conf, zk => $zk, backend => $be, workers => 1);
my $ng2 = nginx_start($conf, zk => $zk, backend => $be, workers => 2);
ok(sessions_connected($ng1, $ng2), 'both nginx connected');

my $JS = JSON::PP->new;

sub view {
    my ($ng, $uri) = @_;
    my $r = $ng->get($uri // '/fleet.json');
    return undef unless $r->{status} == 200;
    return $JS->decode($r->{body});
}

sub lock_in {
    my ($v, $path) = @_;
    return undef unless $v;
    my ($l) = grep { $_->{path} eq $path } @{ $v->{locks} };
    return $l;
}

# the mutex's queue as a view of $ng shows it once it has $n nodes
sub queue_of {
    my ($ng, $n) = @_;
    my $l;
    wait_for(sub {
        my $v = view($ng);
        $l = lock_in($v, '/fv/m');
        $l->{_age_ms} = $v->{age_ms} if $l;
        $l && $l->{participants} == $n }, 15, 0.2);
    return $l;
}

subtest 'empty, and the formats' => sub {
    my $v = view($ng1);
    ok($v, 'JSON') or return;
    is($v->{session}, 'connected', 'session connected');
    is($v->{max_children}, 100, 'the bound on nodes read per path');
    ok(!$v->{stale}, 'a fresh read');
    my $m = lock_in($v, '/fv/m');
    ok($m, 'the literal path is listed before any request') or return;
    is($m->{type}, 'mutex', 'type');
    is($m->{leases}, 1, 'one lease');
    is($m->{participants}, 0, 'nobody');
    is(lock_in($v, '/fv/k')->{type}, 'semaphore', 'the semaphore');
    my $s1 = lock_in($v, '/fv/s1');
    is($s1 && $s1->{type}, 'semaphore',
        'zk_semaphore leases=1: a semaphore, as configured');
    is($s1 && $s1->{leases}, 1, 'of one lease');
    ok(!lock_in($v, '/fv/v/$arg_t'), 'a path with variables is not listed');
    is_deeply([ grep { /dry-run/ } map { $_->{path} } @{ $v->{locks} } ],
        [], 'no shadow path of a dry run as a lock');
    is($m->{dry_run}{path}, '/fv/m.dry-run', 'the shadow path, beside it');
    is($m->{dry_run}{participants}, 0, 'nobody in dry run');

    my $r = $ng1->get('/fleet');
    is($r->{status}, 200, 'HTML');
    like($r->{headers}{'content-type'}, qr{^text/html}, 'text/html');
    unlike($r->{body}, qr{(?:src|href)=["']?(?:https?:)?//}i,
        'no external asset');
    is($ng1->get('/fleet?format=json')->{headers}{'content-type'},
        'application/json', '?format=json');
    is($ng1->get('/fleet.json?format=xml')->{status}, 400, 'a bad format');
};

subtest 'nginx -t' => sub {
    my ($rc, $out) = nginx_test_conf(<<'EOF');
    zk_hosts 127.0.0.1:2181;
    server { listen 127.0.0.1:%%PORT%%;
        location = /f { zk_lock_fleet_view xml; } }
EOF
    isnt($rc, 0, 'a bad format is refused');
    like($out, qr/invalid format "xml", must be "html" or "json"/, 'named');

    ($rc, $out) = nginx_test_conf(<<'EOF');
    zk_hosts 127.0.0.1:2181;
    server { listen 127.0.0.1:%%PORT%%;
        location = /f { zk_lock_fleet_view; zk_mutex /x; } }
EOF
    isnt($rc, 0, 'a lock where the view is: refused');
    like($out, qr/the fleet view is never gated/, 'said why');

    ($rc, $out) = nginx_test_conf(<<'EOF');
    zk_hosts 127.0.0.1:2181;
    server { listen 127.0.0.1:%%PORT%%;
        zk_mutex /x;
        location = /f { zk_lock_fleet_view json; } }
EOF
    is($rc, 0, 'a lock around it: nginx -t passes') or diag $out;
};

$be->reset;
my @bg;

# the holder, then a Curator client, then three requests from both nginx,
# each queued once the one before is
my %sent = (1 => time);
push @bg, bg_get($ng1->port, '/m/1?key=m&id=1&rec=1&sleep=25000');
ok(wait_for(sub { my $c = $be->calls->{m}; $c && @$c == 1 }, 15, 0.05),
    'request 1 holds: the backend has it');

$sent{curator} = time;
my $cur = curator($zk, 'mutex', '/fv/m', 200);
ok(queue_of($ng1, 2), 'the Curator client queued');
my %queued = (curator => time);

my @order = ([ $ng2, 2 ], [ $ng1, 3 ], [ $ng2, 4 ]);
for my $o (@order) {
    my ($ng, $id) = @$o;
    $sent{$id} = time;
    push @bg, bg_get($ng->port, "/m/$id?key=m&id=$id&rec=1&sleep=300");
    ok(queue_of($ng1, $id + 1), "request $id queued");
    $queued{$id} = time;
}

my %pids = (1 => [ $ng1->worker_pids ], 2 => [ $ng2->worker_pids ]);
my %by_id = (1 => 1, 2 => 2, 3 => 1, 4 => 2);
my $host = Sys::Hostname::hostname();

subtest 'JSON: the holder and the waiters, from either nginx' => sub {
    for my $ng ($ng1, $ng2) {
        my $l = queue_of($ng, 5);
        ok($l, "nginx on port " . $ng->port . ': 5 nodes') or next;

        is($l->{holders}, 1, 'one holder');
        is($l->{waiting}, 4, 'four waiting');
        ok(!$l->{truncated}, 'all shown');

        my @n = @{ $l->{nodes} };
        is_deeply([ map { $_->{position} } @n ], [ 1 .. 5 ], 'positions');
        my @seq = map { $_->{seq} } @n;
        is_deeply(\@seq, [ sort { $a <=> $b } @seq ],
            'in the order of the sequence numbers');

        # the one that holds is the one the backend serves
        my $h = $n[0];
        is($h->{state}, 'holding', 'the first holds');
        is($h->{client}, 'nginx', 'an nginx request');
        is($h->{uri}, '/m/1', 'request 1');
        is($h->{method}, 'GET', 'its method');
        is($h->{host}, $host, 'its host');
        ok(grep({ $_ == $h->{pid} } @{ $pids{1} }), 'a worker of nginx 1');
        like($h->{since}, qr/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d$/,
            'since: ISO 8601');
        my @inflight = grep { !defined $_->[1] } @{ $be->calls->{m} };
        is_deeply([ map { $_->[3] } @inflight ], [ 1 ],
            'the backend has request 1 in flight, and only it');

        is_deeply([ map { $_->{state} } @n[1 .. 4] ], [ ('waiting') x 4 ],
            'the others wait');
        is_deeply([ map { $_->{queue} } @n[1 .. 4] ], [ 1 .. 4 ],
            'numbered in FIFO order');
        is($n[1]{client}, 'curator', 'the Curator client, second');
        is($n[1]{kind}, 'lock', 'a Curator mutex node');
        ok(defined $n[1]{data} && !defined $n[1]{uri},
            'its data as Curator wrote it');
        is_deeply([ map { $_->{uri} } @n[2 .. 4] ], [ '/m/2', '/m/3', '/m/4' ],
            'then requests 2, 3 and 4');
        for my $i (2 .. 4) {
            my $id = $i;
            ok(grep({ $_ == $n[$i]{pid} } @{ $pids{ $by_id{$id} } }),
                "request $id: a worker of nginx $by_id{$id}");
        }
        ok(!grep({ $_->{kept} } @n), 'nothing kept');

        # how long each has waited: since its node was made, which was
        # after it was sent and before a view showed it
        my $now = time;
        my @who = ('curator', 2, 3, 4);
        my @ok = grep {
            my $w = ($n[$_]{waiting_for_ms} // -1e9) + $l->{_age_ms};
            $w <= ($now - $sent{ $who[ $_ - 1 ] }) * 1000 + 100
                && $w >= ($now - $queued{ $who[ $_ - 1 ] }) * 1000 - 100
            } 1 .. 4;
        is_deeply(\@ok, [ 1 .. 4 ], 'waiting for: since each queued')
            or diag explain [ map { $_->{waiting_for_ms} } @n ];
        ok(!defined $n[1]{held_for_ms}, 'a waiter has no held for');
        ok(defined $h->{held_for_ms}, 'the holder: held for');
    }
};

subtest 'a kept lease, a path from a variable' => sub {
    is($ng1->get('/k/1?key=k')->{status}, 200, 'a request on keep=');
    my $l;
    ok(wait_for(sub {
        $l = lock_in(view($ng2), '/fv/k');
        $l && $l->{participants} == 1 }, 10, 0.2), 'its lease stays')
        or return;
    my $n = $l->{nodes}[0];
    ok($n->{kept}, 'kept');
    is($n->{state}, 'holding', 'holding');
    is($n->{kept_for}, '60000ms', 'for how long');
    ok(!defined $n->{uri}, 'no request');
    ok(grep({ $_ == $n->{pid} } @{ $pids{1} }), 'a worker of nginx 1');

    my $bg = bg_get($ng1->port, '/v/x?t=a&key=v&sleep=3000');
    ok(wait_for(sub {
        my $v = lock_in(view($ng1), '/fv/v/a');
        $v && $v->{participants} == 1 }, 10, 0.2),
        'a path from a variable, live in the worker');
    my $v = lock_in(view($ng1), '/fv/v/a');
    is($v->{source}, 'live', 'marked live');
    is($v->{type}, 'mutex', 'a mutex');
    is($v->{nodes}[0]{uri}, '/v/x', 'its holder');
    is(bg_wait($bg), 200, 'done');

    $bg = bg_get($ng1->port, '/sv/x?t=b&key=sv&sleep=3000');
    ok(wait_for(sub {
        $v = lock_in(view($ng1), '/fv/sv/b');
        $v && $v->{participants} == 1 }, 10, 0.2),
        'a zk_semaphore leases=1 from a variable')
        or return;
    is($v->{type}, 'semaphore', "its directive's type");
    is(bg_wait($bg), 200, 'done');
};

my @dry;

subtest 'dry run: under the lock, fleet-wide' => sub {
    # held through the page's test below
    push @dry, bg_get($ng1->port, '/d/1?key=d&sleep=20000');
    push @dry, bg_get($ng1->port, '/dv/x?t=a&key=dv&sleep=20000');

    my ($v, $d);
    ok(wait_for(sub {
        $v = view($ng1);
        $d = lock_in($v, '/fv/d');
        my $dv = lock_in($v, '/fv/dv/a');
        $d && $d->{dry_run}{participants} == 1
            && $dv && $dv->{dry_run}{participants} == 1 }, 10, 0.2),
        'both dry runs shown') or return;

    is($d->{participants}, 0, 'the lock itself: nobody (a dry run)');
    is($d->{dry_run}{path}, '/fv/d.dry-run', 'the shadow path');
    my $n = $d->{dry_run}{nodes}[0];
    is($n->{state}, 'holding', 'would hold');
    is($n->{uri}, '/d/1', 'the request');
    ok(defined $n->{held_for_ms}, 'held for');
    is_deeply([ grep { /dry-run/ } map { $_->{path} } @{ $v->{locks} } ],
        [], 'no lock "<path>.dry-run"');

    my $dv = lock_in($v, '/fv/dv/a');
    is($dv->{source}, 'live', 'a path from a variable: live');
    is($dv->{type}, 'mutex', 'its type');
    is($dv->{participants}, 0, 'nobody on the lock itself');
    is($dv->{dry_run}{nodes}[0]{uri}, '/dv/x', 'the request, under it');

    # from the other nginx, any worker: the literal path's
    ok(wait_for(sub {
        my $x = lock_in(view($ng2), '/fv/d');
        $x && $x->{dry_run}{participants} == 1
            && ($x->{dry_run}{nodes}[0]{uri} // '') eq '/d/1' }, 10, 0.2),
        'seen from nginx 2');
};

# a foreign client's node with long data, control bytes in it
my $foreign = zk_create($zk, '/fv/f/' . curator_name(), sequence => 1,
    makepath => 1, data => "\x01\t" . ('<b>' x 150) . "\x7f");
ok($foreign, 'a foreign node with 453 bytes of data');

subtest 'one snapshot for many requests' => sub {
    my $res = http_parallel([ map { [ $ng2->port, '/fleet.json' ] } 1 .. 40 ],
        timeout => 10);
    is(scalar(grep { $_->{status} == 200 } @$res), 40, '40 answers');
    my (%min, %max);
    for (@$res) {
        my $v = $JS->decode($_->{body});
        $min{ $v->{pid} } = $v->{reads}
            if !defined $min{ $v->{pid} } || $v->{reads} < $min{ $v->{pid} };
        $max{ $v->{pid} } = $v->{reads}
            if !defined $max{ $v->{pid} } || $v->{reads} > $max{ $v->{pid} };
    }
    my @more = map { $max{$_} - $min{$_} } keys %min;
    note "reads during the burst, per worker: @more";
    ok(!grep({ $_ > 2 } @more), 'at most a read a second per worker');
};

subtest 'the HTML page in Chromium' => sub {
    my $url = 'http://127.0.0.1:' . $ng2->port . '/fleet';
    my $t0 = time;
    my $r = run_cmd([ $ZkLock::Test::PYTHON,
        "$ZkLock::Test::LIB_DIR/view_browser.py", $url, 2, 20 ],
        timeout => 60);
    is($r->{rc}, 0, sprintf('rendered in %.1fs', time - $t0))
        or diag $r->{err};
    my $page = eval { $JS->decode($r->{out}) };
    ok($page, 'rows as JSON') or return diag $r->{out};
    note explain $page;

    cmp_ok($page->{draws}, '>=', 2, 'redrawn: it refreshes itself');
    like($page->{session}, qr/connected/, 'the session, in the header');
    ok(!grep({ !m{^http://127\.0\.0\.1:\d+/} } @{ $page->{resources} }),
        'nothing fetched from elsewhere');
    ok(!grep({ /favicon/ } @{ $page->{resources} }), 'no favicon asked for');
    unlike($ng2->error_log, qr/favicon/, 'nor an error logged for one');
    like($page->{read}, qr/^read $AGE ago$/, 'the header: read, an age');

    my %page = map { $_->{path} => $_ } @{ $page->{locks} };
    my $m = $page{'/fv/m'};
    ok($m, 'a table for /fv/m') or return;
    like($m->{heading}, qr/mutex.*1 holding, 4 waiting/, 'its heading');
    my @cols = ('#', 'state', 'for', 'client', 'host', 'pid', 'request',
        'arrived', 'node');
    is_deeply($m->{header}, \@cols, 'columns');
    my %c;
    @c{@cols} = 0 .. $#cols;
    my @rows = @{ $m->{rows} };
    is(scalar @rows, 5, 'five rows');
    is($rows[0]{class}, 'hold', 'the holder highlighted');
    is($rows[0]{cells}[ $c{state} ], 'holds', 'holds');
    like($rows[0]{cells}[ $c{for} ], qr/^held (?:\x{2264} )?$AGE$/,
        'held for');
    is($rows[0]{cells}[ $c{request} ], 'GET /m/1', 'request 1');
    is_deeply([ map { $_->{class} } @rows[1 .. 4] ], [ ('wait') x 4 ],
        'the others wait');
    is_deeply([ map { $_->{cells}[ $c{state} ] } @rows[1 .. 4] ],
        [ map { "waits #$_" } 1 .. 4 ], 'numbered');
    is_deeply([ grep { $_->{cells}[ $c{for} ] !~ /^waiting $AGE$/ }
        @rows[1 .. 4] ], [], 'waiting for');
    is($rows[1]{cells}[ $c{client} ], 'curator', 'the Curator client');
    is_deeply([ map { $_->{cells}[ $c{request} ] } @rows[2 .. 4] ],
        [ 'GET /m/2', 'GET /m/3', 'GET /m/4' ], 'requests 2, 3, 4');

    # one format of time: ages, nginx's nodes and Curator's alike
    my @times;
    for my $l (values %page) {
        for my $r (@{ $l->{rows} }) {
            next if @{ $r->{cells} } == 1;    # nobody
            push @times, $r->{cells}[ $c{arrived} ], $r->{cells}[ $c{for} ];
        }
    }
    is_deeply([ grep {
        !/^(?:(?:held (?:\x{2264} )?|waiting )$AGE|$AGE ago)$/ } @times ],
        [], 'every time an age: ' . scalar(@times) . ' cells');
    is_deeply([ grep { /$CLOCK/ } $page->{read}, @times,
        map { $_->{heading} } values %page ], [], 'no date, no clock');

    my $k = $page{'/fv/k'};
    ok($k && $k->{rows}[0]{class} =~ /\bhold\b.*\bkept\b/,
        'the kept lease: holding, kept');
    like($k->{rows}[0]{cells}[ $c{state} ] // '', qr/\(kept\)/, 'says so');

    like($page{'/fv/s1'}{heading} // '', qr{^/fv/s1semaphore, 1 lease },
        'zk_semaphore leases=1: a semaphore');

    my $d = $page{'/fv/d'};
    ok($d, 'the dry run: under its lock') or return;
    ok(!grep({ /dry-run/ } keys %page), 'no table "<path>.dry-run"');
    like($d->{heading}, qr/0 holding, 0 waiting \x{b7} 1 in dry run/,
        'its heading');
    is(scalar @{ $d->{rows} }, 1, 'one row');
    like($d->{rows}[0]{class}, qr/\bdry\b/, 'marked');
    is($d->{rows}[0]{cells}[ $c{state} ], 'would hold (dry run)', 'says so');
    is($d->{rows}[0]{cells}[ $c{request} ], 'GET /d/1', 'the request');

    my $f = $page{'/fv/f'};
    ok($f, 'the foreign node') or return;
    is($f->{rows}[0]{cells}[ $c{host} ],
        '\u0001\u0009' . substr('<b>' x 150, 0, 28) . "\x{2026}",
        'its data: control bytes escaped, cut to 40 characters');
    is($f->{rows}[0]{titles}[ $c{host} ],
        '\u0001\u0009' . ('<b>' x 150) . '\u007f (453 bytes)',
        'the whole in the title');
    cmp_ok($f->{width}, '<=', $page->{viewport}, 'the table fits the window');
};

is_deeply([ map { scalar bg_wait($_) } @dry ], [ 200, 200 ],
    'the dry runs, let through');
zk_delete($zk, $foreign);

subtest 'the queue drains in the order shown' => sub {
    my @st = map { scalar bg_wait($_) } @bg;
    is_deeply(\@st, [ (200) x 4 ], 'the four requests');
    my $acq = curator_expect($cur, qr/^ACQUIRED (\d+)/);
    my %c = map { $_->[3] => $_ } @{ $be->calls->{m} };
    ok($acq && $acq / 1000 >= $c{1}[1] - 0.05
        && $acq / 1000 <= $c{2}[0] + 0.05,
        'Curator between request 1 and request 2');
    is_deeply([ map { $_->[3] } sort { $a->[0] <=> $b->[0] }
        @{ $be->calls->{m} } ], [ 1 .. 4 ], 'requests in order 1, 2, 3, 4');
    ok(queue_of($ng2, 0), 'the view empties');
};

subtest 'held for: since the grant' => sub {
    # nginx 3 (one worker) reads while A2 waits; A2 is nginx 1's
    my $ng3 = nginx_start($conf, zk => $zk, backend => $be, workers => 1);
    ok(sessions_connected($ng3), 'nginx 3, an onlooker');

    my $a1 = bg_get($ng2->port, '/a/1?key=a&id=1&rec=1&sleep=3000');
    ok(wait_for(sub { my $c = $be->calls->{a}; $c && @$c == 1 }, 15, 0.05),
        'A1 (nginx 2) holds');
    my $a2 = bg_get($ng1->port, '/a/2?key=a&id=2&rec=1&sleep=8000');

    my $seen = 0;
    ok(wait_for(sub {
        my $l = lock_in(view($ng3), '/fv/a');
        $seen++ if $l && $l->{participants} == 2
            && $l->{nodes}[1]{state} eq 'waiting';
        my $c = $be->calls->{a};
        $c && @$c == 2 }, 15, 0.3), 'A2 holds once A1 is done');
    ok($seen, 'nginx 3 saw A2 wait');
    sleep 1.5;

    my $t2 = $be->calls->{a}[1][0];
    my $v = view($ng1);
    my $h = lock_in($v, '/fv/a')->{nodes}[0];
    is($h->{uri}, '/a/2', "from nginx 1, A2's own");
    ok($h->{held_for_exact}, 'exact: its grant');
    my $held = $h->{held_for_ms} + $v->{age_ms};
    my $want = (time - $t2) * 1000;
    ok($held <= $want + 100 && $held >= $want - 500,
        sprintf('held for %d ms: since the grant (%d ms)', $held, $want));
    cmp_ok($h->{held_for_ms}, '<', $v->{read_at_ms} - $h->{created} - 2000,
        'not since the request came (it waited 2.5 s first)');

    $v = view($ng3);
    my $o = lock_in($v, '/fv/a')->{nodes}[0];
    ok(!$o->{held_for_exact}, 'from nginx 3: not exact');
    $held = $o->{held_for_ms} + $v->{age_ms};
    $want = (time - $t2) * 1000;
    ok($held >= $want - 100 && $held <= $want + 2000, sprintf(
        'at most since the last read that saw it wait: %d ms (%d ms)',
        $held, $want));

    $v = view($ng2);
    $o = lock_in($v, '/fv/a')->{nodes}[0];
    ok(!$o->{held_for_exact}, 'from nginx 2: not exact');
    cmp_ok($o->{held_for_ms} + $v->{age_ms}, '>=', (time - $t2) * 1000 - 100,
        'a bound, never less than it held');

    is(bg_wait($a1), 200, 'A1');
    is(bg_wait($a2), 200, 'A2');
    $ng3->stop;
};

subtest 'fair=: the claims on the board, by instance and node' => sub {
    # a foreign holder first (no claim: the external flow), then both
    # nginx contend: each writes its claim in /fv/fr.fair
    my $ext = zk_create($zk, '/fv/fr/' . curator_name(), sequence => 1,
        makepath => 1, data => '10.0.0.9');
    # and anybody's node on the board, its name of an instance's length
    my $odd = zk_create($zk, q{/fv/fr.fair/_c_"<b>x&y'z"-1234567},
        makepath => 1, data => 'x1');
    my $bg = http_parallel_bg([
        (map { [ $ng1->port, "/fr/$_?key=fr&sleep=2500&tenant=t$_" ] }
            1 .. 4),
        (map { [ $ng2->port, "/fr/$_?key=fr&sleep=2500&tenant=u" ] }
            1 .. 4) ], timeout => 30, stagger => 0.02);
    my $l;
    ok(wait_for(sub {
        $l = lock_in(view($ng1), '/fv/fr');
        (grep { defined $_->{claim} } @{ $l->{fair}{instances} // [] })
            == 2 }, 10, 0.2),
        'the view shows the board: a claim for each nginx')
        or diag explain $l->{fair};
    my %claim = map { $_->{instance} => $_->{claim} }
        @{ $l->{fair}{instances} // [] };
    is($l->{fair}{path}, '/fv/fr.fair', 'the board\'s path');
    my $odd_instance = q{_c_"<b>x&y'};
    ok(exists $claim{$odd_instance} && !defined $claim{$odd_instance},
        "anybody's node: its name escaped, no claim from its data")
        or diag explain $l->{fair};
    delete $claim{$odd_instance};
    ok(keys %claim == 2 && !(grep { !/^_c_[0-9a-f]{8}$/ } keys %claim),
        'instances by the prefix of their workers\' nodes');
    my @ours = grep { ($_->{client} // '') eq 'nginx' } @{ $l->{nodes} };
    ok(@ours && !(grep { !defined $_->{claim}
        || $_->{claim} != ($claim{ substr($_->{node}, 0, 11) } // -1) }
        @ours), "each nginx node shows its instance's claim")
        or diag explain [ $l->{nodes}, \%claim ];
    my ($foreign) = grep { ($_->{client} // '') eq 'curator' }
        @{ $l->{nodes} };
    ok($foreign && exists $foreign->{claim} && !defined $foreign->{claim},
        'the foreign node: no claim') or diag explain $foreign;
    ok(!(grep { exists $_->{fair} } grep { $_->{path} ne '/fv/fr' }
        @{ view($ng1)->{locks} }), 'a lock without fair= has no "fair"');
    zk_delete($zk, $_) for $ext, $odd;
    is(scalar(grep { $_->{status} == 200 } @{ http_parallel_collect($bg,
        40) }), 8, 'all served');
};

subtest 'a read that takes too long; a client gone while it waits' => sub {
    my $px = ZkLock::FaultProxy->start($zk);
    my $ng = nginx_start($conf, zk => $px->hosts, backend => $be,
        workers => 1);
    ok(sessions_connected($ng), 'nginx 3, through a proxy');
    my @workers = $ng->worker_pids;
    ok(view($ng), 'a first snapshot');
    sleep 1.1;
    $px->blackhole(max => 8);
    my $gone = http_abort_after($ng->port, '/fleet.json', 0.5);
    my $t0 = time;
    my $v = view($ng);
    my $took = time - $t0;
    ok($v, 'an answer');
    ok($took >= 2.5 && $took < 5, sprintf('after the wait, %.1fs', $took));
    ok($v->{stale}, 'stale: the last snapshot');
    ok(lock_in($v, '/fv/m'), 'with its locks');
    proc_wait($gone, 10);
    ok(wait_for(sub { my $x = view($ng);
        $x && $x->{session} eq 'connected' && !$x->{stale} }, 30, 0.5),
        'fresh again once the connection is back');
    is_deeply([ $ng->worker_pids ], \@workers,
        'the worker lives: the same one (one that died would be respawned)');
    $ng->expect_log(qr/\[alert\].*(?:zookeeper|ZOO_)/i);
    $px->stop;
};

subtest 'ZooKeeper down: at once, from the last snapshot' => sub {
    my $bg = bg_get($ng1->port, '/m/9?key=m&sleep=6000');
    ok(wait_for(sub { my $l = lock_in(view($ng1), '/fv/m');
        $l && $l->{holders} == 1 }, 10, 0.2), 'a holder, read');
    $zk->stop;
    my $v;
    ok(wait_for(sub { $v = view($ng1); $v && $v->{session} eq 'down' }, 30,
        0.2), 'session down');
    my $t0 = time;
    $v = view($ng1);
    cmp_ok(time - $t0, '<', 0.5, 'answered at once');
    ok($v->{stale}, 'stale');
    ok(lock_in($v, '/fv/m'), 'the last snapshot');
    like($ng1->get('/fleet')->{body}, qr/el\('table'\)/,
        'the page still loads');

    my $url = 'http://127.0.0.1:' . $ng1->port . '/fleet';
    my $r = run_cmd([ $ZkLock::Test::PYTHON,
        "$ZkLock::Test::LIB_DIR/view_browser.py", $url, 1, 20 ],
        timeout => 60);
    is($r->{rc}, 0, 'in Chromium') or diag $r->{err};
    my $page = eval { $JS->decode($r->{out}) } or return diag $r->{out};
    like($page->{session}, qr/down \(stale\)/, 'the header: stale');
    my ($m) = grep { $_->{path} eq '/fv/m' } @{ $page->{locks} };
    ok($m, 'the table of /fv/m') or return;
    like($m->{class}, qr/\bstale\b/, 'marked stale');
    like($m->{notes}[0] // '',
        qr/^stale: as read $AGE ago, with the session down/,
        'and says so');
    my $h = $m->{rows}[0];
    like($h->{class}, qr/\bhold\b.*\bstale\b/, 'the holder, stale');
    is($h->{cells}[1], 'held (stale)', 'in the past');
    isnt($h->{background}, 'rgb(218, 251, 225)', 'not green')
        or diag $h->{background};
    bg_wait($bg);
};

$ng1->expect_log(qr/\[alert\].*(?:zookeeper|ZOO_)/i);
$ng2->expect_log(qr/\[alert\].*(?:zookeeper|ZOO_)/i);

done_testing();
