#!/usr/bin/perl
# Configuration checks of ngx_http_zk_lock_module: every invalid
# configuration makes "nginx -t" fail with a message naming the problem,
# and a valid configuration using every directive at every level passes
# "nginx -t" without any ZooKeeper running.

use strict;
use warnings;
use Test::More;
use Time::HiRes qw(time);
use lib 't/lib';
use ZkLock::Test;

require_prereqs(qw(nginx module));

# A port nothing listens on: "nginx -t" must not need ZooKeeper.
my $NO_ZK = '127.0.0.1:' . free_port();

sub server_with {
    my ($loc) = @_;
    return <<"EOF";
    server {
        listen 127.0.0.1:%%PORT%%;
        location / {
            $loc
            proxy_pass http://%%BACKEND%%;
        }
    }
EOF
}

# Each case: name, http body, regexp the "nginx -t" output must match and,
# for nginx's generic messages that do not name the directive ("value must
# be between ...", "invalid value ..."), a regexp the nginx.conf line the
# message points at must match.
my @bad = (
    [ 'lock directive without zk_hosts',
      server_with('zk_mutex /a;'),
      qr/"zk_mutex" is used but "zk_hosts" is not set/ ],
    [ 'semaphore without zk_hosts',
      server_with('zk_semaphore /a leases=2;'),
      qr/"zk_semaphore" is used but "zk_hosts" is not set/ ],
    [ 'relative path',
      "zk_hosts $NO_ZK;\n" . server_with('zk_mutex locks/a;'),
      qr/lock path "locks\/a" must be absolute/ ],
    [ 'path "/" alone',
      "zk_hosts $NO_ZK;\n" . server_with('zk_mutex /;'),
      qr/lock path "\/" must be absolute and name a node below "\/"/ ],
    [ 'empty segment',
      "zk_hosts $NO_ZK;\n" . server_with('zk_mutex /a//b;'),
      qr/invalid lock path "\/a\/\/b": segment 2 is empty/ ],
    [ '"." segment',
      "zk_hosts $NO_ZK;\n" . server_with('zk_mutex /a/./b;'),
      qr/invalid lock path "\/a\/\.\/b": segment 2 is "\." or "\.\."/ ],
    [ '".." segment',
      "zk_hosts $NO_ZK;\n" . server_with('zk_mutex /a/../b;'),
      qr/invalid lock path "\/a\/\.\.\/b": segment 2 is "\." or "\.\."/ ],
    [ 'trailing "/"',
      "zk_hosts $NO_ZK;\n" . server_with('zk_mutex /a/b/;'),
      qr/invalid lock path "\/a\/b\/": segment 3 is empty/ ],
    [ 'reserved /zookeeper',
      "zk_hosts $NO_ZK;\n" . server_with('zk_mutex /zookeeper/x;'),
      qr/invalid lock path "\/zookeeper\/x": segment 1 is reserved by ZooKeeper/ ],
    [ 'control character in a literal segment',
      "zk_hosts $NO_ZK;\n" . server_with("zk_mutex \"/a/b\tc\";"),
      qr/invalid lock path "\/a\/b\tc": segment 2 is a control character/ ],
    [ 'zk_semaphore without leases (timeout only)',
      "zk_hosts $NO_ZK;\n" . server_with('zk_semaphore /s timeout=1s;'),
      qr/"zk_semaphore" must have "leases" parameter/ ],
    [ 'zk_semaphore with the path only',
      "zk_hosts $NO_ZK;\n" . server_with('zk_semaphore /s;'),
      qr/"zk_semaphore" must have "leases" parameter/ ],
    [ 'leases=0',
      "zk_hosts $NO_ZK;\n" . server_with('zk_semaphore /s leases=0;'),
      qr/invalid number of leases "leases=0"/ ],
    [ 'leases=-1',
      "zk_hosts $NO_ZK;\n" . server_with('zk_semaphore /s leases=-1;'),
      qr/invalid number of leases "leases=-1"/ ],
    [ 'leases=abc',
      "zk_hosts $NO_ZK;\n" . server_with('zk_semaphore /s leases=abc;'),
      qr/invalid number of leases "leases=abc"/ ],
    [ 'leases= (empty)',
      "zk_hosts $NO_ZK;\n" . server_with('zk_semaphore /s leases=;'),
      qr/invalid number of leases "leases="/ ],
    [ 'leases twice, a number and a count',
      "zk_hosts $NO_ZK;\n"
          . server_with('zk_semaphore /s leases=3 leases=zk:/c;'),
      qr/"leases" parameter is duplicate/ ],
    [ 'timeout twice',
      "zk_hosts $NO_ZK;\n" . server_with('zk_mutex /a timeout=1s timeout=2s;'),
      qr/"timeout" parameter is duplicate/ ],
    [ 'leases_default without leases=zk:',
      "zk_hosts $NO_ZK;\n"
          . server_with('zk_semaphore /s leases=3 leases_default=2;'),
      qr/"leases_default" is only for a count read with "leases=zk:"/ ],
    [ 'a mutex and a semaphore of 5 on one path',
      "zk_hosts $NO_ZK;\n" . server_with("zk_mutex /t;")
          . server_with("zk_semaphore /t leases=5;"),
      qr/lock path "\/t" is already another kind of lock \(recipe, protocol or leases\) at \S+nginx.conf:\d+/ ],
    [ 'semaphores of 3 and 5 leases on one path',
      "zk_hosts $NO_ZK;\n" . server_with("zk_semaphore /t leases=3;")
          . server_with("zk_semaphore /t leases=5;"),
      qr/lock path "\/t" is already another kind of lock/ ],
    [ 'semaphore v1 and v2 on one path',
      "zk_hosts $NO_ZK;\n" . server_with("zk_semaphore /t leases=3;\n"
          . "zk_semaphore /t leases=3 protocol=v2;"),
      qr/lock path "\/t" is already another kind of lock/ ],
    [ 'a mutex and a rwlock on one path',
      "zk_hosts $NO_ZK;\n" . server_with("zk_rwlock /t write;")
          . server_with("zk_mutex /t;"),
      qr/lock path "\/t" is already another kind of lock/ ],
    [ 'a reentrant and a non-reentrant mutex on one path',
      "zk_hosts $NO_ZK;\n" . server_with("zk_mutex /t;")
          . server_with("zk_mutex /t reentrant=off;"),
      qr/lock path "\/t" is already another kind of lock/ ],
    [ 'leases on zk_mutex',
      "zk_hosts $NO_ZK;\n" . server_with('zk_mutex /a leases=2;'),
      qr/invalid parameter "leases=2"/ ],
    [ 'unknown parameter',
      "zk_hosts $NO_ZK;\n" . server_with('zk_mutex /a foo=1;'),
      qr/invalid parameter "foo=1"/ ],
    [ 'bad reentrant value',
      "zk_hosts $NO_ZK;\n" . server_with('zk_mutex /a reentrant=no;'),
      qr/invalid value "reentrant=no", "on" or "off" expected/ ],
    [ 'reentrant on a semaphore',
      "zk_hosts $NO_ZK;\n" . server_with('zk_semaphore /a leases=2 reentrant=off;'),
      qr/invalid parameter "reentrant=off"/ ],
    [ 'bad protocol',
      "zk_hosts $NO_ZK;\n" . server_with('zk_semaphore /a leases=2 protocol=v3;'),
      qr/invalid value "protocol=v3", "v1" or "v2" expected/ ],
    [ 'protocol on a mutex',
      "zk_hosts $NO_ZK;\n" . server_with('zk_mutex /a protocol=v2;'),
      qr/invalid parameter "protocol=v2"/ ],
    [ 'zk_rwlock without a mode',
      "zk_hosts $NO_ZK;\n" . server_with('zk_rwlock /a;'),
      qr/"zk_rwlock" must have "read" or "write" after the path/ ],
    [ 'zk_rwlock with a bad mode',
      "zk_hosts $NO_ZK;\n" . server_with('zk_rwlock /a both;'),
      qr/"zk_rwlock" must be "read" or "write", not "both"/ ],
    [ 'zk_rwlock with leases',
      "zk_hosts $NO_ZK;\n" . server_with('zk_rwlock /a read leases=2;'),
      qr/invalid parameter "leases=2"/ ],
    [ 'zk_rwlock alone, without zk_hosts',
      server_with('zk_rwlock /a write;'),
      qr/"zk_rwlock" is used but "zk_hosts" is not set/ ],
    [ 'unknown parameter on zk_semaphore',
      "zk_hosts $NO_ZK;\n" . server_with('zk_semaphore /s leases=1 bar;'),
      qr/invalid parameter "bar"/ ],
    [ 'bad timeout=',
      "zk_hosts $NO_ZK;\n" . server_with('zk_mutex /a timeout=abc;'),
      qr/invalid timeout "timeout=abc"/ ],
    [ 'bad semaphore timeout=',
      "zk_hosts $NO_ZK;\n"
          . server_with('zk_semaphore /s leases=2 timeout=5x;'),
      qr/invalid timeout "timeout=5x"/ ],
    [ 'two chroots in zk_hosts',
      "zk_hosts 127.0.0.1:2181/x,127.0.0.1:2182/y;\n"
        . server_with('zk_mutex /a;'),
      qr{a chroot follows the last host only, in "127.0.0.1:2181/x,127.0.0.1:2182/y"} ],
    [ 'a literal path longer than zk_lock_max_path',
      "zk_hosts $NO_ZK;\nzk_lock_max_path 16;\n"
        . server_with('zk_mutex /a/very/long/lock/path;'),
      qr{lock path in \S+:\d+ is 22 bytes, longer than zk_lock_max_path \(16\): "/a/very/long/lock/path"} ],
    # issue 36, item 5: what is wrong comes first, the path is shortened,
    # and the message keeps nginx's " in file:line"
    [ 'a literal path of 2000 bytes',
      "zk_hosts $NO_ZK;\n" . server_with('zk_mutex /' . 'a' x 1999 . ';'),
      qr{lock path in \S+:\d+ is 2000 bytes, longer than zk_lock_max_path \(1024\): "/a{20,200}\.\.\.a{10,100}" in \S+:\d+$}m ],
    [ 'a long path with an empty segment',
      "zk_hosts $NO_ZK;\n" . server_with('zk_mutex /' . 'a' x 1500 . '//b;'),
      qr{invalid lock path "/a{20,200}\.\.\.a*//b": segment 2 is empty in \S+:\d+$}m ],
    [ 'a long relative path',
      "zk_hosts $NO_ZK;\n" . server_with('zk_mutex ' . 'a' x 1500 . ';'),
      qr{lock path "a{20,200}\.\.\.a+" must be absolute and name a node below "/" in \S+:\d+$}m ],
    [ 'a mutex twice on one path in a location',
      "zk_hosts $NO_ZK;\n"
        . server_with("zk_mutex /dup/m timeout=3s;\nzk_mutex /dup/m timeout=1s;"),
      qr{lock path "/dup/m" is duplicate: a request takes it once, with the parameters of the first directive} ],
    [ 'a mutex and a semaphore of 1 lease on one path in a location',
      "zk_hosts $NO_ZK;\n"
        . server_with("zk_mutex /dup/m;\nzk_semaphore /dup/m leases=1;"),
      qr{lock path "/dup/m" is duplicate} ],
    [ 'a read lock twice on one path in a location',
      "zk_hosts $NO_ZK;\n"
        . server_with("zk_rwlock /dup/rw read;\nzk_rwlock /dup/rw read timeout=1s;"),
      qr{lock path "/dup/rw" is duplicate} ],
    [ 'a path with variables twice in a location',
      "zk_hosts $NO_ZK;\n"
        . server_with("zk_mutex /dup/\$arg_a;\nzk_mutex /dup/\$arg_a timeout=1s;"),
      qr{lock path "/dup/\$arg_a" is duplicate} ],
    [ 'leases above 2^31 - 1',
      "zk_hosts $NO_ZK;\n" . server_with('zk_semaphore /s leases=100000000000;'),
      qr{"leases=100000000000" is more than 2147483647, the most leases} ],
    [ 'leases_default above 2^31 - 1',
      "zk_hosts $NO_ZK;\n"
        . server_with('zk_semaphore /s leases=zk:/c leases_default=2147483648;'),
      qr{"leases_default=2147483648" is more than 2147483647} ],
    [ 'weight= on zk_mutex',
      "zk_hosts $NO_ZK;\n" . server_with('zk_mutex /m weight=2;'),
      qr{"weight" is only for "zk_semaphore": a request takes one lease of a mutex} ],
    [ 'weight= on zk_rwlock',
      "zk_hosts $NO_ZK;\n" . server_with('zk_rwlock /rw write weight=2;'),
      qr{"weight" is only for "zk_semaphore"} ],
    [ 'zk_lock other than off',
      "zk_hosts $NO_ZK;\n" . server_with('zk_lock on;'),
      qr/invalid value "on", "off" expected/ ],
    [ 'zk_lock off beside a lock directive',
      "zk_hosts $NO_ZK;\n" . server_with("zk_lock off;\nzk_mutex /a;"),
      qr/a lock directive where "zk_lock off" is set/ ],
    [ 'a lock directive beside the status page',
      "zk_hosts $NO_ZK;\n" . server_with("zk_lock_status_page;\nzk_mutex /a;"),
      qr/a lock directive where "zk_lock_status_page" is: the status page is never gated/ ],
    [ 'zk_session_timeout 0',
      "zk_hosts $NO_ZK;\nzk_session_timeout 0;\n"
        . server_with('zk_mutex /a;'),
      qr/"zk_session_timeout" directive must be at least 1s/ ],
    [ 'zk_session_timeout below 1s',
      "zk_hosts $NO_ZK;\nzk_session_timeout 500ms;\n"
        . server_with('zk_mutex /a;'),
      qr/"zk_session_timeout" directive must be at least 1s \(a ZooKeeper server allows no less than two of its ticks\)/ ],
    [ 'bad zk_session_timeout',
      "zk_hosts $NO_ZK;\nzk_session_timeout abc;\n"
          . server_with('zk_mutex /a;'),
      qr/"zk_session_timeout" directive invalid value/ ],
    [ 'bad zk_lock_timeout',
      "zk_hosts $NO_ZK;\n" . server_with("zk_lock_timeout abc;\nzk_mutex /a;"),
      qr/"zk_lock_timeout" directive invalid value/ ],
    [ 'zk_lock_status 200',
      "zk_hosts $NO_ZK;\n" . server_with("zk_lock_status 200;\nzk_mutex /a;"),
      qr/value must be between 400 and 599/, qr/zk_lock_status 200;/ ],
    [ 'zk_lock_status 600',
      "zk_hosts $NO_ZK;\n" . server_with("zk_lock_status 600;\nzk_mutex /a;"),
      qr/value must be between 400 and 599/, qr/zk_lock_status 600;/ ],
    [ 'zk_lock_status abc',
      "zk_hosts $NO_ZK;\n" . server_with("zk_lock_status abc;\nzk_mutex /a;"),
      qr/"zk_lock_status" directive invalid number/ ],
    [ 'zk_lock_log_level bogus',
      "zk_hosts $NO_ZK;\n"
          . server_with("zk_lock_log_level bogus;\nzk_mutex /a;"),
      qr/invalid value "bogus"/, qr/zk_lock_log_level bogus;/ ],
    [ 'duplicate zk_hosts',
      "zk_hosts $NO_ZK;\nzk_hosts $NO_ZK;\n" . server_with('zk_mutex /a;'),
      qr/"zk_hosts" directive is duplicate/ ],
    [ 'zk_hosts with a chroot only',
      "zk_hosts /chroot;\n" . server_with('zk_mutex /a;'),
      qr/no hosts in "\/chroot"/ ],
    [ 'zk_hosts with an invalid chroot',
      "zk_hosts 127.0.0.1:1/a/../b;\n" . server_with('zk_mutex /a;'),
      qr/invalid chroot in "127\.0\.0\.1:1\/a\/\.\.\/b": a segment is "\." or "\.\."/ ],
    [ 'zk_hosts with an empty chroot segment',
      "zk_hosts 127.0.0.1:1/a//b;\n" . server_with('zk_mutex /a;'),
      qr/invalid chroot in "127\.0\.0\.1:1\/a\/\/b": a segment is empty/ ],
    [ 'zk_hosts without a port',
      "zk_hosts 127.0.0.1;\n" . server_with('zk_mutex /a;'),
      qr/invalid host "127\.0\.0\.1"/ ],
    [ 'zk_hosts with a bad port in the list',
      "zk_hosts 127.0.0.1:2181,127.0.0.2:99999/x;\n" . server_with('zk_mutex /a;'),
      qr/invalid host "127\.0\.0\.2:99999"/ ],
    [ 'zk_hosts with a name that does not resolve',
      "zk_hosts 127.0.0.1:2181,no-such-host.invalid:2181;\n"
          . server_with('zk_mutex /a;'),
      qr/invalid host "no-such-host\.invalid:2181" in "[^"]+", host not found/ ],
    [ 'zk_hosts with a unix socket',
      "zk_hosts unix:/tmp/zk.sock;\n" . server_with('zk_mutex /a;'),
      qr/invalid host "unix:"/ ],
    [ 'zk_hosts in a server block',
      <<"EOF",
    server {
        listen 127.0.0.1:%%PORT%%;
        zk_hosts $NO_ZK;
        location / { zk_mutex /a; proxy_pass http://%%BACKEND%%; }
    }
EOF
      qr/"zk_hosts" directive is not allowed here/ ],
    [ 'zk_hosts in a location block',
      server_with("zk_hosts $NO_ZK;"),
      qr/"zk_hosts" directive is not allowed here/ ],
    [ 'zk_session_timeout in a server block',
      "zk_hosts $NO_ZK;\n" . <<'EOF',
    server {
        listen 127.0.0.1:%%PORT%%;
        zk_session_timeout 5s;
    }
EOF
      qr/"zk_session_timeout" directive is not allowed here/ ],
    [ 'zk_mutex with too many arguments',
      "zk_hosts $NO_ZK;\n"
          . server_with('zk_mutex /a timeout=1s reentrant=off extra;'),
      qr/invalid parameter "extra"/ ],
    [ 'zk_mutex without arguments',
      "zk_hosts $NO_ZK;\n" . server_with('zk_mutex;'),
      qr/invalid number of arguments in "zk_mutex" directive/ ],
    [ 'zk_semaphore with too many arguments',
      "zk_hosts $NO_ZK;\n"
          . server_with('zk_semaphore /s leases=1 timeout=1s protocol=v2 x;'),
      qr/invalid parameter "x"/ ],
    [ 'leases=zk: without leases_default',
      "zk_hosts $NO_ZK;\n" . server_with('zk_semaphore /s leases=zk:/c/n;'),
      qr/"zk_semaphore" with "leases=zk:" must have "leases_default" parameter/ ],
    [ 'leases=zk: with a bad path',
      "zk_hosts $NO_ZK;\n"
          . server_with('zk_semaphore /s leases=zk:c/../n leases_default=2;'),
      qr/invalid lease count path in "leases=zk:c\/..\/n"/ ],
    [ 'zk_lock_histogram_buckets: not a time',
      "zk_hosts $NO_ZK;\nzk_lock_histogram_buckets 5ms soon 1s;\n"
          . server_with('zk_mutex /a;'),
      qr/invalid bucket "soon" in "zk_lock_histogram_buckets": a time \("250ms", "10s"\) or seconds to the millisecond \("0\.25"\) expected/ ],
    [ 'zk_lock_histogram_buckets: finer than a millisecond',
      "zk_hosts $NO_ZK;\nzk_lock_histogram_buckets 0.0005 1s;\n"
          . server_with('zk_mutex /a;'),
      qr/invalid bucket "0\.0005" in "zk_lock_histogram_buckets"/ ],
    [ 'zk_lock_histogram_buckets: descending',
      "zk_hosts $NO_ZK;\nzk_lock_histogram_buckets 10ms 1s 0.5;\n"
          . server_with('zk_mutex /a;'),
      qr/bucket "0\.5" in "zk_lock_histogram_buckets" is not above "1s" before it: the buckets must ascend/ ],
    [ 'zk_lock_histogram_buckets: the same bound twice',
      "zk_hosts $NO_ZK;\nzk_lock_histogram_buckets 10ms 1s 1000ms;\n"
          . server_with('zk_mutex /a;'),
      qr/bucket "1000ms" in "zk_lock_histogram_buckets" is not above "1s" before it/ ],
    [ 'zk_lock_histogram_buckets: +Inf',
      "zk_hosts $NO_ZK;\nzk_lock_histogram_buckets 1s +Inf;\n"
          . server_with('zk_mutex /a;'),
      qr/bucket "\+Inf" in "zk_lock_histogram_buckets": it is always there/ ],
    [ 'zk_lock_histogram_buckets: more than 32',
      "zk_hosts $NO_ZK;\nzk_lock_histogram_buckets "
          . join(' ', map { "${_}ms" } 1 .. 33) . ";\n"
          . server_with('zk_mutex /a;'),
      qr/"zk_lock_histogram_buckets" has 33 buckets, more than 32/ ],
    [ 'zk_lock_histogram_buckets twice',
      "zk_hosts $NO_ZK;\nzk_lock_histogram_buckets 1s;\n"
          . "zk_lock_histogram_buckets 2s;\n" . server_with('zk_mutex /a;'),
      qr/"zk_lock_histogram_buckets" directive is duplicate/ ],
    [ 'zk_lock_histogram_buckets without a value',
      "zk_hosts $NO_ZK;\nzk_lock_histogram_buckets;\n"
          . server_with('zk_mutex /a;'),
      qr/invalid number of arguments in "zk_lock_histogram_buckets" directive/ ],
    [ 'zk_lock_histogram_buckets in a server',
      "zk_hosts $NO_ZK;\n"
          . "server { listen 127.0.0.1:%%PORT%%; zk_lock_histogram_buckets 1s; }\n",
      qr/"zk_lock_histogram_buckets" directive is not allowed here/ ],
);

# The nginx.conf line an "[emerg] ... in FILE:LINE" message points at (the
# prefix dir of nginx_test_conf lives until the end of the test).
sub conf_line {
    my ($out) = @_;
    my ($file, $n) = $out =~ /\[emerg\] .* in (\S+):(\d+)$/m or return undef;
    open my $fh, '<', $file or return undef;
    my @lines = <$fh>;
    return $lines[$n - 1];
}

for my $case (@bad) {
    my ($name, $body, $re, $line_re) = @$case;
    my ($rc, $out) = nginx_test_conf($body);
    subtest $name => sub {
        isnt($rc, 0, 'nginx -t fails');
        like($out, $re, 'message names the problem');
        if ($line_re) {
            like(conf_line($out) // '', $line_re,
                'and points at the offending directive');
        }
        like($out, qr/\[emerg\]/, 'at level emerg');
        unlike($out, qr/test is successful/, 'no success claimed');
    } or diag "nginx -t output:\n$out";
}

# ------------------------------------------------------------ valid configs

my $full = <<"EOF";
    zk_hosts $NO_ZK,127.0.0.2:2181;
    zk_session_timeout 5s;
    zk_lock_timeout 30s;
    zk_lock_status 429;
    zk_lock_log_level warn;
    zk_mutex /locks/global timeout=1m;

    server {
        listen 127.0.0.1:%%PORT%%;
        zk_semaphore /locks/server leases=10 timeout=500ms;
        zk_lock_status 503;
        zk_lock_log_level info;

        location / {
            proxy_pass http://%%BACKEND%%;
        }
        location /m/ {
            zk_mutex /locks/m;
            zk_lock_timeout 2s;
            zk_lock_log_level notice;
            proxy_pass http://%%BACKEND%%;
        }
        location /t/ {
            zk_mutex /locks/t/\$arg_t timeout=5s;
            zk_lock_status 599;
            proxy_pass http://%%BACKEND%%;
        }
        location /u/ {
            zk_mutex /locks/u-\$arg_u;
            zk_lock_log_level error;
            proxy_pass http://%%BACKEND%%;
        }
        location /h/ {
            zk_semaphore /locks/h/\${http_x_tenant}-x/\$host leases=3;
            zk_lock_status 400;
            proxy_pass http://%%BACKEND%%;
        }
        location /two/ {
            zk_mutex /locks/two/a;
            zk_semaphore /locks/two/b leases=2 timeout=0;
            location /two/nested/ {
                zk_lock_timeout 1s;
                proxy_pass http://%%BACKEND%%;
            }
            proxy_pass http://%%BACKEND%%;
        }
        location /unicode/ {
            zk_mutex "/locks/caf\x{c3}\x{a9}/\x{e2}\x{82}\x{ac}";
            proxy_pass http://%%BACKEND%%;
        }
    }
    server {
        listen 127.0.0.1:%%PORT%%;
        server_name second;
        location / {
            zk_semaphore /a leases=1;
            proxy_pass http://%%BACKEND%%;
        }
    }
EOF

my @good = (
    [ 'every directive at every level', $full ],
    [ 'chroot', "zk_hosts 127.0.0.1:2181/nginx;\n"
          . server_with('zk_mutex /locks/a;') ],
    [ 'deep chroot, several hosts',
      "zk_hosts 127.0.0.1:2181,127.0.0.1:2182,localhost:2183/a/b-c/d_e;\n"
          . server_with('zk_semaphore /s leases=5;') ],
    [ 'mixed text and variable segment',
      "zk_hosts $NO_ZK;\n" . server_with('zk_mutex /locks/u-$arg_u;') ],
    [ 'variable as a whole segment',
      "zk_hosts $NO_ZK;\n" . server_with('zk_mutex /locks/t/$arg_t;') ],
    [ 'variable as the top segment (checked at run time)',
      "zk_hosts $NO_ZK;\n" . server_with('zk_mutex /$arg_top/x;') ],
    [ '"/zookeeper" below a chroot is allowed',
      "zk_hosts $NO_ZK/nginx;\n" . server_with('zk_mutex /zookeeper/x;') ],
    [ '"zookeeper" below the top is allowed',
      "zk_hosts $NO_ZK;\n" . server_with('zk_mutex /a/zookeeper;') ],
    [ 'leases=1 and large leases',
      "zk_hosts $NO_ZK;\n"
          . server_with("zk_semaphore /s1 leases=1;\nzk_semaphore /s2 leases=100000;\n"
              . "zk_semaphore /s3 leases=2147483647;") ],
    [ 'one path in a location: the write lock and the read lock; the same '
          . 'path in two locations',
      "zk_hosts $NO_ZK;\n"
          . server_with("zk_rwlock /d/rw write;\nzk_rwlock /d/rw read;")
          . server_with("zk_mutex /d/m;") . server_with("zk_mutex /d/m;") ],
    [ 'zk_hosts alone (no lock directive)', "zk_hosts $NO_ZK;\n" ],
    [ 'zk_rwlock read and write, several locks in a location',
      "zk_hosts $NO_ZK;\n"
          . server_with("zk_rwlock /rw read timeout=2s;\n"
              . "zk_rwlock /rw2 write;\nzk_mutex /m;") ],
    [ 'lease count from a znode',
      "zk_hosts $NO_ZK;\n"
          . server_with("zk_semaphore /z leases=zk:/config/n leases_default=3 "
              . "protocol=v2 timeout=1s;") ],
    [ 'semaphore v2 and a non-reentrant mutex',
      "zk_hosts $NO_ZK;\n"
          . server_with("zk_semaphore /v2 leases=3 protocol=v2 timeout=1s;\n"
              . "zk_mutex /nr reentrant=off;\nzk_mutex /r reentrant=on;") ],
    [ 'every parameter of each lock directive, as the README writes them',
      "zk_hosts $NO_ZK;\n"
          . server_with("zk_mutex /fm timeout=1s max_waiting=5 reentrant=off;\n"
              . "zk_semaphore /fs leases=3 timeout=1s max_waiting=5 "
              . "protocol=v2;\n"
              . "zk_semaphore /fz leases=zk:/c/n leases_default=2 timeout=1s "
              . "max_waiting=5 protocol=v1;\n"
              . "zk_rwlock /fr read timeout=1s max_waiting=5;\n"
              . "zk_rwlock /fw write timeout=1s max_waiting=5;") ],
    [ 'one path, one recipe: a mutex is a semaphore v1 of 1 lease; rwlock '
          . 'read and write; variable paths checked at run time',
      "zk_hosts $NO_ZK;\n"
          . server_with("zk_mutex /o/m timeout=1s;\nzk_rwlock /o/rw read;")
          . server_with("zk_semaphore /o/m leases=1;\nzk_rwlock /o/rw write;\n"
              . "zk_mutex /o/\$arg_a;")
          . server_with("zk_semaphore /o/\$arg_a leases=4;") ],
    [ 'no module directive at all', server_with('') ],
    [ 'zk_lock_histogram_buckets: times and decimal seconds, from 0',
      "zk_hosts $NO_ZK;\n"
          . "zk_lock_histogram_buckets 0 1ms 0.01 .1 250ms 1 2.5 1m 1h;\n"
          . server_with('zk_mutex /a;') ],
    [ 'status bounds 400 and 599',
      "zk_hosts $NO_ZK;\nzk_lock_status 400;\n"
          . server_with("zk_lock_status 599;\nzk_mutex /a;") ],
);

for my $case (@good) {
    my ($name, $body) = @$case;
    my $t0 = time;
    my ($rc, $out) = nginx_test_conf($body);
    my $took = time - $t0;
    subtest "valid: $name" => sub {
        is($rc, 0, 'nginx -t passes');
        like($out, qr/test is successful/, 'nginx -t says so');
        unlike($out, qr/\[(?:emerg|alert|crit|error)\]/, 'no error message');
        cmp_ok($took, '<', 10, 'without waiting for ZooKeeper');
    } or diag "nginx -t output:\n$out";
}

done_testing;
