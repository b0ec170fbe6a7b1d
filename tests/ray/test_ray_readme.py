"""The Ray guide's example (docs/guide/ray.md) runs as written on the local cluster, its
results equal the local ``plan.execute`` evaluation of the same saved model, and Ray logs
no deprecation for the arguments it passes (Ray 2.60 logs ``map_batches(concurrency=)``
as deprecated, through its logger rather than as a warning)."""
import pathlib
import re
import shutil

import numpy as np
import pytest
from ray_support import ATOL, RTOL, local_logits, ray_or_skip

GUIDE = pathlib.Path(__file__).resolve().parents[2] / "docs" / "guide" / "ray.md"

# Ray Data warns that one block cannot keep two actors busy, and about its own deprecated
# settings: Ray's notes on the example's tiny dataset, not failures.
pytestmark = [pytest.mark.ray, pytest.mark.filterwarnings("ignore::UserWarning:ray"),
              pytest.mark.filterwarnings("ignore::DeprecationWarning:ray")]


def test_readme_ray_example_runs_and_is_right(ray_cluster, digits_file, tmp_path,
                                              monkeypatch, capfd):
    ray_or_skip()
    blocks = [b for b in re.findall(r"```python\n(.*?)```", GUIDE.read_text(), re.S)
              if "hdray.deployment" in b]
    assert len(blocks) == 1
    assert len(blocks[0].strip().splitlines()) <= 20
    shutil.copy(digits_file, tmp_path / "digits.npz")
    monkeypatch.chdir(tmp_path)
    namespace = {}
    capfd.readouterr()
    exec(compile(blocks[0], "docs/guide/ray.md example", "exec"), namespace)
    logged = "".join(capfd.readouterr())
    assert "deprecated" not in logged.lower(), [
        line for line in logged.splitlines() if "deprecated" in line.lower()]
    images = namespace["images"]
    expected = local_logits(digits_file, images)
    logits = namespace["logits"]
    assert logits.shape == (8, 10) and logits.dtype == np.float32
    np.testing.assert_allclose(logits, expected, rtol=RTOL, atol=ATOL)
    rows = namespace["rows"]
    assert len(rows) == 8 and all(set(r) == {"outputs"} for r in rows)
    # Each row is some image's logits, each image's once (Ray Data need not keep order).
    matched = sorted(int(np.argmin(np.abs(expected - r["outputs"]).max(1))) for r in rows)
    assert matched == list(range(8)) or len(set(map(tuple, images.reshape(8, -1)))) < 8
    for r in rows:
        assert np.isclose(expected, r["outputs"], rtol=RTOL, atol=ATOL).all(1).any()
