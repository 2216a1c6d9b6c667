"""Rebuilds a trained master (train.py --save-master's npz) from its committed BF16 folder, with numpy only: the
BF16 export holds every checkpoint tensor of the master with its exact values (the master is BF16 values kept
as f32), and the training log holds the loss history. So a layout can be added later (train.py --from-master
with --layouts) without retraining, also for a family whose master was not kept.

    cd reference && python3 -m trained.master_from_folder FAMILY BF16_FOLDER TRAINING_LOG OUT.npz
    bash reference/trained/rebuild_masters.sh OUT_DIR     # every family's, from tests/fixtures/trained

It refuses a folder tensor that is not BF16, F32 or I64, and with --check MASTER.npz compares the rebuilt master
with a saved one, name by name and bit for bit."""

import argparse
import json
import os
import re
import struct
import sys

import numpy as np


def read_folder(folder):
    """{name: f32 array} over every safetensors shard of the folder."""
    out = {}
    for fn in sorted(os.listdir(folder)):
        if not fn.endswith(".safetensors"):
            continue
        with open(os.path.join(folder, fn), "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            header = json.loads(f.read(n))
            base = 8 + n
            for name, h in header.items():
                if name == "__metadata__":
                    continue
                a, b = h["data_offsets"]
                f.seek(base + a)
                raw = f.read(b - a)
                if h["dtype"] == "BF16":
                    v = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
                elif h["dtype"] == "F32":
                    v = np.frombuffer(raw, dtype="<f4").copy()
                elif h["dtype"] == "I64":  # the PLE table's hashing constants
                    v = np.frombuffer(raw, dtype="<i8").copy()
                else:
                    sys.exit(f"FAIL {fn}: tensor {name}: expected BF16, F32 or I64, found {h['dtype']}")
                out[name] = v.reshape(h["shape"])
    return out


def read_history(log):
    """[(step, loss, draft loss)] from train.py's log lines '[fam] step N loss L draft D ...', or from a
    saved history (logs/<family>.hist.json: a master's own meta, for a run whose step log was not kept)."""
    if log.endswith(".json"):
        with open(log) as f:
            return json.load(f)["hist"]
    pat = re.compile(r"step\s+(\d+) loss ([0-9.]+) draft ([0-9.]+)")
    hist = []
    with open(log) as f:
        for line in f:
            m = pat.search(line)
            if m:
                hist.append([int(m.group(1)), float(m.group(2)), float(m.group(3))])
    return hist


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("family")
    ap.add_argument("folder")
    ap.add_argument("log")
    ap.add_argument("out")
    ap.add_argument("--check", metavar="MASTER.npz", help="compare with a saved master, bit for bit")
    a = ap.parse_args()
    ck = read_folder(a.folder)
    hist = read_history(a.log)
    if not hist and a.check:  # a log without step lines (qwen4_exp's): the saved master's history
        hist = json.loads(bytes(np.load(a.check)["__meta__"]).decode())["hist"]
    if not ck or not hist:
        sys.exit(f"FAIL {a.folder}: {len(ck)} tensors, {a.log}: {len(hist)} history lines")
    meta = {"family": a.family, "steps": hist[-1][0], "seconds": 0.0, "hist": hist,
            "rebuilt_from": os.path.basename(os.path.normpath(a.folder))}
    np.savez_compressed(a.out, __meta__=np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8),
                        **{"ck:" + k: v for k, v in ck.items()})
    print(f"wrote {a.out}: {len(ck)} tensors, {len(hist)} history points")
    if a.check:
        z = np.load(a.check)
        saved = {k[3:]: z[k] for k in z.files if k.startswith("ck:")}
        missing, extra = sorted(set(saved) - set(ck)), sorted(set(ck) - set(saved))
        differ = [k for k in saved if k in ck and (saved[k].shape != ck[k].shape or
                                                  saved[k].dtype != ck[k].dtype or saved[k].tobytes() != ck[k].tobytes())]
        for what, names in (("missing from the folder", missing), ("not in the master", extra), ("differ", differ)):
            if names:
                print(f"FAIL {len(names)} tensors {what}: {names[:5]}")
        if missing or extra or differ:
            sys.exit(1)
        print(f"PASS rebuilt master equals {a.check}: {len(saved)} tensors bit for bit")


if __name__ == "__main__":
    main()
