#!/usr/bin/env bash
# A long fuzz campaign (issue 10) spread over several processes, one per core:
#
#     bash tests/property/run_campaign.sh OUTDIR PROCS CASES_PER_PROC [SECONDS]
#
# Each process runs `test_fuzz_public_api_long` with its own base seed (PROCS distinct
# seeds derived from the current time), its own report OUTDIR/report-K.json and its own
# corpus OUTDIR/corpus-K/ (a finding's case is saved there). A process stops at its case
# count or after SECONDS (default 3600); its report holds every completed 2000-case chunk
# either way. At the end the reports are summed into OUTDIR/summary.json and printed.
# BLAS is kept to one thread per process so PROCS processes use PROCS cores.
set -u
cd "$(dirname "$0")/../.." || exit 2
OUTDIR=${1:?usage: run_campaign.sh OUTDIR PROCS CASES_PER_PROC [SECONDS]}
PROCS=${2:?PROCS}
CASES=${3:?CASES_PER_PROC}
SECONDS_CAP=${4:-3600}
mkdir -p "$OUTDIR" || exit 2
BASE=$(( $(date +%s) % 100000 * 1000 ))
git log --oneline -1 > "$OUTDIR/commit.txt" 2>/dev/null || true
for k in $(seq 1 "$PROCS"); do
    mkdir -p "$OUTDIR/corpus-$k"
    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 \
    HIPDNN_ASYNC_FUZZ_EXAMPLES="$CASES" HIPDNN_ASYNC_FUZZ_SEED=$(( BASE + k * 7919 )) \
    HIPDNN_ASYNC_FUZZ_REPORT="$OUTDIR/report-$k.json" \
    HIPDNN_ASYNC_FUZZ_CORPUS="$OUTDIR/corpus-$k" \
        timeout -k 10 "$SECONDS_CAP" python3 -m pytest -q -p no:cacheprovider \
        tests/property/test_fuzz_public_api.py -k long > "$OUTDIR/log-$k.txt" 2>&1 &
done
wait
python3 - "$OUTDIR" <<'PYTHON'
import collections, glob, json, os, sys
out = sys.argv[1]
total, secs, findings, outcomes, kinds, texts = 0, 0.0, 0, collections.Counter(), collections.Counter(), []
reports = sorted(glob.glob(os.path.join(out, "report-*.json")))
for path in reports:
    with open(path, encoding="utf-8") as f:
        d = json.load(f)
    total += d["cases"]
    secs = max(secs, d["seconds"])
    findings += d["findings"]
    outcomes.update(d["outcomes"])
    kinds.update(d["finding_kinds"])
    texts += d["finding_texts"]
doc = {"processes": len(reports), "cases": total, "wall_seconds": round(secs, 1),
       "cases_per_s": round(total / max(secs, 1e-9), 1), "findings": findings,
       "finding_kinds": dict(kinds), "outcomes": dict(outcomes), "finding_texts": texts[:50]}
with open(os.path.join(out, "summary.json"), "w", encoding="utf-8") as f:
    json.dump(doc, f, indent=1)
print(json.dumps({k: doc[k] for k in ("processes", "cases", "wall_seconds", "cases_per_s",
                                      "findings", "finding_kinds")}))
PYTHON
