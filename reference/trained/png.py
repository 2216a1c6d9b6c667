"""A loss-curve PNG with the standard library only (the GPU machine has no matplotlib): white canvas, grey
frame, main loss in blue, draft loss in red, y from 0 to the largest loss. No text (the title goes in the log)."""
import struct
import zlib


def _png(path, w, h, rows):
    def chunk(kind, data):
        c = kind + data
        return struct.pack(">I", len(data)) + c + struct.pack(">I", zlib.crc32(c) & 0xFFFFFFFF)

    raw = b"".join(b"\x00" + bytes(r) for r in rows)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def loss_plot(path, hist, title="", w=640, h=360):
    """hist: [(step, main_loss, draft_loss)]."""
    rows = [bytearray(b"\xff" * (3 * w)) for _ in range(h)]
    m = 24
    for x in range(m, w - m):
        for y in (m, h - m):
            rows[y][3 * x:3 * x + 3] = b"\x99\x99\x99"
    for y in range(m, h - m + 1):
        for x in (m, w - m):
            rows[y][3 * x:3 * x + 3] = b"\x99\x99\x99"
    if not hist:
        return _png(path, w, h, rows)
    s_max = max(1, hist[-1][0])
    l_max = max(max(a, b) for _, a, b in hist) or 1.0

    def pt(step, loss):
        return (m + int((w - 2 * m) * step / s_max), h - m - int((h - 2 * m) * min(loss, l_max) / l_max))

    for idx, color in ((1, b"\x1f\x4e\xd8"), (2, b"\xd8\x2b\x1f")):
        prev = None
        for e in hist:
            p = pt(e[0], e[idx])
            if prev:
                n = max(abs(p[0] - prev[0]), abs(p[1] - prev[1]), 1)
                for i in range(n + 1):
                    x = prev[0] + (p[0] - prev[0]) * i // n
                    y = prev[1] + (p[1] - prev[1]) * i // n
                    for dy in (0, 1):
                        if 0 <= y + dy < h and 0 <= x < w:
                            rows[y + dy][3 * x:3 * x + 3] = color
            prev = p
    _png(path, w, h, rows)
