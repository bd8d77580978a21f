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
