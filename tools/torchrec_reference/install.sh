#!/usr/bin/env bash
# Installs TorchRec 1.9.2 (CPU-only; its planner runs on a CPU-only machine) into a virtual
# environment OUTSIDE the repository. About 5.5 GB: never run this in CI.
#
#   TORCHREC_VENV=/path/to/venv bash tools/torchrec_reference/install.sh
#
# Default venv: ../.venv-torchrec next to the repository checkout. Needs Python 3.11.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
venv=${TORCHREC_VENV:-$(dirname "$repo")/.venv-torchrec}
python=${PYTHON:-python3.11}
if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv "$venv"
fi
pip="$venv/bin/pip"
"$pip" install torch==2.14.1
constraints=$(mktemp)
trap 'rm -f "$constraints"' EXIT
echo "torch==2.14.1" >"$constraints"
"$pip" install -c "$constraints" fbgemm-gpu-cpu==1.9.0 tensordict torchmetrics==1.0.3 tqdm pyre-extensions
# torchrec's own dependency pins would pull a CUDA build of fbgemm; its planner needs none of them.
"$pip" install --no-deps torchrec==1.9.2
"$venv/bin/python" -c "import torchrec, torch; print('torchrec', torchrec.__version__, 'torch', torch.__version__)"
echo "installed into $venv"
