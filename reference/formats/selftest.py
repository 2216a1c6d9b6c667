#!/usr/bin/python3
"""Self-checks of the reference against values stated in formats.md (§5, §8.4, §8.5); exits non-zero on failure.
Run by tests/unit/formats/decode_test.cc (PythonSelfTestPasses)."""
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import csf  # noqa: E402
import fp8  # noqa: E402
import mxfp  # noqa: E402
import nvfp4  # noqa: E402
from elements import (decode_bf16, decode_e2m1, decode_e4m3, decode_e8m0, decode_f16, encode_bf16,  # noqa: E402
                      encode_e2m1, encode_e4m3, f32_bits)

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)


# §5.2: the table and the decode formula agree; the encoder's ties.
for c in range(16):
    e, m = (c >> 1) & 3, c & 1
    v = 0.5 * m if e == 0 else 2.0 ** (e - 1) * (1 + m / 2)
    v = -v if c & 8 else v
    check(decode_e2m1(np.uint8(c)) == v and math.copysign(1, decode_e2m1(np.uint8(c))) == math.copysign(1, v),
          f"e2m1 code {c}")
ties = {0.25: 0.0, 0.75: 1.0, 1.25: 1.0, 1.75: 2.0, 2.5: 2.0, 3.5: 4.0, 5.0: 4.0, 7.0: 6.0, 100.0: 6.0}
for x, want in ties.items():
    check(decode_e2m1(encode_e2m1(np.float32(x))) == want, f"e2m1 encode {x}")
    check(decode_e2m1(encode_e2m1(np.float32(-x))) == -want, f"e2m1 encode -{x}")

# §5.3: formula, extremes, NaN codes, clamp then RNE.
for b in range(256):
    s, e, m = b >> 7, (b >> 3) & 15, b & 7
    got = decode_e4m3(np.uint8(b))
    if e == 15 and m == 7:
        check(np.isnan(got), f"e4m3 {b:#x} NaN")
        continue
    v = 2.0 ** -6 * (m / 8) if e == 0 else 2.0 ** (e - 7) * (1 + m / 8)
    check(got == (-v if s else v) and np.signbit(got) == bool(s), f"e4m3 {b:#x}")
    check(encode_e4m3(got) == b, f"e4m3 roundtrip {b:#x}")
check(encode_e4m3(np.float32(1000.0)) == 0x7E and encode_e4m3(np.float32(-1e30)) == 0xFE, "e4m3 clamps to 448")
check(encode_e4m3(np.float32(2.0 ** -10)) == 0x00 and encode_e4m3(np.float32(3 * 2.0 ** -10)) == 0x02,
      "e4m3 subnormal ties to even")

# §5.5: 2^(b-127), byte 0 exact, 0xFF NaN.
for b in range(255):
    check(decode_e8m0(np.uint8(b)) == np.float32(2.0 ** (b - 127)), f"e8m0 {b}")
check(np.isnan(decode_e8m0(np.uint8(255))), "e8m0 0xFF NaN")

# §5.1: F16 against the IEEE formula for every finite pattern; BF16 is the upper half of F32.
h = np.arange(65536, dtype=np.uint32).astype(np.uint16)
e, m = (h >> 10) & 31, (h & 1023).astype(np.float64)
ref = np.where(e == 0, m * 2.0 ** -24, (1 + m / 1024) * np.exp2(e.astype(np.float64) - 15))
ref = np.where(h & 0x8000, -ref, ref)
fin = e != 31
check(np.array_equal(decode_f16(h)[fin].astype(np.float64), ref[fin]), "f16 decode")
check(np.array_equal(decode_f16(h[fin]), h[fin].view(np.float16).astype(np.float32)), "f16 matches IEEE cast")
x = np.array([1.0, -3.5, 2.0 ** -130, 1.5 * 2.0 ** 100], dtype=np.float32)
check(np.array_equal(decode_bf16(encode_bf16(x)), x), "bf16 roundtrip of representable values")
check(encode_bf16(np.float32(1.00390625)) == 0x3F80 and encode_bf16(np.float32(1.01171875)) == 0x3F82,
      "bf16 ties to even")

# §8.4 / §8.5: csf roundtrip, base rule, slicing equals decode-then-crop.
rng = np.random.default_rng(7)
s = rng.integers(0x20, 0x60, size=(64, 12)).astype(np.uint8)
s[5, 3] = 0x7E
fixed, exc = csf.encode(s)
check(np.array_equal(csf.decode(fixed, exc, 64, 12), s), "csf roundtrip")
check(all(fixed.reshape(4, -1)[:, :16].reshape(-1) <= 240), "csf bases <= 240")
f2, e2 = csf.encode(s, two_d=True)
check(f2.shape == (4, 16 * 7) and np.array_equal(csf.decode(f2, e2, 64, 12), s), "csf 2-D")
sf, se = csf.slice_rows_cols(fixed, exc, 64, 12, 16, 48, 4, 10)
check(np.array_equal(csf.decode(sf, se, 32, 6), s[16:48, 4:10]), "csf slice")
one = np.full((16, 2), 7, dtype=np.uint8)
f1, e1 = csf.encode(one)
check(f1[0] == 0 and len(e1) == 0, "csf lowest base on ties")
for bad, id_ in (((np.array([5, 3], np.uint32)), "E_CSF_EXC_ORDER"), ((np.array([3, 3], np.uint32)), "E_CSF_EXC_ORDER"),
                 ((np.array([64 * 12], np.uint32)), "E_CSF_EXC_RANGE")):
    try:
        csf.decode(fixed, bad, 64, 12)
        check(False, id_)
    except ValueError as err:
        check(id_ in str(err), id_)

# Quantisers reproduce their input where it is representable.
# amax 10.5 makes weight_scale_2 = 2^-8 exactly, and the block scale 448: every element is e2m1 × 1.75.
w = np.array([[0.875, -1.75, 10.5, 0.0] * 4] * 2, dtype=np.float32)
p = nvfp4.quantize_nvfp4(w)
check(np.array_equal(nvfp4.dequantize_nvfp4(p), w), "nvfp4 exact values")
p = mxfp.quantize_mxfp8(np.tile(np.float32([1.0, -2.0, 448.0, 0.125]), (2, 8)))
check(np.array_equal(mxfp.dequantize_mxfp8(p), np.tile(np.float32([1.0, -2.0, 448.0, 0.125]), (2, 8))), "mxfp8")
wb = np.arange(1, 301, dtype=np.float32).reshape(3, 100)
p = fp8.quantize_fp8_block(wb, block=(2, 32), scale_dtype="F32")
check(p["weight_scale_inv"][1].shape == (2, 4), "fp8 block grid is ceil-sized")
check(np.allclose(fp8.dequantize_fp8_block(p, block=(2, 32)), wb, rtol=1 / 16), "fp8 block accuracy")

if failures:
    print("FAILED:", *failures, sep="\n  ")
    sys.exit(1)
print("reference/formats selftest: ok")
