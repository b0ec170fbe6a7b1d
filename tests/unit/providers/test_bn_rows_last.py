"""``providers.cpu._kernels.bn_rows`` on channels-last activations (NHWC, NDHWC;
``_bn_last.h``): every op (training with and without a clamp, inference, backward with and
without the RELU_BWD mask) x element kind x build (the portable baseline and the one that
runs by default) x channel counts around the 16-lane vectors and the 64-channel blocks
(3, 5, 17, 20, 33, 64, 100, 130), on pixel strides wider than C and N strides that do not follow
the pixels, against float64 references (tests/oracle/_reference.py, tolerances of
tests/oracle/_cases.py); special values, which follow the channels-first rows' rules;
and ONEDNN_ENGINE taking the rows on channels-last memory (oneDNN's batchnorm still
offered to benchmarking).

Cases run on oneDNN's OpenMP team (loaded at import) wherever oneDNN loads: the pixels
are split among its threads, whose partial sums meet after a team barrier."""
from __future__ import annotations

import os

import ml_dtypes
import numpy as np
import pytest

import hipdnn_async as hd
from hipdnn_async.providers.cpu import _kernels as k
from hipdnn_async.runtime import load_onednn
from hipdnn_async.runtime._buffer import aligned_empty
from oracle import _reference as ref
from oracle._cases import assert_close, tol

from ._bn_rows_ops import OPS, op_vectors, pivot_pixels

KINDS = {"float32": (0, np.dtype(np.float32)), "bfloat16": (1, np.dtype(ml_dtypes.bfloat16)),
         "float16": (2, np.dtype(np.float16))}
EPS = 3e-5
SUM_RTOL = 1e-5      # statistics and backward sums, relative to the sum of |terms|
ONEDNN_STATE = load_onednn()          # the team, as in the engine

# (N, C, spatial...): C around the 16-lane vectors and the 64-channel register blocks
# (the wider ones run pixel by pixel), more than 64 pixels a thread (several float32 tiles
# per thread), a single pixel per image, NDHWC
SHAPES = [(2, 3, 5, 7), (2, 20, 3, 5), (3, 33, 4, 5), (2, 64, 5, 5), (2, 100, 3, 3),
          (4, 20, 9, 9), (3, 5, 1, 1), (1, 130, 2, 2, 3), (2, 17, 2, 3, 4)]
# how an activation sits in memory, channels-last: packed; pixels padded to C + 3 values;
# every other image of a buffer of 2N (an N stride the pixels do not continue); N reversed
LAYOUTS = ("packed", "padded", "batch_step", "reversed_n")


def placed(shape, dtype, how, fill, aligned=False):
    """An array of logical ``shape`` (N, C, spatial...) in channels-last memory laid out as
    ``how`` (LAYOUTS), in a buffer filled with ``fill``: (view, buffer, covered mask).
    ``aligned``: the buffer starts on a 64-byte boundary and pixels are padded by 64
    bytes, not 3 values."""
    n, c, sp = shape[0], shape[1], shape[2:]

    def full(dims):
        if not aligned:
            return np.full(dims, fill, dtype)
        b = aligned_empty(int(np.prod(dims)) * dtype.itemsize).view(dtype).reshape(dims)
        b[...] = fill
        return b

    if how == "padded":
        base = full((n,) + sp + (c + (64 // dtype.itemsize if aligned else 3),))
        sel = (Ellipsis, slice(0, c))
    elif how == "batch_step":
        base = full((2 * n,) + sp + (c,))
        sel = (slice(1, None, 2),)
    elif how == "reversed_n":
        base = full((n,) + sp + (c,))
        sel = (slice(None, None, -1),)
    else:
        base = full((n,) + sp + (c,))
        sel = ()
    covered = np.zeros(base.shape, bool)
    covered[sel] = True
    view = np.moveaxis(base[sel], -1, 1)
    assert view.strides[1] == dtype.itemsize          # channels-last, as bn_rows reads it
    return view, base, covered


def raw(a):
    return a if a.dtype.itemsize == 4 else a.view(np.uint16)


def f64(a):
    return np.asarray(a, np.float64)


def axes(a):
    return (0,) + tuple(range(2, a.ndim))


def chan(v, nd):
    return np.asarray(v, np.float64).reshape((1, -1) + (1,) * (nd - 2))


def relu_bwd_nan(ybn, dy, lower, upper):
    """RELU_BWD as the rows apply it: dy where lower < ybn < upper, NaN where ybn is."""
    g = ref.relu_bwd(ybn, dy, lower, None if upper == np.inf else upper)
    return np.where(np.isnan(ybn), np.nan, g)


def close_sums(got, want, terms, what):
    """Per-channel sums: |got - want| <= SUM_RTOL * sum |terms| (+ a float32 ulp)."""
    got, want = f64(got).reshape(-1), f64(want).reshape(-1)
    bound = SUM_RTOL * f64(terms).reshape(-1) + 1e-30
    assert np.all(np.abs(got - want) <= bound + 1.2e-7 * np.abs(want)), \
        f"{what}: {got} vs {want} (bound {bound})"


def draw(dtype, shape, how, seed):
    """Inputs: activations placed as ``how`` (rounded to ``dtype``) and
    float32 per-channel vectors."""
    rng = np.random.default_rng(seed)
    c = shape[1]
    vals = {}
    for role, off in (("x", 0.3), ("dy", 0.0)):
        v, _, _ = placed(shape, dtype, how, np.nan)
        v[...] = (off + rng.uniform(-1, 1, shape)).astype(dtype)
        vals[role] = v
    vals["scale"] = rng.uniform(-2, 2, c).astype(np.float32)
    vals["bias"] = rng.uniform(-1, 1, c).astype(np.float32)
    vals["mean"] = rng.uniform(-0.2, 0.5, c).astype(np.float32)
    vals["variance"] = rng.uniform(0.5, 2, c).astype(np.float32)
    vals["inv_variance"] = rng.uniform(0.5, 2, c).astype(np.float32)
    return vals


def run(name, dtype, baseline, shape, how, vals, fill=np.nan, stream=None, aligned=False):
    """``bn_rows`` on ``vals`` (y placed ``aligned`` or not; ``stream`` as bn_rows takes
    it): (outputs, output buffer, covered mask, threads)."""
    op, act, lo, hi = {o[0]: o[1:] for o in OPS}[name]
    kind = KINDS[dtype.name][0]
    y, ybuf, covered = placed(shape, dtype, how, fill, aligned)
    c = shape[1]
    outs = {r: np.full(c, np.nan, np.float32) for r in ("mean_out", "variance_out", "dscale",
                                                        "dbias")}
    kw = dict(op_vectors(op, act, vals, outs), act=act, lower=lo, upper=hi,
              baseline=baseline, stream=stream)
    if op == k.BN_ROWS_BACKWARD:
        kw["dy"] = raw(vals["dy"])
    else:
        kw["epsilon"] = EPS
    threads = k.bn_rows(op, raw(vals["x"]), raw(y), kind, **kw)
    outs["y"] = y
    return outs, ybuf, covered, threads


def reference(name, vals):
    op, act, lo, hi = {o[0]: o[1:] for o in OPS}[name]
    x = f64(vals["x"])
    nd = x.ndim
    if op == k.BN_ROWS_TRAINING:
        st = ref.bn_training(x, vals["scale"], vals["bias"], EPS)
        var = ((x - st["mean"]) ** 2).mean(axis=axes(x), keepdims=True)
        y = ref.relu(st["y"], lo, None if hi == np.inf else hi) if act else st["y"]
        return {"y": y, "mean_out": st["mean"], "variance_out": var}
    if op == k.BN_ROWS_INFERENCE:
        y = ref.bn_inference_variance(x, vals["mean"], vals["variance"], vals["scale"],
                                      vals["bias"], EPS)
        return {"y": ref.relu(y, lo, None if hi == np.inf else hi) if act else y}
    g = f64(vals["dy"])
    if act:
        ybn = ref.bn_inference(x, vals["mean"], vals["inv_variance"], vals["scale"],
                               vals["bias"])
        g = relu_bwd_nan(ybn, g, lo, hi)
    want = ref.bn_backward(g, x, vals["scale"], vals["mean"], vals["inv_variance"])
    d = x - chan(vals["mean"], nd)
    want["terms_g"] = np.abs(g).sum(axis=axes(x))
    want["terms_gd"] = np.abs(g * d).sum(axis=axes(x)) * np.abs(f64(vals["inv_variance"]))
    return {"y": want["dx"], "dscale": want["dscale"], "dbias": want["dbias"],
            "terms_g": want["terms_g"], "terms_gd": want["terms_gd"]}


def off_the_mask_edges(name, vals):
    """For the RELU_BWD ops, zero dy where y_bn lies within 1e-4 of a clip: the float32
    y_bn of the rows and the float64 one may fall on either side there, and a zero dy
    makes both sides agree."""
    op, act, lo, hi = {o[0]: o[1:] for o in OPS}[name]
    if op != k.BN_ROWS_BACKWARD or not act:
        return
    ybn = ref.bn_inference(vals["x"], vals["mean"], vals["inv_variance"], vals["scale"],
                           vals["bias"])
    near = np.abs(ybn - lo) < 1e-4
    if hi != np.inf:
        near |= np.abs(ybn - hi) < 1e-4
    vals["dy"][near] = 0


def need_build(dtype, baseline):
    if not baseline and k.bn_rows_isa(dtype) == "baseline":
        pytest.skip("this CPU runs the baseline build by default (no AVX-512)")


def test_the_team_runs_the_channels_last_rows():
    if not ONEDNN_STATE.ok:
        pytest.skip(f"oneDNN does not load here: {ONEDNN_STATE.reason}")
    vals = draw(np.dtype(np.float32), (2, 20, 9, 9), "packed", 0)
    _, _, _, threads = run("inference", np.dtype(np.float32), False, (2, 20, 9, 9), "packed",
                           vals)
    # libgomp's team: OMP_NUM_THREADS, else one thread per CPU this process may run on
    want = int(os.environ.get("OMP_NUM_THREADS", "0").split(",")[0] or 0) \
        or len(os.sched_getaffinity(0))
    assert threads == want


@pytest.mark.parametrize("how", LAYOUTS)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("baseline", [False, True], ids=["default", "baseline"])
@pytest.mark.parametrize("dtype", list(KINDS))
@pytest.mark.parametrize("name", [o[0] for o in OPS])
def test_ops_match_float64(name, dtype, baseline, shape, how):
    dt = KINDS[dtype][1]
    need_build(dtype, baseline)
    seed = [OPS.index(next(o for o in OPS if o[0] == name)), SHAPES.index(shape),
            LAYOUTS.index(how), list(KINDS).index(dtype)]
    vals = draw(dt, shape, how, seed)
    off_the_mask_edges(name, vals)
    got, ybuf, covered, _ = run(name, dt, baseline, shape, how, vals)
    want = reference(name, vals)
    what = f"{name} {dtype} {'baseline' if baseline else 'default'} {shape} {how}"
    op = {o[0]: o[1] for o in OPS}[name]
    table = {k.BN_ROWS_TRAINING: "bn_training", k.BN_ROWS_INFERENCE: "bn_inference_variance",
             k.BN_ROWS_BACKWARD: "bn_backward"}[op]
    assert_close(got["y"], want["y"], *tol(table, dtype), what=what + " y")
    # the buffer outside the view (padding, other images) is not written
    assert np.isnan(f64(ybuf[~covered])).all(), what
    x = f64(vals["x"])
    if op == k.BN_ROWS_TRAINING:
        close_sums(got["mean_out"], want["mean_out"], np.abs(x).sum(axis=axes(x)) / x.size
                   * x.shape[1], what + " mean")
        dev2 = (x - chan(want["mean_out"].reshape(-1), x.ndim)) ** 2
        close_sums(got["variance_out"], want["variance_out"],
                   dev2.sum(axis=axes(x)) / x.size * x.shape[1], what + " variance")
    elif op == k.BN_ROWS_BACKWARD:
        close_sums(got["dbias"], want["dbias"], want["terms_g"], what + " dbias")
        close_sums(got["dscale"], want["dscale"], want["terms_gd"], what + " dscale")


# streamed stores (hd_bn_stream; by default only where the call's activations pass the
# last-level cache): y on 64-byte boundaries at every pixel, C around the 32-channel vectors of the pixel-by-pixel rows
# (C > 64) and the 64-channel register blocks (C <= 64), float32 and bfloat16
STREAM_SHAPES = {"float32": [(2, 16, 3, 5), (2, 32, 3, 3), (3, 48, 4, 5), (2, 64, 5, 5),
                             (2, 80, 3, 3), (2, 96, 2, 3), (2, 128, 3, 1), (65, 256, 1, 2),
                             (2, 512, 2, 3), (1, 144, 2, 2, 3)],
                 "bfloat16": [(2, 32, 3, 5), (2, 64, 5, 5), (3, 96, 2, 3), (65, 128, 1, 2),
                              (2, 64, 2, 2, 3), (2, 512, 1, 3)]}
STREAM_CASES = [(d, s) for d, shapes in STREAM_SHAPES.items() for s in shapes]


@pytest.mark.parametrize("how", LAYOUTS)
@pytest.mark.parametrize("dtype,shape", STREAM_CASES,
                         ids=[f"{d}-{'x'.join(map(str, s))}" for d, s in STREAM_CASES])
@pytest.mark.parametrize("name", [o[0] for o in OPS])
def test_streamed_rows_match_float64_and_the_cached_stores(name, dtype, shape, how):
    dt = KINDS[dtype][1]
    need_build(dtype, False)
    if k.bn_rows_isa(dtype) != "avx512":
        pytest.skip(f"{dtype} rows are {k.bn_rows_isa(dtype)} here: they do not stream")
    vals = draw(dt, shape, how, [OPS.index(next(o for o in OPS if o[0] == name)), 9,
                                 LAYOUTS.index(how)])
    off_the_mask_edges(name, vals)
    got, ybuf, covered, _ = run(name, dt, False, shape, how, vals, stream=True, aligned=True)
    what = f"{name} {dtype} streamed {shape} {how}"
    op = {o[0]: o[1] for o in OPS}[name]
    table = {k.BN_ROWS_TRAINING: "bn_training", k.BN_ROWS_INFERENCE: "bn_inference_variance",
             k.BN_ROWS_BACKWARD: "bn_backward"}[op]
    assert_close(got["y"], reference(name, vals)["y"], *tol(table, dtype), what=what + " y")
    assert np.isnan(f64(ybuf[~covered])).all(), what
    cached, _, _, _ = run(name, dt, False, shape, how, vals, stream=False, aligned=True)
    for r in ("y", "mean_out", "variance_out", "dscale", "dbias"):   # the same values
        np.testing.assert_array_equal(f64(got[r]), f64(cached[r]), f"{what} {r}")


def test_streaming_is_refused_off_64_byte_boundaries():
    need_build("float32", False)
    dt = KINDS["float32"][1]
    vals = draw(dt, (2, 64, 5, 5), "packed", 1)
    with pytest.raises(ValueError, match="cannot stream y"):   # numpy's 16-byte alignment
        x = vals["x"]
        y = np.moveaxis(aligned_empty(x.nbytes + 4).view(np.float32)[1:].reshape(2, 5, 5, 64),
                        -1, 1)
        k.bn_rows(k.BN_ROWS_INFERENCE, x, y, 0, scale=vals["scale"], bias=vals["bias"],
                  mean=vals["mean"], variance=vals["variance"], stream=True)
    with pytest.raises(ValueError, match="cannot stream y"):   # pixels 20 values apart
        run("inference", dt, False, (2, 20, 3, 3), "packed", draw(dt, (2, 20, 3, 3), "packed",
                                                                   2), stream=True,
            aligned=True)
    with pytest.raises(ValueError, match="cannot stream y"):   # float16 never streams
        d16 = KINDS["float16"][1]
        run("inference", d16, False, (2, 64, 3, 3), "packed", draw(d16, (2, 64, 3, 3),
                                                                   "packed", 3),
            stream=True, aligned=True)
    # every pixel 64 bytes from the next within an image, the images 16 bytes off
    x = vals["x"]
    per = 5 * 5 * 64 + 4
    buf = aligned_empty(2 * per * 4).view(np.float32)
    buf[...] = np.nan
    y = np.moveaxis(np.lib.stride_tricks.as_strided(buf, (2, 5, 5, 64), (per * 4, 5 * 256,
                                                                         256, 4)), -1, 1)
    with pytest.raises(ValueError, match="cannot stream y"):
        k.bn_rows(k.BN_ROWS_INFERENCE, x, y, 0, scale=vals["scale"], bias=vals["bias"],
                  mean=vals["mean"], variance=vals["variance"], stream=True)
    assert np.isnan(buf).all()                                    # nothing ran
    if k.bn_rows_isa("bfloat16") == "avx512":   # bfloat16 pixels of 48 values: 96 bytes
        b16 = KINDS["bfloat16"][1]
        with pytest.raises(ValueError, match="cannot stream y.*pixels 96 bytes apart"):
            run("inference", b16, False, (2, 48, 3, 3), "packed",
                draw(b16, (2, 48, 3, 3), "packed", 4), stream=True, aligned=True)



def _sysfs(root, caches):
    """A fake ``/sys/devices/system/cpu/cpu0/cache`` under ``root``: one ``index<i>`` folder
    per (level, type, size) of ``caches``."""
    for i, (level, kind, size) in enumerate(caches):
        d = root / f"index{i}"
        d.mkdir(parents=True)
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")
    return str(root)


def test_last_level_cache_read_from_sysfs(tmp_path):
    # a 64 MiB instruction cache is not the data's; sizes in K and M as the kernel writes
    root = _sysfs(tmp_path / "a", [(1, "Data", "48K"), (1, "Instruction", "65536K"),
                                   (2, "Unified", "2048K"), (3, "Unified", "96M")])
    assert k.last_level_cache_bytes(root) == 96 * 2**20
    assert k.last_level_cache_bytes(tmp_path / "a") == 96 * 2**20     # a path object too
    # L1 and L2 only (a VM hiding the L3): not taken for the last level, the default
    root = _sysfs(tmp_path / "b", [(1, "Data", "32K"), (2, "Unified", "1024K")])
    assert k.last_level_cache_bytes(root) == 32 * 2**20
    assert k.last_level_cache_bytes(str(tmp_path / "none")) == 32 * 2**20   # no sysfs
    # malformed sizes are skipped: words, signs, no unit, absurd lengths
    for i, bad in enumerate(["bogus", "32 MiB", "-5K", "8M\nfoo", "4096", "1" * 20 + "G"]):
        root = _sysfs(tmp_path / f"c{i}", [(3, "Unified", bad)])
        assert k.last_level_cache_bytes(root) == 32 * 2**20, bad
    # bytes that are not text, and a missing level file: skipped, not raised
    root = _sysfs(tmp_path / "d", [(3, "Unified", "16384K"), (3, "Unified", "8192K")])
    (tmp_path / "d" / "index0" / "size").write_bytes(b"\xff\xfe3\x00")
    assert k.last_level_cache_bytes(root) == 8 * 2**20
    (tmp_path / "d" / "index1" / "level").unlink()
    assert k.last_level_cache_bytes(root) == 32 * 2**20


@pytest.mark.skipif(not os.path.isdir("/sys/devices/system/cpu/cpu0/cache/index0"),
                    reason="no cache description in sysfs on this machine")
def test_last_level_cache_is_lscpus():
    # util-linux's lscpu reads the same files with its own parser
    import shutil
    import subprocess
    if shutil.which("lscpu") is None:
        pytest.skip("no lscpu on this machine")
    out = subprocess.run(["lscpu", "-B", "-C=LEVEL,TYPE,ONE-SIZE"], capture_output=True,
                         text=True)
    if out.returncode != 0:
        pytest.skip(f"lscpu -C failed here: {out.stderr.strip()}")
    sizes = [int(f[2]) for f in (line.split() for line in out.stdout.splitlines()[1:])
             if len(f) == 3 and f[0].isdigit() and int(f[0]) >= 3
             and f[1] in ("Data", "Unified")]
    assert k.last_level_cache_bytes() == (max(sizes) if sizes else 32 * 2**20)


def test_streaming_by_default_where_the_call_passes_the_last_level_cache():
    llc = k.last_level_cache_bytes()
    # backward touches x, dy and dx; training and inference x and y
    for op, tensors in ((k.BN_ROWS_BACKWARD, 3), (k.BN_ROWS_TRAINING, 2),
                        (k.BN_ROWS_INFERENCE, 2)):
        for itemsize in (4, 2):
            at = -(-llc // (tensors * itemsize))           # the fewest values reaching it
            assert k.bn_streams_by_default(op, at, itemsize), (op, itemsize)
            assert not k.bn_streams_by_default(op, at - 1, itemsize), (op, itemsize)
    # ResNet-50's 32 x 512 x 14 x 14 float32 under a 32 MiB cache: backward streams
    # (38.5 MB of x, dy and dx), training does not (25.7 MB of x and y)
    if llc == 32 * 2**20:
        assert k.bn_streams_by_default(k.BN_ROWS_BACKWARD, 32 * 512 * 196, 4)
        assert not k.bn_streams_by_default(k.BN_ROWS_TRAINING, 32 * 512 * 196, 4)



@pytest.mark.parametrize("name", ["backward", "backward_drelu"])
def test_default_rows_of_resnet50_batch32_backward_match_float64(name):
    # 32 x 512 x 14 x 14 float32: x, dy and dx pass a 32 MiB last-level cache, so the
    # default (stream=None) streams dx there; the values are float64's either way
    if name not in {o[0] for o in OPS}:
        pytest.skip(f"no op {name} in _bn_rows_ops.OPS")
    dt = KINDS["float32"][1]
    shape = (32, 512, 14, 14)
    vals = draw(dt, shape, "packed", 17)
    off_the_mask_edges(name, vals)
    got, ybuf, covered, _ = run(name, dt, False, shape, "packed", vals, aligned=True)
    what = f"{name} float32 {shape} default stores (streamed: " \
           f"{k.bn_streams_by_default(k.BN_ROWS_BACKWARD, 32 * 512 * 196, 4)})"
    want = reference(name, vals)
    assert_close(got["y"], want["y"], *tol("bn_backward", "float32"), what=f"{what} dx")
    assert np.isnan(f64(ybuf[~covered])).all(), what
    close_sums(got["dbias"], want["dbias"], want["terms_g"], what + " dbias")
    close_sums(got["dscale"], want["dscale"], want["terms_gd"], what + " dscale")


# ------------------------------------------------------------------ offset data
# x = offset + sigma * N(0, 1): the statistics of values far from zero with a small spread
# (float32 tile sums of 64 values ~3e4 lost bits: the mean 3 ulps off, y 0.0124 off at
# 3e4 + 0.5 N(0, 1)), at small batch, in one and several float32 tiles per thread, C in
# one register block and past it (pixel by pixel)
OFFSET_SHAPES = [(2, 20, 2, 3), (1, 17, 2, 2, 5), (4, 64, 8, 8), (2, 100, 3, 5)]
OFFSETS = [(3e4, 0.5), (1e4, 1.0), (3e4, 0.1)]   # 0.1: the bias takes the mean's remainder
ISAS = ("baseline", "avx512_auto", "avx512", "avx2_auto", "avx2")


def _training(x, dtype, isa, scale, bias, variance_dtype=np.float32):
    """bn_rows training of the channels-last ``x`` (of ``dtype``) by build ``isa``: (y,
    mean, variance, float64 reference)."""
    c = x.shape[1]
    y, _, _ = placed(x.shape, KINDS[dtype][1], "packed", np.nan)
    mean, var = np.full(c, np.nan, np.float32), np.full(c, np.nan, variance_dtype)
    k.bn_rows(k.BN_ROWS_TRAINING, raw(x), raw(y), KINDS[dtype][0], scale=scale, bias=bias,
              mean_out=mean, variance_out=var, epsilon=EPS, isa=isa)
    return y, mean, var, ref.bn_training(f64(x), scale, bias, EPS)


@pytest.mark.parametrize("off,sigma", OFFSETS, ids=lambda v: f"{v:g}")
@pytest.mark.parametrize("shape", OFFSET_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("dtype", list(KINDS))
def test_training_on_offset_data_matches_float64(dtype, isa, shape, off, sigma):
    """Training of every build on x = off + sigma N(0, 1) (rounded to the element kind):
    y within the training tolerance of float64, the mean within a float32 ulp of the
    float64 mean of the rounded x."""
    if isa not in k.bn_rows_builds():
        pytest.skip(f"this CPU runs {k.bn_rows_builds()}, not {isa}")
    dt = KINDS[dtype][1]
    rng = np.random.default_rng([OFFSET_SHAPES.index(shape), int(off), ISAS.index(isa)])
    c = shape[1]
    x, _, _ = placed(shape, dt, "packed", np.nan)
    x[...] = (off + sigma * rng.standard_normal(shape)).astype(dt)
    scale = rng.uniform(0.5, 1.5, c).astype(np.float32)
    bias = rng.uniform(-1, 1, c).astype(np.float32)
    y, mean, var, want = _training(x, dtype, isa, scale, bias)
    what = f"{dtype} {isa} {shape} {off:g} + {sigma:g} N(0, 1)"
    assert_close(y, want["y"], *tol("bn_training", dtype), what=what + " y")
    m64 = want["mean"].reshape(-1)
    ulp = np.spacing(np.abs(m64).astype(np.float32)).astype(np.float64)
    err = np.abs(f64(mean) - m64)
    assert np.all(err <= ulp), f"{what} mean: {err / ulp} float32 ulps off"
    v64 = ((f64(x) - want["mean"]) ** 2).mean(axis=axes(x))
    assert np.allclose(f64(var), v64, rtol=1e-4, atol=1e-7 * off * off * 1e-6), \
        f"{what} variance: {var} vs {v64}"


@pytest.mark.parametrize("shape", OFFSET_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_training_sums_of_x_minus_the_pivot_that_overflow_are_taken_in_float64(dtype, isa,
                                                                               shape):
    """The first pixel 1e38, the others -1e38 (+ 1e36 N(0, 1)): each x - p is ~ -2e38 and
    their float32 tile sums overflow (as the squared deviations do), so they are taken
    again in float64: the mean and y still within tolerance of float64."""
    if isa not in k.bn_rows_builds():
        pytest.skip(f"this CPU runs {k.bn_rows_builds()}, not {isa}")
    dt = KINDS[dtype][1]
    rng = np.random.default_rng(OFFSET_SHAPES.index(shape))
    c = shape[1]
    x, _, _ = placed(shape, dt, "packed", np.nan)
    v = -1e38 + 1e36 * rng.standard_normal(shape)
    v[(0, slice(None)) + (0,) * (len(shape) - 2)] = 1e38
    x[...] = v.astype(dt)
    scale = rng.uniform(0.5, 1.5, c).astype(np.float32)
    bias = rng.uniform(-1, 1, c).astype(np.float32)
    y, mean, var, want = _training(x, dtype, isa, scale, bias, np.float64)
    what = f"{dtype} {isa} {shape}"
    assert_close(y, want["y"], *tol("bn_training", dtype), what=what + " y")
    assert_close(mean, want["mean"].reshape(-1), 0, 1.2e-7, what=what + " mean")
    v64 = ((f64(x) - want["mean"]) ** 2).mean(axis=axes(x))
    assert_close(var, v64, 0, 1e-5, what=what + " variance")


# ------------------------------------------------------------------ special values
def laid_both(a):
    """``a`` (N, C, spatial...) as a channels-last array and as a packed channels-first one."""
    last = np.moveaxis(np.ascontiguousarray(np.moveaxis(a, 1, -1)), -1, 1)
    return last, np.ascontiguousarray(a)


@pytest.mark.parametrize("baseline", [False, True], ids=["default", "baseline"])
@pytest.mark.parametrize("name", [o[0] for o in OPS])
def test_special_values_follow_the_channels_first_rows(name, baseline):
    """NaN, +-inf and -0.0 in x, dy and the per-channel vectors: the channels-last rows
    give the channels-first rows' NaN, infinities and signed zeros, and values within
    float32 rounding of theirs; a NaN in x poisons exactly the float64 reference's
    elements."""
    need_build("float32", baseline)
    op, act, lo, hi = {o[0]: o[1:] for o in OPS}[name]
    shape = (3, 20, 5, 6)
    rng = np.random.default_rng(7)
    x = (0.3 + rng.uniform(-1, 1, shape)).astype(np.float32)
    dy = rng.uniform(-1, 1, shape).astype(np.float32)
    x[1, 2, 3, 4] = np.nan                      # channel 2
    x[0, 5, 0, 0] = np.inf                      # channel 5
    x[2, 17, 1, 1] = -np.inf                    # channel 17: the 16-lane tail
    x[:, 8] = -0.0                              # channel 8: constant -0.0 (variance 0)
    dy[0, 11, 2, 2] = np.inf                    # channel 11
    dy[1, 12, 0, 3] = np.nan                    # channel 12
    vec = {r: rng.uniform(lo_, hi_, 20).astype(np.float32) for r, lo_, hi_ in
           (("scale", -2, 2), ("bias", -1, 1), ("mean", -0.2, 0.5), ("variance", 0.5, 2),
            ("inv_variance", 0.5, 2))}
    vec["scale"][9] = np.nan
    vec["bias"][10] = -np.inf
    vec["mean"][13] = np.inf
    vec["variance"][14] = -1.0                  # variance + epsilon < 0: NaN factor
    vec["inv_variance"][15] = 0.0
    vec["bias"][16] = -0.0
    vec["scale"][16] = 0.0                      # y = 0 * ... + -0.0
    results = []
    xl, xf = laid_both(x)
    dyl, dyf = laid_both(dy)
    for xa, dya in ((xl, dyl), (xf, dyf)):
        y = np.full_like(xa, 7.0)
        outs = {r: np.full(20, 7.0, np.float32) for r in ("mean_out", "variance_out",
                                                           "dscale", "dbias")}
        kw = dict(op_vectors(op, act, vec, outs), act=act, lower=lo, upper=hi,
                  baseline=baseline)
        if op == k.BN_ROWS_BACKWARD:
            kw["dy"] = dya
        else:
            kw["epsilon"] = EPS
        k.bn_rows(op, xa, y, 0, **kw)
        results.append((np.array(y), outs))
    (yl, ol), (yf, of) = results
    for what, a, b in [("y", yl, yf)] + [(r, ol[r], of[r]) for r in ol]:
        a64, b64 = f64(a), f64(b)
        assert (np.isnan(a64) == np.isnan(b64)).all(), f"{name} {what}: NaN positions differ"
        inf = np.isinf(b64)
        assert (np.isinf(a64) == inf).all() and (a64[inf] == b64[inf]).all(), \
            f"{name} {what}: infinities differ"
        zero = b64 == 0
        assert (np.signbit(a64[zero]) == np.signbit(b64[zero])).all(), \
            f"{name} {what}: signed zeros differ"
        fin = np.isfinite(b64)
        assert_close(a64[fin], b64[fin], 1e-4, 1e-4, what=f"{name} {what}")
    # the float64 reference: a NaN in x makes NaN of its element (inference) or of its whole
    # channel (training's statistics; backward's sums)
    if op == k.BN_ROWS_INFERENCE:
        assert np.isnan(yl[1, 2, 3, 4]) and np.isfinite(yl[:, 2]).sum() == yl[:, 2].size - 1
    else:
        assert np.isnan(yl[:, 2]).all()
    if op != k.BN_ROWS_BACKWARD and act:
        finite = np.isfinite(f64(yl))
        assert (f64(yl)[finite] >= lo).all() and (f64(yl)[finite] <= hi).all()
        assert not np.signbit(yl[f64(yl) == 0]).any()          # RELU_FWD: no -0.0


# ------------------------------------------------------------------ errors
def test_channels_last_rows_refuse_a_pixel_overlap():
    # pixels 2 values apart with 3 channels: not channels-last, and not channels-first
    # either (the spatial elements are not one packed run): the wrapper says so
    buf = np.zeros(2 * 3 * 8 + 8, np.float32)
    x = np.lib.stride_tricks.as_strided(buf, (2, 3, 2, 4), (4 * 24, 4, 4 * 8, 4 * 2))
    y = np.zeros((2, 3, 2, 4), np.float32)
    v = np.ones(3, np.float32)
    with pytest.raises(ValueError, match="packed run"):
        k.bn_rows(k.BN_ROWS_INFERENCE, x, y, 0, scale=v, bias=v, mean=v, variance=v,
                  epsilon=EPS)


# ------------------------------------------------------------------ the engine's choice
def _drelu_graph(layout, dims):
    g = hd.Graph(name="bn_drelu_last")
    c = dims[1]
    x = g.tensor(dims=dims, layout=layout, name="x")
    dy = g.tensor(dims=dims, layout=layout, name="dy")
    cs = (1, c) + (1,) * (len(dims) - 2)
    s, b, m, iv = (g.tensor(dims=cs, name=n) for n in ("s", "b", "m", "iv"))
    ybn = g.batchnorm_inference(x, m, iv, s, b)
    g_ = g.pointwise(ybn, dy, mode=hd.PointwiseMode.RELU_BWD)
    dx, ds, db = g.batchnorm_backward(g_, x, s, mean=m, inv_variance=iv)
    for t in (dx, ds, db):
        t.set_output(True)
    return g, (x, dy, s, b, m, iv), (dx, ds, db)


def _training_graph(layout, dims, dtype):
    g = hd.Graph(name="bn_train_last", io_data_type=dtype, intermediate_data_type="float32",
                 compute_data_type="float32")
    cs = (1, dims[1]) + (1,) * (len(dims) - 2)
    x = g.tensor(dims=dims, layout=layout, name="x")
    s, b = (g.tensor(dims=cs, name=n, data_type="float32") for n in ("s", "b"))
    y, mean, inv, _, _ = g.batchnorm(x, s, b, epsilon=EPS)
    y.set_output(True)
    return g


@pytest.mark.parametrize("layout,dims", [("NHWC", (3, 20, 5, 5)), ("NDHWC", (2, 33, 2, 3, 3))])
def test_engine_takes_the_rows_for_channels_last_drelu_backward(layout, dims):
    if not ONEDNN_STATE.ok:
        pytest.skip(f"oneDNN does not load here: {ONEDNN_STATE.reason}")
    with hd.Device("cpu") as dev:
        g, (x, dy, s, b, m, iv), (dx, ds, db) = _drelu_graph(layout, dims)
        plan = dev.build_sync(g, engine="ONEDNN_ENGINE")
        assert str(plan.algorithm).startswith("bn_rows:"), plan.algorithm
        rng = np.random.default_rng(3)
        xa = (0.3 + rng.uniform(-1, 1, dims)).astype(np.float32)
        dya = rng.uniform(-1, 1, dims).astype(np.float32)
        cs = (1, dims[1]) + (1,) * (len(dims) - 2)
        sa, ba, ma = (rng.uniform(lo, hi, cs).astype(np.float32)
                      for lo, hi in ((-2, 2), (-1, 1), (-0.2, 0.5)))
        iva = rng.uniform(0.5, 2, cs).astype(np.float32)
        ybn = ref.bn_inference(xa, ma, iva, sa, ba)
        dya[np.abs(ybn) < 1e-4] = 0                   # off the mask's edge (see above)
        perm = (0,) + tuple(range(2, len(dims))) + (1,)
        inv_perm = tuple(np.argsort(perm))
        xl = np.ascontiguousarray(xa.transpose(perm)).transpose(inv_perm)
        dyl = np.ascontiguousarray(dya.transpose(perm)).transpose(inv_perm)
        outs = {dx: np.full(dims, np.nan, np.float32).transpose(perm).copy().transpose(inv_perm),
                ds: np.full(cs, np.nan, np.float32), db: np.full(cs, np.nan, np.float32)}
        plan.execute_sync({x: xl, dy: dyl, s: sa, b: ba, m: ma, iv: iva, **outs})
        want = ref.bn_backward(ref.relu_bwd(ybn, dya), xa, sa, ma, iva)
        assert_close(outs[dx], want["dx"], *tol("bn_backward", "float32"), what="dx")
        assert_close(outs[ds], want["dscale"], *tol("bn_backward", "float32"), what="dscale")
        assert_close(outs[db], want["dbias"], *tol("bn_backward", "float32"), what="dbias")


def _backward_graph(layout, dims):
    g = hd.Graph(name="bnb_last")
    x = g.tensor(dims=dims, layout=layout, name="x")
    dy = g.tensor(dims=dims, layout=layout, name="dy")
    cs = (1, dims[1]) + (1,) * (len(dims) - 2)
    s, m, iv = (g.tensor(dims=cs, name=n) for n in ("s", "m", "iv"))
    dx, ds, db = g.batchnorm_backward(dy, x, s, mean=m, inv_variance=iv)
    for t in (dx, ds, db):
        t.set_output(True)
    return g, (x, dy, s, None, m, iv), (dx, ds, db)


@pytest.mark.parametrize("x_scale", [1.0, 1e-19, 1e-20, 1e-30], ids=lambda v: f"{v:g}")
@pytest.mark.parametrize("drelu", [False, True], ids=["backward", "drelu_backward"])
def test_engine_channels_last_backward_of_a_tiny_spread(drelu, x_scale):
    """NHWC backward and inference -> DReLU -> backward of x spread over x_scale with its
    own statistics (inv_variance ~ 1 / x_scale): dx ~ 1 / x_scale is finite, while from
    1e-20 on dx's factor of x - mean, -scale * inv_variance**2 * dscale / M, is beyond
    FLT_MAX; the rows take xhat = (x - mean) * inv_variance first there (they once gave dx
    +-inf). Every other channel is spread over 1, so that one pass meets both kinds."""
    if not ONEDNN_STATE.ok:
        pytest.skip(f"oneDNN does not load here: {ONEDNN_STATE.reason}")
    dims = (3, 20, 5, 5)
    cs = (1, 20, 1, 1)
    rng = np.random.default_rng(int(-np.log10(x_scale)))
    spread = np.where(np.arange(20) % 2 == 0, x_scale, 1.0).reshape(cs)
    xa = (spread * rng.standard_normal(dims)).astype(np.float32)
    dya = rng.uniform(-1, 1, dims).astype(np.float32)
    st = ref.bn_training(xa, np.ones(20), np.zeros(20), 0.0)
    ma, iva = st["mean"].astype(np.float32), st["inv_variance"].astype(np.float32)
    sa = rng.uniform(0.5, 1.5, cs).astype(np.float32)
    ba = rng.uniform(-0.1, 0.1, cs).astype(np.float32)
    g_ = dya
    if drelu:
        ybn = ref.bn_inference(xa, ma, iva, sa, ba)
        dya[np.abs(ybn) < 1e-3] = 0                   # off the mask's edge
        g_ = ref.relu_bwd(ybn, dya)
    want = ref.bn_backward(g_, xa, sa, ma, iva)
    assert np.isfinite(want["dx"]).all()
    with hd.Device("cpu") as dev:
        g, (x, dy, s, b, m, iv), (dx, ds, db) = (_drelu_graph if drelu else _backward_graph)(
            "NHWC", dims)
        for knobs in ({}, {"global.benchmarking": 1}):     # the rows alone, timed too
            plan = dev.build_sync(g, engine="ONEDNN_ENGINE", knobs=knobs)
            names = [n for n, _ in plan.algorithm.trials]
            assert names == ["bn_rows:" + k.bn_rows_isa("float32")], names
            xl, dyl = laid_both(xa)[0], laid_both(dya)[0]
            outs = {dx: laid_both(np.full(dims, np.nan, np.float32))[0],
                    ds: np.full(cs, np.nan, np.float32), db: np.full(cs, np.nan, np.float32)}
            vals = {x: xl, dy: dyl, s: sa, m: ma, iv: iva, **outs}
            if drelu:
                vals[b] = ba
            plan.execute_sync(vals)
            what = f"x_scale {x_scale:g} drelu={drelu} {knobs}"
            assert np.isfinite(outs[dx]).all(), what
            t = tol("bn_backward", "float32")
            assert_close(outs[dx], want["dx"], *t, what=what + " dx")
            assert_close(outs[ds], want["dscale"], *t, what=what + " dscale")
            assert_close(outs[db], want["dbias"], *t, what=what + " dbias")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_engine_takes_the_rows_alone_for_channels_last_training(dtype):
    # oneDNN's own batchnorm (bnorm_jit, nspc_bnorm) sums in float32 and missed the FLOAT
    # tolerance on offset data; training offers the rows alone, benchmarking too
    if not ONEDNN_STATE.ok:
        pytest.skip(f"oneDNN does not load here: {ONEDNN_STATE.reason}")
    with hd.Device("cpu") as dev:
        plan = dev.build_sync(_training_graph("NHWC", (3, 20, 5, 5), dtype),
                              engine="ONEDNN_ENGINE")
        assert str(plan.algorithm) == "bn_rows:" + k.bn_rows_isa(dtype), plan.algorithm
        timed = dev.build_sync(_training_graph("NHWC", (3, 20, 5, 5), dtype),
                               engine="ONEDNN_ENGINE", knobs={"global.benchmarking": 1})
        names = [n for n, _ in timed.algorithm.trials]
        assert names == ["bn_rows:" + k.bn_rows_isa(dtype)], names


@pytest.mark.parametrize("n,hw", [(48, 7), (96, 7), (192, 14), (32, 28), (1, 56), (5, 3)])
def test_pivot_samples_spread_over_images_and_pixels(n, hw):
    """The training pivot's 48 samples of a job of N images of H x W pixels fall on many
    images and many positions within an image: samples evenly spaced in the flat pixel
    index all fell on pixel (0, 0) of every other image at N = 96 (a zero-padded
    convolution's corner as the pivot, which then needed pass 2; found by a break-it
    helper). Every sample is a pixel of the job, three groups of 16."""
    s_ = hw * hw
    r = n * s_
    groups = k.bn_pivot_samples(n, s_)
    assert [len(g) for g in groups] == [16, 16, 16]
    flat = [p for g in groups for p in g]
    assert all(0 <= p < r for p in flat), flat
    images = {p // s_ for p in flat}
    spots = {p % s_ for p in flat}
    assert len(images) >= min(n, 24), (n, hw, sorted(images))
    assert len(spots) >= min(s_, 24), (n, hw, sorted(spots))


@pytest.mark.parametrize("where", ["first_pixel", "sampled"])
@pytest.mark.parametrize("outlier", [1e4, 1e30])
@pytest.mark.parametrize("isa", ISAS)
def test_training_with_an_outlier_matches_float64(isa, outlier, where):
    """N(0, 1) data with one outlier at a channel's first pixel or at a pixel the pivot
    samples: the pivot, a median of three sampled means, is not moved by it (a pivot at
    the outlier made every other x - p about -outlier, and the float32 tile sums put the
    mean 1.8 % off at 1e30, 2e-4 at 1e4, and y 9.8e-3 off at scale 100)."""
    if isa not in k.bn_rows_builds():
        pytest.skip(f"this CPU runs {k.bn_rows_builds()}, not {isa}")
    shape = (1, 2, 100, 100)
    rng = np.random.default_rng(int(np.log10(outlier)))
    x, _, _ = placed(shape, np.dtype(np.float32), "packed", np.nan)
    x[...] = rng.standard_normal(shape)
    r = 0 if where == "first_pixel" else pivot_pixels(1, 100 * 100, 1)[3]
    x[0, :, r // 100, r % 100] = outlier
    scale, bias = np.full(2, 100.0, np.float32), np.zeros(2, np.float32)
    y, mean, _, want = _training(x, "float32", isa, scale, bias)
    m64 = want["mean"].reshape(-1)
    assert np.allclose(f64(mean), m64, rtol=1e-6, atol=0), (mean, m64)
    assert_close(y, want["y"], *tol("bn_training", "float32"), what=f"{isa} {outlier:g} y")
