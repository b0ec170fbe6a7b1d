"""The documentation holds up: README.md and every page of docs/.

- every Python block runs as written (blocks marked for a GPU run on the "cpu" device
  where no GPU is present; a block marked for Ray is skipped here, naming the test of
  tests/ray that runs it on the suite's Ray cluster);
- every relative link and anchor resolves inside the repository;
- shell blocks name only extras and subcommands that exist;
- every test the reliability page names exists;
- the headline performance tables agree with bench/results/*.json;
- nothing in the repository cites a file outside it.

A block is marked by an HTML comment on the line before its fence:
``<!-- docs-test: gpu (why) -->``, ``<!-- docs-test: ray (why) -->`` or
``<!-- docs-test: skip (why) -->``.
"""
from __future__ import annotations

import json
import math
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md"] + sorted(
    p for p in DOCS.rglob("*.md") if not {"_build", "_generated"} & set(p.relative_to(DOCS).parts))

FENCE = re.compile(
    r"^(?:<!-- docs-test: (?P<kind>[\w-]+)(?: \((?P<why>[^)]*)\))? -->\n)?"
    r"```(?P<lang>[^\n`]*)\n(?P<code>.*?)^```[ \t]*$", re.M | re.S)
KINDS = {"gpu", "ray", "skip", "torch"}


def _rel(path):
    return path.relative_to(ROOT).as_posix()


def _blocks(lang):
    out = []
    for page in PAGES:
        for i, m in enumerate(b for b in FENCE.finditer(page.read_text())
                              if b.group("lang").strip() == lang):
            out.append((f"{_rel(page)}#{i}", m.group("kind"), m.group("why"), m.group("code")))
    return out


PYTHON_BLOCKS = _blocks("python")


def _params():
    return [pytest.param(name, kind, why, code, id=name)
            for name, kind, why, code in PYTHON_BLOCKS]


def _gpu_specs():
    import hipdnn_async as hd
    return [d for d in hd.devices() if d != "cpu"]


@pytest.mark.parametrize("name, kind, why, code", _params())
def test_python_block_runs_as_written(name, kind, why, code, capsys):
    assert kind is None or kind in KINDS, f"{name}: unknown docs-test marker {kind!r}"
    if kind in ("skip", "ray"):
        # A Ray block needs a cluster: tests/ray runs it on the suite's local one (its
        # marker names the test), with the ray extra.
        assert why, f"{name}: a {kind} block must say why (and where it runs)"
        pytest.skip(why)
    if kind == "torch":
        # a PyTorch user's page: runs wherever torch is (CI installs the peers extra)
        assert why, f"{name}: a torch block must say why"
        pytest.importorskip("torch", reason=f"{name}: {why}")
    if kind == "gpu":
        wanted = {int(i) for i in re.findall(r'"(?:gpu|cuda|hip):(\d+)"', code)}
        if len(_gpu_specs()) < len(wanted):
            # No GPU (or too few): the same program on the CPU device, which takes the
            # same graphs, device arrays and calls; a GPU machine runs it as written.
            code = re.sub(r'"(?:gpu|cuda|hip):\d+"', '"cpu"', code)
    exec(compile(code, name, "exec"), {"__name__": "__docs__"})
    capsys.readouterr()


def test_there_are_blocks_to_run():
    assert len(PYTHON_BLOCKS) >= 10, [b[0] for b in PYTHON_BLOCKS]
    assert any(name.startswith("README.md") for name, *_ in PYTHON_BLOCKS)


# ---------------------------------------------------------------------------------------
# Links and anchors
# ---------------------------------------------------------------------------------------

LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)\)")
DIRECTIVE_PATH = re.compile(r"^```\{(?:figure|image)\}\s+(\S+)", re.M)
HEADING = re.compile(r"^(#{1,4})\s+(.*?)\s*#*\s*$", re.M)


def _prose(text):
    """The text outside fenced code blocks and inline code spans."""
    text = re.sub(r"^```[^\n]*\n.*?^```[ \t]*$", "", text, flags=re.M | re.S)
    return re.sub(r"`[^`\n]*`", "", text)


def _slug(heading):
    """MyST's (and GitHub's) heading anchor: lower case, punctuation dropped, spaces to -."""
    heading = re.sub(r"`([^`]*)`", r"\1", heading)
    heading = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path):
    text = re.sub(r"^```[^\n]*\n.*?^```[ \t]*$", "", path.read_text(), flags=re.M | re.S)
    return {_slug(h) for _, h in HEADING.findall(text)}


def _links():
    for page in PAGES:
        text = page.read_text()
        for target in LINK.findall(_prose(text)):
            yield page, target, False
        for target in DIRECTIVE_PATH.findall(text):
            yield page, target, True


def test_every_relative_link_and_anchor_resolves_inside_the_repository():
    generated = (DOCS / "_ext" / "perf_plots.py").read_text()
    broken, external = [], []
    for page, target, directive in _links():
        if re.match(r"[a-z][a-z0-9+.-]*:", target):
            external.append((_rel(page), target))
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.is_relative_to(ROOT):
            broken.append((_rel(page), target, "outside the repository"))
            continue
        if "_generated" in dest.parts:       # drawn at build time by docs/_ext
            if dest.name not in generated:
                broken.append((_rel(page), target, "no generator writes it"))
            continue
        if not dest.exists():
            broken.append((_rel(page), target, "missing"))
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append((_rel(page), target, f"no heading with anchor #{anchor}"))
    assert not broken, broken
    assert len(external) <= 3, f"keep external links few (none can be checked here): {external}"


def test_the_index_page_list_links_every_guide_page_of_its_toctree():
    """docs/index.md's list of pages left out Profiling, which only the hidden toctree (the
    sidebar) had."""
    text = (DOCS / "index.md").read_text()
    toctree = {f"{name}.md" for block in re.findall(r"```\{toctree\}\n(.*?)```", text, re.S)
               for name in re.findall(r"^(guide/[\w-]+)$", block, re.M)}
    linked = set(LINK.findall(_prose(text)))
    assert toctree and not toctree - linked, sorted(toctree - linked)


def test_the_slug_function_matches_mysts_for_headings_used_here():
    assert _slug("CPU streams and BLAS threads") == "cpu-streams-and-blas-threads"
    assert _slug("Reliability: what is promised, and the test") == (
        "reliability-what-is-promised-and-the-test")
    assert _slug("`hd.DynamicBatcher` and friends") == "hddynamicbatcher-and-friends"


# ---------------------------------------------------------------------------------------
# Shell blocks: extras and subcommands that exist
# ---------------------------------------------------------------------------------------

def _extras():
    import tomllib
    return set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
               ["optional-dependencies"])


def _subcommands():
    out = subprocess.run([sys.executable, "-m", "hipdnn_async", "--help"], capture_output=True,
                         text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)), check=True).stdout
    return set(re.search(r"\{([\w,]+)\}", out).group(1).split(","))


def test_shell_blocks_name_only_extras_and_subcommands_that_exist():
    extras, subcommands = _extras(), _subcommands()
    seen = 0
    for page in PAGES:
        text = page.read_text()
        commands = [c for _, _, _, c in _blocks_of(text, "sh")]
        commands += re.findall(r"^    (pip install .*|hipdnn-async .*)$", text, re.M)
        for block in commands:
            for group in re.findall(r"pip install -e '\.\[([\w,]+)\]'", block):
                seen += 1
                assert set(group.split(",")) <= extras, (_rel(page), group, extras)
            for sub in re.findall(r"(?:^|&& )hipdnn-async (\w+)", block, re.M):
                assert sub in subcommands, (_rel(page), sub, subcommands)
    assert seen >= 3


def test_separate_extra_installs_are_offered_as_one_build():
    """Each `pip install -e '.[x]'` compiles the extensions anew (3 to 4 minutes on 2 cores);
    a page that gives several such commands also gives one install naming all their
    extras; where the install page speaks of PyTorch's CPU wheels it gives the command."""
    for page in (ROOT / "README.md", DOCS / "guide" / "install.md"):
        text = page.read_text()
        groups = [set(g.split(",")) for g in re.findall(r"pip install -e '\.\[([\w,]+)\]'", text)]
        single = set().union(*(g for g in groups if len(g) == 1))
        if len(single) > 1:
            assert any(single - {"ray"} <= g for g in groups), (_rel(page), single, groups)
    install = (DOCS / "guide" / "install.md").read_text()
    if "CPU build" in install or "CPU wheels" in install:
        assert re.search(r"pip install torch==[\d.]+ --index-url "
                         r"https://download\.pytorch\.org/whl/cpu", install)


def _blocks_of(text, lang):
    return [(None, m.group("kind"), m.group("why"), m.group("code"))
            for m in FENCE.finditer(text) if m.group("lang").strip() == lang]


# ---------------------------------------------------------------------------------------
# The API reference
# ---------------------------------------------------------------------------------------

_API_CONF = """\
import pathlib
_conf = pathlib.Path({conf!r})
_ns = {{"__file__": str(_conf)}}
exec(compile(_conf.read_text(), str(_conf), "exec"), _ns)
globals().update({{k: v for k, v in _ns.items() if not k.startswith("_")}})
extensions = [e for e in extensions if e != "perf_plots"]   # plots: not this test's subject
"""


def test_api_reference_renders_graph_methods_batcher_call_and_draw_timeline(tmp_path):
    """The reference page's entries, built as the site builds them (docs/conf.py, -W) but
    alone and as text: every public method hd.Graph inherits from its private base, the
    batcher's __call__ and the profiler's draw_timeline are rendered; no "Bases:" line
    names the private base."""
    pytest.importorskip("sphinx", reason="Sphinx renders the reference: the docs extra, "
                        "pip install -e '.[docs]' (CI installs it)")
    import hipdnn_async as hd
    import hipdnn_async.graph._graph as private
    src = tmp_path / "src"
    src.mkdir()
    (src / "conf.py").write_text(_API_CONF.format(conf=str(DOCS / "conf.py")))
    (src / "index.rst").write_text("API\n===\n\n.. currentmodule:: hipdnn_async\n\n"
                                   ".. include:: _generated/api_entries.rst\n")
    r = subprocess.run([sys.executable, "-m", "sphinx", "-W", "-q", "-b", "text", str(src),
                        str(tmp_path / "out")], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert r.returncode == 0, r.stderr
    text = (tmp_path / "out" / "index.txt").read_text()
    inherited = [n for n, v in vars(private.Graph).items()
                 if not n.startswith("_") and callable(v) and getattr(hd.Graph, n) is v]
    assert {"conv_fprop", "batchnorm", "tensor"} <= set(inherited), inherited
    missing = [n for n in inherited if not re.search(rf"^   {n}\(", text, re.M)]
    assert not missing, f"hd.Graph methods not rendered: {missing}"
    call = re.search(r"^   (async )?__call__\(.*\n", text, re.M)
    summary = hd.DynamicBatcher.__call__.__doc__.splitlines()[0]
    assert call and " ".join(text[call.end():].split()).startswith(summary)
    assert re.search(r"^hipdnn_async\.profiler\.draw_timeline\(", text, re.M)
    assert not re.search(r"Bases: .*\bGraph\b", text)


# ---------------------------------------------------------------------------------------
# Promises, figures, citations
# ---------------------------------------------------------------------------------------

def test_reliability_page_names_tests_that_exist():
    """Every test the reliability page names is a test function of that file (so a
    promise cannot outlive the test that proves it)."""
    text = (DOCS / "guide" / "reliability.md").read_text()
    named, current = [], None
    for ref in re.findall(r"`((?:tests/[\w/]+\.py)?::\w+)`", text):
        path, _, name = ref.partition("::")
        current = path or current
        named.append((current, name))
    assert len(named) >= 25, named
    for path, name in named:
        source = (ROOT / path).read_text()
        assert re.search(rf"^(async )?def {name}\(", source, re.M), f"{path}::{name} is not a test"


def _geomeans(name):
    r = json.loads((ROOT / "bench" / "results" / name).read_text())["results"]
    conv, bn = r["conv"]["geomean_ratio"], r["batchnorm"]["geomean_ratio"]
    rows = {}
    for label, key in (("fp16 NHWC", "float16 NHWC"), ("fp32 NCHW", "float32 NCHW")):
        rows[label] = [conv[f"conv_{d} {key}"] for d in ("fprop", "dgrad", "wgrad")] + [
            {"heuristic": bn[f"{key} {k}"]} for k in ("train", "infer", "backward")]
    return rows


def _cells(line):
    return [c.strip() for c in line.strip().strip("|").split("|")]


def test_performance_tables_agree_with_the_bench_results():
    def close(cell, value):
        return math.isclose(float(cell), round(value, 2), abs_tol=0.0051)

    readme = (ROOT / "README.md").read_text()
    b32 = _geomeans("h200_bench_gpu.json")
    for label, want in b32.items():
        cells = _cells(re.search(rf"^\| {label} \|.*$", readme, re.M).group(0))[1:]
        assert all(close(c, w["heuristic"]) for c, w in zip(cells, want)), (label, cells)
    page = (DOCS / "guide" / "performance.md").read_text()
    for batch, name in ((32, "h200_bench_gpu.json"), (256, "h200_bench_gpu_n256.json")):
        for label, want in _geomeans(name).items():
            cells = _cells(re.search(rf"^\| {batch} \| {label} \|.*$", page, re.M).group(0))[2:]
            for cell, w in zip(cells, want):
                m = re.fullmatch(r"([\d.]+)(?: \(([\d.]+)\))?", cell)
                assert m and close(m.group(1), w["heuristic"]), (batch, label, cell)
                if m.group(2):
                    assert close(m.group(2), w["benchmarked"]), (batch, label, cell)


def _tracked_text_files():
    try:
        names = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                               check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        names = [_rel(p) for p in ROOT.rglob("*") if p.is_file()]
    suffixes = {".py", ".pyx", ".pxd", ".pyi", ".md", ".rst", ".toml", ".sh", ".txt", ".cfg",
                ".c", ".h", ".cu", ".cpp", ".hpp"}
    for name in names:
        path = ROOT / name
        if path.suffix in suffixes and path.is_file() and not name.startswith("build/"):
            yield name, path


def test_nothing_in_the_repository_cites_a_file_outside_it():
    # Patterns built from parts, so that this file does not match itself.
    outside = re.compile("|".join([r"\bAPI" + r"\.md\b", "shared" + "/reference",
                                   r"\.\./" + "shared/", "/work/" + "shared"]))
    hits = [f"{name}:{i}: {line.strip()[:100]}"
            for name, path in _tracked_text_files()
            for i, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
            if outside.search(line)]
    assert not hits, "\n".join(hits)


def test_license_file_matches_the_package_metadata():
    import tomllib
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert meta["license"] == {"text": "MIT"}
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")


def test_every_ray_block_names_the_test_that_runs_it():
    for name, kind, why, code in PYTHON_BLOCKS:
        if kind == "ray":
            test = re.search(r"(tests/ray/\w+\.py)", why or "")
            assert test, f"{name}: a Ray block must name the tests/ray file that runs it"
            text = (ROOT / test.group(1)).read_text()
            assert name.split("#")[0] in text, f"{test.group(1)} does not read {name}"
