#!/bin/sh
# Builds nginx mainline with both modules built in (--add-module,
# --with-stream, --with-http_v2_module) under AddressSanitizer, for
# t/soak.t: nginx and the modules with -fsanitize=address, and
# NGX_DEBUG_PALLOC=1 so that every allocation from a pool is a malloc of
# its own, which ASan then watches (a pool's memory used after the pool
# is destroyed, or past an allocation's end, is reported, as a plain
# malloc would be).
#
# Usage: t/lib/asan.sh [extra configure args]
# ASAN_DIR overrides t/build/asan; NGINX_SRC_DIR the directory with the
# nginx-<version>.tar.gz tarballs (default: ../shared/nginx-src beside
# the checkout, as t/lib/matrix.sh); NGINX_VERSION the version (1.31.4).
# Incremental: configures again only when config, this script, the
# tarball or the arguments changed; make rebuilds what changed.  Prints
# the path of the nginx binary on success; use it as
#
#   ZK_LOCK_NGINX=<that path> ZK_LOCK_MODULE= prove t/soak.t
set -e

top=$(cd "$(dirname "$0")/../.." && pwd)
build=${ASAN_DIR:-$top/t/build/asan}
tarballs=${NGINX_SRC_DIR:-$top/../shared/nginx-src}
version=${NGINX_VERSION:-1.31.4}
tarball=$tarballs/nginx-$version.tar.gz
jobs=$(nproc 2>/dev/null || echo 2)

if [ ! -f "$tarball" ]; then
    echo "asan.sh: $tarball not found (NGINX_SRC_DIR)" >&2
    exit 1
fi

cc_opt="-fsanitize=address -fno-omit-frame-pointer -O1 -g -DNGX_DEBUG_PALLOC=1"
args="--with-http_v2_module --with-stream --add-module=$top $*"

mkdir -p "$build"
stamp="$build/.configured"

# Configure again when the addon script changes (new sources), when this
# script, the tarball or the arguments do.
if [ ! -f "$stamp" ] || [ "$top/config" -nt "$stamp" ] \
    || [ "$0" -nt "$stamp" ] || [ "$tarball" -nt "$stamp" ] \
    || [ "$(cat "$stamp")" != "$version $args" ]
then
    rm -rf "$build/nginx" "$build/nginx-$version" "$stamp"
    tar xzf "$tarball" -C "$build"
    mv "$build/nginx-$version" "$build/nginx"
    (cd "$build/nginx" && auto/configure $args \
        --with-cc-opt="$cc_opt" --with-ld-opt=-fsanitize=address) \
        > "$build/configure.log" 2>&1 \
        || { tail -20 "$build/configure.log" >&2; exit 1; }
    echo "$version $args" > "$stamp"
fi

(cd "$build/nginx" && make -j"$jobs" -f objs/Makefile) \
    > "$build/make.log" 2>&1 \
    || { grep -E 'error|warning' "$build/make.log" | head -40 >&2; exit 1; }

echo "$build/nginx/objs/nginx"
