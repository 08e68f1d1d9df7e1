#!/usr/bin/env python3
"""ptx_same.py: whether kernels of two PTX files (nvcc -ptx) are the same code, for removing an A/B switch after a
GPU run: the kernel that was measured and tested (A) against the one committed (B). Each argument after the files is
NAME_A=NAME_B (mangled entry names); bodies are compared with the entry names, .loc lines, labels and the names of
the kernels' own shared variables normalized. Prints one line a pair; exits 1 if any differ or is missing.
  python3 bench/ptx_same.py exp.ptx clean.ptx _Z15kILi4ELi1EEv5Args=_Z15kILi4ELb0EEv5Args ..."""
import re
import sys


def entries(path):
    text = open(path).read()
    out = {}
    for m in re.finditer(r"\.visible \.entry (\w+)\(", text):
        name = m.group(1)
        body = text[m.start():text.index("\n}\n", m.start())]
        body = body.replace(name, "FN")
        body = re.sub(r"_ZZ\d+\w+?E\d+\w+", "SHARED", body)
        body = re.sub(r"^\s*\.loc.*$", "", body, flags=re.M)
        body = re.sub(r"\$L__\w+", "L", body)
        out[name] = "\n".join(l for l in body.split("\n") if l.strip())
    return out


def main():
    if len(sys.argv) < 4:
        print(__doc__)
        return 2
    a, b = entries(sys.argv[1]), entries(sys.argv[2])
    bad = 0
    for pair in sys.argv[3:]:
        na, nb = pair.split("=")
        if na not in a or nb not in b:
            print(f"missing: {na if na not in a else nb}")
            bad += 1
            continue
        same = a[na] == b[nb]
        bad += not same
        print(f"{'same' if same else 'DIFFERENT'}: {na} = {nb}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
