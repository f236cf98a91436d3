#!/usr/bin/perl
# Lock paths of ngx_http_zk_lock_module at run time: paths built from
# variables (per-value locks, node name format), runtime values that are
# refused with 400 before any ZooKeeper call (plus a fuzz loop), lock
# directives inherited by nested locations and from the server level
# (zk_lock off and the status page take none),
# internal redirects and subrequests of a request that holds a lock.
#
# ZK_PATHS_DEBUG=1 runs nginx with error_log level debug ("zk lock:" trace).

use strict;
use warnings;
use Test::More;
use Time::HiRes qw(time sleep);
use JSON::PP ();
use POSIX ();
use lib 't/lib';
use ZkLock::Test;

require_prereqs(qw(nginx zookeeper kazoo module));

my $T_START = time;

my $zk = zk_start();
my $be = backend_start();

my $conf = <<'EOF';
    zk_hosts %%ZK%%;
    zk_session_timeout 10s;

    server {
        listen 127.0.0.1:%%PORT%%;
        root %%PREFIX%%/html;
        add_header X-Lock-Node $zk_lock_node always;

        # 1, 2: paths from variables
        location /tenant/ {
            zk_mutex /p/tenant/$arg_tenant timeout=5s;
            proxy_pass http://%%BACKEND%%;
        }
        location /h/ {
            zk_mutex /p/h/$http_x_tenant timeout=5s;
            proxy_pass http://%%BACKEND%%;
        }
        location /f/ {
            zk_mutex /p/f/$http_x_tenant timeout=5s;
            proxy_pass http://%%BACKEND%%;
        }

        # 3: nested locations
        location /outer/ {
            zk_mutex /p/outer timeout=10s;
            location /outer/inner/ {
                proxy_pass http://%%BACKEND%%;
            }
            location /outer/own/ {
                zk_semaphore /p/own leases=2 timeout=10s;
                proxy_pass http://%%BACKEND%%;
            }
            proxy_pass http://%%BACKEND%%;
        }

        # 4: internal redirects while the lock is held
        location /redir/ {
            zk_mutex /p/r timeout=3s;
            try_files /nonexistent @named;
        }
        location @named {
            zk_mutex /p/r timeout=3s;
            proxy_pass http://%%BACKEND%%;
        }
        location /err/ {
            zk_mutex /p/e timeout=3s;
            proxy_intercept_errors on;
            error_page 404 = /fallback?key=e&sleep=200;
            proxy_pass http://%%BACKEND%%;
        }
        location = /fallback {
            zk_mutex /p/e timeout=3s;
            proxy_pass http://%%BACKEND%%;
        }

        # 5: subrequests (SSI)
        location /ssi/ {
            zk_mutex /p/s timeout=3s;
            default_type text/html;
            ssi on;
        }
        location /sub {
            zk_mutex /p/s timeout=3s;
            proxy_pass http://%%BACKEND%%;
        }
        location /ssi2/ {
            zk_mutex /p/s2 timeout=10s;
            default_type text/html;
            ssi on;
        }
        location /other {
            zk_mutex /p/o timeout=10s;
            proxy_pass http://%%BACKEND%%;
        }
    }

    # 3: a server-level directive, inherited by its locations
    server {
        listen 127.0.0.1:%%PORT%%;
        server_name srv2;
        zk_mutex /p/srv timeout=10s;

        location / {
            proxy_pass http://%%BACKEND%%;
        }
        location /free/ {
            zk_semaphore /p/srvfree leases=3 timeout=10s;
            proxy_pass http://%%BACKEND%%;
        }
        # issue 27, item 5: out of the inherited lock
        location /off/ {
            zk_lock off;
            proxy_pass http://%%BACKEND%%;
        }
        location = /status {
            zk_lock_status_page;
        }
    }
EOF

my $ng = nginx_start($conf, zk => $zk, backend => $be, workers => 2,
    log_level => $ENV{ZK_PATHS_DEBUG} ? 'debug' : 'info');
my $P = $ng->port;
my @workers0 = $ng->worker_pids;

# Static files for the SSI tests.
{
    my $html = $ng->prefix . '/html';
    mkdir $html;
    mkdir "$html/$_" for qw(ssi ssi2);
    spew("$html/ssi/index.html",
        'A<!--# include virtual="/sub?key=ssisub&sleep=200" -->B');
    spew("$html/ssi2/index.html",
        'X<!--# include virtual="/other?key=other&id=1" -->Y'
        . '<!--# include virtual="/other?key=other&id=2" -->Z');
}

# The workers' ZooKeeper sessions connect after "ready".
ok(wait_for(sub { (() = $ng->error_log =~ /zookeeper session 0x\w+ connected/g) >= 2 }, 15),
    'both workers have a ZooKeeper session')
    or diag $ng->error_log;

# ------------------------------------------------------------ local helpers

sub spew {
    my ($file, $text) = @_;
    open my $fh, '>', $file or die "$file: $!";
    print {$fh} $text;
    close $fh or die "$file: $!";
}

sub statuses { return join ',', map { $_->{status} } @{ $_[0] } }

my $NODE_RE = qr/^_c_[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}-lock-\d{10}$/;
my $FOREIGN = '_c_00000000-0000-4000-8000-000000000000-lock-';

# ----------------------------------------------- 1. path from variables

subtest 'path from $arg_tenant: per-tenant mutex' => sub {
    $be->reset;
    my @reqs;
    for my $i (1 .. 5) {
        for my $t (qw(A B)) {
            push @reqs, [$P, "/tenant/x?tenant=$t&key=t$t&sleep=400&id=$i"];
        }
    }
    my $t0 = time;
    my $bg = http_parallel_bg(\@reqs, timeout => 30);

    # While they run: the waiters' nodes, in Curator's name format.
    my (%seen, $most);
    $most = 0;
    wait_for(sub {
        my @c = zk_children($zk, '/p/tenant/A');
        $seen{$_}++ for @c;
        $most = @c if @c > $most;
        return time - $t0 > 1.2 || waitpid($bg->{pid}, POSIX::WNOHANG()) != 0
            ? 1 : 0;
    }, 10, 0.05);
    my $res = http_parallel_collect($bg);
    my $took = time - $t0;

    is(statuses($res), join(',', (200) x 10), 'all 10 requests 200');
    for my $t (qw(A B)) {
        my $st = $be->stats("t$t");
        is($st->{max}, 1, "tenant $t serialized (backend max 1)");
        is($st->{count}, 5, "tenant $t: 5 requests reached the backend");
    }
    # Each tenant alone takes >= 5 x 0.4 s; both tenants serialized
    # against each other would take >= 4 s.
    note sprintf 'tenants: %.2fs', $took;
    cmp_ok($took, '>=', 1.9, 'per-tenant serialization shows in the time');
    cmp_ok($took, '<', 3.5, 'different tenants ran in parallel')
        or diag sprintf 'took %.2fs', $took;

    ok(scalar(keys %seen), 'nodes seen under /p/tenant/A while running');
    cmp_ok($most, '>=', 2, 'waiters queue as nodes (>= 2 at once)');
    my @bad = grep { $_ !~ $NODE_RE } sort keys %seen;
    is_deeply(\@bad, [], 'node names are _c_<uuid v4>-lock-<10 digits>')
        or diag explain [sort keys %seen];

    # $arg is not url-decoded: "%2F" stays literal and adds no level.
    my $r = $ng->get('/tenant/x?tenant=a%2Fb&key=enc');
    is($r->{status}, 200, '"%2F" in $arg_tenant is literal: 200');
    like($r->{headers}{'x-lock-node'} // '', qr{^/p/tenant/a%2Fb/_c_},
        'its node was under /p/tenant/a%2Fb');
    no_ephemerals($zk, '/p', 'per-tenant');
    my @t = zk_children($zk, '/p/tenant');
    ok(!(grep { $_ eq 'a' } @t), 'and no node /p/tenant/a was made')
        or diag explain \@t;
};

# ------------------------------------ 2. bad runtime values: 400, no node

subtest 'bad runtime values are refused with 400' => sub {
    my @cases = (
        # [name, uri, headers, reason regexp]
        [ 'empty $arg',     '/tenant/c1?tenant=',    {}, qr/segment 3 is empty/ ],
        [ 'absent $arg',    '/tenant/c2',            {}, qr/segment 3 is empty/ ],
        [ '".." $arg',      '/tenant/c3?tenant=..',  {}, qr/segment 3 is "\." or "\.\."/ ],
        [ '"." $arg',       '/tenant/c4?tenant=.',   {}, qr/segment 3 is "\." or "\.\."/ ],
        [ 'raw \xff in $arg', "/tenant/c5?tenant=a\xffb", {}, qr/segment 3 is not valid UTF-8/ ],
        [ 'absent header',  '/h/c6',  {}, qr/segment 3 is empty/ ],
        [ 'header ".."',    '/h/c7',  { 'X-Tenant' => '..' }, qr/segment 3 is "\." or "\.\."/ ],
        [ 'header "."',     '/h/c8',  { 'X-Tenant' => '.' }, qr/segment 3 is "\." or "\.\."/ ],
        [ 'header "a/b"',   '/h/c9',  { 'X-Tenant' => 'a/b' }, qr/segment 3 is a "\/"/ ],
        [ 'header "/"',     '/h/c10', { 'X-Tenant' => '/' }, qr/segment 3 is a "\/"/ ],
        [ 'header "../x"',  '/h/c11', { 'X-Tenant' => '../x' }, qr/segment 3 is a "\/"/ ],
        [ 'header \x01',    '/h/c12', { 'X-Tenant' => "a\x01b" }, qr/segment 3 is a control character/ ],
        [ 'header \x1f',    '/h/c13', { 'X-Tenant' => "a\x1fb" }, qr/segment 3 is a control character/ ],
        [ 'header \x7f',    '/h/c14', { 'X-Tenant' => "a\x7fb" }, qr/segment 3 is a control character/ ],
        [ 'header \xff',    '/h/c15', { 'X-Tenant' => "\xff" }, qr/segment 3 is not valid UTF-8/ ],
        [ 'header lone continuation \x80', '/h/c16', { 'X-Tenant' => "a\x80" }, qr/segment 3 is not valid UTF-8/ ],
        [ 'header truncated \xe2\x82', '/h/c17', { 'X-Tenant' => "a\xe2\x82" }, qr/segment 3 is not valid UTF-8/ ],
        [ 'header overlong \xc0\xaf', '/h/c18', { 'X-Tenant' => "a\xc0\xaf" }, qr/segment 3 is not valid UTF-8/ ],
        [ 'header above U+10FFFF', '/h/c19', { 'X-Tenant' => "\xf4\x90\x80\x80" }, qr/segment 3 is not valid UTF-8/ ],
        [ 'header \xc3\xc3 (lead byte as continuation)', '/h/c20',
          { 'X-Tenant' => "a\xc3\xc3" }, qr/segment 3 is not valid UTF-8/ ],
        [ 'header \xf8\x90\x80\x80 (invalid lead byte)', '/h/c21',
          { 'X-Tenant' => "a\xf8\x90\x80\x80" }, qr/segment 3 is not valid UTF-8/ ],
        [ 'header U+0085', '/h/c22', { 'X-Tenant' => "a\xc2\x85" }, qr/segment 3 is a character ZooKeeper refuses/ ],
        [ 'header U+D800 (surrogate)', '/h/c23', { 'X-Tenant' => "\xed\xa0\x80" },
          qr/segment 3 is (?:a character ZooKeeper refuses|not valid UTF-8)/ ],
        [ 'header U+E000', '/h/c24', { 'X-Tenant' => "\xee\x80\x80" }, qr/segment 3 is a character ZooKeeper refuses/ ],
        [ 'header U+FFFE', '/h/c25', { 'X-Tenant' => "\xef\xbf\xbe" }, qr/segment 3 is a character ZooKeeper refuses/ ],
        [ 'header U+1F600 (ZooKeeper refuses it: surrogate pair in Java)', '/h/c26',
          { 'X-Tenant' => "a\xf0\x9f\x98\x80" }, qr/segment 3 is a character ZooKeeper refuses/ ],
        # "/p/h/" + 1020 bytes = 1025 > 1024
        [ 'path of 1025 bytes', '/h/c27', { 'X-Tenant' => 'a' x 1020 },
          qr/path "\/p\/h\/\$http_x_tenant" is longer than 1024 bytes/ ],
        [ 'path of 2000 bytes', '/h/c28', { 'X-Tenant' => 'b' x 1995 },
          qr/path "\/p\/h\/\$http_x_tenant" is longer than 1024 bytes/ ],
    );

    my $log0 = length $ng->error_log;
    for my $c (@cases) {
        my ($name, $uri, $h, $why) = @$c;
        my $r = $ng->get($uri, headers => $h, timeout => 10);
        my $log = substr($ng->error_log, $log0);
        my ($line) = grep { index($_, "request: \"GET $uri HTTP/1.0\"") >= 0 }
            split /\n/, $log;
        subtest $name => sub {
            is($r->{status}, 400, 'status 400');
            cmp_ok($r->{time}, '<', 2, 'answered at once');
            like($line // '', qr/\[info\] .*zk_mutex path "\/p\/\w+\/\$\w+"(?::| is)/,
                'an [info] line for the lock path');
            like($line // '', $why, 'naming the problem');
        } or diag "response: $r->{status} $r->{body}\nlog: "
            . ($line // join "\n", grep { /\Q$uri\E/ } split /\n/, $log);
    }
    my $log = substr($ng->error_log, $log0);
    my @zkerr = grep { /\[(?:error|warn)\]/ } split /\n/, $log;
    is_deeply(\@zkerr, [], 'no ZooKeeper error or warning for any of them');

    # Not even the parents were created: no ZooKeeper call at all.
    is(zk_get($zk, '/p/h'), undef, 'no node /p/h (no create for /h/)');
    my @t = grep { !/^(?:A|B|a%2Fb)$/ } zk_children($zk, '/p/tenant');
    is_deeply(\@t, [], 'no new node under /p/tenant');

    # Boundary and controls: these are valid.
    my $r = $ng->get('/h/ok1?key=hok', headers => { 'X-Tenant' => 'a' x 1019 });
    is($r->{status}, 200, 'path of exactly 1024 bytes: 200');
    my $node = $r->{headers}{'x-lock-node'} // '';
    $r = $ng->get('/h/ok2?key=hok', headers => { 'X-Tenant' => "caf\xc3\xa9 \xe2\x82\xac-\xef\xbf\xaf" });
    is($r->{status}, 200, 'UTF-8 value with U+00E9, U+20AC, U+FFEF and a space: 200');
    like($node, qr{^/p/h/a{1019}/_c_}, 'the 1024-byte path was used')
        or diag $node;
    no_ephemerals($zk, '/p', 'bad values');
};

# A reference implementation of the segment rule for the fuzz loop: the
# status nginx must answer for a header value, undef when unsure.
my $UTF8_RE = qr/\A(?:[\x00-\x7f]|[\xc2-\xdf][\x80-\xbf]|\xe0[\xa0-\xbf][\x80-\xbf]
    |[\xe1-\xec\xee\xef][\x80-\xbf]{2}|\xed[\x80-\x9f][\x80-\xbf]
    |\xf0[\x90-\xbf][\x80-\xbf]{2}|[\xf1-\xf3][\x80-\xbf]{3}
    |\xf4[\x80-\x8f][\x80-\xbf]{2})*\z/x;

sub expected_status {
    my ($v) = @_;
    $v =~ s/^ +//;
    $v =~ s/ +$//;    # nginx strips spaces around a header value
    return undef if $v =~ /^\t|\t$/;    # versions differ on tabs
    return 400 if $v eq '' || $v eq '.' || $v eq '..';
    return 400 if $v =~ m{[\x00-\x1f\x7f/]};
    return 400 if $v !~ $UTF8_RE;
    my $s = $v;
    utf8::decode($s);
    # ZooKeeper checks UTF-16 units: a code point above U+FFFF is a
    # surrogate pair there, refused like U+D800-U+F8FF.
    return 400 if $s =~ /[\x{80}-\x{9f}\x{d800}-\x{f8ff}\x{fff0}-\x{ffff}\x{10000}-\x{10ffff}]/;
    return 200;
}

my @HOSTILE = ('', ' ', '.', '..', ' .. ', '/', '//', '../x', 'a/..', './a',
    'a/./b', '/..', "\t", "a\tb", "\x7f", "\x01", "\xff", "\xc3\xc3",
    "\xf8\x90\x80\x80", "\xe1\xc0\x80", "\xc0\x80", "\xe0\x80\x80",
    "\xed\xa0\x80", "\xf4\x90\x80\x80", "\x80", "\xc3", "\xe2\x82", "\xfe",
    "\xc2\x85", "\xef\xbf\xbf", "\xf0\x9f\x98\x80", 'zookeeper', '%2F', '%2e%2e');

sub rand_printable { join '', map { chr(0x20 + int rand 95) } 1 .. $_[0] }

sub gen_value {
    my $len = int rand 81;
    my $k = int rand 6;
    if ($k == 0) {
        return rand_printable($len);
    } elsif ($k == 1) {
        my @p = ('a', 'bc', '/', '..', '.', 'x y', '-', '_', '%2F', '~');
        my $v = '';
        $v .= $p[rand @p] while length $v < $len;
        return $v;
    } elsif ($k == 2) {
        return join '', map {
            my $b; do { $b = 1 + int rand 255 } while $b == 10 || $b == 13;
            chr $b } 1 .. $len;
    } elsif ($k == 3) {
        my @ranges = ([0x21, 0x7e], [0x80, 0x9f], [0xa0, 0x7ff],
            [0x800, 0xd7ff], [0xd800, 0xdfff], [0xe000, 0xf8ff],
            [0xf900, 0xffef], [0xfff0, 0xffff], [0x10000, 0x10ffff]);
        my @cp = map {
            my $r = $ranges[rand @ranges];
            # ASCII most of the time, so that many values are valid
            $r = $ranges[0] if rand() < 0.6;
            $r->[0] + int rand($r->[1] - $r->[0] + 1);
        } 1 .. int($len / 3);
        no warnings 'utf8';
        my $s = join '', map { chr } @cp;
        utf8::encode($s);
        return $s;
    } elsif ($k == 4) {
        return rand_printable(int rand 10) . $HOSTILE[rand @HOSTILE]
            . rand_printable(int rand 10);
    } else {
        return $HOSTILE[rand @HOSTILE];
    }
}

subtest 'fuzz: hostile header values' => sub {
    my $seed = $ENV{ZK_PATHS_SEED} // int(time * 1000) % 1_000_000;
    srand $seed;
    diag "fuzz seed $seed (ZK_PATHS_SEED=$seed to replay)";
    my $log0 = length $ng->error_log;
    my (%by_status, @wrong, @mismatch, %why_count, $n);
    my $t0 = time;
    for my $batch (1 .. 20) {
        my @vals = map { gen_value() } 1 .. 100;
        my @reqs = map { [$P, "/f/$batch-$_?key=fuzz",
            { headers => { 'X-Tenant' => $vals[$_] } }] } 0 .. $#vals;
        my $res = http_parallel(\@reqs, timeout => 20);
        for my $i (0 .. $#vals) {
            my $st = $res->[$i]{status};
            $n++;
            $by_status{$st}++;
            my $hex = unpack('H*', $vals[$i]);
            push @wrong, "$st for hex $hex ($res->[$i]{error})"
                unless $st == 200 || $st == 400 || $st == 503;
            my $exp = expected_status($vals[$i]);
            if (defined $exp && $st != $exp) {
                my $why = $exp == 400 && $vals[$i] !~ $UTF8_RE
                    ? 'malformed UTF-8'
                    : $exp == 400 && $vals[$i] =~ /[\xf0-\xf4]/
                    ? 'code point above U+FFFF' : 'other';
                $why_count{$why}++;
                push @mismatch, "got $st, want $exp ($why): hex $hex";
            }
        }
    }
    my $took = time - $t0;
    diag sprintf "%d requests in %.1fs: %s", $n, $took,
        join ', ', map { "$_ x$by_status{$_}" } sort keys %by_status;
    is($n, 2000, '2000 requests sent');
    is_deeply(\@wrong, [], 'every response is 200, 400 or 503 (no 500, no 0)');
    ok($by_status{200} && $by_status{400}, 'both valid and refused values seen');
    is_deeply(\@mismatch, [], 'each status is what the segment rule says '
        . '(valid -> 200, refused -> 400)')
        or diag scalar(@mismatch) . ' mismatches ('
            . join(', ', map { "$_: $why_count{$_}" } sort keys %why_count)
            . "), the first ones:\n" . join "\n", @mismatch[0 .. ($#mismatch < 14 ? $#mismatch : 14)];
    my $log = substr($ng->error_log, $log0);
    my @bad = grep { /\[(?:alert|crit|emerg)\]|signal/ } split /\n/, $log;
    is_deeply(\@bad, [], 'no alert/crit/emerg or crash line') or diag explain \@bad;
    is_deeply([sort { $a <=> $b } $ng->worker_pids], [sort { $a <=> $b } @workers0],
        'the same workers still run');
    no_ephemerals($zk, '/p', 'fuzz', 10);
    # Thousands of container nodes: drop them so later walks stay quick.
    zk_delete($zk, '/p/f', recursive => 1);
};

# ------------------------------------------------------ 3. nested locations

subtest 'nested locations inherit the outer lock' => sub {
    $be->reset;
    my $res = http_parallel([ map { [$P, "/outer/inner/x?key=inner&sleep=300&id=$_"] } 1 .. 4 ],
        timeout => 20);
    is(statuses($res), '200,200,200,200', '4 concurrent /outer/inner/: all 200');
    is($be->stats('inner')->{max}, 1, 'serialized by the inherited /p/outer mutex');
    is($be->stats('inner')->{count}, 4, 'all reached the backend');

    # A foreign holder of /p/outer: /outer/own/ has its own semaphore and
    # runs anyway; /outer/inner/ waits.
    my $h = zk_hold($zk, '/p/outer', name => $FOREIGN, seconds => 60);
    my @reqs = ((map { [$P, "/outer/own/x?key=own&sleep=600&id=$_"] } 1 .. 5),
        [$P, '/outer/inner/x?key=blocked', { timeout => 3.5 }]);
    my $bg = http_parallel_bg(\@reqs, timeout => 20);
    my @nodes;
    wait_for(sub {
        @nodes = zk_children($zk, '/p/outer');
        return @nodes >= 2;
    }, 3, 0.05);
    is(scalar(@nodes), 2, 'the /outer/inner/ request waits on /p/outer')
        or diag explain \@nodes;
    $res = http_parallel_collect($bg);
    my @own = @$res[0 .. 4];
    is(statuses(\@own), '200,200,200,200,200', '/outer/own/ all 200 while /p/outer is held');
    my $st = $be->stats('own');
    is($st->{max}, 2, '/outer/own/ ran 2 at a time (leases=2)');
    is($st->{count}, 5, 'all 5 reached the backend');
    ok(!(grep { $_->{time} > 3.3 } @own), 'none waited for the outer mutex')
        or diag join ' ', map { sprintf '%.2f', $_->{time} } @own;
    is($res->[5]{status}, 0, '/outer/inner/ still waiting when the client gave up');
    sleep 0.5;
    $h->release;
    sleep 1;
    is($be->stats('blocked')->{count}, 0,
        'the abandoned waiter never reached the backend');

    # The server-level mutex is inherited; a location's own lock replaces it.
    $be->reset;
    $res = http_parallel([ map { [$P, "/any/$_?key=srv&sleep=300",
        { headers => { Host => 'srv2' } }] } 1 .. 4 ], timeout => 20);
    is(statuses($res), '200,200,200,200', 'server srv2 /any: all 200');
    is($be->stats('srv')->{max}, 1, 'serialized by the server-level mutex');
    $res = http_parallel([ map { [$P, "/free/$_?key=srvfree&sleep=800",
        { headers => { Host => 'srv2' } }] } 1 .. 3 ], timeout => 20);
    is(statuses($res), '200,200,200', 'server srv2 /free/: all 200');
    $st = $be->stats('srvfree');
    cmp_ok($st->{max}, '>=', 2, '/free/ is not serialized by the server mutex');
    cmp_ok($st->{max}, '<=', 3, 'and stays within leases=3');

    # zk_lock off, and the status page: neither waits for the server's lock
    my $holder = http_parallel_bg([ [$P, "/any/h?key=srvh&sleep=3000",
        { headers => { Host => 'srv2' } }] ], timeout => 20);
    ok(wait_for(sub { $be->stats('srvh')->{inflight} == 1 }, 5),
        'a request holds the server-level mutex');
    my $t0 = time;
    my $off = $ng->get('/off/x?key=off', headers => { Host => 'srv2' });
    is($off->{status}, 200, 'zk_lock off: 200 while the lock is held');
    my $page = $ng->get('/status', headers => { Host => 'srv2' });
    is($page->{status}, 200, 'the status page: 200 while the lock is held');
    like($page->{body}, qr/"locks":/, '... the page itself');
    cmp_ok(time - $t0, '<', 1, '... neither waited');
    http_parallel_collect($holder, 20);
    no_ephemerals($zk, '/p', 'nested');
};

# ------------------------------------------------- 4. internal redirects

subtest 'internal redirects keep the lock' => sub {
    $be->reset;
    my $r = $ng->get('/redir/x?key=r1&sleep=100', timeout => 10);
    is($r->{status}, 200, 'try_files to a named location gated by the same path: 200');
    like($r->{body}, qr/^ok key=r1 /, 'body from the backend');
    cmp_ok($r->{time}, '<', 1.5, 'no wait on its own lock (timeout is 3s)');

    my $res = http_parallel([ map { [$P, "/redir/x?key=r&sleep=300&id=$_"] } 1 .. 3 ],
        timeout => 20);
    is(statuses($res), '200,200,200', '3 concurrent: all 200');
    is($be->stats('r')->{max}, 1, 'still serialized');
    my ($first) = sort { $a <=> $b } map { $_->{time} } @$res;
    cmp_ok($first, '<', 2, 'the first completes well before the 3s timeout');

    $r = $ng->get('/err/x?status=404&key=e1&sleep=100', timeout => 10);
    is($r->{status}, 200, 'error_page redirect to a location gated by the same path: 200');
    like($r->{body}, qr/^ok key=e /, 'body from the fallback');
    cmp_ok($r->{time}, '<', 1.5, 'no wait on its own lock');

    $be->reset;
    $res = http_parallel([ map { [$P, "/err/x?status=404&key=e&sleep=200&id=$_"] } 1 .. 3 ],
        timeout => 20);
    is(statuses($res), '200,200,200', '3 concurrent error_page requests: all 200');
    my $st = $be->stats('e');
    is($st->{count}, 6, 'each hit the backend twice (404, then fallback)');
    is($st->{max}, 1, 'serialized across the redirect');
    ($first) = sort { $a <=> $b } map { $_->{time} } @$res;
    cmp_ok($first, '<', 2, 'the first completes well before the 3s timeout');
    unlike($ng->error_log, qr/not acquired/, 'no lock timeout logged');
    no_ephemerals($zk, '/p', 'redirects');
};

# ------------------------------------------------------- 5. subrequests

subtest 'subrequests (SSI)' => sub {
    $be->reset;
    my $r = $ng->get('/ssi/index.html', timeout => 10);
    is($r->{status}, 200, 'SSI page gated by /p/s including /sub gated by /p/s: 200');
    like($r->{body}, qr/^Aok key=ssisub id= inflight=1\nB$/, 'the subrequest body is included');
    cmp_ok($r->{time}, '<', 1.5, 'no self-deadlock (timeout is 3s)');

    my $res = http_parallel([ map { [$P, '/ssi/index.html'] } 1 .. 3 ], timeout => 20);
    is(statuses($res), '200,200,200', '3 concurrent SSI pages: all 200');
    is(scalar(grep { $_->{body} =~ /ok key=ssisub/ } @$res), 3, 'all with the include');
    is($be->stats('ssisub')->{max}, 1, 'serialized by the main requests\' lock');

    # A subrequest to a location gated by another path takes that lock:
    # with /p/o held by someone else, the page waits for it.
    $be->reset;
    my $h = zk_hold($zk, '/p/o', name => $FOREIGN, seconds => 60);
    my $t0 = time;
    my $bg = http_parallel_bg([[$P, '/ssi2/index.html']], timeout => 20);
    my (@s2, @o);
    my $seen = wait_for(sub {
        @s2 = zk_children($zk, '/p/s2');
        @o = zk_children($zk, '/p/o');
        return @s2 == 1 && @o >= 2;
    }, 5, 0.05);
    ok($seen, 'main request holds /p/s2, its subrequest waits on /p/o')
        or diag explain { s2 => \@s2, o => \@o };
    ok(!(grep { $_ !~ $NODE_RE } @o), 'subrequest node in the usual format')
        or diag explain \@o;
    sleep 0.5;
    is($be->stats('other')->{count}, 0, 'the subrequest did not run meanwhile');
    my $held = time - $t0;
    $h->release;
    $res = http_parallel_collect($bg);
    $r = $res->[0];
    is($r->{status}, 200, 'page completes once /p/o is free');
    # The second include waited behind the first one's acquisition, then
    # found the lock held by its main request: the two may overlap.
    like($r->{body}, qr/^Xok key=other id=1 inflight=[12]\nYok key=other id=2 inflight=[12]\nZ$/,
        'both includes (the second blocked behind the first) in the page');
    cmp_ok($r->{time}, '>=', $held - 0.1, 'it waited for the holder');
    # both run once the lock is free, in parallel: the backend's threads
    # may record them in either order
    is_deeply([sort @{ $be->stats('other')->{order} }], [1, 2],
        'backend saw both includes once');
    no_ephemerals($zk, '/p', 'subrequests');
};

# ------------------------------------------------------------- 6. logs

my $log = $ng->error_log;
my @bad = grep { /\[(?:alert|crit|emerg)\]|signal/ } split /\n/, $log;
is_deeply(\@bad, [], 'no [alert]/[crit]/[emerg] or worker crash in error.log')
    or diag explain \@bad;
is_deeply([sort { $a <=> $b } $ng->worker_pids], [sort { $a <=> $b } @workers0],
    'no worker was replaced');

$ng->stop;
no_ephemerals($zk, '/p', 'after nginx stop');
diag sprintf 'paths.t ran %.1fs', time - $T_START;
done_testing;
