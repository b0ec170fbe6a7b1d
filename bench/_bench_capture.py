"""The ``submit`` and ``capture`` sections of bench/bench_gpu.py (issue 11 items 2 and 3).

``submit``: host µs per ``plan.submit`` of one ResNet-50 3x3 convolution (res2, fp16
NHWC, batch N) with GpuArray, torch-tensor and (where CuPy is installed) CuPy buffers,
as the median over rounds of (host time of 20 back-to-back submissions) / 20, and the
wall time of 20 back-to-back executions plus one synchronize; the anchor is the same
convolution launched by torch (``F.conv2d`` channels-last, cudnn.benchmark on), timed
the same way in this run. Targets: <= 10 µs (GpuArray), <= 12 µs (tensors).

``capture``: the same convolution captured as a one-plan step, and a ResNet-50-like
training step of 20 plans (4 layers of conv -> batchnorm training + ReLU forward and
batchnorm-inference + DReLU + batchnorm backward -> dgrad -> wgrad backward, fp16 NHWC,
64 channels 56x56, batch N) captured as one graph: host µs per ``step.submit()``
(one replay), per plan amortised, and GPU ms per replay (CUDA events on our stream),
against torch.cuda.CUDAGraph replays of the same convolution and of the same step
written for PyTorch (autograd over conv -> batch_norm -> relu, four layers), and the
same step in PyTorch eager. Targets: <= 5 µs per replay of one plan, <= 3 µs per plan
amortised over the 20-plan step.
"""
from __future__ import annotations

import statistics
import time

__all__ = ["bench_submit", "bench_capture", "interleaved"]

ROUNDS = 30
BATCH = 20


def _median_host(fn, rounds=ROUNDS, batch=BATCH, finish=None):
    """(median host µs per call over rounds of `batch` back-to-back calls, median wall µs
    per call including `finish()` after each round)."""
    host, wall = [], []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(batch):
            fn()
        t1 = time.perf_counter()
        if finish is not None:
            finish()
        t2 = time.perf_counter()
        host.append((t1 - t0) / batch * 1e6)
        wall.append((t2 - t0) / batch * 1e6)
    return statistics.median(host), statistics.median(wall)


def interleaved(cases: dict, rounds: int, one_round) -> dict:
    """name -> the medians of ``one_round(fn, finish)``'s figures (a tuple) over
    ``rounds``, for every ``name -> (fn, finish)`` of ``cases``, their rounds interleaved
    (round r of each case, then round r + 1 of each): a slow phase of the machine then
    falls on every case alike, so their ratios are the steadier figures."""
    samples = {k: [] for k in cases}
    for _ in range(rounds):
        for k, (fn, finish) in cases.items():
            samples[k].append(one_round(fn, finish))
    return {k: tuple(statistics.median(col) for col in zip(*v)) for k, v in samples.items()}


def _interleaved_host(cases: dict, rounds=ROUNDS, batch=BATCH) -> dict:
    """``_median_host`` of every ``name -> (fn, finish)``, rounds interleaved."""
    return interleaved(cases, rounds,
                       lambda fn, finish: _median_host(fn, rounds=1, batch=batch, finish=finish))


def _conv3x3(hd, n):
    f32 = hd.DataType.FLOAT
    g = hd.Graph(name="bench_res2_3x3", io_data_type="float16", intermediate_data_type=f32,
                 compute_data_type=f32)
    x = g.tensor(dims=(n, 64, 56, 56), layout="NHWC", name="x")
    w = g.tensor(dims=(64, 64, 3, 3), layout="NHWC", name="w")
    y = g.conv_fprop(x, w, padding=1).set_output(True).set_name("y")
    return g, x, w, y


def _torch_t(torch, dims, scale=1.0):
    return (torch.randn(dims, device="cuda") * scale).half().contiguous(
        memory_format=torch.channels_last)


def _gpu(torch, dev, t):
    """A GpuArray of our device with t's values (copied on torch's stream, then waited for:
    our streams do not order after torch's)."""
    arr = dev.empty(tuple(t.shape), "float16", layout="NHWC")
    torch.as_tensor(arr, device="cuda").copy_(t)
    torch.cuda.synchronize()
    return arr


async def bench_submit(hd, torch, dev, args, table, f):
    """The ``submit`` section (module docstring)."""
    n = args.batch
    g, x, w, y = _conv3x3(hd, n)
    plan = await dev.build(g)
    xt, wt, yt = _torch_t(torch, x.dims), _torch_t(torch, w.dims, 0.05), _torch_t(torch, y.dims)
    torch.cuda.synchronize()
    packs = {"GpuArray": {x: _gpu(torch, dev, xt), w: _gpu(torch, dev, wt),
                          y: _gpu(torch, dev, yt)},
             "torch tensor": {x: xt, w: wt, y: yt}}
    try:
        import cupy
        packs["CuPy array"] = {t: cupy.asarray(a) for t, a in packs["GpuArray"].items()}
    except Exception:  # noqa: BLE001 - CuPy is optional here
        pass
    out = {"plan": {"engine": plan.engine.name, "algorithm": str(plan.algorithm),
                    "reason": getattr(plan.algorithm, "reason", "")}, "submit_us": {},
           "wall_20_plus_sync_us": {}}
    sync = dev._pool.synchronize_blocking
    cases = {}
    for kind, vp in packs.items():
        for _ in range(5):
            plan.execute_sync(vp, stream=0)
        cases[kind] = (lambda vp=vp: plan.submit(vp, stream=0), sync)
    # anchor: torch launching the same convolution (cudnn.benchmark on, as in conv), its
    # rounds interleaved with ours
    torch.backends.cudnn.benchmark = True
    conv = torch.nn.functional.conv2d
    for _ in range(10):
        conv(xt, wt, padding=1)
    torch.cuda.synchronize()
    cases["torch"] = (lambda: conv(xt, wt, padding=1), torch.cuda.synchronize)
    timed = _interleaved_host(cases)
    for kind in packs:
        out["submit_us"][kind], out["wall_20_plus_sync_us"][kind] = timed[kind]
    host, wall = timed["torch"]
    out["torch_launch_us"], out["torch_wall_20_plus_sync_us"] = host, wall
    out["ratio_submit_over_torch"] = {k: v / host for k, v in out["submit_us"].items()}
    out["ratio_wall_over_torch"] = {k: v / wall for k, v in out["wall_20_plus_sync_us"].items()}
    print(f"\n== submit (res2 3x3 fp16 NHWC N={n}; {plan.engine.name} {plan.algorithm}; "
          f"host us per call, median of {ROUNDS} rounds of {BATCH})")
    rows = [[f"plan.submit ({k})", f(v, 2), f(out["wall_20_plus_sync_us"][k], 2),
             f(out["ratio_submit_over_torch"][k], 2)] for k, v in out["submit_us"].items()]
    rows.append(["torch conv2d launch (anchor)", f(host, 2), f(wall, 2), "1.00"])
    table(rows, ["", "host us", "wall us (20 + sync)", "host / torch"])
    return out


# ------------------------------------------------------------------ the training step
def _step_graphs(hd, n, c=64, hw=56):
    """The five plans' graphs of one layer: fprop, BN training + ReLU, BN inference +
    DReLU + BN backward, dgrad, wgrad (fp16 NHWC, FLOAT statistics)."""
    f32 = hd.DataType.FLOAT
    dims, wd, cd = (n, c, hw, hw), (c, c, 3, 3), (1, c, 1, 1)

    def graph(name):
        return hd.Graph(name=name, io_data_type="float16", intermediate_data_type=f32,
                        compute_data_type=f32)

    fp = graph("step_fprop")
    fx, fw = fp.tensor(dims=dims, layout="NHWC", name="x"), fp.tensor(dims=wd, layout="NHWC", name="w")
    fp.conv_fprop(fx, fw, padding=1).set_output(True).set_name("y")
    bn = graph("step_bn_relu")
    bx = bn.tensor(dims=dims, layout="NHWC", name="x")
    bs = bn.tensor(dims=cd, data_type=f32, name="scale")
    bb = bn.tensor(dims=cd, data_type=f32, name="bias")
    y, mean, inv, _, _ = bn.batchnorm(bx, bs, bb, epsilon=1e-5)
    bn.pointwise(y, mode=hd.PointwiseMode.RELU_FWD).set_output(True).set_name("r")
    mean.set_output(True).set_name("mean")
    inv.set_output(True).set_name("inv")
    bk = graph("step_bn_bwd")
    kx, kdy = bk.tensor(dims=dims, layout="NHWC", name="x"), bk.tensor(dims=dims, layout="NHWC", name="dy")
    km, ki = bk.tensor(dims=cd, data_type=f32, name="mean"), bk.tensor(dims=cd, data_type=f32, name="inv")
    ks, kb = bk.tensor(dims=cd, data_type=f32, name="scale"), bk.tensor(dims=cd, data_type=f32, name="bias")
    ybn = bk.batchnorm_inference(kx, km, ki, ks, kb)
    gy = bk.pointwise(ybn, kdy, mode=hd.PointwiseMode.RELU_BWD)
    dx, dsc, dbi = bk.batchnorm_backward(gy, kx, ks, mean=km, inv_variance=ki)
    dx.set_output(True).set_name("dx")
    dsc.set_output(True).set_name("dscale").set_data_type(f32)
    dbi.set_output(True).set_name("dbias").set_data_type(f32)
    dg = graph("step_dgrad")
    gdy, gw = dg.tensor(dims=dims, layout="NHWC", name="dy"), dg.tensor(dims=wd, layout="NHWC", name="w")
    dg.conv_dgrad(gdy, gw, dx_dims=dims, padding=1).set_output(True).set_name("dx")
    wg = graph("step_wgrad")
    wdy, wx = wg.tensor(dims=dims, layout="NHWC", name="dy"), wg.tensor(dims=dims, layout="NHWC", name="x")
    wg.conv_wgrad(wdy, wx, dw_dims=wd, padding=1).set_output(True).set_name("dw")
    return fp, bn, bk, dg, wg


class _Step:
    """Buffers and variant packs of a `layers`-layer training step (5 plans per layer)."""

    def __init__(self, hd, torch, dev, plans, n, layers=4, c=64, hw=56):
        fp, bn, bk, dg, wg = plans
        dims, wd, cd = (n, c, hw, hw), (c, c, 3, 3), (1, c, 1, 1)

        def act():
            return _gpu(torch, dev, _torch_t(torch, dims))

        def chan(v=None):
            t = torch.full(cd, 1.0, device="cuda") if v is None else v
            arr = dev.empty(cd, "float32")
            torch.as_tensor(arr, device="cuda").copy_(t)
            return arr

        self.packs = []
        a = [act()]                           # a[0]: the input
        conv_out, means, invs, ws = [], [], [], []
        scales = [chan() for _ in range(layers)]
        biases = [chan(torch.zeros(cd, device="cuda")) for _ in range(layers)]
        for i in range(layers):               # forward
            ws.append(_gpu(torch, dev, _torch_t(torch, wd, 0.05)))
            conv_out.append(act())
            a.append(act())
            means.append(chan())
            invs.append(chan())
            self.packs.append((plans[0], {"x": a[i], "w": ws[i], "y": conv_out[i]}))
            self.packs.append((plans[1], {"x": conv_out[i], "scale": scales[i],
                                          "bias": biases[i], "r": a[i + 1],
                                          "mean": means[i], "inv": invs[i]}))
        da = act()                            # d loss / d output
        for i in reversed(range(layers)):     # backward
            dc, da_prev, dw = act(), act(), _gpu(torch, dev, _torch_t(torch, wd))
            self.packs.append((plans[2], {"x": conv_out[i], "dy": da, "mean": means[i],
                                          "inv": invs[i], "scale": scales[i],
                                          "bias": biases[i], "dx": dc, "dscale": chan(),
                                          "dbias": chan()}))
            self.packs.append((plans[3], {"dy": dc, "w": ws[i], "dx": da_prev}))
            self.packs.append((plans[4], {"dy": dc, "x": a[i], "dw": dw}))
            da = da_prev
        torch.cuda.synchronize()

    def submit_all(self, stream=0):
        for plan, vp in self.packs:
            plan.submit(vp, stream=stream)


def _torch_step(torch, n, layers=4, c=64, hw=56):
    """(run(), static input) of the same step in PyTorch: autograd through conv ->
    batch_norm (training) -> relu, `layers` times, backward from a fixed gradient."""
    nn = torch.nn
    mods = []
    for _ in range(layers):
        mods += [nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c), nn.ReLU()]
    model = nn.Sequential(*mods).cuda().half().to(memory_format=torch.channels_last)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.float()
    x = _torch_t(torch, (n, c, hw, hw)).requires_grad_(False)
    dy = _torch_t(torch, (n, c, hw, hw))

    def run():
        out = model(x)
        out.backward(dy)
    return run, model


async def bench_capture(hd, torch, dev, args, table, f, our_stream):
    """The ``capture`` section (module docstring)."""
    n = args.batch
    out = {}
    sync = dev._pool.synchronize_blocking
    ext = our_stream(torch, dev, 0)
    torch.backends.cudnn.benchmark = True
    # ---- one plan
    g, x, w, y = _conv3x3(hd, n)
    plan = await dev.build(g)
    xt, wt, yt = _torch_t(torch, x.dims), _torch_t(torch, w.dims, 0.05), _torch_t(torch, y.dims)
    vp = {x: _gpu(torch, dev, xt), w: _gpu(torch, dev, wt), y: _gpu(torch, dev, yt)}
    async with dev.capture(stream=0) as step1:
        plan.submit(vp)
    for _ in range(5):
        await step1.replay()
    host1, wall1 = _median_host(step1.submit, finish=sync)
    gpu1 = _gpu_ms(torch, ext, step1.submit, sync)
    gpu_plain = _gpu_ms(torch, ext, lambda: plan.submit(vp, stream=0), sync)
    conv = torch.nn.functional.conv2d
    for _ in range(5):
        conv(xt, wt, padding=1)
    tg = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            conv(xt, wt, padding=1)
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(tg):
        conv(xt, wt, padding=1)
    t_host1, t_wall1 = _median_host(tg.replay, finish=torch.cuda.synchronize)
    t_gpu1 = _torch_gpu_ms(torch, tg.replay)
    out["one_plan"] = {"replay_host_us": host1, "replay_wall_us": wall1, "replay_gpu_ms": gpu1,
                       "plain_submit_gpu_ms": gpu_plain, "torch_graph_replay_host_us": t_host1,
                       "torch_graph_replay_wall_us": t_wall1, "torch_graph_replay_gpu_ms": t_gpu1,
                       "ratio_host": host1 / t_host1, "ratio_gpu": gpu1 / t_gpu1}
    step1.close()
    # ---- the 20-plan training step
    graphs = _step_graphs(hd, n)
    plans = [await dev.build(gr) for gr in graphs]
    st = _Step(hd, torch, dev, plans, n)
    for _ in range(3):
        st.submit_all()
    sync()
    eager_host, eager_wall = _median_host(st.submit_all, rounds=10, batch=1, finish=sync)
    eager_gpu = _gpu_ms(torch, ext, st.submit_all, sync, reps=2)   # 40 items: no parking
    async with dev.capture(stream=0) as step:
        st.submit_all()
    for _ in range(3):
        await step.replay()
    host20, wall20 = _median_host(step.submit, finish=sync)
    gpu20 = _gpu_ms(torch, ext, step.submit, sync)
    run, _model = _torch_step(torch, n)
    for _ in range(3):
        run()
    torch.cuda.synchronize()
    te_host, te_wall = _median_host(run, rounds=10, batch=1, finish=torch.cuda.synchronize)
    te_gpu = _torch_gpu_ms(torch, run, reps=5)
    sg = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            run()
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(sg):
        run()
    tg_host, tg_wall = _median_host(sg.replay, finish=torch.cuda.synchronize)
    tg_gpu = _torch_gpu_ms(torch, sg.replay)
    plans_n = len(st.packs)
    out["step"] = {"plans": plans_n, "eager_host_us": eager_host, "eager_wall_us": eager_wall,
                   "eager_gpu_ms": eager_gpu, "replay_host_us": host20,
                   "replay_host_us_per_plan": host20 / plans_n, "replay_wall_us": wall20,
                   "replay_gpu_ms": gpu20, "torch_eager_host_us": te_host,
                   "torch_eager_wall_us": te_wall, "torch_eager_gpu_ms": te_gpu,
                   "torch_graph_replay_host_us": tg_host, "torch_graph_replay_wall_us": tg_wall,
                   "torch_graph_replay_gpu_ms": tg_gpu,
                   "ratio_replay_gpu_over_torch_graph": gpu20 / tg_gpu,
                   "ratio_replay_wall_over_torch_graph": wall20 / tg_wall,
                   "ratio_replay_wall_over_torch_eager": wall20 / te_wall}
    step.close()
    o1, o2 = out["one_plan"], out["step"]
    print(f"\n== capture (res2 3x3 fp16 NHWC N={n}; a {plans_n}-plan training step of 4 "
          "conv/BN/ReLU layers forward and backward)")
    table([["1 plan: step.submit (host us)", f(host1, 2), f(t_host1, 2), f(host1 / t_host1, 2)],
           ["1 plan: replay GPU ms", f(gpu1, 4), f(t_gpu1, 4), f(gpu1 / t_gpu1, 2)],
           ["1 plan: plain submit GPU ms", f(gpu_plain, 4), "-", "-"],
           [f"step: replay host us ({host20 / plans_n:.2f} per plan)", f(host20, 2),
            f(tg_host, 2), f(host20 / tg_host, 2)],
           ["step: replay wall us (20 + sync)", f(wall20, 1), f(tg_wall, 1),
            f(wall20 / tg_wall, 2)],
           ["step: replay GPU ms", f(gpu20, 4), f(tg_gpu, 4), f(gpu20 / tg_gpu, 2)],
           ["step: eager submit host us", f(eager_host, 1), f(te_host, 1),
            f(eager_host / te_host, 2)],
           ["step: eager wall us", f(eager_wall, 1), f(te_wall, 1), f(eager_wall / te_wall, 2)],
           ["step: eager GPU ms", f(eager_gpu, 4), f(te_gpu, 4), f(eager_gpu / te_gpu, 2)]],
          ["", "hipdnn_async", "torch (anchor)", "ratio"])
    return out


def _gpu_ms(torch, ext, launch, sync, reps=BATCH):
    """GPU ms per launch on our stream (CUDA events), or wall ms where the stream is not
    reachable."""
    sync()
    if ext is None:
        t0 = time.perf_counter()
        for _ in range(reps):
            launch()
        sync()
        return (time.perf_counter() - t0) * 1e3 / reps
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record(ext)
    for _ in range(reps):
        launch()
    end.record(ext)
    sync()
    end.synchronize()
    return start.elapsed_time(end) / reps


def _torch_gpu_ms(torch, launch, reps=BATCH):
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        launch()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / reps
