"""Element formats of formats.md §5: bit-exact decoders to float32 and reference encoders, numpy only.

Storage convention (shared by every module here): codes are numpy uint8 arrays (E2M1 one code per element,
E4M3/E5M2/E8M0 one byte per element), BF16 and F16 are uint16 bit patterns, F32 is float32.

NaN policy, identical to src/formats/elements.h so C++ and Python decodes compare bit-exactly:
  E4M3 0x7F/0xFF and E8M0 0xFF decode to the quiet NaN 0x7FC00000 with the code's sign bit;
  E5M2 and F16 widen their bits exactly (payload << 13); BF16 is a 16-bit left shift.
"""
import numpy as np

F32 = np.float32
QUIET_NAN = 0x7FC00000


def f32_from_bits(bits):
    return np.asarray(bits, dtype=np.uint32).view(np.float32)


def f32_bits(x):
    return np.asarray(x, dtype=np.float32).view(np.uint32)


# ---- E2M1 (§5.2) -----------------------------------------------------------------------------------------
E2M1_VALUES = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                        -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0], dtype=np.float32)


def decode_e2m1(codes):
    """E2M1 codes (low 4 bits used) -> float32."""
    return E2M1_VALUES[np.asarray(codes, dtype=np.uint8) & 0xF]


def encode_e2m1(x):
    """Round to nearest, ties to even, saturating at ±6 (§5.2 thresholds). Sign bit set when x < 0."""
    x = np.asarray(x, dtype=np.float32)
    a = np.abs(x)
    mag = np.select(
        [a <= 0.25, a < 0.75, a <= 1.25, a < 1.75, a <= 2.5, a < 3.5, a <= 5.0],
        [0, 1, 2, 3, 4, 5, 6], default=7).astype(np.uint8)
    return np.where(x < 0, mag | 8, mag).astype(np.uint8)


def pack_e2m1(codes):
    """[..., K] codes -> [..., K/2] bytes: element 2j in the low nibble, 2j+1 in the high nibble (§6.2)."""
    codes = np.asarray(codes, dtype=np.uint8)
    assert codes.shape[-1] % 2 == 0
    return (codes[..., 0::2] & 0xF) | ((codes[..., 1::2] & 0xF) << 4)


def unpack_e2m1(packed):
    packed = np.asarray(packed, dtype=np.uint8)
    out = np.empty(packed.shape[:-1] + (packed.shape[-1] * 2,), dtype=np.uint8)
    out[..., 0::2] = packed & 0xF
    out[..., 1::2] = packed >> 4
    return out


# ---- E4M3fn (§5.3) ---------------------------------------------------------------------------------------
def decode_e4m3(b):
    b = np.asarray(b, dtype=np.uint8).astype(np.uint32)
    sign = (b & 0x80) << 24
    e = (b >> 3) & 0xF
    m = b & 0x7
    normal = sign | ((e + 120) << 23) | (m << 20)
    # Subnormal: m · 2^-9 exactly (as an f32 value), sign applied as a bit so 0x80 is -0.
    sub = f32_bits((m.astype(np.float32) * F32(2.0 ** -9))) | sign
    bits = np.where(e == 0, sub, normal)
    bits = np.where((b & 0x7F) == 0x7F, sign | QUIET_NAN, bits)
    return f32_from_bits(bits.astype(np.uint32))


def encode_e4m3(x):
    """Clamp to ±448, then round to nearest, ties to even (§5.3). NaN -> 0x7F (sign kept)."""
    x = np.asarray(x, dtype=np.float32)
    neg = np.signbit(x)
    a = np.minimum(np.abs(x).astype(np.float64), 448.0)
    nan = np.isnan(x)
    a = np.where(nan, 0.0, a)
    _, e2 = np.frexp(a)              # a = f · 2^e2, f in [0.5, 1)
    e = np.where(a < 2.0 ** -6, -6, e2 - 1)  # unbiased exponent of the binade (subnormals and 0 share -6)
    step = np.ldexp(1.0, e - 3)      # spacing of E4M3 values in that binade
    q = np.rint(a / step)            # exact division by a power of two; rint = ties to even
    # Codes are monotonic in magnitude, so the code is the binade's first code plus q (a carry of q = 16 into
    # the next binade lands on the right code; subnormals: e = -6, first code 0).
    code = np.where(e == -6, q, (e + 7) * 8 + (q - 8)).astype(np.int64)
    code = np.where(nan, 0x7F, code)
    return (code.astype(np.uint8) | np.where(neg, 0x80, 0).astype(np.uint8)).astype(np.uint8)


# ---- E5M2 (§5.4), F16, BF16 (§5.1) -----------------------------------------------------------------------
def decode_f16(h):
    h = np.asarray(h, dtype=np.uint16).astype(np.uint32)
    sign = (h & 0x8000) << 16
    e = (h >> 10) & 0x1F
    m = h & 0x3FF
    normal = sign | ((e + 112) << 23) | (m << 13)
    special = sign | 0x7F800000 | (m << 13)
    sub = f32_bits(m.astype(np.float32) * F32(2.0 ** -24)) | sign
    bits = np.where(e == 0, sub, np.where(e == 0x1F, special, normal))
    return f32_from_bits(bits.astype(np.uint32))


def encode_f16(x):
    """IEEE binary16 round to nearest even (numpy's conversion), returned as uint16 bits."""
    return np.asarray(x, dtype=np.float32).astype(np.float16).view(np.uint16)


def decode_e5m2(b):
    return decode_f16(np.asarray(b, dtype=np.uint8).astype(np.uint16) << 8)


def decode_bf16(u):
    return f32_from_bits(np.asarray(u, dtype=np.uint16).astype(np.uint32) << 16)


def encode_bf16(x):
    """float32 -> bf16 bits, round to nearest even; NaN stays NaN (quiet bit forced)."""
    bits = np.asarray(f32_bits(x), dtype=np.uint32)
    sixteen = np.uint32(16)
    # In uint64 so the rounding carry of 0xFFFFxxxx patterns cannot wrap.
    rounded = (bits.astype(np.uint64) + np.uint64(0x7FFF) + ((bits >> sixteen) & np.uint32(1))) >> np.uint64(16)
    nan = np.isnan(np.asarray(x, dtype=np.float32))
    out = np.where(nan, (bits >> sixteen) | np.uint32(0x40), rounded)
    return out.astype(np.uint16)


# ---- E8M0 (§5.5) -----------------------------------------------------------------------------------------
def decode_e8m0(b):
    b = np.asarray(b, dtype=np.uint8).astype(np.uint32)
    bits = np.where(b == 0xFF, QUIET_NAN, np.where(b == 0, 0x00400000, b << 23))
    return f32_from_bits(bits.astype(np.uint32))


def encode_e8m0(exponent):
    """Unbiased exponent e (integer array) -> byte e + 127; e must lie in [-127, 127]."""
    e = np.asarray(exponent, dtype=np.int64)
    if np.any(e < -127) or np.any(e > 127):
        raise ValueError("E8M0 exponent out of [-127, 127]")
    return (e + 127).astype(np.uint8)


def ceil_log2(v):
    """Exact ceil(log2(v)) for positive finite v (float64 frexp, no log rounding)."""
    f, e = np.frexp(np.asarray(v, dtype=np.float64))
    return np.where(f == 0.5, e - 1, e).astype(np.int64)
