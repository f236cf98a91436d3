#!/bin/sh
# Prints the path of a promtool binary, for t/prometheus.t and
# t/monitoring.t, or with the argument "prometheus" of a prometheus server
# binary, for t/dashboard.t: the one on PATH, or the one in Debian's
# prometheus package, fetched with "apt-get download" and unpacked with
# "dpkg -x" into t/build/promtool (kept for the next run; nothing is
# installed, and so no prometheus service is started on the machine).
# Exits non-zero when neither can be had.
set -eu

prog=${1:-promtool}

case $prog in
promtool|prometheus) ;;
*) echo "usage: promtool.sh [promtool|prometheus]" >&2; exit 2 ;;
esac

if command -v "$prog" >/dev/null 2>&1; then
    command -v "$prog"
    exit 0
fi

top=$(cd "$(dirname "$0")/../.." && pwd)
dir=${BUILD_DIR:-$top/t/build}/promtool
bin=$dir/root/usr/bin/$prog

if [ ! -x "$bin" ]; then
    rm -rf "$dir"
    mkdir -p "$dir"
    (cd "$dir" && apt-get download prometheus) >"$dir/download.log" 2>&1 || {
        echo "promtool.sh: apt-get download prometheus failed" \
             "(see $dir/download.log)" >&2
        exit 1
    }
    dpkg -x "$dir"/prometheus_*.deb "$dir/root"
    rm -f "$dir"/prometheus_*.deb
fi

echo "$bin"
