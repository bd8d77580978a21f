# shellcheck shell=bash
# The two tools deploy/kubernetes is rendered and checked with (tests/e2e/kubernetes.sh,
# docs/kubernetes.md), installed idempotently under $BERM_CACHE/tools. Sourced, not run;
# needs $BERM_CACHE (scripts/lib-pins.sh) and scripts/lib/apt.sh.
#
# kustomize_tool: sets $kubectl to kubectl 1.20.2 from Debian 12's kubernetes-client, whose
#   `kubectl kustomize` is kustomize v2.0.3. The .deb is pinned by version and sha256 and
#   unpacked into tools/kubernetes-client-VERSION/ (`dpkg-deb -x`), not installed: machines of
#   this kind may already hold another package's /usr/bin/kubectl (the Google Cloud SDK's),
#   which dpkg would refuse to overwrite, and the test wants one known renderer whatever
#   kubectl a machine has. No newer kustomize can be had here: Debian 12 packages none, a
#   kustomize release is a download from GitHub, and `go install` needs a Go toolchain that
#   Debian 12 has only at 1.19, older than kustomize v5 needs. The manifests are written for
#   v2.0.3 and every kustomize since (docs/kubernetes.md).
#
# kubernetes_validate_tool: sets $kubernetes_validate to kubernetes-validate from PyPI, with
#   its dependencies pinned, in its own venv keyed by the pinned list
#   (tools/kubernetes-validate-KEY/). It validates against the OpenAPI schemas of the
#   Kubernetes versions it ships (1.37.0 ships 1.x schemas up to 1.37).

kubernetes_client_version=1.20.5+really1.20.2-1.1+deb12u1
kubernetes_client_sha256=087c42dc26c847740043cdaa8b16db666be5591a1da957f822922aa1b677494e
# Every package of the venv, so that a new release of a dependency changes nothing.
kubernetes_validate_requirements="kubernetes-validate==1.37.0
attrs==26.1.0
importlib_resources==7.1.0
jsonschema==4.26.0
jsonschema-specifications==2025.9.1
packaging==26.4
PyYAML==6.0.4
referencing==0.37.0
rpds-py==2026.9.1
typing_extensions==4.16.0"

kustomize_tool() {
  local dir="$BERM_CACHE/tools/kubernetes-client-$kubernetes_client_version" deb got
  kubectl="$dir/usr/bin/kubectl"
  # `.installed` is written last, so an interrupted install is redone rather than trusted.
  [ -f "$dir/.installed" ] && return 0
  command -v dpkg-deb >/dev/null || { echo "kubernetes-tools: dpkg-deb is missing (this needs Debian)" >&2; return 1; }
  echo "kubernetes-tools: unpacking Debian's kubernetes-client $kubernetes_client_version (kubectl 1.20.2, kustomize v2.0.3) into $dir" >&2
  rm -rf "$dir"
  mkdir -p "$dir"
  apt_download "kubernetes-client=$kubernetes_client_version" "$dir" || {
    echo "kubernetes-tools: if Debian has replaced that version, pin the new one here (version and sha256sum of its .deb)" >&2
    return 1
  }
  deb=("$dir"/kubernetes-client_*.deb)
  got=$(sha256sum "${deb[0]}" | cut -d' ' -f1)
  if [ "$got" != "$kubernetes_client_sha256" ]; then
    rm -rf "$dir"
    echo "kubernetes-tools: kubernetes-client $kubernetes_client_version has sha256 $got, but the pin is $kubernetes_client_sha256" >&2
    return 1
  fi
  dpkg-deb -x "${deb[0]}" "$dir"
  rm -f "${deb[0]}"
  "$kubectl" version --client --short 2>/dev/null | grep -q 'v1\.20\.2' || { echo "kubernetes-tools: $kubectl is not kubectl v1.20.2" >&2; return 1; }
  touch "$dir/.installed"
}

kubernetes_validate_tool() {
  local key dir
  key=$(printf '%s\n' "$kubernetes_validate_requirements" | sha256sum | cut -c1-16)
  dir="$BERM_CACHE/tools/kubernetes-validate-$key"
  # shellcheck disable=SC2034 # for the caller
  kubernetes_validate="$dir/bin/kubernetes-validate"
  # shellcheck disable=SC2034 # for the caller: the venv's Python, which has PyYAML
  kubernetes_python="$dir/bin/python"
  [ -f "$dir/.installed" ] && return 0
  command -v python3 >/dev/null || { echo "kubernetes-tools: python3 is missing (apt-get install python3 python3-venv)" >&2; return 1; }
  echo "kubernetes-tools: installing kubernetes-validate ($(head -1 <<<"$kubernetes_validate_requirements")) from PyPI into $dir" >&2
  rm -rf "$dir"
  python3 -m venv "$dir" || { echo "kubernetes-tools: python3 -m venv failed (apt-get install python3-venv)" >&2; return 1; }
  printf '%s\n' "$kubernetes_validate_requirements" >"$dir/requirements.txt"
  "$dir/bin/pip" install --quiet --disable-pip-version-check --no-deps -r "$dir/requirements.txt" \
    || { echo "kubernetes-tools: pip could not install $dir/requirements.txt from PyPI" >&2; return 1; }
  "$dir/bin/pip" check >/dev/null || { "$dir/bin/pip" check >&2; return 1; }
  touch "$dir/.installed"
}
