"""Writes a one-layer OCI image layout from a staged tree, byte for byte the same for the same
tree: entries sorted, every timestamp the given epoch, owners numeric, no build-machine names,
gzip without a name or time. Used by scripts/build-image.

Hand-written rather than buildah or umoci: those stamp the time of the build and the builder's
history into the config unless told otherwise entry by entry, and the layout is three small
JSON documents over one tar that Python's tarfile writes reproducibly. skopeo and podman then
read the layout as any other (`oci:DIR`).

    python3 oci_image.py STAGE OUT --arch amd64 --epoch N --owner PATH=UID:GID ... \
        --config JSON

prints the manifest's digest (sha256:…), the image's digest as a registry will report it.

    python3 oci_image.py --merge OUT LAYOUT...

merges one-architecture layouts into one multi-architecture layout (the release pushes it
with `skopeo copy --all`) and prints the index's digest.
"""

import argparse
import datetime
import gzip
import hashlib
import io
import json
import os
import stat
import sys
import tarfile


def layer(stage, epoch, owners):
    """The uncompressed tar of STAGE: (bytes)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        paths = []
        for directory, dirs, files in os.walk(stage):
            dirs.sort()
            for name in sorted(dirs + files):
                paths.append(os.path.join(directory, name))
        for path in sorted(paths, key=lambda p: os.path.relpath(p, stage)):
            rel = os.path.relpath(path, stage)
            info = tar.gettarinfo(path, arcname=rel)
            info.mtime = epoch
            info.uid, info.gid = owners.get("/" + rel, (0, 0))
            info.uname = info.gname = ""
            info.mode = stat.S_IMODE(os.lstat(path).st_mode)
            info.pax_headers = {}
            if info.isfile():
                with open(path, "rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)
    return buffer.getvalue()


def blob(out, data):
    """Stores DATA under blobs/sha256 and returns its descriptor's digest and size."""
    digest = hashlib.sha256(data).hexdigest()
    os.makedirs(os.path.join(out, "blobs", "sha256"), exist_ok=True)
    with open(os.path.join(out, "blobs", "sha256", digest), "wb") as f:
        f.write(data)
    return "sha256:" + digest, len(data)


def canonical(value):
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def merge(out, layouts):
    """One layout whose index lists every manifest of LAYOUTS, with all their blobs."""
    manifests = []
    for layout in layouts:
        for name in sorted(os.listdir(os.path.join(layout, "blobs", "sha256"))):
            with open(os.path.join(layout, "blobs", "sha256", name), "rb") as f:
                blob(out, f.read())
        with open(os.path.join(layout, "index.json"), "rb") as f:
            manifests += json.load(f)["manifests"]
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": sorted(manifests, key=lambda m: m["platform"]["architecture"]),
    }
    write_layout(out, index)
    print("sha256:" + hashlib.sha256(canonical(index)).hexdigest())


def write_layout(out, index):
    with open(os.path.join(out, "index.json"), "wb") as f:
        f.write(canonical(index))
    with open(os.path.join(out, "oci-layout"), "wb") as f:
        f.write(canonical({"imageLayoutVersion": "1.0.0"}))


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--merge":
        merge(sys.argv[2], sys.argv[3:])
        return
    parser = argparse.ArgumentParser()
    parser.add_argument("stage")
    parser.add_argument("out")
    parser.add_argument("--arch", required=True)
    parser.add_argument("--epoch", type=int, required=True)
    parser.add_argument("--owner", action="append", default=[])
    parser.add_argument("--config", required=True, help="the image config's `config` object")
    args = parser.parse_args()

    owners = {}
    for spec in args.owner:
        path, ids = spec.split("=")
        uid, gid = ids.split(":")
        owners[path] = (int(uid), int(gid))
    tar = layer(args.stage, args.epoch, owners)
    compressed = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=compressed, mtime=0, compresslevel=9) as gz:
        gz.write(tar)
    layer_digest, layer_size = blob(args.out, compressed.getvalue())
    when = datetime.datetime.fromtimestamp(args.epoch, datetime.timezone.utc)
    config = {
        "architecture": args.arch,
        "os": "linux",
        "created": when.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "config": json.loads(args.config),
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(tar).hexdigest()]},
        "history": [{"created": when.strftime("%Y-%m-%dT%H:%M:%SZ"), "created_by": "scripts/build-image"}],
    }
    config_digest, config_size = blob(args.out, canonical(config))
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest, "size": config_size},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": layer_digest, "size": layer_size}],
    }
    manifest_digest, manifest_size = blob(args.out, canonical(manifest))
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": manifest_digest,
            "size": manifest_size,
            "platform": {"architecture": args.arch, "os": "linux"},
        }],
    }
    write_layout(args.out, index)
    print(manifest_digest)


if __name__ == "__main__":
    main()
