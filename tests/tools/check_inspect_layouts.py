#!/usr/bin/python3
"""End-to-end test of `bloomery inspect` and `bloomery tensor` on one generated folder per layout
(reference/formats/make_layout_folders.py): the format printed per record, CSF-coded and skipped records, every
stored tensor accounted for exactly once, each decodable record equal bit for bit to the Python dequantisation,
and named refusals of corrupted copies.

usage: check_inspect_layouts.py BLOOMERY REFERENCE_FORMATS_DIR WORK_DIR
"""
import glob
import json
import os
import shutil
import subprocess
import sys

import numpy as np

BLOOMERY, REF, WORK = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path.insert(0, REF)
from safetensors_io import read_safetensors, write_safetensors  # noqa: E402

failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("FAIL:", msg)


def run(*args):
    return subprocess.run([BLOOMERY, *args], capture_output=True, text=False, timeout=300)


def stored_names(folder):
    """Every tensor name stored in the folder's safetensors files (a serving folder: its container's)."""
    cfg_path = os.path.join(folder, "config.json")
    if os.path.exists(cfg_path):
        cfg = json.load(open(cfg_path))
        qc = cfg.get("quantization_config") or cfg.get("text_config", {}).get("quantization_config") or {}
        if qc.get("quant_method") == "nvfp4_csf":
            folder = qc["checkpoint_root"]
    names = []
    files = glob.glob(os.path.join(folder, "*.safetensors")) + glob.glob(os.path.join(folder, "tensors", "*.safetensors"))
    for path in files:
        names += [n for n in read_safetensors(path) if n != "__metadata__"]
    return names


shutil.rmtree(WORK, ignore_errors=True)
subprocess.run(["/usr/bin/python3", os.path.join(REF, "make_layout_folders.py"), WORK], check=True)
manifest = json.load(open(os.path.join(WORK, "manifest.json")))
tmp_out = os.path.join(WORK, "decoded.f32")

for lay in manifest["layouts"]:
    folder = os.path.join(WORK, lay["folder"])
    res = run("inspect", "--formats-only", "--json", folder)
    check(res.returncode == 0, f"{lay['name']}: inspect exit {res.returncode}: {res.stderr.decode()[-500:]}")
    if res.returncode != 0:
        continue
    out = json.loads(res.stdout)
    records = {t["name"]: t for t in out["tensors"]}
    for name, fmt in lay["formats"].items():
        check(name in records, f"{lay['name']}: no record {name}")
        if name in records:
            check(records[name]["format"] == fmt,
                  f"{lay['name']}: {name}: format {records[name]['format']}, expected {fmt}")
    for name in lay["csf"]:
        check(records.get(name, {}).get("csf_scales") is True, f"{lay['name']}: {name} not reported as csf scales")
    for name, rec in records.items():
        check(rec["skipped"] == (name in lay["skipped"]), f"{lay['name']}: {name}: skipped = {rec['skipped']}")
    # Every stored tensor belongs to exactly one record.
    listed = [t for rec in out["tensors"] for t in rec["tensors"]]
    stored = stored_names(folder)
    check(sorted(listed) == sorted(stored), f"{lay['name']}: records list {len(listed)} tensors, folder stores "
          f"{len(stored)}: {sorted(set(listed) ^ set(stored))[:5]}")
    check(out["totals"]["all"]["count"] == len(out["tensors"]), f"{lay['name']}: totals count")
    check(sum(v["bytes"] for v in out["totals"]["by_format"].values()) == out["totals"]["all"]["bytes"],
          f"{lay['name']}: per-format bytes do not add up")
    check(sum(v["bytes"] for v in out["totals"]["by_role"].values()) == out["totals"]["all"]["bytes"],
          f"{lay['name']}: per-role bytes do not add up")
    text = run("inspect", "--formats-only", folder)
    check(text.returncode == 0 and b"totals by format" in text.stdout, f"{lay['name']}: text inspect failed")
    for name, exp_rel in lay["decode"].items():
        if os.path.exists(tmp_out):
            os.remove(tmp_out)
        r = run("tensor", folder, name, "--out", tmp_out)
        check(r.returncode == 0, f"{lay['name']}: tensor {name}: exit {r.returncode}: {r.stderr.decode()[-300:]}")
        if r.returncode != 0:
            continue
        got = np.fromfile(tmp_out, dtype="<u4")
        want = np.fromfile(os.path.join(WORK, exp_rel), dtype="<u4")
        check(got.shape == want.shape and np.array_equal(got, want),
              f"{lay['name']}: tensor {name}: decoded bits differ from the Python dequantisation "
              f"({int(np.sum(got != want)) if got.shape == want.shape else 'shape'} differ)")
    for name in lay["skipped"]:
        r = run("tensor", folder, name, "--out", tmp_out)
        check(r.returncode != 0 and b"E_TOOL_SKIPPED" in r.stderr, f"{lay['name']}: tensor {name} was not refused")


def corrupt(src_name, dst_name, mutate):
    """A copy of a single-file layout with its tensors mutated: mutate(dict of name -> (dtype, shape, raw))."""
    src, dst = os.path.join(WORK, src_name), os.path.join(WORK, dst_name)
    shutil.copytree(src, dst)
    path = os.path.join(dst, "model.safetensors")
    tensors = {k: v for k, v in read_safetensors(path).items() if k != "__metadata__"}
    mutate(tensors)
    write_safetensors(path, tensors)
    return dst


def expect_error(folder, error_id):
    r = run("inspect", "--formats-only", "--json", folder)
    got = json.loads(r.stdout).get("error", {}).get("id") if r.stdout else None
    check(r.returncode == 1 and got == error_id, f"{folder}: expected {error_id}, got exit {r.returncode} id {got}")


E = "model.layers.0.mlp.experts.1.down_proj"
expect_error(corrupt("modelopt_nvfp4", "bad_global", lambda t: t.pop(E + ".weight_scale_2")), "E_NVFP4_GLOBAL_MISSING")
expect_error(corrupt("modelopt_nvfp4", "bad_orphan", lambda t: t.pop(E + ".weight")), "E_Q_ORPHAN_COMPANION")


def missing_expert(t):
    for k in [k for k in t if k.startswith("model.layers.0.mlp.experts.1.up_proj.")]:
        t.pop(k)


expect_error(corrupt("modelopt_nvfp4", "bad_expert", missing_expert), "E_MOE_EXPERT_MISSING")


def bad_scale_shape(t):
    dtype, shape, raw = t[E + ".weight_scale"]
    t[E + ".weight_scale"] = (dtype, [shape[0] // 2, shape[1] * 2], raw)


expect_error(corrupt("modelopt_nvfp4", "bad_scale", bad_scale_shape), "E_NVFP4_SCALE_SHAPE")
r = run("tensor", os.path.join(WORK, "single_bf16"), "no.such.tensor")
check(r.returncode != 0 and b"E_TOOL_NO_TENSOR" in r.stderr, "tensor: an unknown name was not refused")

print(f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
