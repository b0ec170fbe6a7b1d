"""A fuzzer of the public API (issue 10): valid and invalid graphs and variant packs, each
run in a guarded worker process, judged against the library's promises.

Promises checked (``_fuzz_cases.py`` says how): every failure is a ``HipdnnError``
subclass; invalid graphs, knobs and variant packs are refused, valid ones are not; no
crash (the worker dies: finding ``crash``), no hang (no answer within the timeout:
``hang``); every output of a valid execution matches the float64 reference
(``tests/oracle/_reference.py``) within the oracle suite's tolerances.

- CI: ``test_fuzz_public_api`` runs a bounded, derandomized sample (a few seconds) and
  ``test_corpus_case`` replays every saved case of ``tests/property/corpus/``.
- Long run (not in CI): ``HIPDNN_ASYNC_FUZZ_EXAMPLES=1000000 python -m pytest
  tests/property/test_fuzz_public_api.py -k long`` draws that many cases in chunks of
  fresh random seeds, keeps going past findings, saves each finding's case to the corpus
  (``HIPDNN_ASYNC_FUZZ_CORPUS``, default ``tests/property/corpus``) and writes running
  counts to ``HIPDNN_ASYNC_FUZZ_REPORT`` (JSON); it fails at the end if anything was found.
"""
from __future__ import annotations

import collections
import json
import os
import sys
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import seed as hypothesis_seed

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _fuzz import CORPUS, Worker, corpus_specs, judge, save_finding, specs  # noqa: E402

CI_EXAMPLES = 60
LONG_EXAMPLES = int(os.environ.get("HIPDNN_ASYNC_FUZZ_EXAMPLES", "0") or 0)
CHUNK = 2000                # cases per hypothesis run in the long mode (fresh seed each)
_HEALTH = list(HealthCheck)


@pytest.fixture(scope="module")
def worker():
    w = Worker(timeout=120)
    yield w
    w.close()


def _check(worker, spec):
    ans = worker.request(spec)
    finding = judge(spec, ans)
    assert finding is None, f"{finding}\nspec: {json.dumps(spec, default=str)}"
    return ans


@settings(max_examples=CI_EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=_HEALTH)
@given(spec=specs())
def _ci_property(worker, spec):
    _check(worker, spec)


def test_fuzz_public_api(worker):
    """The bounded CI sample: every promise holds on CI_EXAMPLES derandomized cases."""
    _ci_property(worker)


@pytest.mark.parametrize("name, entry", corpus_specs() or [("none", None)],
                         ids=[n for n, _ in corpus_specs()] or ["none"])
def test_corpus_case(worker, name, entry):
    """Every case the fuzzer (or issue 10) found: it keeps every promise now."""
    if entry is None:
        pytest.fail(f"the seed corpus {CORPUS} is empty or missing")
    ans = _check(worker, entry["spec"])
    if "expect" in entry:
        assert ans["outcome"].startswith(entry["expect"]), (entry["why"], ans)


def test_the_guard_reports_crash_and_hang():
    """A worker that dies or stops answering is a finding, and the next case runs."""
    w = Worker(timeout=2)
    try:
        ans = w.request({"op": "selftest", "do": "abort"})
        assert ans.get("crash") == "crash" and "exited with" in ans["finding"]
        ans = w.request({"op": "selftest", "do": "hang"})
        assert ans.get("crash") == "hang" and "killed after" in ans["finding"]
        ans = w.request({"op": "selftest", "do": "untyped"})
        assert "untyped ZeroDivisionError" in ans["finding"]
        assert w.request({"op": "stats"})["cases"] == 0 and w.restarts == 3
    finally:
        w.close()


@pytest.mark.skipif(not LONG_EXAMPLES, reason="the long fuzz run is opt-in: set "
                    "HIPDNN_ASYNC_FUZZ_EXAMPLES=N (the CI sample is test_fuzz_public_api)")
def test_fuzz_public_api_long():
    report = os.environ.get("HIPDNN_ASYNC_FUZZ_REPORT")
    corpus = os.environ.get("HIPDNN_ASYNC_FUZZ_CORPUS", CORPUS)
    base_seed = int(os.environ.get("HIPDNN_ASYNC_FUZZ_SEED", str(time.time_ns() % 2 ** 32)))
    w = Worker(timeout=float(os.environ.get("HIPDNN_ASYNC_FUZZ_TIMEOUT", "300")))
    counts, findings, kinds = collections.Counter(), [], collections.Counter()
    t0 = time.monotonic()

    def write_report(done):
        if not report:
            return
        stats = w.request({"op": "stats"})
        doc = {"cases": counts.total(), "target": LONG_EXAMPLES, "seconds": time.monotonic() - t0,
               "cases_per_s": counts.total() / max(time.monotonic() - t0, 1e-9),
               "outcomes": dict(counts), "findings": len(findings),
               "finding_kinds": dict(kinds), "worker_restarts": w.restarts,
               "worker": stats, "base_seed": base_seed, "done": done,
               "finding_texts": [f[:400] for f in findings[:200]]}
        tmp = report + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1)
        os.replace(tmp, report)

    def one(spec):
        ans = w.request(spec)
        finding = judge(spec, ans)
        if finding is None:
            counts[":".join(ans.get("outcome", "?").split(":")[:2])] += 1
            return
        counts["FINDING"] += 1
        kinds[finding.split(":")[0].split(" (")[0][:60]] += 1
        findings.append(finding + "\n" + save_finding(spec, finding, corpus))

    chunk = 0
    try:
        while counts.total() < LONG_EXAMPLES:
            n = min(CHUNK, LONG_EXAMPLES - counts.total())
            run = hypothesis_seed(base_seed + chunk)(
                settings(max_examples=n, deadline=None, database=None,
                         suppress_health_check=_HEALTH)(given(spec=specs())(one)))
            run()
            chunk += 1
            write_report(False)
    finally:
        write_report(True)
        w.close()
    assert not findings, f"{len(findings)} findings; first: {findings[0]}"
