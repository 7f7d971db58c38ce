# Sourced by .ci/run, scripts/test-all.sh and web-demo/build.sh (from the repository root).
#
# A machine whose /dev/null is a regular file breaks cargo. Cargo learns about a target by running
# `rustc - --print=cfg ...` with its input opened on /dev/null; when /dev/null is a file, that input holds
# whatever other programs threw away there (build scripts' probe errors, for example), the probe fails with
# "failed to run `rustc` to learn about target-specific information", and cargo caches the failure in
# target/.rustc_info.json. Test programs that spawn children with a null input read the same junk.
# Such machines exist (containers where /dev/null was once deleted and then recreated by a redirect), so
# the scripts check it first and, where they may, put the real device back.
ensure_dev_null() {
    [ -c /dev/null ] && return 0
    echo "setup: /dev/null is not the null device ($(stat -c %F /dev/null 2>&1)); replacing it" >&2
    if mknod -m 666 /dev/null.shardplan c 1 3 && mv -f /dev/null.shardplan /dev/null; then
        if sh -c 'echo probe > /dev/null' && [ "$(head -c 1 /dev/null | wc -c)" = 0 ]; then
            return 0
        fi
        # A device this container may not open: go back to a file.
        rm -f /dev/null
    fi
    rm -f /dev/null.shardplan
    : > /dev/null || true
    echo "setup: could not create the null device; /dev/null stays a file, emptied before each cargo step" >&2
}

# cargo_step CMD...: runs a cargo command with /dev/null empty when it is a file. If the command still
# fails while target/.rustc_info.json holds a failed rustc probe, drops that file and runs it once more;
# any other failure is returned as it is.
cargo_step() {
    [ -c /dev/null ] || : > /dev/null
    "$@" && return 0
    local rc=$?
    if grep -qs '"success":false' target/.rustc_info.json; then
        echo "cargo_step: a failed rustc probe is cached in target/.rustc_info.json; dropping it and running again: $*" >&2
        rm -f target/.rustc_info.json
        [ -c /dev/null ] || : > /dev/null
        "$@"
    else
        return "$rc"
    fi
}

ensure_dev_null
