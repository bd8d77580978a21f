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
