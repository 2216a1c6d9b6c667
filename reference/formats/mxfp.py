"""MXFP4 (formats.md §6.5) and MXFP8 (§6.6): 32-element blocks sharing one E8M0 scale. numpy only.

Dequantisation (f32, exact): MXFP4 W = e2m1(code) * 2^(b-127); MXFP8 W = e4m3(elem) * 2^(b-127).
Encoder exponent choice (ModelOpt style, §5.6): e = ceil(log2(amax / elem_max)), clamped to [-127, 127];
an all-zero block gets byte 127.
"""
import numpy as np

from elements import (F32, ceil_log2, decode_e2m1, decode_e4m3, decode_e8m0, encode_e2m1, encode_e4m3,
                      encode_e8m0, pack_e2m1, unpack_e2m1)

BLOCK = 32


def _block_exponents(w, elem_max):
    n, k = w.shape
    if k % BLOCK:
        raise ValueError("K must be a multiple of 32")
    blocks = w.reshape(n, k // BLOCK, BLOCK)
    amax = np.max(np.abs(blocks), axis=-1).astype(np.float64)
    e = np.where(amax > 0, ceil_log2(np.where(amax > 0, amax / elem_max, 1.0)), 0)
    return blocks, np.clip(e, -127, 127)


def quantize_mxfp4(w, scale_dtype="U8", weight_name="weight"):
    """weight U8 [N,K/2] (packed E2M1), weight_scale U8 or F8_E8M0 [N,K/32]."""
    w = np.asarray(w, dtype=np.float32)
    blocks, e = _block_exponents(w, 6.0)
    x = (blocks.astype(np.float64) / np.ldexp(1.0, e)[..., None]).astype(np.float32)
    codes = encode_e2m1(x).reshape(w.shape)
    return {weight_name: ("U8", pack_e2m1(codes)), "weight_scale": (scale_dtype, encode_e8m0(e))}


def quantize_mxfp8(w, scale_dtype="U8"):
    """weight F8_E4M3 [N,K], weight_scale U8 or F8_E8M0 [N,K/32]."""
    w = np.asarray(w, dtype=np.float32)
    blocks, e = _block_exponents(w, 448.0)
    x = (blocks.astype(np.float64) / np.ldexp(1.0, e)[..., None]).astype(np.float32)
    return {"weight": ("F8_E4M3", encode_e4m3(x).reshape(w.shape)), "weight_scale": (scale_dtype, encode_e8m0(e))}


def _scales(part, n, kb):
    dtype, arr = part
    arr = np.asarray(arr)
    if dtype in ("U8", "F8_E8M0"):
        return decode_e8m0(arr.astype(np.uint8).reshape(n, kb))
    if dtype == "F32":
        return arr.astype(np.float32).reshape(n, kb)
    raise ValueError("unsupported MX scale dtype " + dtype)


def dequantize_mxfp4(parts, weight_name="weight"):
    packed = np.asarray(parts[weight_name][1], dtype=np.uint8)
    n = packed.shape[0]
    codes = unpack_e2m1(packed.reshape(n, -1))
    k = codes.shape[1]
    s = _scales(parts["weight_scale"], n, k // BLOCK)[..., None]
    return (decode_e2m1(codes).reshape(n, k // BLOCK, BLOCK) * s).astype(np.float32).reshape(n, k)


def dequantize_mxfp8(parts):
    x = np.asarray(parts["weight"][1], dtype=np.uint8)
    n, k = x.shape
    s = _scales(parts["weight_scale"], n, k // BLOCK)[..., None]
    return (decode_e4m3(x).reshape(n, k // BLOCK, BLOCK) * s).astype(np.float32).reshape(n, k)
