"""Rewrite a docker archive as an OCI archive (an OCI image layout in a tar), as buildah's
``oci-archive:`` or umoci produce: the import test feeds both formats to scripts/k8s/import-images.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from pathlib import Path


def docker_to_oci(docker_archive: Path, out: Path, ref_name: str, *, gzip_layers: bool) -> None:
    """Write ``out``: the image of ``docker_archive`` with the OCI media types, its index naming
    it by the annotation ``org.opencontainers.image.ref.name`` = ``ref_name``."""
    with tarfile.open(docker_archive) as src:

        def read(name: str) -> bytes:
            f = src.extractfile(name)
            assert f is not None, name
            return f.read()

        manifest = json.loads(read("manifest.json"))[0]
        config = read(manifest["Config"])
        layers = [read(name) for name in manifest["Layers"]]
    blobs: dict[str, bytes] = {}

    def blob(data: bytes, media_type: str) -> dict[str, object]:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        blobs[digest] = data
        return {"mediaType": media_type, "digest": digest, "size": len(data)}

    layer_type = "application/vnd.oci.image.layer.v1.tar" + ("+gzip" if gzip_layers else "")
    image_manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": blob(config, "application/vnd.oci.image.config.v1+json"),
        "layers": [
            blob(gzip.compress(data, mtime=0) if gzip_layers else data, layer_type)
            for data in layers
        ],
    }
    manifest_desc = blob(
        json.dumps(image_manifest).encode(), "application/vnd.oci.image.manifest.v1+json"
    )
    manifest_desc["annotations"] = {"org.opencontainers.image.ref.name": ref_name}
    index = {"schemaVersion": 2, "manifests": [manifest_desc]}
    files = {
        "oci-layout": json.dumps({"imageLayoutVersion": "1.0.0"}).encode(),
        "index.json": json.dumps(index).encode(),
    }
    files |= {f"blobs/sha256/{d.split(':', 1)[1]}": data for d, data in blobs.items()}
    with tarfile.open(out, "w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
