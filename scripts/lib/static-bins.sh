# Shared by scripts/build-rootfs.sh and scripts/build-image: the workspace binaries a recipe's
# `bin PATH MODE PACKAGE BINARY` lines name, built static for $target (ARCH-unknown-linux-musl)
# with locked dependencies, no build-machine paths and no debug info, and cached by their
# inputs. Sourced, not run; needs $root, $target, $linker (empty for x86_64) and $epoch.
#
# static_bins_inputs RECIPE: sets $static_bin_paths, the files and directories (relative to
# $root) whose content the binaries are built from: every workspace crate they link, the
# lock file, the root manifest (profiles), the recipe and the scripts that build them. The
# pin guard (pins_guard in scripts/lib-pins.sh) checks exactly these against HEAD.
#
# static_bins RECIPE: builds (or finds cached) every `bin` of RECIPE; sets $bin_dir to the
# directory holding them, and exports the build's flags ($RUSTFLAGS, $SOURCE_DATE_EPOCH, …),
# which the callers record.
static_bins_inputs() {
  local recipe=$1 kind path mode package binary dir
  static_bin_packages=() static_bin_crates=() static_bin_names=()
  while read -r kind path mode package binary; do
    [ "$kind" = bin ] || continue
    static_bin_packages+=(-p "$package" --bin "$binary")
    static_bin_crates+=(-p "$package")
    static_bin_names+=("$binary")
  done < <(grep -v '^[[:space:]]*#' "$recipe")
  [ ${#static_bin_crates[@]} -gt 0 ] || die "$recipe names no binary"
  static_bin_dirs="$(cargo tree --locked --prefix none -e normal --target "$target" "${static_bin_crates[@]}" 2>/dev/null \
    | sed -n "s#^.*(\($root[^)]*\)).*#\1#p" | sort -u)"
  [ -n "$static_bin_dirs" ] || die "cargo tree listed no workspace crates for ${static_bin_packages[*]}"
  static_bin_paths=()
  for dir in $static_bin_dirs; do static_bin_paths+=("${dir#"$root"/}"); done
  static_bin_paths+=(Cargo.lock Cargo.toml rust-toolchain.toml rust-toolchain .cargo "$recipe"
    scripts/lib/static-bins.sh scripts/lib-pins.sh)
}

# static_bins_key RECIPE: the content key of the binaries: every file of the workspace crates
# they link (tracked or not: what cargo would compile), Cargo.lock, the root manifest, the
# recipe, the toolchain and the flags. Needs static_bins_inputs first.
static_bins_key() {
  local recipe=$1 dir
  {
    for dir in $static_bin_dirs; do
      (cd "$dir" && find . -path ./target -prune -o -type f -print | LC_ALL=C sort | xargs -d '\n' sha256sum | sed "s#  \./#  ${dir#"$root"/}/#")
    done
    sha256sum Cargo.lock Cargo.toml "$recipe"
    rustc -vV
    echo "$target $(echo "$RUSTFLAGS" | sed "s#$root#<checkout>#g; s#$cargo_home#<cargo-home>#g; s#$rustup_home#<rustup-home>#g")"
    [ -z "$linker" ] || echo "$linker"
  } | sha256sum | cut -c1-32
}

static_bins() {
  local recipe=$1 started bin_key stamp changed binary
  cargo_home="${CARGO_HOME:-$HOME/.cargo}"
  rustup_home="${RUSTUP_HOME:-$HOME/.rustup}"
  # One target dir for every recipe (its own: these flags differ from a dev build's), so the
  # rootfs and the container image share Wasmtime's long release build.
  export CARGO_TARGET_DIR="$root/target/rootfs"
  export RUSTFLAGS="--remap-path-prefix=$root=/berm --remap-path-prefix=$cargo_home=/cargo --remap-path-prefix=$rustup_home=/rustup -C target-feature=+crt-static"
  export CARGO_PROFILE_RELEASE_DEBUG=false CARGO_PROFILE_RELEASE_STRIP=symbols CARGO_INCREMENTAL=0
  export SOURCE_DATE_EPOCH="$epoch" LC_ALL=C TZ=UTC
  [ -n "${static_bin_dirs:-}" ] || static_bins_inputs "$recipe"
  # Cached by the inputs' content, so an unchanged tree skips the long release build of
  # Wasmtime for musl.
  bin_key="$(static_bins_key "$recipe")"
  bin_dir="$BERM_CACHE/rootfs-bin/$bin_key"
  if [ -d "$bin_dir" ]; then
    note "binaries cached: $bin_dir"
    return
  fi
  note "building ${static_bin_packages[*]} for $target (release, static; the first build takes a while)"
  started=$(date +%s)
  stamp="$(mktemp "${TMPDIR:-/tmp}/berm-static-bins.XXXXXX")"
  cargo build --quiet --locked --release --target "$target" "${static_bin_packages[@]}"
  note "built the $target binaries in $(( $(date +%s) - started ))s"
  # The cache entry must hold what the key's sources build, and nothing else: a file edited
  # (or edited and put back) while cargo ran may have been compiled in its other form. Such a
  # build is not cached under the key; the next run builds again from a quiet tree. (The
  # likeliest way a variant berm-init reached the x86_64 pin before this check: issue 40.)
  # shellcheck disable=SC2086 # the crate directories, one word each
  changed="$(find $static_bin_dirs Cargo.lock Cargo.toml "$recipe" -path "$root/target" -prune -o -newer "$stamp" -type f -print | head -5 || true)"
  rm -f "$stamp"
  [ -z "$changed" ] && [ "$(static_bins_key "$recipe")" = "$bin_key" ] \
    || die "the sources changed while the $target binaries were built, so they are not cached:
$changed
  Run the build again once nothing is editing the tree."
  mkdir -p "$bin_dir.tmp"
  for binary in "${static_bin_names[@]}"; do cp "$CARGO_TARGET_DIR/$target/release/$binary" "$bin_dir.tmp/"; done
  rm -rf "$bin_dir"; mv "$bin_dir.tmp" "$bin_dir"
}
