#!/usr/bin/env bash
# One-call GPU check, run from the repository root on the GPU machine:
#
#     OUT=/path/to/out bash bench/gpu_check.sh
#
# Stages (each runs even when an earlier one failed; the script exits 1 if any failed):
#   1 install   pip install --no-build-isolation --no-deps -e .  (builds the extensions)
#   2 env       hd.devices(), library versions, nvidia-smi header     -> setup.log
#   3 gpu tests python -m pytest -q -m gpu tests/gpu                   -> pytest_gpu.log
#   4 all tests python -m pytest -q -x --ignore=tests/gpu              -> pytest_all.log
#               (tests/gpu is left out: stage 3 ran its GPU tests, CI runs its CPU ones,
#               and a second run would cost ~2 of the 10 minutes of one device call;
#               GPU_CHECK_ALL_ARGS="" runs literally everything)
#   5 demo      hipdnn-async demo --device cuda:0 --json demo.json    -> demo.log
#   6 bench     python bench/bench_gpu.py --json bench_gpu.json       -> bench_gpu.log
#   7 diag      $GPU_CHECK_DIAG (a command line; only when set)         -> diag.log
#
# GPU_CHECK_STAGES picks stages by name (default "install env gpu-tests all-tests demo
# bench diag"); install and env always run first when listed.
#
# Files under $OUT (8): setup.log pytest_gpu.log pytest_all.log demo.log demo.json
# bench_gpu.log bench_gpu.json status.txt. One status line per stage is printed (and kept
# in status.txt). /tmp/site, where it exists, is expected on PYTHONPATH (added if not).
# The run stays under GPU_CHECK_BUDGET_S seconds (default 570): each stage gets at most
# its cap and what is left; a stage with no time left is reported SKIP.
# Other knobs: GPU_CHECK_DEVICE (cuda:0), GPU_CHECK_BENCH_ARGS (e.g. "--quick").
set -u -o pipefail
export PYTHONUNBUFFERED=1

cd "$(dirname "$0")/.." || exit 2
OUT="${OUT:-$PWD/gpu_check_out}"
mkdir -p "$OUT" || exit 2
SPEC="${GPU_CHECK_DEVICE:-cuda:0}"
PY="${PYTHON:-python3}"   # the device image's python3 is the one with torch
BUDGET="${GPU_CHECK_BUDGET_S:-570}"
ALL_ARGS="${GPU_CHECK_ALL_ARGS---ignore=tests/gpu}"
BENCH_ARGS="${GPU_CHECK_BENCH_ARGS:-}"
STAGES=" ${GPU_CHECK_STAGES:-install env gpu-tests all-tests demo bench diag} "
DIAG="${GPU_CHECK_DIAG:-}"
want() { [[ "$STAGES" == *" $1 "* ]]; }
if [ -d /tmp/site ] && [[ ":${PYTHONPATH:-}:" != *":/tmp/site:"* ]]; then
    export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi

START=$(date +%s)
FAILED=0
: > "$OUT/status.txt"

status() {   # status NAME RC SECONDS [NOTE]
    local word=ok line
    if [ "$2" = skip ]; then
        word=SKIP; FAILED=1
    elif [ "$2" != 0 ]; then
        word="FAIL (rc $2)"; FAILED=1
    fi
    line=$(printf '[gpu_check] %-10s %-12s %4ss  %s' "$1" "$word" "$3" "${4:-}")
    echo "$line" | tee -a "$OUT/status.txt"
}

left() { echo $(( BUDGET - ($(date +%s) - START) )); }

run_stage() {   # run_stage NAME CAP_S LOG CMD...  (output to LOG and to stdout)
    local name=$1 cap=$2 log=$3 t0 rc limit note=""
    shift 3
    t0=$(date +%s)
    limit=$(left)
    [ "$limit" -gt "$cap" ] && limit=$cap
    if [ "$limit" -lt 15 ]; then
        status "$name" skip 0 "no time left in the ${BUDGET}s budget"
        return
    fi
    echo "[gpu_check] === $name (limit ${limit}s): $*" | tee -a "$log"
    timeout -k 10 "$limit" "$@" 2>&1 | tee -a "$log"
    rc=$?
    [ "$rc" = 124 ] && note="timed out after ${limit}s"
    status "$name" "$rc" $(( $(date +%s) - t0 )) "$note"
}

# 1 install -------------------------------------------------------------------------------
want install && run_stage install 240 "$OUT/setup.log" \
    "$PY" -m pip install -q --no-build-isolation --no-deps -e .

# 2 environment ---------------------------------------------------------------------------
ENV_PY=$(mktemp /tmp/gpu_check_env.XXXXXX)
cat > "$ENV_PY" <<'PYTHON'
import platform
import sys

print("python", platform.python_version(), sys.executable)
import hipdnn_async as hd
print("hipdnn_async", hd.__version__, "from", hd.__file__)
print("hd.devices():", hd.devices())
try:
    from hipdnn_async.runtime import cuda_status
    print("cuda_status():", cuda_status())
except Exception as exc:  # informational only
    print("cuda_status unavailable:", exc)
for name in ("torch", "cupy", "trio", "sklearn", "hypothesis", "onnx", "matplotlib"):
    try:
        mod = __import__(name)
    except Exception as exc:
        print(f"{name}: not importable ({type(exc).__name__}: {exc})")
        continue
    extra = ""
    if name == "torch":
        extra = (f" (CUDA {mod.version.cuda}, cuDNN {mod.backends.cudnn.version()}, "
                 f"cuda available {mod.cuda.is_available()})")
    print(name, getattr(mod, "__version__", "?") + extra)
if not [d for d in hd.devices() if d != "cpu"]:
    sys.exit("no GPU device in hd.devices()")
PYTHON
want env && run_stage env 60 "$OUT/setup.log" "$PY" "$ENV_PY"
rm -f "$ENV_PY"
{ nvidia-smi 2>&1 || echo "nvidia-smi: not available"; } | head -n 12 | tee -a "$OUT/setup.log"

# 3 GPU tests -----------------------------------------------------------------------------
want gpu-tests && run_stage gpu-tests 300 "$OUT/pytest_gpu.log" \
    "$PY" -m pytest -q -m gpu tests/gpu -p no:cacheprovider --durations=15

# 4 the whole suite -----------------------------------------------------------------------
# shellcheck disable=SC2086
want all-tests && run_stage all-tests 300 "$OUT/pytest_all.log" \
    "$PY" -m pytest -q -x -p no:cacheprovider --durations=10 $ALL_ARGS

# 5 demo ----------------------------------------------------------------------------------
want demo && run_stage demo 180 "$OUT/demo.log" \
    "$PY" -m hipdnn_async demo --device "$SPEC" --json "$OUT/demo.json"

# 6 benchmarks (bench_gpu.py stops starting conv layers a minute before the stage limit) --
if want bench; then
    BENCH_LIMIT=$(left)
    [ "$BENCH_LIMIT" -gt 360 ] && BENCH_LIMIT=360
    # shellcheck disable=SC2086
    run_stage bench 360 "$OUT/bench_gpu.log" \
        "$PY" bench/bench_gpu.py --device "$SPEC" \
        --max-seconds $(( BENCH_LIMIT > 120 ? BENCH_LIMIT - 60 : 60 )) \
        --json "$OUT/bench_gpu.json" $BENCH_ARGS
fi

# 7 a diagnostic command line ---------------------------------------------------------------
if want diag && [ -n "$DIAG" ]; then
    run_stage diag 540 "$OUT/diag.log" bash -c "$DIAG"
fi

echo "[gpu_check] total $(( $(date +%s) - START ))s; files in $OUT: $(ls "$OUT" | tr '\n' ' ')" \
    | tee -a "$OUT/status.txt"
if [ "$FAILED" != 0 ]; then
    echo "[gpu_check] FAILED: see the stage lines above" | tee -a "$OUT/status.txt"
    exit 1
fi
echo "[gpu_check] all stages ok" | tee -a "$OUT/status.txt"
