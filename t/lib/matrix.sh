#!/bin/sh
# Builds the modules in every configuration their users build them in, each
# with nginx's own default flags (-Werror included), and fails on any
# compiler warning, not only on errors:
#
#   debian-dynamic-debug    Debian's 1.22 tree, --with-compat --with-debug
#                           --with-stream
#   debian-dynamic          Debian's 1.22 tree, --with-compat --with-stream
#   stable-dynamic          nginx 1.30 (shared/nginx-src), --with-compat
#   stable-static           nginx 1.30, --add-module
#   stable-static-stream    nginx 1.30, --add-module, --with-stream
#   mainline-dynamic        nginx 1.31, --with-compat
#   mainline-dynamic-stream nginx 1.31, --with-compat --with-stream=dynamic
#   mainline-static         nginx 1.31, --add-module
#   mainline-static-h3      nginx 1.31, --add-module, HTTP/2, HTTP/3, SSL,
#                           --with-stream, ssl_preread
#
# With stream configured, config builds ngx_stream_zk_lock_module beside
# ngx_http_zk_lock_module; without it, the HTTP module alone (the builds
# without --with-stream prove that it needs no stream).  Debian's tree has
# stream's headers but not its sources: --with-stream (static) there, and
# "make modules" builds our two .so files only.  Dynamic builds ("make
# modules") are checked for objs/ngx_http_zk_lock_module.so, for
# objs/ngx_stream_zk_lock_module.so exactly when stream is configured, and
# for an HTTP .so that has no undefined ngx_stream_* symbol; static builds
# (--add-module, "make") for objs/nginx defining ngx_http_zk_lock_module,
# and ngx_stream_zk_lock_module exactly when stream is configured (the
# protocol-free core linked once: a duplicate symbol fails the link).
#
# Usage: t/lib/matrix.sh [name ...]     (default: all but stable-static,
# mainline-dynamic and debian-dynamic-debug, whose cases the others cover)
# MATRIX_DIR overrides t/build/matrix; NGINX_SRC_DIR the directory with the
# nginx-<version>.tar.gz tarballs (default: ../shared/nginx-src beside the
# checkout).  Each build is in MATRIX_DIR/<name>/; the binaries the static
# builds make are MATRIX_DIR/<name>/nginx/objs/nginx.  Prints one line per
# build, then "N passed, N failed".
set -u

top=$(cd "$(dirname "$0")/../.." && pwd)
out=${MATRIX_DIR:-$top/t/build/matrix}
tarballs=${NGINX_SRC_DIR:-$top/../shared/nginx-src}
debian=/usr/share/nginx/src
stable=1.30.4
mainline=1.31.4
jobs=$(nproc 2>/dev/null || echo 2)

# each case once: dynamic and static, with and without stream, each
# version (stable-static and mainline-dynamic repeat cases, and
# debian-dynamic-debug is t/lib/build.sh's build, which the tests use:
# by name only)
all="debian-dynamic stable-dynamic stable-static-stream
     mainline-dynamic-stream mainline-static mainline-static-h3"

# name -> "source configure-arguments"
spec() {
    case $1 in
    debian-dynamic-debug)    echo "debian --with-compat --with-debug" \
                                  "--with-stream" ;;
    debian-dynamic)          echo "debian --with-compat --with-stream" ;;
    stable-dynamic)          echo "$stable --with-compat" ;;
    stable-static)           echo "$stable" ;;
    stable-static-stream)    echo "$stable --with-stream" ;;
    mainline-dynamic)        echo "$mainline --with-compat" ;;
    mainline-dynamic-stream) echo "$mainline --with-compat" \
                                  "--with-stream=dynamic" ;;
    mainline-static)         echo "$mainline" ;;
    mainline-static-h3)      echo "$mainline --with-http_v2_module" \
                                  "--with-http_v3_module" \
                                  "--with-http_ssl_module --with-stream" \
                                  "--with-stream_ssl_preread_module" ;;
    *)                       return 1 ;;
    esac
}

# Unpacks (or copies) the nginx tree of $1 into $2/nginx; prints the
# configure command to run there.
tree() {
    rm -rf "$2/nginx"
    if [ "$1" = debian ]; then
        [ -f "$debian/configure" ] \
            || { echo "$debian not found (apt-get install nginx-dev)"; return 1; }
        cp -a "$debian" "$2/nginx" && echo ./configure
        return
    fi
    [ -f "$tarballs/nginx-$1.tar.gz" ] \
        || { echo "$tarballs/nginx-$1.tar.gz not found"; return 1; }
    tar xzf "$tarballs/nginx-$1.tar.gz" -C "$2" \
        && mv "$2/nginx-$1" "$2/nginx" && echo auto/configure
}

build() {
    name=$1
    set -- $(spec "$name") || { echo "$name: unknown build" >&2; return 1; }
    src=$1; shift
    dir=$out/$name
    mkdir -p "$dir"
    configure=$(tree "$src" "$dir") || { echo "$configure"; return 1; }

    case " $* " in
    *" --with-compat "*) add=--add-dynamic-module target=modules ;;
    *)                   add=--add-module target= ;;
    esac

    (cd "$dir/nginx" && $configure "$@" "$add=$top") > "$dir/configure.log" \
        2>&1 || { tail -5 "$dir/configure.log"; return 1; }
    grep -q -- '-Werror' "$dir/nginx/objs/Makefile" \
        || { echo "nginx's Makefile has no -Werror"; return 1; }

    (cd "$dir/nginx" && make -j"$jobs" -f objs/Makefile $target) \
        > "$dir/make.log" 2>&1 \
        || { grep -E 'error|warning' "$dir/make.log" | head -20; return 1; }

    # -Werror stops at the first warning; this also catches those that
    # nginx's flags do not make fatal
    if grep -E 'warning:' "$dir/make.log" | head -20 | grep .; then
        return 1
    fi

    case " $* " in
    *" --with-stream "* | *" --with-stream=dynamic "*) stream=yes ;;
    *)                                                 stream=no ;;
    esac
    check "$dir/nginx/objs" "$target" "$stream"
}

# Checks that objs/ ($1) has what the build ($2: "modules" or empty for
# nginx) should have made, with ngx_stream_zk_lock_module exactly when
# stream is configured ($3: yes or no).
check() {
    objs=$1 target=$2 stream=$3
    if [ "$target" = modules ]; then
        [ -f "$objs/ngx_http_zk_lock_module.so" ] \
            || { echo "no objs/ngx_http_zk_lock_module.so"; return 1; }
        if [ "$stream" = yes ]; then
            [ -f "$objs/ngx_stream_zk_lock_module.so" ] \
                || { echo "stream configured, but no" \
                          "objs/ngx_stream_zk_lock_module.so"; return 1; }
        elif [ -e "$objs/ngx_stream_zk_lock_module.so" ]; then
            echo "no stream configured, but" \
                 "objs/ngx_stream_zk_lock_module.so built"
            return 1
        fi
        # the HTTP module loads into an nginx without stream
        undef=$(nm -D --undefined-only "$objs/ngx_http_zk_lock_module.so" \
            | grep -w 'ngx_stream_[a-z_0-9]*') || true
        [ -z "$undef" ] || { echo "ngx_http_zk_lock_module.so needs stream:"
                             echo "$undef"; return 1; }
        return 0
    fi

    [ -x "$objs/nginx" ] || { echo "no objs/nginx"; return 1; }
    # the modules objs/nginx defines (nm -P: "name type value size")
    defined=$(nm -P "$objs/nginx" | awk '$2 ~ /^[DdBb]$/ && \
        ($1 == "ngx_http_zk_lock_module" || $1 == "ngx_stream_zk_lock_module") \
        { print $1 }')
    case $defined in
    *ngx_http_zk_lock_module*) ;;
    *) echo "objs/nginx has no ngx_http_zk_lock_module"; return 1 ;;
    esac
    case $stream,$defined in
    yes,*ngx_stream_zk_lock_module*) ;;
    yes,*) echo "stream configured, but objs/nginx has no" \
                "ngx_stream_zk_lock_module"; return 1 ;;
    no,*ngx_stream_zk_lock_module*) echo "no stream configured, but objs/nginx" \
                "has ngx_stream_zk_lock_module"; return 1 ;;
    esac
    return 0
}

names=${*:-$all}
passed=0 failed=0

for name in $names; do
    start=$(date +%s)
    msg=$(build "$name" 2>&1)
    rc=$?
    secs=$(( $(date +%s) - start ))
    if [ $rc -eq 0 ]; then
        passed=$((passed + 1))
        echo "ok   $name (${secs}s, 0 warnings)"
    else
        failed=$((failed + 1))
        echo "FAIL $name (${secs}s)"
        echo "$msg" | sed 's/^/     /'
    fi
done

echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
