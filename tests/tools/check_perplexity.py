"""ctest tools_perplexity: `bloomery perplexity` against independent computations on the random fixtures.

usage: check_perplexity.py BLOOMERY SOURCE_DIR WORK_DIR
1. per-token NLL equals -log_softmax of the logits `bloomery run --logits-out` writes for the same prefix, and
   PPL = exp(mean NLL) as printed; 2. KL of a model against its own saved base is 0 with 100 % same top token;
3. a quantised layout against the BF16 base of its family has KL > 0, and mean/max KL and same-top share equal
a Python computation over the two saved bases; 4. a base of another --ctx is refused
(E_KLD_MISMATCH); 5. a text shorter than one window is refused (E_PPL_TOO_SHORT).
"""
import json
import math
import os
import re
import struct
import subprocess
import sys

BIN, SRC, WORK = sys.argv[1], sys.argv[2], sys.argv[3]
os.makedirs(WORK, exist_ok=True)
MODELS = os.path.join(SRC, "tests", "fixtures", "models")
FOLDER = os.path.join(MODELS, "qwen3_next-bf16")
QUANT = os.path.join(MODELS, "qwen3_next-modelopt-mixed")
fails = []


def check(ok, what):
    print(("PASS " if ok else "FAIL ") + what, flush=True)
    if not ok:
        fails.append(what)


def run(*args, ok=True):
    p = subprocess.run([BIN, *args], capture_output=True, text=True)
    if ok and p.returncode != 0:
        sys.exit(f"FAIL {' '.join(args)} exited {p.returncode}:\n{p.stderr}")
    return p


text = os.path.join(WORK, "text.txt")
with open(os.path.join(SRC, "reference", "trained", "corpus", "heldout.txt")) as f:
    open(text, "w").write(f.read()[:4000])
CTX, CHUNKS = 16, 2
js = os.path.join(WORK, "ppl.json")
p = run("perplexity", "-m", FOLDER, "-f", text, "--ctx", str(CTX), "--chunks", str(CHUNKS), "--json-out", js,
        "-t", "2", "--no-progress")
j = json.load(open(js))
toks, nll = j["tokens"], j["nll"]
check(len(toks) == CTX * CHUNKS and len(nll) == CHUNKS * (CTX - 1 - CTX // 2),
      f"{len(toks)} tokens and {len(nll)} scored NLLs for {CHUNKS} windows of {CTX}")
# 1. independent NLL from `bloomery run --logits-out` over each scored prefix
worst = 0.0
k = 0
for c in range(CHUNKS):
    win = toks[c * CTX:(c + 1) * CTX]
    for jpos in range(CTX // 2, CTX - 1):
        lf = os.path.join(WORK, "row.f32")
        run("run", "-m", FOLDER, "--prompt-ids", ",".join(map(str, win[:jpos + 1])), "-n", "1", "--logits-out", lf,
            "--no-progress", "-t", "2")
        raw = open(lf, "rb").read()
        row = struct.unpack(f"<{len(raw) // 4}f", raw)
        mx = max(row)
        lse = mx + math.log(sum(math.exp(v - mx) for v in row))
        worst = max(worst, abs((lse - row[win[jpos + 1]]) - nll[k]))
        k += 1
check(worst <= 1e-3, f"perplexity's NLL equals -log_softmax of run's logits for the same prefix (max diff {worst:.2e})")
ppl = math.exp(sum(nll) / len(nll))
check(abs(ppl - j["ppl"]) <= 1e-9 * ppl, f"PPL {j['ppl']:.6f} = exp(mean NLL) {ppl:.6f}")
m = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", p.stdout)
check(m is not None and abs(float(m.group(1)) - ppl) <= 1e-4 * ppl, f"printed final estimate {m and m.group(0)}")
var = sum((v - math.log(ppl)) ** 2 for v in nll) / (len(nll) - 1)
err = ppl * math.sqrt(var / len(nll))
check(m is not None and abs(float(m.group(2)) - err) <= 1e-3 * err + 1e-5, f"± error {err:.5f} from the NLL spread")
# 2. KL against itself
base = os.path.join(WORK, "base.kld")
run("perplexity", "-m", FOLDER, "-f", text, "--ctx", str(CTX), "--chunks", str(CHUNKS), "--kl-divergence-base",
    base, "--no-progress", "-t", "2")
js2 = os.path.join(WORK, "self.json")
p = run("perplexity", "-m", FOLDER, "-f", text, "--ctx", str(CTX), "--chunks", str(CHUNKS), "--kl-divergence", base,
        "--json-out", js2, "--no-progress", "-t", "2")
s = json.load(open(js2))
check(s["kld_mean"] <= 1e-6 and s["kld_max"] <= 1e-5 and s["same_top"] == 1.0,
      f"KL of a model against itself: mean {s['kld_mean']:.2e}, max {s['kld_max']:.2e}, same top {s['same_top']}")
check(abs(s["ppl_base"] - s["ppl"]) <= 1e-5 * s["ppl"] and "Mean    KLD" in p.stdout and "Same top token" in p.stdout,
      "base PPL equals this run's; KL lines printed")
# 3. a quantised layout against the BF16 base
js3 = os.path.join(WORK, "quant.json")
run("perplexity", "-m", QUANT, "-f", text, "--ctx", str(CTX), "--chunks", str(CHUNKS), "--kl-divergence", base,
    "--json-out", js3, "--no-progress", "-t", "2")
q = json.load(open(js3))
check(q["kld_mean"] > 1e-6 and math.isfinite(q["kld_mean"]) and q["kld_max"] >= q["kld_mean"],
      f"modelopt-mixed against the bf16 base: mean KL {q['kld_mean']:.3e} > 0, max {q['kld_max']:.3e}")
# ...and its mean / max KL and same-top share equal a Python computation over the two saved bases
qbase = os.path.join(WORK, "quant.kld")
run("perplexity", "-m", QUANT, "-f", text, "--ctx", str(CTX), "--chunks", str(CHUNKS), "--kl-divergence-base",
    qbase, "--no-progress", "-t", "2")


def rows(path):
    raw = open(path, "rb").read()
    check(raw[:8] == b"BLMKLD1\0", f"{os.path.basename(path)}: base file magic")
    ctx, vocab, chunks = struct.unpack("<3I", raw[8:20])
    off = 20 + 4 * ctx * chunks
    n = (len(raw) - off) // (4 * vocab)
    check(n == chunks * (ctx - 1 - ctx // 2) and len(raw) == off + 4 * vocab * n, f"{n} rows of {vocab} log-probs")
    return [struct.unpack_from(f"<{vocab}f", raw, off + 4 * vocab * r) for r in range(n)]


kls, same = [], 0
for b, t in zip(rows(base), rows(qbase)):
    kls.append(sum(math.exp(x) * (x - y) for x, y in zip(b, t)))
    same += max(range(len(b)), key=b.__getitem__) == max(range(len(t)), key=t.__getitem__)
mean_kl = sum(kls) / len(kls)
check(abs(mean_kl - q["kld_mean"]) <= 1e-5 * max(1.0, mean_kl) and abs(max(kls) - q["kld_max"]) <= 1e-5,
      f"mean KL {q['kld_mean']:.6f} / max {q['kld_max']:.6f} equal Python's {mean_kl:.6f} / {max(kls):.6f}")
check(abs(same / len(kls) - q["same_top"]) < 1e-12, f"same top token {q['same_top']:.4f} equals Python's")
# 4. mismatching base, 5. too short a text
p = run("perplexity", "-m", FOLDER, "-f", text, "--ctx", str(2 * CTX), "--chunks", "1", "--kl-divergence", base,
        "--no-progress", ok=False)
check(p.returncode != 0 and "E_KLD_MISMATCH" in p.stderr, f"a base of another ctx is refused: {p.stderr.strip()[:120]}")
short = os.path.join(WORK, "short.txt")
open(short, "w").write("In the beginning")
p = run("perplexity", "-m", FOLDER, "-f", short, "--ctx", "64", "--no-progress", ok=False)
check(p.returncode != 0 and "E_PPL_TOO_SHORT" in p.stderr, f"a too short text is refused: {p.stderr.strip()[:120]}")
print("ALL PASS" if not fails else f"{len(fails)} FAIL")
sys.exit(1 if fails else 0)
