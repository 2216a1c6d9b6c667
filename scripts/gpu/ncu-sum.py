#!/usr/bin/env python3
"""Sums an `ncu --csv --print-units base` kernel listing per kernel name: calls, time and DRAM bytes per
step (argv[2] = the steps profiled), sorted by time, with each kernel's bandwidth."""
import csv
import collections
import sys

rows = [r for r in csv.reader(l for l in open(sys.argv[1]) if l.startswith('"'))]
head, body = rows[0], rows[1:]
col = {name: head.index(name) for name in ("ID", "Kernel Name", "Metric Name", "Metric Value")}
steps = float(sys.argv[2])
per_launch = collections.defaultdict(dict)
for r in body:
    per_launch[r[col["ID"]]].setdefault("name", r[col["Kernel Name"]].replace("(anonymous namespace)::", "").split("(")[0])
    v = r[col["Metric Value"]].replace(",", "")
    try:
        per_launch[r[col["ID"]]][r[col["Metric Name"]]] = float(v)
    except ValueError:
        pass
total = collections.defaultdict(lambda: [0, 0.0, 0.0, 0.0, 0.0])
for k in per_launch.values():
    t = total[k["name"]]
    t[0] += 1
    t[1] += k.get("gpu__time_duration.sum", 0.0)
    t[2] += k.get("dram__bytes_read.sum", 0.0) + k.get("dram__bytes_write.sum", 0.0)
    t[3] = k.get("launch__grid_size", 0.0)
    t[4] = k.get("launch__registers_per_thread", 0.0)
all_ns = sum(t[1] for t in total.values())
all_b = sum(t[2] for t in total.values())
print(f"{len(per_launch)} launches, per step: {all_ns / steps / 1e6:.3f} ms kernel time, "
      f"{all_b / steps / 1e6:.1f} MB DRAM, {len(per_launch) / steps:.0f} kernels")
print(f"{'kernel':60s} {'calls/step':>10s} {'us/step':>9s} {'us/call':>8s} {'MB/step':>9s} {'GB/s':>7s} grid regs")
for name, t in sorted(total.items(), key=lambda kv: -kv[1][1]):
    gbs = t[2] / t[1] if t[1] else 0.0
    print(f"{name[:60]:60s} {t[0] / steps:10.1f} {t[1] / steps / 1e3:9.1f} {t[1] / t[0] / 1e3:8.2f} "
          f"{t[2] / steps / 1e6:9.2f} {gbs:7.0f} {t[3]:.0f} {t[4]:.0f}")
