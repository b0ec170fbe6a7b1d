"""Draw the performance page's plots from ``bench/results/*.json`` when the site is built.

Each plot is written to ``docs/_generated/`` (not committed) with matplotlib's Agg backend,
so the build needs no display, and a figure always shows the JSON committed beside the
code. A missing or malformed results file fails the build (``sphinx -W`` turns the
warning into an error) rather than leaving a stale picture.
"""
import json
import math
import pathlib

from sphinx.util import logging

RESULTS = pathlib.Path(__file__).resolve().parents[2] / "bench" / "results"
_log = logging.getLogger(__name__)

# (file, batch) pairs the conv and batchnorm plots read; see bench/results/README.md.
CONV_RUNS = (("h200_bench_gpu.json", 32), ("h200_bench_gpu_n256.json", 256))
HOST_RUN = "h200_bench_gpu_all.json"
# bench/bench_cpu.py runs (ONEDNN_ENGINE against PyTorch's CPU calls), by batch.
CPU_RUNS = (("cpu_bench_2026-12-06_final23_batch8.json", 8),
            ("cpu_bench_2026-12-06_final23_batch32.json", 32))


def _load(name):
    return json.loads((RESULTS / name).read_text())["results"]


def _gmean(values):
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _conv_plot(out, plt):
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    fig, axes = plt.subplots(1, len(CONV_RUNS), figsize=(11, 4.4), sharey=True,
                             layout="constrained")
    markers = {"fprop": "o", "dgrad": "s", "wgrad": "^"}
    for ax, (name, batch) in zip(axes, CONV_RUNS):
        rows = _load(name)["conv"]["rows"]
        groups = sorted({(r["dtype"], r["layout"]) for r in rows})
        for gi, (dtype, layout) in enumerate(groups):
            for di, direction in enumerate(("fprop", "dgrad", "wgrad")):
                ratios = [r["ratio"] for r in rows if (r["dtype"], r["layout"],
                                                       r["direction"]) == (dtype, layout, direction)]
                xs = [gi * 4 + di + (k - len(ratios) / 2) * 0.04 for k in range(len(ratios))]
                ax.scatter(xs, ratios, marker=markers[direction], s=18,
                           color=f"C{di}", label=direction if gi == 0 else None)
                if ratios:
                    gm = math.exp(sum(math.log(v) for v in ratios) / len(ratios))
                    ax.hlines(gm, gi * 4 + di - 0.35, gi * 4 + di + 0.35, color="k", lw=1.5)
        ax.axhline(1.0, color="grey", ls="--", lw=1)
        ax.set_xticks([gi * 4 + 1 for gi in range(len(groups))],
                      [f"{d} {l}" for d, l in groups])
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(ScalarFormatter())
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_yticks([0.25, 0.5, 1, 2, 4])
        ax.set_title(f"ResNet-50 convolutions, batch {batch}")
    axes[0].set_ylabel("our time / PyTorch's (lower is faster)")
    handles, labels = axes[0].get_legend_handles_labels()     # outside: no point hidden
    fig.legend(handles + [plt.Line2D([], [], color="k", lw=1.5)], labels + ["geometric mean"],
               loc="outside lower center", ncols=4, fontsize="small")
    fig.savefig(out / "perf_conv.png", dpi=90)
    plt.close(fig)


def _bn_plot(out, plt):
    fig, axes = plt.subplots(1, len(CONV_RUNS), figsize=(11, 4.8), sharey=True,
                             layout="constrained")
    kinds = (("train_ratio", "training"), ("infer_ratio", "inference"),
             ("backward_ratio", "backward"))
    for ax, (name, batch) in zip(axes, CONV_RUNS):
        rows = _load(name)["batchnorm"]["rows"]
        short = {"float16": "fp16", "float32": "fp32", "bfloat16": "bf16"}
        labels = [f"{short.get(r['dtype'], r['dtype'])} {r['layout']} "
                  f"{'x'.join(map(str, r['dims'][1:]))}" for r in rows]
        width = 0.27
        for ki, (key, label) in enumerate(kinds):
            ax.bar([i + (ki - 1) * width for i in range(len(rows))],
                   [r.get(key) or 0 for r in rows], width, label=label, color=f"C{ki}")
        ax.axhline(1.0, color="grey", ls="--", lw=1)
        ax.set_xticks(range(len(rows)), labels, fontsize="x-small", rotation=40,
                      ha="right", rotation_mode="anchor")
        ax.set_title(f"batchnorm, batch {batch}")
        ax.set_ylim(0, 1.4)                    # room for the legend above the bars
        ax.legend(loc="upper center", ncols=3, fontsize="small")
    axes[0].set_ylabel("our time / PyTorch's (lower is faster)")
    fig.savefig(out / "perf_batchnorm.png", dpi=90)
    plt.close(fig)


def _host_plot(out, plt):
    r = _load(HOST_RUN)
    sub, cap = r["submit"], r["capture"]
    bars = [("plan.submit\n(GpuArray)", sub["submit_us"]["GpuArray"], "ours"),
            ("plan.submit\n(torch tensor)", sub["submit_us"]["torch tensor"], "ours"),
            ("PyTorch conv\nlaunch", sub["torch_launch_us"], "torch"),
            ("step.submit\n(1 plan)", cap["one_plan"]["replay_host_us"], "ours"),
            ("torch graph\nreplay", cap["one_plan"]["torch_graph_replay_host_us"], "torch"),
            ("replayed step\nper plan (20)", cap["step"]["replay_host_us_per_plan"], "ours")]
    fig, ax = plt.subplots(figsize=(9, 3.4), layout="constrained")
    ax.bar(range(len(bars)), [b[1] for b in bars],
           color=["C0" if b[2] == "ours" else "C7" for b in bars])
    for i, b in enumerate(bars):
        ax.annotate(f"{b[1]:.1f}", (i, b[1]), ha="center", va="bottom", fontsize="small")
    ax.set_xticks(range(len(bars)), [b[0] for b in bars], fontsize="small")
    ax.set_ylabel("host µs per call")
    ax.set_title("host cost on the H200 machine (grey: PyTorch, same run)")
    fig.savefig(out / "perf_host.png", dpi=90)
    plt.close(fig)


def _cpu_plot(out, plt):
    """Per pattern, every case's ratio (dots) and their geometric mean (bar), per dtype."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    fig, axes = plt.subplots(1, len(CPU_RUNS), figsize=(11, 4.4), sharey=True,
                             layout="constrained")
    for ax, (name, batch) in zip(axes, CPU_RUNS):
        run = json.loads((RESULTS / name).read_text())
        cases, load = run["cases"], run["header"]["load_average_1_5_15"][0]
        patterns = list(dict.fromkeys(c["pattern"] for c in cases))
        for di, dtype in enumerate(("float32", "bfloat16")):
            for pi, pattern in enumerate(patterns):
                ratios = [c["ratio"] for c in cases
                          if (c["pattern"], c["dtype"]) == (pattern, dtype)]
                x0 = pi + (di - 0.5) * 0.36
                ax.scatter([x0 + (k - len(ratios) / 2) * 0.015 for k in range(len(ratios))],
                           ratios, s=10, color=f"C{di}",
                           label=dtype if pi == 0 else None)
                ax.hlines(_gmean(ratios), x0 - 0.15, x0 + 0.15, color="k", lw=1.5)
        ax.axhline(1.0, color="grey", ls="--", lw=1)
        ax.set_xticks(range(len(patterns)), [p.replace("_", " ") for p in patterns],
                      fontsize="x-small", rotation=35, ha="right", rotation_mode="anchor")
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_yticks([0.125, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64])
        ax.set_title(f"batch {batch} (1-min load average {load:.0f} on 2 cores)")
    axes[0].set_ylabel("our time / PyTorch's (lower is faster)")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles + [plt.Line2D([], [], color="k", lw=1.5)], labels + ["geometric mean"],
               loc="outside lower center", ncols=3, fontsize="small")
    fig.savefig(out / "perf_cpu.png", dpi=90)
    plt.close(fig)


def draw(app):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = pathlib.Path(app.srcdir) / "_generated"
    out.mkdir(exist_ok=True)
    for fn in (_conv_plot, _bn_plot, _host_plot, _cpu_plot):
        try:
            fn(out, plt)
        except (OSError, KeyError, IndexError, ValueError, TypeError, ZeroDivisionError) as exc:
            _log.warning("perf_plots: %s failed on %s: %s: %s", fn.__name__, RESULTS,
                         type(exc).__name__, exc)


def setup(app):
    app.connect("builder-inited", draw)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
