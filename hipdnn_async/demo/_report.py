"""What the demo shows: progress while training, the summary table, JSON, the figure."""
from __future__ import annotations

import json
import sys

import numpy as np

from .._figure import save_figure

__all__ = ["Progress", "summary", "write_json", "plot"]

_BAR = 30


class Progress:
    """Training progress: a redrawn bar on a terminal, one plain line per epoch otherwise.

    Parameters
    ----------
    stream : file, optional
        Where to write. Default ``sys.stdout``.
    enabled : bool, optional
        False writes nothing (``--quiet``).
    """

    def __init__(self, stream=None, *, enabled: bool = True):
        self.stream = sys.stdout if stream is None else stream
        self.enabled = enabled
        isatty = getattr(self.stream, "isatty", None)
        self.tty = bool(enabled and isatty is not None and isatty())

    def line(self, text: str) -> None:
        """One line of text (ends any bar in progress)."""
        if self.enabled:
            print(text, file=self.stream, flush=True)

    def step(self, epoch: int, i: int, steps: int, loss: float, acc: float) -> None:
        """After step `i` of `steps` in `epoch`: redraw the bar (terminal only)."""
        if not self.tty:
            return
        done = int(_BAR * i / steps)
        bar = "#" * done + "." * (_BAR - done)
        self.stream.write(f"\r  epoch {epoch:>2} [{bar}] {i:>3}/{steps} "
                          f"loss {loss:.4f} acc {acc:6.2%}")
        self.stream.flush()

    def epoch(self, rec: dict, epochs: int) -> None:
        """After an epoch: its figures on one line."""
        if not self.enabled:
            return
        text = (f"  epoch {rec['epoch']:>2}/{epochs}  loss {rec['loss']:.4f}  "
                f"train acc {rec['train_accuracy']:6.2%}  test acc "
                f"{rec['test_accuracy']:6.2%}  lr {rec['lr']:.4f}  {rec['seconds']:.2f} s")
        if self.tty:
            self.stream.write("\r" + " " * (len(text) + 40) + "\r")
        print(text, file=self.stream, flush=True)


def _pct(x: float) -> str:
    return f"{100.0 * x:.2f}%"


def _moved_on(ev: dict) -> str:
    """Which layers of (b) ran as CONV_FPROP with their bias moved on (none on the CPU)."""
    plain = [k for k, v in ev.get("folded_patterns", {}).items() if v == "CONV_FPROP"]
    return f" ({', '.join(plain)}: conv, bias moved on)" if plain else ""


def summary(r: dict) -> str:
    """The summary table of a run's results (the dict written by ``--json``)."""
    cfg, ev, sv, gc = r["config"], r["evaluation"], r["serving"], r["gradient_check"]
    last = r["history"][-1] if r["history"] else None
    rows = [
        ("device", f"{r['device']}  (engine {', '.join(sorted(set(r['engines'].values())))})"),
        ("data", f"sklearn digits: {r['data']['train']} train / {r['data']['test']} test "
                 f"images, 8x8, seed {cfg['seed']}"),
        ("gradient check", f"{'ok' if gc['ok'] else 'FAILED'}: {gc['checks']} directional "
                           f"derivatives on a batch of {gc['batch']}, max rel err "
                           f"{gc['max_rel_err']:.1e}"),
        ("training", f"{cfg['epochs']} epochs x {r['steps_per_epoch']} steps of "
                     f"{cfg['batch_size']}, {r['timings']['train_s']:.1f} s"
                     + (f", final loss {last['loss']:.4f}, train acc "
                        f"{_pct(last['train_accuracy'])}" if last else "")),
        ("benchmarking", (f"on: {r['benchmarking']['benchmarked']} plans tuned, "
                          f"{r['benchmarking']['perfdb_hits']} from the perf db")
         if cfg["benchmarking"] else "off"),
        ("test acc (a)", f"{_pct(ev['accuracy']['bn_inference'])}  conv + batchnorm "
                         "inference with variance"),
        ("test acc (b)", f"{_pct(ev['accuracy']['folded'])}  batchnorm folded: "
                         "conv + bias + ReLU" + _moved_on(ev)),
        ("(a) vs (b)", f"{'identical' if ev['predictions_identical'] else 'DIFFERENT'} "
                       f"predictions ({ev['mismatches']} differ), max logit diff "
                       f"{ev['max_logit_diff']:.1e}"),
        ("serving", f"{sv['requests']} requests from {sv['clients']} concurrent clients in "
                    f"{sv['seconds']:.2f} s: {sv['throughput']:.0f} images/s"),
        ("latency", f"p50 {sv['latency_ms']['p50']:.2f} ms  p90 "
                    f"{sv['latency_ms']['p90']:.2f} ms  p99 {sv['latency_ms']['p99']:.2f} ms"),
        ("batching", f"mean batch fill {_pct(sv['mean_batch_fill'])}, mean batch "
                     f"{sv['mean_batch_size']:.1f} rows over {sv['batches']} batches "
                     f"({len(sv['stages'])} layer batchers)"),
        ("served vs batch", "all predictions equal" if sv["predictions_match"]
         else f"{sv['mismatches']} predictions DIFFER"),
        ("total", f"{r['timings']['total_s']:.1f} s  ({'ok' if r['ok'] else 'FAILED: ' + '; '.join(r['failures'])})"),
    ]
    width = max(len(k) for k, _ in rows)
    out = ["", "hipdnn-async demo: a CNN on handwritten digits, every conv and batchnorm a plan",
           ""]
    out += [f"  {k:<{width}}  {v}" for k, v in rows]
    out += ["", f"  {'pattern':<28} {'plans':>5} {'build ms':>9} {'runs':>6} {'run ms':>9}"]
    for name, s in sorted(r["plan_stats"].items()):
        out.append(f"  {name:<28} {s['plans']:>5} {s['build_ms']:>9.1f} "
                   f"{s['executions']:>6} {s['exec_ms']:>9.1f}")
    return "\n".join(out) + "\n"


def write_json(r: dict, path: str) -> None:
    """Write every figure of a run as JSON."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump(r, f, indent=1)
        f.write("\n")


def plot(r: dict, path: str):
    """Save the figure: loss and accuracy per epoch, and the serving latency histogram
    with its p50 / p90 / p99 marked and labelled; return the matplotlib Figure."""
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib.figure import Figure
    from matplotlib.ticker import MultipleLocator

    fig = Figure(figsize=(13, 4.2), layout="constrained")
    ax_loss, ax_acc, ax_lat = fig.subplots(1, 3)
    epochs = [h["epoch"] for h in r["history"]]
    ax_loss.plot(epochs, [h["loss"] for h in r["history"]], "o-")
    ax_loss.set(title="training loss", xlabel="epoch", ylabel="cross-entropy", yscale="log")
    ax_acc.plot(epochs, [h["train_accuracy"] for h in r["history"]], "o-", label="train")
    ax_acc.plot(epochs, [h["test_accuracy"] for h in r["history"]], "s-", label="test")
    ax_acc.set(title="accuracy", xlabel="epoch", ylabel="fraction correct")
    ax_acc.legend()
    for ax in (ax_loss, ax_acc):            # whole epochs only (1 epoch: no 0.96 ... 1.04)
        ax.set_xlim(min(epochs) - 0.5, max(epochs) + 0.5)
        ax.xaxis.set_major_locator(MultipleLocator(max(1, round(len(epochs) / 8))))
    sv = r["serving"]
    ax_lat.hist(np.asarray(sv["latencies_ms"]), bins=40, color="tab:blue", alpha=0.8)
    for q, style, colour in (("p50", "--", "tab:green"), ("p90", "-.", "tab:orange"),
                             ("p99", ":", "tab:red")):
        v = sv["latency_ms"][q]
        ax_lat.axvline(v, color=colour, ls=style, lw=1.5, label=f"{q} {v:.1f} ms")
    ax_lat.legend(loc="upper right", fontsize="small")
    # Two lines: the numbers grow (clients, images/s) and a one-line title outgrew the axes.
    ax_lat.set(title=f"serving latency\n{sv['clients']} clients, "
                     f"{sv['throughput']:,.0f} images/s",
               xlabel="ms per request", ylabel="requests")
    save_figure(fig, path, dpi=100)
    return fig
