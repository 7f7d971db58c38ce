#!/usr/bin/env python3
"""The hostile-input battery: bad, extreme and malformed inputs against `shardplan`, each classified.

Usage: tools/hostile_battery.py [--bin target/release/shardplan] [--json out.json]

Every case says what a correct program does: refuse it (a non-zero exit with an `error:` line that names
the field or value, within the time limit) or answer it (exit 0, and the answer passes a check). Outcomes:
  clear error   refused as it should be
  answered      answered correctly
  wrong answer  exit 0 where a refusal was due, or an answer that fails its check
  unclear       refused, but the message does not name what is wrong
  panic         exit 101 or a panic message
  abort         killed by a signal (allocation failure, stack overflow, ...)
  hang          ran past its time limit
Run it against two builds to compare them; the cases need nothing but the binary and a scratch folder.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HUGE = 2**40


def write(path, text, mode="w"):
    with open(path, mode) as f:
        f.write(text)
    return path


def cases(d):
    """(name, argv, expect, needles, limit_s, check): expect is 'refuse' or 'answer'."""
    big = write(f"{d}/big.csv", "name,rows,dim,pooling_factor,optimizer\n"
                + "".join(f"t{i},{HUGE},65536,1,adam\n" for i in range(100)))
    pf20 = write(f"{d}/pf20.csv", "name,rows,dim,pooling_factor\na,10,8,1e20\n")
    pf308 = write(f"{d}/pf308.csv", "name,rows,dim,pooling_factor\na,10,8,1e308\n")
    pfnan = write(f"{d}/pfnan.csv", "name,rows,dim,pooling_factor\na,10,8,NaN\n")
    dupcol = write(f"{d}/dupcol.csv", "name,rows,rows,dim\na,10,10,8\n")
    dupname = write(f"{d}/dupname.csv", "name,rows,dim,pooling_factor\na,10,8,1\na,10,8,1\n")
    empty = write(f"{d}/empty.csv", "")
    header_only = write(f"{d}/header.csv", "name,rows,dim,pooling_factor\n")
    rows0 = write(f"{d}/rows0.csv", "name,rows,dim,pooling_factor\na,0,8,1\n")
    rowsneg = write(f"{d}/rowsneg.csv", "name,rows,dim,pooling_factor\na,-1,8,1\n")
    dim5 = write(f"{d}/dim5.csv", "name,rows,dim,pooling_factor\na,10,5,1\n")
    dim0 = write(f"{d}/dim0.csv", "name,rows,dim,pooling_factor\na,10,0,1\n")
    rows_over = write(f"{d}/rowsover.csv", f"name,rows,dim,pooling_factor\na,{2**64},8,1\n")
    esc = write(f"{d}/esc.csv", "name,rows,dim,pooling_factor\n\x1b[31mred,10,8,1\n")
    nonutf8 = write(f"{d}/nonutf8.csv", b"name,rows,dim,pooling_factor\n\xff\xfe,10,8,1\n", "wb")
    bom_json = write(f"{d}/bom.json", "\ufeff" + json.dumps([{"name": "a", "rows": 1000, "dim": 16, "pooling_factor": 2.0}]))
    nested = write(f"{d}/nested.json", "[" * 100000 + "]" * 100000)
    trunc = write(f"{d}/trunc.json", '[{"name": "a", "rows": 10')
    ok_csv = write(f"{d}/ok.csv", "name,rows,dim,pooling_factor\na,100000,64,2\nb,200000,32,1\nc,5000,16,4\n")
    cases = []
    add = cases.append
    for algo in ["size-lookup", "neuroshard", "size", "random", "dreamshard", "autoshard", "torchrec"]:
        add((f"2^64-byte sums ({algo})", ["plan", "--tables", big, "--devices", "2", "--mem", str(2**64 - 1),
                                          "--algo", algo, "--out", f"{d}/o.json"], "refuse", [], 60, None))
    add(("--devices 4294967295", ["plan", "--sample", "10", "--devices", "4294967295"], "refuse", ["devices", "4294967295"], 10, None))
    add(("--devices 1000000000", ["plan", "--sample", "10", "--devices", "1000000000"], "refuse", ["devices", "1000000000"], 10, None))
    add(("--devices 0", ["plan", "--sample", "10", "--devices", "0"], "refuse", ["devices"], 10, None))
    add(("--mem 2^64", ["plan", "--sample", "10", "--devices", "2", "--mem", str(2**64)], "refuse", ["--mem", str(2**64)], 10, None))
    add(("--mem 99999999999TiB", ["plan", "--sample", "10", "--devices", "2", "--mem", "99999999999TiB"], "refuse", ["--mem", "99999999999TiB"], 10, None))
    add(("--mem 0", ["plan", "--sample", "10", "--devices", "2", "--mem", "0"], "refuse", ["--mem"], 10, None))
    add(("--mem abc", ["plan", "--sample", "10", "--devices", "2", "--mem", "abc"], "refuse", ["--mem", "abc"], 10, None))
    add(("--mem -1GiB", ["plan", "--sample", "10", "--devices", "2", "--mem", "-1GiB"], "refuse", ["unexpected argument"], 10, None))
    for name, path, needles in [
        ("pooling factor 1e20", pf20, ["pooling_factor"]), ("pooling factor 1e308", pf308, ["pooling_factor"]),
        ("pooling factor NaN", pfnan, ["pooling_factor"]), ("duplicated CSV column", dupcol, ["rows"]),
        ("duplicated table name", dupname, ["name"]), ("empty tables file", empty, []),
        ("header-only tables file", header_only, []), ("rows 0", rows0, ["rows"]), ("rows -1", rowsneg, ["rows"]),
        ("dim 5", dim5, ["dim"]), ("dim 0", dim0, ["dim"]), ("rows 2^64", rows_over, ["rows"]),
        ("escape sequence in a name", esc, ["name"]), ("non-UTF-8 tables file", nonutf8, []),
        ("JSON nested 100,000 deep", nested, []), ("truncated JSON", trunc, []),
    ]:
        add((name, ["plan", "--tables", path, "--devices", "2", "--out", f"{d}/o.json"], "refuse", needles, 30, None))
    add(("/dev/zero as a tables file", ["plan", "--tables", "/dev/zero", "--devices", "2"], "refuse", [], 60, None))
    add(("tables JSON with a byte-order mark", ["plan", "--tables", bom_json, "--devices", "2", "--out", f"{d}/bom-plan.json"],
         "answer", [], 30, lambda out: os.path.exists(f"{d}/bom-plan.json")))
    add(("--dim beside a dim column", ["plan", "--tables", ok_csv, "--dim", "8", "--devices", "2"], "refuse", ["--dim"], 30, None))
    add(("--batch 1024 with the h100 profile", ["plan", "--sample", "10", "--devices", "2", "--batch", "1024"], "refuse", ["1024"], 30, None))
    add(("--budget-ms -1", ["plan", "--sample", "10", "--devices", "2", "--budget-ms", "-1"], "refuse", ["unexpected argument"], 10, None))
    add(("--budget-ms NaN", ["plan", "--sample", "10", "--devices", "2", "--budget-ms", "NaN"], "refuse", ["budget"], 10, None))
    add(("--max-dim 3", ["plan", "--devices", "2", "--max-dim", "3"], "refuse", ["max_dim"], 10, None))
    add(("--sample 0", ["plan", "--sample", "0", "--devices", "2"], "refuse", [], 10, None))
    add(("--sample 1000000000", ["plan", "--sample", "1000000000", "--devices", "2"], "refuse", ["1000000000"], 10, None))
    for algo in ["neuroshard", "neuroshard+refine", "size-lookup+refine", "torchrec", "dreamshard", "autoshard"]:
        # A budget is a promise: 1 s asked, 2 s allowed for the whole process (starting, drawing 5,000 tables,
        # the report and the file).
        add((f"--budget-ms 1000 on 5,000 tables / 64 devices ({algo})",
             ["plan", "--sample", "5000", "--max-dim", "128", "--devices", "64", "--mem", "128GiB", "--seed", "3",
              "--algo", algo, "--budget-ms", "1000", "--out", f"{d}/o.json"], "answer", [], 2.0, None))
    add(("tasks --table-range 1..100000000", ["tasks", "--table-range", "1..100000000", "--out", f"{d}/t.jsonl"], "refuse", ["tables"], 10, None))
    add(("tasks --count 0", ["tasks", "--count", "0", "--out", f"{d}/t.jsonl"], "refuse", ["count"], 10, None))
    add(("dynamic 10^8 x 10^8 synthetic items", ["dynamic", "--synthetic", "--communities", "100000000",
                                                "--items-per-community", "100000000"], "refuse", ["communities"], 10, None))
    add(("dynamic 4294967297 x 4294967297", ["dynamic", "--synthetic", "--communities", "4294967297",
                                            "--items-per-community", "4294967297"], "refuse", ["communities"], 10, None))
    # Plan documents: a valid one, then edited.
    plan_ok = f"{d}/plan-ok.json"
    subprocess.run([BIN, "plan", "--sample", "6", "--devices", "2", "--seed", "1", "--out", plan_ok], capture_output=True)
    if os.path.exists(plan_ok):
        doc = json.load(open(plan_ok))
        dup = json.loads(json.dumps(doc))
        dup["task"]["tables"][1]["name"] = dup["task"]["tables"][0]["name"]
        write(f"{d}/plan-dup.json", json.dumps(dup))
        pf = json.loads(json.dumps(doc))
        pf["task"]["tables"][0]["pooling_factor"] = 1e20
        write(f"{d}/plan-pf.json", json.dumps(pf))
        dev = json.loads(json.dumps(doc))
        dev["pieces"][0]["device"] = 99
        write(f"{d}/plan-dev.json", json.dumps(dev))
        for name, path, needles in [("plan document with a duplicated table name", f"{d}/plan-dup.json", ["name"]),
                                    ("plan document with pooling factor 1e20", f"{d}/plan-pf.json", ["pooling_factor"]),
                                    ("plan document with a piece on device 99", f"{d}/plan-dev.json", ["99"])]:
            add((f"export-torchrec: {name}", ["export-torchrec", path, "--out", f"{d}/tr.json"], "refuse", needles, 30, None))
            add((f"evaluate: {name}", ["evaluate", path], "refuse", needles, 30, None))
    return cases


def classify(case, proc, elapsed, timed_out):
    name, argv, expect, needles, limit, check = case
    text = (proc.stdout if proc else "") + (proc.stderr if proc else "")
    if timed_out:
        return "hang"
    if proc.returncode == 101 or "panicked" in text:
        return "panic"
    if proc.returncode < 0 or proc.returncode in (134, 137, 139):
        return "abort"
    if elapsed > limit:
        return "hang"
    if expect == "refuse":
        if proc.returncode == 0:
            return "wrong answer"
        return "clear error" if all(n in text for n in needles) and "error" in text else "unclear"
    if proc.returncode != 0:
        return "wrong answer"
    return "answered" if check is None or check(text) else "wrong answer"


def main():
    global BIN
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/release/shardplan")
    ap.add_argument("--json")
    a = ap.parse_args()
    BIN = os.path.abspath(a.bin)
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for case in cases(d):
            name, argv, expect, needles, limit, check = case
            start = time.monotonic()
            timed_out, proc = False, None
            try:
                proc = subprocess.run([BIN, *argv], capture_output=True, text=True, errors="replace",
                                      timeout=max(limit * 3, 10), cwd=d)
            except subprocess.TimeoutExpired:
                timed_out = True
            elapsed = time.monotonic() - start
            outcome = classify(case, proc, elapsed, timed_out)
            last = ""
            if proc:
                lines = [l for l in (proc.stderr or proc.stdout).strip().splitlines() if l.strip()]
                last = lines[-1][:160] if lines else ""
            rows.append({"case": name, "expect": expect, "outcome": outcome, "seconds": round(elapsed, 2),
                         "exit": None if proc is None else proc.returncode, "message": last})
            print(f"{outcome:13} {elapsed:6.2f}s  {name}  | {last}", flush=True)
    counts = {}
    for r in rows:
        counts[r["outcome"]] = counts.get(r["outcome"], 0) + 1
    print("\n" + ", ".join(f"{k}: {v}" for k, v in sorted(counts.items())) + f" (of {len(rows)})")
    if a.json:
        json.dump({"bin": BIN, "counts": counts, "cases": rows}, open(a.json, "w"), indent=1)
    return 0


if __name__ == "__main__":
    BIN = ""
    sys.exit(main())
