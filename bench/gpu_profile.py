"""Where the host time of one GPU execution goes (a developer's probe, not a benchmark):
raw cuDNN call, event record, and the full ``plan.submit`` path, with a cProfile of the
latter. Run on a GPU machine: ``python bench/gpu_profile.py``."""
import cProfile
import pstats
import time

import hipdnn_async as hd
from hipdnn_async.runtime import _cudnn, _gpu


def per_call(fn, n=2000):
    for _ in range(50):
        fn()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n * 1e6


def main():
    f32 = hd.DataType.FLOAT
    g = hd.Graph(name="tiny", io_data_type=f32, intermediate_data_type=f32, compute_data_type=f32)
    x = g.tensor(dims=(1, 8, 8, 8), name="x")
    w = g.tensor(dims=(8, 8, 3, 3), name="w")
    g.conv_fprop(x, w, padding=(1, 1)).set_output(True).set_name("y")
    with hd.Device("cuda:0", streams=1, max_inflight=100000) as dev:
        plan = dev.build_sync(g)
        vp = {"x": dev.empty((1, 8, 8, 8), "float32"), "w": dev.empty((8, 8, 3, 3), "float32"),
              "y": dev.empty((1, 8, 8, 8), "float32")}
        pp = plan._pplan
        s = pp.setup
        rt = _gpu.runtime("cuda")
        stream = rt.stream_create()
        h = _cudnn.create()
        _cudnn.set_stream(h, stream)
        a, b, c = (vp[r].ptr for r in ("x", "w", "y"))
        ad, bd, cd = s.descs

        def raw():
            _cudnn.convolution(0, h, ad.ptr, a, bd.ptr, b, s.conv.ptr, pp.algo, 0, 0, cd.ptr, c)
        print(f"raw cudnnConvolutionForward      {per_call(raw):8.1f} us")
        rt.stream_synchronize(stream)
        ev = rt.event_create()
        print(f"event_record                     {per_call(lambda: rt.event_record(ev, stream)):8.1f} us")
        print(f"set_device                       {per_call(lambda: rt.set_device(0)):8.1f} us")
        rt.stream_synchronize(stream)
        binds = plan._bind
        print(f"ExecutionPlan._bind              {per_call(lambda: binds(vp, None)):8.1f} us")
        handles = []
        t = per_call(lambda: handles.append(plan.submit(vp)), n=3000)
        print(f"plan.submit (no parking)         {t:8.1f} us")
        for hh in handles:
            hh.result()
        handles.clear()
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(3000):
            handles.append(plan.submit(vp))
        prof.disable()
        for hh in handles:
            hh.result()
        pstats.Stats(prof).sort_stats("tottime").print_stats(18)


if __name__ == "__main__":
    main()


def lists():
    """Print cuDNN's raw _v7 lists for a few problems that need care (1x1 / depthwise wgrad)."""
    from hipdnn_async.patterns import match
    from hipdnn_async.providers.cudnn._conv import conv_setup
    cases = {"1x1 fp32 NCHW wgrad": ((32, 64, 56, 56), (64, 64, 1, 1), "float32", "NCHW", 0),
             "3x3 fp32 NCHW wgrad": ((32, 64, 14, 14), (64, 64, 3, 3), "float32", "NCHW", 1),
             "depthwise fp16 NHWC wgrad": ((2, 8, 10, 10), (8, 1, 3, 3), "float16", "NHWC", 1)}
    h = _cudnn.create()
    for name, (xd, wd, dt, layout, pad) in cases.items():
        g = hd.Graph(io_data_type=dt, intermediate_data_type="float32", compute_data_type="float32")
        dy_dims = (xd[0], wd[0], xd[2] + 2 * pad - wd[2] + 1, xd[3] + 2 * pad - wd[3] + 1)
        dy = g.tensor(dims=dy_dims, layout=layout, name="dy")
        x = g.tensor(dims=xd, layout=layout, name="x")
        dw = g.conv_wgrad(dy, x, dw_dims=wd, padding=(pad, pad))
        dw.set_output(True).set_strides(hd.strides_for(wd, layout))
        s = conv_setup(match(g), name)
        a, b, c = (d.ptr for d in s.descs)
        print(name)
        for row in _cudnn.get_algorithms(2, h, a, b, s.conv.ptr, c):
            try:
                ws = _cudnn.workspace_size(2, h, a, b, s.conv.ptr, c, row[0])
            except _cudnn.CudnnError as exc:
                ws = exc.status_name
            print("   algo %s status %s time %.3f mem %s det %s math %s | ws query: %s" % (
                s.name(row[0]), row[1], row[2], row[3], row[4], row[5], ws))


if __name__ == "__main__":
    lists()
