"""OCP MX FP4 packing (E2M1 elements, one E8M0 scale per 32), so the sandbox checkpoint is real MXFP4.

OCP Microscaling Formats spec v1.0: shared exponent = floor(log2(amax)) - emax(E2M1)=2, scale byte =
exponent + 127. compressed-tensors "mxfp4-pack-quantized" packs two codes per byte, element 2i in the
low nibble (docs/weights.md §2).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

BLOCK = 32
# E2M1 code -> value; bit 3 is the sign.
FP4_VALUES = np.array(
    [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0], dtype=np.float32
)


def quantize(w: npt.NDArray[np.float32]) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.uint8]]:
    """[rows, cols] float32 (cols % 32 == 0) -> (packed uint8 [rows, cols/2], scales uint8 [rows, cols/32])."""
    rows, cols = w.shape
    if cols % BLOCK:
        raise ValueError(f"MXFP4 needs the reduction dimension divisible by {BLOCK}, got {cols}")
    blocks = w.reshape(rows, cols // BLOCK, BLOCK)
    amax = np.abs(blocks).max(axis=-1)
    with np.errstate(divide="ignore"):
        exponent = np.where(amax > 0, np.floor(np.log2(np.maximum(amax, 1e-38))) - 2, -127)
    exponent = np.clip(exponent, -127, 127).astype(np.int32)
    scaled = blocks / np.exp2(exponent.astype(np.float32))[..., None]
    magnitudes = FP4_VALUES[:8]
    index = np.abs(np.abs(scaled)[..., None] - magnitudes).argmin(axis=-1).astype(np.uint8)
    codes = (index | ((scaled < 0).astype(np.uint8) << 3)).reshape(rows, cols)
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)
    return packed, (exponent + 127).astype(np.uint8)


def dequantize(packed: npt.NDArray[np.uint8], scales: npt.NDArray[np.uint8]) -> npt.NDArray[np.float32]:
    rows, half = packed.shape
    codes = np.empty((rows, half * 2), dtype=np.uint8)
    codes[:, 0::2] = packed & 0x0F
    codes[:, 1::2] = packed >> 4
    values = FP4_VALUES[codes].reshape(rows, -1, BLOCK)
    scale = np.exp2(scales.astype(np.float32) - 127.0)[..., None]
    result: npt.NDArray[np.float32] = (values * scale).reshape(rows, half * 2).astype(np.float32)
    return result
