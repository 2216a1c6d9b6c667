"""Prints docs/accuracy.md's results table from the trained run (standard library only, runs anywhere).

python3 reference/trained/report.py [tests/fixtures/trained] [trained-ppl.txt]
Reads logs/<family>.json (f32 reference PPL, unigram, MTP acceptance, parameters) and, when given, the
scripts/gpu/trained.sh engine measurements (`== <folder> cpu|cuda` blocks of `bloomery perplexity` output).
"""
import json
import os
import re
import sys

root = sys.argv[1] if len(sys.argv) > 1 else os.path.join("tests", "fixtures", "trained")
ppl_txt = sys.argv[2] if len(sys.argv) > 2 else None
engine = {}
if ppl_txt and os.path.exists(ppl_txt):
    cur = None
    for line in open(ppl_txt):
        m = re.match(r"^== (\S+) (cpu|cuda)", line)
        if m:
            cur = (m.group(1), m.group(2))
            engine[cur] = {}
            continue
        if cur is None:
            continue
        for key, pat in (("ppl", r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)"),
                         ("kld", r"Mean    KLD    : ([0-9.e+-]+)"), ("kmax", r"Maximum KLD    : ([0-9.e+-]+)"),
                         ("same", r"Same top token : ([0-9.]+)"), ("fail", r"^(FAIL|error:.*)")):
            m = re.search(pat, line)
            if m:
                engine[cur][key] = m.groups()
print("| model / layout | params (target + draft) | steps | unigram PPL | f32 PPL (transformers) | CPU PPL | CUDA PPL "
      "| CUDA KL mean / max vs CPU | same top | MTP acceptance k=1…4 |")
print("|---|---|---|---|---|---|---|---|---|---|")
for fam in ("qwen3_next", "qwen4_exp", "glm5_next"):
    p = os.path.join(root, "logs", fam + ".json")
    if not os.path.exists(p):
        print(f"| {fam} | (no {p}) | | | | | | | | |")
        continue
    s = json.load(open(p))
    for lay, r in sorted(s["layouts"].items()):
        name = f"{fam}-{lay}"
        cpu, cuda = engine.get((name, "cpu"), {}), engine.get((name, "cuda"), {})
        cpu_p = f"{cpu['ppl'][0]} ± {cpu['ppl'][1]}" if "ppl" in cpu else "–"
        cuda_p = f"{cuda['ppl'][0]} ± {cuda['ppl'][1]}" if "ppl" in cuda else ("refused" if "fail" in cuda else "–")
        kl = f"{cuda['kld'][0]} / {cuda['kmax'][0]}" if "kld" in cuda else "–"
        same = f"{cuda['same'][0]} %" if "same" in cuda else "–"
        acc = ", ".join(f"{a:.2f}" for a in r["mtp_acceptance_k1_4"])
        print(f"| {fam} {lay} | {s['params_target'] / 1e6:.2f} M + {s['params_draft'] / 1e6:.2f} M | {s['steps']} "
              f"| {r['unigram_ppl']:.1f} | {r['ppl']:.3f} ± {r['ppl_err']:.3f} ({r['ppl_chunks']} × 128) | {cpu_p} "
              f"| {cuda_p} | {kl} | {same} | {acc} |")
