#!/usr/bin/perl
# The Grafana dashboard of conf-examples/prometheus/, against a real
# Prometheus server (Debian's prometheus package, unpacked by
# t/lib/promtool.sh, started here on a loopback port) scraping the
# module every second while requests run:
#
#  1. the dashboard is self-contained: its datasource is the template
#     variable DS_PROMETHEUS, every panel and query uses it;
#  2. zk_lock_histogram_buckets: the wait histogram has the configured
#     bounds, in the Prometheus output and the JSON;
#  3. zk_lock_leases follows the lease count in ZooKeeper (leases=zk:)
#     within seconds, and falls back to leases_default when the node goes;
#     a mutex and a writer grant 1, readers have no series;
#  4. zk_lock_session_jeopardy_total counts a session unheard from (the
#     ZooKeeper server stopped with SIGSTOP past 3/4 of the session
#     timeout);
#  5. every PromQL expression of the dashboard (each panel's targets, and
#     the template variables' label_values() queries), with the
#     variables replaced by fixed values, returns a non-empty result from
#     Prometheus's /api/v1/query;
#  6. without zk_lock_histogram_buckets, the buckets reach the longest
#     lock timeout (60 s by default: 25, 50, 100 s are added), and stay
#     as they were when no timeout is longer than 10 s;
#  7. the same Prometheus evaluates the kit's rules.yml (a copy whose
#     windows are 20 s, not 5 minutes, and whose "for:" is 1 s, evaluated
#     every second): a lock whose requests all get it has a failure ratio
#     of 0 and no ZkLockHighFailureRatio; with ZooKeeper stopped and the
#     default zk_lock_fail closed, its requests are refused (error) and
#     ZkLockHighFailureRatio fires for it, in /api/v1/alerts; with nginx
#     stopped, ZkLockTargetDown fires.

use strict;
use warnings;
use Test::More;
use JSON::PP ();
use Time::HiRes qw(time sleep);
use lib 't/lib';
use ZkLock::Test;

require_prereqs(qw(nginx zookeeper kazoo module));

my $file = 'conf-examples/prometheus/grafana-dashboard.json';

my $prometheus = `sh t/lib/promtool.sh prometheus 2>&1`;
chomp $prometheus;
($prometheus) = (split /\n/, $prometheus)[-1];
unless ($prometheus && -x $prometheus) {
    # CI installs what it needs: no skipping there
    BAIL_OUT("no prometheus: $prometheus") if ($ENV{CI} // '') =~ /^(1|true|yes)$/i;
    plan(skip_all => "no prometheus: $prometheus");
}

# ------------------------------------------------------------ the dashboard
my $dash = do {
    open my $fh, '<', $file or die "$file: $!";
    local $/;
    JSON::PP::decode_json(<$fh>);
};

my (@targets, @datasources);
my $walk;
$walk = sub {
    for my $p (@_) {
        push @datasources, $p->{datasource} if $p->{datasource};
        for my $t (@{ $p->{targets} // [] }) {
            push @datasources, $t->{datasource} if $t->{datasource};
            push @targets, [$p->{title}, $t->{expr}] if defined $t->{expr};
        }
        $walk->(@{ $p->{panels} // [] });
    }
};
$walk->(@{ $dash->{panels} });

my @vars = @{ $dash->{templating}{list} // [] };
my ($ds_var) = grep { $_->{name} eq 'DS_PROMETHEUS' } @vars;
is($ds_var && $ds_var->{type}, 'datasource',
    'the datasource is the template variable DS_PROMETHEUS');
push @datasources, map { $_->{datasource} // () } @vars;
is_deeply([grep { ($_->{uid} // '') ne '${DS_PROMETHEUS}' } @datasources],
    [], 'every panel, query and variable uses ${DS_PROMETHEUS}');
ok(@targets >= 15, scalar(@targets) . ' PromQL expressions in the panels');

my %panel = map { $_->[0] => 1 } @targets;
for my $t ('Sessions connected', 'Session expirations, jeopardy and reconnects',
    'Session timeout in force', 'Requests by result', 'Failure ratio', 'Failures by result',
    'Timeout ratio', 'Wait p50 and p99', 'Held vs leases', 'Waiting',
    'Kept leases', 'Kept-lease reuse ratio', 'Bypassed and local traffic',
    'Held locks let go', 'Module versions and builds') {
    ok($panel{$t}, "panel \"$t\"");
}

# ------------------------------------------------------ nginx and ZooKeeper
my $zk = zk_start();
my $be = backend_start();
zk_create($zk, '/dash/count', data => '3', makepath => 1);

my $ng = nginx_start(<<'EOF', zk => $zk, backend => $be, workers => 2);
    zk_hosts %%ZK%%;
    zk_session_timeout 2s;
    zk_lock_histogram_buckets 5ms 50ms 0.25 1s 2500ms;

    server {
        listen 127.0.0.1:%%PORT%%;

        location /m {
            zk_mutex /dash/m timeout=300ms;
            proxy_pass http://%%BACKEND%%;
        }
        location /s {
            zk_semaphore /dash/s leases=zk:/dash/count leases_default=2
                         timeout=5s keep=1s fair=$arg_tenant;
            proxy_pass http://%%BACKEND%%;
        }
        location /r {
            zk_rwlock /dash/rw read timeout=1s;
            proxy_pass http://%%BACKEND%%;
        }
        location /w {
            zk_rwlock /dash/rw write timeout=1s;
            proxy_pass http://%%BACKEND%%;
        }
        location /f {
            zk_mutex /dash/f timeout=1s;
            proxy_pass http://%%BACKEND%%;
        }
        location = /metrics {
            zk_lock_status_page prometheus;
        }
        location = /status {
            zk_lock_status_page;
        }
    }
EOF
ok(wait_for(sub { sessions_connected($ng) }, 15), 'nginx connected');

sub scrape { $ng->get('/metrics')->{body} // '' }

sub sample {
    my ($text, $series) = @_;
    return $text =~ /^\Q$series\E (\S+)$/m ? $1 : undef;
}

my $leases_s = 'zk_lock_leases{path="/dash/s",type="semaphore"}';
ok(wait_for(sub { (sample(scrape(), $leases_s) // 0) == 3 }, 5),
    'zk_lock_leases: the count read from ZooKeeper (3)');
my $text = scrape();
is(sample($text, 'zk_lock_leases{path="/dash/m",type="mutex"}'), 1,
    'a mutex grants 1');
is(sample($text, 'zk_lock_leases{path="/dash/rw",type="write"}'), 1,
    'a writer grants 1');
unlike($text, qr/^zk_lock_leases\{[^}]*type="read"/m,
    'readers have no zk_lock_leases series');
like($text, qr/^# TYPE zk_lock_leases gauge$/m, 'zk_lock_leases is a gauge');
like($text, qr/^# TYPE zk_lock_session_jeopardy_total counter$/m,
    'zk_lock_session_jeopardy_total is a counter');
like($text, qr/^zk_lock_session_jeopardy_total\{worker="0"\} 0$/m,
    'and is there for each worker, at 0');

my @le = map { /^zk_lock_wait_seconds_bucket\{path="\/dash\/m",type="mutex",le="([^"]+)"\}/
    ? $1 : () } split /\n/, $text;
is_deeply(\@le, [qw(0.005 0.05 0.25 1 2.5 +Inf)],
    'the buckets as configured by zk_lock_histogram_buckets');
my $st = JSON::PP::decode_json($ng->get('/status')->{body} || '{}');
my ($jm) = grep { $_->{path} eq '/dash/m' } @{ $st->{locks} // [] };
is_deeply([sort keys %{ $jm->{wait}{buckets} // {} }],
    [sort qw(0.005 0.05 0.25 1 2.5 +Inf)], 'and in the JSON');
is($jm->{leases}, 1, 'the JSON has the leases of a lock');
ok(defined $st->{workers}[0]{jeopardies}, 'and the jeopardies of a worker');

# ---------------------------------------------------------------- Prometheus
my $pdir = ZkLock::Test::tempdir('prometheus');
my $pport = free_port();
my $job = 'nginx-zk-lock';      # scrape.yml's, which ZkLockTargetDown names
my $target = '127.0.0.1:' . $ng->port;
# the kit's rules, on a test's time scale: 20 s windows, 1 s "for:"
my $rules = slurp('conf-examples/prometheus/rules.yml');
my $nrules = () = $rules =~ /^\s*- (?:record|alert):/mg;
my $nwindows = $rules =~ s/\[5m\]/[20s]/g;
my $nfor = $rules =~ s/^(\s*for:\s*)\S+$/${1}1s/mg;
ok($nwindows >= 4 && $nfor >= 4,
    "rules.yml: $nrules rules, $nwindows 5m windows made 20 s, $nfor for: 1 s");
{
    open my $fh, '>', "$pdir/rules.yml" or die $!;
    print $fh $rules;
    close $fh;
    open $fh, '>', "$pdir/prometheus.yml" or die $!;
    print $fh <<"EOF";
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
  - rules.yml
scrape_configs:
  - job_name: $job
    metrics_path: /metrics
    static_configs:
      - targets: ['$target']
EOF
    close $fh;
}
spawn(name => 'prometheus', log => "$pdir/prometheus.log",
    cmd => [$prometheus, "--config.file=$pdir/prometheus.yml",
        "--storage.tsdb.path=$pdir/data",
        "--web.listen-address=127.0.0.1:$pport"]);

sub uri_escape {
    my ($s) = @_;
    $s =~ s/([^A-Za-z0-9\-_.~])/sprintf('%%%02X', ord $1)/ge;
    return $s;
}

# {status, data => {result => [...]}} or {error}
sub query {
    my ($q) = @_;
    my $r = http_get($pport, '/api/v1/query?query=' . uri_escape($q),
        timeout => 10);
    my $d = eval { JSON::PP::decode_json($r->{body} // '') };
    return $d // { error => "HTTP $r->{status}: " . ($r->{body} // '') };
}

sub results {
    my ($q) = @_;
    my $d = query($q);
    return $d->{status} && $d->{status} eq 'success'
        ? @{ $d->{data}{result} } : ();
}

ok(wait_for(sub { http_get($pport, '/-/ready', timeout => 2)->{status} == 200 },
    30), 'prometheus ready')
    or diag slurp("$pdir/prometheus.log");
ok(wait_for(sub { grep { $_->{value}[1] eq '1' }
    results("up{job=\"$job\"}") }, 10), 'and scraping the module')
    or diag slurp("$pdir/prometheus.log");
{
    my $r = http_get($pport, '/api/v1/rules', timeout => 10);
    my $d = eval { JSON::PP::decode_json($r->{body} // '') } // {};
    my $n = 0;
    $n += @{ $_->{rules} // [] } for @{ $d->{data}{groups} // [] };
    is($n, $nrules, "and evaluating the $nrules rules of rules.yml")
        or diag $r->{body};
}

# ------------------------------------------------------------------ traffic
# rounds of 6 requests holding the mutex 200 ms with 300 ms to get it (some
# time out), and 6 holding the semaphore (3 leases) 100 ms (some wait; the
# leases kept between rounds are reused), while Prometheus scrapes
my ($m_ok, $m_timeout, $s_ok, $n) = (0, 0, 0, 0);
my $t0 = time;
for my $round (1 .. 8) {
    my @reqs = ((map { [$ng->port, "/m?key=m&sleep=200&n=$round.$_"] } 1 .. 6),
        (map { [$ng->port, "/s?key=s&sleep=100&n=$round.$_"] } 1 .. 6),
        [$ng->port, "/r?key=r&sleep=10"], [$ng->port, "/w?key=w&sleep=10"]);
    my $res = http_parallel(\@reqs, timeout => 20);
    $m_ok += grep { $_->{status} == 200 } @$res[0 .. 5];
    $m_timeout += grep { $_->{status} == 503 } @$res[0 .. 5];
    $s_ok += grep { $_->{status} == 200 } @$res[6 .. 11];
    $n += 6;
}
ok($m_ok > 0 && $m_timeout > 0,
    "the mutex: $m_ok acquired, $m_timeout timed out");
is($s_ok, $n, 'the semaphore: every request served');
$text = scrape();
ok((sample($text,
    'zk_lock_kept_reused_total{path="/dash/s",type="semaphore"}') // 0) > 0,
    'kept leases reused');
ok((sample($text,
    'zk_lock_wait_seconds_bucket{path="/dash/s",type="semaphore",le="0.25"}')
    // 0) > 0, 'waits counted in the configured buckets');
diag sprintf('traffic: %.1f s', time - $t0);

# ------------------------------------------------- the lease count changes
for my $c ([5, 'raised to 5'], [undef, 'deleted: leases_default 2']) {
    my ($want, $what) = @$c;
    my $t = time;
    if (defined $want) {
        zk_set($zk, '/dash/count', $want);
    } else {
        zk_delete($zk, '/dash/count');
        $want = 2;
    }
    ok(wait_for(sub { (sample(scrape(), $leases_s) // 0) == $want }, 5),
        "the count $what: zk_lock_leases shows $want");
    my $in_nginx = time - $t;
    ok(wait_for(sub { grep { $_->{value}[1] == $want }
        results('zk_lock_leases{path="/dash/s"}') }, 5),
        "and so does Prometheus");
    diag sprintf('count %s: %.2f s to the status page, %.2f s to Prometheus',
        $what, $in_nginx, time - $t);
}

# ----------------------------------------------------------------- jeopardy
{
    my $t = time;
    $zk->pause;
    my $seen = wait_for(sub { $ng->error_log =~ /no word from zookeeper/ }, 6);
    $zk->resume;
    ok($seen, sprintf('ZooKeeper stopped: a session in jeopardy after %.1f s',
        time - $t));
    my $sum = sub {
        my $s = 0;
        $s += $_ for scrape() =~ /^zk_lock_session_jeopardy_total\{worker="\d+"\} (\d+)$/mg;
        $s;
    };
    ok(wait_for(sub { $sum->() >= 1 }, 5),
        'zk_lock_session_jeopardy_total counts it');
    ok(wait_for(sub { results("sum(zk_lock_session_jeopardy_total{job=\"$job\"}) > 0") },
        5), 'and Prometheus has it');
    ok(wait_for(sub { sessions_connected($ng) }, 15), 'sessions back');
}

# ------------------------------------------------- every dashboard query
my %value = (
    __rate_interval => '1m', __interval => '5s', __range => '1m',
    __range_s => '60', __interval_ms => '5000',
    job => $job, instance => $target, path => '.*',
    DS_PROMETHEUS => 'prometheus',
);

sub substitute {
    my ($e) = @_;
    $e =~ s/\$\{(\w+)(?::[^}]*)?\}|\[\[(\w+)\]\]|\$(\w+)/
        my $v = $1 \/\/ $2 \/\/ $3; $value{$v} \/\/ "\$$v"/ge;
    return $e;
}

for my $t (@targets) {
    my ($title, $expr) = @$t;
    my $q = substitute($expr);
    (my $name = $q) =~ s/\s+/ /g;
    unlike($q, qr/\$/, "\"$title\": no variable left in $name");
    my $got = wait_for(sub { scalar results($q) }, 10);
    ok($got, "\"$title\": $name returns a result")
        or diag explain query($q);
}

# and the values are those of the traffic above
{
    my ($by_result) = grep { $_->[0] eq 'Requests by result' } @targets;
    my @r = results(substitute($by_result->[1]));
    ok((grep { $_->{metric}{path} eq '/dash/m'
            && $_->{metric}{result} eq 'timeout' && $_->{value}[1] > 0 } @r),
        '"Requests by result": the mutex\'s timeouts');
    my ($failed) = grep { $_->[0] eq 'Failure ratio' } @targets;
    my ($fm) = grep { $_->{metric}{path} eq '/dash/m' }
        results(substitute($failed->[1]));
    ok($fm && $fm->{value}[1] > 0 && $fm->{value}[1] < 1,
        '"Failure ratio": the mutex\'s timeouts: '
        . ($fm ? $fm->{value}[1] : 'none'));
    my ($timeout) = grep { $_->[0] eq 'Session timeout in force' } @targets;
    my @st = results(substitute($timeout->[1]));
    is(join(' ', map { $_->{value}[1] } @st), '2',
        '"Session timeout in force": 2 s, as granted (zk_session_timeout 2s)');
    my ($p99) = grep { $_->[1] =~ /histogram_quantile\(0\.99/ } @targets;
    my ($m) = grep { $_->{metric}{path} eq '/dash/m' }
        results(substitute($p99->[1]));
    ok($m && $m->{value}[1] > 0 && $m->{value}[1] <= 2.5,
        '"Wait p50 and p99": the mutex\'s p99 within its buckets: '
        . ($m ? $m->{value}[1] : 'none'));
}

for my $v (grep { $_->{type} eq 'query' } @vars) {
    my $def = ref $v->{query} ? $v->{query}{query} : $v->{query};
    my ($expr, $label) = $def =~ /^label_values\((.+),\s*(\w+)\)$/s;
    ok($expr, "variable $v->{name}: label_values(metric, label)") or next;
    my @r = results(substitute($expr));
    ok(@r && !grep({ !defined $_->{metric}{$label} } @r),
        "variable $v->{name}: " . substitute($expr) . " has \"$label\"");
}

# ------------------------------------------------------- the default buckets
{
    my $conf = sub {
        my ($extra) = @_;
        return <<"EOF";
    zk_hosts %%ZK%%;
    $extra

    server {
        listen 127.0.0.1:%%PORT%%;
        location /a { zk_mutex /dash/d timeout=3s; }
        location /b { zk_semaphore /dash/e leases=2; }
        location = /metrics { zk_lock_status_page prometheus; }
    }
EOF
    };
    my $les = sub {
        return [map { /^zk_lock_wait_seconds_bucket\{path="\/dash\/d",type="mutex",le="([^"]+)"\}/
            ? $1 : () } split /\n/, $_[0]->get('/metrics')->{body} // ''];
    };
    my @default = qw(0.001 0.005 0.01 0.025 0.05 0.1 0.25 0.5 1 2.5 5 10);

    my $ng2 = nginx_start($conf->(''), zk => $zk, workers => 1);
    is_deeply($les->($ng2), [@default, qw(25 50 100 +Inf)],
        'default buckets: up to 100 s, past the default timeout of 60 s');
    ok($ng2->reload($conf->('zk_lock_timeout 4s;')), 'reloaded');
    ok(wait_for(sub { "@{ $les->($ng2) }" eq "@default +Inf" }, 5),
        'no timeout above 10 s: the buckets stay 1 ms .. 10 s')
        or diag explain $les->($ng2);
    $ng2->stop;
}

# ------------------------------------------- the rules during an outage
# the alerts named $name whose labels include %$match, firing or pending,
# from /api/v1/alerts
sub alerts {
    my ($name, $match) = @_;
    my $r = http_get($pport, '/api/v1/alerts', timeout => 10);
    my $d = eval { JSON::PP::decode_json($r->{body} // '') } // {};
    return grep {
        my $l = $_->{labels};
        $l->{alertname} eq $name
            && !grep { ($l->{$_} // '') ne $match->{$_} } keys %$match
    } @{ $d->{data}{alerts} // [] };
}
my %f = (path => '/dash/f', type => 'mutex');
my $ratio_f = "job_path_type:zk_lock_requests_failed:ratio_rate5m{path=\"/dash/f\"}";

# requests at /dash/f, 5 a second, for $secs seconds or until $until
sub traffic_f {
    my ($secs, $until) = @_;
    my %status;
    my $end = time + $secs;
    my $i = 0;
    while (time < $end) {
        my $res = http_parallel([map { [$ng->port, "/f?key=f&sleep=10&n=" . $i++] }
            1 .. 2], timeout => 5);
        $status{$_->{status}}++ for @$res;
        last if $until && $until->();
        sleep 0.4;
    }
    return \%status;
}

{
    my $st = traffic_f(5);
    is_deeply([keys %$st], [200], 'the lock /dash/f: every request served')
        or diag explain $st;
    ok(wait_for(sub { grep { $_->{value}[1] == 0 } results($ratio_f) }, 10),
        'its failure ratio in Prometheus: 0');
    ok(!alerts('ZkLockHighFailureRatio', \%f),
        'and no ZkLockHighFailureRatio for it');
}

{
    my $t = time;
    $zk->stop;
    my $firing = sub { grep { $_->{state} eq 'firing' }
        alerts('ZkLockHighFailureRatio', \%f) };
    my $st = traffic_f(40, $firing);
    my $fired = $firing->();
    ok($fired, sprintf('ZooKeeper stopped: ZkLockHighFailureRatio fires for '
        . '/dash/f after %.1f s', time - $t)) or diag explain [alerts(
        'ZkLockHighFailureRatio', {})];
    ok(!$st->{200}, 'zk_lock_fail closed: no request at /dash/f served')
        or diag explain $st;
    my ($al) = alerts('ZkLockHighFailureRatio', \%f);
    is($al && $al->{labels}{severity}, 'critical', 'it is critical');
    like($al ? $al->{annotations}{summary} : '',
        qr{^\d+(\.\d+)?% of the requests at /dash/f \(mutex\) fail$},
        'and says which lock');
    my ($err) = scrape() =~ /^zk_lock_requests_total\{path="\/dash\/f",type="mutex",result="error"\} (\d+)$/m;
    ok(($err // 0) > 0, "the requests refused counted as error: "
        . ($err // 'none'));
    ok(scalar(alerts('ZkLockSessionDown', {})),
        'ZkLockSessionDown is active too');
}

{
    $ng->stop;
    ok(wait_for(sub { grep { $_->{state} eq 'firing' }
        alerts('ZkLockTargetDown', { job => $job, instance => $target }) }, 20),
        'nginx stopped: ZkLockTargetDown fires');
}

done_testing();
