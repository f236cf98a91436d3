#!/bin/sh
# Installs, from Debian's apt, what building, the demo and the tests need
# (the list is t/lib/packages, which .ci/run installs too).  Run as root.
set -e

export DEBIAN_FRONTEND=noninteractive

apt-get update
apt-get install -y --no-install-recommends \
    $(cat "$(dirname "$0")/packages")
