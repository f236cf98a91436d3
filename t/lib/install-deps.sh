#!/bin/sh
# Installs, from Debian's apt, what building, the demo and the tests need
# (the list is t/lib/packages, which .ci/run installs too).  Run as root,
# or as a user who may sudo: it asks sudo itself then.
set -e

if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || {
        echo "install-deps.sh: run it as root (sudo is not installed)" >&2
        exit 1
    }
    exec sudo "$0" "$@"
fi

export DEBIAN_FRONTEND=noninteractive

apt-get update
apt-get install -y --no-install-recommends \
    $(cat "$(dirname "$0")/packages")
