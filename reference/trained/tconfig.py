"""The trained models' configuration: the fixtures' tiny configs (reference/fixtures/configs.py, every layer kind of
each family, already proven on the engine) with a real vocabulary and sparse budgets sized for 128-token training
windows. apply() patches fixtures.configs IN PLACE, so every fixtures writer (models, layouts, mtp_ref, gen)
builds and exports the trained shapes without a copy of its code.
"""
from fixtures import configs as C

VOCAB = 2048
SEED = 20261201
SEQ = 128  # training window; held-out PPL uses the same context
BATCH = 32
STEPS = 1200
# qwen4_exp: a step cap it should not reach; its wall budget (--max-seconds) ends it and the LR schedule follows
# the wall clock (train.lr_at), so the run ends at the low rate whatever its step time on the device
STEPS_BY_FAMILY = {"qwen4_exp": 4000}
LR = 3e-3
WARMUP = 60
DRAFT_LOSS_WEIGHT = 0.5
N_GREEDY = 32
PROMPT_TOKENS = 20  # golden prompts are cut to this many tokens (keeps the golden files small)
PPL_CTX = 128
PPL_GOLDEN_CHUNKS = 32  # per-token NLL of this many held-out chunks is stored in the golden
PPL_FULL_CHUNKS = 256  # chunks of the held-out text scored for docs/accuracy.md (all of it when fewer)
ACCEPT_SEQS = 4  # MTP acceptance: greedy continuations of this many held-out prompts...
ACCEPT_NEW = 40  # ...of this many tokens, each position drafting k = 1..4 tokens
CHAT_PER_CHAPTER = 4  # chat samples (user: a verse, assistant: the next verse) per training chapter

# Folders exported per family (the repo budget allows six; which layouts and why: docs/accuracy.md).
LAYOUTS = {"qwen3_next": ["bf16", "modelopt-mixed"],
           "qwen4_exp": ["bf16", "fp4local-csf", "modelopt-mixed"],
           "glm5_next": ["bf16", "fp4local-csf", "modelopt-mixed"]}

_applied = False


def apply():
    global _applied
    if _applied:
        return
    _applied = True
    C.VOCAB = VOCAB
    C.N_GREEDY = N_GREEDY
    for d in (C.QWEN3_NEXT, C.QWEN4_TEXT, C.GLM_TEXT):
        d["vocab_size"] = VOCAB
    # 16-token budgets (4 blocks of 4): a 128-token window drops most blocks, a 20-token prompt some.
    C.QWEN4_TEXT["indexer_budget"] = 16
    C.GLM_TEXT["index_topk"] = 16
