"""bench/bench_gpu.py's report (issue 11, "How it is checked"): the reason class of every
case above 1.0x PyTorch's time, the candidates line, the verdict table and its counts,
and the median of timing windows. The timings themselves need the H200 (bench_gpu runs
there); what is tested here is the arithmetic and the classification on given figures."""
from __future__ import annotations

import math
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import bench_gpu as bg  # noqa: E402

from hipdnn_async.providers._tuning import Algorithm  # noqa: E402

G, L = "CUDNN_GRAPH_ENGINE", "CUDNN_LEGACY_ENGINE"


@pytest.mark.parametrize("ratio,gpu,engine,layout,best,want", [
    (0.9, 2.0, G, "NHWC", None, None),              # at or below 1.0x: no reason
    (1.0, 2.0, G, "NHWC", None, None),
    (2.4, 1.0, G, "NHWC", None, bg.HOST),           # kernel as fast as torch's: the submit
    (2.4, 1.04, L, "NCHW", None, bg.HOST),
    (1.03, 1.00, G, "NCHW", None, bg.TIE),          # equal kernels, wall within 5 %
    (1.05, 1.05, L, "NCHW", None, bg.TIE),
    (1.06, 1.00, G, "NHWC", None, bg.HOST),         # just past the slack: the submit shows
    (10.3, 10.0, L, "NCHW", None, bg.LEGACY),       # fp32 wgrad ALGO_1
    (3.0, 3.0, L, "NHWC", None, bg.LAYOUT),
    (13.7, 13.7, G, "NCHW", 1.0, bg.ALGO),          # heuristic eng2, benchmark finds eng25
    (1.8, 1.8, G, "NCHW", 1.7, bg.NOCFG),
    (1.8, None, G, "NCHW", None, "unknown (no device time)"),
])
def test_reason_classes(ratio, gpu, engine, layout, best, want):
    assert bg.reason(ratio, gpu, engine, layout, best) == want


def test_trials_text_lists_names_and_medians():
    a = Algorithm("eng25", "fastest", [("eng2", 3.912), ("eng25", 0.2861), ("eng74", None)])
    assert bg.trials_text(a) == "eng2 3.912, eng25 0.286, eng74"
    assert bg.trials_text("ALGO_1") == "-"
    assert bg.trials_text(Algorithm("x", "", [("a", 1.0)] * 20), limit=2) == "a 1.000, a 1.000"


def test_median_ignores_unusable_values():
    assert bg.median([3.0, 1.0, 2.0]) == 2.0
    assert bg.median([1.0, None, float("nan"), 3.0]) == 2.0
    assert math.isnan(bg.median([None]))


def test_verdict_lists_every_case_above_1_with_its_reason(capsys):
    conv = [("conv_wgrad float32 NCHW res2 1x1 256>64", 10.3, 10.1, bg.LEGACY, "legacy ALGO_1",
             10.2),
            ("conv_fprop float16 NHWC res2 3x3", 2.0, 0.98, bg.HOST, "graph eng62", 2.1)]
    bn = [("batchnorm float16 NHWC 32x512x28x28 train", 2.0, 1.0, bg.HOST, "graph eng9", None)]
    detail = [("conv_wgrad float32 NCHW res2 1x1 256>64", "ALGO_1, ALGO_0", "ALGO_1 3.6, ALGO_0 0.3",
               "cuDNN _v7 heuristics, rank 1", {"mode A, 32B": "eng25 eng2 eng9!tf32"})]
    doc = {"results": {"conv": {"above_1": conv, "above_1_detail": detail},
                       "batchnorm": {"above_1": bn}}}
    bg.print_verdict(doc)
    text = capsys.readouterr().out
    assert "cases above 1.0x PyTorch (3;" in text
    for name, *_ in conv + bn:
        assert name in text
    assert "by reason: engine (legacy) 1, host-bound 2" in text
    assert "bench:     ALGO_1 3.6, ALGO_0 0.3" in text
    assert "mode A, 32B: eng25 eng2 eng9!tf32" in text
    assert doc["verdict"]["by_reason"] == {bg.LEGACY: 1, bg.HOST: 2}


def test_quick_mode_covers_the_slow_layers_and_all_directions():
    args = bg.parse_args(["--quick"])
    assert args.directions == ("fprop", "dgrad", "wgrad")
    names = {n for n, *_ in bg.RESNET50_CONVS}
    assert set(bg.QUICK_CONVS) <= names and "res3 down 1x1/2" in bg.QUICK_CONVS
