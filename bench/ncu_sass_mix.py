#!/usr/bin/env python3
"""ncu_sass_mix.py: where a kernel's instructions and stalls go, from ncu's SASS page.

Reads the CSV that `ncu -i REPORT --page source --csv --print-source sass` writes for one profiled launch (a report
taken with `--section SourceCounters`) and prints: warp instructions executed in all, each opcode's share of the instructions
and of the stall samples, and the stall reasons. With --warps W (the launch's warps), also the share of instructions
run once a warp (prologue and epilogue); with --per N, each opcode's count per N loop iterations of all warps (e.g.
--per 65536 for 8192 warps of 8 k-blocks).
Usage: bench/ncu_sass_mix.py SASS.csv [--warps W] [--per N]"""
import collections
import csv
import sys


def main():
    args = sys.argv[1:]
    if not args or args[0].startswith('-'):
        sys.exit(__doc__)
    per = int(args[args.index('--per') + 1]) if '--per' in args else 0
    warps = int(args[args.index('--warps') + 1]) if '--warps' in args else 0
    rows = list(csv.reader(open(args[0])))
    head = next(i for i, r in enumerate(rows) if r and r[0] == 'Address')
    hdr, data = rows[head], [r for r in rows[head + 1:] if len(r) == len(rows[head])]
    i_src, i_exec = hdr.index('Source'), hdr.index('Instructions Executed')
    i_samp = hdr.index('Warp Stall Sampling (All Samples)')
    stall = [i for i, h in enumerate(hdr) if h.startswith('stall_') and 'Not Issued' not in h]

    def num(r, i):
        return int(r[i] or 0)

    def opcode(src):
        w = src.split()
        if not w:
            return '?'
        return (w[1] if w[0].startswith('@') and len(w) > 1 else w[0]).split('.')[0]

    total = sum(num(r, i_exec) for r in data)
    samples = sum(num(r, i_samp) for r in data) or 1
    print(f'{rows[0][1] if len(rows[0]) > 1 else ""}')
    line = f'warp instructions executed: {total:,}'
    if warps:
        line += f'; run once a warp: {sum(num(r, i_exec) for r in data if num(r, i_exec) == warps) / total * 100:.1f}%'
    print(line)
    ex, st = collections.Counter(), collections.Counter()
    for r in data:
        ex[opcode(r[i_src])] += num(r, i_exec)
        st[opcode(r[i_src])] += num(r, i_samp)
    print('opcode      % instr  % stall' + ('   per iteration' if per else ''))
    for op, c in ex.most_common(16):
        extra = f'   {c / per:8.1f}' if per else ''
        print(f'{op:10s} {c / total * 100:7.1f} {st[op] / samples * 100:8.1f}{extra}')
    reasons = {hdr[i][6:]: sum(num(r, i) for r in data) for i in stall}
    s = sum(reasons.values()) or 1
    print('stalls: ' + ', '.join(f'{k} {v / s * 100:.0f}%' for k, v in sorted(reasons.items(), key=lambda x: -x[1]) if v / s >= 0.01))


if __name__ == '__main__':
    main()
