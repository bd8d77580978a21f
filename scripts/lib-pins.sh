# Shared by scripts/build-kernel.sh and scripts/build-rootfs.sh: reading and updating the
# pins in kernel/manifest.toml and rootfs/manifest.toml, and the cache layout berm-vmm reads.
# Sourced, not run.

# Where builds are cached and where berm-vmm looks for pinned artifacts by default
# (berm-pins: $BERM_VM_ARTIFACTS, else $XDG_CACHE_HOME/berm/vm, else ~/.cache/berm/vm).
BERM_CACHE="${BERM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/berm}"
BERM_VM_ARTIFACTS="${BERM_VM_ARTIFACTS:-$BERM_CACHE/vm}"

die() { echo "error: $*" >&2; exit 1; }
note() { echo "[$(basename "$0")] $*" >&2; }

# toml_get FILE SECTION KEY: the value of KEY in [SECTION] (strings unquoted). Enough for
# the flat manifests this project writes; berm-pins parses them properly.
toml_get() {
  awk -v want_section="$2" -v want_key="$3" '
    /^[[:space:]]*\[/ { gsub(/[][[:space:]]/, ""); section = $0; next }
    section == want_section && $0 ~ "^[[:space:]]*" want_key "[[:space:]]*=" {
      sub(/^[^=]*=[[:space:]]*/, ""); sub(/[[:space:]]+#.*$/, "")
      gsub(/^"|"$/, ""); print; exit
    }' "$1"
}

# toml_set FILE SECTION KEY VALUE: rewrite one key in place (VALUE given as TOML, quoted
# if it is a string). Used only when BERM_UPDATE_PINS=1.
toml_set() {
  local tmp
  tmp="$(mktemp)"
  awk -v want_section="$2" -v want_key="$3" -v value="$4" '
    /^[[:space:]]*\[/ { s = $0; gsub(/[][[:space:]]/, "", s); section = s }
    section == want_section && $0 ~ "^[[:space:]]*" want_key "[[:space:]]*=" {
      print want_key " = " value; next
    }
    { print }' "$1" >"$tmp"
  cat "$tmp" >"$1"
  rm -f "$tmp"
}

sha256_of() { sha256sum "$1" | cut -d' ' -f1; }
size_of() { stat -c %s "$1"; }

# cross_env ARCH: exports what cargo needs to build static musl binaries for an ARCH guest
# on this x86_64 host: for aarch64, Debian's cross gcc drives the link (Rust brings musl's
# crt objects and libc itself) and compiles build scripts' C (wasmtime's helpers.c, which
# needs only stdint.h and stdlib.h's NULL, taken from libc6-dev-arm64-cross). Nothing for
# x86_64.
cross_env() {
  case "$1" in
    aarch64)
      command -v aarch64-linux-gnu-gcc >/dev/null || die "aarch64-linux-gnu-gcc is missing (apt-get install gcc-aarch64-linux-gnu libc6-dev-arm64-cross)"
      export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_MUSL_LINKER=aarch64-linux-gnu-gcc
      export CC_aarch64_unknown_linux_musl=aarch64-linux-gnu-gcc AR_aarch64_unknown_linux_musl=aarch64-linux-gnu-ar ;;
  esac
}

# build_script_start ARGS...: what both build scripts start with, once in the repository
# root: $root (that directory) and $arch (the guest architecture, see parse_arch_arg).
build_script_start() {
  root="$PWD"
  arch="$(parse_arch_arg "$@")"
}

# parse_arch_arg ARGS...: the guest architecture a build script was asked for, from
# `--arch ARCH` (x86_64 or aarch64), else $BERM_ARCH, else x86_64.
parse_arch_arg() {
  local arch="${BERM_ARCH:-x86_64}"
  while [ $# -gt 0 ]; do
    case "$1" in
      --arch) [ $# -ge 2 ] || die "--arch needs a value (x86_64 or aarch64)"; arch="$2"; shift 2 ;;
      --arch=*) arch="${1#--arch=}"; shift ;;
      *) die "unknown argument $1 (usage: $(basename "$0") [--arch x86_64|aarch64])" ;;
    esac
  done
  case "$arch" in
    x86_64|aarch64) echo "$arch" ;;
    *) die "unknown guest architecture $arch (x86_64 or aarch64)" ;;
  esac
}

# A pin is only ever written from a clean, committed tree: what the pins say must be what the
# committed source builds (docs/vm.md, "How the pins are proved"). Each build script that can
# write pins calls pins_guard before it builds anything, with every path that feeds its
# artifact. The two switches:
#   BERM_UPDATE_PINS=1       write new pins when the result differs; refused when any input
#                            differs from HEAD (untracked files included), naming them
#   BERM_ALLOW_DIRTY_PINS=1  an experiment: build from the tree as it is and report the result
#                            when it differs from the pins, but never write them and never
#                            install it into the artifact store (boot it with --rootfs/--kernel)
# pins_guard sets $pins_dirty (the inputs that differ from HEAD, one a line; empty when clean)
# and $pins_experiment (1 under BERM_ALLOW_DIRTY_PINS=1).

# The manifest keys the build scripts write: a manifest whose only changes are these lines is
# a re-pin in progress (one architecture re-pinned, the next one being built), not an input.
pins_written_keys='sha256|size|berm_init_sha256|bermd_sha256|app_policy_sha256|fragment_sha256|config_sha256'

# pins_dirty_inputs PATH...: the paths among PATH (relative to the repository root) that differ
# from HEAD, staged or not, untracked ones included, except a manifest whose changes are
# written pins only. Fails when the tree is not a git checkout.
pins_dirty_inputs() {
  local line file changes others
  git rev-parse --verify -q HEAD >/dev/null 2>&1 || return 1
  git status --porcelain=v1 --untracked-files=all --no-renames -- "$@" | while IFS= read -r line; do
    file="${line:3}"
    case "$file" in
      */manifest.toml)
        if [ "${line:0:2}" != "??" ]; then
          changes="$(git diff -U0 HEAD -- "$file" | grep -E '^[-+]' | grep -vE '^(\+\+\+|---) ' || true)"
          others="$(printf '%s\n' "$changes" | grep -vE "^[-+]($pins_written_keys) = " || true)"
          [ -n "$changes" ] && [ -z "$others" ] && continue
        fi ;;
    esac
    printf '%s\n' "$file"
  done
}

# pins_guard WHAT PATH...: WHAT names the artifact in messages ("the x86_64 rootfs").
pins_guard() {
  local what=$1
  shift
  pins_experiment=0
  [ "${BERM_ALLOW_DIRTY_PINS:-0}" = 1 ] && pins_experiment=1
  if [ "${BERM_UPDATE_PINS:-0}" = 1 ] && [ "$pins_experiment" = 1 ]; then
    die "BERM_UPDATE_PINS=1 and BERM_ALLOW_DIRTY_PINS=1 together: an experiment never writes pins.
  To re-pin, commit the change and run with BERM_UPDATE_PINS=1 alone; to build $what as an
  experiment, run with BERM_ALLOW_DIRTY_PINS=1 alone and boot the result with --rootfs/--kernel."
  fi
  if ! pins_dirty="$(pins_dirty_inputs "$@")"; then
    [ "${BERM_UPDATE_PINS:-0}" != 1 ] || die "BERM_UPDATE_PINS=1 needs a git checkout with a commit: a pin is written only from a clean, committed tree, and outside git that cannot be shown"
    pins_dirty=""
    return 0
  fi
  if [ "${BERM_UPDATE_PINS:-0}" = 1 ] && [ -n "$pins_dirty" ]; then
    die "refusing to re-pin $what from a dirty tree: these inputs differ from HEAD
$(printf '%s\n' "$pins_dirty" | sed 's/^/    /')
  A pin must be what the committed source builds. Commit (or stash) them, then run
  BERM_UPDATE_PINS=1 $(basename "$0") again. For an experiment with a variant binary, build an
  image of its own without touching the pins: BERM_ALLOW_DIRTY_PINS=1 $(basename "$0"), then
  boot it with berm-vmm run --rootfs FILE (or --kernel FILE)."
  fi
  return 0
}
