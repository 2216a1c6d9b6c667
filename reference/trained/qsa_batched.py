"""Training-only batched forward for transformers' qwen4_exp QSA indexer (Qwen4ExpTextQSAIndexer).

Why: the reference indexer loops in Python over batch and query rows (a torch.nonzero sync and ~25 small
kernels per row), and reads the mask and the cos/sin tables at the batch index, so a batch of 2 fails where
those have batch 1 (the draft layer's mask, the draft's rotary table). Training at batch 1 gave 42 steps in
200 s. This module gives the indexer instances of the TRAINING model a vectorised forward for the case
training runs: no cache, a causal mask (query i sees keys 0..i). Everything else raises: the exported folders,
goldens, PPL and acceptance are computed with fresh, unpatched models (the original forward).

The selection it computes is the reference's, written for all rows at once: complete blocks of
`compress_ratio` visible keys, mean-pooled (f32 mean, back to the key dtype), k_layernorm, rotary at the block's
first key; score = sum over index heads of relu(q . k_block) / sqrt(head_dim); the top `budget / ratio` blocks
among the query's complete ones, plus its tail (visible keys after its last complete block). The output mask
has the reference's shape and dtype (bool, or 0 / finfo.min for a float mask). The indexer's output carries no
gradient in the reference either (top-k indices), so it runs under no_grad.

check() compares it with the original forward on the device (train.py aborts when it fails).
"""
import math
import types

INDEXER_CLASS = "Qwen4ExpTextQSAIndexer"


def _qm():
    from transformers.models.qwen4_exp import modeling_qwen4_exp as QM

    return QM


def indexers(module):
    return [m for m in module.modules() if type(m).__name__ == INDEXER_CLASS]


def is_patched(m):
    return "forward" in m.__dict__


def patch(module):
    """Gives every QSA indexer under `module` the batched forward (instance attribute; the class is untouched)."""
    found = indexers(module)
    for m in found:
        m.forward = types.MethodType(batched_forward, m)
    return len(found)


def unpatch(module):
    for m in indexers(module):
        if is_patched(m):
            del m.__dict__["forward"]


def _batch_view(t, b):
    """Row b of a tensor whose batch dimension is B or a broadcast 1."""
    return t[b:b + 1] if t.shape[0] > 1 else t


def selection(self, hidden_states, position_embeddings, attention_mask):
    """(selected [B, T, kv] bool, block scores [B, T, nb] with -inf for blocks a row cannot see, or None)."""
    import torch

    B, T, _ = hidden_states.shape
    visible = attention_mask if attention_mask.dtype == torch.bool else attention_mask == 0
    kv = visible.shape[-1]
    dev = hidden_states.device
    if visible.dim() != 4 or visible.shape[1] != 1 or kv != T or visible.shape[0] not in (1, B):
        raise ValueError(f"batched QSA indexer: mask shape {tuple(visible.shape)}, expected [1 or {B}, 1, {T}, {T}] "
                         "(training runs without a cache)")
    causal = torch.ones(T, T, dtype=torch.bool, device=dev).tril()
    if not torch.equal(visible[:, 0], causal.expand(visible.shape[0], T, T)):
        raise ValueError("batched QSA indexer: the mask is not plain causal (padding or a cache?); "
                         "only training's causal windows are supported")
    if self.index_kv_heads != 1:
        raise ValueError(f"batched QSA indexer: indexer_kv_heads {self.index_kv_heads}, expected 1 (as the reference's "
                         "squeeze(2) assumes)")
    QM = _qm()
    H, D, c = self.index_n_heads, self.index_head_dim, self.compress_ratio
    full_cos, full_sin = position_embeddings
    if full_cos.shape[0] not in (1, B) or full_cos.shape[1] != T:
        raise ValueError(f"batched QSA indexer: cos table {tuple(full_cos.shape)}, expected [1 or {B}, {T}, ...]")
    with torch.no_grad():
        qk = self.index_qk_proj(hidden_states)
        q, token_k = torch.split(qk, [H * D, D], dim=-1)
        q = self.q_layernorm(q.reshape(B, T, H, D))
        q = QM.apply_rotary_pos_emb(q, cos=full_cos[:, -T:], sin=full_sin[:, -T:], unsqueeze_dim=2)
        keys = token_k.reshape(B, T, D)
        qpos = torch.arange(T, device=dev)
        n_complete = (qpos + 1) // c  # complete blocks among query i's i + 1 visible keys
        kpos = torch.arange(T, device=dev)
        selected = ((kpos[None, :] >= (n_complete * c)[:, None]) & (kpos[None, :] <= qpos[:, None]))  # the tails
        selected = selected[None].expand(B, T, T).clone()
        nb = T // c
        scores = None
        if nb > 0:
            pooled = keys[:, : nb * c].reshape(B, nb, c, D).float().mean(dim=2).to(keys.dtype)
            pooled = self.k_layernorm(pooled)
            starts = torch.arange(nb, device=dev) * c
            block_k = QM.apply_rotary_pos_emb(pooled.unsqueeze(2), cos=full_cos[:, starts], sin=full_sin[:, starts],
                                              unsqueeze_dim=2).squeeze(2)  # [B, nb, D]
            s = torch.matmul(q.float(), block_k.float().transpose(-1, -2).unsqueeze(1))  # [B, T, H, nb]
            s = torch.relu(s).sum(dim=2) / math.sqrt(D)  # [B, T, nb]
            sees = torch.arange(nb, device=dev)[None, :] < n_complete[:, None]  # [T, nb]
            scores = s.masked_fill(~sees, float("-inf"))
            top = scores.topk(min(self.block_topk, nb), dim=-1).indices  # [B, T, k]
            # one-hot of the picks (no scatter: tiny, and deterministic on any device); a row with fewer
            # complete blocks than k also got -inf picks, so only the blocks it sees are kept
            blocks = (top.unsqueeze(-1) == torch.arange(nb, device=dev)).any(dim=-2) & sees  # [B, T, nb]
            selected[..., : nb * c] |= blocks.repeat_interleave(c, dim=-1)
    return selected, scores


def batched_forward(self, hidden_states, position_embeddings, attention_mask, past_key_values=None):
    import torch

    if past_key_values is not None:
        raise ValueError("batched QSA indexer: called with a cache; training runs without one")
    selected, _ = selection(self, hidden_states, position_embeddings, attention_mask)
    mask = selected.unsqueeze(1)
    if attention_mask.is_floating_point():
        mask = torch.where(mask, attention_mask.new_zeros(()), torch.finfo(attention_mask.dtype).min)
    return mask


# ------------------------------------------------------------------------------------------- the start-up check


class _Recorder:
    """Forward hooks that keep every indexer call's inputs (detached) while the model runs."""

    def __init__(self, module):
        self.calls = []
        self.hooks = [m.register_forward_hook(self._hook) for m in indexers(module)]

    def _hook(self, m, args, out):
        if len(args) < 3:  # transformers' attention passes them positionally; a change there must not pass silently
            raise AssertionError(f"QSA indexer called with {len(args)} positional arguments, expected hidden "
                                 "states, position embeddings and mask")
        hs, pe, mask = args[0], args[1], args[2]
        self.calls.append((m, hs.detach().clone(), tuple(t.detach().clone() for t in pe), mask.detach().clone(),
                           out.detach().clone()))

    def remove(self):
        for h in self.hooks:
            h.remove()


def _original(m, hs, pe, mask):
    return type(m).forward(m, hs, pe, mask, None)


def compare_call(m, hs, pe, mask, rel_tie=1e-5):
    """The batched forward against the original run one sequence at a time on the same inputs. Returns
    (rows, differing rows, near-tie rows among them, first differing row position or None). A differing row is
    a near tie when the k-th and (k+1)-th block scores of that row are within rel_tie (relative, or both 0):
    there the reference's choice is itself arbitrary (topk order of equal values, or a last-bit difference of
    the score sums), so either pick is the reference's selection."""
    import torch

    B, T = hs.shape[:2]
    got = batched_forward(m, hs, pe, mask, None)
    want = torch.cat([_original(m, hs[b:b + 1], tuple(_batch_view(t, b) for t in pe), _batch_view(mask, b))
                      for b in range(B)], 0)
    if got.shape != want.shape or got.dtype != want.dtype:
        raise AssertionError(f"batched QSA indexer output {tuple(got.shape)} {got.dtype}, original "
                             f"{tuple(want.shape)} {want.dtype}")
    rows_diff = (got != want)[:, 0].any(-1)  # [B, T]
    n_diff = int(rows_diff.sum())
    n_tie = 0
    first = None
    if n_diff:
        _, scores = selection(m, hs, pe, mask)
        k = m.block_topk
        for b, t in rows_diff.nonzero().tolist():
            first = t if first is None else min(first, t)
            s = scores[b, t]
            s = s[torch.isfinite(s)].sort(descending=True).values
            if len(s) > k and float(s[k - 1] - s[k]) <= rel_tie * abs(float(s[k - 1])):
                n_tie += 1
    return B * T, n_diff, n_tie, first


def dropped_fraction(m, hs, pe, mask):
    """Mean share of the visible keys the indexer drops for the last quarter of the rows (it must really drop)."""
    selected, _ = selection(m, hs, pe, mask)
    T = hs.shape[1]
    r0 = (3 * T) // 4
    vis = sum(range(r0 + 1, T + 1)) * hs.shape[0]
    return 1.0 - float(selected[:, r0:].sum()) / vis


def _rel(a, b):
    """Per-position max |a - b| / max |b| over the last dimension."""
    return ((a - b).abs().amax(-1) / b.abs().amax(-1).clamp_min(1e-30)).flatten()


class _Tally:
    def __init__(self):
        self.calls = self.rows = self.diff = self.ties = 0
        self.drops = []

    def add(self, calls, where):
        """Compares recorded calls; every row that differs must be a near tie. Returns the first such row."""
        first = None
        for m, hs, pe, mask, _ in calls:
            r, d, t, f = compare_call(m, hs, pe, mask)
            if d > t:
                raise AssertionError(f"batched QSA indexer differs from the original on {d} of {r} rows ({where}; "
                                     f"{t} of them at near ties)")
            self.calls, self.rows, self.diff, self.ties = self.calls + 1, self.rows + r, self.diff + d, self.ties + t
            self.drops.append(dropped_fraction(m, hs, pe, mask))
            if f is not None:
                first = f if first is None else min(first, f)
        return first


def _recorded(model, mods, fn):
    rm, rd = _Recorder(model), _Recorder(mods)
    try:
        out = fn()
    finally:
        rm.remove()
        rd.remove()
    return out, rm.calls, rd.calls


def check(model, mods, run_main, run_draft, windows, say):
    """Start-up check on the device, before any training step (and again on the trained weights):
    1. every indexer call of a batch-B forward (target and draft) and of each batch-1 forward: the batched
       forward equals the original, run sequence by sequence on the same inputs, bit for bit, except rows at a
       near tie (compare_call);
    2. the patched model at batch 1 gives the original model's logits and draft logits bit for bit (up to the
       first near-tie row, when a call had one: later positions may see the other block);
    3. at batch B each row's logits are those of its batch-1 run within 1e-4 (GEMM shapes differ) at >= 95 % of
       the positions, median <= 1e-5;
    4. the indexer drops at least half of the late rows' visible keys.
    run_main(x) -> logits and run_draft(x) -> draft logits run the model (eval). Leaves the indexers patched.
    Raises AssertionError with the numbers on any failure; returns a summary line."""
    import torch

    if any(is_patched(m) for m in indexers(model) + indexers(mods)):
        raise AssertionError("check() needs the original indexers (unpatch first)")
    n_main, n_draft = len(indexers(model)), len(indexers(mods))
    if n_main == 0 or n_draft == 0:
        raise AssertionError(f"QSA indexers found: target {n_main}, draft {n_draft}; expected both > 0")
    B = windows.shape[0]
    tally = _Tally()
    exact_all = True
    worst1 = 0.0
    with torch.no_grad():
        ref = [(run_main(windows[b:b + 1]), run_draft(windows[b:b + 1])) for b in range(B)]
        patch(model)
        patch(mods)
        (got_main, got_draft), cm, cd = _recorded(model, mods, lambda: (run_main(windows), run_draft(windows)))
        if len(cm) < n_main or len(cd) != n_draft:  # run_draft runs the target again
            raise AssertionError(f"indexer calls in one target + draft forward: target {len(cm)} (expected "
                                 f">= {n_main}), draft {len(cd)} (expected {n_draft})")
        if any(c[1].shape[0] != B for c in cm + cd):
            raise AssertionError(f"an indexer call did not get the batch of {B}")
        tally.add(cm + cd, f"batch {B}")
        pb1 = []
        for b in range(B):
            (pm, pd), cm1, cd1 = _recorded(model, mods, lambda: (run_main(windows[b:b + 1]),
                                                                 run_draft(windows[b:b + 1])))
            first = tally.add(cm1 + cd1, f"batch 1, window {b}")
            upto = pm.shape[1] if first is None else first
            for got, want, what in ((pm, ref[b][0], "logits"), (pd, ref[b][1], "draft logits")):
                if not torch.equal(got[:, :upto], want[:, :upto]):
                    raise AssertionError(f"patched model at batch 1, window {b}: {what} differ from the original "
                                         f"before position {upto}: max relative {float(_rel(got, want).max()):.3g}")
                exact_all = exact_all and torch.equal(got, want)
                worst1 = max(worst1, float(_rel(got, want).max()))
            pb1.append((pm, pd))
    if min(tally.drops) < 0.5:
        raise AssertionError(f"QSA indexer drops only {min(tally.drops):.2f} of the late rows' visible keys")
    rel_b = torch.cat([_rel(got_main[b:b + 1], pb1[b][0]) for b in range(B)] +
                      [_rel(got_draft[b:b + 1], pb1[b][1]) for b in range(B)])
    bad = float((rel_b > 1e-4).float().mean())
    if bad > 0.05 or float(rel_b.median()) > 1e-5:
        raise AssertionError(f"patched model at batch {B} against batch 1: {bad:.1%} of positions beyond 1e-4, "
                             f"median {float(rel_b.median()):.3g}, max {float(rel_b.max()):.3g}")
    line = (f"batched QSA indexer == original: {tally.calls} indexer calls, {tally.rows} rows, {tally.diff} differ "
            f"(all at near ties); batch-1 logits and draft logits "
            f"{'bit-identical' if exact_all else f'bit-identical up to the first near tie (max relative {worst1:.3g})'}"
            f"; batch {B} vs 1 max relative {float(rel_b.max()):.3g} ({bad:.2%} beyond 1e-4); late rows drop "
            f"{min(tally.drops):.2f}-{max(tally.drops):.2f} of visible keys")
    say(line)
    return line
