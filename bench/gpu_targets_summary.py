#!/usr/bin/env python3
"""gpu_targets_summary.py OUTDIR: the figures of bench/gpu_targets.sh's runs beside the issues' targets, one line each.
A run that failed or is missing prints as such; nothing is filled in."""
import json
import re
import sys
from pathlib import Path


def load(path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def runs_by_concurrency(doc):
    return {r["concurrency"]: r for r in (doc or {}).get("runs", [])}


def line(figure, value, target, met):
    mark = "" if met is None else ("  met" if met else "  NOT met")
    print(f"{figure:<46} {value:<44} target {target}{mark}")


def main():
    out = Path(sys.argv[1])
    device = (out / "device.txt").read_text().strip() if (out / "device.txt").exists() else "?"
    print(f"# {device}")

    eng = runs_by_concurrency(load(out / "engine.json"))
    if 1 in eng:
        r = eng[1]
        line("issue 18: engine, 1 sequence", f"{r['all_decoding_tokens_per_s']:.2f} tok/s, {100 * r['roofline_fraction']:.1f}%",
             ">= 85% of the roofline", r["roofline_fraction"] >= 0.85)
    else:
        line("issue 18: engine, 1 sequence", "no run", ">= 85% of the roofline", None)
    for n, goal in ((8, None), (16, None), (32, None), (64, 10000), (128, 14000)):
        if n not in eng:
            line(f"issue 18: engine, {n} sequences", "no run", f">= {goal} tok/s" if goal else "-", None)
            continue
        r = eng[n]
        value = f"{r['decode_tokens_per_s']:.0f} tok/s ({r['all_decoding_tokens_per_s']:.0f} all decoding)"
        line(f"issue 18: engine, {n} sequences", value, f">= {goal} tok/s" if goal else "-",
             r["decode_tokens_per_s"] >= goal if goal else None)

    gemma = load(out / "gemma.json")
    if gemma:
        line("issue 18: Gemma-4-E4B decode, 128 + 256", f"{gemma['decode_tokens_per_s']:.2f} tok/s, {100 * gemma['roofline_fraction']:.1f}%",
             ">= 70% of the roofline", gemma["roofline_fraction"] >= 0.70)
    else:
        line("issue 18: Gemma-4-E4B decode, 128 + 256", "no run", ">= 70% of the roofline", None)

    spec = (out / "spec.txt").read_text() if (out / "spec.txt").exists() else ""
    m = re.search(r"oracle at k = 8: ([0-9.]+)x plain decode; a verify step costs ([0-9.]+)x", spec)
    if m:
        speedup, cost = float(m.group(1)), float(m.group(2))
        line("issue 20: oracle speculation, k = 8", f"{speedup:.2f}x plain", ">= 5x", speedup >= 5)
        line("issue 20: verify step at k = 8", f"{cost:.3f}x a plain step", "<= 1.15x", cost <= 1.15)
    else:
        line("issue 20: oracle speculation, k = 8", "no run", ">= 5x; verify <= 1.15x", None)

    for name, goal in (("q4", 0.80), ("q8", 0.82)):
        d = load(out / f"{name}.json")
        figure = f"issue 21: {name}/g64 decode, 1 sequence"
        if d:
            line(figure, f"{d['decode_tokens_per_s']:.2f} tok/s, {100 * d['roofline_fraction']:.1f}%", f">= {100 * goal:.0f}% of the roofline",
                 d["roofline_fraction"] >= goal)
        else:
            line(figure, "no run", f">= {100 * goal:.0f}% of the roofline", None)
    q4 = runs_by_concurrency(load(out / "q4-c64.json")).get(64)
    bf = eng.get(64)
    if q4 and bf:
        line("issue 21: q4, 64 sequences", f"{q4['decode_tokens_per_s']:.0f} tok/s (bf16 {bf['decode_tokens_per_s']:.0f})", ">= bf16",
             q4["decode_tokens_per_s"] >= bf["decode_tokens_per_s"])
    else:
        line("issue 21: q4, 64 sequences", "no run", ">= bf16", None)


if __name__ == "__main__":
    main()
