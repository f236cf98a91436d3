#!/usr/bin/perl
# The monitoring kit of conf-examples/prometheus/:
#
#  1. promtool (Debian's prometheus package, unpacked by t/lib/promtool.sh)
#     accepts rules.yml (check rules) and scrape.yml (check config, which
#     loads rules.yml too);
#  2. promtool test rules passes rules.test.yml, and it tests every alert
#     of rules.yml;
#  3. against a real nginx and ZooKeeper, after requests that acquire and
#     time out, every metric that the rules' expressions read is in the
#     module's /metrics output (but the rules' own recording rules, the
#     per-path thresholds path:zk_lock_...:..._threshold that a user may
#     record, and Prometheus's own "up"), and every result="..." value they
#     name (=, =~, != or !~) appears there too, build_info with its build.

use strict;
use warnings;
use Test::More;
use lib 't/lib';
use ZkLock::Test;

require_prereqs(qw(nginx zookeeper kazoo module));

my $dir = 'conf-examples/prometheus';
my %file = map { $_ => "$dir/$_" } qw(scrape.yml rules.yml rules.test.yml);
ok(-r $file{$_}, "$file{$_} exists") for sort keys %file;

# ---------------------------------------------------------------- rules.yml
# Core Perl has no YAML parser; the expressions are read from the "record:",
# "alert:" and "expr:" keys (a plain scalar on the line, or a block scalar
# "|" / ">" on the more indented lines that follow).
my (@exprs, %recorded, %alerts);
{
    open my $fh, '<', $file{'rules.yml'} or die "$file{'rules.yml'}: $!";
    my @lines = <$fh>;
    close $fh;
    for (my $i = 0; $i < @lines; $i++) {
        my $l = $lines[$i];
        next if $l =~ /^\s*#/;
        $recorded{$1} = 1 if $l =~ /^\s*-?\s*record:\s*(\S+)/;
        $alerts{$1} = 1 if $l =~ /^\s*-?\s*alert:\s*(\S+)/;
        next unless $l =~ /^(\s*)-?\s*expr:\s*(.*?)\s*$/;
        my ($indent, $v) = (length $1, $2);
        if ($v =~ /^[|>][-+]?$/) {
            $v = '';
            while ($i + 1 < @lines && ($lines[$i + 1] =~ /^\s*$/
                    || $lines[$i + 1] =~ /^(\s*)/ && length $1 > $indent)) {
                $v .= $lines[++$i];
            }
        }
        $v =~ s/^'(.*)'$/$1/s or $v =~ s/^"(.*)"$/$1/s;
        push @exprs, $v;
    }
}
ok(@exprs >= 10, scalar(@exprs) . ' expressions in rules.yml');

# metric names of a PromQL expression: identifiers that are not functions
# (followed by "("), keywords, label names (in {...} or by (...)), strings,
# durations or numbers
my %KEYWORDS = map { $_ => 1 } qw(and or unless bool offset by without on
    ignoring group_left group_right inf nan);
sub metric_names {
    my ($e) = @_;
    $e =~ s/"(?:[^"\\]|\\.)*"//g;
    $e =~ s/'(?:[^'\\]|\\.)*'//g;
    $e =~ s/\{[^}]*\}/ /g;
    $e =~ s/\[[^\]]*\]/ /g;
    $e =~ s/\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/ /g;
    my %n;
    while ($e =~ /(?<![\w:.])([a-zA-Z_:][a-zA-Z0-9_:]*+)(?!\s*\()/g) {
        $n{$1} = 1 unless $KEYWORDS{lc $1};
    }
    return keys %n;
}

my (%used, %results);
for my $e (@exprs) {
    $used{$_} = 1 for metric_names($e);
    while ($e =~ /\bresult\s*([=!]~?)\s*"([^"]*)"/g) {
        my ($op, $v) = ($1, $2);
        $results{$_} = 1 for $op =~ /~/ ? split(/\|/, $v) : ($v);
    }
}
my @recorded_used = grep { $recorded{$_} } sort keys %used;
ok(@recorded_used, 'the alerts read recording rules: '
    . join(', ', @recorded_used));
# the per-path thresholds (recorded in rules.yml, or only in its comments'
# examples) and the scrapes' own "up"
my @thresholds = grep { /^path:zk_lock_\w+:\w+_threshold$/ } sort keys %used;
delete @used{keys %recorded};
is_deeply(\@thresholds, [qw(path:zk_lock_requests_failed:ratio_threshold
    path:zk_lock_requests_timeout:ratio_threshold
    path:zk_lock_wait_seconds:p99_threshold)],
    'the alerts read the per-path thresholds');
ok($used{up}, 'the rules read up');
delete @used{@thresholds, 'up'};
my @metrics = sort keys %used;
is_deeply([grep { !/^zk_lock_/ } @metrics], [],
    'the rules read only the module\'s metrics');
# the parser must have found them all (a parser that finds nothing would
# make the check against /metrics below vacuous)
for my $m (qw(zk_lock_session_connected zk_lock_session_expirations_total
    zk_lock_requests_total zk_lock_wait_seconds_bucket zk_lock_build_info)) {
    ok($used{$m}, "the rules read $m");
}
is_deeply([sort keys %results], [qw(acquired_dry_run bypassed error jeopardy
    local lost rejected revoked timeout unreachable waited_dry_run)],
    'and the results they name');

# ---------------------------------------------------------------- promtool
my $promtool = `sh t/lib/promtool.sh 2>&1`;
chomp $promtool;
($promtool) = (split /\n/, $promtool)[-1];
SKIP: {
    skip "no promtool: $promtool", 5 unless $promtool && -x $promtool;

    my $out = `$promtool check rules $file{'rules.yml'} 2>&1`;
    is($? >> 8, 0, 'promtool check rules accepts rules.yml') or diag $out;
    like($out, qr/SUCCESS: \d+ rules found/, 'and finds the rules')
        or diag $out;

    $out = `$promtool check config $file{'scrape.yml'} 2>&1`;
    is($? >> 8, 0, 'promtool check config accepts scrape.yml (and its rules)')
        or diag $out;

    # promtool resolves rule_files relative to the test file's directory
    $out = `$promtool test rules $file{'rules.test.yml'} 2>&1`;
    is($? >> 8, 0, 'promtool test rules passes rules.test.yml') or diag $out;

    open my $fh, '<', $file{'rules.test.yml'} or die $!;
    my %tested = map { /^\s*alertname:\s*(\S+)/ ? ($1 => 1) : () } <$fh>;
    close $fh;
    is_deeply([grep { !$tested{$_} } sort keys %alerts], [],
        'every alert of rules.yml has a unit test');
}

# ------------------------------------------------- against the real module
my $zk = zk_start();
my $be = backend_start();

my $ng = nginx_start(<<'EOF', zk => $zk, backend => $be, workers => 2);
    zk_hosts %%ZK%%;
    zk_session_timeout 4s;

    server {
        listen 127.0.0.1:%%PORT%%;

        location /m {
            zk_mutex /mon/m timeout=300ms;
            proxy_pass http://%%BACKEND%%;
        }
        location /s {
            zk_semaphore /mon/s leases=2 timeout=10s;
            proxy_pass http://%%BACKEND%%;
        }
        location = /metrics {
            zk_lock_status_page prometheus;
        }
    }
EOF
ok(wait_for(sub { sessions_connected($ng) }, 15), 'connected');

# a mutex held 200 ms by each of 6 requests that wait at most 300 ms: some
# get it, some time out; a semaphore that lets all of its requests through
my @reqs = ((map { [$ng->port, "/m?key=m&sleep=200&n=$_"] } 1 .. 6),
    (map { [$ng->port, "/s?key=s&sleep=50&n=$_"] } 1 .. 4));
my $res = http_parallel(\@reqs, timeout => 30);
my @m = grep { $_->{status} == 200 } @$res[0 .. 5];
my @s = grep { $_->{status} == 200 } @$res[6 .. 9];
ok(@m >= 1 && @m < 6, scalar(@m) . ' of 6 requests got the mutex');
is(scalar @s, 4, 'every semaphore request served');

my $text = $ng->get('/metrics')->{body} // '';
my %exposed = map { /^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]/ ? ($1 => 1) : () }
    split /\n/, $text;
for my $m (@metrics) {
    ok($exposed{$m}, "$m is in /metrics");
}
for my $r (sort keys %results) {
    like($text, qr/^zk_lock_requests_total\{[^}]*result="\Q$r\E"\} \d+$/m,
        "result=\"$r\" is in /metrics");
}
like($text, qr/^zk_lock_requests_total\{path="\/mon\/m",type="mutex",result="timeout"\} [1-9]\d*$/m,
    'the timeouts are counted');
like($text, qr/^zk_lock_wait_seconds_bucket\{path="\/mon\/m",type="mutex",le="\+Inf"\} [1-9]\d*$/m,
    'and the waits of the requests that got the lock');
like($text, qr/^zk_lock_build_info\{version="[^"]+",build="[^"]+"\} 1$/m,
    'build info, with the build that ZkLockMixedVersions counts');

done_testing();
