#!/usr/bin/python3
"""Writes the bit-exact decode cases of issue 2 part 5: for every weight format, random data plus edge values,
one folder per case (`<case>/model.safetensors` + `config.json`) holding the stored tensors under `m.<suffix>`
and `expected` (F32 [N, K], the dequantisation by this package's Python decoders), and `cases.json` listing
each case's format, shape, block, which tensor plays which part, and the warnings its scales must raise.

usage: /usr/bin/python3 make_decode_cases.py OUT_DIR [--seed N]
The C++ test tests/unit/formats/decode_test.cc runs this and compares its decodes bit-exactly (memcmp of f32).
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import csf  # noqa: E402
import dense  # noqa: E402
import fp8  # noqa: E402
import mxfp  # noqa: E402
import nvfp4  # noqa: E402
from elements import encode_bf16, encode_e2m1, encode_e4m3, pack_e2m1  # noqa: E402
from safetensors_io import write_safetensors  # noqa: E402


def weights(rng, n, k, spread=6.0):
    """Normal values with per-row magnitudes spread over 2^±spread, so block scales vary (and CSF has
    exceptions)."""
    rows = np.exp2(rng.uniform(-spread, spread, size=(n, 1)))
    return (rng.standard_normal((n, k)) * rows).astype(np.float32)


class Cases:
    def __init__(self, out):
        self.out = out
        self.list = []

    def add(self, name, fmt, parts, expected, roles, block=(0, 0), scale_encoding="Plain", warnings=(),
            shape=None, error=None):
        """parts: {suffix: (dtype, array)} or {suffix: (dtype, shape, bytes)}; roles: {part: suffix or [suffixes]}."""
        expected = np.asarray(expected, dtype=np.float32)
        folder = os.path.join(self.out, name)
        os.makedirs(folder, exist_ok=True)
        tensors = {f"m.{s}": v for s, v in parts.items()}
        tensors["expected"] = ("F32", expected)
        write_safetensors(os.path.join(folder, "model.safetensors"), tensors)
        with open(os.path.join(folder, "config.json"), "w") as f:
            json.dump({"model_type": "decode_case"}, f)

        def full(v):
            return [f"m.{x}" for x in v] if isinstance(v, list) else f"m.{v}"
        self.list.append({
            "name": name, "format": fmt, "shape": list(shape or expected.shape), "block": list(block),
            "scale_encoding": scale_encoding, "roles": {k: full(v) for k, v in roles.items()},
            "warnings": list(warnings), "error": error})

    def finish(self):
        with open(os.path.join(self.out, "cases.json"), "w") as f:
            json.dump({"cases": self.list}, f, indent=1)


def dense_cases(c, rng):
    w = weights(rng, 8, 40, 3)
    for fmt, q in (("BF16", dense.quantize_bf16), ("F16", dense.quantize_f16), ("F32", dense.quantize_f32)):
        parts = q(w)
        dtype, arr = parts["weight"]
        arr = arr.copy()
        if fmt == "BF16":  # NaN payloads (quiet, signalling, negative), ±Inf, -0, smallest subnormal
            arr.flat[:7] = [0x7FC1, 0xFFFF, 0x7F81, 0x7F80, 0xFF80, 0x8000, 0x0001]
        elif fmt == "F16":
            arr.flat[:7] = [0x7C01, 0xFE00, 0x7E55, 0x7C00, 0x8000, 0x0001, 0x83FF]
        else:
            arr.view(np.uint32).flat[:5] = [0x7F800001, 0xFFC12345, 0x80000000, 0x00000001, 0x7F800000]
        parts["weight"] = (dtype, arr)
        c.add(f"dense_{fmt.lower()}", fmt, parts, dense.dequantize_dense(parts), {"main": "weight"})


def nvfp4_edges(parts, main="weight"):
    """Zero block, block maxima, negative-zero codes, zero / negative / subnormal scale bytes."""
    packed = parts[main][1].copy()
    scales = parts["weight_scale"][1].copy()
    packed[0, 0:8] = 0x00
    scales[0, 0] = 0x38          # a zero block (scale 1.0)
    packed[1, 0:8] = 0xFF        # -6 everywhere ...
    packed[1, 8:16] = 0x77       # ... and +6, with the largest scale
    scales[1, 0:2] = 0x7E
    packed[2, 0:8] = 0x88        # negative-zero codes
    scales[3, 1] = 0x00          # zero scale (old exports): W_NVFP4_SCALE_ZERO
    scales[4, 2 % scales.shape[1]] = 0xB0  # sign bit set: W_NVFP4_SCALE_NEGATIVE
    scales[5, 0] = 0x01          # smallest subnormal scale 2^-9
    parts[main] = ("U8", packed)
    parts["weight_scale"] = ("F8_E4M3", scales)
    return ["W_NVFP4_SCALE_ZERO", "W_NVFP4_SCALE_NEGATIVE"]


def nvfp4_cases(c, rng):
    w = weights(rng, 32, 64)
    parts = nvfp4.quantize_nvfp4(w, input_amax=3.5)
    warn = nvfp4_edges(parts)
    roles = {"main": "weight", "block_scale": "weight_scale", "global_scale": "weight_scale_2",
             "input_scale": "input_scale"}
    c.add("nvfp4", "NVFP4", parts, nvfp4.dequantize_nvfp4(parts), roles, warnings=warn)

    # The same bytes stored with the F4 dtype: shape counts elements ([N, K]), bytes are identical.
    f4 = dict(parts)
    f4["weight"] = ("F4", [32, 64], parts["weight"][1].tobytes())
    c.add("nvfp4_f4", "NVFP4", f4, nvfp4.dequantize_nvfp4(parts), roles, warnings=warn)

    w = weights(rng, 16, 48)
    parts = nvfp4.quantize_w4a16_nvfp4(w)
    c.add("w4a16_nvfp4", "W4A16_NVFP4", parts, nvfp4.dequantize_nvfp4(parts),
          {"main": "weight", "block_scale": "weight_scale", "global_scale": "weight_scale_2"})

    w = weights(rng, 24, 32)
    parts = nvfp4.quantize_nvfp4_ct(w, input_amax=2.0)
    warn = nvfp4_edges(parts, main="weight_packed")
    c.add("nvfp4_ct", "NVFP4_CT", parts, nvfp4.dequantize_nvfp4_ct(parts),
          {"main": "weight_packed", "block_scale": "weight_scale", "global_scale": "weight_global_scale",
           "input_scale": "input_global_scale"}, warnings=warn)

    # CSF-coded scales, 1-D and 2-D fixed streams, with exceptions at the first and last positions.
    for name, (n, k), two_d in (("csf_nvfp4_1d", (64, 160), False), ("csf_nvfp4_2d", (48, 64), True)):
        w = weights(rng, n, k, spread=9.0)
        parts = nvfp4.quantize_nvfp4(w, input_amax=1.0)
        scales = parts["weight_scale"][1].copy()
        scales[0, 1:] = 0x50 + np.arange(scales.shape[1] - 1, dtype=np.uint8) % 16
        scales[0, 0] = 0x01      # outside row 0's window: the first exception position
        scales[-1, :-1] = 0x20
        scales[-1, -1] = 0x7E    # the last position
        scales[7, :] = 0x38 + np.arange(scales.shape[1], dtype=np.uint8) * 7  # a row wider than any window
        parts["weight_scale"] = ("F8_E4M3", scales)
        expected = nvfp4.dequantize_nvfp4(parts)
        coded = csf.csf_parts(parts, two_d=two_d)
        exc = coded["weight_scale.nvfp4_csf_exceptions"][1]
        assert len(exc) > 2 and (exc[0] & 0xFFFFFF) == 0 and (exc[-1] & 0xFFFFFF) == n * k // 16 - 1, [hex(x) for x in exc]
        assert np.array_equal(csf.decode(coded["weight_scale.nvfp4_csf_fixed"][1], exc, n, k // 16), scales)
        c.add(name, "NVFP4", coded, expected,
              {"main": "weight", "csf_fixed": "weight_scale.nvfp4_csf_fixed",
               "csf_exceptions": "weight_scale.nvfp4_csf_exceptions", "global_scale": "weight_scale_2",
               "input_scale": "input_scale"}, scale_encoding="NvFp4Csf")


def mx_cases(c, rng):
    for sd in ("U8", "F8_E8M0"):
        w = weights(rng, 8, 96)
        parts = mxfp.quantize_mxfp4(w, scale_dtype=sd)
        packed, scales = parts["weight"][1].copy(), parts["weight_scale"][1].copy()
        packed[0, 0:16] = 0
        scales[1, 0] = 0x00   # 2^-127: subnormal products
        scales[2, 1] = 0xFE   # 2^127: 6 · 2^127 overflows to Inf
        packed[2, 16:32] = 0x77
        scales[3, 2] = 0x7F
        parts["weight"], parts["weight_scale"] = ("U8", packed), (sd, scales)
        with np.errstate(over="ignore"):
            expected = mxfp.dequantize_mxfp4(parts)
        c.add(f"mxfp4_{sd.lower()}", "MXFP4", parts, expected, {"main": "weight", "block_scale": "weight_scale"})

        w = weights(rng, 8, 64)
        parts = mxfp.quantize_mxfp8(w, scale_dtype=sd)
        x, scales = parts["weight"][1].copy(), parts["weight_scale"][1].copy()
        x[0, 0:4] = [0x7F, 0xFF, 0x80, 0x00]  # NaN codes, -0, +0
        scales[1, 0] = 0x00
        x[1, 0:4] = [0x01, 0x81, 0x7E, 0x07]  # subnormals times 2^-127
        scales[2, 1] = 0xFE
        x[2, 32:35] = [0x7E, 0xFE, 0x3F]      # ±448 · 2^127 = ±Inf
        parts["weight"], parts["weight_scale"] = ("F8_E4M3", x), (sd, scales)
        with np.errstate(over="ignore"):
            expected = mxfp.dequantize_mxfp8(parts)
        c.add(f"mxfp8_{sd.lower()}", "MXFP8", parts, expected, {"main": "weight", "block_scale": "weight_scale"})


def fp8_nan_edges(parts):
    x = parts["weight"][1].copy()
    x[0, 0:5] = [0x7F, 0xFF, 0x80, 0x7E, 0x01]
    parts["weight"] = ("F8_E4M3", x)


def fp8_cases(c, rng):
    for sd, shape in (("F32", ()), ("BF16", (1,))):
        parts = fp8.quantize_fp8_tensor(weights(rng, 10, 20, 2), scale_dtype=sd, scale_shape=shape, input_amax=5.0)
        fp8_nan_edges(parts)
        c.add(f"fp8_tensor_{sd.lower()}", "FP8_TENSOR", parts, fp8.dequantize_fp8_tensor(parts),
              {"main": "weight", "global_scale": "weight_scale", "input_scale": "input_scale"})
    for sd, column in (("F32", False), ("BF16", True)):
        parts = fp8.quantize_fp8_channel(weights(rng, 12, 24), scale_dtype=sd, column=column)
        fp8_nan_edges(parts)
        c.add(f"fp8_channel_{sd.lower()}", "FP8_CHANNEL", parts, fp8.dequantize_fp8_channel(parts),
              {"main": "weight", "block_scale": "weight_scale"})
    blocks = (
        ("fp8_block128_f32", (200, 300), (128, 128), "F32", "weight_scale_inv", False),
        ("fp8_block128_bf16", (130, 260), (128, 128), "BF16", "weight_scale_inv", False),
        ("fp8_block32_e8m0", (70, 100), (32, 32), "F8_E8M0", "weight_scale_inv", False),
        ("fp8_block128_4d", (256, 128), (128, 128), "F32", "weight_scale", True),
    )
    for name, (n, k), blk, sd, sname, four_d in blocks:
        parts = fp8.quantize_fp8_block(weights(rng, n, k, 3), block=blk, scale_dtype=sd, scale_name=sname,
                                       four_d=four_d)
        fp8_nan_edges(parts)
        x = parts["weight"][1].copy()
        x[-1, -3:] = [0x7E, 0xFE, 0x01]  # the partial corner tile
        parts["weight"] = ("F8_E4M3", x)
        if sd == "F8_E8M0":
            g = parts[sname][1].copy()
            g[0, 1] = 0x00
            parts[sname] = (sd, g)
        c.add(name, "FP8_BLOCK", parts, fp8.dequantize_fp8_block(parts, block=blk, scale_name=sname),
              {"main": "weight", "block_scale": sname}, block=blk)


def split_cases(c, rng):
    """A split PLE-like table: rows in three shards (5 + 5 + 3), BF16 and FP8 with one per-tensor scale."""
    w = weights(rng, 13, 16, 2)
    cuts = [(0, 5), (5, 10), (10, 13)]
    parts = dense.quantize_bf16(w)
    bits = parts["weight"][1]
    split = {f"shard_{j}.weight": ("BF16", bits[a:b]) for j, (a, b) in enumerate(cuts)}
    c.add("ple_bf16_split", "BF16", split, dense.dequantize_dense(parts),
          {"main": [f"shard_{j}.weight" for j in range(3)]})
    parts = fp8.quantize_fp8_tensor(w, scale_dtype="BF16", scale_shape=(1,))
    split = {f"shard_{j}.weight": ("F8_E4M3", parts["weight"][1][a:b]) for j, (a, b) in enumerate(cuts)}
    split["weight_scale"] = parts["weight_scale"]
    c.add("ple_fp8_split", "FP8_TENSOR", split, fp8.dequantize_fp8_tensor(parts),
          {"main": [f"shard_{j}.weight" for j in range(3)], "global_scale": "weight_scale"})


def error_cases(c, rng):
    """One mutation of a good weight per error id that decode_weight must raise (stored in `error`; `expected`
    then holds the unmutated decode and is not compared)."""
    def nv(n=32, k=64):
        return nvfp4.quantize_nvfp4(weights(rng, n, k), input_amax=1.0)
    roles = {"main": "weight", "block_scale": "weight_scale", "global_scale": "weight_scale_2",
             "input_scale": "input_scale"}
    csf_roles = {"main": "weight", "csf_fixed": "weight_scale.nvfp4_csf_fixed",
                 "csf_exceptions": "weight_scale.nvfp4_csf_exceptions", "global_scale": "weight_scale_2",
                 "input_scale": "input_scale"}

    p = nv()
    p["weight_scale"][1][3, 2] = 0x7F
    c.add("err_nvfp4_scale_nan", "NVFP4", p, np.zeros((32, 64)), roles, error="E_NVFP4_SCALE_NAN")
    p = nv()
    p["weight_scale_2"] = ("F32", np.float32(np.nan).reshape(()))
    c.add("err_nvfp4_global_nan", "NVFP4", p, np.zeros((32, 64)), roles, error="E_NVFP4_GLOBAL_NONFINITE")
    p = nv()
    p["weight_scale"] = ("F8_E4M3", p["weight_scale"][1][:, :3])
    c.add("err_nvfp4_scale_shape", "NVFP4", p, np.zeros((32, 64)), roles, error="E_NVFP4_SCALE_SHAPE")
    p = nv()
    del p["weight_scale_2"]
    r = dict(roles)
    del r["global_scale"]
    c.add("err_nvfp4_global_missing", "NVFP4", p, np.zeros((32, 64)), r, error="E_NVFP4_GLOBAL_MISSING")

    # CSF: an exception that writes a NaN scale byte; unsorted exceptions; a base above 240; a bad fixed size.
    p = nv()
    p["weight_scale"][1][-1, :] = [0x20, 0x20, 0x20, 0x7F]  # 0x7F lies outside the row's window
    p = csf.csf_parts(p)
    assert p["weight_scale.nvfp4_csf_exceptions"][1][-1] == (32 * 4 - 1) | (0x7F << 24)
    c.add("err_csf_exception_nan", "NVFP4", p, np.zeros((32, 64)), csf_roles, scale_encoding="NvFp4Csf",
          error="E_NVFP4_SCALE_NAN")
    p = csf.csf_parts(nv())
    p["weight_scale.nvfp4_csf_exceptions"] = ("U32", np.array([9, 4], dtype=np.uint32))
    c.add("err_csf_exc_order", "NVFP4", p, np.zeros((32, 64)), csf_roles, scale_encoding="NvFp4Csf",
          error="E_CSF_EXC_ORDER")
    p = csf.csf_parts(nv())
    p["weight_scale.nvfp4_csf_exceptions"] = ("U32", np.array([32 * 4], dtype=np.uint32))
    c.add("err_csf_exc_range", "NVFP4", p, np.zeros((32, 64)), csf_roles, scale_encoding="NvFp4Csf",
          error="E_CSF_EXC_RANGE")
    p = csf.csf_parts(nv())
    p["weight_scale.nvfp4_csf_fixed"][1][16 + 2 * 16 + 5] = 241  # slab 1, row 5's base
    c.add("err_csf_base_range", "NVFP4", p, np.zeros((32, 64)), csf_roles, scale_encoding="NvFp4Csf",
          error="E_CSF_BASE_RANGE")
    p = csf.csf_parts(nv())
    p["weight_scale.nvfp4_csf_fixed"] = ("U8", p["weight_scale.nvfp4_csf_fixed"][1][:-16])
    c.add("err_csf_geometry", "NVFP4", p, np.zeros((32, 64)), csf_roles, scale_encoding="NvFp4Csf",
          error="E_CSF_GEOMETRY")

    p = mxfp.quantize_mxfp8(weights(rng, 8, 64))
    p["weight_scale"][1][5, 1] = 0xFF
    c.add("err_mx_scale_nan", "MXFP8", p, np.zeros((8, 64)), {"main": "weight", "block_scale": "weight_scale"},
          error="E_MX_SCALE_NAN")
    p = fp8.quantize_fp8_block(weights(rng, 40, 40), block=(32, 32), scale_dtype="F32")
    p["weight_scale_inv"][1][1, 0] = -1.0
    c.add("err_fp8_scale_negative", "FP8_BLOCK", p, np.zeros((40, 40)),
          {"main": "weight", "block_scale": "weight_scale_inv"}, block=(32, 32), error="E_FP8_SCALE_NONFINITE")
    p = nvfp4.quantize_nvfp4_ct(weights(rng, 16, 32))
    p["weight_global_scale"] = ("F32", np.zeros(1, dtype=np.float32))
    c.add("err_ct_global_zero", "NVFP4_CT", p, np.zeros((16, 32)),
          {"main": "weight_packed", "block_scale": "weight_scale", "global_scale": "weight_global_scale"},
          error="E_CT_GLOBAL_NONPOSITIVE")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=20261129)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    c = Cases(args.out)
    dense_cases(c, rng)
    nvfp4_cases(c, rng)
    mx_cases(c, rng)
    fp8_cases(c, rng)
    split_cases(c, rng)
    error_cases(c, rng)
    c.finish()
    print(f"{len(c.list)} cases in {args.out}")


if __name__ == "__main__":
    main()
