#!/usr/bin/perl
# The module's version (issue 27, item 3): one number, in the sources
# (NGX_ZK_LOCK_VERSION), at the top of CHANGES, and at run time in the
# status page (JSON "version") and in the metrics (zk_lock_build_info);
# LICENSE is the BSD 2-clause license, as nginx's.

use strict;
use warnings;
use Test::More;
use lib 't/lib';
use ZkLock::Test;

require_prereqs(qw(nginx zookeeper module));

my ($version) = slurp('src/ngx_zk_lock_version.h')
    =~ /^#define NGX_ZK_LOCK_VERSION\s+"([^"]+)"$/m;
like($version // '', qr/^\d+\.\d+\.\d+$/, "the sources' version: "
    . ($version // 'none'));

my ($changes) = slurp('CHANGES')
    =~ /^Changes with ngx_http_zk_lock_module (\S+)\s+\d+ \w{3} \d{4}$/m;
is($changes, $version, 'CHANGES begins with it');

like(slurp('LICENSE'), qr/Redistribution and use in source and binary forms/,
    'LICENSE: the BSD 2-clause license');

my $zk = zk_start();
my $ng = nginx_start(<<'EOF', zk => $zk, workers => 1);
    zk_hosts %%ZK%%;
    server {
        listen 127.0.0.1:%%PORT%%;
        location = /status  { zk_lock_status_page; }
        location = /metrics { zk_lock_status_page prometheus; }
        location /m { zk_mutex /v/m; return 204; }
    }
EOF

# the build (issue 37, item 3): the commit of this checkout, +dirty when
# the sources differ from it, or a package's version, or a checksum
my ($build) = $ng->get('/status')->{body}
    =~ /^\{"version":"\Q$version\E","build":"([^"]*)",/;
ok(defined $build, 'the status page names the version and the build');
# a build made before the last commits names an older one: an ancestor
my $git = 'git -c safe.directory=$PWD';
my $in_git = !system("$git rev-parse --git-dir >/dev/null 2>&1");
my ($commit) = ($build // '') =~ /^([0-9a-f]{12})(?:\+dirty)?$/;
ok(($build // '') =~ /^[0-9][0-9A-Za-z.+~]*$/    # a package's version
    || ($commit && !system("$git merge-base --is-ancestor $commit HEAD")),
    'the build is a commit of this checkout: ' . ($build // 'none'))
    if $in_git && !$ENV{ZK_LOCK_MODULE} && !$ENV{ZK_LOCK_NGINX};
like($ng->get('/metrics')->{body},
    qr/^zk_lock_build_info\{version="\Q$version\E",build="\Q${\($build \/\/ '')}\E"\} 1$/m,
    'zk_lock_build_info names both');
like($ng->error_log, qr/\[notice\] .*zk_lock \Q$version\E \(build \Q${\($build \/\/ '')}\E\), zk_session_timeout \d+ms/,
    'each worker logs them at its start');

done_testing();
