"""The output-file check every command runs before its work (``_cli_args``): the trace
command's ``--png``, ``bench``'s ``--json`` and the demo's ``--json`` / ``--plot`` /
``--save`` / ``--profile`` exit 2 with the option, the path and why, before any work."""
from __future__ import annotations

import pytest

from hipdnn_async import _bench, _bench_overlap, cli
from hipdnn_async.demo import _main as demo


def _commands(tmp_path, path):
    trace = tmp_path / "t.json"
    trace.write_text("{}")
    return [(cli.main, ["trace", str(trace), "--png", path], "--png"),
            (_bench.main, ["--quick", "--json", path], "--json"),
            (demo.main, ["--plot", path], "--plot")]


@pytest.mark.parametrize("case", ["missing folder", "a directory", "empty"])
def test_every_command_refuses_an_unusable_output_file(tmp_path, capsys, case):
    path = {"missing folder": str(tmp_path / "nowhere" / "out.png"),
            "a directory": str(tmp_path), "empty": ""}[case]
    want = {"missing folder": "does not exist or is not writable",
            "a directory": "is a directory; give a file name",
            "empty": "needs a file name"}[case]
    for main, argv, flag in _commands(tmp_path, path):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2, (main, argv)
        err = capsys.readouterr().err
        assert f"{flag} " in err and want in err, (main, argv, err)


@pytest.mark.parametrize("case", ["missing", "a file"])
def test_bench_overlap_out_names_why_the_folder_cannot_be_used(tmp_path, capsys, monkeypatch,
                                                                case):
    """`bench overlap --out DIR` with a DIR that does not exist said "not a writable folder"
    (trial item 9e); it is checked before the run."""
    monkeypatch.setattr(_bench_overlap, "run", lambda *a: pytest.fail("ran before the check"))
    path = tmp_path / "ov"
    if case == "a file":
        path.write_text("")
    want = {"missing": "folder does not exist", "a file": "is not a folder"}[case]
    with pytest.raises(SystemExit) as exc:
        _bench_overlap.main(["--out", str(path)])
    assert exc.value.code == 2
    assert f"--out {path}: {want}" in capsys.readouterr().err

