"""FP8 E4M3 weights (formats.md §6.7): per-tensor, per-channel and 2-D block scales. numpy only.

Dequantisation (f32, one rounding): W = e4m3(elem) * s, with s read from F32, widened exactly from BF16/F16, or
2^(b-127) from E8M0 bytes; block grids are [ceil(N/bn), ceil(K/bk)] with partial edge tiles.
Encoders: s = amax/448 computed in f32 (rounded to the scale dtype first, so the codes use the stored scale);
E8M0 block scales use e = ceil(log2(amax/448)); an all-zero group gets scale 1.0 (E8M0 byte 127).
"""
import numpy as np

from elements import (F32, ceil_log2, decode_bf16, decode_e4m3, decode_e8m0, decode_f16, encode_bf16,
                      encode_e4m3, encode_e8m0, encode_f16)

E4M3_MAX = F32(448.0)


def _encode_scale(s, dtype):
    """f32 scales -> (stored array, the f32 value the decoder will see)."""
    s = np.asarray(s, dtype=np.float32)
    if dtype == "F32":
        return s, s
    if dtype == "BF16":
        b = encode_bf16(s)
        return b, decode_bf16(b)
    if dtype == "F16":
        h = encode_f16(s)
        return h, decode_f16(h)
    raise ValueError("unsupported float scale dtype " + dtype)


def decode_scale(dtype, arr):
    """A stored scale array -> f32 values."""
    arr = np.asarray(arr)
    if dtype == "F32":
        return arr.astype(np.float32)
    if dtype == "BF16":
        return decode_bf16(arr)
    if dtype == "F16":
        return decode_f16(arr)
    if dtype in ("U8", "F8_E8M0"):
        return decode_e8m0(arr.astype(np.uint8))
    raise ValueError("unsupported scale dtype " + dtype)


def _amax_scale(amax):
    amax = np.asarray(amax, dtype=np.float32)
    return np.where(amax > 0, amax / E4M3_MAX, F32(1.0)).astype(np.float32)


def _codes(w, s):
    with np.errstate(divide="ignore", invalid="ignore"):
        return encode_e4m3((np.asarray(w, dtype=np.float32) / s).astype(np.float32))


def quantize_fp8_tensor(w, scale_dtype="F32", scale_shape=(), input_amax=None):
    """weight F8_E4M3 [N,K], weight_scale (F32 [] ModelOpt; BF16 [1] compressed-tensors), input_scale F32 []."""
    w = np.asarray(w, dtype=np.float32)
    stored, s = _encode_scale(_amax_scale(np.max(np.abs(w))).reshape(scale_shape), scale_dtype)
    parts = {"weight": ("F8_E4M3", _codes(w, s.reshape(()))), "weight_scale": (scale_dtype, stored)}
    if input_amax is not None:
        parts["input_scale"] = ("F32", _amax_scale(input_amax).reshape(()))
    return parts


def quantize_fp8_channel(w, scale_dtype="F32", column=False):
    """weight F8_E4M3 [N,K], weight_scale [N] (ModelOpt) or [N,1] (compressed-tensors, column=True)."""
    w = np.asarray(w, dtype=np.float32)
    stored, s = _encode_scale(_amax_scale(np.max(np.abs(w), axis=1)), scale_dtype)
    if column:
        stored = stored.reshape(-1, 1)
    return {"weight": ("F8_E4M3", _codes(w, s.reshape(-1, 1))), "weight_scale": (scale_dtype, stored)}


def _tile_amax(w, bn, bk):
    n, k = w.shape
    gr, gc = -(-n // bn), -(-k // bk)
    padded = np.zeros((gr * bn, gc * bk), dtype=np.float32)
    padded[:n, :k] = np.abs(w)
    return padded.reshape(gr, bn, gc, bk).max(axis=(1, 3))


def _expand(grid, n, k, bn, bk):
    return np.repeat(np.repeat(grid, bn, axis=0), bk, axis=1)[:n, :k]


def quantize_fp8_block(w, block=(128, 128), scale_dtype="F32", scale_name="weight_scale_inv", four_d=False):
    """weight F8_E4M3 [N,K] + scale grid [ceil(N/bn), ceil(K/bk)] in F32, BF16, F16, or E8M0 (U8/F8_E8M0).
    four_d writes ModelOpt FP8_PB_WO's [N/bn, 1, K/bk, 1] (N and K must divide)."""
    w = np.asarray(w, dtype=np.float32)
    bn, bk = block
    n, k = w.shape
    amax = _tile_amax(w, bn, bk)
    if scale_dtype in ("U8", "F8_E8M0"):
        e = np.where(amax > 0, ceil_log2(np.where(amax > 0, amax.astype(np.float64) / 448.0, 1.0)), 0)
        stored = encode_e8m0(np.clip(e, -127, 127))
        s = decode_e8m0(stored)
    else:
        stored, s = _encode_scale(_amax_scale(amax), scale_dtype)
    codes = _codes(w, _expand(s, n, k, bn, bk))
    if four_d:
        if n % bn or k % bk:
            raise ValueError("the 4-D form needs N and K divisible by the block")
        stored = stored.reshape(n // bn, 1, k // bk, 1)
    return {"weight": ("F8_E4M3", codes), scale_name: (scale_dtype, stored)}


def dequantize_fp8_tensor(parts):
    dtype, arr = parts["weight_scale"]
    s = decode_scale(dtype, arr).reshape(-1)
    assert s.size == 1
    return (decode_e4m3(parts["weight"][1]) * s[0]).astype(np.float32)


def dequantize_fp8_channel(parts):
    x = decode_e4m3(parts["weight"][1])
    dtype, arr = parts["weight_scale"]
    return (x * decode_scale(dtype, arr).reshape(-1, 1)).astype(np.float32)


def dequantize_fp8_block(parts, block=(128, 128), scale_name="weight_scale_inv"):
    x = decode_e4m3(parts["weight"][1])
    n, k = x.shape
    bn, bk = block
    dtype, arr = parts[scale_name]
    grid = decode_scale(dtype, arr).reshape(-(-n // bn), -(-k // bk))
    return (x * _expand(grid, n, k, bn, bk)).astype(np.float32)
