#!/usr/bin/env python3
"""summarize.py: where a decode step's time goes, from cupti_trace.c's output.

Takes the kernels launched from CUDA graphs, splits them into replays (a replay starts at the kernel
whose name holds the third argument, "embed" by default: the decode step's first), and for each kernel counts its exclusive time: its end minus the latest end before it, so
a kernel that overlaps its predecessor (programmatic dependent launch) is charged only for what it adds.
Prints, over the last replays, the median per kernel name summed over a step, and one step's kernels in
order with their start, duration and exclusive time. With a period P (kernels per layer), also the mean
exclusive time of each of a layer's kernels, over the longest stretch of kernels whose names repeat
every P.

  python3 tools/trace/summarize.py TRACE [REPLAYS [FIRST_KERNEL [PERIOD]]]"""
import re
import statistics
import subprocess
import sys


def short(name, cache={}):
    if name not in cache:
        try:
            d = subprocess.run(["c++filt"], input=name, capture_output=True, text=True).stdout.strip()
        except OSError:
            d = name
        d = re.sub(r"\(.*\)$", "", d.replace("(anonymous namespace)::", ""))
        cache[name] = d[:90]
    return cache[name]


def main():
    path = sys.argv[1]
    last = int(sys.argv[2]) if len(sys.argv) > 2 else 64
    first = sys.argv[3] if len(sys.argv) > 3 else "embed"
    period = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    rows = []
    for line in open(path):
        s, e, node, name = line.rstrip("\n").split("\t", 3)
        rows.append((int(s), int(e), int(node), name))
    rows.sort()
    graph = [r for r in rows if r[2] != 0]
    if not graph:
        print("no graph kernels traced")
        return
    steps, cur = [], []
    for r in graph:
        if first in r[3] and cur:
            steps.append(cur)
            cur = []
        cur.append(r)
    steps.append(cur)
    n = max(len(s) for s in steps)
    steps = [s for s in steps if len(s) == n][-last:]
    print(f"{len(steps)} replays of {n} kernels analysed")
    walls = [s[-1][1] - s[0][0] for s in steps]
    gaps = [b[0][0] - a[-1][1] for a, b in zip(steps, steps[1:])]
    print(f"step (first start to last end): median {statistics.median(walls)/1e3:.1f} us; "
          f"gap to next replay median {statistics.median(gaps)/1e3:.1f} us" if gaps else "")
    per_name = {}
    per_pos = [[] for _ in range(n)]
    for s in steps:
        latest = s[0][0]
        sums = {}
        for i, (st, en, node, name) in enumerate(s):
            excl = max(0, en - max(latest, st))
            latest = max(latest, en)
            sums.setdefault(name, [0, 0, 0])
            sums[name][0] += excl
            sums[name][1] += en - st
            sums[name][2] += 1
            per_pos[i].append((st - s[0][0], en - st, excl))
        for k, v in sums.items():
            per_name.setdefault(k, []).append(v)
    print(f"\n{'kernel':90s} {'n':>4s} {'excl us':>9s} {'dur us':>9s} {'excl/launch':>11s}")
    tot = 0
    for k, vs in sorted(per_name.items(), key=lambda kv: -statistics.median(v[0] for v in kv[1])):
        ex = statistics.median(v[0] for v in vs) / 1e3
        du = statistics.median(v[1] for v in vs) / 1e3
        c = vs[0][2]
        tot += ex
        print(f"{short(k):90s} {c:4d} {ex:9.1f} {du:9.1f} {ex / c:11.2f}")
    print(f"{'sum of exclusive times':90s} {'':4s} {tot:9.1f}")
    names = [r[3] for r in steps[-1]]
    if period:
        # the layers: the longest stretch of kernels whose names repeat every period (the step's first
        # and last kernels, and a first layer that differs, fall outside it)
        start, best, run = 0, 0, 0
        for i in range(n - period):
            run = run + 1 if names[i] == names[i + period] else 0
            if run > best:
                best, start = run, i - run + 1
        layers = (best + period) // period
        print(f"\nper layer ({layers} layers of {period} kernels from kernel {start}): mean exclusive, mean duration, us")
        total = 0
        for k in range(period):
            idx = [start + layer * period + k for layer in range(layers)]
            ex = statistics.mean(per_pos[i][r][2] for i in idx for r in range(len(steps))) / 1e3
            du = statistics.mean(per_pos[i][r][1] for i in idx for r in range(len(steps))) / 1e3
            total += ex
            print(f"{k:4d} {ex:7.2f} {du:7.2f}  {short(names[start + k])}")
        print(f"     {total:7.2f}          a layer")
    print("\none step in order (median over replays): start, duration, exclusive, us")
    for i in range(n):
        st = statistics.median(p[0] for p in per_pos[i]) / 1e3
        du = statistics.median(p[1] for p in per_pos[i]) / 1e3
        ex = statistics.median(p[2] for p in per_pos[i]) / 1e3
        print(f"{i:4d} {st:9.1f} {du:7.2f} {ex:7.2f}  {short(names[i])}")


if __name__ == "__main__":
    main()
