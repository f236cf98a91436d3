#!/usr/bin/perl
# Fuzzing of lock paths built from query arguments ($arg_*), several
# thousand hostile values against one nginx (2 workers):
#
#   /f/  zk_mutex     /fz/$arg_x                     (one variable segment)
#   /s/  zk_semaphore /fz/$arg_a/fixed/$arg_b        (two variable segments)
#   /g/  zk_rwlock    /fz/t-$arg_x write             (variable glued to text)
#   /t/  zk_mutex     /$arg_x                        (variable at the top)
#
# Values: empty, ".", "..", "/", "a/b", "%2F" and other percent-escapes
# (%00, %01, %7F...: $arg_* is not url-decoded, so they are literal and
# valid), raw bytes (controls, space, "#", "&", bytes >= 0x80), invalid
# UTF-8, code points ZooKeeper refuses, unicode, "zookeeper", values around
# and far over the 1024-byte path limit, random printable strings. (A raw
# control byte or inner space never reaches the module through $arg_*:
# nginx refuses such a request line itself; t/paths.t sends them in
# headers.)
#
# The expected outcome of each request is computed by expected() below,
# which mirrors README "Paths" (plus how nginx itself parses a request line
# and finds $arg_*), and the test asserts for every request:
#   * accepted value: 200, the backend was reached once, and the node it
#     held ($zk_lock_node) is under the path its value names, byte for byte;
#   * refused value: 400, the backend never saw it, and error.log says why
#     (the module's [info] line naming the segment and the problem, or
#     nginx's "client sent invalid request" for bytes nginx itself refuses
#     in a request line);
# and at the end: no ephemeral node left; no path of an accepted value left
# under /fz, where they come from variables (deleted once idle); every
# node at the top level is a path of an accepted value; no node exists for
# the naive path of any refused value; no [alert]/[crit]/[emerg]
# or "exited on signal" line; the same worker pids as at the start; the
# master exits cleanly on QUIT.
#
# ZK_FUZZ_SEED=<n> replays a run (the seed is printed); ZK_FUZZ_REQUESTS
# changes the number of requests (default 5000).

use strict;
use warnings;
use Test::More;
use Time::HiRes qw(time);
use lib 't/lib';
use ZkLock::Test;

require_prereqs(qw(nginx zookeeper kazoo module));

my $T_START  = time;
my $SEED     = $ENV{ZK_FUZZ_SEED} // 20261123;
my $REQUESTS = $ENV{ZK_FUZZ_REQUESTS} // 5000;
my $BATCH    = 200;
my $MAX_PATH = 1024;    # README: "longer than 1024 bytes" is refused
diag "fuzz seed $SEED (ZK_FUZZ_SEED=$SEED to replay), $REQUESTS requests";
srand $SEED;

my $zk = zk_start();
my $be = backend_start();

# The backend sees only $uri ("/f/<n>"): the key of its stats is the
# request number, whatever the hostile arguments are.
my $ng = nginx_start(<<'EOF', zk => $zk, backend => $be, workers => 2);
    zk_hosts %%ZK%%;
    zk_session_timeout 10s;

    server {
        listen 127.0.0.1:%%PORT%%;
        add_header X-Lock-Node $zk_lock_node always;

        location /f/ {
            zk_mutex /fz/$arg_x timeout=10s;
            proxy_pass http://%%BACKEND%%$uri;
        }
        location /s/ {
            zk_semaphore /fz/$arg_a/fixed/$arg_b leases=3 timeout=10s;
            proxy_pass http://%%BACKEND%%$uri;
        }
        location /g/ {
            zk_rwlock /fz/t-$arg_x write timeout=10s;
            proxy_pass http://%%BACKEND%%$uri;
        }
        location /t/ {
            zk_mutex /$arg_x timeout=10s;
            proxy_pass http://%%BACKEND%%$uri;
        }
    }
EOF
my $P = $ng->port;
my @workers0 = sort { $a <=> $b } $ng->worker_pids;
is(scalar(@workers0), 2, 'two workers');
ok(sessions_connected($ng), 'both workers have a ZooKeeper session')
    or diag $ng->error_log;

# ------------------------------------------------- the rule, in Perl

# Locations: [directive as the module logs it, path as configured, its
# segments: literal text, "{name}" standing for $arg_name].
my %LOC = (
    f => ['zk_mutex',        '/fz/$arg_x',              ['fz', '{x}']],
    s => ['zk_semaphore',    '/fz/$arg_a/fixed/$arg_b', ['fz', '{a}', 'fixed', '{b}']],
    g => ['zk_rwlock write', '/fz/t-$arg_x',            ['fz', 't-{x}']],
    t => ['zk_mutex',        '/$arg_x',                 ['{x}']],
);

# Strict UTF-8: the character at $pos, no overlong form, no truncated
# sequence, nothing above U+10FFFF. An encoded surrogate (ED A0 80) decodes
# here and is refused below as a code point, as the module does.
sub utf8_next {
    my ($s, $pos) = @_;    # -> (code point, length) or () if invalid
    my $b = ord substr($s, $pos, 1);
    my ($n, $u, $min);
    if    ($b >= 0xc2 && $b <= 0xdf) { ($n, $u, $min) = (1, $b & 0x1f, 0x80) }
    elsif ($b >= 0xe0 && $b <= 0xef) { ($n, $u, $min) = (2, $b & 0x0f, 0x800) }
    elsif ($b >= 0xf0 && $b <= 0xf4) { ($n, $u, $min) = (3, $b & 0x07, 0x10000) }
    else { return () }
    return () if length($s) - $pos - 1 < $n;
    for my $i (1 .. $n) {
        my $c = ord substr($s, $pos + $i, 1);
        return () if ($c & 0xc0) != 0x80;
        $u = ($u << 6) | ($c & 0x3f);
    }
    return () if $u < $min || $u > 0x10ffff;
    return ($u, $n + 1);
}

# README "Paths": the problem with one segment built from variables, or
# undef. $top: the first segment of the path.
sub segment_problem {
    my ($seg, $top) = @_;
    return 'empty' if $seg eq '';
    return '"." or ".."' if $seg eq '.' || $seg eq '..';
    # README: nginx -t refuses /zookeeper at the top; the module applies
    # the same rule to a variable top segment.
    return 'reserved by ZooKeeper' if $top && $seg eq 'zookeeper';
    my $pos = 0;
    while ($pos < length $seg) {
        my $b = ord substr($seg, $pos, 1);
        if ($b < 0x80) {
            return 'a control character' if $b < 0x20 || $b == 0x7f;
            return 'a "/"' if $b == 0x2f;
            $pos++;
            next;
        }
        my ($u, $len) = utf8_next($seg, $pos);
        return 'not valid UTF-8' unless defined $u;
        # README: U+0080-U+009F, U+D800-U+F8FF, U+FFF0-U+FFFF. Beyond
        # U+FFFF ZooKeeper (Java strings) sees a surrogate pair, in
        # D800-DFFF: refused as well (the README list omits them).
        return 'a character ZooKeeper refuses'
            if $u <= 0x9f || ($u >= 0xd800 && $u <= 0xf8ff) || $u >= 0xfff0;
        $pos += $len;
    }
    return undef;
}

# $arg_<name> as nginx finds it: the args end at "#"; the first
# "&"-separated element that starts with "name=" (case-insensitive).
sub arg_value {
    my ($query, $name) = @_;
    (my $args = $query) =~ s/#.*//s;
    for my $el (split /&/, $args, -1) {
        return substr($el, length($name) + 1) if $el =~ /^\Q$name\E=/i;
    }
    return '';    # not found: the variable is empty
}

# -> { status, why, path (accepted), naive (the path a refused value
# would have made) }
sub expected {
    my ($loc, $query) = @_;
    my ($type, $tmpl, $segs) = @{ $LOC{$loc} };
    # Spaces at the end only widen the gap before "HTTP/1.0"; any other
    # space or control byte in a request line is refused by nginx itself
    # (1.21.1+): 400 before any module runs.
    $query =~ s/ +\z//;
    return { status => 400, why => 'nginx' } if $query =~ /[\x00-\x20\x7f]/;
    my @v;
    for my $seg (@$segs) {
        (my $s = $seg) =~ s/\{(\w+)\}/arg_value($query, $1)/ge;
        push @v, $s;
    }
    my $naive = join '', map { "/$_" } @v;
    for my $i (0 .. $#$segs) {
        next unless $segs->[$i] =~ /\{/;
        my $p = segment_problem($v[$i], $i == 0);
        return { status => 400, naive => $naive,
            why => qq{$type path "$tmpl": segment } . ($i + 1) . " is $p" }
            if defined $p;
    }
    return { status => 400, naive => $naive,
        why => qq{$type path "$tmpl" is longer than $MAX_PATH bytes} }
        if length($naive) > $MAX_PATH;
    return { status => 200, path => $naive };
}

# ------------------------------------------------- value generators

my @HOSTILE = ('', '.', '..', '...', '/', '//', 'a/b', '../x', './', '/..',
    'a/..', '.a', 'a.', '%2F', '%2f', 'a%2Fb', '%2F..%2F', '%2E%2E', '%2e',
    '..%2F..', '%00', 'a%00b', '%01', '%1F', '%7F', '%7f', '%80', '%FF',
    '%C0%AF', '%E2%82%AC', '%', '%%', '%zz', '%2', 'zookeeper', 'Zookeeper',
    'ZOOKEEPER', 'zookeeper/x', 'zookeeper%2Fx', 'zookeeperx', ' zookeeper',
    "zookeeper\x00", 'zoo keeper', '&', '#', '?', '=', 'a#b', 'a&x=b',
    '&x=..', 'x=y', 'a=b', 'b=c', '+', ';', '"', "'", '\\', '`', '<a>',
    '$arg_x', '${x}', '*', '~', '|', ' ', "\t", "\x00", "\x01", "a\x01b",
    "\x1f", "\x7f", "a\x7f", "\x1b[0m", "\xff", "\xfe", "\x80", "a\x80",
    "\xc0\xaf", "\xc0\x80", "\xe0\x80\x80", "\xc3", "\xe2\x82", "\xc3\xc3",
    "\xf8\x88\x80\x80\x80", "\xed\xa0\x80", "\xed\xbf\xbf", "\xf4\x90\x80\x80",
    "\xc2\x80", "\xc2\x85", "\xc2\x9f", "\xc2\xa0", "caf\xc3\xa9",
    "\xe4\xb8\xad\xe6\x96\x87", "\xd0\xbf\xd1\x80\xd0\xb8",
    "\xef\xa3\xbf", "\xef\xa4\x80", "\xef\xbf\xaf", "\xef\xbf\xb0",
    "\xef\xbf\xbd", "\xef\xbf\xbf", "\xef\xbb\xbf", "\xf0\x9f\x98\x80",
    "\xf0\x90\x80\x80", "\xf4\x8f\xbf\xbf", "\xe2\x80\xae", "\xe2\x81\xa6");

sub rand_printable {    # 0x21-0x7e (a space is for nginx, see @HOSTILE)
    return join '', map { chr(0x21 + int rand 94) } 1 .. $_[0];
}

sub rand_bytes {    # any byte but CR and LF, which would end the request line
    return join '', map {
        my $b;
        do { $b = int rand 256 } while $b == 10 || $b == 13;
        chr $b;
    } 1 .. $_[0];
}

my @RANGES = ([0x21, 0x7e], [0x80, 0x9f], [0xa0, 0x7ff], [0x800, 0xd7ff],
    [0xd800, 0xdfff], [0xe000, 0xf8ff], [0xf900, 0xffef], [0xfff0, 0xffff],
    [0x10000, 0x10ffff]);

sub rand_unicode {    # UTF-8 encoding of random code points, surrogates too
    my @cp = map {
        my $r = rand() < 0.5 ? $RANGES[0] : $RANGES[rand @RANGES];
        $r->[0] + int rand($r->[1] - $r->[0] + 1);
    } 1 .. $_[0];
    no warnings qw(utf8 surrogate nonchar non_unicode);
    my $s = join '', map { chr } @cp;
    utf8::encode($s);
    return $s;
}

sub rand_percent {    # "%XX" escapes of random bytes: literal for $arg_*
    return join '', map {
        rand() < 0.3 ? (qw(%00 %01 %7F %2F %2E %25 %FF %C0%AF))[rand 8]
                     : sprintf('%%%02X', int rand 256)
    } 1 .. $_[0];
}

# A value around the length limit for location $loc, or far over it.
sub rand_long {
    my ($loc) = @_;
    my $fixed = { f => 4, g => 6, t => 1, s => 4 + 7 + 1 }->{$loc};
    my $len = rand() < 0.7
        ? $MAX_PATH - $fixed - 3 + int rand 7    # the boundary +-3
        : 1100 + int rand 2900;                  # far over
    my $unit = (('a', "\xc3\xa9", "\xe2\x82\xac", '%2F', '.'))[rand 5];
    my $v = $unit x int($len / length($unit) + 1);
    return substr($v, 0, $len);
}

sub gen_value {
    my ($loc) = @_;
    my $k = rand;
    return $HOSTILE[rand @HOSTILE]                        if $k < 0.22;
    return rand_printable(int rand 41)                    if $k < 0.40;
    return rand_bytes(1 + int rand 20)                    if $k < 0.52;
    return rand_unicode(1 + int rand 12)                  if $k < 0.68;
    return rand_percent(1 + int rand 8)                   if $k < 0.76;
    return rand_long($loc)                                if $k < 0.84;
    # hostile value inside random text
    return rand_printable(int rand 6) . $HOSTILE[rand @HOSTILE]
        . rand_printable(int rand 6);
}

# The query string of a request to $loc: its arguments, sometimes with an
# extra argument first, in another order or with the name in upper case.
sub gen_query {
    my ($loc) = @_;
    my @args = $loc eq 's'
        ? (['a', gen_value('s')], ['b', gen_value('s')])
        : (['x', gen_value($loc)]);
    # For /s/ keep the sum of both values near the limit now and then.
    if ($loc eq 's' && rand() < 0.1) {
        my $total = $MAX_PATH - 12 - 2 + int rand 5;
        my $la = 1 + int rand($total - 1);
        @args = (['a', 'a' x $la], ['b', 'b' x ($total - $la)]);
    }
    @args = reverse @args if rand() < 0.2;
    $_->[0] = uc $_->[0] for grep { rand() < 0.05 } @args;
    unshift @args, ['y', rand_printable(3)] if rand() < 0.1;
    return join '&', map { "$_->[0]=$_->[1]" } @args;
}

# ------------------------------------------------- run

# Every value of @HOSTILE in every variable of every location, then random
# requests up to $REQUESTS, in random order.
my @LOCS = ((('f') x 40), (('s') x 25), (('g') x 25), (('t') x 10));
my @todo;    # [loc, query]
for my $v (@HOSTILE) {
    push @todo, map { [$_, "x=$v"] } qw(f g t);
    push @todo, ['s', "a=$v&b=ok"], ['s', "a=ok&b=$v"];
}
# The length limit, exactly: 1024 bytes pass, 1025 do not (bytes, not
# characters: U+00E9 and U+20AC are 2 and 3 bytes).
push @todo, ['f', 'x=' . 'a' x 1020], ['f', 'x=' . 'a' x 1021],
    ['f', 'x=' . "\xc3\xa9" x 510], ['f', 'x=a' . "\xc3\xa9" x 510],
    ['f', 'x=' . "\xe2\x82\xac" x 340], ['f', 'x=' . "\xe2\x82\xac" x 341],
    ['g', 'x=' . 'a' x 1018], ['g', 'x=' . 'a' x 1019],
    ['t', 'x=' . 'a' x 1023], ['t', 'x=' . 'a' x 1024],
    ['s', 'a=' . 'a' x 500 . '&b=' . 'b' x 513],
    ['s', 'a=' . 'a' x 500 . '&b=' . 'b' x 514];
while (@todo < $REQUESTS) {
    my $loc = $LOCS[rand @LOCS];
    push @todo, [$loc, gen_query($loc)];
}
for (my $i = $#todo; $i > 0; $i--) {    # Fisher-Yates with the seeded rand
    my $j = int rand($i + 1);
    @todo[$i, $j] = @todo[$j, $i];
}
my $n = 0;
my @reqs = map { { n => ++$n, loc => $_->[0], query => $_->[1],
    exp => expected(@$_) } } @todo;    # { n, loc, query, exp, res }

my $log0 = length $ng->error_log;
my $t0 = time;
for (my $i = 0; $i < @reqs; $i += $BATCH) {
    my $last = $i + $BATCH - 1;
    $last = $#reqs if $last > $#reqs;
    my @batch = @reqs[$i .. $last];
    my $res = http_parallel([ map { [$P, "/$_->{loc}/$_->{n}?$_->{query}"] }
        @batch ], timeout => 30);
    $batch[$_]{res} = $res->[$_] for 0 .. $#batch;
}
my $took = time - $t0;

# error.log: the line that refused each request, by request number.
my %why_logged;
for my $line (split /\n/, substr($ng->error_log, $log0)) {
    next unless $line =~ m{request: "GET /(\w)/(\d+)\?};
    my $n = $2;
    if ($line =~ /\[info\] .*?\*\d+ (zk_\w+(?: \w+)? path ".*?"(?::| is) .*?), client:/) {
        $why_logged{$n} = $1;
    } elsif ($line =~ /client sent invalid request/) {
        $why_logged{$n} = 'nginx';
    }
}

my $stats = $be->stats;
my (%count, @bad_status, @bad_backend, @bad_why, %by_why, @bad_node, %held);
for my $r (@reqs) {
    my ($exp, $res, $n) = @$r{qw(exp res n)};
    my $got = $res->{status};
    my $desc = "/$r->{loc}/$n?" . show($r->{query});
    $count{ $exp->{status} == 200 ? 'accepted' : 'refused' }++;
    if ($exp->{status} == 200 && $got == 200) {
        # $zk_lock_node: the node it held, named by the module's create
        (my $parent = $res->{headers}{'x-lock-node'} // '') =~ s{/[^/]*$}{};
        $held{$parent} = 1;
        push @bad_node, "$desc: held a node under \"" . show($parent)
            . '", want "' . show($exp->{path}) . '"'
            if $parent ne $exp->{path};
    }
    push @bad_status, "$desc: want $exp->{status}, got $got"
        . ($res->{error} ? " ($res->{error})" : '')
        if $got != $exp->{status};
    my $seen = $stats->{"/$r->{loc}/$n"} ? $stats->{"/$r->{loc}/$n"}{count} : 0;
    my $want_seen = $exp->{status} == 200 ? 1 : 0;
    push @bad_backend, "$desc: backend saw it $seen times, want $want_seen"
        if $seen != $want_seen;
    if ($exp->{status} == 400) {
        my $w = $exp->{why};
        (my $kind = $w) =~ s/^zk_\w+(?: \w+)? path "[^"]*"(?::)? //;
        $by_why{$kind}++;
        push @bad_why, "$desc: want log \"$w\", got \""
            . ($why_logged{$n} // '(no line)') . '"'
            if ($why_logged{$n} // '') ne $w;
    }
}

note sprintf '%d requests in %.1fs: %d accepted, %d refused',
    scalar(@reqs), $took, $count{accepted} // 0, $count{refused} // 0;
note "refused: $by_why{$_} x $_" for sort keys %by_why;

# A query for a diagnostic: bytes outside printable ASCII as \xHH, long
# runs shortened.
sub show {
    my ($q) = @_;
    $q =~ s/(.)\1{15,}/sprintf('%s{x%d}', $1, length $&)/gse;
    $q =~ s/([^\x21-\x7e])/sprintf('\\x%02X', ord $1)/ge;
    return length $q > 200 ? substr($q, 0, 200) . '...' : $q;
}

sub first_ones {
    my ($list) = @_;
    return scalar(@$list) . " wrong, the first ones:\n"
        . join "\n", @$list[0 .. ($#$list < 19 ? $#$list : 19)];
}

my @unanswered = map { "/$_->{loc}/$_->{n}: $_->{res}{error}" }
    grep { !$_->{res}{status} } @reqs;
is_deeply(\@unanswered, [], scalar(@reqs) . ' requests, each answered')
    or diag first_ones(\@unanswered);
ok($by_why{'segment 1 is reserved by ZooKeeper'},
    '"zookeeper" refused at the top');
cmp_ok($count{accepted} // 0, '>', $REQUESTS / 5, 'many accepted values');
cmp_ok($count{refused} // 0, '>', $REQUESTS / 5, 'many refused values');
ok($by_why{nginx}, 'some values refused by nginx itself (raw controls, '
    . 'spaces), before the module');
is_deeply(\@bad_status, [], 'each status is what README "Paths" says '
    . '(accepted -> 200, refused -> 400)')
    or diag first_ones(\@bad_status);
is_deeply(\@bad_backend, [], 'the backend saw each accepted request once '
    . 'and no refused one')
    or diag first_ones(\@bad_backend);
is_deeply(\@bad_why, [], 'error.log names the reason of each refusal')
    or diag first_ones(\@bad_why);
is_deeply(\@bad_node, [], 'each accepted request held its node at the path '
    . 'its value names')
    or diag first_ones(\@bad_node);

# ------------------------------------------------- nodes

no_ephemerals($zk, '/', 'after the fuzz', 10);

# Every persistent node must be a path, or a parent of a path, of an
# accepted value. zkctl gives paths as characters; the values are bytes.
my %allowed = ('/fz' => 1);
my @refused_naive;
for my $r (@reqs) {
    if (my $p = $r->{exp}{path}) {
        my $q = '';
        for my $seg (grep { length } split m{/}, $p) {
            $q .= "/$seg";
            $allowed{$q} = 1;
        }
    } elsif (defined $r->{exp}{naive}) {
        push @refused_naive, $r->{exp}{naive};
    }
}
# Paths built from variables are deleted once idle (README "Paths"): what
# is left is at most what the server has not removed yet.
my @tree;
wait_for(sub { !(@tree = zk_tree($zk, '/fz')) }, 10);
utf8::encode($_) for @tree;
is_deeply(\@tree, [], 'no path of an accepted value is left under /fz')
    or diag explain [map { show($_) } @tree[0 .. ($#tree < 19 ? $#tree : 19)]];
my @stray = grep { !$allowed{$_} } @tree;
is_deeply(\@stray, [], 'every node under /fz is (a parent of) the path '
    . 'of an accepted value')
    or diag explain [map { show($_) } @stray[0 .. ($#stray < 19 ? $#stray : 19)]];
my %in_tree = map { $_ => 1 } @tree;
my @top = zk_children($zk, '/');
utf8::encode($_) for @top;
my @stray_top = grep { $_ ne 'zookeeper' && !$allowed{"/$_"} } @top;
is_deeply(\@stray_top, [], 'every top-level node is /zookeeper, /fz or '
    . 'the path of an accepted /t/ value')
    or diag explain [map { show($_) } @stray_top];
# The values are not url-decoded: "%2F" and "%00" are literal names, the
# glued "t-" makes "" and ".." valid, "zookeeper" is only reserved at the
# top.
my @want = ('/fz/a%2Fb', '/fz/%00', '/fz/%2F..%2F', '/fz/%C0%AF',
    '/fz/zookeeper', '/fz/t-', '/fz/t-.', '/fz/t-..', '/fz/t-%2F',
    '/fz/ok/fixed/%00', '/fz/%7F/fixed/ok', "/fz/caf\xc3\xa9",
    "/fz/\xef\xbf\xaf", '/zookeeperx', '/Zookeeper', '/%2F');
my @missing = grep { !$held{$_} } @want;
is_deeply(\@missing, [], 'nodes named literally by accepted values were held')
    or diag explain [map { show($_) } @missing];
my @made = grep { $in_tree{$_} && !$allowed{$_} } @refused_naive;
is_deeply(\@made, [], 'no node for the path a refused value would make')
    or diag explain [map { show($_) } @made];

# ------------------------------------------------- nginx health

my @bad = grep { /\[(?:alert|crit|emerg)\]|exited on signal/ }
    split /\n/, $ng->error_log;
is_deeply(\@bad, [], 'no [alert]/[crit]/[emerg] or "exited on signal" line')
    or diag explain [@bad[0 .. ($#bad < 9 ? $#bad : 9)]];
is_deeply([sort { $a <=> $b } $ng->worker_pids], \@workers0,
    'the same workers still run');

my $master = $ng->pid;
ok(pid_alive($master), 'the master still runs');
# QUIT: the workers exit (closing their sessions), then the master, which
# logs "exit" last. (A metrics zone written over nginx's slab pool header
# once made the master die of SIGSEGV whenever a worker exited.)
$ng->stop;
my @lines = grep { /\] $master#$master: / } split /\n/, $ng->error_log;
ok(@lines && $lines[-1] =~ /\[notice\] $master#$master: exit$/,
    'the master exits cleanly on QUIT (its "exit" line)')
    or diag 'its last line: ' . ($lines[-1] // '(none)');
diag sprintf 'fuzz.t ran %.1fs', time - $T_START;
done_testing;
