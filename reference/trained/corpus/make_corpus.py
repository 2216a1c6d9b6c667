"""Builds the trained models' corpus from the King James Version text of Debian's bible-kjv-text package.

Runs on any Debian machine (python3 standard library only, no torch):
    apt-get install bible-kjv bible-kjv-text
    python3 reference/trained/corpus/make_corpus.py
writes, next to this file, kjv-train.txt.xz (the training split) and heldout.txt (never trained on).
Source and licence: see SOURCES.md here. The dump is `bible -l0 Gen1:1-Rev22:21` (BRS 4.x prints chapter
headings "Book N" and verses "  N text"); we drop the verse numbers, keep one verse per line and one blank line
between chapters, each chapter starting with its heading. Every 20th chapter (ordinal % 20 == 7) goes to the
held-out split, so the held-out text spans the whole book with no chapter shared.
"""
import lzma
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def chapters(raw):
    out, cur = [], None
    for line in raw.splitlines():
        if not line.strip():
            continue
        m = re.match(r"^\s+\d+\s+(.*\S)\s*$", line)
        if m:
            if cur is None:
                sys.exit(f"FAIL verse before any chapter heading: {line!r}")
            cur.append(m.group(1))
        elif re.match(r"^[1-3]?\s?[A-Z][A-Za-z ]+ \d+$", line.strip()):
            cur = [line.strip()]
            out.append(cur)
        else:
            sys.exit(f"FAIL unexpected line in the bible dump: {line!r}")
    return out


def main():
    raw = subprocess.run(["bible", "-l0", "Gen1:1-Rev22:21"], check=True, capture_output=True,
                         text=True).stdout
    ch = chapters(raw)
    if len(ch) != 1189:
        sys.exit(f"FAIL expected the 1189 chapters of the KJV, found {len(ch)}")
    train = [c for i, c in enumerate(ch) if i % 20 != 7]
    held = [c for i, c in enumerate(ch) if i % 20 == 7]
    join = lambda cs: "\n\n".join("\n".join(c) for c in cs) + "\n"  # noqa: E731
    t, h = join(train), join(held)
    if any(ord(x) > 126 for x in t + h):
        sys.exit("FAIL non-ASCII characters in the dump")
    with lzma.open(os.path.join(HERE, "kjv-train.txt.xz"), "wb", preset=9) as f:
        f.write(t.encode("ascii"))
    with open(os.path.join(HERE, "heldout.txt"), "w") as f:
        f.write(h)
    print(f"PASS corpus: {len(train)} train chapters ({len(t)} bytes), {len(held)} held-out ({len(h)} bytes)")


if __name__ == "__main__":
    main()
