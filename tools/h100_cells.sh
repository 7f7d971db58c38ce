#!/usr/bin/env bash
# Measures bench cells one after another on a GPU machine within one time budget, through
# `tools/h100_session.sh bench`, and packs everything into OUT_DIR/h100-cells.tar.gz (one file, so
# that a lease's few returned files hold it).
#
#   CELLS="8x128 4x32" tools/h100_cells.sh BIN_DIR OUT_DIR SECONDS [bench options...]
#
# A cell is DEVICESxMAX_DIM; each runs as `bench cells-DxM --devices D --max-dims M` with the time that
# is left, so a cell cut short still keeps the tasks it measured (one measured.json per task).
set -u
bins=$1 out=$2 seconds=$3
shift 3
here=$(cd "$(dirname "$0")" && pwd)
work=/tmp/h100-cells
mkdir -p "$work" "$out"
start=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$work/nvidia-smi.txt" 2>&1
for cell in ${CELLS:-8x128 4x32 8x32 4x128}; do
    left=$(( seconds - ($(date +%s) - start) ))
    if [ "$left" -lt 40 ]; then
        echo "cell $cell: not started ($left s left)"
        continue
    fi
    "$here/h100_session.sh" bench "$bins" "$work" "cells-$cell" "$left" --devices "${cell%x*}" --max-dims "${cell#*x}" "$@"
done
tar czf "$out/h100-cells.tar.gz" -C "$work" .
echo "packed $(ls "$work" | wc -l) files after $(( $(date +%s) - start )) s"
