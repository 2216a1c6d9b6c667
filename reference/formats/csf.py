"""The nvfp4_csf scale codec `byte-window4-fixed-stream-u24-exceptions/1` (formats.md §8.4) and TP slicing (§8.5).

A scale matrix is R x C E4M3 bytes (R % 16 == 0, C even, R*C <= 2^24). Fixed stream: R/16 slabs of
16*(1 + C/2) bytes (16 bases, then 16 rows of C/2 code bytes, low nibble = even column). Exceptions: u32 words,
pos = w & 0xFFFFFF (r*C + c), value = w >> 24, strictly increasing positions.
"""
import numpy as np

CODEC = "byte-window4-fixed-stream-u24-exceptions/1"


def _check(R, C):
    if R % 16 or C % 2:
        raise ValueError("E_CSF_GEOMETRY: R must be a multiple of 16 and C even")
    if R * C > (1 << 24):
        raise ValueError("E_CSF_TOO_LARGE")


def encode(scales, two_d=False):
    """scales uint8 [R, C] -> (fixed uint8 1-D [R*(1+C/2)] or 2-D [R/16, 16*(1+C/2)], exceptions uint32 1-D).
    Per row: the base b in [0, 240] with the most bytes inside [b, b+15], lowest b on ties; bytes outside the
    window become exceptions and their nibble is 0."""
    s = np.asarray(scales, dtype=np.uint8)
    R, C = s.shape
    _check(R, C)
    bases = np.zeros(R, dtype=np.uint8)
    codes = np.zeros((R, C), dtype=np.uint8)
    exc = []
    for r in range(R):
        row = s[r].astype(np.int64)
        hist = np.bincount(row, minlength=256)
        windows = np.array([hist[b:b + 16].sum() for b in range(241)])
        b = int(np.argmax(windows))  # argmax returns the first (lowest) maximum
        bases[r] = b
        inside = (row >= b) & (row <= b + 15)
        codes[r] = np.where(inside, row - b, 0).astype(np.uint8)
        for c in np.nonzero(~inside)[0]:
            exc.append((r * C + int(c)) | (int(row[c]) << 24))
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)  # [R, C/2]
    slabs = np.concatenate([bases.reshape(R // 16, 16), packed.reshape(R // 16, 16 * (C // 2))], axis=1)
    fixed = slabs if two_d else slabs.reshape(-1)
    return np.ascontiguousarray(fixed, dtype=np.uint8), np.array(exc, dtype=np.uint32)


def decode(fixed, exceptions, R, C):
    """-> uint8 [R, C]. Raises ValueError naming the E_CSF_* id on bad input."""
    _check(R, C)
    fixed = np.asarray(fixed, dtype=np.uint8)
    if fixed.ndim == 2:
        a, b = fixed.shape
        if b % 16 or R != 16 * a or C != 2 * (b // 16 - 1):
            raise ValueError("E_CSF_GEOMETRY: 2-D fixed stream shape")
    if fixed.size != R * (1 + C // 2):
        raise ValueError("E_CSF_GEOMETRY: fixed stream size")
    slabs = fixed.reshape(R // 16, 16 * (1 + C // 2))
    bases = slabs[:, :16].reshape(R)
    if np.any(bases > 240):
        raise ValueError("E_CSF_BASE_RANGE")
    packed = slabs[:, 16:].reshape(R, C // 2)
    codes = np.empty((R, C), dtype=np.uint8)
    codes[:, 0::2] = packed & 0xF
    codes[:, 1::2] = packed >> 4
    out = (bases.astype(np.uint16)[:, None] + codes).astype(np.uint8).reshape(-1)
    exc = np.asarray(exceptions, dtype=np.uint32).reshape(-1)
    pos = (exc & 0xFFFFFF).astype(np.int64)
    if np.any(pos >= R * C):
        raise ValueError("E_CSF_EXC_RANGE")
    if np.any(np.diff(pos) <= 0):
        raise ValueError("E_CSF_EXC_ORDER")
    out[pos] = (exc >> 24).astype(np.uint8)
    return out.reshape(R, C)


def slice_rows_cols(fixed, exceptions, R, C, r0, r1, c0, c1):
    """§8.5 on compressed data: rows on whole slabs, even columns; exceptions rebased. -> (fixed 1-D, exc)."""
    if r0 % 16 or r1 % 16 or c0 % 2 or c1 % 2 or not (0 <= r0 <= r1 <= R and 0 <= c0 <= c1 <= C):
        raise ValueError("E_CSF_TP_EXTENT")
    slabs = np.asarray(fixed, dtype=np.uint8).reshape(R // 16, 16 * (1 + C // 2))[r0 // 16:r1 // 16]
    bases = slabs[:, :16]
    codes = slabs[:, 16:].reshape(-1, 16, C // 2)[:, :, c0 // 2:c1 // 2].reshape(len(slabs), -1)
    new_fixed = np.concatenate([bases, codes], axis=1).reshape(-1)
    exc = np.asarray(exceptions, dtype=np.uint32)
    pos = (exc & 0xFFFFFF).astype(np.int64)
    r, c = pos // C, pos % C
    keep = (r >= r0) & (r < r1) & (c >= c0) & (c < c1)
    newpos = ((r - r0) * (c1 - c0) + (c - c0))[keep]
    return new_fixed, (newpos.astype(np.uint32) | (exc[keep] & 0xFF000000)).astype(np.uint32)


def csf_parts(parts, two_d=False):
    """Replace an NVFP4 parts dict's `weight_scale` by `weight_scale.nvfp4_csf_fixed` (U8) and
    `weight_scale.nvfp4_csf_exceptions` (U32), §8.3."""
    out = dict(parts)
    dtype, scales = out.pop("weight_scale")
    assert dtype == "F8_E4M3"
    fixed, exc = encode(scales, two_d=two_d)
    out["weight_scale.nvfp4_csf_fixed"] = ("U8", fixed)
    out["weight_scale.nvfp4_csf_exceptions"] = ("U32", exc)
    return out


def uncsf_parts(parts, rows, scale_cols):
    """Inverse of csf_parts: decode the pair back to `weight_scale` F8_E4M3 [rows, scale_cols]."""
    out = dict(parts)
    fixed = out.pop("weight_scale.nvfp4_csf_fixed")[1]
    exc = out.pop("weight_scale.nvfp4_csf_exceptions")[1]
    out["weight_scale"] = ("F8_E4M3", decode(fixed, exc, rows, scale_cols))
    return out
