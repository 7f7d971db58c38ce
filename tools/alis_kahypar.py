#!/usr/bin/env python3
"""Mt-KaHyPar beside the alis partitioner, on exactly the hypergraphs `shardplan dynamic` partitions.

`shardplan dynamic ... --strategies direct,full --dump-dir DIR` writes, for every scored update of the replay,
the hypergraph `direct` (the previous window) and `full` (all requests so far) partition, every window's
requests, each row's hash key, and the alis partitioner's partition, km1 and median time per shard count
(`manifest.json`). This script partitions the same hypergraphs with Mt-KaHyPar (KM1 objective, preset DEFAULT,
one thread, every block capped at the same ⌈(1+ε)·rows/S⌉) and reports, per stream, scope and S:

- km1 (Σ over nets of connectivity − 1) of both on the hypergraph partitioned, summed over the updates, and the
  gap `ours / Mt-KaHyPar − 1`; the worst single update;
- the mean fanout of the partitioned hypergraph's nets (in-sample);
- the prequential fanout: each partition scored on the window after it, rows not known yet at their hash shard,
  exactly as the replay scores a strategy (the replay's `direct` and `full` with either partitioner);
- partitioning time, summed over the updates, and the ratio Mt-KaHyPar / ours.

With `--replay REPORT.json` (a `shardplan dynamic --out` report over the same stream, seeds and shard counts)
it also prints each replayed strategy's mean fanout beside Mt-KaHyPar's prequential `full` and `direct`.

A tools/ script, never a dependency of the product. Set-up (a virtual environment outside the repository):

    python3 -m venv ~/.venv-mtk && ~/.venv-mtk/bin/pip install mtkahypar==1.7.post1

Usage: ~/.venv-mtk/bin/python tools/alis_kahypar.py DUMP_DIR [--replay REPORT.json] [--out RESULT.json]
                                                   [--mtk-from EARLIER_RESULT.json] [--scope direct|full]

`--scope` keeps one scope's hypergraphs. Mt-KaHyPar's partitions depend on what the process partitioned before
them (its seeding), so a one-scope run's km1 can differ from a run over both scopes by a few percent (the
synthetic windows at S = 4: 5,642 against 5,454); its times are what it is for.

`--mtk-from` takes Mt-KaHyPar's side from an earlier `--out` over the same hypergraphs (checked instance by
instance: vertex and net counts, cap) instead of running it again: the hypergraphs `direct` and `full` partition
do not depend on the alis partitioner, so after a change to it only our side needs scoring (seconds, where
Mt-KaHyPar takes 10–40 minutes a stream). Needs no `mtkahypar`. The results of `docs/ALIS.md` are in
`docs/results/alis-mtk/`.
"""

import argparse
import json
import os
import statistics
import sys
import time


def read_hmetis(path):
    """Nets (lists of 0-based pins) and net weights of an hMETIS file, and its vertex count."""
    with open(path) as f:
        head = f.readline().split()
        m, n = int(head[0]), int(head[1])
        weighted = len(head) > 2 and head[2] in ("1", "11")
        nets, weights = [], []
        for _ in range(m):
            vals = [int(x) for x in f.readline().split()]
            if weighted:
                weights.append(vals[0])
                vals = vals[1:]
            else:
                weights.append(1)
            nets.append([p - 1 for p in vals])
    return n, nets, weights


def km1_and_fanout(nets, weights, part):
    """km1 = Σ w·(λ − 1) over all nets; mean λ over the nets with at least two pins (unweighted)."""
    km1, lam_sum, counted = 0, 0, 0
    for net, w in zip(nets, weights):
        lam = len({part[p] for p in net})
        km1 += w * (lam - 1)
        if len(net) >= 2:
            lam_sum += lam
            counted += 1
    return km1, (lam_sum / counted if counted else 1.0)


def prequential(window_nets, part, keys, shards):
    """Mean fanout of the requests of the next window under `part` (rows beyond it at their hash shard)."""
    known = len(part)
    total = 0
    for net in window_nets:
        total += len({part[r] if r < known else keys[r] % shards for r in net})
    return total, len(window_nets)


def mtkahypar_partition(mtk, initializer, n, nets, weights, shards, cap, seed):
    context = initializer.context_from_preset(mtk.PresetType.DEFAULT)
    context.set_partitioning_parameters(shards, 0.0, mtk.Objective.KM1)
    context.set_individual_target_block_weights([cap] * shards)
    context.logging = False
    mtk.set_seed(seed)
    hg = initializer.create_hypergraph(context, n, len(nets), nets, [1] * n, weights)
    cpu0, start = time.process_time(), time.perf_counter()
    phg = hg.partition(context)
    elapsed_ms = (time.perf_counter() - start) * 1e3
    cpu_ms = (time.process_time() - cpu0) * 1e3
    part = [phg.block_id(v) for v in range(n)]
    return part, phg.km1(), elapsed_ms, cpu_ms


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dump_dir")
    ap.add_argument("--replay", help="a `shardplan dynamic --out` report of the same stream")
    ap.add_argument("--out", help="write every instance's numbers here (JSON)")
    ap.add_argument("--mtk-from", help="Mt-KaHyPar's numbers from an earlier --out over the same dump")
    ap.add_argument("--scope", choices=("direct", "full"),
                    help="only the hypergraphs of this scope (the windows alone take Mt-KaHyPar seconds, not minutes)")
    args = ap.parse_args()

    earlier = None
    if args.mtk_from:
        try:
            with open(args.mtk_from) as f:
                earlier = {(r["scope"], r["seed"], r["update"], r["shards"]): r for r in json.load(f)["rows"]}
        except (OSError, ValueError, KeyError, TypeError) as e:
            sys.exit(f"--mtk-from {args.mtk_from}: not an earlier --out of this script ({type(e).__name__}: {e})")
        mtk, initializer = None, None
    else:
        import mtkahypar as mtk

        initializer = mtk.initialize(1, False)
    with open(os.path.join(args.dump_dir, "manifest.json")) as f:
        manifest = json.load(f)
    path = lambda name: os.path.join(args.dump_dir, name)
    eps = manifest["epsilon"]
    streams = {s["seed"]: s for s in manifest["streams"]}
    keys = {}
    windows = {}
    rows = []
    for inst in manifest["instances"]:
        if args.scope and inst["scope"] != args.scope:
            continue
        seed = inst["seed"]
        if seed not in keys:
            with open(path(streams[seed]["rows_file"])) as f:
                keys[seed] = [int(line) for line in f]
        n, nets, weights = read_hmetis(path(inst["file"]))
        nxt = inst["update"] + 1
        if (seed, nxt) not in windows:
            windows[(seed, nxt)] = read_hmetis(path(streams[seed]["windows"][nxt]["file"]))[1]
        next_window = windows[(seed, nxt)]
        for ours in inst["ours"]:
            shards, cap = ours["shards"], ours["cap"]
            with open(path(ours["part"])) as f:
                our_part = [int(line) for line in f]
            our_km1, our_fan = km1_and_fanout(nets, weights, our_part)
            if our_km1 != ours["km1"]:
                sys.exit(f"{ours['part']}: km1 {our_km1} here, {ours['km1']} in the manifest")
            our_pre, count = prequential(next_window, our_part, keys[seed], shards)
            if earlier is not None:
                key = (inst["scope"], seed, inst["update"], shards)
                old = earlier.get(key)
                if old is None or (old["n_vertices"], old["n_nets"], old["cap"]) != (n, inst["n_nets"], cap):
                    sys.exit(f"{inst['file']} S={shards}: --mtk-from has no instance with {n} vertices, "
                             f"{inst['n_nets']} nets and cap {cap} for {key}")
                mtk_km1, mtk_fan, mtk_load = old["mtk_km1"], old["mtk_fanout"], old["mtk_max_load"]
                mtk_ms, mtk_cpu, mtk_pre = old["mtk_ms"], old["mtk_cpu_ms"], old["mtk_next_fanout_sum"]
            else:
                # Mt-KaHyPar runs with the seed the dump's partition ran with.
                mtk_part, mtk_km1, mtk_ms, mtk_cpu = mtkahypar_partition(
                    mtk, initializer, n, nets, weights, shards, cap, seed
                )
                recount, mtk_fan = km1_and_fanout(nets, weights, mtk_part)
                if mtk_km1 != recount:
                    sys.exit(f"{inst['file']} S={shards}: Mt-KaHyPar's km1 {mtk_km1} differs from the recount")
                mtk_load = max(mtk_part.count(b) for b in range(shards))
                mtk_pre, _ = prequential(next_window, mtk_part, keys[seed], shards)
            row = {
                "scope": inst["scope"], "seed": seed, "update": inst["update"], "shards": shards, "cap": cap,
                "n_vertices": n, "n_nets": inst["n_nets"],
                "ours_km1": our_km1, "mtk_km1": mtk_km1, "ours_fanout": our_fan, "mtk_fanout": mtk_fan,
                "ours_max_load": ours["max_load"], "mtk_max_load": mtk_load,
                "ours_ms": ours["time_ms"], "mtk_ms": mtk_ms,
                "ours_cpu_ms": ours.get("cpu_ms"), "mtk_cpu_ms": mtk_cpu,
                "ours_next_fanout_sum": our_pre, "mtk_next_fanout_sum": mtk_pre, "next_requests": count,
            }
            rows.append(row)
            print(f"seed {seed} update {inst['update']:>2} {inst['scope']:<6} S={shards:<3} km1 {our_km1:>7} vs "
                  f"{mtk_km1:>7} ({100 * (our_km1 / max(mtk_km1, 1) - 1):+6.1f}%)  {ours['time_ms']:8.2f} ms vs "
                  f"{mtk_ms:8.1f} ms (CPU {ours.get('cpu_ms') or float('nan'):.2f} vs {mtk_cpu:.1f})  max load {ours['max_load']}/{mtk_load} cap {cap}", file=sys.stderr)

    print(f"Source: {manifest['source']}; windows of {manifest['window_requests']} requests; ε = {eps}; "
          f"alis partitioner `{manifest['partitioner']}`; Mt-KaHyPar "
          f"{(mtk.__version__ if hasattr(mtk, '__version__') else '') if mtk else 'from ' + args.mtk_from} "
          f"preset DEFAULT, KM1, 1 thread, the dump's seeds, every block capped at ⌈(1+ε)·rows/S⌉. Times are "
          f"sums over the partitions of the partition call alone: CPU time (this thread's for alis, the process's "
          f"for Mt-KaHyPar) and wall-clock.\n")
    print("| scope | S | partitions | km1 ours | km1 Mt-KaHyPar | gap | worst | fanout ours | Mt-KaHyPar "
          "| next-window fanout ours | Mt-KaHyPar | gap | CPU ms ours | Mt-KaHyPar | ratio | wall ms ours "
          "| Mt-KaHyPar | ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    summary = {}
    for scope in sorted({r["scope"] for r in rows}, key=lambda s: ("direct", "full").index(s)):
        for shards in manifest["shards"]:
            sel = [r for r in rows if r["scope"] == scope and r["shards"] == shards]
            if not sel:
                continue
            ok, mk = sum(r["ours_km1"] for r in sel), sum(r["mtk_km1"] for r in sel)
            worst = max(r["ours_km1"] / max(r["mtk_km1"], 1) - 1 for r in sel)
            of = statistics.mean(r["ours_fanout"] for r in sel)
            mf = statistics.mean(r["mtk_fanout"] for r in sel)
            req = sum(r["next_requests"] for r in sel)
            op = sum(r["ours_next_fanout_sum"] for r in sel) / req
            mp = sum(r["mtk_next_fanout_sum"] for r in sel) / req
            ot, mt = sum(r["ours_ms"] for r in sel), sum(r["mtk_ms"] for r in sel)
            oc = sum(r["ours_cpu_ms"] or float("nan") for r in sel)
            mc = sum(r["mtk_cpu_ms"] for r in sel)
            over = [r for r in sel if r["ours_max_load"] > r["cap"] or r["mtk_max_load"] > r["cap"]]
            summary[(scope, shards)] = {"mtk_next_fanout": mp, "ours_next_fanout": op}
            print(f"| {scope} | {shards} | {len(sel)} | {ok} | {mk} | {100 * (ok / max(mk, 1) - 1):+.1f}% | "
                  f"{100 * worst:+.1f}% | {of:.3f} | {mf:.3f} | {op:.3f} | {mp:.3f} | {100 * (op / mp - 1):+.1f}% | "
                  f"{oc:.1f} | {mc:.1f} | {mc / max(oc, 1e-9):.1f}× | {ot:.1f} | {mt:.1f} | {mt / max(ot, 1e-9):.1f}× |"
                  + (f" over cap: {len(over)}" if over else ""))
    if args.replay:
        with open(args.replay) as f:
            report = json.load(f)
        seeds = sorted(streams)
        print("\nReplayed strategies (mean fanout over the scored windows, the dump's seeds) against Mt-KaHyPar's "
              "partition of the previous window (`direct`) and of all history (`full`), scored the same way:\n")
        print("| strategy | S | replay fanout | vs Mt-KaHyPar direct | vs Mt-KaHyPar full |")
        print("|---|---|---|---|---|")
        for cell in report["cells"]:
            # A synthetic stream differs per seed: compare the same seeds. A file stream is the same for all.
            synthetic = manifest["source"].startswith("synthetic")
            runs = [r for r in cell["runs"] if r["seed"] in seeds or not synthetic]
            if not runs:
                continue
            fan = statistics.mean(r["mean_fanout"] for r in runs)
            shards = cell["shards"]
            gap = lambda scope: (f"{100 * (fan / summary[(scope, shards)]['mtk_next_fanout'] - 1):+.1f}%"
                                 if (scope, shards) in summary else "–")
            print(f"| {cell['strategy']} | {shards} | {fan:.3f} | {gap('direct')} | {gap('full')} |")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"manifest": manifest["source"], "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
