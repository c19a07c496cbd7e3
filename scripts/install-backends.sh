#!/usr/bin/env bash
# Installs the servers dlock's tests and benchmarks run against: Redis,
# ZooKeeper (with a Java runtime), PostgreSQL, MariaDB and etcd, and the C compiler
# that `go test -race` needs (cgo). internal/testenv
# starts its own instances of them on free loopback ports, so the services
# the packages would start are kept from starting.
#
#   scripts/install-backends.sh             # install what is missing (fast no-op when all is there)
#   scripts/install-backends.sh --chromium  # also Chromium (the benchmark report test renders HTML)
#   scripts/install-backends.sh --check     # only report what is missing (exit 1 if anything is)
#   scripts/install-backends.sh --force     # run the package install even when nothing is missing
#
# Debian/Ubuntu: apt-get, as root or through sudo, non-interactive.
# macOS: prints the Homebrew command. Elsewhere: fails, saying what to install.
set -euo pipefail

want_chromium=0
check_only=0
force=0
for arg in "$@"; do
	case "$arg" in
	--chromium) want_chromium=1 ;;
	--check) check_only=1 ;;
	--force) force=1 ;;
	-h | --help)
		sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
		exit 0
		;;
	*)
		echo "install-backends: unknown argument: $arg" >&2
		exit 2
		;;
	esac
done

have() { command -v "$1" >/dev/null 2>&1; }
# Binaries may live in sbin directories a non-root PATH lacks.
PATH="$PATH:/usr/sbin:/usr/local/sbin:/sbin"

# missing prints one word per missing piece; testenv looks for the same files.
missing() {
	have redis-server || echo redis-server
	have redis-cli || echo redis-cli
	have java || echo java
	if [ ! -f /usr/share/java/zookeeper.jar ] && [ -z "${ZOOKEEPER_HOME:-}" ] &&
		! ls /opt/homebrew/opt/zookeeper/libexec/lib/*.jar >/dev/null 2>&1 &&
		! ls /usr/local/opt/zookeeper/libexec/lib/*.jar >/dev/null 2>&1; then
		echo zookeeper
	fi
	if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && ! have initdb; then
		echo postgresql
	fi
	if ! have mariadbd && ! have mysqld; then
		echo mariadb
	fi
	have etcd || echo etcd
	if [ "$(uname -s)" = Linux ] && [ "$(id -u)" = 0 ] && ! id postgres >/dev/null 2>&1; then
		echo postgres-user # initdb/postgres refuse to run as root
	fi
	# `go test -race` needs cgo, so a C compiler (a fresh Debian machine with
	# Go from the official tarball has none).
	have gcc || have cc || echo gcc
	if [ "$want_chromium" = 1 ] && ! have chromium && ! have chromium-browser && ! have google-chrome; then
		echo chromium
	fi
}

todo=$(missing | tr '\n' ' ')
if [ -z "$todo" ] && [ "$force" = 0 ]; then
	echo "install-backends: redis, zookeeper, postgresql, mariadb and etcd$([ "$want_chromium" = 1 ] && echo ", chromium") are installed"
	exit 0
fi
echo "install-backends: missing: ${todo:-nothing (--force)}"
if [ "$check_only" = 1 ]; then
	exit 1
fi

case "$(uname -s)" in
Darwin)
	echo "install-backends: on macOS, run:"
	echo "  brew install redis zookeeper postgresql mariadb etcd"
	[ "$want_chromium" = 1 ] && echo "  brew install --cask chromium"
	exit 1
	;;
Linux) ;;
*)
	echo "install-backends: unsupported system $(uname -s): install redis-server, ZooKeeper (and Java), PostgreSQL, MariaDB and etcd yourself" >&2
	exit 1
	;;
esac

if ! have apt-get; then
	echo "install-backends: no apt-get: this script knows Debian and Ubuntu; install redis-server, zookeeper (+ a JRE), postgresql, mariadb-server and etcd-server with your package manager" >&2
	exit 1
fi

SUDO=""
if [ "$(id -u)" != 0 ]; then
	if have sudo; then
		SUDO="sudo"
	else
		echo "install-backends: must run as root (or have sudo) to apt-get install" >&2
		exit 1
	fi
fi

pkgs=(gcc libc6-dev redis-server redis-tools zookeeper default-jre-headless postgresql mariadb-server etcd-server)
if [ "$want_chromium" = 1 ]; then
	pkgs+=(chromium)
fi

# Keep the packages' services from starting (testenv runs its own servers on
# free ports): a policy-rc.d that denies every start, removed afterwards
# unless one was already there.
policy=/usr/sbin/policy-rc.d
own_policy=0
if [ ! -e "$policy" ]; then
	printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
	$SUDO chmod 755 "$policy"
	own_policy=1
fi
cleanup() {
	if [ "$own_policy" = 1 ]; then
		$SUDO rm -f "$policy"
	fi
}
trap cleanup EXIT

export DEBIAN_FRONTEND=noninteractive
apt_install() {
	$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
		-o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
		--no-install-recommends "${pkgs[@]}"
}
# Update the package lists first when they are empty or the install fails
# on stale ones.
if [ -z "$(ls -A /var/lib/apt/lists 2>/dev/null | grep -v -e '^lock$' -e '^partial$' || true)" ]; then
	$SUDO apt-get update -q
fi
if ! apt_install; then
	$SUDO apt-get update -q
	apt_install
fi

# On systemd machines the services may have been enabled and started
# anyway: stop and disable them, they would only hold ports and memory.
if have systemctl && [ -d /run/systemd/system ]; then
	for svc in redis-server zookeeper postgresql mariadb etcd; do
		$SUDO systemctl disable --now "$svc" >/dev/null 2>&1 || true
	done
fi

if [ "$(id -u)" = 0 ] && ! id postgres >/dev/null 2>&1; then
	useradd --system --home-dir /var/lib/postgresql --shell /bin/bash postgres
fi

left=$(missing | tr '\n' ' ')
if [ -n "$left" ]; then
	echo "install-backends: still missing after apt-get: $left" >&2
	exit 1
fi
echo "install-backends: done"
