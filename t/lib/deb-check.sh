#!/bin/bash
# Checks the Debian package end to end, as root (CI runs it): builds it with
# t/lib/deb.sh, installs it with apt, and checks that
#
# * the .so is in /usr/lib/nginx/modules/, its load_module snippet in
#   /usr/share/nginx/modules-available/, enabled by a symlink in
#   /etc/nginx/modules-enabled/, and the package Depends on nginx-abi-* and
#   libzookeeper-st2;
# * the stock "nginx -t" (/etc/nginx/nginx.conf, which includes
#   modules-enabled/*.conf and conf.d/*.conf) passes with each of
#   conf-examples/*.conf in /etc/nginx/conf.d/, one at a time (zk_hosts is
#   set once per nginx, so they do not go together);
# * after "apt-get purge", the files and the symlink are gone and nginx -t
#   still passes.
#
# It leaves the system as it found it: on any exit a trap removes the
# examples it copied and the log files nginx -t created for them, purges the
# package, and stops an nginx that the package's scripts may have started
# (nginx's postinst reloads a running nginx when a module comes or goes; it
# does not start one, but this makes sure).  It refuses to run if the
# package is already installed or its conf.d file names are taken.
# Prints PASS/FAIL lines; exits 1 on any failure.  apt's output goes to
# t/build/deb/check.log (BUILD_DIR overrides t/build).
set -euo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
out=${BUILD_DIR:-$top/t/build}/deb
pkg=libnginx-mod-http-zk-lock
so=/usr/lib/nginx/modules/ngx_http_zk_lock_module.so
avail=/usr/share/nginx/modules-available/mod-http-zk-lock.conf
enabled_dir=/etc/nginx/modules-enabled
confd=/etc/nginx/conf.d
logdir=/var/log/nginx
pidfile=/run/nginx.pid

export DEBIAN_FRONTEND=noninteractive

failures=0
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
# Stops here: what follows depends on it.
die() { fail "$*"; exit 1; }

# "ii ", "rc " (removed, config left)...; empty when dpkg does not know it.
pkg_status() {
    dpkg-query -W -f='${db:Status-Abbrev}' "$pkg" 2>/dev/null || true
}
pkg_present() {
    case $(pkg_status) in '' | 'un '* | 'pn '*) return 1 ;; esac
}

# The master pid in nginx's pid file, if that process is an nginx.
nginx_pid() {
    local pid
    pid=$(cat "$pidfile" 2>/dev/null) || return 0
    [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = nginx ] \
        && echo "$pid"
    return 0
}

# Runs the stock nginx -t; its output is logged, and shown on failure.
nginx_test() {
    local what=$1 output
    if output=$(nginx -t 2>&1); then
        pass "nginx -t $what"
    else
        fail "nginx -t $what:"
        echo "$output" | sed 's/^/    /'
    fi
    echo "$output" >> "$log"
}

if [ "$(id -u)" -ne 0 ]; then
    echo "FAIL: deb-check.sh installs a package: run it as root" >&2
    exit 1
fi
command -v nginx >/dev/null 2>&1 || die "no nginx (apt-get install nginx)"

# ---------------------------------------------------------------- state
if pkg_present; then
    die "$pkg is already installed ($(pkg_status)): purge it first"
fi
copied=()               # conf.d files this script put there
examples=()
for f in "$top"/conf-examples/*.conf; do
    dest=$confd/zk-lock-example-$(basename "$f")
    [ -e "$dest" ] && die "$dest exists already: not overwriting it"
    examples+=("$f")
done
[ ${#examples[@]} -gt 0 ] || die "no conf-examples/*.conf"

nginx_before=$(nginx_pid)           # a running nginx is left running
# nginx -t as root creates an empty pid file: removed if absent before
pidfile_before=0
[ ! -e "$pidfile" ] || pidfile_before=1
# log files the examples name, which nginx -t creates: those absent now
# are removed at the end
new_logs=()
for f in $( (grep -ho "$logdir/[^ ;]*" "${examples[@]}" || true) | sort -u); do
    [ -e "$f" ] || new_logs+=("$f")
done
installed=0

# nginx running now that was not before: the package's scripts started it.
stop_started_nginx() {
    local pid _
    pid=$(nginx_pid)
    [ -n "$pid" ] && [ "$pid" != "$nginx_before" ] || return 0
    echo "note: stopping the nginx (pid $pid) started during the check"
    kill -QUIT "$pid" 2>/dev/null || true
    for _ in $(seq 50); do     # 5 s
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    kill -TERM "$pid" 2>/dev/null || true
}

cleanup() {
    local rc=$? f
    set +e
    for f in "${copied[@]}"; do
        rm -f "$f"
    done
    for f in "${new_logs[@]}"; do
        rm -f "$f"
    done
    if [ "$installed" = 1 ] && pkg_present; then
        echo "cleanup: apt-get purge -y $pkg"
        apt-get purge -y "$pkg" >> "$log" 2>&1 \
            || echo "FAIL: cleanup could not purge $pkg (see $log)"
    fi
    stop_started_nginx
    if [ "$pidfile_before" = 0 ] && [ -f "$pidfile" ] && [ ! -s "$pidfile" ]
    then
        rm -f "$pidfile"
    fi
    if [ "$failures" -ne 0 ]; then
        echo "FAIL: deb-check.sh ($failures failure(s); apt's output: $log)"
        [ "$rc" -ne 0 ] || rc=1
    elif [ "$rc" -ne 0 ]; then
        echo "FAIL: deb-check.sh stopped (exit $rc)"
    else
        echo "PASS: deb-check.sh"
    fi
    exit "$rc"
}
# the log lives in t/build/deb, which deb.sh wipes: /dev/null until then
log=/dev/null
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP

# ---------------------------------------------------------------- build
nginx_test "before the package (the system's own configuration)"
[ "$failures" -eq 0 ] || die "nginx -t fails already: not going further"

deb=$("$top/t/lib/deb.sh" | tail -n 1) || die "t/lib/deb.sh failed"
[ -f "$deb" ] || die "t/lib/deb.sh printed '$deb', not a .deb"
log=$out/check.log
: > "$log"
pass "built $(basename "$deb")"

depends=$(dpkg-deb -f "$deb" Depends)
case $depends in
    *nginx-abi-*) pass "Depends has $(echo "$depends" | grep -o 'nginx-abi-[^ ,]*')" ;;
    *) fail "Depends lacks nginx-abi-*: $depends" ;;
esac
case $depends in
    *libzookeeper-st2*) pass "Depends has libzookeeper-st2" ;;
    *) fail "Depends lacks libzookeeper-st2: $depends" ;;
esac

# -------------------------------------------------------------- install
installed=1             # from here on, the trap purges
if apt-get install -y "$deb" >> "$log" 2>&1; then
    pass "apt-get install $(basename "$deb")"
else
    tail -20 "$log" | sed 's/^/    /'
    die "apt-get install $deb"
fi
stop_started_nginx
case $(pkg_status) in
    'ii '*) pass "$pkg is installed" ;;
    *) fail "$pkg status after install: '$(pkg_status)'" ;;
esac

if [ -f "$so" ]; then pass "$so"; else fail "no $so"; fi
if grep -qx "load_module modules/$(basename "$so");" "$avail" 2>/dev/null; then
    pass "$avail loads it"
else
    fail "$avail missing or without load_module modules/$(basename "$so");"
fi
# the link's name has dh_nginx's priority prefix: 50-mod-http-zk-lock.conf
links=$(find "$enabled_dir" -maxdepth 1 -type l -lname "$avail")
if [ -n "$links" ]; then
    pass "enabled by the symlink $links"
else
    fail "no symlink to $avail in $enabled_dir"
fi

nginx_test "with the module enabled"

# ------------------------------------------------------------- examples
for f in "${examples[@]}"; do
    dest=$confd/zk-lock-example-$(basename "$f")
    cp "$f" "$dest"
    copied+=("$dest")
    nginx_test "with conf-examples/$(basename "$f") in $confd"
    rm -f "$dest"
done

# ---------------------------------------------------------------- purge
if apt-get purge -y "$pkg" >> "$log" 2>&1; then
    pass "apt-get purge $pkg"
else
    tail -20 "$log" | sed 's/^/    /'
    fail "apt-get purge $pkg"
fi
stop_started_nginx
if pkg_present; then
    fail "$pkg still known to dpkg: '$(pkg_status)'"
else
    pass "$pkg is gone from dpkg"
fi
for f in "$so" "$avail"; do
    if [ -e "$f" ]; then fail "$f is left"; else pass "$f removed"; fi
done
# also dh_nginx's "<link>.removed", which only "remove" (not purge) leaves
links=$(find "$enabled_dir" -maxdepth 1 \( -lname "$avail" \
    -o -name '*mod-http-zk-lock.conf*' \))
if [ -n "$links" ]; then
    fail "left in $enabled_dir: $links"
else
    pass "no symlink left in $enabled_dir"
fi
nginx_test "after the purge"

[ "$failures" -eq 0 ]
