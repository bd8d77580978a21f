#!/usr/bin/env bash
# bermd's Kubernetes manifests (deploy/kubernetes, docs/kubernetes.md), where no Kubernetes
# control plane runs:
# - the base and the kata and single-replica overlays render with kustomize (kubectl 1.20.2's
#   v2.0.3, scripts/lib/kubernetes-tools.sh), and every object validates, strictly (no
#   unknown field), against the schemas of Kubernetes $k8s_version with kubernetes-validate;
#   a misspelt field and a mistyped one are refused, so the validation can fail;
# - what the issue asks of them holds: non-root, read-only root, every capability dropped,
#   seccomp RuntimeDefault, probes on /healthz and /readyz, ClientIP affinity, HPA v2, PDB
#   v1, NetworkPolicy, a RuntimeClass in kata, one replica in single-replica;
# - the app overlay docs/kubernetes.md shows (its files taken from the page), with the echo
#   app folder as a ConfigMap and the token as a Secret, renders and validates; its
#   ConfigMap, Secret and Deployment run under `podman kube play` (Debian 12's podman 4.3,
#   which runs no Service, HPA, PDB, NetworkPolicy or RuntimeClass: those are a cluster's),
#   with the image of scripts/build-image; /readyz says ready, /mcp wants the token, and the
#   Python MCP SDK calls echo_echo over HTTP with it; then `podman kube down`.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/scripts/lib-pins.sh"
. "$root/scripts/lib/apt.sh"
. "$root/scripts/lib/kubernetes-tools.sh"
python=$BERM_CACHE/venv/bin/python
# The Kubernetes version the manifests are validated against: a current release of the
# ones kubernetes-validate ships schemas for.
k8s_version=1.35.0
kube=$root/deploy/kubernetes
app=$root/target/apps/echo
[ -f "$app/berm.toml" ] || { echo "kubernetes: $app is missing: run scripts/build-apps.sh" >&2; exit 2; }
[ -x "$python" ] || { echo "kubernetes: $python is missing: run scripts/setup-python-client" >&2; exit 2; }
# catatonit: the pause process of the pod's infra container, which podman builds its local
# pause image from (Debian's podman only recommends it).
# shellcheck disable=SC2046 # a list of package names
apt_install $(apt_missing podman skopeo runc catatonit)
kustomize_tool
kubernetes_validate_tool

work=$(mktemp -d)
name=e2e$$
play=$work/play.yaml
cleanup() {
  [ ! -f "$play" ] || podman kube down "$play" >/dev/null 2>&1 || true
  # kube play keeps a Secret as a podman secret, and each ConfigMap and Secret volume as a
  # named volume; kube down leaves both.
  podman secret ls --format '{{.Name}}' 2>/dev/null | grep "^$name-" | xargs -r podman secret rm >/dev/null 2>&1 || true
  podman volume ls -q --filter "name=^$name-" 2>/dev/null | xargs -r podman volume rm -f >/dev/null 2>&1 || true
  [ -z "${image:-}" ] || podman rmi -f "$image" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
passed=0
check() { printf 'ok - %s\n' "$1"; passed=$((passed + 1)); }
fail() { printf 'not ok - %s\n' "$1" >&2; printf 'kubernetes: %s passed, 1 failed\n' "$passed"; exit 1; }
render() { "$kubectl" kustomize "$1" >"$2" 2>"$work/render.log" || { cat "$work/render.log" >&2; fail "kustomize renders $1"; }; }
validate() {
  "$kubernetes_validate" --strict --quiet -k "$k8s_version" "$1" >"$work/validate.log" 2>&1 \
    || { cat "$work/validate.log" >&2; fail "$1 validates against Kubernetes $k8s_version"; }
}
# assert FILE PYTHON: runs PYTHON with `docs`, the rendered objects by "Kind/name".
assert() {
  "$kubernetes_python" - "$1" <<PY || fail "$1: what the manifests promise"
import sys, yaml
docs = {f"{d['kind']}/{d['metadata']['name']}": d for d in yaml.safe_load_all(open(sys.argv[1])) if d}
$2
PY
}

# 1. Render and validate the base and the overlays.
render "$kube/base" "$work/base.yaml"
render "$kube/overlays/kata" "$work/kata.yaml"
render "$kube/overlays/single-replica" "$work/single-replica.yaml"
render "$kube/overlays/postgres" "$work/postgres.yaml"
render "$kube/overlays/oauth" "$work/oauth.yaml"
for f in base kata single-replica postgres oauth; do validate "$work/$f.yaml"; done
check "the base and overlays kata, single-replica, postgres and oauth render with kustomize v2.0.3 and validate strictly against Kubernetes $k8s_version"

assert "$work/base.yaml" '
assert sorted(docs) == ["Deployment/bermd", "HorizontalPodAutoscaler/bermd", "NetworkPolicy/bermd",
                        "PodDisruptionBudget/bermd", "Service/bermd"], sorted(docs)
assert docs["HorizontalPodAutoscaler/bermd"]["apiVersion"] == "autoscaling/v2"
assert docs["PodDisruptionBudget/bermd"]["apiVersion"] == "policy/v1"
assert docs["NetworkPolicy/bermd"]["apiVersion"] == "networking.k8s.io/v1"
pod = docs["Deployment/bermd"]["spec"]["template"]["spec"]
assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == 65532
assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
(c,) = pod["containers"]
sc = c["securityContext"]
assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
assert sc["capabilities"] == {"drop": ["ALL"]} and sc["seccompProfile"] == {"type": "RuntimeDefault"}
assert c["livenessProbe"]["httpGet"]["path"] == "/healthz" and c["readinessProbe"]["httpGet"]["path"] == "/readyz"
assert "--http-token-file" in c["args"] and "--app" in c["args"] and "--programs" in c["args"] and "--pod-secret-volumes" in c["args"]
(init,) = pod["initContainers"]
assert init["command"][:5] == ["/usr/local/bin/berm", "pull", "--app", "/etc/berm/app", "--store"], init["command"]
isc = init["securityContext"]
assert isc["readOnlyRootFilesystem"] is True and isc["capabilities"] == {"drop": ["ALL"]} and isc["runAsNonRoot"] is True
assert docs["Service/bermd"]["spec"]["sessionAffinity"] == "ClientIP"
'
assert "$work/kata.yaml" '
assert docs["RuntimeClass/kata"]["apiVersion"] == "node.k8s.io/v1" and docs["RuntimeClass/kata"]["handler"] == "kata"
assert docs["Deployment/bermd"]["spec"]["template"]["spec"]["runtimeClassName"] == "kata"
'
assert "$work/single-replica.yaml" '
d = docs["Deployment/bermd"]["spec"]
assert d["replicas"] == 1 and d["strategy"] == {"type": "Recreate"}, d.get("strategy")
(home,) = [v for v in d["template"]["spec"]["volumes"] if v["name"] == "berm-home"]
assert home == {"name": "berm-home", "persistentVolumeClaim": {"claimName": "berm-home"}}, home
h = docs["HorizontalPodAutoscaler/bermd"]["spec"]
assert h["minReplicas"] == 1 and h["maxReplicas"] == 1
assert "PersistentVolumeClaim/berm-home" in docs
'
assert "$work/postgres.yaml" '
d = docs["Deployment/bermd"]["spec"]
assert d["replicas"] == 2 and docs["HorizontalPodAutoscaler/bermd"]["spec"]["maxReplicas"] > 1
(c,) = d["template"]["spec"]["containers"]
(kv,) = [e for e in c["env"] if e["name"] == "BERM_KV_URL"]
assert kv["valueFrom"] == {"secretKeyRef": {"name": "bermd-kv", "key": "url"}}, kv
assert not any("postgres://" in a for a in c["args"]), "no URL on the command line"
egress = docs["NetworkPolicy/bermd"]["spec"]["egress"]
assert {"port": 5432, "protocol": "TCP"} in [p for rule in egress for p in rule["ports"]], egress
assert {"port": 53, "protocol": "UDP"} in [p for rule in egress for p in rule["ports"]], egress
'
assert "$work/oauth.yaml" '
pod = docs["Deployment/bermd"]["spec"]["template"]["spec"]
(c,) = pod["containers"]
a = c["args"]
assert "--http-token-file" not in a, a
assert a[a.index("--oauth-issuer") + 1].startswith("https://"), a
assert a[a.index("--oauth-resource") + 1] == "https://mcp.example.com/mcp", a
assert "mcp.example.com" in [a[i + 1] for i, x in enumerate(a) if x == "--allowed-host"], a
assert "token" not in [v["name"] for v in pod["volumes"]] and "token" not in [m["name"] for m in c["volumeMounts"]]
egress = docs["NetworkPolicy/bermd"]["spec"]["egress"]
assert {"port": 443, "protocol": "TCP"} in [p for rule in egress for p in rule["ports"]], egress
'
check "non-root, read-only root, no capability, seccomp RuntimeDefault (the init container that pulls programs by image too), probes on /healthz and /readyz, ClientIP affinity; kata adds a RuntimeClass; single-replica pins one replica on a claim; postgres keeps the replicas, takes BERM_KV_URL from a Secret and lets 5432 out; oauth trades the token for an issuer and lets 443 out"

# 2. The validator refuses what is wrong, so the step above can fail.
sed 's/readOnlyRootFilesystem: true/readOnlyRootFileSystem: true/' "$work/base.yaml" >"$work/misspelt.yaml"
sed 's/containerPort: 8080/containerPort: http/' "$work/base.yaml" >"$work/mistyped.yaml"
for bad in misspelt mistyped; do
  ! cmp -s "$work/base.yaml" "$work/$bad.yaml" || fail "the $bad copy differs from the base"
  if "$kubernetes_validate" --strict --quiet -k "$k8s_version" "$work/$bad.yaml" >"$work/$bad.log" 2>&1; then
    fail "kubernetes-validate refuses the $bad manifest"
  fi
done
grep -q "'readOnlyRootFileSystem' was unexpected" "$work/misspelt.log" || { cat "$work/misspelt.log" >&2; fail "the refusal names the misspelt field"; }
grep -q "containerPort: 'http' is not of type 'integer'" "$work/mistyped.log" || { cat "$work/mistyped.log" >&2; fail "the refusal names the mistyped field"; }
check "kubernetes-validate refuses a misspelt securityContext field and a port that is not a number"

# 3. The app overlay of docs/kubernetes.md, its files as the page shows them, beside a
# checkout of berm (here a link to this one).
mkdir -p "$work/my-app/app"
ln -s "$root" "$work/berm"
"$kubernetes_python" - "$root/docs/kubernetes.md" "$work" <<'PY' || fail "docs/kubernetes.md shows the overlay's files"
import pathlib, re, sys
page = open(sys.argv[1]).read()
files = re.findall(r"<!-- file: (\S+) -->\n```\w*\n(.*?)```\n", page, re.S)
assert {path for path, _ in files} == {"my-app/kustomization.yaml", "my-app/allowed-hosts.yaml"}, files
for path, text in files:
    pathlib.Path(sys.argv[2], path).write_text(text)
PY
cp "$app/berm.toml" "$app/echo.wasm" "$work/my-app/app/"
token=$(head -c 32 /dev/urandom | base64)
printf '%s\n' "$token" >"$work/my-app/token"
render "$work/my-app" "$work/my-app.yaml"
validate "$work/my-app.yaml"
assert "$work/my-app.yaml" '
(cm,) = [d for k, d in docs.items() if k.startswith("ConfigMap/berm-app-")]
assert sorted(cm["data"]) == ["berm.toml"] and sorted(cm["binaryData"]) == ["echo.wasm"], cm.keys()
import base64
size = sum(len(v.encode()) for v in cm["data"].values()) + sum(len(base64.b64decode(v)) for v in cm["binaryData"].values())
assert size <= 1 << 20, f"the app ConfigMap holds {size} bytes, past the 1 MiB a ConfigMap may"
pod = docs["Deployment/bermd"]["spec"]["template"]["spec"]
vols = {v["name"]: v for v in pod["volumes"]}
assert vols["app"]["configMap"]["name"] == cm["metadata"]["name"]
assert vols["token"]["secret"]["secretName"].startswith("bermd-token-")
assert "--allowed-host=mcp.example.com" in pod["containers"][0]["args"]
'
check "the app overlay of docs/kubernetes.md renders (echo's folder as a ConfigMap with binaryData, the token as a Secret) and validates"

# 4. Run its Deployment under podman, with the image scripts/build-image makes.
"$root/scripts/build-image" --out "$work/image" >"$work/digest" 2>"$work/build.log" || { cat "$work/build.log" >&2; fail "scripts/build-image"; }
image=localhost/berm-kubernetes-$name:test
skopeo copy -q "oci:$work/image" "containers-storage:$image" 2>"$work/pull.log" || { cat "$work/pull.log" >&2; fail "skopeo copies the image into podman's storage"; }
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# The test's own layer over the overlay: the image just built, a name of its own, one replica
# (kube play makes a pod per replica, and each would publish the same port), the port
# published on loopback (kube play publishes hostPorts only), and the Host name it is called by.
mkdir "$work/e2e"
cat >"$work/e2e/kustomization.yaml" <<EOF
bases:
- ../my-app
namePrefix: $name-
images:
- name: ghcr.io/berm-os/bermd
  newName: ${image%:*}
  newTag: test
patchesJson6902:
- target:
    group: apps
    version: v1
    kind: Deployment
    name: bermd
  path: podman.yaml
EOF
cat >"$work/e2e/podman.yaml" <<EOF
- op: replace
  path: /spec/replicas
  value: 1
- op: add
  path: /spec/template/spec/containers/0/ports/0/hostPort
  value: $port
- op: add
  path: /spec/template/spec/containers/0/ports/0/hostIP
  value: 127.0.0.1
- op: add
  path: /spec/template/spec/containers/0/args/-
  value: --allowed-host=localhost
# podman 4.3 removes a kube play init container once it exits, and can race itself doing so
# ("failed to remove once init container … as it is running", containers/podman#18477); an
# init container of type "always" is kept, exited, and the pod comes up. podman 4.3 reads the
# annotation from the Deployment's own metadata; the template's is where later podman looks.
- op: add
  path: /metadata/annotations
  value:
    io.podman.annotations.init.container.type: always
- op: add
  path: /spec/template/metadata/annotations
  value:
    io.podman.annotations.init.container.type: always
EOF
render "$work/e2e" "$work/e2e.yaml"
validate "$work/e2e.yaml"
# What podman kube play runs: the Deployment and the ConfigMap and Secret it mounts. podman
# 4.3 makes each emptyDir a volume named as the pod names it (`berm-home`, `tmp`), shared
# with any other volume of that name on the machine, so those take the test's prefix here;
# nothing else is changed.
"$kubernetes_python" - "$work/e2e.yaml" "$play" "$name" <<'PY' || fail "the Deployment, ConfigMap and Secret are picked out"
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] in ("ConfigMap", "Secret", "Deployment")]
assert sorted(d["kind"] for d in docs) == ["ConfigMap", "Deployment", "Secret"], docs
(pod,) = [d["spec"]["template"]["spec"] for d in docs if d["kind"] == "Deployment"]
empty = {v["name"] for v in pod["volumes"] if "emptyDir" in v}
assert empty == {"berm-home", "tmp"}, empty
mounts = [m for c in pod["containers"] + pod.get("initContainers", []) for m in c["volumeMounts"]]
for item in pod["volumes"] + mounts:
    if item["name"] in empty:
        item["name"] = f"{sys.argv[3]}-{item['name']}"
yaml.safe_dump_all(docs, open(sys.argv[2], "w"))
PY

# podman has no flags for these under kube play, so they go in a containers.conf of the
# test's own. This machine kind mounts cgroups hybrid, which crun refuses and runc runs
# (docs/image.md), and a sandboxed root may not raise the limits podman sets by default.
{
  echo '[containers]'
  echo "default_ulimits = [\"nofile=$(ulimit -Sn):$(ulimit -Hn)\", \"nproc=4096:4096\"]"
  if [ -n "$(cat /sys/fs/cgroup/unified/cgroup.controllers 2>/dev/null)" ]; then
    command -v runc >/dev/null || { echo "kubernetes: runc is missing (apt-get install runc), and crun cannot run on hybrid cgroups" >&2; exit 2; }
    echo '[engine]'
    echo 'runtime = "runc"'
  fi
} >"$work/containers.conf"
export CONTAINERS_CONF=$work/containers.conf
podman kube play "$play" >"$work/play.log" 2>&1 || { cat "$work/play.log" >&2; fail "podman kube play runs the rendered Deployment"; }
pod=$(podman pod ps --filter "name=^$name-bermd" --format '{{.Name}}')
[ -n "$pod" ] || { cat "$work/play.log" >&2; fail "podman made the Deployment's pod"; }
container=$(podman ps -a --filter "pod=$pod" --format '{{.Names}} {{.IsInfra}}' | awk '$2 == "false" && $1 ~ /-bermd$/ {print $1}')
[ -n "$container" ] || fail "the pod has bermd's container"
init=$(podman ps -a --filter "pod=$pod" --format '{{.Names}}' | grep -- '-pull-programs$' || true)
[ -n "$init" ] || fail "the pod has the init container pull-programs"
ready=
for _ in $(seq 300); do
  ready=$(curl -s "http://127.0.0.1:$port/readyz" || true)
  [ "$ready" = ready ] && break
  sleep 0.1
done
[ "$ready" = ready ] || { podman logs "$container" >&2; fail "/readyz says ready"; }
[ "$(curl -s "http://127.0.0.1:$port/healthz")" = ok ] || fail "/healthz says ok"
status=$(curl -s -o /dev/null -w '%{http_code}' -X POST "http://localhost:$port/mcp")
[ "$status" = 401 ] || fail "/mcp without the token is 401, not $status"
[ "$(podman inspect "$init" --format '{{.State.ExitCode}}')" = 0 ] || { podman logs "$init" >&2; fail "the init container pull-programs exits 0"; }
pulled=$(podman logs "$init" 2>&1)
case "$pulled" in *"no program is named by image"*) ;; *) printf '%s\n' "$pulled" >&2; fail "pull-programs says the echo folder names no program by image" ;; esac
check "podman kube play runs the rendered Deployment: pull-programs (berm pull --app) ran first and found nothing to pull; /readyz and /healthz answer without a token, /mcp needs it"

inspect=$(podman inspect "$container" --format '{{.HostConfig.ReadonlyRootfs}} {{.Config.User}} {{len .EffectiveCaps}}')
[ "$inspect" = "true 65532:65532 0" ] || fail "read-only root, user 65532:65532 and no capability, not $inspect"
uid=$(podman top "$container" huser | sed -n 2p | tr -d ' ')
[ "$uid" = 65532 ] || fail "bermd runs as uid 65532 on the host's side of the container, not $uid"
# podman 4.3 writes a Secret's `data` into its volume still base64-encoded (kubelet, and later
# podman, decode it): the token bermd reads here is the base64 of the token file, and the
# client sends what bermd was given. The file is looked at to be sure of that.
token_volume=$(podman volume ls -q --filter "name=^$name-bermd-token-")
served=$(cat "$(podman volume inspect --format '{{.Mountpoint}}' "$token_volume")/token")
[ "$served" = "$(base64 -w0 "$work/my-app/token")" ] || fail "podman 4.3 serves the Secret's data base64-encoded, as this test expects"
result=$("$python" "$root/tests/e2e/mcp_http_call.py" "http://localhost:$port/mcp" "$served" echo_echo \
  '{"message": "through kube play"}') || { podman logs "$container" >&2; fail "an MCP client calls through the pod"; }
"$kubernetes_python" - "$result" <<'PY' || fail "echo_echo through the pod"
import json, sys
got = json.loads(sys.argv[1])
assert got["server"] == "bermd", got
assert got["tools"] == ["echo_echo", "echo_fail", "echo_reverse"], got
assert not got["is_error"] and got["text"] == ["through kube play"], got
PY
check "as 65532, read-only root, no capability: the Python MCP SDK calls echo_echo over HTTP with the token from the Secret"

podman kube down "$play" >"$work/down.log" 2>&1 || { cat "$work/down.log" >&2; fail "podman kube down"; }
[ -z "$(podman pod ps -q --filter "name=^$name-")" ] || fail "podman kube down removes the pod"
rm -f "$play"
check "podman kube down removes the pod"
printf 'kubernetes: %s passed, 0 failed\n' "$passed"
