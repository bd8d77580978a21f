#!/usr/bin/env bash
# Tests of scripts/lib/apt.sh's suite choice over recorded apt outputs (apt-recorded/README.md
# says where each came from). Run by scripts/test; prints "N passed, N failed".
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
. "$here/apt.sh"
recorded="$here/apt-recorded"
passed=0 failed=0
expect() { # expect NAME WANT GOT
  if [ "$2" = "$3" ]; then passed=$((passed + 1)); echo "ok   $1"
  else failed=$((failed + 1)); echo "FAIL $1: want $2, got $3"; fi
}

expect "qemu-utils 10.0 from backports, nothing else: backports" \
  bookworm-backports "$(qemu_suite <"$recorded/dpkg-qemu-backports-utils.txt")"
expect "QEMU 10.0 installed from backports: stays on backports" \
  bookworm-backports "$(qemu_suite <"$recorded/dpkg-qemu-backports-installed.txt")"
expect "bookworm's QEMU 7.2 installed: stays on bookworm (no upgrade forced)" \
  bookworm "$(qemu_suite <"$recorded/dpkg-qemu-bookworm.txt")"
expect "no QEMU package at all: bookworm" \
  bookworm "$(qemu_suite <"$recorded/dpkg-qemu-none.txt")"
expect "a removed package's leftover version does not count" \
  bookworm "$(printf 'qemu-utils 1:10.0.2+ds-2+deb13u1~bpo12+1 deinstall ok config-files\n' | qemu_suite)"

configured() { if backports_configured <"$1"; then echo yes; else echo no; fi; }
expect "policy without a backports source" no "$(configured "$recorded/policy-no-backports.txt")"
expect "policy with the backports source" yes "$(configured "$recorded/policy-backports.txt")"

echo "apt-suite: $passed passed, $failed failed"
[ "$failed" = 0 ]
