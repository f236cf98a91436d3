#!/bin/sh
# Builds the Debian packages libnginx-mod-http-zk-lock_<version>_<arch>.deb
# and libnginx-mod-stream-zk-lock_<version>_<arch>.deb (one source, a
# module per package) with Debian's own tooling for nginx modules
# (nginx-dev's dh-sequence-nginx: the nginx_mod debhelper build system and
# dh_nginx), the way Debian builds its libnginx-mod-* packages:
#
# * the modules are configured against /usr/share/nginx/src with the very
#   flags of Debian's nginx binary (its conf_flags), --with-stream (which
#   conf_flags lack: Debian's tree has stream's headers, and "make modules"
#   builds no stream module of nginx's own) and --add-dynamic-module,
#   built with "make modules", and checked by loading them with nginx -t,
#   after Debian's ngx_stream_module.so;
# * libnginx-mod-http-zk-lock installs
#   /usr/lib/nginx/modules/ngx_http_zk_lock_module.so and
#   /usr/share/nginx/modules-available/mod-http-zk-lock.conf (the
#   load_module line, written by dh_nginx), and its maintainer scripts (also
#   dh_nginx's) enable it with the symlink 50-mod-http-zk-lock.conf in
#   /etc/nginx/modules-enabled/; it needs no stream;
# * libnginx-mod-stream-zk-lock does the same for ngx_stream_zk_lock_module.so
#   (mod-stream-zk-lock.conf, enabled as 70-mod-stream-zk-lock.conf: dh_nginx
#   gives 70 to the libnginx-mod-<layer>-<name> packages other than http-,
#   so that it loads after libnginx-mod-stream's 50-mod-stream.conf), and
#   Depends on libnginx-mod-stream;
# * both Depend on nginx-abi-<version> (the ABI of the nginx they were built
#   against, from nginx-dev) and libzookeeper-st2 (from shlibs: each .so
#   carries the core);
# * the HTTP package's examples are conf-examples/*.conf and the monitoring
#   kit conf-examples/prometheus/ (in examples/prometheus/), the stream
#   package's conf-examples/stream/*.conf; each has a README.Debian, which
#   says that a module upgrade needs a restart or a binary upgrade (a
#   reload keeps the module already loaded) and where the build shows.
#
# Needs: build-essential debhelper dpkg-dev nginx-dev libzookeeper-st-dev
# libnginx-mod-stream (in t/lib/packages).  Works as root or not (Rules-Requires-Root: no, so no
# fakeroot).  Everything happens in t/build/deb (BUILD_DIR overrides t/build),
# wiped first: the sources are copied to t/build/deb/<source>-<version>/,
# debian/ is generated there, the log is t/build/deb/build.log.
#
# Usage: t/lib/deb.sh      (ZK_LOCK_DEB_VERSION=<version> to force one)
# Prints the paths of the .debs, one a line, the stream package's first and
# the HTTP package's last (so "| tail -n 1" is the HTTP module's); progress
# on stderr.
set -eu

top=$(cd "$(dirname "$0")/../.." && pwd)
out=${BUILD_DIR:-$top/t/build}/deb
pkg=libnginx-mod-http-zk-lock             # also the source package's name
stream_pkg=libnginx-mod-stream-zk-lock

say() { echo "deb.sh: $*" >&2; }

if [ ! -f /usr/share/nginx/src/configure ] \
    || [ ! -f /usr/share/perl5/Debian/Debhelper/Buildsystem/nginx_mod.pm ]
then
    say "nginx-dev (with dh-sequence-nginx) is missing: apt-get install nginx-dev"
    exit 1
fi
for tool in dpkg-buildpackage dh; do
    command -v "$tool" >/dev/null 2>&1 || {
        say "$tool not found: apt-get install dpkg-dev debhelper"
        exit 1
    }
done

# --- version -------------------------------------------------------------
# A tag vX.Y[.Z] gives X.Y[.Z] (plus +gitN.HASH past it); without tags, the
# module's own version (NGX_ZK_LOCK_VERSION, which CHANGES names) with
# ~gitYYYYMMDD.HHMMSS.HASH from the commit date, so that later commits sort
# higher and all of them before the release; "+dirty" when what is
# packaged differs from the commit (the working tree is what gets built).
# Outside a git checkout: <version>~YYYYMMDD.
# safe.directory: as root, git refuses a checkout owned by another user.
git_() { git -c safe.directory="$top" -C "$top" "$@"; }

# what goes into the package (paths relative to the checkout)
packaged="config src README.md CHANGES LICENSE conf-examples"

base=$(sed -n 's/^#define NGX_ZK_LOCK_VERSION  *"\(.*\)"$/\1/p' \
    "$top/src/ngx_zk_lock_version.h")
[ -n "$base" ] || { say "no NGX_ZK_LOCK_VERSION in the sources"; exit 1; }

version=${ZK_LOCK_DEB_VERSION:-}
if [ -z "$version" ] && command -v git >/dev/null 2>&1 \
    && hash=$(git_ rev-parse --short HEAD 2>/dev/null)
then
    if desc=$(git_ describe --tags --match 'v[0-9]*' 2>/dev/null); then
        # v1.2.3 -> 1.2.3, v1.2.3-4-gabcdef -> 1.2.3+git4.abcdef,
        # v1.3-rc1 -> 1.3~rc1 (sorts before 1.3, as it should)
        version=$(echo "$desc" | sed -e 's/^v//' \
            -e 's/-\([0-9]*\)-g\([0-9a-f]*\)$/+git\1.\2/' -e 's/-/~/g')
        case $version in
            "$base"|"$base"[+~]*) ;;
            *) say "the tag $desc is not the sources' version $base" ;;
        esac
    else
        version=$base~git$(TZ=UTC0 git_ log -1 \
            --date=format-local:%Y%m%d.%H%M%S --format=%cd HEAD).$hash
    fi
    # (status, not diff: an untracked file under src/ counts too)
    # shellcheck disable=SC2086 # $packaged is a list of paths
    if [ -n "$(git_ status --porcelain -- $packaged 2>/dev/null)" ]; then
        version=$version+dirty
    fi
fi
[ -n "$version" ] || version=$base~$(date -u +%Y%m%d)
case $version in
    [0-9]*) ;;
    *) say "bad version '$version' (must start with a digit)"; exit 1 ;;
esac
# a native package: no Debian revision, so no "-" in the version
case $version in
    *[!0-9A-Za-z.+~]*) say "bad version '$version' (allowed: 0-9A-Za-z.+~)"
                       exit 1 ;;
esac

# the build identity the modules show beside their version (see config)
export NGX_ZK_LOCK_BUILD=$version

# --- sources ---------------------------------------------------------------
rm -rf "$out"
src=$out/$pkg-$version
mkdir -p "$src/debian/source"
log=$out/build.log
for f in $packaged; do      # word splitting: a list of paths
    cp -a "$top/$f" "$src/"
done

# --- debian/ ---------------------------------------------------------------
# Maintainer: DEBFULLNAME/DEBEMAIL, else the author of the last commit.
name=${DEBFULLNAME:-$(git_ log -1 --format=%an 2>/dev/null || true)}
email=${DEBEMAIL:-$(git_ log -1 --format=%ae 2>/dev/null || true)}
maint="${name:-ngx_http_zk_lock_module authors} <${email:-root@localhost}>"

echo "3.0 (native)" > "$src/debian/source/format"

cat > "$src/debian/control" << EOF
Source: $pkg
Section: httpd
Priority: optional
Maintainer: $maint
Build-Depends: debhelper-compat (= 13),
               dh-sequence-nginx,
               nginx-dev,
               libzookeeper-st-dev,
               libnginx-mod-stream
Standards-Version: 4.6.2
Rules-Requires-Root: no

Package: $pkg
Architecture: any
Depends: \${misc:Depends}, \${shlibs:Depends}
Description: ZooKeeper-backed cluster-wide locks for nginx
 ngx_http_zk_lock_module turns a fleet of nginx servers into one
 cluster-wide gate backed by ZooKeeper: zk_mutex (one request at a time
 across the fleet), zk_semaphore (at most N at a time) and zk_rwlock (many
 readers or one writer), compatible node for node with Apache Curator's
 recipes.
 .
 The module is enabled through /etc/nginx/modules-enabled/; example
 configurations are in /usr/share/doc/$pkg/examples/, and a
 monitoring kit (Prometheus scrape job, alerting rules and their tests,
 Grafana dashboard) in its prometheus/ directory.

Package: $stream_pkg
Architecture: any
Depends: libnginx-mod-stream, \${misc:Depends}, \${shlibs:Depends}
Description: ZooKeeper-backed cluster-wide locks for nginx (stream)
 ngx_stream_zk_lock_module brings the locks of ngx_http_zk_lock_module to
 nginx's stream (TCP) servers: zk_mutex, zk_semaphore and
 zk_rwlock, compatible node for node with Apache Curator's recipes, with a
 connection waiting until it holds its locks and holding them for its life.
 .
 The module is enabled through /etc/nginx/modules-enabled/, after
 libnginx-mod-stream's; example configurations are in
 /usr/share/doc/$stream_pkg/examples/.
EOF

# dh-sequence-nginx (Build-Depends) adds dh_nginx after dh_install and
# selects the nginx_mod build system for every dh_auto_* step.  Its test
# step loads every .so built with nginx -t, after the modules named as
# arguments (from /usr/lib/nginx/modules): Debian's stream module first.
# (The sequence's --buildsystem=nginx_mod is not passed to overrides.)
cat > "$src/debian/rules" << 'EOF'
#!/usr/bin/make -f

# hardening as Debian's own nginx module packages
export DEB_BUILD_MAINT_OPTIONS = hardening=+all

%:
	dh $@

override_dh_auto_configure:
	dh_auto_configure --buildsystem=nginx_mod -- --with-stream

override_dh_auto_test:
	dh_auto_test --buildsystem=nginx_mod -- ngx_stream_module.so
EOF
chmod 755 "$src/debian/rules"

# Two packages: nginx_mod's install step puts the .so files into debian/tmp,
# and dh_install takes each to its package.  No debian/<package>.nginx: for
# a package named libnginx-mod-<name>, dh_nginx finds
# debian/<package>/usr/lib/nginx/modules/ngx_<name with _>_module.so,
# writes modules-available/mod-<name>.conf with its load_module line, adds
# nginx-abi-* to misc:Depends and the maintainer scripts that link
# modules-enabled/<50 or 70>-mod-<name>.conf to it.
echo usr/lib/nginx/modules/ngx_http_zk_lock_module.so > "$src/debian/$pkg.install"
echo usr/lib/nginx/modules/ngx_stream_zk_lock_module.so \
    > "$src/debian/$stream_pkg.install"
printf '%s\n' "conf-examples/*.conf" conf-examples/prometheus \
    > "$src/debian/$pkg.examples"
echo "conf-examples/stream/*.conf" > "$src/debian/$stream_pkg.examples"
printf '%s\n' README.md CHANGES > "$src/debian/$pkg.docs"
printf '%s\n' README.md CHANGES > "$src/debian/$stream_pkg.docs"

# README.Debian of each package (dh_installdocs; under 4 kB, so not
# compressed): the upgrade that a reload is not, and how to tell the build.
# $1: the package, $2: what it holds, $3: a paragraph on where to look.
readme_debian() {
    cat << EOF
$1 for Debian
$(echo "$1 for Debian" | sed 's/./=/g')

$2
It is enabled through /etc/nginx/modules-enabled/; examples are in
/usr/share/doc/$1/examples/.

$3

Upgrading the module
--------------------

A reload does not load an upgraded module. After this package is upgraded,
"systemctl reload nginx" (and the reload that the package's scripts
trigger) starts new workers that still run the module loaded before:
nginx opens the same path again with dlopen(), which returns the copy
already loaded in the master process. To run the new module, restart nginx
("systemctl restart nginx") or upgrade its binary on the fly (SIGUSR2 to
the master, then SIGQUIT to the old master once the new one runs; nginx's
"Upgrading Executable on the Fly").

Which build runs
----------------

This package's build is "$version"
(module version $base). Each nginx worker shows the build it runs:

 * at its start, in the error log, at the level notice (raise error_log's
   level to notice to see it; Debian's default is error):
       zk_lock $base (build $version), zk_session_timeout ...
 * on the status page (zk_lock_status_page): "build" in the JSON and in
   the fleet view;
 * in the Prometheus output:
       zk_lock_build_info{version="$base",build="$version"} 1

A fleet that runs two builds for an hour (some instances only reloaded)
raises ZkLockMixedVersions in the monitoring kit's rules.yml.

 -- $maint  $(date -R)
EOF
}
readme_debian "$pkg" \
    "ngx_http_zk_lock_module: ZooKeeper-backed cluster-wide locks for nginx." \
    "The monitoring kit is in examples/prometheus/: scrape.yml (a Prometheus
scrape job, with the nginx location it scrapes), rules.yml (alerting and
recording rules; its comments say how to give a lock path thresholds of
its own), rules.test.yml (their tests: promtool test rules rules.test.yml)
and grafana-dashboard.json." > "$src/debian/$pkg.README.Debian"
readme_debian "$stream_pkg" \
    "ngx_stream_zk_lock_module: the locks of ngx_http_zk_lock_module for
nginx's stream (TCP) servers." \
    "Its locks show on the status page of the HTTP module (package
$pkg), with the label layer=\"stream\" in the Prometheus
output." > "$src/debian/$stream_pkg.README.Debian"

{
    cat << EOF
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: ngx_http_zk_lock_module

Files: *
Copyright: 2026 ngx_http_zk_lock_module authors
License: BSD-2-Clause

License: BSD-2-Clause
EOF
    # the text of LICENSE after its copyright lines, as the format wants it
    sed -e '1,/^$/d' -e 's/^$/./' -e 's/^/ /' "$top/LICENSE"
} > "$src/debian/copyright"

cat > "$src/debian/changelog" << EOF
$pkg ($version) unstable; urgency=medium

  * Package built from the ngx_http_zk_lock_module checkout by t/lib/deb.sh.

 -- $maint  $(date -R)
EOF

# --- build -----------------------------------------------------------------
say "building $pkg and $stream_pkg $version in $src (log: $log)"
arch=$(dpkg-architecture -qDEB_HOST_ARCH)
deb=$out/${pkg}_${version}_$arch.deb
stream_deb=$out/${stream_pkg}_${version}_$arch.deb
# -b: binary only (no source package); -us -uc: unsigned.
if ! (cd "$src" && dpkg-buildpackage -us -uc -b) > "$log" 2>&1; then
    say "dpkg-buildpackage failed; the end of $log:"
    tail -30 "$log" >&2
    exit 1
fi
for f in "$stream_deb" "$deb"; do
    if [ ! -f "$f" ]; then
        say "dpkg-buildpackage succeeded but $f is missing"
        exit 1
    fi
done
for f in "$stream_deb" "$deb"; do
    say "built $(dpkg-deb -f "$f" Package Version Depends | tr '\n' ' ')"
done
# the HTTP package's last: callers take it with tail -n 1
echo "$stream_deb"
echo "$deb"
