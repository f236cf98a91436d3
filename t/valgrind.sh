#!/bin/bash
# Runs test files with every nginx process (master, workers, "nginx -t")
# under valgrind memcheck, then reports the memory errors whose stack
# involves the modules (ngx_http_zk_lock_*, ngx_stream_zk_lock_*, their
# core ngx_zk_lock_*) or the ZooKeeper C client, and
# any nginx process that crashed.
#
# Usage: t/valgrind.sh [test file...]      (from anywhere in the checkout)
#        default: t/mutex.t t/paths.t t/faults.t
#
# Slow (about 2 minutes for the default files; nginx itself runs 10-30
# times slower under valgrind) and not part of
# `prove -r t/` (prove only runs *.t files). Tests with tight timing
# assertions may fail under valgrind: their results are shown, but only
# the valgrind findings decide the exit status (VG_STRICT=1: test failures
# too). Exit status: 0 no module error, 1 module errors found or an nginx
# process crashed (SIGSEGV, SIGABRT...: any frame), 2 setup
# problem (no valgrind, no module, no log at all).
#
# Environment:
#   ZK_LOCK_MODULE  the .so to test (default: built by t/lib/build.sh);
#                   it is copied first, so a rebuild meanwhile is harmless
#   NGINX_REAL      the nginx binary (default /usr/sbin/nginx)
#   VG_OUT          where the logs go (default: a new $TMPDIR/zklock-valgrind-*)
#   VG_OPTS         extra valgrind options, e.g. --track-origins=yes
#   VG_STRICT=1     also fail when a test file fails
#   VG_ALL=1        list every error record, not only the module's
#   ZK_FUZZ_REQUESTS defaults to 500 here when t/fuzz.t is run
#
# How: TEST_NGINX_BINARY (honoured by t/lib/ZkLock/Test.pm) points to a
# wrapper that execs valgrind on the real nginx with the harness's
# arguments, so the master keeps the pid the harness knows and its
# signals (QUIT, HUP, TERM) reach nginx. Under valgrind an nginx process
# cannot retitle itself: /proc/<pid>/cmdline stays valgrind's command
# line, where the harness looks for "worker process" to find the workers.
# The wrapper therefore names valgrind's process "nginx-valgrind: worker
# process" (exec -a); every child of the master then counts as a worker
# (nginx here has no cache manager or other helper process), and old
# workers of a reload are not seen "shutting down" until they exit.
#
# Needs valgrind (Debian: apt-get install valgrind).

set -u

top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top" || exit 2

vg=$(command -v valgrind.bin || command -v valgrind) || {
    echo "valgrind.sh: valgrind not found (apt-get install valgrind)" >&2
    exit 2
}
nginx=${NGINX_REAL:-/usr/sbin/nginx}
[ -x "$nginx" ] || { echo "valgrind.sh: $nginx not found" >&2; exit 2; }

if [ $# -eq 0 ]; then
    set -- t/mutex.t t/paths.t t/faults.t
fi
for t in "$@"; do
    [ -f "$t" ] || { echo "valgrind.sh: no test file $t" >&2; exit 2; }
done

out=${VG_OUT:-$(mktemp -d "${TMPDIR:-/tmp}/zklock-valgrind-XXXXXX")}
mkdir -p "$out" || exit 2
out=$(cd "$out" && pwd)
rm -f "$out"/vg.*.log

so=${ZK_LOCK_MODULE:-}
if [ -z "$so" ]; then
    so=$(sh t/lib/build.sh) || {
        echo "valgrind.sh: module build failed (t/lib/build.sh)" >&2
        exit 2
    }
    so=$(printf '%s\n' "$so" | tail -1)
fi
[ -f "$so" ] || { echo "valgrind.sh: module $so not found" >&2; exit 2; }
cp "$so" "$out/ngx_http_zk_lock_module.so" || exit 2
# the stream module, built beside it (t/stream.t loads it)
sso=$(dirname "$so")/ngx_stream_zk_lock_module.so
[ ! -f "$sso" ] || cp "$sso" "$out/ngx_stream_zk_lock_module.so" || exit 2

# The wrapper. valgrind.bin is Debian's real launcher (/usr/bin/valgrind
# is a script that sets these variables and execs it; argv[0] would not
# survive a script).
cat > "$out/nginx" <<EOF
#!/bin/bash
export LD_LIBRARY_PATH="\${LD_LIBRARY_PATH:+\$LD_LIBRARY_PATH:}/usr/lib/debug"
export GLIBCPP_FORCE_NEW=1 GLIBCXX_FORCE_NEW=1
exec -a "nginx-valgrind: worker process" "$vg" --tool=memcheck \\
    --trace-children=yes --child-silent-after-fork=no \\
    --leak-check=full --show-leak-kinds=definite --errors-for-leak-kinds=definite \\
    --keep-debuginfo=yes --num-callers=40 --vgdb=no \\
    --log-file="$out/vg.%p.log" ${VG_OPTS:-} \\
    "$nginx" "\$@"
EOF
chmod +x "$out/nginx"

echo "valgrind.sh: logs in $out"
echo "valgrind.sh: running $* under valgrind (slow)"
start=$(date +%s)
TEST_NGINX_BINARY="$out/nginx" ZK_LOCK_MODULE="$out/ngx_http_zk_lock_module.so" \
    ZK_FUZZ_REQUESTS=${ZK_FUZZ_REQUESTS:-500} \
    prove -v "$@" > "$out/prove.log" 2>&1
prove_rc=$?
echo "valgrind.sh: tests took $(( $(date +%s) - start ))s, prove exit $prove_rc" \
    "(full output: $out/prove.log)"
grep -E '^(not ok|t/.*\.t \.\.|Result:|Failed|  Failed tests:)' "$out/prove.log" \
    | sed 's/^/    /'

# Parse the logs: one record per error (a header line, then its stack).
VG_ALL=${VG_ALL:-} perl -e '
use strict;
use warnings;

my $dir = shift;
my @logs = sort glob("$dir/vg.*.log");
if (!@logs) {
    print "valgrind.sh: no valgrind log in $dir: was nginx started?\n";
    exit 2;
}
# Kinds of errors, by the first line of their record.
my $KIND = qr/Invalid[ ](?:read|write|free|alignment)|Mismatched[ ]free
    |uninitialised|unaddressable|definitely[ ]lost|overlap|fishy/x;
# A stack frame in the module or in the ZooKeeper C client.
my $OURS = qr/ngx_(?:http_|stream_)?zk_lock_
    |ngx_(?:http|stream)_zk_lock_module\.so
    |\bzoo_|zookeeper|libzookeeper|recordio|\bdeserialize_|\bserialize_/x;

my (%count, @ours, @others, %summary, @crashes);
my ($processes, $nginx_processes) = (0, 0);
for my $log (@logs) {
    open my $fh, "<", $log or next;
    my @lines = <$fh>;
    close $fh;
    $processes++;
    $nginx_processes++ if grep { /Command: .*nginx/ } @lines;
    if (my ($n) = join("", @lines) =~ /ERROR SUMMARY: (\d+) errors/) {
        $summary{$log} = $n;
    }
    # A crash (the tests send nginx no such signal; SIGKILL leaves no line)
    if (my ($l) = grep { /Process terminating with default action of signal \d+ \(SIG(?:SEGV|BUS|ABRT|ILL|FPE)\)/ } @lines) {
        my ($where) = grep { /^==\d+==\s+at 0x/ } @lines;
        push @crashes, "$log: " . ($l =~ s/^==\d+==\s*//r =~ s/\n//r)
            . " (first error: " . (($where // "") =~ s/^==\d+==\s*//r =~ s/\n//r) . ")";
    }
    # Records are separated by "==pid== " blank lines.
    my @rec;
    my $flush = sub {
        return unless @rec;
        my $head = $rec[0];
        if ($head =~ $KIND && grep { /^==\d+==\s+(?:at|by) 0x/ } @rec) {
            my $text = join "", @rec;
            my $ours = grep { /^==\d+==\s+(?:at|by) 0x/ && $_ =~ $OURS } @rec;
            (my $kind = $head) =~ s/^==\d+== //;
            $kind =~ s/\d[\d,]* bytes in \d[\d,]* blocks/N bytes in N blocks/;
            $kind =~ s/of size \d+/of size N/;
            $kind =~ s/ in loss record .*//;
            chomp $kind;
            $count{$ours ? "module" : "other"}{$kind}++;
            push @{ $ours ? \@ours : \@others }, "$log:\n$text";
        }
        @rec = ();
    };
    for my $l (@lines) {
        if ($l =~ /^==\d+==\s*$/) { $flush->(); next }
        push @rec, $l if $l =~ /^==\d+== /;
    }
    $flush->();
}

my $unfinished = $processes - keys %summary;
print "valgrind.sh: $processes valgrind logs ($nginx_processes nginx processes)\n";
print "  $unfinished process(es) ended without the final valgrind summary "
    . "(killed, e.g. by the cleanup of the harness): their leaks are not checked\n"
    if $unfinished;
for my $who (qw(other module)) {
    next unless $count{$who};
    print "  $who errors:\n";
    print "    $count{$who}{$_} x $_\n" for sort keys %{ $count{$who} };
}
if ($ENV{VG_ALL} && @others) {
    print "\n---- errors outside the module ----\n", join("\n", @others);
}
if (@crashes) {
    print "\n---- nginx processes that crashed ----\n", map { "$_\n" } @crashes;
}
if (@ours || @crashes) {
    print "\n---- errors in the module or the ZooKeeper client ----\n",
        join("\n", @ours) if @ours;
    print "\nvalgrind.sh: FAIL: " . scalar(@ours)
        . " error(s) with a frame in ngx_*zk_lock_* or ZooKeeper, "
        . scalar(@crashes) . " crashed process(es)\n";
    exit 1;
}
print "valgrind.sh: OK: no error with a frame in ngx_*zk_lock_* or ZooKeeper"
    . (@others ? " (" . scalar(@others) . " elsewhere: VG_ALL=1 lists them)" : "")
    . "\n";
exit 0;
' "$out"
vg_rc=$?

if [ "$vg_rc" -eq 0 ] && [ "$prove_rc" -ne 0 ] && [ "${VG_STRICT:-}" = 1 ]; then
    echo "valgrind.sh: FAIL: test failures under valgrind (VG_STRICT=1)"
    exit 1
fi
exit "$vg_rc"
