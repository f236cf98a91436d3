#!/usr/bin/perl
# ZooKeeper authentication and ACLs:
#
#  1. zk_auth digest file=... and zk_acl auth::cdrwa world:anyone:r: the
#     lock's parent and lock nodes carry that ACL; a client without the
#     credentials (or with others) can read them but can neither delete a
#     lock node nor queue under the lock; with them it can; the lock works
#  2. the secret appears nowhere: error.log (at debug level), access log,
#     node data
#  3. bad zk_auth / zk_acl fail "nginx -t" with a message naming them,
#     among them an unknown scheme, an ip network past /32 and a digest
#     id without its hash
#  4. (issue 36, item 5) an ACL that leaves nginx without "c", "d" or "r"
#     on its own nodes fails "nginx -t", naming the ACL and what is
#     missing: world:anyone:r, a digest id with no zk_auth or another
#     password's, sasl and x509 ids (no such identity here); a digest id
#     of zk_auth's credentials passes, and so does an ip: entry (the
#     address the server sees is not known before it connects)
#  5. an ip: ACL that does not match: the request fails with NOAUTH (not
#     "no node"), and the log says what it means and what to do
#  no node left, no alert/crash line

use strict;
use warnings;
use Test::More;
use Time::HiRes qw(time sleep);
use Digest::SHA qw(sha1);
use MIME::Base64 qw(encode_base64);
use lib 't/lib';
use ZkLock::Test;

require_prereqs(qw(nginx zookeeper kazoo module));

my $zk = zk_start();
my $be = backend_start();

my $SECRET = 'S3cret-' . int(rand(1e9));
my $dir = tempdir('acl');
my $file = "$dir/zk.secret";
open my $fh, '>', $file or die "$file: $!";
print $fh "nginx:$SECRET\n";
close $fh;

my $ng = nginx_start(<<"EOF", zk => $zk, backend => $be, log_level => 'debug');
    zk_hosts %%ZK%%;
    zk_auth digest file=$file;
    zk_acl auth::cdrwa world:anyone:r;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /a {
            zk_mutex /acl/m timeout=5s;
            proxy_pass http://%%BACKEND%%;
        }
    }
EOF
ok(sessions_connected($ng), 'the workers have sessions');

# zkctl with credentials (or none): (exit code, JSON text or error)
sub zkctl {
    my ($auth, @args) = @_;
    my $r = ZkLock::Test::run_cmd([ $ZkLock::Test::PYTHON,
        "$ZkLock::Test::LIB_DIR/zkctl.py", '--hosts', $zk->hosts,
        ($auth ? ('--auth', $auth) : ()), @args ], timeout => 30);
    return ($r->{rc}, $r->{out} . $r->{err});
}

subtest 'only nginx may delete its lock nodes' => sub {
    $be->reset;
    my $bg = http_parallel_bg([ [ $ng->port, '/a?key=acl&sleep=3000' ] ],
        timeout => 20);
    my @n;
    ok(wait_for(sub { @n = zk_children($zk, '/acl/m') }, 5),
        'the request holds a node');
    my $node = "/acl/m/$n[0]";

    for my $path ('/acl/m', $node) {
        my ($rc, $out) = zkctl(undef, 'acl', $path);
        like($out, qr/"digest:nginx:[^"]+:cdrwa"/,
            "$path: nginx's identity has all rights");
        like($out, qr/"world:anyone:r"/, "$path: anyone may read");
        unlike($out, qr/world:anyone:[^"]*[cdwa]/, "$path: only read");
    }

    for my $who (undef, "other:$SECRET") {
        my $name = $who ? 'other credentials' : 'no credentials';
        my ($rc, $out) = zkctl($who, 'delete', $node);
        isnt($rc, 0, "$name: delete refused");
        like($out, qr/NoAuth/i, '... NoAuth');
        ($rc, $out) = zkctl($who, 'create', '/acl/m/_c_x-lock-',
            '--ephemeral', '--sequence');
        isnt($rc, 0, "$name: cannot queue under the lock");
        ($rc, $out) = zkctl($who, 'get', $node);
        is($rc, 0, "$name: may read the holder");
    }

    my ($rc) = zkctl("nginx:$SECRET", 'get', $node);
    is($rc, 0, 'nginx\'s credentials: may read');

    my $res = http_parallel_collect($bg, 20);
    is($res->[0]{status}, 200, 'the holder ends: 200');
    is($ng->get('/a?key=acl')->{status}, 200, 'the next one: 200');
    no_ephemerals($zk, '/acl', 'acl');
};

subtest 'the secret appears nowhere' => sub {
    like($ng->error_log, qr/zk lock: digest authentication done/,
        'authenticated (debug log)');
    unlike($ng->error_log, qr/\Q$SECRET\E/, 'not in error.log (debug)');
    unlike($ng->access_log, qr/\Q$SECRET\E/, 'not in the access log');
    my $bg = http_parallel_bg([ [ $ng->port, '/a?key=acl2&sleep=1000' ] ],
        timeout => 20);
    my @n;
    wait_for(sub { $be->stats('acl2')->{inflight} }, 5);
    @n = zk_children($zk, '/acl/m');
    my $g = zk_get($zk, "/acl/m/$n[0]");
    like($g->{data} // '', qr/ pid \d+ since /, 'node data: the holder');
    unlike($g->{data} // '', qr/\Q$SECRET\E/, 'not in node data');
    http_parallel_collect($bg, 20);
};

# "nginx -t" of a lock beside the session directives given
sub acl_test_conf {
    my ($directives) = @_;
    return nginx_test_conf(<<"EOF", zk => $zk);
    zk_hosts %%ZK%%;
    $directives
    server {
        listen 127.0.0.1:%%PORT%%;
        location / { zk_mutex /acl/x; }
    }
EOF
}

subtest 'bad zk_auth and zk_acl fail nginx -t' => sub {
    my @cases = (
        [ 'zk_auth sasl x:y;', qr/unsupported zk_auth scheme "sasl"/ ],
        [ 'zk_auth digest nopassword;',
          qr/zk_auth digest credentials must be "user:password"/ ],
        [ "zk_auth digest file=$dir/missing;",
          qr/open\(\) "\Q$dir\E\/missing" failed/ ],
        [ 'zk_acl world:anyone:rx;', qr/invalid zk_acl entry "world:anyone:rx"/ ],
        [ 'zk_acl world:someone:r;', qr/invalid zk_acl entry "world:someone:r"/ ],
        [ 'zk_acl digest:r;', qr/invalid zk_acl entry "digest:r"/ ],
        [ 'zk_acl auth::cdrwa;',
          qr/"zk_acl" with the "auth" scheme needs "zk_auth"/ ],
        # issue 27, item 2: entries the server would refuse at every create
        [ 'zk_acl foo:bar:r;',
          qr/invalid zk_acl entry "foo:bar:r": unknown scheme/ ],
        [ 'zk_acl ip:10.0.0.0/33:r;',
          qr{invalid zk_acl entry "ip:10.0.0.0/33:r": the id of "ip" is an address or a network} ],
        [ 'zk_acl digest:user:cdrwa;',
          qr/invalid zk_acl entry "digest:user:cdrwa": the id of "digest" is "user:hash"/ ],
    );
    for my $c (@cases) {
        my ($rc, $out) = acl_test_conf($c->[0]);
        isnt($rc, 0, "$c->[0]: nginx -t fails");
        like($out, $c->[1], '... naming the problem');
    }
};

# zkCli.sh's digest id of "user:password"
sub digest_id {
    my ($user, $password) = @_;
    return "$user:" . encode_base64(sha1("$user:$password"), '');
}

# issue 36, item 5: the ACL of the nodes nginx creates must let it
# create, delete and list them, or every request fails, and a container
# it made stays (an empty one that never had a child is never reaped)
subtest 'an ACL that nginx cannot use fails nginx -t' => sub {
    my $bob = digest_id('bob', 'secret');
    my @bad = (
        [ 'zk_acl world:anyone:r;',
          qr/zk_acl "world:anyone:r" leaves this nginx without the "c" and "d" permissions on its own nodes: to take a lock, it must create, delete and list nodes/ ],
        [ 'zk_acl world:anyone:cdw;',
          qr/zk_acl "world:anyone:cdw" leaves this nginx without the "r" permission on/ ],
        [ "zk_acl digest:$bob:cdrwa world:anyone:r;",
          qr/zk_acl "digest:\Q$bob\E:cdrwa world:anyone:r" leaves this nginx without the "c" and "d" permissions .*; its digest ids need the "zk_auth" of their user and password/ ],
        [ "zk_auth digest bob:other; zk_acl digest:$bob:cdrwa;",
          qr/zk_acl "digest:\Q$bob\E:cdrwa" leaves this nginx without the "c", "d" and "r" permissions .*; none of its digest ids is the one of the user and password of "zk_auth"/ ],
        [ 'zk_auth digest bob:secret; zk_acl sasl:bob:cdrwa x509:CN=bob:cdrwa;',
          qr/zk_acl "sasl:bob:cdrwa x509:CN=bob:cdrwa" leaves this nginx without the "c", "d" and "r" permissions/ ],
    );
    for my $c (@bad) {
        my ($rc, $out) = acl_test_conf($c->[0]);
        isnt($rc, 0, "$c->[0]: nginx -t fails");
        like($out, $c->[1], '... naming the ACL and what is missing');
    }

    my @good = (
        "zk_auth digest bob:secret; zk_acl digest:$bob:cdrwa;",
        "zk_auth digest bob:secret; zk_acl digest:$bob:cd world:anyone:r;",
        'zk_acl world:anyone:cdr;',
        'zk_acl ip:192.0.2.1:cdrwa;',
        'zk_auth digest bob:secret; zk_acl auth::cdr;',
    );
    for my $c (@good) {
        my ($rc, $out) = acl_test_conf($c);
        is($rc, 0, "$c: nginx -t passes") or diag $out;
    }
};

subtest 'NOAUTH: what it means, in the log' => sub {
    my $ip = nginx_start(<<'EOF', zk => $zk, backend => $be, workers => 1);
    zk_hosts %%ZK%%;
    zk_acl ip:192.0.2.1:cdrwa world:anyone:r;
    server {
        listen 127.0.0.1:%%PORT%%;
        location /a {
            zk_mutex /noauth/m timeout=5s;
            proxy_pass http://%%BACKEND%%;
        }
    }
EOF
    ok(sessions_connected($ip), 'connected');
    my $r = $ip->get('/a?key=noauth');
    is($r->{status}, 503, 'the request fails');
    my $log = $ip->error_log;
    like($log, qr{\[error\] .*zk_mutex "/noauth/m" failed \(-102: not authenticated\): the ACL of the lock path or of a parent denies this nginx},
        'NOAUTH, not "no node", with what it means');
    like($log, qr{zookeeper create of a parent of "/noauth/m" failed \(-102: not authenticated\): .*zkCli\.sh getAcl.*deleteall},
        '... and what to do');
    $ip->stop;
    zk_delete($zk, '/noauth', recursive => 1);
};

is_deeply([ grep { /\[(?:alert|crit|emerg)\]/ || /exited on signal/ }
    split /\n/, $ng->error_log ], [], 'no alert/crash lines');

done_testing;
