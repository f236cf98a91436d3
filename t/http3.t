#!/usr/bin/perl
# HTTP/3: each request is a QUIC stream that the client can cancel alone
# (STOP_SENDING / RESET_STREAM). A real QUIC client, headless Chromium
# (t/lib/h3_browser.py), loads a page from the nginx under test over
# HTTP/3 and runs fetch() calls to a gated location on that one QUIC
# connection, aborting some with an AbortController:
#
#  1. reset while waiting: 4 fetches wait behind a foreign holder; the
#     second is aborted: its node, and only its, is gone from ZooKeeper
#     within 1 s (read by an independent kazoo client); the others keep
#     theirs and get the lock in turn, FIFO, when the holder leaves;
#  2. reset while holding: a fetch holds the lock (its backend call takes
#     30 s), another waits; the holder is aborted: the waiter gets the lock
#     within 1 s, and no node is left;
#  3. the connection keeps serving: a fetch after the resets gets 200,
#     and every request came over HTTP/3 ($http3 "h3") from one UDP port
#     (one QUIC connection); the aborted ones are logged 499;
#  4. nothing left in ZooKeeper, nothing logged at alert/crit/emerg.
#
# Needs nginx built with --with-http_v3_module: ZK_LOCK_NGINX if it is,
# else the mainline-static-h3 build of t/lib/matrix.sh (built here, about
# 20 s, when missing or older than the module's sources and the nginx
# tarball is at hand), else skipped (a failure under CI=true).

use strict;
use warnings;
use Test::More;
use Time::HiRes qw(time sleep);
use Fcntl qw(LOCK_EX);
use Cwd ();
use File::Find ();
use lib 't/lib';
use ZkLock::Test;

sub has_h3 {
    my ($bin) = @_;
    return -x $bin && `'$bin' -V 2>&1` =~ /--with-http_v3_module/;
}

# the nginx to use, or why there is none
sub h3_nginx {
    return ($ZkLock::Test::NGINX) if has_h3($ZkLock::Test::NGINX);
    my $top = Cwd::abs_path("$ZkLock::Test::LIB_DIR/../..");
    my $bin = ($ENV{MATRIX_DIR} // "$top/t/build/matrix")
        . '/mainline-static-h3/nginx/objs/nginx';
    my $newest = 0;
    File::Find::find(sub {
        my $m = (stat)[9] // 0;
        $newest = $m if $m > $newest;
    }, "$top/src", "$top/config");
    my $fresh = sub { has_h3($bin) && (stat $bin)[9] >= $newest };
    return ($bin) if $fresh->();

    my $src = $ENV{NGINX_SRC_DIR} // "$top/../shared/nginx-src";
    my ($version) = slurp("$ZkLock::Test::LIB_DIR/matrix.sh")
        =~ /^mainline=(\S+)/m;
    my $tarball = "$src/nginx-" . ($version // '?') . '.tar.gz';
    if (!-f $tarball) {
        if (has_h3($bin)) {
            diag("$bin is older than src/ and cannot be rebuilt"
                . " ($tarball missing): testing it anyway");
            return ($bin);
        }
        return (undef, "$ZkLock::Test::NGINX has no HTTP/3, and "
            . "$tarball is missing to build one (NGINX_SRC_DIR)");
    }
    # prove -j: one build, the others wait for it
    open my $lock, '<', "$ZkLock::Test::LIB_DIR/matrix.sh" or die $!;
    flock $lock, LOCK_EX;
    return ($bin) if $fresh->();
    diag('building nginx with HTTP/3: t/lib/matrix.sh mainline-static-h3');
    my $r = run_cmd(['/bin/sh', "$ZkLock::Test::LIB_DIR/matrix.sh",
        'mainline-static-h3'], timeout => 600);
    close $lock;
    return ($bin) if $r->{rc} == 0 && has_h3($bin);
    return (undef, "t/lib/matrix.sh mainline-static-h3 failed:\n"
        . $r->{out} . $r->{err});
}

my ($nginx, $why) = h3_nginx();
if (!$nginx) {
    BAIL_OUT("no nginx with HTTP/3: $why")
        if ($ENV{CI} // '') =~ /^(1|true|yes)$/i;
    plan skip_all => "no nginx with HTTP/3: $why";
}
if ($nginx ne $ZkLock::Test::NGINX) {
    # the matrix build has the module built in
    $ZkLock::Test::NGINX = $nginx;
    $ENV{ZK_LOCK_MODULE} = '';
}
note("nginx: $nginx");

require_prereqs(qw(nginx zookeeper kazoo module chromium));

my $zk = zk_start();
my $be = backend_start();

# a self-signed certificate for 127.0.0.1, and the hash of its public key
# that Chromium is told to accept
my $tls = tempdir('h3-tls');
my $r = run_cmd(['openssl', 'req', '-x509', '-newkey', 'ec',
    '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes',
    '-keyout', "$tls/key.pem", '-out', "$tls/cert.pem", '-days', '2',
    '-subj', '/CN=127.0.0.1', '-addext', 'subjectAltName=IP:127.0.0.1']);
is($r->{rc}, 0, 'a self-signed certificate') or diag $r->{err};
$r = run_cmd(['/bin/sh', '-c', "openssl x509 -in '$tls/cert.pem' -pubkey"
    . ' -noout | openssl pkey -pubin -outform der'
    . ' | openssl dgst -sha256 -binary | openssl base64 -A']);
my $spki = $r->{out};
like($spki, qr{^[A-Za-z0-9+/]{43}=$}, 'its SPKI hash') or diag $r->{err};

my $ng = nginx_start(<<"EOF", zk => $zk, backend => $be, workers => 1);
    zk_hosts %%ZK%%;
    zk_session_timeout 10s;

    log_format h3 '\$remote_port \$http3 \$server_protocol \$status'
                  ' "\$request" zk=\$zk_lock_status node=\$zk_lock_node';

    server {
        listen 127.0.0.1:%%PORT%% ssl;
        listen 127.0.0.1:%%PORT%% quic;
        http3 on;
        ssl_certificate     $tls/cert.pem;
        ssl_certificate_key $tls/key.pem;
        add_header Alt-Svc 'h3=":%%PORT%%"; ma=60' always;
        access_log %%PREFIX%%/logs/h3.log h3;
        root %%PREFIX%%/html;

        location /w {
            zk_mutex /t/h3 timeout=60s;
            proxy_pass http://%%BACKEND%%;
            proxy_read_timeout 60s;
        }
    }
EOF
ok(sessions_connected($ng), 'connected');

# the page: fetches by name, each with an AbortController; events for
# h3_browser.py to drain
mkdir $ng->prefix . '/html';
open my $fh, '>', $ng->prefix . '/html/h3.html' or die $!;
print {$fh} <<'EOF';
<!doctype html>
<html><head><title>zk_lock over HTTP/3</title><script>
var events = [], controllers = {};
function say(s) { events.push(s); }
function drain() { return events.splice(0); }
function get(name, path) {
  var c = new AbortController();
  controllers[name] = c;
  var url = new URL(path, location.href).href;
  fetch(url, {signal: c.signal, cache: 'no-store'}).then(function (r) {
    say('status ' + name + ' ' + r.status);
    return r.text();
  }).then(function () {
    var e = performance.getEntriesByName(url).pop();
    say('done ' + name + ' ' + (e && e.nextHopProtocol || '-'));
  }, function (e) {
    say(e.name === 'AbortError' ? 'aborted ' + name
                                : 'error ' + name + ' ' + e);
  });
}
function reset(name) { controllers[name].abort(); }
</script></head><body>zk_lock over HTTP/3</body></html>
EOF
close $fh;

sub nodes { zk_children($zk, '/t/h3') }

# sequence numbers of the nodes, in order
sub seqs { sort { $a <=> $b } map { /(\d{10})$/ ? $1 + 0 : () } nodes() }

my $url = 'https://127.0.0.1:' . $ng->port . '/h3.html';
my $c = h3_browser($url, $spki);
like($c->events, qr/^connected h3$/m, 'the page loaded over HTTP/3')
    or BAIL_OUT('no HTTP/3 page: ' . $c->events);

# 1. reset while waiting
{
    my $h = zk_hold($zk, '/t/h3', seconds => 60);
    # one at a time, so that their nodes are in the order of their names
    for my $n (1 .. 4) {
        $c->get("w$n", "/w?key=wait&sleep=100&id=$n&n=$n");
        ok(wait_for(sub { nodes() == 1 + $n }, 10),
            "reset while waiting: w$n queued") or diag $c->events;
    }
    my @before = seqs();
    is(scalar(zk_ephemerals($zk, '/t/h3')), 5,
        'reset while waiting: 5 ephemeral nodes');

    my $t0 = time;
    $c->reset('w2');
    my $ok = wait_for(sub { nodes() == 4 }, 1);
    ok($ok, sprintf('reset while waiting: a node is gone (%.2f s)',
        time - $t0));
    my %after = map { $_ => 1 } seqs();
    is_deeply([grep { !$after{$_} } @before], [$before[2]],
        'reset while waiting: it is the node of the aborted fetch');
    ok($c->wait(qr/^aborted w2$/m, 5), 'the fetch says it was aborted');
    my $w2 = 'GET /w\?key=wait&sleep=100&id=2&';
    like($ng->error_log, qr{closed stream while waiting for a lock, .*"$w2},
        'nginx: the stream was closed while it waited');
    sleep 0.5;
    is(scalar(nodes()), 4, 'reset while waiting: the others keep theirs');

    $h->release;
    ok($c->wait(qr/(?:^done w[134] .*\n.*){3}/ms, 20),
        'reset while waiting: the other 3 fetches are served')
        or diag $c->events;
    like($c->events, qr/^status w$_ 200$/m, "fetch w$_: 200") for 1, 3, 4;
    like($c->events, qr/^done w$_ h3$/m, "fetch w$_: over HTTP/3")
        for 1, 3, 4;
    unlike($c->events, qr/^status w2 /m, 'the aborted fetch got nothing');
    my $st = $be->stats('wait');
    is($st->{count}, 3, 'reset while waiting: 3 reached the backend');
    is($st->{max}, 1, 'reset while waiting: one at a time');
    is_deeply($st->{order}, [1, 3, 4],
        'reset while waiting: the lock went to the next waiter, in order');
    ok(wait_for(sub { !nodes() }, 2), 'reset while waiting: no node left');
}

# 2. reset while holding
{
    $c->get('holder', '/w?key=held&sleep=30000');
    ok(wait_for(sub { ($be->stats('held')->{inflight} // 0) == 1 }, 10),
        'reset while holding: the holder is in the backend');
    $c->get('next', '/w?key=next&sleep=100');
    ok(wait_for(sub { nodes() == 2 }, 10),
        'reset while holding: a second fetch waits');
    sleep 0.3;
    is($be->stats('next')->{count} // 0, 0,
        'reset while holding: and waits');

    my $t0 = time;
    $c->reset('holder');
    ok(wait_for(sub { ($be->stats('next')->{count} // 0) == 1 }, 1),
        sprintf('reset while holding: the waiter gets the lock (%.2f s,'
            . ' the holder had 30 s to go)', time - $t0));
    ok($c->wait(qr/^status next 200$/m, 5),
        'reset while holding: the waiter is served') or diag $c->events;
    ok($c->wait(qr/^aborted holder$/m, 5), 'the holder was aborted');
    ok(wait_for(sub { !nodes() }, 2), 'reset while holding: no node left');
}

# 3. the connection keeps serving
{
    $c->get('again', '/w?key=again&sleep=10');
    ok($c->wait(qr/^done again /m, 10), 'after the resets: a new fetch')
        or diag $c->events;
    like($c->events, qr/^status again 200$/m, 'is served: 200');
    like($c->events, qr/^done again h3$/m, 'over HTTP/3');

    my @log = grep { m{"GET /(?:w|h3\.html)} } split /\n/,
        slurp($ng->prefix . '/logs/h3.log');
    my %port = map { (split ' ', $_)[0] => 1 } @log;
    is(scalar(@log), 8, 'the page and 7 fetches logged') or diag explain \@log;
    is(scalar(grep { / h3 HTTP\/3\.0 / } @log), scalar(@log),
        'all of them over HTTP/3 ($http3, $server_protocol)')
        or diag explain \@log;
    is(scalar(keys %port), 1, 'all from one UDP port: one QUIC connection')
        or diag explain \@log;
    like(join("\n", @log), qr{ 499 "GET /w\?key=wait&sleep=100&id=2&}m,
        'the fetch reset while waiting: 499');
    like(join("\n", @log),
        qr{ 499 "GET /w\?key=held&[^"]*" zk=ACQUIRED node=/t/h3/}m,
        'the fetch reset while holding: 499, after ACQUIRED');
    is(scalar(grep { / 200 "GET \/w.* zk=ACQUIRED node=\/t\/h3\/\S/ } @log),
        5, 'the 5 others: 200, ACQUIRED') or diag explain \@log;
}

$c->stop;
no_ephemerals($zk, '/t', 'at the end');

done_testing();
