"""NVFP4 (formats.md §6.2 ModelOpt, §6.3 compressed-tensors, §6.4 W4A16): reference quantisers and decoders.

Dequantisation, f32, in this order (identical to src/formats/decode.h):
    W = (e2m1(code) * e4m3(weight_scale)) * weight_scale_2
    compressed-tensors: g = float32(1) / weight_global_scale (one f32 division), then W = (e2m1 * e4m3) * g
"""
import numpy as np

from elements import F32, decode_e2m1, decode_e4m3, encode_e2m1, encode_e4m3, pack_e2m1, unpack_e2m1

BLOCK = 16
E4M3_MAX = 448.0
E2M1_MAX = 6.0


def _scalar(dtype, value, shape):
    return (dtype, np.full(shape, value, dtype=np.float32))


def _quantize_core(w, g, clamp_scales):
    """Block scales and codes for global multiplier g (f32). Returns (packed U8 [N,K/2], scales U8 [N,K/16])."""
    w = np.asarray(w, dtype=np.float32)
    n, k = w.shape
    if k % BLOCK:
        raise ValueError("K must be a multiple of 16")
    blocks = w.reshape(n, k // BLOCK, BLOCK)
    amax = np.max(np.abs(blocks), axis=-1)
    raw = amax / (F32(E2M1_MAX) * g)
    if clamp_scales:  # newer ModelOpt clamps block scales to [2^-9, 448] before the cast
        raw = np.clip(raw, F32(2.0 ** -9), F32(E4M3_MAX))
    scales = encode_e4m3(raw)
    scales = np.where(amax == 0, np.uint8(0x38), scales).astype(np.uint8)  # an all-zero block gets 1.0
    denom = (decode_e4m3(scales) * g)[..., None]
    with np.errstate(divide="ignore", invalid="ignore"):
        x = np.where(denom != 0, blocks / np.where(denom != 0, denom, F32(1)), F32(0))
    codes = encode_e2m1(x.astype(np.float32)).reshape(n, k)
    return pack_e2m1(codes), scales


def _global_from_amax(amax):
    """amax/(6·448) in f32; an all-zero tensor gets 1.0 so the division stays finite."""
    amax = F32(amax)
    return F32(1.0) if amax == 0 else F32(amax / F32(E2M1_MAX * E4M3_MAX))


def nvfp4_global_for(amax):
    """The ModelOpt global multiplier for an amax: amax/(6·448) in f32 (1.0 for amax 0)."""
    return _global_from_amax(amax)


def quantize_nvfp4(w, input_amax=None, clamp_scales=True, global_scale=None):
    """ModelOpt NVFP4: weight U8 [N,K/2], weight_scale F8_E4M3 [N,K/16], weight_scale_2 F32 [],
    input_scale F32 [] (only when input_amax is given: = input_amax/(6·448)).
    global_scale: use this weight_scale_2 instead of amax(w)/(6·448) (ModelOpt shares one between gate and up;
    blocks whose scale would exceed 448 are clamped to 448 when clamp_scales, so choose g >= amax/(6·448))."""
    w = np.asarray(w, dtype=np.float32)
    if global_scale is not None:
        g = F32(global_scale)
    else:
        g = _global_from_amax(np.max(np.abs(w)) if w.size else 0)
    packed, scales = _quantize_core(w, g, clamp_scales)
    parts = {"weight": ("U8", packed), "weight_scale": ("F8_E4M3", scales),
             "weight_scale_2": _scalar("F32", g, ())}
    if input_amax is not None:
        parts["input_scale"] = _scalar("F32", _global_from_amax(input_amax), ())
    return parts


def quantize_w4a16_nvfp4(w, clamp_scales=True, global_scale=None):
    """W4A16_NVFP4: the NVFP4 tensors without input_scale (§6.4)."""
    return quantize_nvfp4(w, input_amax=None, clamp_scales=clamp_scales, global_scale=global_scale)


def quantize_nvfp4_ct(w, input_amax=None, clamp_scales=True):
    """compressed-tensors NVFP4: weight_packed U8, weight_scale F8_E4M3, weight_global_scale F32 [1] (a divisor
    = 6·448/amax), input_global_scale F32 [1] when input_amax is given."""
    w = np.asarray(w, dtype=np.float32)
    amax = F32(np.max(np.abs(w))) if w.size else F32(0)
    gs = F32(1.0) if amax == 0 else F32(F32(E2M1_MAX * E4M3_MAX) / amax)
    g = F32(1.0) / gs  # what the decoder multiplies by
    packed, scales = _quantize_core(w, g, clamp_scales)
    parts = {"weight_packed": ("U8", packed), "weight_scale": ("F8_E4M3", scales),
             "weight_global_scale": _scalar("F32", gs, (1,))}
    if input_amax is not None:
        parts["input_global_scale"] = _scalar("F32", F32(F32(E2M1_MAX * E4M3_MAX) / F32(input_amax)), (1,))
    return parts


def _float_scalar(part):
    from elements import decode_bf16, decode_f16
    dtype, arr = part
    arr = np.asarray(arr).reshape(-1)
    if arr.size != 1:
        raise ValueError("global scale must have one element")
    if dtype == "F32":
        return F32(arr.astype(np.float32)[0])
    if dtype == "BF16":
        return F32(decode_bf16(arr)[0])
    if dtype == "F16":
        return F32(decode_f16(arr)[0])
    raise ValueError("unsupported global dtype " + dtype)


def decode_nvfp4_core(packed, scales, g):
    """(e2m1 * e4m3(scale)) * g in f32; packed [N,K/2] uint8, scales [N,K/16] uint8, g an f32 scalar."""
    codes = unpack_e2m1(np.asarray(packed, dtype=np.uint8).reshape(len(scales), -1))
    n, k = codes.shape
    vals = decode_e2m1(codes).reshape(n, k // BLOCK, BLOCK)
    s = decode_e4m3(np.asarray(scales, dtype=np.uint8).reshape(n, k // BLOCK))[..., None]
    return ((vals * s) * F32(g)).astype(np.float32).reshape(n, k)


def dequantize_nvfp4(parts):
    """ModelOpt NVFP4 / W4A16_NVFP4 parts -> f32 [N,K]."""
    return decode_nvfp4_core(parts["weight"][1], parts["weight_scale"][1], _float_scalar(parts["weight_scale_2"]))


dequantize_w4a16_nvfp4 = dequantize_nvfp4


def dequantize_nvfp4_ct(parts):
    g = F32(1.0) / _float_scalar(parts["weight_global_scale"])
    return decode_nvfp4_core(parts["weight_packed"][1], parts["weight_scale"][1], g)
