#!/usr/bin/env bash
# The AMD check: what a person with a ROCm machine (an AMD GPU, ROCm's HIP runtime and
# MIOpen installed, or the ROCm wheels PyTorch-ROCm brings) runs from the repository root
# to verify the MIOpen provider on real hardware, and send back one report:
#
#     bash bench/amd_check.sh                  # report in ./amd_check_out/REPORT.txt
#     OUT=/some/dir AMD_CHECK_DEVICE=hip:1 bash bench/amd_check.sh
#
# Until someone has run it, the provider is "implemented and contract-tested; not yet run
# on AMD hardware" (docs/guide/miopen.md).
#
# Stages (each runs even when an earlier one failed; exit 1 if any failed):
#   1 install    pip install -e .  (builds the Cython extensions)         -> setup.log
#   2 env        hd.devices(), where libamdhip64 / libMIOpen were found and their versions,
#                gcnArchName and compute units, rocminfo / rocm-smi headers, PyTorch-ROCm -> setup.log
#   3 contract   the MIOpen contract tests (fakes built against Debian's headers; needs
#                network for the header download, else they skip)      -> pytest_contract.log
#   4 gpu tests  python -m pytest -m gpu tests/gpu on the AMD device      -> pytest_gpu.log
#   5 all tests  the rest of the suite                                    -> pytest_all.log
#   6 demo       hipdnn-async demo --device hip:0                         -> demo.log, demo.json
#   7 bench      bench/bench_gpu.py --device hip:0 against PyTorch-ROCm (skipped, with the
#                reason, where torch has no HIP device)                   -> bench_gpu.log, .json
# REPORT.txt gathers the status lines, the environment, the failures and the tails of the
# logs: send that file (or the whole directory).
#
# Knobs: AMD_CHECK_DEVICE (hip:0), AMD_CHECK_STAGE_TIMEOUT_S (1800 per stage),
# AMD_CHECK_BENCH_ARGS (e.g. "--quick"), PYTHON (python3). MIOpen's own databases go to
# $OUT/miopen-db (MIOPEN_USER_DB_PATH) and its kernel cache to $OUT/miopen-cache, so the
# run neither reads nor pollutes ~/.config/miopen; the perf db to $OUT/perfdb.sqlite3.
set -u -o pipefail
export PYTHONUNBUFFERED=1

cd "$(dirname "$0")/.." || exit 2
OUT="${OUT:-$PWD/amd_check_out}"
mkdir -p "$OUT" || exit 2
OUT="$(cd "$OUT" && pwd)"
SPEC="${AMD_CHECK_DEVICE:-hip:0}"
PY="${PYTHON:-python3}"
CAP="${AMD_CHECK_STAGE_TIMEOUT_S:-1800}"
BENCH_ARGS="${AMD_CHECK_BENCH_ARGS:-}"
export MIOPEN_USER_DB_PATH="$OUT/miopen-db"
export MIOPEN_CUSTOM_CACHE_DIR="$OUT/miopen-cache"
export HIPDNN_ASYNC_PERFDB="$OUT/perfdb.sqlite3"
mkdir -p "$MIOPEN_USER_DB_PATH" "$MIOPEN_CUSTOM_CACHE_DIR"

START=$(date +%s)
FAILED=0
: > "$OUT/status.txt"

status() {   # status NAME RC SECONDS [NOTE]
    local word=ok
    if [ "$2" = skip ]; then
        word=SKIP
    elif [ "$2" != 0 ]; then
        word="FAIL (rc $2)"; FAILED=1
    fi
    printf '[amd_check] %-10s %-12s %5ss  %s\n' "$1" "$word" "$3" "${4:-}" | tee -a "$OUT/status.txt"
}

run_stage() {   # run_stage NAME LOG CMD...
    local name=$1 log=$2 t0 rc note=""
    shift 2
    t0=$(date +%s)
    echo "[amd_check] === $name: $*" | tee -a "$log"
    timeout -k 10 "$CAP" "$@" 2>&1 | tee -a "$log"
    rc=$?
    [ "$rc" = 124 ] && note="timed out after ${CAP}s"
    status "$name" "$rc" $(( $(date +%s) - t0 )) "$note"
}

# 1 install -------------------------------------------------------------------------------
run_stage install "$OUT/setup.log" "$PY" -m pip install -q -e '.[test]'

# 2 environment ---------------------------------------------------------------------------
ENV_PY=$(mktemp /tmp/amd_check_env.XXXXXX)
cat > "$ENV_PY" <<'PYTHON'
import os
import platform
import sys

print("python", platform.python_version(), sys.executable)
import hipdnn_async as hd
from hipdnn_async.runtime import _miopen, load_vendor

print("hipdnn_async", hd.__version__, "from", hd.__file__)
print("hd.devices():", hd.devices())
state = load_vendor("hip")
print("HIP runtime:", state.runtime_record)
print("MIOpen:", state.dnn, "(version", _miopen.version() if state.dnn else "-", ")")
if state.dnn:
    print("MIOpen entry points present:", {n: _miopen.has(n) for n in _miopen.OPTIONAL})
if not state.ok:
    sys.exit(f"no usable HIP device: {state.reason}")
spec = os.environ.get("AMD_CHECK_DEVICE", "hip:0")
with hd.Device(spec) as dev:
    print("device:", dev.provider.describe())
try:
    import torch
    print("torch", torch.__version__, "hip", torch.version.hip,
          "devices", torch.cuda.device_count() if torch.version.hip else 0)
except Exception as exc:  # informational only
    print("torch: not importable", exc)
PYTHON
AMD_CHECK_DEVICE="$SPEC" run_stage env "$OUT/setup.log" "$PY" "$ENV_PY"
rm -f "$ENV_PY"
{ rocminfo 2>&1 | grep -E "Marketing Name|Name: +gfx|Compute Unit" | head -n 12 \
    || echo "rocminfo: not available"; } | tee -a "$OUT/setup.log"
{ rocm-smi --showproductname 2>&1 | head -n 12 || echo "rocm-smi: not available"; } \
    | tee -a "$OUT/setup.log"

# 3 the MIOpen contract tests (CPU only: fakes compiled against Debian's headers) ---------
run_stage contract "$OUT/pytest_contract.log" \
    "$PY" -m pytest -q tests/contract/hip -p no:cacheprovider

# 4 GPU tests on the AMD device -----------------------------------------------------------
run_stage gpu-tests "$OUT/pytest_gpu.log" \
    "$PY" -m pytest -q -m gpu tests/gpu -p no:cacheprovider --durations=15 -rs

# 5 the rest of the suite -----------------------------------------------------------------
run_stage all-tests "$OUT/pytest_all.log" \
    "$PY" -m pytest -q -p no:cacheprovider --ignore=tests/gpu --ignore=tests/contract/hip

# 6 demo ----------------------------------------------------------------------------------
run_stage demo "$OUT/demo.log" \
    "$PY" -m hipdnn_async demo --device "$SPEC" --json "$OUT/demo.json"

# 7 benchmarks against PyTorch-ROCm -------------------------------------------------------
if "$PY" -c "import sys, torch; sys.exit(0 if torch.version.hip and torch.cuda.is_available() else 1)" \
        >/dev/null 2>&1; then
    # shellcheck disable=SC2086
    run_stage bench "$OUT/bench_gpu.log" \
        "$PY" bench/bench_gpu.py --device "$SPEC" --json "$OUT/bench_gpu.json" $BENCH_ARGS
else
    status bench skip 0 "PyTorch with a HIP device is not importable: no anchor to compare against"
fi

# the report ------------------------------------------------------------------------------
{
    echo "hipdnn_async AMD check, $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $(git rev-parse --short HEAD 2>/dev/null)"
    echo "device $SPEC; total $(( $(date +%s) - START ))s"
    echo
    cat "$OUT/status.txt"
    echo
    echo "== environment"
    grep -v "^\[amd_check\]" "$OUT/setup.log" | tail -n 40
    for log in pytest_contract pytest_gpu pytest_all demo bench_gpu; do
        [ -f "$OUT/$log.log" ] || continue
        echo
        echo "== $log (failures and summary)"
        grep -E "^(FAILED|ERROR)|passed|failed|error" "$OUT/$log.log" | tail -n 40
        echo "-- tail"
        tail -n 25 "$OUT/$log.log"
    done
} > "$OUT/REPORT.txt"
echo "[amd_check] report: $OUT/REPORT.txt"
if [ "$FAILED" != 0 ]; then
    echo "[amd_check] FAILED: see the stage lines above" | tee -a "$OUT/status.txt"
    exit 1
fi
echo "[amd_check] all stages ok" | tee -a "$OUT/status.txt"
