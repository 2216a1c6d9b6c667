"""Writes the checkpoint folders of a saved trained master (train.py --save-master) with the fixture writers,
on any machine with numpy: no torch, no transformers, no GPU. It is the export half of train.py's --from-master;
the goldens (transformers' f32 forward) still need the GPU machine, so this writes none.

    cd reference && python3 -m trained.export_master MASTER.npz TOKENIZER_JSON OUT_ROOT

TOKENIZER_JSON: the family's trained tokenizer.json. The BPE is trained on the same chapters with the same
specials for both Qwen families (train.train_tokenizer), so the committed qwen3_next one serves qwen4_exp.
The folders land in OUT_ROOT/tests/fixtures/models/<family>-<layout> (gen.write_folder; move them to
tests/fixtures/trained); the engine's perplexity on them must
equal the PPL that train.py logged for the master (the check that the export is the one the device made)."""

import argparse
import json
import os
import sys

import numpy as np

from . import tconfig as TC

TC.apply()  # before any other fixtures module reads the configs
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from fixtures import gen as G  # noqa: E402
from fixtures import layouts as LY  # noqa: E402
from . import train as T  # noqa: E402  (load_master, folder_bytes: numpy only)


# In fixtures/models.py's order (VOCAB + 100 onwards).
MULTIMODAL_IDS = {
    "qwen4_exp": ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id"),
    "glm5_next": ("image_token_id", "video_token_id", "image_start_token_id", "image_end_token_id",
                  "video_start_token_id", "video_end_token_id"),
}


def config_from_template(folder):
    """gen.config_dict without transformers: config.json of a committed random fixture of the same family and
    layout (transformers' own serialisation of the same config class), with every key the fixtures' config
    defines set to its trained value (tconfig.apply changes the vocabulary and the sparse budgets)."""
    from fixtures import configs as C

    def config_dict(family, qc=None):
        meta = os.path.join(folder, "metadata", "config.json")
        with open(meta if os.path.exists(meta) else os.path.join(folder, "config.json")) as f:
            d = json.load(f)
        text = d.get("text_config", d)
        spec = {"qwen4_exp": C.QWEN4_TEXT, "qwen3_next": C.QWEN3_NEXT, "glm5_next": C.GLM_TEXT}[family]
        for k, v in spec.items():
            if k in text and text[k] != v:
                print(f"  config {k}: {text[k]} -> {v}")
                text[k] = v
        # The vision token ids sit past the text vocabulary (fixtures/models.py: VOCAB + 100, ...); the template's
        # count from the random fixtures' vocabulary, so they are moved to the trained one's.
        for i, k in enumerate(MULTIMODAL_IDS.get(family, ())):
            if k in d:
                d[k] = C.VOCAB + 100 + i
        if qc is not None:
            d["quantization_config"] = qc
            if family == "qwen4_exp":
                text["quantization_config"] = qc
        return d

    return config_dict


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("master")
    ap.add_argument("tokenizer_json")
    ap.add_argument("out_root")
    ap.add_argument("--config-templates", metavar="DIR",
                    help="without transformers: take config.json from DIR/<family>-<layout> (the random fixtures, "
                         "tests/fixtures/models) with the trained values of the fixtures' config keys")
    a = ap.parse_args()
    with np.load(a.master) as z:
        family = json.loads(bytes(z["__meta__"]).decode())["family"]
    ck, hist, done, secs = T.load_master(a.master, family)
    with open(a.tokenizer_json) as f:
        tk_json = f.read()
    print(f"[{family}] master: {done} steps in {secs:.1f}s, last loss {hist[-1][1]:.4f}")
    for lay in TC.LAYOUTS[family]:
        if a.config_templates:  # write_folder asks gen.config_dict for the layout it writes
            G.config_dict = config_from_template(os.path.join(a.config_templates, f"{family}-{lay}"))
        stored, qlayers = LY.encode(family, lay, ck)
        folder = G.write_folder(family, lay, stored, qlayers, tk_json, a.out_root)
        deq = LY.decode(family, G.read_back(folder, lay))
        if set(deq) != set(ck):
            sys.exit(f"FAIL [{family}-{lay}] the folder's tensor set is not the master's")
        if lay == "bf16":
            err = max(float(np.abs(deq[k] - ck[k]).max()) for k in ck if ck[k].dtype != np.int64)
            if err != 0.0:
                sys.exit(f"FAIL [{family}-{lay}] BF16 folder differs from the master by {err}")
        print(f"PASS [{family}-{lay}] {folder} ({T.folder_bytes(folder) / 1e6:.2f} MB)")


if __name__ == "__main__":
    main()
