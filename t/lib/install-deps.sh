#!/bin/sh
# Installs, from Debian's apt, what building, the demo and the tests need.
# Run as root (or with sudo).  One list, shared by README.md and .ci/run.
set -e

export DEBIAN_FRONTEND=noninteractive

apt-get update
apt-get install -y --no-install-recommends \
    build-essential \
    nginx nginx-dev \
    libzookeeper-st-dev zookeeper default-jre-headless \
    python3 python3-kazoo \
    libcurator-recipes-java default-jdk-headless \
    perl curl procps
