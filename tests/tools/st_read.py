"""A safetensors reader for the tools tests (standard library only: F32, I64 and metadata)."""
import array
import json
import struct

_CODES = {"F32": "f", "I64": "q"}


def read(path):
    """-> ({name: (shape, flat list)}, metadata)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    body = data[8 + n:]
    out = {}
    for name, e in header.items():
        if e["dtype"] not in _CODES:
            continue
        b, t = e["data_offsets"]
        a = array.array(_CODES[e["dtype"]])
        a.frombytes(body[b:t])
        out[name] = (e["shape"], a.tolist())
    return out, meta
