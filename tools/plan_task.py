#!/usr/bin/env python3
"""The task a plan document was made for, as `shardplan plan` takes it back.

Usage: tools/plan_task.py PLAN_JSON [TABLES_OUT]

Prints one line, `DEVICES CAPS SEED`: the device count, the devices' memory caps in bytes comma-separated
(`--mem`) and the seed the plan was made with. With TABLES_OUT, also writes the task's tables there
(`--tables`). Used by `judge_variants.sh` and `which_member.sh` to replan a bench's task. Standard
library only.
"""

import json
import sys


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    try:
        with open(sys.argv[1]) as f:
            doc = json.load(f)
        tables, caps, seed = doc["task"]["tables"], doc["task"]["devices"]["mem_cap_bytes"], doc["seed"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        sys.exit(f"{sys.argv[1]}: not a plan document with task.tables, task.devices.mem_cap_bytes and seed ({e})")
    if len(sys.argv) == 3:
        with open(sys.argv[2], "w") as f:
            json.dump(tables, f)
    print(len(caps), ",".join(str(c) for c in caps), seed)


if __name__ == "__main__":
    main()
