#!/usr/bin/env python3
"""steps.py: where the wall time of an engine's steps goes, from cupti_trace.c's output.

Unlike summarize.py (kernels of recorded graphs only), takes every kernel, launched from a graph or not, splits the
stream into steps at each kernel whose name holds FIRST_KERNEL ("embed" by default: a step's first), and groups the
steps by their kernels' names in order (a step's shape: a plain decode step, a verification, one with a prompt
chunk; cuBLAS picks its kernels by the shapes). For
each group: how many steps, the median wall time (a step's first start to the next step's), the time the GPU was
busy (the union of its kernels) and idle, and the kernels that take the most exclusive time (a kernel's end minus
the latest end before it).

  python3 tools/trace/steps.py TRACE [FIRST_KERNEL [TOP]]"""
import statistics
import sys

from summarize import short


def busy_ns(kernels):
    total, cs, ce = 0, None, None
    for s, e, _, _ in kernels:
        if ce is None or s > ce:
            if ce is not None:
                total += ce - cs
            cs, ce = s, e
        else:
            ce = max(ce, e)
    return total + (ce - cs if ce is not None else 0)


def main():
    path = sys.argv[1]
    first = sys.argv[2] if len(sys.argv) > 2 else "embed"
    top = int(sys.argv[3]) if len(sys.argv) > 3 else 12
    rows = []
    for line in open(path):
        s, e, node, name = line.rstrip("\n").split("\t", 3)
        rows.append((int(s), int(e), int(node), name))
    rows.sort()
    starts = [i for i, r in enumerate(rows) if first in r[3]]
    if len(starts) < 2:
        print(f"fewer than two kernels named *{first}*: no steps")
        return
    groups = {}
    for a, b in zip(starts, starts[1:]):
        step = rows[a:b]
        wall = rows[b][0] - step[0][0]
        busy = busy_ns(step)
        groups.setdefault(tuple(r[3] for r in step), []).append((wall, busy, step))
    for names, steps in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        n = len(names)
        walls = [w for w, _, _ in steps]
        busys = [b for _, b, _ in steps]
        print(f"\n{len(steps)} steps of {n} kernels: wall median {statistics.median(walls)/1e3:.1f} us, "
              f"GPU busy {statistics.median(busys)/1e3:.1f} us, idle {statistics.median(w - b for w, b, _ in steps)/1e3:.1f} us")
        per = {}
        for _, _, step in steps:
            latest = step[0][0]
            sums = {}
            for s, e, _, name in step:
                ex = max(0, e - max(latest, s))
                latest = max(latest, e)
                c = sums.setdefault(name, [0, 0])
                c[0] += ex
                c[1] += 1
            for name, c in sums.items():
                per.setdefault(name, []).append(c)
        ranked = sorted(per.items(), key=lambda kv: -statistics.median(c[0] for c in kv[1]))
        for name, cs in ranked[:top]:
            ex = statistics.median(c[0] for c in cs) / 1e3
            print(f"  {ex:9.1f} us {cs[0][1]:4d}x  {short(name)}")


if __name__ == "__main__":
    main()
