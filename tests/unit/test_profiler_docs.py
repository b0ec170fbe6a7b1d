"""docs/guide/profiling.md: every Python block runs as written (in a fresh namespace, in a
temporary working directory), and the picture it shows is in the repository."""
from __future__ import annotations

import pathlib
import re

import pytest

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "guide" / "profiling.md"
BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)


def test_the_page_has_examples_and_its_picture():
    assert len(BLOCKS) >= 2
    for image in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", DOC.read_text()):
        path = DOC.parent / image
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", image


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_python_block_runs(index, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    exec(compile(BLOCKS[index], f"docs/guide/profiling.md block {index}", "exec"), {})
    out = capsys.readouterr().out
    assert ("CONV_FPROP" in out) if index == 0 else ("served by layer" in out)
