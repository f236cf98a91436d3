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
#  no node left, no alert/crash line

use strict;
use warnings;
use Test::More;
use Time::HiRes qw(time sleep);
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
        my ($rc, $out) = nginx_test_conf(<<"EOF", zk => $zk);
    zk_hosts %%ZK%%;
    $c->[0]
    server {
        listen 127.0.0.1:%%PORT%%;
        location / { zk_mutex /acl/x; }
    }
EOF
        isnt($rc, 0, "$c->[0]: nginx -t fails");
        like($out, $c->[1], '... naming the problem');
    }
};

is_deeply([ grep { /\[(?:alert|crit|emerg)\]/ || /exited on signal/ }
    split /\n/, $ng->error_log ], [], 'no alert/crash lines');

done_testing;
