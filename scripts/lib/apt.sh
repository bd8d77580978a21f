# Debian packages for the setup scripts, sourced (not run): what is missing, which suite QEMU
# must come from, and one install that prints apt's own reason when apt refuses.
#
# Why the suite matters: a Debian 12 image may already carry qemu-utils 10.0 from
# bookworm-backports, whose `Breaks: qemu-system-common (< 1:8.0+dfsg-5~)` makes apt refuse
# bookworm's qemu-system 7.2. So QEMU is installed from the suite the QEMU already on the
# machine came from, and nothing the user has is ever downgraded.

# The release this file knows how to choose a suite for.
apt_release=bookworm
apt_backports="$apt_release-backports"

# apt_missing PACKAGE...: prints, space-separated, the packages dpkg does not have installed.
apt_missing() {
  local p out=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || out+=("$p")
  done
  echo "${out[*]}"
}

# qemu_suite: reads `dpkg-query -W -f='${Package} ${Version} ${Status}\n' 'qemu*'` on stdin and
# prints the suite QEMU must be installed from: $apt_backports when any installed QEMU package
# is newer than the 7.2 bookworm ships (only backports has such a version, and anything older
# would be a downgrade that apt refuses), else $apt_release. Pure, so that tests can feed it
# recorded outputs (scripts/lib/apt-test.sh).
qemu_suite() {
  local package version status suite=$apt_release
  while read -r package version status; do
    case "$status" in *"install ok installed"*) ;; *) continue ;; esac
    [ -n "$version" ] || continue
    if dpkg --compare-versions "$version" ge "1:8.0~"; then suite=$apt_backports; fi
  done
  echo "$suite"
}

# backports_configured: reads `apt-cache policy` on stdin; true when some source serves the
# backports suite.
backports_configured() {
  grep -qE "(a|n)=$apt_backports(,|$)| $apt_backports/main " 
}

# apt_sudo: how to run apt as root here.
apt_sudo() { [ "$(id -u)" = 0 ] || echo sudo; }

apt_updated=0
# apt_update: `apt-get update` once per script run.
apt_update() {
  [ "$apt_updated" = 1 ] && return 0
  $(apt_sudo) apt-get update -qq
  apt_updated=1
}

# ensure_backports: adds Debian's bookworm-backports source when no source serves it, and
# says so (it changes the machine's apt configuration, once).
ensure_backports() {
  apt-cache policy 2>/dev/null | backports_configured && return 0
  local file=/etc/apt/sources.list.d/berm-$apt_backports.sources
  echo "[setup] QEMU on this machine comes from $apt_backports, which apt has no source for:" >&2
  echo "[setup] adding $file (Debian's own archive, main only; nothing else is taken from it unless asked)" >&2
  printf 'Types: deb\nURIs: http://deb.debian.org/debian\nSuites: %s\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
    "$apt_backports" | $(apt_sudo) tee "$file" >/dev/null
  apt_updated=0
  apt_update
}

# apt_install [-t SUITE] PACKAGE...: installs the packages; when apt refuses, prints apt's own
# reason and the command to run by hand, and fails.
apt_install() {
  local target=()
  if [ "${1:-}" = -t ]; then target=(-t "$2"); shift 2; fi
  [ $# -gt 0 ] || return 0
  apt_update
  local log
  log="$(mktemp)"
  echo "[setup] installing${target[*]:+ from ${target[1]}}: $*" >&2
  if ! $(apt_sudo) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${target[@]}" "$@" >"$log" 2>&1; then
    echo "error: apt refused to install $*. apt said:" >&2
    grep -vE '^(Reading|Building|Selecting|Preparing|Unpacking|Setting up|Processing)' "$log" | sed 's/^/  | /' >&2
    echo "  To see what apt would do, run: apt-get install -s ${target[*]} $*" >&2
    echo "  then install them by hand (apt-get install ${target[*]} $*) and run this script again." >&2
    rm -f "$log"
    return 1
  fi
  rm -f "$log"
}

# Servers Debian's packages start the moment they are installed, wherever no
# /usr/sbin/policy-rc.d forbids it (a container image usually has one that does; a fresh VM
# has none): nginx on port 80, and PostgreSQL's default cluster (15/main) on port 5432. The
# tests start private servers of their own and need neither.
apt_started_services="nginx postgresql"

# service_running SERVICE: true when the init system (systemd or the init.d scripts) says
# SERVICE runs; false when it is stopped or unknown.
service_running() { /usr/sbin/service "$1" status >/dev/null 2>&1; }

# apt_install_stopped PACKAGE...: apt_install, then stops each of $apt_started_services that
# the install started (running after it, not before it), and says so. A server that ran
# before is left running. The packages still enable their services at boot, as Debian does.
apt_install_stopped() {
  [ $# -gt 0 ] || return 0
  local service idle=()
  for service in $apt_started_services; do
    service_running "$service" || idle+=("$service")
  done
  apt_install "$@" || return 1
  for service in "${idle[@]}"; do
    service_running "$service" || continue
    echo "[setup] stopping $service, which its package started on install (the tests run their own)" >&2
    $(apt_sudo) /usr/sbin/service "$service" stop >/dev/null || { echo "error: could not stop $service" >&2; return 1; }
  done
}

# install_qemu PACKAGE...: installs the missing QEMU packages from the suite qemu_suite chooses.
install_qemu() {
  local missing suite
  missing="$(apt_missing "$@")"
  [ -n "$missing" ] || return 0
  suite="$(dpkg-query -W -f='${Package} ${Version} ${Status}\n' 'qemu*' 2>/dev/null | qemu_suite)"
  if [ "$suite" = "$apt_backports" ]; then
    ensure_backports
    # shellcheck disable=SC2086 # a list of package names
    apt_install -t "$apt_backports" $missing
  else
    # shellcheck disable=SC2086
    apt_install $missing
  fi
}

# apt_download PACKAGE=VERSION DIR: downloads that exact .deb into DIR and installs nothing
# (for a tool unpacked into a cache, beside whatever the machine has installed).
apt_download() {
  local package=$1 dir=$2 sandbox=()
  apt_update
  # As root, apt downloads as its sandbox user `_apt`, who cannot write a directory of root's
  # such as DIR; it then downloads as root and warns. Say so up front instead.
  [ "$(id -u)" != 0 ] || sandbox=(-o APT::Sandbox::User=root)
  if ! (cd "$dir" && apt-get download -qq "${sandbox[@]}" "$package" >/dev/null); then
    echo "error: apt could not download $package (apt-cache policy ${package%%=*} lists what Debian serves now)" >&2
    return 1
  fi
}
