# Shared by scripts/build-rootfs.sh and scripts/build-image: the workspace binaries a recipe's
# `bin PATH MODE PACKAGE BINARY` lines name, built static for $target (ARCH-unknown-linux-musl)
# with locked dependencies, no build-machine paths and no debug info, and cached by their
# inputs. Sourced, not run; needs $root, $target, $linker (empty for x86_64) and $epoch.
#
# static_bins RECIPE: builds (or finds cached) every `bin` of RECIPE; sets $bin_dir to the
# directory holding them, and exports the build's flags ($RUSTFLAGS, $SOURCE_DATE_EPOCH, …),
# which the callers record.
static_bins() {
  local recipe=$1 kind path mode package binary dir started crate_dirs bin_key
  local packages=() crates=() binaries=()
  cargo_home="${CARGO_HOME:-$HOME/.cargo}"
  rustup_home="${RUSTUP_HOME:-$HOME/.rustup}"
  # One target dir for every recipe (its own: these flags differ from a dev build's), so the
  # rootfs and the container image share Wasmtime's long release build.
  export CARGO_TARGET_DIR="$root/target/rootfs"
  export RUSTFLAGS="--remap-path-prefix=$root=/berm --remap-path-prefix=$cargo_home=/cargo --remap-path-prefix=$rustup_home=/rustup -C target-feature=+crt-static"
  export CARGO_PROFILE_RELEASE_DEBUG=false CARGO_PROFILE_RELEASE_STRIP=symbols CARGO_INCREMENTAL=0
  export SOURCE_DATE_EPOCH="$epoch" LC_ALL=C TZ=UTC
  while read -r kind path mode package binary; do
    [ "$kind" = bin ] && packages+=(-p "$package" --bin "$binary") && crates+=(-p "$package") && binaries+=("$binary")
  done < <(grep -v '^[[:space:]]*#' "$recipe")
  # The binaries are cached by their inputs — every file of the workspace crates they link,
  # Cargo.lock, the root manifest (profiles), the recipe, the toolchain and the flags — so an
  # unchanged tree skips the long release build of Wasmtime for musl.
  crate_dirs="$(cargo tree --locked --prefix none -e normal --target "$target" "${crates[@]}" 2>/dev/null \
    | sed -n "s#^.*(\($root[^)]*\)).*#\1#p" | sort -u)"
  [ -n "$crate_dirs" ] || die "cargo tree listed no workspace crates for ${packages[*]}"
  bin_key="$( {
    for dir in $crate_dirs; do
      (cd "$dir" && find . -path ./target -prune -o -type f -print | LC_ALL=C sort | xargs -d '\n' sha256sum | sed "s#  \./#  ${dir#$root/}/#")
    done
    sha256sum Cargo.lock Cargo.toml "$recipe"
    rustc -vV
    echo "$target $(echo "$RUSTFLAGS" | sed "s#$root#<checkout>#g; s#$cargo_home#<cargo-home>#g; s#$rustup_home#<rustup-home>#g")"
    [ -z "$linker" ] || echo "$linker"
  } | sha256sum | cut -c1-32)"
  bin_dir="$BERM_CACHE/rootfs-bin/$bin_key"
  if [ -d "$bin_dir" ]; then
    note "binaries cached: $bin_dir"
  else
    note "building ${packages[*]} for $target (release, static; the first build takes a while)"
    started=$(date +%s)
    cargo build --quiet --locked --release --target "$target" "${packages[@]}"
    note "built the $target binaries in $(( $(date +%s) - started ))s"
    mkdir -p "$bin_dir.tmp"
    for binary in "${binaries[@]}"; do cp "$CARGO_TARGET_DIR/$target/release/$binary" "$bin_dir.tmp/"; done
    rm -rf "$bin_dir"; mv "$bin_dir.tmp" "$bin_dir"
  fi
}
