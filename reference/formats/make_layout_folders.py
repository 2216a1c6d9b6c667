#!/usr/bin/python3
"""Writes one small model folder per checkpoint layout bloomery reads (formats.md §1–§4, §6–§8), for the
end-to-end test of `bloomery inspect` / `bloomery tensor` (tests/tools/).

Layouts: single-file BF16; sharded with an index; ModelOpt NVFP4 single-format with hf_quant_config.json;
ModelOpt MIXED_PRECISION with container keys (NVFP4 experts, FP8-block MTP experts, FP8 PLE table shards, a
vision tower); compressed-tensors NVFP4; block FP8 (`quant_method: fp8`); MXFP8; a lil-nvfp4-csf container and a
serving folder pointing at it. Encoders and decoders are this package's reference ones (never a producer's code).

OUT/manifest.json lists, per layout: its folder, the format `inspect --json` must print per record, the CSF-coded
records, the skipped records, and for each decodable record a file of the expected f32 values (raw LE) computed by
the Python decoders.

usage: /usr/bin/python3 make_layout_folders.py OUT_DIR [--seed N]
"""
import argparse
import hashlib
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
from safetensors_io import write_safetensors  # noqa: E402

LM = "model.language_model."


def rand(rng, n, k):
    rows = np.exp2(rng.uniform(-3, 3, size=(n, 1)))
    return (rng.standard_normal((n, k)) * rows).astype(np.float32)


class Layout:
    def __init__(self, out, name):
        self.out, self.name = out, name
        self.folder = os.path.join(out, name)
        os.makedirs(self.folder, exist_ok=True)
        self.tensors = {}  # stored name -> (dtype, array)
        self.formats = {}  # record name -> format label inspect must print
        self.csf = []
        self.skipped = []
        self.decode = {}  # record name -> expected file

    def add(self, module, parts, fmt, expected, param="weight"):
        for suffix, value in parts.items():
            self.tensors[module + "." + suffix] = value
        rec = module + "." + param
        self.formats[rec] = fmt
        if expected is not None:
            path = os.path.join(self.out, "expected", self.name, rec + ".f32")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            np.asarray(expected, dtype="<f4").tofile(path)
            self.decode[rec] = os.path.relpath(path, self.out)

    def dense(self, rng, name, shape, dtype="BF16"):
        w = rng.standard_normal(shape).astype(np.float32)
        parts = {"BF16": dense.quantize_bf16, "F16": dense.quantize_f16, "F32": dense.quantize_f32}[dtype](w)
        module, param = name.rsplit(".", 1)
        self.add(module, {param: parts["weight"]}, dtype, dense.dequantize_dense(parts), param=param)

    def config(self, cfg, file="config.json"):
        with open(os.path.join(self.folder, file), "w") as f:
            json.dump(cfg, f, indent=1)

    def write_single(self):
        write_safetensors(os.path.join(self.folder, "model.safetensors"), self.tensors)

    def write_sharded(self, shards=2, subdir=None):
        names = sorted(self.tensors)
        base = os.path.join(self.folder, subdir) if subdir else self.folder
        os.makedirs(base, exist_ok=True)
        weight_map, files = {}, []
        for i in range(shards):
            fname = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
            part = {n: self.tensors[n] for n in names[i::shards]}
            write_safetensors(os.path.join(base, fname), part)
            files.append(fname)
            for n in part:
                weight_map[n] = fname
        return weight_map, files

    def entry(self):
        return {"name": self.name, "folder": self.name, "formats": self.formats, "csf": self.csf,
                "skipped": self.skipped, "decode": self.decode}


def qwen_config(extra=None, flat=False):
    text = {"model_type": "qwen4_exp_text", "num_hidden_layers": 2, "hidden_size": 64, "num_experts": 2}
    if flat:
        text = {"model_type": "qwen3_next", "architectures": ["Qwen3NextForCausalLM"], "num_hidden_layers": 2,
                "hidden_size": 64, "num_experts": 2}
        text.update(extra or {})
        return text
    cfg = {"model_type": "qwen4_exp", "architectures": ["Qwen4ExpForConditionalGeneration"], "text_config": text}
    cfg.update(extra or {})
    return cfg


def common_dense(lay, rng, prefix):
    lay.dense(rng, prefix + "embed_tokens.weight", (32, 64))
    lay.dense(rng, prefix + "layers.0.input_layernorm.weight", (64,))
    lay.dense(rng, prefix + "layers.0.linear_attn.A_log", (4,), "F32")
    lay.dense(rng, "lm_head.weight", (32, 64))


def experts(lay, rng, prefix, n_experts, quant, fmt, csf_coded=False):
    for e in range(n_experts):
        g = None
        for proj, (n, k) in (("gate_proj", (32, 64)), ("up_proj", (32, 64)), ("down_proj", (64, 32))):
            w = rand(rng, n, k)
            if quant is nvfp4.quantize_nvfp4:
                if proj == "gate_proj":  # ModelOpt shares one global between gate and up (§6.8)
                    g = nvfp4.nvfp4_global_for(max(np.max(np.abs(w)), 1e-3) * 4)
                parts = quant(w, input_amax=3.0, global_scale=g if proj != "down_proj" else None)
            else:
                parts = quant(w)
            expected = {nvfp4.quantize_nvfp4: nvfp4.dequantize_nvfp4}.get(quant, None)
            exp = expected(parts) if expected else None
            if csf_coded:
                parts = csf.csf_parts(parts)
            module = f"{prefix}layers.0.mlp.experts.{e}.{proj}"
            lay.add(module, parts, fmt, exp)
            if csf_coded:
                lay.csf.append(module + ".weight")


def layout_single_bf16(out, rng):
    lay = Layout(out, "single_bf16")
    common_dense(lay, rng, "model.")
    lay.dense(rng, "model.layers.0.self_attn.q_proj.weight", (48, 64))
    lay.dense(rng, "model.layers.0.self_attn.o_proj.weight", (64, 48), "F16")
    lay.config(qwen_config(flat=True))
    lay.write_single()
    return lay


def layout_sharded(out, rng):
    lay = Layout(out, "sharded_bf16")
    common_dense(lay, rng, "model.")
    for i in range(3):
        lay.dense(rng, f"model.layers.0.mlp.shared_expert.p{i}.weight", (16, 64))
    lay.config(qwen_config(flat=True))
    weight_map, _ = lay.write_sharded(3)
    with open(os.path.join(lay.folder, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, f)
    return lay


def layout_modelopt_nvfp4(out, rng):
    lay = Layout(out, "modelopt_nvfp4")
    common_dense(lay, rng, "model.")
    experts(lay, rng, "model.", 2, nvfp4.quantize_nvfp4, "NVFP4")
    w = rand(rng, 48, 64)
    parts = nvfp4.quantize_w4a16_nvfp4(w)  # no input_scale under an NVFP4 plan: W4A16 only, with a warning
    lay.add("model.layers.0.self_attn.q_proj", parts, "W4A16_NVFP4", nvfp4.dequantize_nvfp4(parts))
    lay.config(qwen_config(flat=True))
    lay.config({"producer": {"name": "modelopt", "version": "0.40.0"},
                "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": None, "group_size": 16,
                                 "exclude_modules": ["lm_head", "model.embed_tokens", "*input_layernorm*"]}},
               "hf_quant_config.json")
    lay.write_single()
    return lay


def layout_mixed(out, rng):
    lay = Layout(out, "modelopt_mixed")
    common_dense(lay, rng, LM)
    lay.dense(rng, LM + "layers.0.self_attn.q_proj.weight", (48, 64))
    experts(lay, rng, LM, 2, nvfp4.quantize_nvfp4, "NVFP4")
    # MTP experts: FP8 128x128 blocks, BF16 weight_scale_inv, partial tiles.
    for e in range(2):
        for proj, (n, k) in (("gate_proj", (160, 64)), ("up_proj", (160, 64)), ("down_proj", (64, 160))):
            w = rand(rng, n, k)
            parts = fp8.quantize_fp8_block(w, (128, 128), "BF16", "weight_scale_inv")
            lay.add(f"mtp.layers.0.mlp.experts.{e}.{proj}", parts, "FP8_BLOCK",
                    fp8.dequantize_fp8_block(parts, (128, 128), "weight_scale_inv"))
    # PLE table: FP8 per-tensor, split into shards (numeric order), one BF16 [1] scale.
    table = LM + "layers.1.ple.ple_embedding.ngram_embedding"
    t = rand(rng, 45, 16)
    parts = fp8.quantize_fp8_tensor(t, "BF16", (1,))
    codes = parts["weight"][1]
    rows = 4  # 12 shards of 4 rows: shard_10 and shard_11 sort before shard_2 by name
    for j in range(-(-45 // rows)):
        lay.tensors[f"{table}.shard_{j}.weight"] = ("F8_E4M3", codes[j * rows:(j + 1) * rows])
    lay.tensors[table + ".weight_scale"] = parts["weight_scale"]
    exp_path = os.path.join(out, "expected", lay.name, table + ".weight.f32")
    os.makedirs(os.path.dirname(exp_path), exist_ok=True)
    fp8.dequantize_fp8_tensor(parts).astype("<f4").tofile(exp_path)
    lay.formats[table + ".weight"] = "FP8_TENSOR"
    lay.decode[table + ".weight"] = os.path.relpath(exp_path, out)
    # A vision tower: listed as skipped, never decoded.
    lay.tensors["model.visual.blocks.0.attn.qkv.weight"] = ("BF16", np.zeros((8, 8), np.uint16))
    lay.formats["model.visual.blocks.0.attn.qkv.weight"] = "BF16"
    lay.skipped.append("model.visual.blocks.0.attn.qkv.weight")
    qc = {"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION", "producer": {"name": "modelopt"},
          "ignore": ["lm_head"],
          "quantized_layers": {LM + "layers.0.mlp.experts": {"quant_algo": "NVFP4", "group_size": 16},
                               "mtp.layers.0.mlp.experts": {"quant_algo": "FP8_BLOCK_SCALES", "group_size": 128},
                               table: {"quant_algo": "FP8"}}}
    cfg = qwen_config({"quantization_config": qc})
    cfg["text_config"]["quantization_config"] = qc  # NVIDIA's export mirrors it
    lay.config(cfg)
    hq = {k: v for k, v in qc.items() if k not in ("quant_method", "ignore", "producer")}
    hq["exclude_modules"] = ["lm_head"]
    hq["kv_cache_quant_algo"] = None
    lay.config({"producer": {"name": "modelopt", "version": "0.40.0"}, "quantization": hq}, "hf_quant_config.json")
    weight_map, _ = lay.write_sharded(2)
    with open(os.path.join(lay.folder, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)
    return lay


def layout_ct_nvfp4(out, rng):
    lay = Layout(out, "ct_nvfp4")
    common_dense(lay, rng, "model.")
    for m in ("model.layers.0.self_attn.q_proj", "model.layers.0.mlp.experts.0.up_proj",
              "model.layers.0.mlp.experts.1.up_proj"):
        w = rand(rng, 32, 64)
        parts = nvfp4.quantize_nvfp4_ct(w, input_amax=2.0)
        lay.add(m, parts, "NVFP4_CT", nvfp4.dequantize_nvfp4_ct(parts))
    lay.dense(rng, "model.layers.0.mlp.gate.weight", (2, 64))
    qc = {"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized", "quantization_status": "compressed",
          "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
              "num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16}}},
          "ignore": ["lm_head", "re:.*mlp\\.gate$"]}
    lay.config(qwen_config({"quantization_config": qc}, flat=True))
    lay.write_single()
    return lay


def layout_block_fp8(out, rng):
    lay = Layout(out, "block_fp8")
    common_dense(lay, rng, "model.")
    for m, (n, k) in (("model.layers.0.self_attn.q_a_proj", (200, 300)), ("model.layers.0.mlp.down_proj", (64, 256))):
        w = rand(rng, n, k)
        parts = fp8.quantize_fp8_block(w, (128, 128), "F32", "weight_scale_inv")
        lay.add(m, parts, "FP8_BLOCK", fp8.dequantize_fp8_block(parts, (128, 128), "weight_scale_inv"))
    qc = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128],
          "modules_to_not_convert": ["lm_head", "embed_tokens"]}
    lay.config(qwen_config({"quantization_config": qc}, flat=True))
    lay.write_single()
    return lay


def layout_mxfp8(out, rng):
    lay = Layout(out, "mxfp8")
    common_dense(lay, rng, "model.")
    for m, (n, k) in (("model.layers.0.self_attn.q_proj", (48, 64)), ("model.layers.0.self_attn.o_proj", (64, 96))):
        w = rand(rng, n, k)
        parts = mxfp.quantize_mxfp8(w)
        lay.add(m, parts, "MXFP8", mxfp.dequantize_mxfp8(parts))
    qc = {"quant_method": "modelopt", "quant_algo": "MXFP8", "ignore": ["lm_head", "model.embed_tokens"]}
    lay.config(qwen_config({"quantization_config": qc}, flat=True))
    lay.write_single()
    return lay


def layout_csf(out, rng):
    """A CSF container (NVFP4 routed experts with CSF scales) and a serving folder pointing at it."""
    lay = Layout(out, "csf_container")
    common_dense(lay, rng, LM)
    experts(lay, rng, LM, 2, nvfp4.quantize_nvfp4, "NVFP4", csf_coded=True)
    qc = {"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION", "ignore": ["lm_head"],
          "quantized_layers": {LM + "layers.0.mlp.experts": {"quant_algo": "NVFP4", "group_size": 16}}}
    cfg = qwen_config()
    cfg["text_config"]["quantization_config"] = qc
    os.makedirs(os.path.join(lay.folder, "metadata"), exist_ok=True)
    lay.config(cfg, "metadata/config.json")
    weight_map, files = lay.write_sharded(2, "tensors")
    shards = []
    for fname in files:
        with open(os.path.join(lay.folder, "tensors", fname), "rb") as f:
            data = f.read()
        shards.append({"file": fname, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()})
    head = {"schema": "lil-nvfp4-csf-checkpoint/1", "codec": "byte-window4-fixed-stream-u24-exceptions/1",
            "family": "qwen38_flash_next_nvfp4"}
    lay.config(dict(head, shards=shards), "manifest.json")
    lay.config(dict(head, source_names=weight_map), "build-contract.json")

    serving = Layout(out, "csf_serving")
    serving.formats, serving.csf, serving.decode = lay.formats, lay.csf, lay.decode
    scfg = qwen_config()
    scfg["text_config"]["quantization_config"] = {
        "quant_method": "nvfp4_csf", "format_version": 1, "checkpoint_root": os.path.abspath(lay.folder),
        "source_quantization_config": qc}
    serving.config(scfg)
    return [lay, serving]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    os.makedirs(args.out, exist_ok=True)
    layouts = []
    for make in (layout_single_bf16, layout_sharded, layout_modelopt_nvfp4, layout_mixed, layout_ct_nvfp4,
                 layout_block_fp8, layout_mxfp8, layout_csf):
        made = make(args.out, rng)
        layouts.extend(made if isinstance(made, list) else [made])
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump({"layouts": [lay.entry() for lay in layouts]}, f, indent=1)


if __name__ == "__main__":
    main()
