# sum of kernel durations by name from cupti_trace.c's TSV (start, end, ?, name)
import sys, collections
tot = collections.Counter(); cnt = collections.Counter()
for line in open(sys.argv[1]):
    f = line.rstrip("\n").split("\t")
    if len(f) < 4: continue
    d = (int(f[1]) - int(f[0])) / 1e3
    n = f[3][:70]
    tot[n] += d; cnt[n] += 1
all_ = sum(tot.values())
print(f"total {all_:.0f} us")
for n, v in tot.most_common(14): print(f"{v:10.0f} us {cnt[n]:6d} {n}")
