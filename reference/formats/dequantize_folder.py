#!/usr/bin/python3
"""Dequantises every weight of a model folder (plain HF folder or lil-nvfp4-csf container) with this package's
decoders, deciding each module's format from the tensors present (formats.md §6), and writes one F32 tensor
per stored main tensor (PLE shards each under their own name) to OUT.safetensors.

usage: /usr/bin/python3 dequantize_folder.py FOLDER OUT.safetensors
FP8 block size: `weight_block_size` from config.json / hf_quant_config.json when present, else the square block
b in (128, 64, 32, 16) whose ceil-grid matches the stored grid. Used by tests/unit/formats/fixture_decode_test.cc.
"""
import glob
import json
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import csf  # noqa: E402
import dense  # noqa: E402
import fp8  # noqa: E402
import mxfp  # noqa: E402
import nvfp4  # noqa: E402
from safetensors_io import read_safetensors, to_array, write_safetensors  # noqa: E402

SUFFIXES = ("weight_scale.nvfp4_csf_fixed", "weight_scale.nvfp4_csf_exceptions", "weight_global_scale",
            "input_global_scale", "weight_scale_inv", "weight_scale_2", "weight_packed", "weight_scale",
            "input_scale", "weight")


def split_name(name):
    for s in SUFFIXES:
        if name.endswith("." + s):
            return name[: -len(s) - 1], s
    return None, None


def block_from_config(folder):
    for f in glob.glob(os.path.join(folder, "**", "*.json"), recursive=True):
        try:
            text = open(f).read()
        except OSError:
            continue
        m = re.search(r'"weight_block_size"\s*:\s*\[\s*(\d+)\s*,\s*(\d+)\s*\]', text)
        if m:
            return int(m.group(1)), int(m.group(2))
    return None


def main():
    folder, out = sys.argv[1], sys.argv[2]
    tensors = {}
    for f in sorted(glob.glob(os.path.join(folder, "**", "*.safetensors"), recursive=True)):
        for name, v in read_safetensors(f).items():
            if name != "__metadata__":
                tensors[name] = (v[0], to_array(*v))
    modules = {}
    for name, v in tensors.items():
        mod, suf = split_name(name)
        if mod is not None:
            modules.setdefault(mod, {})[suf] = v
    cfg_block = block_from_config(folder)
    result = {}
    for mod, parts in sorted(modules.items()):
        main_suf = "weight_packed" if "weight_packed" in parts else "weight"
        if main_suf not in parts:
            continue  # a table's shared scale, handled with its shards
        # A PLE shard takes what it lacks from its table module ("<table>.shard_<j>" -> "<table>").
        m = re.match(r"^(.*)\.shard_\d+$", mod)
        if m:
            for suf, v in modules.get(m.group(1), {}).items():
                parts.setdefault(suf, v)
        dt, w = parts[main_suf]
        sc = parts.get("weight_scale")
        if dt in ("BF16", "F16", "F32") and sc is None and "weight_scale_inv" not in parts:
            val = dense.dequantize_dense({"weight": (dt, w)})
        elif main_suf == "weight_packed" and sc is not None and sc[0] == "F8_E4M3":
            val = nvfp4.dequantize_nvfp4_ct(parts)
        elif dt in ("U8", "I8", "F4") and (sc is None or sc[0] == "F8_E4M3"):
            p = dict(parts)
            p["weight"] = ("U8", np.asarray(w).view(np.uint8).reshape(w.shape[0], -1))
            if "weight_scale.nvfp4_csf_fixed" in p:
                p = csf.uncsf_parts(p, w.shape[0], p["weight"][1].shape[1] * 2 // 16)
            val = nvfp4.dequantize_nvfp4(p)
        elif dt in ("U8", "I8"):
            val = mxfp.dequantize_mxfp4({"weight": ("U8", w.view(np.uint8)), "weight_scale": sc})
        elif dt == "F8_E4M3":
            n, k = w.shape
            sname = "weight_scale_inv" if "weight_scale_inv" in parts else "weight_scale"
            s_dt, s = parts[sname]
            if sname == "weight_scale" and s.size == 1:
                val = fp8.dequantize_fp8_tensor(parts)
            elif sname == "weight_scale" and s.size == n and k != 32:
                val = fp8.dequantize_fp8_channel(parts)
            elif s_dt in ("U8", "F8_E8M0") and s.shape == (n, k // 32) and sname == "weight_scale":
                val = mxfp.dequantize_mxfp8(parts)
            else:
                grid = s.reshape(s.shape[0], s.shape[2]) if s.ndim == 4 else s  # ModelOpt [N/b, 1, K/b, 1]
                block = cfg_block or next((b, b) for b in (128, 64, 32, 16)
                                          if grid.shape == (-(-n // b), -(-k // b)))
                val = fp8.dequantize_fp8_block({"weight": (dt, w), sname: (s_dt, s)}, block=block, scale_name=sname)
        else:
            continue
        result[f"{mod}.{main_suf}"] = ("F32", np.asarray(val, dtype=np.float32).reshape(w.shape[0], -1))
    write_safetensors(out, result)
    print(f"{len(result)} weights from {folder}")


if __name__ == "__main__":
    main()
