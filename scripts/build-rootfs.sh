#!/usr/bin/env bash
# Builds berm's erofs rootfs for one guest architecture reproducibly from
# rootfs/contents.txt, caches it by content, compares it with rootfs/manifest.toml and, when
# it matches, installs it where berm-vmm looks for it.
#
#   scripts/build-rootfs.sh [--arch ARCH]                    build (or reuse the cache), compare, install
#   BERM_UPDATE_PINS=1 scripts/build-rootfs.sh [--arch ARCH]  ... and write new pins into the manifest
#                                                            (refused unless every input is committed)
#   BERM_ALLOW_DIRTY_PINS=1 scripts/build-rootfs.sh ...       an experiment: a differing image is
#                                                            reported, never pinned nor installed
#
# ARCH is x86_64 (the default) or aarch64 (cross-built with Debian's gcc-aarch64-linux-gnu
# as the linker; the digest of the app policy is printed by the aarch64 berm-init under
# qemu-aarch64-static). Both build into target/rootfs, one subdirectory per target, so the
# host-side build scripts and proc macros they share are built once.
#
# Cache: $BERM_CACHE/rootfs/<content key>/{rootfs.erofs,inputs.json,tree.txt}
# Installed: $BERM_VM_ARTIFACTS/rootfs/<sha256>/rootfs.erofs
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib-pins.sh
. scripts/lib/static-bins.sh
build_script_start "$@"

manifest=rootfs/manifest.toml
target=$arch-unknown-linux-musl
epoch="$(toml_get $manifest image epoch)"
uuid="$(toml_get $manifest image uuid)"
compression="$(toml_get $manifest image compression)"
[ -n "$epoch" ] && [ -n "$uuid" ] && [ -n "$compression" ] || die "$manifest needs [image] epoch, uuid and compression"
fragment="kernel/$(toml_get kernel/manifest.toml $arch.config fragment)"
grep -qx 'CONFIG_EROFS_FS_ZIP=y' "$fragment" || [ "$compression" = none ] \
  || die "$manifest asks for $compression compression but the kernel fragment $fragment lacks CONFIG_EROFS_FS_ZIP=y"
command -v mkfs.erofs >/dev/null || die "mkfs.erofs is missing (apt-get install erofs-utils)"
rustup target list --installed 2>/dev/null | grep -x $target >/dev/null || die "the Rust target $target is missing (rustup target add $target)"
run_guest=()   # how the build host runs a binary built for the guest
linker=""
case "$arch" in
  x86_64)
    command -v musl-gcc >/dev/null || die "musl-gcc is missing (apt-get install musl-tools)" ;;
  aarch64)
    command -v qemu-aarch64-static >/dev/null || die "qemu-aarch64-static is missing (apt-get install qemu-user-static)"
    cross_env aarch64
    linker="linker $(dpkg-query -W -f='${Version}' gcc-12-aarch64-linux-gnu 2>/dev/null || aarch64-linux-gnu-gcc -dumpfullversion)"
    run_guest=(qemu-aarch64-static) ;;
esac

# 1. Binaries: static musl, cached by their inputs (scripts/lib/static-bins.sh). Before any
# build, the pin guard: a re-pin is refused when anything that feeds the image differs from
# HEAD (scripts/lib-pins.sh, pins_guard).
static_bins_inputs rootfs/contents.txt
pins_guard "the $arch rootfs" "${static_bin_paths[@]}" $manifest scripts/build-rootfs.sh
static_bins rootfs/contents.txt

# 2. The tree, exactly as the recipe says.
stage="$(mktemp -d "${TMPDIR:-/tmp}/berm-rootfs.XXXXXX")"
# mktemp makes 0700; the image root must be traversable by the apps' uids.
chmod 0755 "$stage"
trap 'rm -rf "$stage"' EXIT
while read -r kind path mode package binary; do
  case "$kind" in
    dir) mkdir -p "$stage$path"; chmod "$mode" "$stage$path" ;;
    bin) install -D -m "$mode" "$bin_dir/$binary" "$stage$path"
         case "$(file -b "$stage$path")" in
           *"static-pie linked"*|*"statically linked"*) ;;
           *) die "$path is not statically linked" ;;
         esac ;;
    "") ;;
    *) die "rootfs/contents.txt: unknown entry kind $kind" ;;
  esac
done < <(grep -v '^[[:space:]]*#' rootfs/contents.txt)
tree_listing="$(cd "$stage" && find . | sort | while read -r p; do
  if [ -f "$p" ]; then printf '%s %s %s %s\n' "$(stat -c %a "$p")" "$(stat -c %s "$p")" "$(sha256sum "$p" | cut -d' ' -f1)" "${p#.}"
  else p2="${p#.}"; printf '%s dir - %s\n' "$(stat -c %a "$p")" "${p2:-/}"; fi
done)"
mkfs_version="$(mkfs.erofs --help 2>&1 | sed -n 1p)"
options=(-T"$epoch" -U "$uuid" --all-root -x-1)
[ "$compression" = none ] || options=(-z"$compression" "${options[@]}")
key="$(printf '%s\n' "$tree_listing" "$mkfs_version" "${options[*]}" | sha256sum | cut -c1-32)"
out="$BERM_CACHE/rootfs/$key"

# 3. The image (mkfs.erofs with fixed time and UUID; SOURCE_DATE_EPOCH unset so -T wins).
if [ -f "$out/rootfs.erofs" ]; then
  note "cached: $out"
else
  mkdir -p "$out.tmp"
  env -u SOURCE_DATE_EPOCH mkfs.erofs "${options[@]}" "$out.tmp/rootfs.erofs" "$stage" >"$out.tmp/mkfs.log" 2>&1 \
    || die "mkfs.erofs failed, see $out.tmp/mkfs.log"
  printf '%s\n' "$tree_listing" >"$out.tmp/tree.txt"
  cat >"$out.tmp/inputs.json" <<JSON
{"recipe_sha256":"$(sha256_of rootfs/contents.txt)","cargo_lock_sha256":"$(sha256_of Cargo.lock)","rustc":"$(rustc --version)","target":"$target","rustflags":"$(echo "$RUSTFLAGS" | sed "s#$root#<checkout>#g; s#$cargo_home#<cargo-home>#g; s#$rustup_home#<rustup-home>#g")","mkfs_erofs":"$mkfs_version","mkfs_options":"${options[*]}","tree_sha256":"$(printf '%s\n' "$tree_listing" | sha256sum | cut -d' ' -f1)","berm_init_sha256":"$(sha256_of "$stage/sbin/berm-init")","bermd_sha256":"$(sha256_of "$stage/usr/bin/bermd")"}
JSON
  rm -rf "$out"; mv "$out.tmp" "$out"
  note "built: $out"
fi

# 4. Compare with the pins.
sha="$(sha256_of "$out/rootfs.erofs")"
size="$(size_of "$out/rootfs.erofs")"
init_sha="$(sha256_of "$stage/sbin/berm-init")"
bermd_sha="$(sha256_of "$stage/usr/bin/bermd")"
# The static berm-init runs on the build host too (an aarch64 one under qemu-aarch64-static):
# it prints the policy digest apps report, which names this architecture's syscalls.
policy_sha="$("${run_guest[@]}" "$stage/sbin/berm-init" policy-sha256)" || die "$stage/sbin/berm-init policy-sha256 failed"
pin_sha="$(toml_get $manifest $arch.image sha256)"
pin_size="$(toml_get $manifest $arch.image size)"
pin_init="$(toml_get $manifest $arch.contents berm_init_sha256)"
pin_bermd="$(toml_get $manifest $arch.contents bermd_sha256)"
pin_policy="$(toml_get $manifest $arch.contents app_policy_sha256)"
# differs A B: "differs" when A and B are not the same, for the mismatch listing.
differs() { [ "$1" = "$2" ] || echo "  <- differs"; }
if [ "$sha" != "$pin_sha" ] || [ "$size" != "$pin_size" ] || [ "$init_sha" != "$pin_init" ] || [ "$bermd_sha" != "$pin_bermd" ] || [ "$policy_sha" != "$pin_policy" ]; then
  listing="  rootfs.erofs     $sha, $size bytes (pinned $pin_sha, $pin_size bytes)$(differs "$sha $size" "$pin_sha $pin_size")
  /sbin/berm-init  $init_sha (pinned $pin_init)$(differs "$init_sha" "$pin_init")
  /usr/bin/bermd   $bermd_sha (pinned $pin_bermd)$(differs "$bermd_sha" "$pin_bermd")
  app policy       $policy_sha (pinned $pin_policy)$(differs "$policy_sha" "$pin_policy")"
  if [ "${BERM_UPDATE_PINS:-0}" = 1 ]; then
    # pins_guard has refused a dirty tree already: these are the committed source's pins.
    toml_set $manifest $arch.image sha256 "\"$sha\""
    toml_set $manifest $arch.image size "$size"
    toml_set $manifest $arch.contents berm_init_sha256 "\"$init_sha\""
    toml_set $manifest $arch.contents bermd_sha256 "\"$bermd_sha\""
    toml_set $manifest $arch.contents app_policy_sha256 "\"$policy_sha\""
    note "re-pinned the $arch rootfs from $(git rev-parse --short HEAD):
$listing
  the next cargo build compiles it into berm-vmm; commit rootfs/manifest.toml"
  elif [ "$pins_experiment" = 1 ]; then
    # An experiment's image is neither pinned nor installed into the artifact store.
    note "experiment (BERM_ALLOW_DIRTY_PINS=1): the $arch rootfs differs from the pins, which stay as they are:
$listing
  boot it by path: berm-vmm run --arch $arch --rootfs $out/rootfs.erofs …"
    exit 0
  else
    dirty_note=""
    [ -z "$pins_dirty" ] || dirty_note="
  This tree differs from HEAD in inputs of the image (an uncommitted change is part of the build):
$(printf '%s\n' "$pins_dirty" | sed 's/^/    /')"
    die "the rebuilt $arch rootfs does not match rootfs/manifest.toml:
$listing$dirty_note
  If the change is intended (init/, vm-protocol/, service/ or what bermd links, Cargo.lock,
  rootfs/contents.txt or the toolchain changed; moving code counts, see rootfs/README.md),
  commit it, then re-pin with this one command and commit rootfs/manifest.toml:
    BERM_UPDATE_PINS=1 scripts/build-rootfs.sh --arch $arch
  For an experiment that must not touch the pins: BERM_ALLOW_DIRTY_PINS=1 scripts/build-rootfs.sh --arch $arch
  If neither, the build is not reproducible here: compare $out/inputs.json and tree.txt."
  fi
fi

# 5. Install where berm-vmm looks for the pinned rootfs.
dest="$BERM_VM_ARTIFACTS/rootfs/$sha"
if [ ! -f "$dest/rootfs.erofs" ] || [ "$(sha256_of "$dest/rootfs.erofs")" != "$sha" ]; then
  mkdir -p "$dest"
  cp "$out/rootfs.erofs" "$dest/rootfs.erofs.tmp" && mv "$dest/rootfs.erofs.tmp" "$dest/rootfs.erofs"
fi
note "$arch rootfs $sha ($size bytes) matches the pin: $dest/rootfs.erofs"
