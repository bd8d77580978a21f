#!/usr/bin/env bash
# Tests of the pin guard (scripts/lib-pins.sh, pins_guard): a re-pin from a dirty tree is
# refused and names what differs; BERM_ALLOW_DIRTY_PINS=1 builds an experiment but never writes
# the pins nor installs the image. Run by scripts/test after the x86_64 rootfs is built: the
# checks below reuse its cached binaries (no cargo build) and take seconds. Prints
# "N passed, N failed".
#
#   scripts/lib/pins-test.sh          the guard's rules in a scratch repository, then the real
#                                     scripts/build-rootfs.sh in this checkout
#   scripts/lib/pins-test.sh --unit   the rules only (no build)
#
# In this checkout it plants one untracked file (init/.berm-pins-test) for a refusal that comes
# before any build, and gives rootfs/manifest.toml another filesystem UUID (a variant image with
# the same binaries) for the time of a few builds; both are put back on exit. It refuses to
# start when rootfs/ or init/ already has uncommitted changes, so it never mixes with a
# developer's.
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root" || exit 2
. scripts/lib-pins.sh
export BERM_CACHE BERM_VM_ARTIFACTS
passed=0 failed=0
ok() { passed=$((passed + 1)); echo "ok   $1"; }
fail() { failed=$((failed + 1)); echo "FAIL $1"; [ -z "${2:-}" ] || printf '%s\n' "$2" | sed 's/^/     /'; }
# check NAME COMMAND...: passes when COMMAND succeeds.
check() { local name=$1; shift; if "$@"; then ok "$name"; else fail "$name"; fi; }
scratch="$(mktemp -d "${TMPDIR:-/tmp}/berm-pins-test.XXXXXX")"
restore=()
cleanup() {
  local file
  for file in ${restore[@]+"${restore[@]}"}; do cp "$scratch/saved/$file" "$root/$file"; done
  rm -f "$root/init/.berm-pins-test"
  rm -rf "$scratch"
}
trap cleanup EXIT

# guard VAR=VALUE... -- PATH...: pins_guard in the scratch repository, in a subshell (die exits);
# prints its messages and "dirty=<list> experiment=<0|1>" when it lets the build go on.
guard() {
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  (cd "$scratch/repo" && env -u BERM_UPDATE_PINS -u BERM_ALLOW_DIRTY_PINS "${envs[@]}" bash -c '
    . "$0"; pins_guard "the test image" "$@"
    echo "dirty=${pins_dirty//$'"'"'\n'"'"'/,} experiment=$pins_experiment"' "$root/scripts/lib-pins.sh" "$@" 2>&1)
}
# expect_guard NAME WANT_STATUS WANT_TEXT VAR=VALUE... -- PATH...
expect_guard() {
  local name=$1 want_status=$2 want_text=$3 out status
  shift 3
  out="$(guard "$@")"
  status=$?
  if [ "$want_status" = ok ] && [ "$status" = 0 ] && grep -qF -- "$want_text" <<<"$out"; then ok "$name"
  elif [ "$want_status" = refused ] && [ "$status" != 0 ] && grep -qF -- "$want_text" <<<"$out"; then ok "$name"
  else fail "$name (want $want_status with \"$want_text\", got status $status)" "$out"; fi
}

# 1. The rules, in a scratch repository shaped like this one.
mkdir -p "$scratch/repo/init/src" "$scratch/repo/rootfs" "$scratch/saved"
(
  cd "$scratch/repo" || exit 2
  git init -q . && git config user.email test@berm.invalid && git config user.name test
  echo 'fn main() {}' >init/src/main.rs
  printf '[image]\nepoch = 1\n\n[x86_64.image]\nsha256 = "aa"\nsize = 1\n' >rootfs/manifest.toml
  echo 'bin /sbin/berm-init 0755 berm-init berm-init' >rootfs/contents.txt
  echo unrelated >README.md
  git add -A && git commit -qm initial
)
inputs=(-- init rootfs/contents.txt rootfs/manifest.toml)
expect_guard "a clean tree may re-pin" ok "dirty= experiment=0" BERM_UPDATE_PINS=1 "${inputs[@]}"
echo 'fn main() { println!("variant"); }' >"$scratch/repo/init/src/main.rs"
expect_guard "a re-pin with a changed source is refused, naming the file" refused "init/src/main.rs" BERM_UPDATE_PINS=1 "${inputs[@]}"
expect_guard "... and says how an experiment builds without pinning" refused "BERM_ALLOW_DIRTY_PINS=1" BERM_UPDATE_PINS=1 "${inputs[@]}"
(cd "$scratch/repo" && git add init/src/main.rs)
expect_guard "a staged change is refused too" refused "init/src/main.rs" BERM_UPDATE_PINS=1 "${inputs[@]}"
(cd "$scratch/repo" && git commit -qm variant)
expect_guard "once committed, the re-pin goes on" ok "dirty= experiment=0" BERM_UPDATE_PINS=1 "${inputs[@]}"
echo 'pub fn planted() {}' >"$scratch/repo/init/src/extra.rs"
expect_guard "an untracked file in an input crate is refused, named" refused "init/src/extra.rs" BERM_UPDATE_PINS=1 "${inputs[@]}"
rm "$scratch/repo/init/src/extra.rs"
echo changed >"$scratch/repo/README.md"
expect_guard "a change outside the inputs does not count" ok "dirty= experiment=0" BERM_UPDATE_PINS=1 "${inputs[@]}"
sed -i 's/sha256 = "aa"/sha256 = "bb"/; s/size = 1$/size = 2/' "$scratch/repo/rootfs/manifest.toml"
expect_guard "a manifest changed only in its written pins (one arch re-pinned) does not count" ok "dirty= experiment=0" BERM_UPDATE_PINS=1 "${inputs[@]}"
sed -i 's/epoch = 1/epoch = 2/' "$scratch/repo/rootfs/manifest.toml"
expect_guard "a manifest changed in its recipe ([image] epoch) is refused" refused "rootfs/manifest.toml" BERM_UPDATE_PINS=1 "${inputs[@]}"
expect_guard "BERM_ALLOW_DIRTY_PINS=1 builds a dirty tree as an experiment" ok "dirty=rootfs/manifest.toml experiment=1" BERM_ALLOW_DIRTY_PINS=1 "${inputs[@]}"
expect_guard "BERM_ALLOW_DIRTY_PINS=1 never writes pins, even with BERM_UPDATE_PINS=1" refused "an experiment never writes pins" BERM_UPDATE_PINS=1 BERM_ALLOW_DIRTY_PINS=1 "${inputs[@]}"
expect_guard "without either switch a dirty tree builds, and a mismatch will name it" ok "dirty=rootfs/manifest.toml experiment=0" "${inputs[@]}"
rm -rf "$scratch/repo/.git"
expect_guard "outside git, a re-pin is refused (clean cannot be shown)" refused "needs a git checkout" BERM_UPDATE_PINS=1 "${inputs[@]}"

if [ "${1:-}" = --unit ]; then
  echo "pins-test: $passed passed, $failed failed"
  [ "$failed" = 0 ]
  exit
fi

# 2. The real scripts/build-rootfs.sh in this checkout, with the binaries its own x86_64 build
# cached before this test (their key is untouched below, so nothing is compiled).
if [ -n "$(git status --porcelain -- rootfs init)" ]; then
  echo "pins-test: rootfs/ or init/ has uncommitted changes; commit or stash them first" >&2
  exit 2
fi
pinned="$(toml_get rootfs/manifest.toml x86_64.image sha256)"
run_rootfs() { env -u BERM_UPDATE_PINS -u BERM_ALLOW_DIRTY_PINS "$@" scripts/build-rootfs.sh --arch x86_64 2>&1; }
# pins_as_before: the manifest's x86_64 pin lines are what they were (nothing was re-pinned).
pin_lines() { grep -E "^($pins_written_keys) = " rootfs/manifest.toml; }
pins_before="$(pin_lines)"
pins_as_before() { [ "$(pin_lines)" = "$pins_before" ]; }

printf 'planted by scripts/lib/pins-test.sh; removed when it ends\n' >init/.berm-pins-test
out="$(run_rootfs BERM_UPDATE_PINS=1)"; status=$?
if [ "$status" != 0 ] && grep -qxF "    init/.berm-pins-test" <<<"$out" && grep -qF "refusing to re-pin" <<<"$out"; then
  ok "build-rootfs.sh: BERM_UPDATE_PINS=1 with an untracked file in init/ is refused, naming it"
else fail "build-rootfs.sh: BERM_UPDATE_PINS=1 with an untracked file in init/ (status $status)" "$out"; fi
if grep -qF "binaries cached" <<<"$out" || grep -qF "building " <<<"$out"; then
  fail "build-rootfs.sh: the refusal came only after the binaries" "$out"
else ok "build-rootfs.sh: the refusal comes before anything is built"; fi
check "build-rootfs.sh: the refused re-pin wrote no pin" pins_as_before
rm -f init/.berm-pins-test

# A variant image: another filesystem UUID gives another digest with the same binaries.
mkdir -p "$scratch/saved/rootfs" && cp rootfs/manifest.toml "$scratch/saved/rootfs/manifest.toml" \
  && restore+=(rootfs/manifest.toml)
toml_set rootfs/manifest.toml image uuid '"6265726d-7069-6e73-2d74-657374000000"'
out="$(run_rootfs)"; status=$?
if [ "$status" != 0 ] && grep -qF "BERM_UPDATE_PINS=1 scripts/build-rootfs.sh --arch x86_64" <<<"$out" \
  && grep -qF "This tree differs from HEAD in inputs" <<<"$out" && grep -qxF "    rootfs/manifest.toml" <<<"$out" \
  && grep -qF "rootfs.erofs" <<<"$out" && grep -qF "<- differs" <<<"$out"; then
  ok "build-rootfs.sh: without a switch the variant fails, naming what differs, the dirty input and the re-pin command"
else fail "build-rootfs.sh: the variant without a switch (status $status)" "$out"; fi
out="$(run_rootfs BERM_ALLOW_DIRTY_PINS=1)"; status=$?
variant="$(sed -n 's#.*--rootfs \(/[^ ]*rootfs\.erofs\).*#\1#p' <<<"$out" | tail -1)"
if [ "$status" = 0 ] && grep -qF "experiment (BERM_ALLOW_DIRTY_PINS=1)" <<<"$out" && [ -f "$variant" ]; then
  ok "build-rootfs.sh: BERM_ALLOW_DIRTY_PINS=1 builds the variant, exits 0 and says where its image is"
else fail "build-rootfs.sh: BERM_ALLOW_DIRTY_PINS=1 with a variant (status $status)" "$out"; fi
check "build-rootfs.sh: the experiment wrote no pin" pins_as_before
if [ -n "$variant" ] && [ "$(sha256_of "$variant")" != "$pinned" ] && [ ! -e "$BERM_VM_ARTIFACTS/rootfs/$(sha256_of "$variant")" ]; then
  ok "build-rootfs.sh: the experiment's image has its own digest and is not in the artifact store"
else fail "build-rootfs.sh: the experiment's image (${variant:-none}) is pinned or was installed" "$out"; fi
out="$(run_rootfs BERM_UPDATE_PINS=1)"; status=$?
if [ "$status" != 0 ] && grep -qxF "    rootfs/manifest.toml" <<<"$out" && pins_as_before; then
  ok "build-rootfs.sh: re-pinning the variant is refused, naming the manifest's changed recipe"
else fail "build-rootfs.sh: re-pinning the variant (status $status)" "$out"; fi
out="$(run_rootfs BERM_UPDATE_PINS=1 BERM_ALLOW_DIRTY_PINS=1)"; status=$?
if [ "$status" != 0 ] && pins_as_before; then ok "build-rootfs.sh: both switches together are refused, the pins untouched"
else fail "build-rootfs.sh: both switches together (status $status)" "$out"; fi
cp "$scratch/saved/rootfs/manifest.toml" rootfs/manifest.toml
restore=()
check "this checkout's rootfs/ and init/ are as they were" test -z "$(git status --porcelain -- rootfs init)"

echo "pins-test: $passed passed, $failed failed"
[ "$failed" = 0 ]
