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


# ---------------------------------------------------------------------------------------
# batchnorm section: backward rows, the copy-bandwidth anchor, the numerical check

def _bn_rec(dtype, layout, dims, *, x_bytes, copy_gpu_ms, figures, engines):
    """A record as bench_batchnorm leaves it, from given timings (ms)."""
    rec = {"dims": dims, "dtype": dtype, "layout": layout, "x_bytes": x_bytes,
           "copy_gpu_ms": copy_gpu_ms, "copy_gbps": bg.bn_gbps(2, x_bytes, copy_gpu_ms)}
    rec.update(figures)
    for what, engine in engines.items():
        rec[f"{what}_engine"], rec[f"{what}_algorithm"] = engine, "eng0"
        bg._bn_ratios(rec, what)
    bg.bn_bandwidth(rec)
    return rec


def test_bn_bandwidth_is_passes_over_device_time_against_the_copy():
    nbytes = 32 * 256 * 56 * 56 * 2                          # fp16 x of 32x256x56x56
    rec = _bn_rec("float16", "NHWC", (32, 256, 56, 56), x_bytes=nbytes, copy_gpu_ms=0.030,
                  figures={"ours_train_gpu_ms": 0.050, "torch_train_gpu_ms": 0.060,
                           "ours_backward_gpu_ms": 0.110, "torch_backward_gpu_ms": None},
                  engines={})
    assert rec["copy_gbps"] == pytest.approx(2 * nbytes / 30e-6 / 1e9)
    assert rec["train_gbps"] == pytest.approx(3 * nbytes / 50e-6 / 1e9)
    assert rec["backward_bytes"] == 5 * nbytes and rec["train_bytes"] == 3 * nbytes
    # % of copy = (passes |x| / t) / (2 |x| / t_copy) = 100 passes t_copy / (2 t)
    assert rec["train_pct_of_copy"] == pytest.approx(100 * 3 * 0.030 / (2 * 0.050))
    assert rec["torch_train_pct_of_copy"] == pytest.approx(100 * 3 * 0.030 / (2 * 0.060))
    assert rec["backward_pct_of_copy"] == pytest.approx(100 * 5 * 0.030 / (2 * 0.110))
    assert rec["torch_backward_gbps"] is None and rec["torch_backward_pct_of_copy"] is None


def test_bn_report_has_backward_rows_geomeans_copy_verdict_and_above_cases(capsys):
    nb16, nb32 = 32 * 1024 * 14 * 14 * 2, 32 * 1024 * 14 * 14 * 4
    nhwc = _bn_rec("float16", "NHWC", (32, 1024, 14, 14), x_bytes=nb16, copy_gpu_ms=0.010,
                   figures={"ours_train_ms": 0.040, "torch_train_ms": 0.030,
                            "ours_train_gpu_ms": 0.020, "torch_train_gpu_ms": 0.020,
                            "ours_infer_ms": 0.02, "torch_infer_ms": 0.02,
                            "ours_infer_gpu_ms": 0.01, "torch_infer_gpu_ms": 0.01,
                            "ours_backward_ms": 0.050, "torch_backward_ms": 0.100,
                            "ours_backward_gpu_ms": 0.040, "torch_backward_gpu_ms": 0.080,
                            "ours_backward_err_over_tol": 0.25,
                            "torch_backward_err_over_tol": float("inf"),
                            "torch_backward_call": "aten.cudnn_batch_norm_backward"},
                   engines={"train": G, "infer": L, "backward": G})
    nchw = _bn_rec("float32", "NCHW", (32, 1024, 14, 14), x_bytes=nb32, copy_gpu_ms=0.020,
                   figures={"ours_backward_ms": 0.120, "torch_backward_ms": 0.060,
                            "ours_backward_gpu_ms": 0.110, "torch_backward_gpu_ms": 0.055,
                            "torch_backward_call": "aten.cudnn_batch_norm_backward"},
                   engines={"backward": L})
    failed = {"dims": (32, 2048, 7, 7), "dtype": "float16", "layout": "NHWC",
              "backward_error": "GraphError: no engine"}
    res = bg.bn_report([nhwc, nchw, failed])
    text = capsys.readouterr().out
    assert "== batchnorm backward" in text and "5|x| / device time" in text
    assert "3|x| / device time" in text
    line = next(l for l in text.splitlines() if l.startswith("float16 NHWC  32x1024x14x14")
                and "cudnn_batch_norm_backward" in l)
    assert " 0.50 " in line and " 0.25 " in line and " inf " in line   # ratio, err/tol
    assert "GraphError: no engine" in text
    # geomean per (config, pass), backward included
    assert res["geomean_ratio"]["float16 NHWC backward"] == pytest.approx(0.5)
    assert res["geomean_ratio"]["float32 NCHW backward"] == pytest.approx(2.0)
    assert "float32 NCHW backward 2.00" in text
    # NHWC bandwidth verdict: train 100*3*0.010/(2*0.020) = 75 % (at target), backward
    # 100*5*0.010/(2*0.040) = 62.5 % (below); the failed row has no figure
    pct = res["nhwc_pct_of_copy"]
    assert pct["train"] == {"min": pytest.approx(75.0), "min_dims": "32x1024x14x14",
                            "cases": 1, "below": 0}
    assert pct["backward"]["min"] == pytest.approx(62.5) and pct["backward"]["below"] == 1
    assert "NHWC backward % of copy bandwidth (issue 11: >= 75%): min 62 (32x1024x14x14)" in text
    # above 1.0x: NHWC train (kernels equal: host-bound) and fp32 NCHW backward (legacy)
    above = {name: why for name, _, _, why, _, _ in res["above_1"]}
    assert above == {"batchnorm float16 NHWC 32x1024x14x14 train": bg.HOST,
                     "batchnorm float32 NCHW 32x1024x14x14 backward": bg.LEGACY}
    doc = {"results": {"batchnorm": res}}
    bg.print_verdict(doc)
    assert doc["verdict"]["by_reason"] == {bg.HOST: 1, bg.LEGACY: 1}
    assert "batchnorm float32 NCHW 32x1024x14x14 backward" in capsys.readouterr().out


def test_bn_backward_tolerance_is_the_oracle_table():
    from oracle._cases import TOL
    assert bg.BN_BACKWARD_TOL == TOL["bn_backward"]


def test_err_over_tol_is_in_units_of_the_elementwise_bound():
    torch = pytest.importorskip("torch")
    want = torch.tensor([2.0, -1.0, 0.0], dtype=torch.float64)
    got = torch.tensor([2.003, -1.0, 5e-4], dtype=torch.float16).float()
    atol = rtol = 1e-3
    # |2.003 (fp16: 2.0039) - 2| / (1e-3 + 2e-3); 5e-4 (fp16) / 1e-3
    e0 = abs(float(torch.tensor(2.003, dtype=torch.float16)) - 2.0) / 3e-3
    e2 = float(torch.tensor(5e-4, dtype=torch.float16)) / 1e-3
    assert bg.err_over_tol(got, want, atol, rtol) == pytest.approx(max(e0, e2))
    assert bg.err_over_tol(got.reshape(1, 3, 1, 1), want, atol, rtol) == pytest.approx(max(e0, e2))
    got[1] = float("nan")
    assert bg.err_over_tol(got, want, atol, rtol) == math.inf
    assert bg.err_text(math.inf) == "inf" and bg.err_text(None) == "-"


def _bn_data(torch, dims, seed=3):
    import numpy as np
    rng = np.random.default_rng(seed)
    c = dims[1]
    x = rng.normal(0.5, 2.0, dims)
    dy = rng.uniform(-1, 1, dims)
    scale = rng.uniform(0.5, 1.5, c)
    ax = (0, 2, 3)
    mean = x.mean(axis=ax)
    inv = 1.0 / np.sqrt(x.var(axis=ax) + bg.BN_EPS)
    return x, dy, scale, mean, inv


def test_bn_backward_reference_is_the_oracle_formula():
    torch = pytest.importorskip("torch")
    from oracle import _reference as ref
    x, dy, scale, mean, inv = _bn_data(torch, (3, 4, 5, 6))
    want = ref.bn_backward(dy, x, scale, mean, inv)
    t = [torch.from_numpy(a) for a in (x, dy, scale, mean, inv)]
    t[0] = t[0].contiguous(memory_format=torch.channels_last)      # layout must not matter
    dx, dscale, dbias = bg.bn_backward_reference(*t)
    assert torch.allclose(dx, torch.from_numpy(want["dx"]), rtol=1e-12, atol=1e-12)
    assert torch.allclose(dscale, torch.from_numpy(want["dscale"].ravel()), rtol=1e-12)
    assert torch.allclose(dbias, torch.from_numpy(want["dbias"].ravel()), rtol=1e-12, atol=1e-12)


def test_torch_bn_backward_native_route_runs_with_the_saved_statistics():
    """On CPU tensors PyTorch takes its native batchnorm: the call built from the schemas'
    names gives the float64 oracle's gradients with the forward's saved statistics."""
    torch = pytest.importorskip("torch")
    from oracle import _reference as ref
    x, dy, scale, mean, inv = _bn_data(torch, (4, 3, 5, 5))
    xt, dyt = (torch.from_numpy(a).float() for a in (x, dy))
    st = torch.from_numpy(scale).float()
    name, fn, save_mean, save_invstd = bg.torch_bn_backward(torch, xt, dyt, st,
                                                            torch.zeros(3))
    assert name == "aten.native_batch_norm_backward"
    assert torch.allclose(save_mean.double(), torch.from_numpy(mean), atol=1e-5)
    assert torch.allclose(save_invstd.double(), torch.from_numpy(inv), rtol=1e-4)
    want = ref.bn_backward(dy, x, scale, save_mean.double().numpy(), save_invstd.double().numpy())
    dx, dscale, dbias = fn()
    tf = bg.BN_BACKWARD_TOL["float32"]
    for got, key in ((dx, "dx"), (dscale, "dscale"), (dbias, "dbias")):
        assert bg.err_over_tol(got, torch.from_numpy(want[key]).reshape(got.shape), tf, tf) < 0.1


def test_every_torch_bn_op_gets_its_arguments_by_schema_name():
    """Each backend's forward and backward take their positional arguments from one name
    table (the schemas differ: grad_out / grad_output, eps / epsilon, save_invstd /
    save_var, reserve / reserveSpace): nothing missing, x and dy where each op wants them."""
    torch = pytest.importorskip("torch")
    x, dy = torch.randn(2, 3, 4, 4), torch.randn(2, 3, 4, 4)
    w, b, rm, rv = torch.ones(3), torch.zeros(3), torch.zeros(3), torch.ones(3)
    saved = (torch.empty(0), torch.zeros(3), torch.ones(3), torch.empty(0, dtype=torch.uint8))
    values = {**bg.bn_forward_values(x, w, b, rm, rv, 1e-5, 0.1),
              **bg.bn_backward_values(dy, saved)}
    for fwd_op, bwd_op in bg.TORCH_BN_OPS.values():
        _, args = bg.aten_call(torch, fwd_op, values)
        assert [args[i] is v for i, v in enumerate((x, w, b, rm, rv))] == [True] * 5
        assert args[-2:] == (0.1, 1e-5)                          # momentum, epsilon
        _, args = bg.aten_call(torch, bwd_op, values)
        first_two = (x, dy) if bwd_op == "cudnn_batch_norm_backward" else (dy, x)
        want = first_two + (w, rm, rv, saved[1], saved[2])
        assert [args[i] is v for i, v in enumerate(want)] == [True] * 7, bwd_op
    _, args = bg.aten_call(torch, "cudnn_batch_norm_backward", values)
    assert args[-1] is saved[3] and args[-2] == 1e-5          # epsilon, reserveSpace


class _Dt:
    def __init__(self, name):
        self.name = name


def _fake_torch(cuda=True, enabled=True, hip=None):
    from types import SimpleNamespace as NS
    f16, bf16, f32 = _Dt("half"), _Dt("bfloat16"), _Dt("float")
    cudnn = NS(is_available=lambda: cuda, enabled=enabled)
    return NS(float16=f16, bfloat16=bf16, float32=f32, version=NS(hip=hip),
              backends=NS(cudnn=cudnn))


class _FakeX:
    def __init__(self, dtype, shape=(32, 64, 56, 56), cuda=True):
        self.dtype, self.shape, self.is_cuda = dtype, shape, cuda

    def dim(self):
        return len(self.shape)

    def numel(self):
        return math.prod(self.shape)


def test_torch_bn_backend_follows_atens_selection():
    """ATen's _select_batch_norm_backend: cuDNN unless bf16, a half input with a non-float
    weight, a batch over 880801 or >= 2^31-1 elements; native otherwise; ROCm decides itself."""
    t = _fake_torch()
    w32 = _FakeX(t.float32, (64,))
    assert bg.torch_bn_backend(t, _FakeX(t.float16), w32) == "cudnn"
    assert bg.torch_bn_backend(t, _FakeX(t.float32), w32) == "cudnn"
    assert bg.torch_bn_backend(t, _FakeX(t.float16), _FakeX(t.float16, (64,))) == "native"
    assert bg.torch_bn_backend(t, _FakeX(t.bfloat16), w32) == "native"
    assert bg.torch_bn_backend(t, _FakeX(t.float32, (880802, 2, 2, 2)), w32) == "native"
    assert bg.torch_bn_backend(t, _FakeX(t.float16, (256, 2048, 64, 64)), w32) == "native"
    assert bg.torch_bn_backend(t, _FakeX(t.float32, cuda=False), w32) == "native"
    assert bg.torch_bn_backend(t, _FakeX(t.float32, (32, 64)), w32) == "native"
    assert bg.torch_bn_backend(_fake_torch(enabled=False), _FakeX(t.float32), w32) == "native"
    assert bg.torch_bn_backend(_fake_torch(hip="6.2"), _FakeX(t.float32), w32) == "dispatch"


def test_batchnorm_section_alone_parses():
    args = bg.parse_args(["--sections", "batchnorm", "--max-seconds", "60"])
    assert args.sections == ("batchnorm",) and args.max_seconds == 60.0


@pytest.mark.parametrize("dtype,layout", [("float32", "NCHW"), ("float16", "NHWC")])
def test_bn_section_graphs_build_and_backward_pack_runs_on_the_cpu(cpu_device, dtype, layout):
    """The section's three graphs are supported patterns, and the backward graph with the
    section's variant-pack names gives the float64 oracle's gradients (CPU device)."""
    import numpy as np
    import hipdnn_async as hd
    from oracle import _reference as ref
    dims = (2, 8, 5, 6)
    gt, gi, gb = bg._bn_graphs(hd, dims, dtype, layout)
    for g in (gt, gi):
        cpu_device.build_sync(g)
    x, dy, scale, mean, inv = _bn_data(None, dims)
    io = np.dtype(dtype)

    def arr(a):
        a = np.asarray(a, io)
        return np.ascontiguousarray(a.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2) \
            if layout == "NHWC" else a

    def chan(v):
        return np.asarray(v, np.float32).reshape(1, -1, 1, 1)

    vp = {"dy": arr(dy), "x": arr(x), "scale": chan(scale), "mean": chan(mean),
          "inv_variance": chan(inv), "dx": arr(np.full(dims, np.nan)),
          "dscale": chan(np.full(8, np.nan)), "dbias": chan(np.full(8, np.nan))}
    cpu_device.build_sync(gb).execute_sync(vp)
    want = ref.bn_backward(vp["dy"], vp["x"], vp["scale"], vp["mean"], vp["inv_variance"])
    t_io, t_f = bg.BN_BACKWARD_TOL[dtype], bg.BN_BACKWARD_TOL["float32"]
    for key, t in (("dx", t_io), ("dscale", t_f), ("dbias", t_f)):
        got, w = np.asarray(vp[key], np.float64), want[key]
        assert (np.abs(got - w) <= t + t * np.abs(w)).all(), key
