"""moto extension for ECR images, as the image stage and the sandbox kubelet read them.

Stock moto 5.2.5 gives an image the digest ``sha256`` of its layer digests joined together and the size of its
config blob. ECR, like every registry, names a manifest by the sha256 of its bytes (OCI image spec,
"Descriptors"; the Docker Registry HTTP API V2 ``Docker-Content-Digest``), so the digest of a copied image is
the upstream's; and ``DescribeImages``' ``imageSizeInBytes`` is the size of the image's (compressed) layers
(ECR API reference, ImageDetail). Both are patched on moto's ``Image``; everything else (repositories,
``PutImage``, ``DescribeImages``, tags, ``DeleteRepository``) is moto's own.

ECR pull-through cache rules are not modelled (moto 5.2.5 has none): capserve copies the image instead
(``capserve.core.rollout.image``).
"""

from __future__ import annotations

import hashlib
import json

from moto.ecr.models import Image


def _create_digest(self: Image) -> None:
    self._image_digest = "sha256:" + hashlib.sha256(self.image_manifest.encode()).hexdigest()


def _size_in_bytes(self: Image) -> int | None:
    manifest = json.loads(self.image_manifest)
    layers = manifest.get("layers")
    if not isinstance(layers, list):
        return None  # an index (several platforms): ECR gives no size for it
    return sum(int(layer.get("size") or 0) for layer in layers)


def install() -> None:
    Image._create_digest = _create_digest  # type: ignore[method-assign]
    Image.get_image_size_in_bytes = _size_in_bytes  # type: ignore[method-assign]
