#!/usr/bin/perl
# conf-examples/: every example, an http-context snippet meant for
# /etc/nginx/conf.d/ (or, in conf-examples/stream/, a stream-context one),
# passes "nginx -t" once wrapped the way the stock nginx.conf includes it (the harness writes load_module for the built
# module, unless ZK_LOCK_MODULE is empty: a static build; events {}; and
# http { <snippet> }), and the demo of README.md runs and shows the cap
# holding.

use strict;
use warnings;
use Test::More;
use lib 't/lib';
use ZkLock::Test;

require_prereqs(qw(nginx zookeeper kazoo module stream));

for my $file (glob 'conf-examples/*.conf') {
    open my $fh, '<', $file or die "$file: $!";
    my $snippet = do { local $/; <$fh> };
    close $fh;

    # a snippet, not a whole nginx.conf: the module is loaded by the
    # package's modules-enabled/ snippet (or the harness, here)
    unlike($snippet, qr/^\s*(load_module|events|http)\b/m,
        "$file is an http-context snippet");

    # logs go to /var/log/nginx, which only root may write: here, to the
    # test's own prefix; relative paths (htpasswd) are relative to it too
    $snippet =~ s{/var/log/nginx/}{%%PREFIX%%/logs/}g;

    my ($rc, $out) = nginx_test_conf($snippet);
    is($rc, 0, "$file passes nginx -t") or diag $out;
}

# conf-examples/stream/: stream-context snippets, in a stream {} block
for my $file (glob 'conf-examples/stream/*.conf') {
    open my $fh, '<', $file or die "$file: $!";
    my $snippet = do { local $/; <$fh> };
    close $fh;

    unlike($snippet, qr/^\s*(load_module|events|http|stream)\b/m,
        "$file is a stream-context snippet");

    $snippet =~ s{/var/log/nginx/}{%%PREFIX%%/logs/}g;

    my ($rc, $out) = nginx_test_conf('', stream => $snippet);
    is($rc, 0, "$file passes nginx -t") or diag $out;
}

my $out = `$^X conf-examples/demo.pl 2>&1`;
is($?, 0, 'the demo succeeds') or diag $out;
like($out, qr/at most 3 in flight \(leases=3\)/, 'the demo shows the cap');
like($out, qr/znodes left under \S+: 0/, 'and leaves no node');

done_testing();
