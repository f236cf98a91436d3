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

like($ng->get('/status')->{body}, qr/^\{"version":"\Q$version\E",/,
    'the status page names it');
like($ng->get('/metrics')->{body},
    qr/^zk_lock_build_info\{version="\Q$version\E"\} 1$/m,
    'zk_lock_build_info names it');

done_testing();
