"""Dense BF16 / F16 / F32 weights (formats.md §6.1): encoders (round to nearest even) and exact decoders."""
import numpy as np

from elements import decode_bf16, decode_f16, encode_bf16, encode_f16


def quantize_bf16(w):
    return {"weight": ("BF16", encode_bf16(np.asarray(w, dtype=np.float32)))}


def quantize_f16(w):
    return {"weight": ("F16", encode_f16(np.asarray(w, dtype=np.float32)))}


def quantize_f32(w):
    return {"weight": ("F32", np.asarray(w, dtype=np.float32).copy())}


def dequantize_dense(parts):
    dtype, arr = parts["weight"]
    if dtype == "BF16":
        return decode_bf16(arr)
    if dtype == "F16":
        return decode_f16(arr)
    if dtype == "F32":
        return np.asarray(arr, dtype=np.float32).copy()
    raise ValueError("unsupported dense dtype " + dtype)
