"""The README's example runs as written (its result checked against a float64 reference)."""
import pathlib
import re

import numpy as np

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def test_readme_example_runs_and_is_right(capsys):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    namespace = {}
    exec(compile(blocks[0], "README.md example", "exec"), namespace)
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


def test_reliability_section_names_tests_that_exist():
    """Every test the README's reliability section names is a test function of that file
    (so a promise cannot outlive the test that proves it)."""
    text = README.read_text()
    section = text[text.index("## Reliability"):]
    section = section[:section.index("\n## ", 1)]
    root = README.parent
    named, current = [], None
    for ref in re.findall(r"`((?:tests/[\w/]+\.py)?::\w+)`", section):
        path, _, name = ref.partition("::")
        current = path or current
        named.append((current, name))
    assert len(named) >= 25, named
    for path, name in named:
        source = (root / path).read_text()
        assert re.search(rf"^(async )?def {name}\(", source, re.M), f"{path}::{name} is not a test"


def _block_after(heading):
    text = README.read_text()
    section = text[text.index(heading):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_gpu_section_snippet_runs_on_the_cpu_device_with_the_example_graph():
    """The "GPU devices (cuDNN)" snippet says it takes "the same graphs as on the CPU":
    run it on "cpu" (DeviceArrays stand in for GpuArrays) with the Example's graph, so its
    variant pack keys and buffer shapes must be those of that graph; its result is checked
    against a float64 reference."""
    import textwrap

    import anyio

    namespace = {}
    example = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)[0]
    exec(compile(example.replace("anyio.run(main)", ""), "README.md example", "exec"),
         namespace)
    snippet = _block_after("## GPU devices (cuDNN)").replace('"cuda:0"', '"cpu"')
    rng = np.random.default_rng(1)
    xs = rng.standard_normal((8, 56, 56, 64)).astype(np.float32)      # NHWC memory order
    ws = (rng.standard_normal((64, 3, 3, 64)) / 24).astype(np.float32)
    namespace.update(xs=xs, ws=ws)
    exec(compile("async def _snippet():\n" + textwrap.indent(snippet, "    ")
                 + "    return out\n", "README.md GPU snippet", "exec"), namespace)
    out = anyio.run(namespace["_snippet"])
    xp = np.pad(xs.astype(np.float64), ((0, 0), (1, 1), (1, 1), (0, 0)))
    ref = np.zeros((8, 56, 56, 64))
    for i in range(3):
        for j in range(3):
            ref += xp[:, i:i + 56, j:j + 56, :] @ ws[:, i, j, :].T.astype(np.float64)
    ref = np.maximum(ref, 0).transpose(0, 3, 1, 2)       # bias 0; out is in logical dims
    assert out.shape == (8, 64, 56, 56)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


def test_multi_gpu_snippet_names_constants_of_the_example_graph():
    """The "Several GPUs" snippet's batcher constants must be inputs of the Example's graph
    (a wrong name is a GraphError at the batcher's start)."""
    namespace = {}
    example = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)[0]
    exec(compile(example.replace("anyio.run(main)", ""), "README.md example", "exec"),
         namespace)
    snippet = _block_after("## Several GPUs in one process")
    keys = re.findall(r'"(\w+)":', re.search(r"constants=\{(.*?)\}", snippet).group(1))
    inputs = {t.name for t in (namespace["x"], namespace["w"], namespace["b"])}
    assert keys and set(keys) <= inputs - {"x"}, (keys, inputs)
