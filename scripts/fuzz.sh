#!/usr/bin/env bash
# Coverage-guided fuzzing of every parser of user data (docs/FUZZING.md), on the stable toolchain:
# cargo-fuzz with libFuzzer and no sanitizer, overflow checks and debug assertions on.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]     (default 60 s, every target)
#
# Each target starts from its committed corpus, fuzz/corpus/<target>/, and its working corpus,
# fuzz/libfuzzer/corpus/<target>/ (git-ignored: everything fuzzing found, kept between runs), with inputs of
# at most FUZZ_MAX_LEN bytes (default 16384). Afterwards the inputs that reach edges the committed corpus
# does not are found (`-merge=1`, edge coverage only) and the FUZZ_CORPUS_ADD smallest of them (default 10)
# are copied into fuzz/corpus/<target>/, so the committed corpus grows a little per run, never by hundreds.
# A crash (panic, abort, a 10 s timeout, memory past FUZZ_RSS_MB) is written to
# fuzz/libfuzzer/artifacts/<target>/ and reported; the script goes on with the next target and exits
# non-zero at the end. Logs: fuzz/libfuzzer/logs/<target>.log.
set -euo pipefail

secs="${1:-60}"
shift || true
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
fuzz_dir=fuzz/libfuzzer
max_len="${FUZZ_MAX_LEN:-16384}"
rss_mb="${FUZZ_RSS_MB:-2048}"
corpus_add="${FUZZ_CORPUS_ADD:-10}"

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "installing cargo-fuzz (cargo install cargo-fuzz --locked)"
    cargo install cargo-fuzz --locked
fi

flags=(--fuzz-dir "$fuzz_dir" --sanitizer none --debug-assertions)
if [ "$#" -gt 0 ]; then targets=("$@"); else mapfile -t targets < <(cargo fuzz list --fuzz-dir "$fuzz_dir"); fi

start=$SECONDS
cargo fuzz build "${flags[@]}" </dev/null
echo "build: $((SECONDS - start)) s"

mkdir -p "$fuzz_dir/logs"
failed=0
summary=()
for t in "${targets[@]}"; do
    corpus="fuzz/corpus/$t"
    working="$fuzz_dir/corpus/$t"
    artifacts="$fuzz_dir/artifacts/$t"
    log="$fuzz_dir/logs/$t.log"
    mkdir -p "$corpus" "$working" "$artifacts"
    t0=$SECONDS
    status=ok
    if ! cargo fuzz run "${flags[@]}" "$t" "$working" "$corpus" -- \
        -max_total_time="$secs" -max_len="$max_len" -timeout=10 -rss_limit_mb="$rss_mb" \
        -print_final_stats=1 -artifact_prefix="$artifacts/" </dev/null >"$log" 2>&1; then
        status="CRASH: $(grep -o "Test unit written to .*" "$log" | tail -1 | sed 's/Test unit written to //')"
        failed=1
    fi
    ran=$((SECONDS - t0))
    execs="$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | awk '{print $2}' | tail -1 || true)"
    # The smallest working-corpus inputs that reach edges the committed corpus does not.
    merged="$(mktemp -d)"
    cp "$corpus"/* "$merged"/
    cargo fuzz run "${flags[@]}" "$t" "$merged" "$working" -- -merge=1 -use_counters=0 -max_len="$max_len" \
        -timeout=10 -rss_limit_mb="$rss_mb" </dev/null >>"$log" 2>&1 || true
    new="$(mktemp -d)"
    for f in "$merged"/*; do [ -e "$corpus/$(basename "$f")" ] || cp "$f" "$new"/; done
    found=$(find "$new" -type f | wc -l)
    find "$new" -type f -printf '%s %p\n' | sort -n | awk -v n="$corpus_add" 'NR <= n' | cut -d' ' -f2- |
        while read -r f; do cp "$f" "$corpus"/; done
    added=$((found < corpus_add ? found : corpus_add))
    rm -rf "$merged" "$new"
    summary+=("$(printf '%-16s %10s execs %5d s  %4d inputs reach new edges, %2d kept  %s' \
        "$t" "${execs:-?}" "$ran" "$found" "$added" "$status")")
    echo "${summary[-1]}"
done

echo
echo "fuzzed ${#targets[@]} targets for ${secs} s each ($((SECONDS - start)) s in all):"
printf '%s\n' "${summary[@]}"
exit "$failed"
