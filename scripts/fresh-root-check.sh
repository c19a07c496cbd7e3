#!/usr/bin/env bash
# fresh-root-check.sh: the honest test of the README's promise that a fresh
# Debian machine with only Go, git and make runs `make test` and `make bench`
# as root. A maintainer runs it before a release (it takes many minutes; it is
# not part of `make test`).
#
#   scripts/fresh-root-check.sh [REPO]      (as root, on Debian/Ubuntu)
#
# It builds a minimal Debian root with debootstrap (Debian's package; it is
# installed when missing), copies this machine's Go into it (as if unpacked
# from the official tarball), clones REPO (default: this checkout's
# committed HEAD) and runs the two commands in a chroot with /dev, /proc and
# /sys bind-mounted and a tmpfs of its own on /dev/shm (PostgreSQL needs it).
# Nothing else of this machine is visible there: the project's own scripts
# must install the servers and the C compiler `-race` needs.
#
# Environment: SUITE (default: this machine's Debian codename, else
# bookworm), MIRROR (default: the first deb URI of this machine's apt
# sources), ROOT (default /var/tmp/dlock-fresh-root; removed first),
# BENCHFLAGS (default -quick), KEEP=1 keeps the root afterwards.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
repo=${1:-$here}
root=${ROOT:-/var/tmp/dlock-fresh-root}
benchflags=${BENCHFLAGS:--quick}

[ "$(id -u)" = 0 ] || { echo "fresh-root-check: run as root" >&2; exit 2; }

suite=${SUITE:-}
if [ -z "$suite" ] && [ -r /etc/os-release ]; then
	suite=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
fi
suite=${suite:-bookworm}
mirror=${MIRROR:-}
if [ -z "$mirror" ]; then
	mirror=$(grep -hoE '^(URIs:|deb) +https?://[^ ]+' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null | grep -v security | head -1 | awk '{print $2}' || true)
fi
mirror=${mirror:-http://deb.debian.org/debian}

goroot=$(go env GOROOT)
[ -x "$goroot/bin/go" ] || { echo "fresh-root-check: no Go on this machine to copy" >&2; exit 2; }

if ! command -v debootstrap >/dev/null; then
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
fi

mounts=()
cleanup() {
	for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do umount -l "${mounts[i]}" 2>/dev/null || true; done
	if [ "${KEEP:-0}" != 1 ]; then rm -rf "$root"; fi
}
trap cleanup EXIT

step() { printf '\n== %s (%s)\n' "$*" "$(date +%T)"; }
t0=$(date +%s)

step "debootstrap $suite from $mirror into $root"
rm -rf "$root"
debootstrap --variant=minbase --include=git,make,ca-certificates "$suite" "$root" "$mirror" >"$root.debootstrap.log" 2>&1 ||
	{ tail -20 "$root.debootstrap.log" >&2; exit 1; }
cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
# The local certificate authorities this machine trusts (a TLS-inspecting
# proxy's, say): the fresh root reaches the same network through them.
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
	mkdir -p "$root/usr/local/share/ca-certificates"
	cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
	chroot "$root" update-ca-certificates >/dev/null 2>&1 || true
fi
# The same package sources as this machine (the mirror it can reach).
cp -a /etc/apt/sources.list.d/. "$root/etc/apt/sources.list.d/" 2>/dev/null || true
find "$root/etc/apt/sources.list.d" -name '*.disabled*' -delete 2>/dev/null || true

step "Go $("$goroot/bin/go" env GOVERSION) into /usr/local/go, as the official tarball puts it"
mkdir -p "$root/usr/local"
cp -a "$goroot" "$root/usr/local/go"

step "clone $repo"
git clone -q "$repo" "$root/root/dlock"

for m in dev proc sys; do
	mount --rbind "/$m" "$root/$m"
	mounts+=("$root/$m")
done
mount -t tmpfs -o size=1g tmpfs "$root/dev/shm"
mounts+=("$root/dev/shm")

run() {
	chroot "$root" /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 \
		PATH=/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
		${GOPROXY:+GOPROXY=$GOPROXY} ${GONOSUMDB:+GONOSUMDB=$GONOSUMDB} ${GOSUMDB:+GOSUMDB=$GOSUMDB} \
		bash -c "cd /root/dlock && $*"
}

step "which cc in the fresh root (none expected before make test)"
run 'command -v cc gcc || echo "no C compiler"'

# must runs one of the README's commands in the fresh root, with its log
# in $root.LOG.log; on failure it shows the log's tail and keeps the root.
must() {
	local log="$root.$1.log"
	step "$2"
	if ! run "$2" >"$log" 2>&1; then
		tail -60 "$log"
		echo "fresh-root-check: $2 FAILED (log: $log)" >&2
		KEEP=1
		exit 1
	fi
	tail -40 "$log"
}

t1=$(date +%s)
must make-test "make test"
t2=$(date +%s)
must make-bench "make bench BENCHFLAGS='$benchflags'"
t3=$(date +%s)

step "passed: make test $((t2 - t1))s, make bench $((t3 - t2))s, all $((t3 - t0))s"
