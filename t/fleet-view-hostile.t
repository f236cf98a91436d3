#!/usr/bin/perl
# zk_lock_fleet_view with hostile node data: what a foreign client writes
#
# Foreign nodes, Curator's names (_c_<uuid>-lock-<seq>), under a locked
# path, with data no nginx writes: invalid UTF-8 of every kind (stray
# continuation bytes, overlongs, surrogates, above U+10FFFF, sequences cut
# short), every control byte, quotes, backslashes, "</script>", every byte
# value, the module's own form with hostile fields, and sizes from 0 to
# ZooKeeper's 1 MB around the data cap:
#  1. the JSON parses with strict parsers (JSON::PP on bytes, Python's
#     json), has no "<" at all, and its length is its Content-Length
#  2. each node's data is shown as the reference below says: valid UTF-8
#     as it is, one U+FFFD per maximal invalid subpart, the first 512
#     bytes and an ellipsis when there is more, with its size in bytes
#  3. the HTML page carries no data (the same bytes as before the nodes);
#     in headless Chromium (when there is one) each cell shows the data as
#     text, control characters escaped (\u0001), cut to 40 characters and
#     an ellipsis, the whole in the cell's title with its size (a node's
#     name too, shortened to its UUID's first group); the table fits the
#     window; nothing but the page's own elements is drawn

use strict;
use warnings;
use Test::More;
use JSON::PP ();
use lib 't/lib';
use ZkLock::Test;

require_prereqs(qw(nginx zookeeper kazoo module));

my $CAP = 512;    # the bytes of a node's data the view shows

my $zk = zk_start();

my $ng = nginx_start(<<'EOF', zk => $zk, workers => 1);
    zk_hosts %%ZK%%;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /h/ { zk_mutex /hv/m timeout=5s; return 204; }
        location = /fleet      { zk_lock_fleet_view; }
        location = /fleet.json { zk_lock_fleet_view json; }
    }
EOF
ok(sessions_connected($ng), 'nginx connected');

my $page = $ng->get('/fleet');
is($page->{status}, 200, 'the HTML page, before any node');

# ------------------------------------------------------------ the data

my @cases = (
    [ 'empty', '' ],
    [ 'one byte', 'a' ],
    [ 'one invalid byte', "\xff" ],
    [ 'every control byte', join('', map { chr } 0 .. 0x1f, 0x7f) ],
    [ 'quotes and backslashes', q{"\\"\\\\\\u0000\\'"} . "\\" ],
    [ '</script>', '</script><script>alert(1)</script><!--<script>x' ],
    [ 'markup', q{<img src=x onerror=alert(1)> & &amp; ' " </} ],
    [ 'stray continuation bytes', "\x80\xbf a \x80" ],
    [ 'continuation bytes from 0xc0', "\xc3\xc3 \xe2\xc2\x82 \xc3\xff" ],
    [ 'overlongs', "\xc0\xaf \xc1\xbf \xe0\x80\xaf \xe0\x9f\xbf "
        . "\xf0\x80\x80\xaf \xf0\x8f\xbf\xbf" ],
    [ 'surrogates', "\xed\xa0\x80 \xed\xbf\xbf \xed\xa0\xbd\xed\xb8\x80" ],
    [ 'above U+10FFFF', "\xf4\x90\x80\x80 \xf5\x80\x80\x80 \xf7\xbf\xbf\xbf "
        . "\xf8\x88\x80\x80\x80 \xfc\x84\x80\x80\x80\x80 \xfe \xff" ],
    [ 'sequences cut short', "\xc3 \xe2\x82 \xf0\x9f\x98 x\xe2\x82" ],
    [ 'valid UTF-8', "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xef\xbf\xbd "
        . "\xe2\x80\xa8\xe2\x80\xa9 \xf4\x8f\xbf\xbf \xed\x9f\xbf "
        . "\xee\x80\x80" ],
    [ 'every byte', join('', map { chr } 0 .. 255) ],
    [ 'every byte, backwards', join('', map { chr } reverse 0 .. 255) ],

    # the module's own form, "<host> pid <pid> since <time> <method> <uri>"
    [ 'nginx form, hostile fields',
        "h\"<\x01\xff pid 42 since </script>\\ GET\xc0 "
        . "/\xc0\xaf\"</\xed\xa0\x80",
        { client => 'nginx', host => "h\"<\x01\xff", pid => 42,
          since => "</script>\\", method => "GET\xc0",
          uri => "/\xc0\xaf\"</\xed\xa0\x80" } ],
    [ 'nginx form, a pid with leading zeros',
        'h pid 007 since t GET /x',
        { client => 'nginx', pid => 7, uri => '/x' } ],
    [ 'nginx form, a pid above 64 bits',
        'h pid 99999999999999999999999 since t GET /x' ],
    [ 'nginx form, kept, hostile',
        "h pid 1 since t kept for \"</\xff\x01",
        { client => 'nginx', pid => 1, kept_for => "\"</\xff\x01" } ],
    [ 'nginx form, longer than the cap',
        'h pid 1 since t GET /' . ('x' x $CAP) ],
);

# sizes from 0 to 1 MB: around the cap (a character cut in half by it),
# around the writer's buffers, and ZooKeeper's limit (1 MB by default)
my @fill = (
    [ 'control bytes', "\x01" ],                   # 6 bytes each in JSON
    [ 'quotes and "<"', "\"<\\" ],
    [ 'euro signs', "\xe2\x82\xac" ],              # 3 bytes, cut by the cap
    [ 'emoji', "\xf0\x9f\x98\x80" ],
    [ 'invalid bytes', "\xff\xc0\x80\xed\xa0\x80\xf4\x90" ],
);

for my $n (1, 2, 3, 255, 256, 511, 512, 513, 514, 4096, 65536,
           1024 * 1024 - 1024)
{
    for my $f (@fill) {
        my $d = $f->[1] x (int($n / length $f->[1]) + 1);
        push @cases, [ "$n bytes of $f->[0]", substr($d, 0, $n) ];
    }
}

cmp_ok(scalar @cases, '<=', 100, 'no more nodes than the view reads');

# -------------------------------------------------- the reference rendering

my $VALID = qr/[\x00-\x7f]|[\xc2-\xdf][\x80-\xbf]|\xe0[\xa0-\xbf][\x80-\xbf]
    |[\xe1-\xec\xee\xef][\x80-\xbf]{2}|\xed[\x80-\x9f][\x80-\xbf]
    |\xf0[\x90-\xbf][\x80-\xbf]{2}|[\xf1-\xf3][\x80-\xbf]{3}
    |\xf4[\x80-\x8f][\x80-\xbf]{2}/x;

# the start of a valid character, the longest, that goes no further
my $PREFIX = qr/[\xc2-\xdf]|\xe0[\xa0-\xbf]?|[\xe1-\xec\xee\xef][\x80-\xbf]?
    |\xed[\x80-\x9f]?|\xf0(?:[\x90-\xbf][\x80-\xbf]?)?
    |[\xf1-\xf3](?:[\x80-\xbf][\x80-\xbf]?)?
    |\xf4(?:[\x80-\x8f][\x80-\xbf]?)?/x;

# bytes as the view shows them, as text: Unicode's "maximal subparts"
sub shown {
    my ($bytes, $cap) = @_;
    my $cut = defined $cap && length($bytes) > $cap;
    my $s = $cut ? substr($bytes, 0, $cap) : $bytes;
    my $out = '';

    while (length $s) {
        if ($s =~ s/\A($VALID)//) {
            my $c = $1;             # valid: the lax decoder will do
            utf8::decode($c) or die 'not UTF-8';
            $out .= $c;
        } elsif ($s =~ /\A($PREFIX)/) {
            my $len = length $1;
            last if $cut && $len == length $s;    # cut in half by the cap
            $out .= "\x{fffd}";
            substr($s, 0, $len, '');
        } else {
            $out .= "\x{fffd}";
            substr($s, 0, 1, '');
        }
    }

    return $cut ? "$out\x{2026}" : $out;
}

is(shown("a\xe2\x82\xac", 3), "a\x{2026}", 'reference: a cut');
is(shown("a\xe2\x82\xac", 4), "a\x{20ac}", 'reference: no cut');
is(shown("\xe2\x82a\xf0\x9f\x98"), "\x{fffd}a\x{fffd}",
    'reference: maximal subparts');
is(shown("\xc0\xaf\xed\xa0\x80"), "\x{fffd}" x 5,
    'reference: overlongs and surrogates, byte by byte');

# text as the page draws it: control characters (C0, DEL, C1, U+2028,
# U+2029) as escapes, at most $n characters, an escape counting 6
sub on_page {
    my ($s, $n) = @_;
    my ($out, $w) = ('', 0);

    for my $c (split //, $s) {
        my $e = $c =~ /[\x00-\x1f\x7f-\x9f\x{2028}\x{2029}]/
            ? sprintf('\\u%04x', ord $c) : $c;
        return "$out\x{2026}" if defined $n && $w + length($e) > $n;
        $out .= $e;
        $w += length $e;
    }

    return $out;
}

is(on_page("a\x01\x{2028}b"), 'a\u0001\u2028b', 'reference: escapes');
is(on_page('abcdef', 5), "abcde\x{2026}", 'reference: cut');
is(on_page("abcd\x01", 5), "abcd\x{2026}", 'reference: no half escape');

# ---------------------------------------------------------- the nodes

my $mk = tempdir('hostile') . '/mk.py';
open my $fh, '>', $mk or die "$mk: $!";
print {$fh} <<'PY';
import json, sys
from kazoo.client import KazooClient
spec = json.load(open(sys.argv[2]))
zk = KazooClient(hosts=sys.argv[1], timeout=10)
zk.start(timeout=30)
zk.ensure_path(spec["path"])
names = []
for prefix, data in spec["nodes"]:
    node = zk.create(spec["path"] + "/" + prefix, bytes.fromhex(data),
                     sequence=True)
    names.append(node.rsplit("/", 1)[1])
zk.stop()
zk.close()
print(json.dumps(names))
PY
close $fh;

my $spec = "$mk.json";
open $fh, '>', $spec or die "$spec: $!";
print {$fh} JSON::PP->new->encode({ path => '/hv/m',
    nodes => [ map { [ curator_name(), unpack('H*', $_->[1]) ] } @cases ] });
close $fh;

my $r = run_cmd([ $ZkLock::Test::PYTHON, $mk, $zk->hosts, $spec ],
    timeout => 120);
my $names = eval { JSON::PP->new->decode($r->{out}) };
is(ref $names && scalar @$names, scalar @cases, 'the foreign nodes made')
    or BAIL_OUT("kazoo: $r->{err}");

my %case_of = map { $names->[$_] => $cases[$_] } 0 .. $#cases;

# ------------------------------------------------------------ the JSON

my ($body, $view, $err);
my $strict = JSON::PP->new->utf8;

ok(wait_for(sub {
    my $res = $ng->get('/fleet.json');
    return 0 unless $res->{status} == 200;
    $body = $res->{body};
    $view = eval { $strict->decode($body) };
    $err = $@;
    return 0 unless $view;
    my ($l) = grep { $_->{path} eq '/hv/m' } @{ $view->{locks} };
    return $l && $l->{participants} == @cases;
}, 15, 0.3), 'JSON::PP (strict UTF-8) reads the page, with every node')
    or diag($err || 'not every node');

my $res = $ng->get('/fleet.json');
is($res->{headers}{'content-length'}, length $res->{body},
    'Content-Length: the body as written');

my $py = run_cmd([ $ZkLock::Test::PYTHON, '-c',
    'import json, sys; json.loads(open(sys.argv[1], "rb").read()); '
    . 'print("ok")', do {
        my $f = "$mk.body";
        open my $o, '>', $f or die "$f: $!";
        print {$o} $body // '';
        close $o;
        $f } ]);
is($py->{out}, "ok\n", "Python's json reads it")
    or diag((split /\n/, $py->{err})[-1]);

$body //= '';
is(index($body, '<'), -1, 'no "<" anywhere: safe in a script tag');
ok($body =~ /\A[^\x00-\x1f\x7f]*\n\z/, 'one line, no raw control byte');

my ($lock) = $view ? grep { $_->{path} eq '/hv/m' } @{ $view->{locks} } : ();

subtest 'each node, as the reference shows it' => sub {
    plan skip_all => 'no page' unless $lock;
    is(scalar @{ $lock->{nodes} }, scalar @cases, 'all shown');

    for my $n (@{ $lock->{nodes} }) {
        my $c = $case_of{ $n->{node} };
        ok($c, "$n->{node}: one of ours") or next;
        my ($what, $data, $want) = @$c;
        $want //= {};

        if (($want->{client} // 'curator') eq 'curator') {
            is($n->{client}, 'curator', "$what: a foreign client");
            is($n->{data}, shown($data, $CAP), "$what: its data");
            is($n->{data_bytes}, length $data, "$what: its size");
            next;
        }

        is($n->{client}, 'nginx', "$what: the module's form");
        for my $k (qw(host since method uri kept_for)) {
            is($n->{$k}, shown($want->{$k}), "$what: $k")
                if defined $want->{$k};
        }
        is($n->{pid}, $want->{pid}, "$what: pid, a number");
    }
};

# ------------------------------------------------------------ the page

my $after = $ng->get('/fleet');
is($after->{status}, 200, 'the HTML page');
ok($after->{body} eq $page->{body},
    'the same bytes as before the nodes: no data in the page');

SKIP: {
    my $why = ZkLock::Test::_missing('chromium');
    skip $why, 1 if $why;

    subtest 'in Chromium: the data as text, nothing injected' => sub {
        my $url = 'http://127.0.0.1:' . $ng->port . '/fleet';
        my $b = run_cmd([ $ZkLock::Test::PYTHON,
            "$ZkLock::Test::LIB_DIR/view_browser.py", $url, 1, 30 ],
            timeout => 90);
        is($b->{rc}, 0, 'rendered') or return diag $b->{err};
        my $p = eval { JSON::PP->new->decode($b->{out}) };
        ok($p, 'rows as JSON') or return diag $b->{out};

        ok(!grep({ !/^(?:section|h2|small|p|table|tr|th|td)$/ }
            @{ $p->{tags} }), 'only the elements the page draws')
            or diag explain $p->{tags};
        is_deeply($p->{dialogs}, [], 'no alert()');

        my ($l) = grep { $_->{path} eq '/hv/m' } @{ $p->{locks} };
        ok($l, 'the table') or return;
        my @rows = @{ $l->{rows} };
        is(scalar @rows, scalar @cases, 'a row per node');
        cmp_ok($l->{width}, '<=', $p->{viewport},
            'the table fits the window');
        my %col;
        @col{ @{ $l->{header} } } = 0 .. $#{ $l->{header} };

        for my $row (@rows) {
            my $c = $case_of{ $row->{titles}[ $col{node} ]
                || $row->{cells}[ $col{node} ] } or next;
            my ($what, $data, $want) = @$c;
            next if $want && $want->{client};
            my $shown = shown($data, $CAP);
            is($row->{cells}[ $col{host} ], on_page($shown, 40),
                "$what: as text, escaped, cut");
            is($row->{titles}[ $col{host} ],
                on_page($shown) . ' (' . length($data) . ' bytes)',
                "$what: whole in the title");
        }
    };
}

done_testing();
