#!/usr/bin/env bash
# Downloads MovieLens-100K (inside the PyPI wheel recbole==1.2.1) and converts it into the shardplan request
# stream format (JSON Lines) for `shardplan dynamic --input`.
#
# The MovieLens licence forbids redistribution: the data stays in the git-ignored data-cache/ folder and is
# fetched again on every fresh checkout.
#
# Mapping (one request = what an inference call for one user at one moment would look up):
#   - ratings are grouped per user and per UTC day (timestamp // 86400), in timestamp order;
#   - a group with more than MAX_ROWS items is split into consecutive chunks of at most MAX_ROWS items;
#   - request time = first timestamp of the chunk, request id = running index in (time, user) order;
#   - row ids = the chunk's item ids (table 0) plus the user id (table 1).
# It also writes ml-100k-batch16.jsonl, the mapping used to compare with the SPEC's anchor (hash fanout 7.32
# at S = 8): all ratings in timestamp order (ties by user, item), cut into requests of 16 consecutive
# ratings; rows = the distinct items (table 0) and users (table 1) of the 16.
# Usage: tools/fetch_movielens.sh [OUT_DIR]   (default data-cache/)
set -euo pipefail

OUT_DIR="${1:-data-cache}"
MAX_ROWS="${MAX_ROWS:-64}"
WHEEL_PATH="recbole/dataset_example/ml-100k/ml-100k.inter"
mkdir -p "$OUT_DIR"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

python3 -m pip download --no-deps --quiet recbole==1.2.1 -d "$WORK"
WHEEL="$(ls "$WORK"/recbole-1.2.1-*.whl)"
# List first, then search: `grep -q` stops reading early, and under pipefail unzip's SIGPIPE would fail the check.
listing="$(unzip -Z1 "$WHEEL")"
grep -qxF "$WHEEL_PATH" <<<"$listing" || { echo "error: $WHEEL_PATH not found in $WHEEL" >&2; exit 1; }
unzip -p "$WHEEL" "$WHEEL_PATH" > "$OUT_DIR/ml-100k.inter"

python3 - "$OUT_DIR/ml-100k.inter" "$OUT_DIR/ml-100k.jsonl" "$MAX_ROWS" "$OUT_DIR/ml-100k-batch16.jsonl" <<'PY'
import collections, json, sys

src, dst, max_rows, dst_batch = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
groups = collections.defaultdict(list)  # (user, day) -> [(timestamp, item)]
all_ratings = []  # (timestamp, user, item)
with open(src) as f:
    header = f.readline().rstrip("\n").split("\t")
    cols = {name.split(":")[0]: i for i, name in enumerate(header)}
    for line in f:
        parts = line.rstrip("\n").split("\t")
        user, item, ts = int(parts[cols["user_id"]]), int(parts[cols["item_id"]]), int(float(parts[cols["timestamp"]]))
        groups[(user, ts // 86400)].append((ts, item))
        all_ratings.append((ts, user, item))
requests = []
for (user, _day), ratings in groups.items():
    ratings.sort()
    for start in range(0, len(ratings), max_rows):
        chunk = ratings[start:start + max_rows]
        requests.append((chunk[0][0], user, [item for _, item in chunk]))
requests.sort()
with open(dst, "w") as out:
    for rid, (ts, user, items) in enumerate(requests):
        out.write(json.dumps({"request_id": rid, "time": ts, "row_ids": items + [user],
                              "table_ids": [0] * len(items) + [1]}) + "\n")
print(f"{dst}: {len(requests)} requests from {sum(len(g) for g in groups.values())} ratings", file=sys.stderr)
all_ratings.sort()
with open(dst_batch, "w") as out:
    for rid, start in enumerate(range(0, len(all_ratings), 16)):
        batch = all_ratings[start:start + 16]
        items = sorted({item for _, _, item in batch})
        users = sorted({user for _, user, _ in batch})
        out.write(json.dumps({"request_id": rid, "time": batch[0][0], "row_ids": items + users,
                              "table_ids": [0] * len(items) + [1] * len(users)}) + "\n")
print(f"{dst_batch}: {(len(all_ratings) + 15) // 16} requests of 16 ratings", file=sys.stderr)
PY
