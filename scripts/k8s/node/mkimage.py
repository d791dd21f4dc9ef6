"""Pack files into a single-layer image archive (docker-archive format) for the test node.

Usage: python3 mkimage.py OUT.tar REF ENTRYPOINT_JSON SRC=DEST [SRC=DEST ...]

Each SRC (a file on the host) is stored at DEST in the layer, mode kept, owner root; a DEST
ending in "@TARGET" (``bin/sh@busybox``) is a symlink instead. The archive is what
``ctr images import`` (and ``docker load``) read. It is reproducible: the same inputs give the
same bytes (mtime 0, sorted entries), so the node's image cache can compare digests.

Only for the node's own tiny images (the pause sandbox, CoreDNS, a busybox for tests); the
project's images are built by scripts/k8s/build-images.sh.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import sys
import tarfile


def _layer(entries: list[tuple[str, str]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        dirs: set[str] = set()
        for src, dest in sorted(entries, key=lambda e: e[1]):
            dest = dest.lstrip("/")
            link = None
            if "@" in dest:
                dest, link = dest.split("@", 1)
            parts = dest.split("/")[:-1]
            for i in range(1, len(parts) + 1):
                d = "/".join(parts[:i])
                if d not in dirs:
                    dirs.add(d)
                    info = tarfile.TarInfo(d)
                    info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 0
                    tar.addfile(info)
            info = tarfile.TarInfo(dest)
            info.mtime = 0
            if link is not None:
                info.type, info.linkname, info.mode = tarfile.SYMTYPE, link, 0o777
                tar.addfile(info)
                continue
            st = os.stat(src)
            info.size, info.mode = st.st_size, st.st_mode & 0o7777
            with open(src, "rb") as f:
                tar.addfile(info, f)
    return buf.getvalue()


def main(argv: list[str]) -> None:
    out, ref, entrypoint = argv[0], argv[1], json.loads(argv[2])
    entries = [tuple(a.split("=", 1)) for a in argv[3:]]
    layer = _layer(entries)  # type: ignore[arg-type]
    layer_id = hashlib.sha256(layer).hexdigest()
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {
                "Entrypoint": entrypoint,
                "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
            },
            "rootfs": {"type": "layers", "diff_ids": [f"sha256:{layer_id}"]},
            "history": [{"created_by": "scripts/k8s/node/mkimage.py"}],
        },
        sort_keys=True,
    ).encode()
    config_id = hashlib.sha256(config).hexdigest()
    manifest = json.dumps(
        [{"Config": f"{config_id}.json", "RepoTags": [ref], "Layers": [f"{layer_id}/layer.tar"]}]
    ).encode()
    tmp = out + ".tmp"
    with tarfile.open(tmp, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in (
            (f"{layer_id}/layer.tar", layer),
            (f"{config_id}.json", config),
            ("manifest.json", manifest),
        ):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    os.replace(tmp, out)


if __name__ == "__main__":
    main(sys.argv[1:])
