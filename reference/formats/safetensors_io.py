"""Minimal safetensors writer/reader (formats.md §2.1): 8-byte LE header length, JSON header padded with spaces
to a multiple of 8, tensors tiled back to back in the data section in the order given.

Arrays use the storage convention of elements.py: BF16/F16 as uint16 bits, F8_* as uint8 codes, F32 float32,
U32 uint32, I64 int64, ... `F4` arrays are packed bytes (two elements per byte) with the element shape given.
"""
import json
import struct

import numpy as np

STORAGE = {
    "BOOL": np.uint8, "U8": np.uint8, "I8": np.int8, "U16": np.uint16, "I16": np.int16, "U32": np.uint32,
    "I32": np.int32, "U64": np.uint64, "I64": np.int64, "F16": np.uint16, "BF16": np.uint16, "F32": np.float32,
    "F64": np.float64, "F8_E4M3": np.uint8, "F8_E5M2": np.uint8, "F8_E8M0": np.uint8, "F4": np.uint8,
}


def _entry_bytes(dtype, arr):
    arr = np.ascontiguousarray(np.asarray(arr))
    want = np.dtype(STORAGE[dtype]).newbyteorder("<")
    if arr.dtype.itemsize != want.itemsize:
        raise ValueError(f"{dtype} data must have {want.itemsize}-byte items, got {arr.dtype}")
    return arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()


def write_safetensors(path, tensors, metadata=None):
    """tensors: {name: (dtype_str, ndarray)} or {name: (dtype_str, shape, raw_bytes)} (shape = element shape)."""
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name, value in tensors.items():
        if len(value) == 3:
            dtype, shape, data = value
            data = bytes(data)
        else:
            dtype, arr = value
            shape = list(np.asarray(arr).shape)
            data = _entry_bytes(dtype, arr)
        header[name] = {"dtype": dtype, "shape": [int(d) for d in shape], "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((-len(text)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    """-> {name: (dtype_str, shape list, raw bytes)}, plus the '__metadata__' dict under that key if present."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n].decode("utf-8"))
    base = 8 + n
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            out[name] = e
            continue
        b, end = e["data_offsets"]
        out[name] = (e["dtype"], e["shape"], data[base + b:base + end])
    return out


def to_array(dtype, shape, raw):
    """Raw bytes -> storage-typed ndarray (F4: packed bytes, last dimension halved)."""
    arr = np.frombuffer(raw, dtype=np.dtype(STORAGE[dtype]).newbyteorder("<"))
    if dtype == "F4":
        shape = list(shape[:-1]) + [shape[-1] // 2] if shape else shape
    return arr.reshape(shape).astype(STORAGE[dtype])
