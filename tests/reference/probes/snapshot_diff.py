"""Lines up core's exact-simulation allocator events with a CUDA memory snapshot, event by event.

Usage (from the repository root, after `cargo build --release -p vramfit-core --example events`):
    tests/reference/.venv/bin/python tests/reference/probes/snapshot_diff.py SNAPSHOT MIN_MIB key=value...
Prints one line per alloc/free of at least MIN_MIB MiB: the model's block (size, segment ordinal,
offset, phase, op) beside the real one (size, segment ordinal in segment_alloc order, offset,
Python frames); `<<<` marks where they lie in different places. Segment ordinals only line up
while both sides created the same segments in the same order.
"""
import json
import os
import pickle
import subprocess
import sys

MIB = 2**20


def real_events(path):
    trace = pickle.load(open(path, "rb"))["device_traces"][0]
    segments, events = [], []
    for e in trace:
        if e["action"] == "segment_alloc":
            segments.append((e["addr"], e["size"]))
        if e["action"] in ("alloc", "free_completed"):
            ordinal = next(i for i in range(len(segments) - 1, -1, -1) if segments[i][0] <= e["addr"] < sum(segments[i]))
            frames = [
                (f["filename"].split("/")[-1], f["line"])
                for f in e.get("frames", [])
                if "gpt.py" in f["filename"] or "measure" in f["filename"]
            ][:2]
            events.append((e["action"] == "alloc", ordinal, e["addr"] - segments[ordinal][0], e["size"], frames))
    return events


def main():
    snapshot, min_mib, config = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
    binary = os.environ.get("EVENTS_BIN", "target/release/examples/events")
    out = subprocess.run([binary, *config], capture_output=True, text=True, check=True).stdout
    model = [m for m in map(json.loads, out.splitlines()) if abs(m["block"]) >= min_mib * MIB]
    real = [r for r in real_events(snapshot) if r[3] >= min_mib * MIB]
    for k in range(max(len(model), len(real))):
        m = model[k] if k < len(model) else None
        r = real[k] if k < len(real) else None
        left = f"M {'+' if m['block'] > 0 else '-'}{abs(m['block']) / MIB:.1f} seg {m['segment']} @{m['offset'] / MIB:.1f} {m['phase']} {m['op'][:30]}" if m else ""
        right = f"R {'+' if r[0] else '-'}{r[3] / MIB:.1f} seg {r[1]} @{r[2] / MIB:.1f} {r[4]}" if r else ""
        same = m and r and m["segment"] == r[1] and m["offset"] == r[2]
        print(f"{k:5} {left:70} | {right}{'' if same else '  <<<'}")


if __name__ == "__main__":
    main()
