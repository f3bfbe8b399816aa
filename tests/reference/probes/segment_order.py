"""Scores rules for where cudaMalloc puts PyTorch's segments against the memory snapshots.

Usage (from the repository root; plain Python 3, no torch needed to read the pickles):
    python3 tests/reference/probes/segment_order.py [tests/reference/snapshots/*.pickle*]
For each snapshot, and in total, prints how many pairs of segments each rule puts in the
measured address order: all pairs, pairs of equal size, and pairs of equal size of 96 MiB or
more (the ties between large free blocks that decide the reserve). Rules: `creation` (newer
segments lie higher, the model's assumption before 2026-11-26), `newest-lowest` (each new
segment directly below the last), and `chunks-N` (core's `AddressSpace` in
core/src/allocator.rs with N = 32: chunks of the size rounded up to N MiB, each below the last;
a segment first fills the lowest unused chunk top it fits, from its bottom up). The rules are
scored on the same snapshots the 32 MiB chunk was chosen on: an in-sample fit.
"""
import glob
import gzip
import itertools
import pickle
import sys

MIB = 1 << 20


def segments(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        trace = pickle.load(f)["device_traces"][0]
    return [(e["addr"], e["size"]) for e in trace if e["action"] == "segment_alloc"]


def creation(sizes):
    out, addr = [], 0
    for size in sizes:
        out.append(addr)
        addr += size
    return out


def newest_lowest(sizes):
    out, addr = [], 0
    for size in sizes:
        addr -= size
        out.append(addr)
    return out


def chunks(sizes, chunk_mib):
    gaps, low, out = [], 0, []
    for size in sizes:
        fitting = [g for g in gaps if g[1] - g[0] >= size]
        if fitting:
            gap = min(fitting)
            out.append(gap[0])
            gap[0] += size
            gaps = [g for g in gaps if g[0] < g[1]]
            continue
        chunk = -(-size // (chunk_mib * MIB)) * chunk_mib * MIB
        low -= chunk
        if chunk > size:
            gaps.append([low + size, low + chunk])
        out.append(low)
    return out


def score(real, predicted, sizes):
    """(right, of) for all pairs, equal-size pairs, and equal pairs of 96 MiB or more."""
    counts = [[0, 0], [0, 0], [0, 0]]
    for i, j in itertools.combinations(range(len(real)), 2):
        right = (real[i] < real[j]) == (predicted[i] < predicted[j])
        kinds = [True, sizes[i] == sizes[j], sizes[i] == sizes[j] and sizes[i] >= 96 * MIB]
        for kind, c in zip(kinds, counts):
            if kind:
                c[0] += right
                c[1] += 1
    return counts


def main():
    paths = sys.argv[1:] or sorted(glob.glob("tests/reference/snapshots/*.pickle*"))
    rules = {"creation": creation, "newest-lowest": newest_lowest}
    for mib in (2, 16, 32, 64):
        rules[f"chunks-{mib}"] = lambda sizes, mib=mib: chunks(sizes, mib)
    totals = {name: [[0, 0], [0, 0], [0, 0]] for name in rules}
    for path in paths:
        segs = segments(path)
        real, sizes = [a for a, _ in segs], [s for _, s in segs]
        print(f"{path.split('/')[-1]} ({len(segs)} segments)")
        for name, rule in rules.items():
            counts = score(real, rule(sizes), sizes)
            for total, c in zip(totals[name], counts):
                total[0] += c[0]
                total[1] += c[1]
            print(f"  {name:14} " + "  ".join(f"{label} {r}/{n}" for label, (r, n) in zip(("all", "equal", "equal>=96MiB"), counts)))
    print("total")
    for name, counts in totals.items():
        print(f"  {name:14} " + "  ".join(f"{label} {r}/{n} ({r / max(n, 1):.0%})" for label, (r, n) in zip(("all", "equal", "equal>=96MiB"), counts)))


if __name__ == "__main__":
    main()
