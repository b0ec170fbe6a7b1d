"""The README's examples run as written and compute the right thing (float64 references).

Every Python block of the README and of docs/ runs in tests/test_docs.py; here the
README's own blocks are also checked for what they compute.
"""
import pathlib
import re

import numpy as np

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def _block_after(heading):
    text = README.read_text()
    section = text[text.index(heading):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_readme_is_a_landing_page_of_at_most_200_lines():
    assert len(README.read_text().splitlines()) <= 200


def test_readme_example_runs_and_is_right(capsys):
    namespace = {}
    exec(compile(_block_after("## A plan on the CPU"), "README.md example", "exec"), namespace)
    printed = capsys.readouterr().out
    assert printed.startswith("CONV_FPROP_BIAS_RELU ")
    # Re-run the same plan on known data and compare with an independent reference.
    hd, g = namespace["hd"], namespace["g"]
    x, w, b, y = (namespace[k] for k in ("x", "w", "b", "y"))
    rng = np.random.default_rng(0)
    xa = rng.standard_normal((8, 56, 56, 64)).astype(np.float32)      # NHWC memory order
    wa = rng.standard_normal((64, 3, 3, 64)).astype(np.float32) / 24
    ba = rng.standard_normal((1, 64, 1, 1)).astype(np.float32)
    out = np.empty((8, 56, 56, 64), np.float32)
    with hd.Device("cpu") as dev:
        dev.build_sync(g).execute_sync({x: xa, w: wa, b: ba, y: out})
    xp = np.pad(xa.astype(np.float64), ((0, 0), (1, 1), (1, 1), (0, 0)))
    ref = np.zeros((8, 56, 56, 64))
    for i in range(3):
        for j in range(3):
            ref += xp[:, i:i + 56, j:j + 56, :] @ wa[:, i, j, :].T.astype(np.float64)
    ref = np.maximum(ref + ba.reshape(1, 1, 1, 64), 0)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


def test_batcher_example_serves_every_request_in_few_batches(capsys):
    exec(compile(_block_after("## Batching concurrent requests"), "README.md batcher",
                 "exec"), {})
    batches = int(capsys.readouterr().out.split()[0])
    assert 1 <= batches < 100          # coalesced: fewer executions than requests


def test_capture_example_replays_with_the_new_inputs(capsys):
    exec(compile(_block_after("## Capture and replay"), "README.md capture", "exec"), {})
    # 3x3 conv of a constant i over 8 channels with unit weights, away from the border.
    assert [float(v) for v in capsys.readouterr().out.split()] == [0.0, 72.0, 144.0]


def test_gpu_example_computes_the_same_on_the_cpu_device(capsys):
    """The GPU example runs "as on the CPU": on "cpu", with its own graph and buffers,
    it must print the engine the CPU ranks first for its graph (ONEDNN_ENGINE where oneDNN
    loads: HALF runs there through float32 primitives) and the value a float64 sum gives
    (64 channels x 9 taps of 1 * 1)."""
    import hipdnn_async as hd
    code = _block_after("## A GPU device").replace('"gpu:0"', '"cpu"')
    scope = {}
    exec(compile(code, "README.md GPU example on cpu", "exec"), scope)
    engine, value = capsys.readouterr().out.split()
    assert engine == hd.engines(scope["g"], "cpu")[0].name and float(value) == 64 * 9
