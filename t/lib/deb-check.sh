#!/bin/bash
# Checks the Debian packages end to end, as root (CI runs it): builds them
# with t/lib/deb.sh (libnginx-mod-http-zk-lock and
# libnginx-mod-stream-zk-lock), installs both with apt, and checks that
#
# * each .so is in /usr/lib/nginx/modules/, its load_module snippet in
#   /usr/share/nginx/modules-available/, enabled by a symlink in
#   /etc/nginx/modules-enabled/, the stream module's after
#   libnginx-mod-stream's; both packages Depend on nginx-abi-* and
#   libzookeeper-st2, the stream one on libnginx-mod-stream, the HTTP one
#   not (and its .so loads into an nginx without stream);
# * the HTTP package ships the monitoring kit, conf-examples/prometheus/,
#   as it is in the checkout (uncompressed) in
#   /usr/share/doc/libnginx-mod-http-zk-lock/examples/prometheus/, where
#   "promtool test rules rules.test.yml" passes (when t/lib/promtool.sh
#   finds a promtool); each package has a README.Debian that says that a
#   module upgrade needs a restart or a binary upgrade, and names the
#   package's version as the build (zk_lock_build_info, the start line);
# * the stock "nginx -t" (/etc/nginx/nginx.conf, which includes
#   modules-enabled/*.conf and conf.d/*.conf) passes with each of
#   conf-examples/*.conf in /etc/nginx/conf.d/, one at a time (zk_hosts is
#   set once per nginx, so they do not go together), and with each of
#   conf-examples/stream/*.conf, copied to /etc/nginx/ and included in a
#   "stream {}" block of a copy of nginx.conf (conf.d/ is in "http {}");
# * after "apt-get purge", the files, the docs and the symlinks are gone,
#   libnginx-mod-stream is as it was, and nginx -t still passes.
#
# It leaves the system as it found it: on any exit a trap removes the
# examples and the nginx.conf copy it wrote and the log files nginx -t
# created for them, purges the packages, and stops an nginx that the
# packages' scripts may have started (nginx's postinst reloads a running
# nginx when a module comes or goes; it does not start one, but this makes
# sure).  It refuses to run if a package is already installed or the names
# of the files it writes are taken.
# Prints PASS/FAIL lines; exits 1 on any failure.  apt's output goes to
# t/build/deb/check.log (BUILD_DIR overrides t/build).
set -euo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
out=${BUILD_DIR:-$top/t/build}/deb
pkg=libnginx-mod-http-zk-lock
so=/usr/lib/nginx/modules/ngx_http_zk_lock_module.so
kit=/usr/share/doc/$pkg/examples/prometheus
avail=/usr/share/nginx/modules-available/mod-http-zk-lock.conf
stream_pkg=libnginx-mod-stream-zk-lock
stream_so=/usr/lib/nginx/modules/ngx_stream_zk_lock_module.so
stream_avail=/usr/share/nginx/modules-available/mod-stream-zk-lock.conf
# Debian's stream module, which ours Depends on (and deb.sh Build-Depends on)
ngx_stream_pkg=libnginx-mod-stream
ngx_stream_avail=/usr/share/nginx/modules-available/mod-stream.conf
enabled_dir=/etc/nginx/modules-enabled
confd=/etc/nginx/conf.d
etc=/etc/nginx
main_conf=$etc/nginx.conf
# the copy of nginx.conf with a stream block, for the stream examples
stream_conf=$etc/zk-lock-check-nginx.conf
logdir=/var/log/nginx
pidfile=/run/nginx.pid

export DEBIAN_FRONTEND=noninteractive

failures=0
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
# Stops here: what follows depends on it.
die() { fail "$*"; exit 1; }

# "ii ", "rc " (removed, config left)...; empty when dpkg does not know
# it.  $1: the package.
pkg_status() {
    dpkg-query -W -f='${db:Status-Abbrev}' "$1" 2>/dev/null || true
}
pkg_present() {
    case $(pkg_status "$1") in '' | 'un '* | 'pn '*) return 1 ;; esac
}

# The master pid in nginx's pid file, if that process is an nginx.
nginx_pid() {
    local pid
    pid=$(cat "$pidfile" 2>/dev/null) || return 0
    [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = nginx ] \
        && echo "$pid"
    return 0
}

# Runs the stock nginx -t (with the arguments after $1, if any); its output
# is logged, and shown on failure.
nginx_test() {
    local what=$1 output
    shift
    if output=$(nginx -t "$@" 2>&1); then
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
for p in "$pkg" "$stream_pkg"; do
    if pkg_present "$p"; then
        die "$p is already installed ($(pkg_status "$p")): purge it first"
    fi
done
copied=()               # files this script wrote (the trap removes them)
examples=()
for f in "$top"/conf-examples/*.conf; do
    dest=$confd/zk-lock-example-$(basename "$f")
    [ -e "$dest" ] && die "$dest exists already: not overwriting it"
    examples+=("$f")
done
[ ${#examples[@]} -gt 0 ] || die "no conf-examples/*.conf"
stream_examples=()
for f in "$top"/conf-examples/stream/*.conf; do
    [ -e "$f" ] || continue
    dest=$etc/zk-lock-example-stream-$(basename "$f")
    [ -e "$dest" ] && die "$dest exists already: not overwriting it"
    stream_examples+=("$f")
done
[ ! -e "$stream_conf" ] || die "$stream_conf exists already: not overwriting it"
# ours Depends on it: apt would install it, and the purge would leave it
ngx_stream_before=$(pkg_status "$ngx_stream_pkg")
case $ngx_stream_before in
    'ii '*) ;;
    *) die "$ngx_stream_pkg is not installed (apt-get install $ngx_stream_pkg)" ;;
esac

nginx_before=$(nginx_pid)           # a running nginx is left running
# nginx -t as root creates an empty pid file: removed if absent before
pidfile_before=0
[ ! -e "$pidfile" ] || pidfile_before=1
# log files the examples name, which nginx -t creates: those absent now
# are removed at the end
new_logs=()
for f in $( (grep -ho "$logdir/[^ ;]*" "${examples[@]}" \
        "${stream_examples[@]}" || true) | sort -u); do
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
    local rc=$? f p left=()
    set +e
    for f in "${copied[@]}"; do
        rm -f "$f"
    done
    for f in "${new_logs[@]}"; do
        rm -f "$f"
    done
    if [ "$installed" = 1 ]; then
        for p in "$pkg" "$stream_pkg"; do
            if pkg_present "$p"; then left+=("$p"); fi
        done
    fi
    if [ ${#left[@]} -gt 0 ]; then
        echo "cleanup: apt-get purge -y ${left[*]}"
        apt-get purge -y "${left[@]}" >> "$log" 2>&1 \
            || echo "FAIL: cleanup could not purge ${left[*]} (see $log)"
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

# deb.sh prints the stream package's .deb, then the HTTP one's (last)
debs=$("$top/t/lib/deb.sh") || die "t/lib/deb.sh failed"
deb=$(echo "$debs" | tail -n 1)
stream_deb=$(echo "$debs" | grep "/${stream_pkg}_[^/]*\.deb$" || true)
for f in "$deb" "$stream_deb"; do
    [ -f "$f" ] || die "t/lib/deb.sh printed '$debs': no .deb of both packages"
done
case $(basename "$deb") in
    "${pkg}_"*) ;;
    *) die "t/lib/deb.sh's last line is not $pkg's .deb: $deb" ;;
esac
log=$out/check.log
: > "$log"
pass "built $(basename "$deb") and $(basename "$stream_deb")"

for f in "$deb" "$stream_deb"; do
    p=$(dpkg-deb -f "$f" Package)
    depends=$(dpkg-deb -f "$f" Depends)
    case $depends in
        *nginx-abi-*) pass "$p Depends on $(echo "$depends" | grep -o 'nginx-abi-[^ ,]*')" ;;
        *) fail "$p's Depends lacks nginx-abi-*: $depends" ;;
    esac
    case $depends in
        *libzookeeper-st2*) pass "$p Depends on libzookeeper-st2" ;;
        *) fail "$p's Depends lacks libzookeeper-st2: $depends" ;;
    esac
    # the names in Depends, without versions
    if echo "$depends" | tr ',|' '\n\n' | awk '{ print $1 }' \
        | grep -qx "$ngx_stream_pkg"
    then
        if [ "$p" = "$stream_pkg" ]; then
            pass "$p Depends on $ngx_stream_pkg"
        else
            fail "$p Depends on $ngx_stream_pkg: $depends"
        fi
    elif [ "$p" = "$stream_pkg" ]; then
        fail "$p's Depends lacks $ngx_stream_pkg: $depends"
    else
        pass "$p does not Depend on $ngx_stream_pkg"
    fi
done

# -------------------------------------------------------------- install
installed=1             # from here on, the trap purges
if apt-get install -y "$deb" "$stream_deb" >> "$log" 2>&1; then
    pass "apt-get install $(basename "$deb") $(basename "$stream_deb")"
else
    tail -20 "$log" | sed 's/^/    /'
    die "apt-get install $deb $stream_deb"
fi
stop_started_nginx
for p in "$pkg" "$stream_pkg"; do
    case $(pkg_status "$p") in
        'ii '*) pass "$p is installed" ;;
        *) fail "$p status after install: '$(pkg_status "$p")'" ;;
    esac
done

for pair in "$so $avail" "$stream_so $stream_avail"; do
    read -r f a <<< "$pair"
    if [ -f "$f" ]; then pass "$f"; else fail "no $f"; fi
    if grep -qx "load_module modules/$(basename "$f");" "$a" 2>/dev/null; then
        pass "$a loads it"
    else
        fail "$a missing or without load_module modules/$(basename "$f");"
    fi
done
# the links' names have dh_nginx's priority prefix: 50-mod-http-zk-lock.conf
# and 70-mod-stream-zk-lock.conf, which sorts after Debian's
# 50-mod-stream.conf (modules-enabled/*.conf is included in that order)
links=$(find "$enabled_dir" -maxdepth 1 -type l -lname "$avail")
if [ -n "$links" ]; then
    pass "enabled by the symlink $links"
else
    fail "no symlink to $avail in $enabled_dir"
fi
stream_links=$(find "$enabled_dir" -maxdepth 1 -type l -lname "$stream_avail")
ngx_stream_links=$(find "$enabled_dir" -maxdepth 1 -type l \
    -lname "$ngx_stream_avail")
if [ -z "$stream_links" ]; then
    fail "no symlink to $stream_avail in $enabled_dir"
elif [ -z "$ngx_stream_links" ]; then
    fail "enabled by $stream_links, but $ngx_stream_pkg is not enabled"
elif [ "$(printf '%s\n' "$ngx_stream_links" "$stream_links" | LC_ALL=C sort \
        | tail -n 1)" = "$stream_links" ]; then
    pass "enabled by the symlink $stream_links, after $ngx_stream_links"
else
    fail "$stream_links sorts before $ngx_stream_links"
fi

# ------------------------------------------------------- kit and notes
kit_files=()
for f in "$top"/conf-examples/prometheus/*; do
    kit_files+=("$(basename "$f")")
done
[ ${#kit_files[@]} -ge 4 ] \
    || fail "conf-examples/prometheus/ has ${#kit_files[@]} files, not 4 or more"
for f in "${kit_files[@]}"; do
    if cmp -s "$top/conf-examples/prometheus/$f" "$kit/$f"; then
        pass "$kit/$f, as in the checkout"
    elif [ -e "$kit/$f.gz" ]; then
        fail "$kit/$f is compressed: $f.gz"
    else
        fail "$kit/$f missing or not as conf-examples/prometheus/$f"
    fi
done
if promtool=$(sh "$top/t/lib/promtool.sh" 2>/dev/null | tail -n 1) \
    && [ -x "$promtool" ]
then
    # promtool finds rules.yml next to the test file
    if output=$(cd "$kit" && "$promtool" test rules rules.test.yml 2>&1); then
        pass "promtool test rules passes the installed kit"
    else
        fail "promtool test rules in $kit:"
        echo "$output" | sed 's/^/    /'
    fi
else
    echo "note: no promtool (t/lib/promtool.sh): the installed rules not run"
fi
deb_version=$(dpkg-deb -f "$deb" Version)
for p in "$pkg" "$stream_pkg"; do
    readme=/usr/share/doc/$p/README.Debian
    if [ ! -f "$readme" ]; then
        fail "no $readme"
        continue
    fi
    missing=()
    for want in 'systemctl restart nginx' 'binary' 'dlopen()' \
        "build $deb_version" "build=\"$deb_version\"" ZkLockMixedVersions
    do
        grep -qF -- "$want" "$readme" || missing+=("$want")
    done
    if [ ${#missing[@]} -eq 0 ]; then
        pass "$readme: a module upgrade needs a restart; the build is $deb_version"
    else
        fail "$readme lacks: ${missing[*]}"
    fi
done

nginx_test "with the modules enabled"

# the HTTP module alone, no stream loaded (-g: no pid file, no error log)
alone=$(mktemp)
copied+=("$alone")
printf 'load_module modules/%s;\nevents {}\n' "$(basename "$so")" > "$alone"
nginx_test "with $(basename "$so") alone, no stream" \
    -q -c "$alone" -g 'pid /dev/null; error_log /dev/null;'
rm -f "$alone"

# ------------------------------------------------------------- examples
for f in "${examples[@]}"; do
    dest=$confd/zk-lock-example-$(basename "$f")
    cp "$f" "$dest"
    copied+=("$dest")
    nginx_test "with conf-examples/$(basename "$f") in $confd"
    rm -f "$dest"
done

# a stream {} block in a copy of nginx.conf that includes the example; a
# second stream {} would be a duplicate: without the rest of nginx.conf then
for f in "${stream_examples[@]}"; do
    dest=$etc/zk-lock-example-stream-$(basename "$f")
    cp "$f" "$dest"
    copied+=("$dest" "$stream_conf")
    if grep -Eq '^[[:space:]]*stream[[:space:]]*\{' "$main_conf"; then
        printf 'include %s/*.conf;\nevents {}\n' "$enabled_dir" > "$stream_conf"
    else
        cp "$main_conf" "$stream_conf"
    fi
    printf '\nstream {\n    include %s;\n}\n' "$dest" >> "$stream_conf"
    nginx_test "with conf-examples/stream/$(basename "$f") in stream {}" \
        -c "$stream_conf"
    rm -f "$dest" "$stream_conf"
done

# ---------------------------------------------------------------- purge
if apt-get purge -y "$pkg" "$stream_pkg" >> "$log" 2>&1; then
    pass "apt-get purge $pkg $stream_pkg"
else
    tail -20 "$log" | sed 's/^/    /'
    fail "apt-get purge $pkg $stream_pkg"
fi
stop_started_nginx
for p in "$pkg" "$stream_pkg"; do
    if pkg_present "$p"; then
        fail "$p still known to dpkg: '$(pkg_status "$p")'"
    else
        pass "$p is gone from dpkg"
    fi
done
for f in "$so" "$avail" "$stream_so" "$stream_avail" "/usr/share/doc/$pkg" \
    "/usr/share/doc/$stream_pkg"; do
    if [ -e "$f" ]; then fail "$f is left"; else pass "$f removed"; fi
done
# also dh_nginx's "<link>.removed", which only "remove" (not purge) leaves
links=$(find "$enabled_dir" -maxdepth 1 \( -lname "$avail" \
    -o -lname "$stream_avail" -o -name '*mod-http-zk-lock.conf*' \
    -o -name '*mod-stream-zk-lock.conf*' \))
if [ -n "$links" ]; then
    fail "left in $enabled_dir: $links"
else
    pass "no symlink left in $enabled_dir"
fi
if [ "$(pkg_status "$ngx_stream_pkg")" = "$ngx_stream_before" ]; then
    pass "$ngx_stream_pkg as it was ($ngx_stream_before)"
else
    fail "$ngx_stream_pkg was '$ngx_stream_before', is '$(pkg_status "$ngx_stream_pkg")'"
fi
nginx_test "after the purge"

[ "$failures" -eq 0 ]
