#!/usr/bin/env bash
# Builds berm's pinned guest kernel for one guest architecture reproducibly from Debian's
# linux-source-6.12 and the committed fragment, caches it by content, compares it with
# kernel/manifest.toml and, when it matches, installs it where berm-vmm looks for it.
#
#   scripts/build-kernel.sh [--arch ARCH]                    build (or reuse the cache), compare, install
#   BERM_UPDATE_PINS=1 scripts/build-kernel.sh [--arch ARCH]  ... and write new pins into the manifest
#                                                            (refused unless every input is committed)
#   BERM_ALLOW_DIRTY_PINS=1 scripts/build-kernel.sh ...       an experiment: a differing kernel is
#                                                            reported, never pinned nor installed
#
# ARCH is x86_64 (the default: an ELF vmlinux, built natively) or aarch64 (a raw arm64 Image,
# cross-compiled with Debian's gcc-aarch64-linux-gnu).
# Cache: $BERM_CACHE/kernel/<content key>/{vmlinux|Image,config,inputs.json,build.log}
# Installed: $BERM_VM_ARTIFACTS/kernel/<sha256>/{vmlinux|Image}
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib-pins.sh
build_script_start "$@"

manifest=kernel/manifest.toml
package="$(toml_get $manifest source package)"
version="$(toml_get $manifest source version)"
tarball="$(toml_get $manifest source tarball)"
tarball_sha="$(toml_get $manifest source tarball_sha256)"
fragment="kernel/$(toml_get $manifest $arch.config fragment)"
fragment_pin="$(toml_get $manifest $arch.config fragment_sha256)"
[ "$fragment" != kernel/ ] || die "$manifest has no [$arch.config] fragment"
# A re-pin is refused when anything that feeds the kernel differs from HEAD (scripts/lib-pins.sh).
pins_guard "the $arch kernel" kernel scripts/build-kernel.sh scripts/lib-pins.sh
case "$arch" in
  x86_64)
    make_args=()
    target_file=vmlinux built_file=vmlinux ;;
  aarch64)
    command -v aarch64-linux-gnu-gcc >/dev/null || die "aarch64-linux-gnu-gcc is missing (apt-get install gcc-aarch64-linux-gnu)"
    make_args=(ARCH=arm64 CROSS_COMPILE=aarch64-linux-gnu-)
    target_file=Image built_file=arch/arm64/boot/Image ;;
esac

# Reproducibility: every value the kernel would otherwise take from the build machine.
export SOURCE_DATE_EPOCH=1767225600                         # 2026-01-01T00:00:00Z
export KBUILD_BUILD_TIMESTAMP="Thu Jan  1 00:00:00 UTC 2026"
export KBUILD_BUILD_USER=berm
export KBUILD_BUILD_HOST=berm
export KBUILD_BUILD_VERSION=1
export LC_ALL=C TZ=UTC
recipe="tinyconfig+fragment+olddefconfig vmlinux; $SOURCE_DATE_EPOCH|$KBUILD_BUILD_TIMESTAMP|$KBUILD_BUILD_USER|$KBUILD_BUILD_HOST|$KBUILD_BUILD_VERSION; recipe 1"
if [ "$arch" != x86_64 ]; then
  # The cross compiler is an input too: name its Debian version in the content key.
  cross="$(dpkg-query -W -f='${Version}' gcc-12-aarch64-linux-gnu 2>/dev/null || aarch64-linux-gnu-gcc -dumpfullversion)"
  recipe="$arch ${make_args[*]} $target_file, gcc $cross; $recipe"
fi

# 1. The inputs must be exactly the pinned ones. When apt cannot give them (Debian's
# security archive keeps only recent versions), say which versions it can give, and the two
# ways on: install the artifacts instead of building them, or move the pin.
installed="$(dpkg-query -W -f='${Status} ${Version}' "$package" 2>/dev/null | sed -n 's/^install ok installed //p' || true)"
if [ "$installed" != "$version" ]; then
  installable="$(apt-cache madison "$package" 2>/dev/null | awk '{print $3}' | paste -sd " " - || true)"
  case " $installable " in
    *" $version "*) how="install it: apt-get install $package=$version" ;;
    *) how="apt can no longer install it (apt-get update first if you have not)" ;;
  esac
  die "kernel/manifest.toml pins Debian's $package $version; ${installed:+this machine has $installed, and }$how.
  Installable here: ${installable:-none (no apt source offers $package)}.
  Without building: berm vm install (fetches the pinned kernel and rootfs by digest; see docs/install.md).
  To move the pin to an installable version: set [source] version and tarball_sha256 in
  $manifest, install that version, run BERM_UPDATE_PINS=1 scripts/build-kernel.sh --arch $arch, and commit."
fi
[ -f "$tarball" ] || die "$tarball is missing although $package $version is installed"
actual_tarball="$(sha256_of "$tarball")"
[ "$actual_tarball" = "$tarball_sha" ] || die "$tarball has sha256 $actual_tarball but the pin is $tarball_sha
  (Debian's package changed under the same version?). Refusing to build an unpinned source."
fragment_sha="$(sha256_of "$fragment")"
if [ "$fragment_sha" != "$fragment_pin" ]; then
  if [ "${BERM_UPDATE_PINS:-0}" = 1 ]; then
    toml_set $manifest $arch.config fragment_sha256 "\"$fragment_sha\""
  elif [ "$pins_experiment" = 1 ]; then
    note "experiment (BERM_ALLOW_DIRTY_PINS=1): $fragment differs from its pin; building it as it is"
  else
    die "$fragment has sha256 $fragment_sha but kernel/manifest.toml pins $fragment_pin.
  After editing the fragment, run BERM_UPDATE_PINS=1 scripts/build-kernel.sh --arch $arch and commit the manifest."
  fi
fi

# The patches berm applies to Debian's source, in order (kernel/patches/README.md says why each
# is there). Their content is part of the key and of the recorded recipe.
patches=(kernel/patches/*.patch)
[ -e "${patches[0]}" ] || patches=()
patch_shas=""
for p in "${patches[@]}"; do patch_shas="$patch_shas ${p##*/}=$(sha256_of "$p")"; done
recipe="$recipe; patches:${patch_shas:- none}"

key="$(printf '%s\n' "$tarball_sha" "$fragment_sha" "$recipe" | sha256sum | cut -c1-32)"
out="$BERM_CACHE/kernel/$key"

# 2. Build unless this exact content was built before.
if [ -f "$out/$target_file" ]; then
  note "cached: $out"
else
  build="$BERM_CACHE/kernel/build"   # a fixed path, so nothing path-dependent can vary
  [ "$arch" = x86_64 ] || build="$build-$arch"
  rm -rf "$build" "$out.tmp"
  mkdir -p "$build" "$out.tmp"
  note "extracting $tarball"
  tar -xJf "$tarball" -C "$build"
  src="$build/$(basename "$tarball" .tar.xz)"
  for p in "${patches[@]}"; do
    note "applying $p"
    patch -d "$src" -p1 --forward --batch --quiet --no-backup-if-mismatch <"$p" >>"$out.tmp/build.log" 2>&1 \
      || die "$p does not apply to $tarball (Debian's source moved?); see $out.tmp/build.log"
  done
  started=$(date +%s)
  (
    cd "$src"
    make -s "${make_args[@]}" tinyconfig
    cat "$root/$fragment" >>.config
    make -s "${make_args[@]}" olddefconfig
  ) >>"$out.tmp/build.log" 2>&1 || die "configuring the kernel failed, see $out.tmp/build.log"

  # olddefconfig drops options whose dependencies are missing without a word
  # (EROFS_FS vanishes without MISC_FILESYSTEMS): every fragment line must survive.
  lost=0
  while IFS= read -r line; do
    case "$line" in
      CONFIG_*=*)
        grep -qxF -- "$line" "$src/.config" || { echo "  lost: $line (now: $(grep -E "^(# )?${line%%=*}[= ]" "$src/.config" || echo absent))" >&2; lost=1; } ;;
      "# CONFIG_"*" is not set")
        opt="${line#\# }"; opt="${opt%% *}"
        if grep -qE "^$opt=" "$src/.config"; then echo "  lost: $line (now: $(grep -E "^$opt=" "$src/.config"))" >&2; lost=1; fi ;;
    esac
  done <"$fragment"
  [ "$lost" = 0 ] || die "fragment lines did not survive olddefconfig (missing dependencies?); fix $fragment"

  note "building $arch $target_file (x86_64: about 190 s on 2 cores; aarch64 cross: longer)"
  (cd "$src" && make -j"$(nproc)" "${make_args[@]}" "$target_file") >>"$out.tmp/build.log" 2>&1 || die "kernel build failed, see $out.tmp/build.log"
  seconds=$(( $(date +%s) - started ))
  # The cache entry must be what the key's fragment builds: one edited while make ran is not
  # cached under it.
  [ "$(sha256_of "$fragment")" = "$fragment_sha" ] \
    || die "$fragment changed while the kernel was built, so the build is not cached; run again once nothing is editing it"
  cp "$src/$built_file" "$out.tmp/$target_file"
  cp "$src/.config" "$out.tmp/config"
  cat >"$out.tmp/inputs.json" <<JSON
{"arch":"$arch","package":"$package","version":"$version","tarball_sha256":"$tarball_sha","fragment_sha256":"$fragment_sha","recipe":"$recipe","config_sha256":"$(sha256_of "$out.tmp/config")","image_sha256":"$(sha256_of "$out.tmp/$target_file")","image_size":$(size_of "$out.tmp/$target_file"),"build_seconds":$seconds,"nproc":$(nproc)}
JSON
  rm -rf "$out"; mv "$out.tmp" "$out"; rm -rf "$build"
  note "built in ${seconds}s: $out"
fi

# 3. Compare with the pins.
config_sha="$(sha256_of "$out/config")"
vmlinux_sha="$(sha256_of "$out/$target_file")"
vmlinux_size="$(size_of "$out/$target_file")"
pin_config="$(toml_get $manifest $arch.config config_sha256)"
pin_sha="$(toml_get $manifest $arch.image sha256)"
pin_size="$(toml_get $manifest $arch.image size)"
if [ "$config_sha" != "$pin_config" ] || [ "$vmlinux_sha" != "$pin_sha" ] || [ "$vmlinux_size" != "$pin_size" ]; then
  listing="  .config  $config_sha (pinned $pin_config)
  $target_file  $vmlinux_sha, $vmlinux_size bytes (pinned $pin_sha, $pin_size bytes)"
  if [ "${BERM_UPDATE_PINS:-0}" = 1 ]; then
    # pins_guard has refused a dirty tree already: these are the committed source's pins.
    toml_set $manifest $arch.config config_sha256 "\"$config_sha\""
    toml_set $manifest $arch.image sha256 "\"$vmlinux_sha\""
    toml_set $manifest $arch.image size "$vmlinux_size"
    note "re-pinned the $arch kernel from $(git rev-parse --short HEAD):
$listing
  rebuild berm-vmm (it compiles the pins in) and commit kernel/manifest.toml"
  elif [ "$pins_experiment" = 1 ]; then
    # An experiment's kernel is neither pinned nor installed into the artifact store.
    note "experiment (BERM_ALLOW_DIRTY_PINS=1): the $arch kernel differs from the pins, which stay as they are:
$listing
  boot it by path: berm-vmm run --arch $arch --kernel $out/$target_file …"
    exit 0
  else
    dirty_note=""
    [ -z "$pins_dirty" ] || dirty_note="
  This tree differs from HEAD in inputs of the kernel (an uncommitted change is part of the build):
$(printf '%s\n' "$pins_dirty" | sed 's/^/    /')"
    die "the rebuilt $arch kernel does not match kernel/manifest.toml:
$listing$dirty_note
  If the change is intended (new fragment or Debian source), commit it, then update the pins with
  BERM_UPDATE_PINS=1 scripts/build-kernel.sh --arch $arch, rebuild berm-vmm and commit the manifest.
  For an experiment that must not touch the pins: BERM_ALLOW_DIRTY_PINS=1 scripts/build-kernel.sh --arch $arch
  If neither, the build is not reproducible on this machine: compare $out/inputs.json."
  fi
fi

# 4. Install where berm-vmm looks for the pinned kernel.
dest="$BERM_VM_ARTIFACTS/kernel/$vmlinux_sha"
if [ ! -f "$dest/$target_file" ] || [ "$(sha256_of "$dest/$target_file")" != "$vmlinux_sha" ]; then
  mkdir -p "$dest"
  cp "$out/$target_file" "$dest/$target_file.tmp" && mv "$dest/$target_file.tmp" "$dest/$target_file"
fi
note "$arch kernel $vmlinux_sha ($vmlinux_size bytes) matches the pin: $dest/$target_file"
