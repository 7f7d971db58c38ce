"""Times torch.nn.EmbeddingBag on exactly the workloads `shardplan-collect bench --dump DIR` measured.

    shardplan-collect --backend cuda bench --compute-samples 40 --comm-samples 0 --dump DIR > ours.json
    python3 tools/torch_embedding_bag_bench.py --dump DIR --ours ours.json --out torch.json

PyTorch has no table-batched operator without FBGEMM, so each table is one nn.EmbeddingBag (sum
pooling, sparse gradients) and the step is what a PyTorch user writes: forward over every table,
concatenate, backward of a fixed random gradient, torch.optim.SGD step. Same protocol as the collector:
before every iteration a buffer of twice the L2 is rewritten, warm-up runs, then timed runs with CUDA
events (median kept). Effective bandwidth uses the collector's byte count (docs/COLLECTOR.md).
"""

import argparse
import json
import os
import statistics

import numpy as np
import torch

LEARNING_RATE = 0.01


def load_sample(directory, g):
    with open(os.path.join(directory, f"sample_{g}.json")) as f:
        meta = json.load(f)
    tables = []
    for k, t in enumerate(meta["tables"]):
        idx = np.fromfile(os.path.join(directory, f"sample_{g}_t{k}.indices"), dtype="<u4").astype(np.int64)
        off = np.fromfile(os.path.join(directory, f"sample_{g}_t{k}.offsets"), dtype="<u4").astype(np.int64)
        if len(off) != meta["batch_size"] + 1 or off[-1] != len(idx) or (len(idx) and idx.max() >= t["rows"]):
            raise ValueError(f"sample {g} table {k}: offsets/indices do not match the table")
        tables.append((t["rows"], t["dim"], idx, off))
    return meta["batch_size"], tables


def bytes_touched(batch, tables):
    fwd = bwd = 0
    for _, d, idx, _ in tables:
        lookups = len(idx)
        fwd += 4 * (lookups * d + lookups + batch + 1 + batch * d)
        bwd += 4 * (lookups + batch + 1 + batch * d + 2 * lookups * d)
    return fwd, bwd


def time_sample(batch, tables, warmup, reps, flush):
    dev = torch.device("cuda")
    gen = torch.Generator(device=dev).manual_seed(0)
    bags, inputs = [], []
    for rows, d, idx, off in tables:
        bag = torch.nn.EmbeddingBag(rows, d, mode="sum", sparse=True, device=dev)
        with torch.no_grad():
            bag.weight.uniform_(-0.01, 0.01, generator=gen)
        bags.append(bag)
        inputs.append((torch.from_numpy(idx).to(dev), torch.from_numpy(off[:-1]).to(dev)))
    params = [p for b in bags for p in b.parameters()]
    opt = torch.optim.SGD(params, lr=LEARNING_RATE)
    total_dim = sum(t[1] for t in tables)
    grad = torch.empty(batch, total_dim, device=dev).uniform_(-0.01, 0.01, generator=gen)
    events = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
    fwd, bwd = [], []
    for it in range(warmup + reps):
        opt.zero_grad(set_to_none=True)
        flush.add_(1.0)
        events[0].record()
        out = torch.cat([b(i, o) for b, (i, o) in zip(bags, inputs)], dim=1)
        events[1].record()
        out.backward(grad)
        opt.step()
        events[2].record()
        events[2].synchronize()
        if it >= warmup:
            fwd.append(events[0].elapsed_time(events[1]))
            bwd.append(events[1].elapsed_time(events[2]))
    return statistics.median(fwd), statistics.median(bwd)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dump", required=True, help="directory written by shardplan-collect bench --dump")
    ap.add_argument("--ours", help="the bench JSON of the same run, for the side-by-side table")
    ap.add_argument("--out", required=True)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args()
    samples = sorted(
        int(f[len("sample_") : -len(".json")])
        for f in os.listdir(args.dump)
        if f.startswith("sample_") and f.endswith(".json")
    )
    if not samples:
        raise SystemExit(f"--dump {args.dump}: no sample_<g>.json files")
    ours = None
    if args.ours:
        with open(args.ours) as f:
            ours = json.load(f)["compute"]["per_sample"]
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    flush = torch.empty(max(2 * l2, 8 << 20) // 4, device="cuda")
    rows, sums = [], {"fb": 0, "bb": 0, "tf": 0.0, "tb": 0.0, "of": 0.0, "ob": 0.0}
    for g in samples:
        batch, tables = load_sample(args.dump, g)
        f_ms, b_ms = time_sample(batch, tables, args.warmup, args.reps, flush)
        fb, bb = bytes_touched(batch, tables)
        row = {"sample": g, "tables": len(tables), "torch_fwd_ms": f_ms, "torch_bwd_ms": b_ms}
        if ours is not None:
            row["ours_fwd_ms"], row["ours_bwd_ms"] = ours[g]["fwd_ms"], ours[g]["bwd_ms"]
            sums["of"] += row["ours_fwd_ms"]
            sums["ob"] += row["ours_bwd_ms"]
        sums["fb"] += fb
        sums["bb"] += bb
        sums["tf"] += f_ms
        sums["tb"] += b_ms
        rows.append(row)
        torch.cuda.empty_cache()
    summary = {
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "samples": len(samples),
        "torch_fwd_gb_per_s": sums["fb"] / (sums["tf"] / 1e3) / 1e9,
        "torch_bwd_gb_per_s": sums["bb"] / (sums["tb"] / 1e3) / 1e9,
    }
    if ours is not None:
        summary["ours_fwd_gb_per_s"] = sums["fb"] / (sums["of"] / 1e3) / 1e9
        summary["ours_bwd_gb_per_s"] = sums["bb"] / (sums["ob"] / 1e3) / 1e9
        summary["fwd_speedup_vs_torch"] = sums["tf"] / sums["of"]
        summary["bwd_speedup_vs_torch"] = sums["tb"] / sums["ob"]
    with open(args.out, "w") as f:
        json.dump({"summary": summary, "per_sample": rows}, f, indent=1)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
