#!/bin/sh
# Builds ngx_http_zk_lock_module and ngx_stream_zk_lock_module as dynamic
# modules for the stock Debian nginx binary (--with-compat), from a copy of
# Debian's nginx source tree.  It has stream's headers, not its sources:
# --with-stream (not =dynamic) builds no stream module of nginx's own, and
# Debian's libnginx-mod-stream is loaded beside ours.
# --with-debug matches Debian's binary and keeps the module's debug log.
# Usage: t/lib/build.sh [extra configure args]   (BUILD_DIR overrides t/build)
# Prints the path of the built .so on success.
set -e

top=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD_DIR:-$top/t/build}
src=/usr/share/nginx/src

if [ ! -f "$src/configure" ]; then
    echo "build.sh: $src not found (apt-get install nginx-dev)" >&2
    exit 1
fi

mkdir -p "$build"
stamp="$build/.configured"

# Reconfigure when the addon script changes, so new sources are picked up.
if [ ! -f "$stamp" ] || [ "$top/config" -nt "$stamp" ]; then
    rm -rf "$build/nginx"
    cp -a "$src" "$build/nginx"
    (cd "$build/nginx" && ./configure --with-compat --with-debug \
        --with-stream --add-dynamic-module="$top" "$@") > "$build/configure.log" 2>&1 \
        || { tail -20 "$build/configure.log" >&2; exit 1; }
    touch "$stamp"
fi

(cd "$build/nginx" && make -f objs/Makefile modules) > "$build/make.log" 2>&1 \
    || { grep -E 'error|warning' "$build/make.log" | head -40 >&2; exit 1; }

echo "$build/nginx/objs/ngx_http_zk_lock_module.so"
