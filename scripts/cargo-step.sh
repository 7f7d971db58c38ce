# Sourced by .ci/run, scripts/test-all.sh and web-demo/build.sh (from the repository root).
#
# cargo_step CMD...: runs CMD; if it fails while target/.rustc_info.json holds a failed rustc probe, drops
# that file and runs CMD once more. Cargo probes rustc (`rustc - --print=cfg ...`) the first time it meets
# a new target or flag set and caches the answer there, failures included. On a busy machine that probe
# has been seen to fail while build scripts run beside it (its input then held their compiler output), and
# every later cargo command in the same target folder then read the cached failure. A retry with the probe
# dropped recovers; any other failure is returned as it is.
cargo_step() {
    "$@" && return 0
    local rc=$?
    if grep -q '"success":false' target/.rustc_info.json 2>/dev/null; then
        echo "cargo_step: a failed rustc probe is cached in target/.rustc_info.json; dropping it and running again: $*" >&2
        rm -f target/.rustc_info.json
        "$@"
    else
        return "$rc"
    fi
}
