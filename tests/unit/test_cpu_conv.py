"""CPU convolution algorithms (hipdnn_async.providers.cpu._conv) against float64 references.

Every algorithm of every direction is compared with an independent float64 reference
written here (zero-padded input, one einsum per kernel tap over a sliding window),
on problems from the failure classes of the test-case notes (asymmetric padding, groups
and depthwise, stride + dilation, 1x1 with large padding, kernels larger than the
input, odd/prime sizes, 1-D/2-D/3-D). Outputs are pre-filled with NaN and, for strided
outputs, surrounded by NaN sentinels that must survive.

Tolerance: ``|impl - ref| <= tol * (max|ref| + |ref|)`` with tol per dtype from hipDNN's
``hipdnn_test_sdk/utilities/TestTolerances.hpp`` (conv::getToleranceFwd fp32 1e-5,
fp16 1e-2; bf16 2e-2 as its Bwd/long-sum value), scaled by max|ref| since sums are long.
"""
from __future__ import annotations

import itertools
import zlib

import ml_dtypes
import numpy as np
import pytest
from _peers import peer

from hipdnn_async._errors import ExecutionError, GraphError
from hipdnn_async.providers.cpu._conv import ALGORITHMS, ConvProblem, heuristic_choice

BF16 = np.dtype(ml_dtypes.bfloat16)
TOL = {np.dtype(np.float32): 1e-5, np.dtype(np.float16): 1e-2, BF16: 2e-2,
       np.dtype(np.float64): 1e-12}


# ----------------------------------------------------------------------------
# float64 references (independent of the production code)
# ----------------------------------------------------------------------------

def _out_dims(xd, wd, pre, post, s, d):
    return (xd[0], wd[0]) + tuple((i + a + b - dd * (k - 1) - 1) // ss + 1 for i, k, a, b, ss, dd
                                  in zip(xd[2:], wd[2:], pre, post, s, d))


def _windows(xpad_shape, wd, yd, s, d):
    """For each kernel tap: the sliding-window slice of the padded input."""
    for tap in itertools.product(*[range(k) for k in wd[2:]]):
        sl = tuple(slice(t * dd, t * dd + (o - 1) * ss + 1, ss)
                   for t, dd, o, ss in zip(tap, d, yd[2:], s))
        yield tap, (slice(None), slice(None)) + sl


def ref_fprop(x, w, pre, post, s, d, g):
    x = x.astype(np.float64)
    w = w.astype(np.float64)
    xp = np.pad(x, [(0, 0), (0, 0)] + list(zip(pre, post)))
    yd = _out_dims(x.shape, w.shape, pre, post, s, d)
    kg, cg = w.shape[0] // g, w.shape[1]
    y = np.zeros(yd)
    for tap, sl in _windows(xp.shape, w.shape, yd, s, d):
        win = xp[sl]
        for gi in range(g):
            y[:, gi * kg:(gi + 1) * kg] += np.einsum(
                "kc,nc...->nk...", w[(slice(gi * kg, (gi + 1) * kg), slice(None)) + tap],
                win[:, gi * cg:(gi + 1) * cg])
    return y


def ref_dgrad(dy, w, xd, pre, post, s, d, g):
    dy = dy.astype(np.float64)
    w = w.astype(np.float64)
    padded = tuple(i + a + b for i, a, b in zip(xd[2:], pre, post))
    dxp = np.zeros(xd[:2] + padded)
    kg, cg = w.shape[0] // g, w.shape[1]
    for tap, sl in _windows(dxp.shape, w.shape, dy.shape, s, d):
        for gi in range(g):
            dxp[sl][:, gi * cg:(gi + 1) * cg] += np.einsum(
                "kc,nk...->nc...", w[(slice(gi * kg, (gi + 1) * kg), slice(None)) + tap],
                dy[:, gi * kg:(gi + 1) * kg])
    crop = tuple(slice(a, a + i) for a, i in zip(pre, xd[2:]))
    return dxp[(slice(None), slice(None)) + crop]


def ref_wgrad(dy, x, wd, pre, post, s, d, g):
    dy = dy.astype(np.float64)
    x = x.astype(np.float64)
    xp = np.pad(x, [(0, 0), (0, 0)] + list(zip(pre, post)))
    kg, cg = wd[0] // g, wd[1]
    dw = np.zeros(wd)
    for tap, sl in _windows(xp.shape, wd, dy.shape, s, d):
        win = xp[sl]
        for gi in range(g):
            a = dy[:, gi * kg:(gi + 1) * kg].reshape(dy.shape[0], kg, -1)
            b = win[:, gi * cg:(gi + 1) * cg].reshape(dy.shape[0], cg, -1)
            dw[(slice(gi * kg, (gi + 1) * kg), slice(None)) + tap] = np.einsum("nks,ncs->kc", a, b)
    return dw


# ----------------------------------------------------------------------------
# Cases: (id, x dims, w dims, pre, post, stride, dilation)
# ----------------------------------------------------------------------------

CASES = [
    ("groups2_asym_s2_d2", (2, 4, 7, 9), (6, 2, 3, 2), (1, 0), (0, 2), (2, 1), (1, 2)),
    ("depthwise", (2, 6, 9, 8), (6, 1, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),
    ("depthwise_mult2", (1, 3, 8, 8), (6, 1, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),
    ("stride2_dil2", (1, 5, 11, 13), (4, 5, 3, 3), (2, 1), (1, 2), (2, 2), (2, 2)),
    ("1x1_pad_gt_kernel", (2, 4, 5, 5), (3, 4, 1, 1), (2, 1), (2, 3), (2, 2), (1, 1)),
    ("1x1_s2_nopad", (1, 8, 7, 7), (5, 8, 1, 1), (0, 0), (0, 0), (2, 2), (1, 1)),
    ("1x1_plain", (2, 6, 4, 5), (7, 6, 1, 1), (0, 0), (0, 0), (1, 1), (1, 1)),
    ("kernel_gt_input", (1, 2, 3, 3), (2, 2, 5, 5), (2, 2), (2, 2), (1, 1), (1, 1)),
    ("odd_prime", (3, 7, 13, 11), (5, 7, 5, 3), (2, 1), (0, 3), (3, 2), (1, 1)),
    ("same_even_post", (1, 1, 8, 8), (1, 1, 2, 2), (0, 0), (1, 1), (1, 1), (1, 1)),
    ("same_even_pre", (1, 8, 7, 7), (8, 8, 2, 2), (1, 1), (0, 0), (1, 1), (1, 1)),
    ("tiny_w_odd_k", (1, 8, 1, 8), (17, 8, 1, 3), (0, 1), (0, 1), (1, 2), (1, 1)),
    ("3d_groups3", (1, 3, 5, 4, 6), (3, 1, 1, 2, 3), (0, 1, 1), (1, 0, 2), (1, 2, 1), (2, 1, 1)),
    ("3d_1x1x1_pad1", (2, 4, 1, 6, 6), (4, 4, 1, 1, 1), (1, 1, 1), (1, 1, 1), (1, 1, 1),
     (1, 1, 1)),
    ("3d_3x3x3", (1, 4, 5, 6, 5), (4, 2, 3, 3, 3), (1, 1, 0), (1, 0, 1), (1, 1, 2), (1, 1, 1)),
    ("1d", (2, 3, 17), (4, 3, 4), (2,), (1,), (3,), (1,)),
]


def _problem(direction, case, dtype=np.float32):
    _, xd, wd, pre, post, s, d = case
    yd = _out_dims(xd, wd, pre, post, s, d)
    return ConvProblem(direction, xd, wd, yd, pre, post, s, d, xd[1] // wd[1], np.dtype(dtype))


def _data(p, dtype, seed):
    rng = np.random.default_rng(seed)
    mk = lambda dims: rng.uniform(-1, 1, dims).astype(dtype)  # noqa: E731
    return mk(p.x_dims), mk(p.w_dims), mk(p.y_dims)


def _reference(p, x, w, dy):
    args = (p.pre_padding, p.post_padding, p.stride, p.dilation, p.groups)
    if p.direction == "fprop":
        return ref_fprop(x, w, *args)
    if p.direction == "dgrad":
        return ref_dgrad(dy, w, p.x_dims, *args)
    return ref_wgrad(dy, x, p.w_dims, *args)


def _operands(p, x, w, dy):
    return {"fprop": (x, w), "dgrad": (dy, w), "wgrad": (dy, x)}[p.direction]


def _out_dims_of(p):
    return {"fprop": p.y_dims, "dgrad": p.x_dims, "wgrad": p.w_dims}[p.direction]


def _run(alg, p, a, b, out):
    """Run with a workspace of exactly workspace_size bytes (None when 0)."""
    n = alg.workspace_size(p)
    ws = np.empty(n, np.uint8) if n else None
    alg.run(p, a, b, out, ws)


def _check(out, ref, dtype):
    tol = TOL[np.dtype(dtype)]
    got = out.astype(np.float64)
    assert not np.isnan(got).any(), "unwritten (NaN) output elements"
    bound = tol * (np.abs(ref).max() + np.abs(ref))
    err = np.abs(got - ref)
    assert (err <= bound).all(), f"max err {err.max():.3g}, bound at worst {bound.flat[np.argmax(err)]:.3g}"


def _params():
    for direction in ("fprop", "dgrad", "wgrad"):
        for alg in ALGORITHMS[direction]:
            for case in CASES:
                if alg.applicable(_problem(direction, case)):
                    yield pytest.param(direction, alg.name, case,
                                       id=f"{direction}-{alg.name}-{case[0]}")


def _alg(direction, name):
    return next(a for a in ALGORITHMS[direction] if a.name == name)


# ----------------------------------------------------------------------------
# Tests
# ----------------------------------------------------------------------------

def test_at_least_three_algorithms_per_direction_and_direct_everywhere():
    for direction, algs in ALGORITHMS.items():
        assert len({a.name for a in algs}) >= 3
        assert len({a.workspace_size(_problem(direction, CASES[0])) for a in algs}) >= 2
        for case in CASES:
            p = _problem(direction, case)
            direct = _alg(direction, "direct")
            assert direct.applicable(p) and direct.workspace_size(p) == 0


@pytest.mark.parametrize("direction,name,case", list(_params()))
def test_algorithm_fp32_matches_reference(direction, name, case):
    p = _problem(direction, case)
    alg = _alg(direction, name)
    x, w, dy = _data(p, np.float32, seed=zlib.crc32(case[0].encode()))
    out = np.full(_out_dims_of(p), np.nan, np.float32)
    _run(alg, p, *_operands(p, x, w, dy), out)
    _check(out, _reference(p, x, w, dy), np.float32)


STRIDED_CASES = [c for c in CASES if c[0] in ("groups2_asym_s2_d2", "1x1_pad_gt_kernel",
                                                "1x1_plain", "3d_groups3", "odd_prime")]


def _nhwc_view(a):
    """The same logical array stored channels-last (transposed view of a packed buffer)."""
    order = (0,) + tuple(range(2, a.ndim)) + (1,)
    back = np.argsort(order)
    return np.ascontiguousarray(a.transpose(order)).transpose(back)


def _gapped(dims, dtype):
    """A NaN-filled non-packed view (every dim padded by 1-2 elements) and its parent buffer."""
    big = np.full(tuple(d + 1 + (i % 2) for i, d in enumerate(dims)), np.nan, dtype)
    return big[tuple(slice(1, 1 + d) for d in dims)], big


@pytest.mark.parametrize("case", STRIDED_CASES, ids=[c[0] for c in STRIDED_CASES])
@pytest.mark.parametrize("direction", ["fprop", "dgrad", "wgrad"])
def test_strided_inputs_and_outputs(direction, case):
    p = _problem(direction, case)
    x, w, dy = _data(p, np.float32, seed=7)
    ref = _reference(p, x, w, dy)
    for alg in ALGORITHMS[direction]:
        if not alg.applicable(p):
            continue
        for layout in ("nhwc", "gapped"):
            if layout == "nhwc":
                a, b = (_nhwc_view(t) for t in _operands(p, x, w, dy))
                out = _nhwc_view(np.full(_out_dims_of(p), np.nan, np.float32))
                parent = None
            else:
                a, b = _operands(p, x, w, dy)
                a, b = (_gapped(t.shape, np.float32)[0] for t in (a, b))
                a[...], b[...] = _operands(p, x, w, dy)
                out, parent = _gapped(_out_dims_of(p), np.float32)
            _run(alg, p, a, b, out)
            _check(out, ref, np.float32)
            if parent is not None:
                mask = np.ones(parent.shape, bool)
                mask[tuple(slice(1, 1 + d) for d in out.shape)] = False
                assert np.isnan(parent[mask]).all(), f"{alg.name} wrote outside its output"


LOWP_CASES = [c for c in CASES if c[0] in ("groups2_asym_s2_d2", "1x1_pad_gt_kernel",
                                             "odd_prime", "3d_3x3x3")]


@pytest.mark.parametrize("dtype", [np.float16, BF16, np.float64], ids=["fp16", "bf16", "fp64"])
@pytest.mark.parametrize("case", LOWP_CASES, ids=[c[0] for c in LOWP_CASES])
@pytest.mark.parametrize("direction", ["fprop", "dgrad", "wgrad"])
def test_other_dtypes(direction, case, dtype):
    p = _problem(direction, case, dtype)
    x, w, dy = _data(p, dtype, seed=11)
    ref = _reference(p, x, w, dy)   # from the rounded inputs, in float64
    for alg in ALGORITHMS[direction]:
        if alg.applicable(p):
            out = _nhwc_view(np.full(_out_dims_of(p), np.nan, dtype))
            _run(alg, p, *_operands(p, x, w, dy), out)
            assert out.dtype == np.dtype(dtype)
            _check(out, ref, dtype)


def test_workspace_sizes_are_exact_and_too_small_is_an_error():
    p = _problem("fprop", CASES[0])
    x, w, _ = _data(p, np.float32, seed=3)
    for alg in ALGORITHMS["fprop"]:
        n = alg.workspace_size(p)
        if n == 0:
            continue
        ws = np.full(n + 64, 0xAB, np.uint8)
        alg.run(p, x, w, np.empty(p.y_dims, np.float32), ws[:n])
        assert (ws[n:] == 0xAB).all(), f"{alg.name} wrote past its workspace"
        with pytest.raises(ExecutionError, match="workspace"):
            alg.run(p, x, w, np.empty(p.y_dims, np.float32), np.empty(n - 1, np.uint8))
    names = {a.name: a.workspace_size(p) for a in ALGORITHMS["fprop"]}
    assert names["im2col_gemm"] == p.y_dims[0] * names["im2col_gemm_chunked"] > 0


@pytest.mark.parametrize("direction", ["fprop", "dgrad", "wgrad"])
def test_heuristic_choice(direction):
    p3 = _problem(direction, CASES[0])
    p1 = _problem(direction, next(c for c in CASES if c[0] == "1x1_plain"))
    for p in (p3, p1):
        zero = heuristic_choice(p, 0)
        assert zero.applicable(p) and zero.workspace_size(p) == 0
        big = heuristic_choice(p, 1 << 40)
        assert big.applicable(p)
        limit = _alg(direction, "im2col_gemm").workspace_size(p) - 1
        assert heuristic_choice(p, limit).workspace_size(p) <= limit
    assert heuristic_choice(p1, 0).name == "gemm_1x1"
    assert heuristic_choice(p3, 0).name == "direct"
    assert heuristic_choice(p3, 1 << 40).name == "im2col_gemm"


def test_not_applicable_and_bad_dims_raise():
    p = _problem("fprop", CASES[0])
    x, w, _ = _data(p, np.float32, seed=1)
    with pytest.raises(ExecutionError, match="gemm_1x1"):
        _alg("fprop", "gemm_1x1").run(p, x, w, np.empty(p.y_dims, np.float32), None)
    with pytest.raises(GraphError, match="'y'"):
        _alg("fprop", "direct").run(p, x, w, np.empty((1, 1, 1, 1), np.float32), None)


@pytest.mark.parametrize("kw,match", [
    (dict(y_dims=(2, 6, 4, 9)), "expected"),
    (dict(pre_padding=(-1, 0)), "padding"),
    (dict(stride=(0, 1)), "stride"),
    (dict(dilation=(1, 0)), "dilation"),
    (dict(groups=3), "groups"),
    (dict(direction="bwd"), "direction"),
])
def test_problem_validation(kw, match):
    _, xd, wd, pre, post, s, d = CASES[0]
    args = dict(direction="fprop", x_dims=xd, w_dims=wd, y_dims=_out_dims(xd, wd, pre, post, s, d),
                pre_padding=pre, post_padding=post, stride=s, dilation=d, groups=2,
                dtype=np.float32)
    args.update(kw)
    with pytest.raises(GraphError, match=match):
        ConvProblem(**args)


def test_peer_torch_float64():
    """The references above agree with PyTorch (a peer library), hence so do the algorithms."""
    torch = peer("torch", "PyTorch CPU is the peer of this convolution check")
    F = torch.nn.functional
    case = CASES[0]
    p = _problem("fprop", case, np.float64)
    x, w, dy = _data(p, np.float64, seed=5)
    xt = torch.tensor(x, requires_grad=True)
    wt = torch.tensor(w, requires_grad=True)
    pads = [v for pr in zip(p.pre_padding[::-1], p.post_padding[::-1]) for v in pr]
    yt = F.conv2d(F.pad(xt, pads), wt, stride=p.stride, dilation=p.dilation, groups=p.groups)
    yt.backward(torch.tensor(dy))
    for direction, want in (("fprop", yt.detach().numpy()), ("dgrad", xt.grad.numpy()),
                            ("wgrad", wt.grad.numpy())):
        q = _problem(direction, case, np.float64)
        np.testing.assert_allclose(_reference(q, x, w, dy), want, rtol=1e-12, atol=1e-12)
        for alg in ALGORITHMS[direction]:
            if alg.applicable(q):
                out = np.full(_out_dims_of(q), np.nan)
                _run(alg, q, *_operands(q, x, w, dy), out)
                np.testing.assert_allclose(out, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("direction", ["fprop", "dgrad", "wgrad"])
def test_empty_batch(direction):
    """N = 0 is legal (test-cases.md, PyTorch): empty outputs, and dw of an empty sum is 0."""
    _, xd, wd, pre, post, s, d = CASES[0]
    xd = (0,) + xd[1:]
    p = ConvProblem(direction, xd, wd, _out_dims(xd, wd, pre, post, s, d), pre, post, s, d, 2,
                    np.float32)
    x, w, dy = _data(p, np.float32, seed=0)
    for alg in ALGORITHMS[direction]:
        if alg.applicable(p):
            out = np.full(_out_dims_of(p), np.nan, np.float32)
            _run(alg, p, *_operands(p, x, w, dy), out)
            assert (out == 0).all()
