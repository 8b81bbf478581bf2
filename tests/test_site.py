"""The book's website (`make docs`, docs/site.py) opened page by page in a headless Chromium.

Marked `book`: the site is built from the chapters as tests/test_notebooks.py executed them, so `make test-full` runs
these last (`pytest -m book`), after `make test` executed the chapters; a chapter without an executed copy is executed
first. Skipped, saying why, only where Debian's chromium is missing and cannot be installed."""

import importlib.util
import json
import shutil
import time
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("docs_site", ROOT / "docs" / "site.py")
site = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(site)

pytestmark = pytest.mark.book


@pytest.fixture(scope="module")
def chromium():
    path, why = site.ensure_chromium()
    if path is None:
        print(f"\nbrowser tests skipped: {why}")
        pytest.skip(why)
    return path


@pytest.fixture(scope="module")
def built():
    t0 = time.time()
    index = site.build()
    print(f"\nmake docs: {time.time() - t0:.1f} s")
    return index.parent


def image_outputs(nb: Path) -> int:
    cells = json.loads(nb.read_text())["cells"]
    return sum(
        "image/png" in o.get("data", {}) for c in cells if c["cell_type"] == "code" for o in c.get("outputs", [])
    )


def test_every_page_in_a_browser(built, chromium):
    t0 = time.time()
    problems, stats = site.check_site(built, chromium)
    print(f"\nbrowser: {stats} in {time.time() - t0:.1f} s")
    assert not problems, f"{len(problems)} problem(s) in the site:\n" + "\n".join(problems)
    assert stats["pages"] >= len(site.chapters()) + 2  # every chapter, the landing page, the API page
    figures = sum(image_outputs(site.BOOK / nb.name) for nb in site.chapters())
    assert stats["images"] >= figures + 2, (stats, figures)  # every figure a chapter drew, and the demo's two
    assert stats["math"] > 50  # the chapters' formulas, typeset by MathJax


def test_nothing_is_loaded_from_outside_the_site(built):
    assert site.external_assets(built) == []
    html = (built / "chapters" / "12_pipeline_parallel.html").read_text()
    assert "_static/mathjax/tex-chtml.js" in html and "cdn" not in html.lower()
    assert (built / "_static" / "mathjax" / "tex-chtml.js").exists()


def test_the_check_fails_on_a_deleted_image_and_a_broken_link(built, chromium, tmp_path):
    "A copy of the site with chapter 12's first figure deleted and a link on chapter 60 pointed at a missing page."
    copy = tmp_path / "site"
    shutil.copytree(built, copy)
    pipeline, evaluate = copy / "chapters" / "12_pipeline_parallel.html", copy / "chapters" / "60_evaluate.html"
    image = next(t.split('src="')[1].split('"')[0] for t in pipeline.read_text().split("<img")[1:])
    (pipeline.parent / image).unlink()
    evaluate.write_text(
        evaluate.read_text().replace(
            '<a class="reference internal" href="61_tasks.html">',
            '<a class="reference internal" href="61_task.html">',
            1,
        )
    )
    problems, _ = site.check_site(copy, chromium, ["chapters/12_pipeline_parallel.html", "chapters/60_evaluate.html"])
    assert f"chapters/12_pipeline_parallel.html: image did not load: {image}" in problems, problems
    assert "chapters/60_evaluate.html: broken link (404): chapters/61_task.html" in problems, problems


def test_the_check_fails_on_a_machine_path_and_a_wide_printed_table(built, chromium, tmp_path):
    """A copy of the site with chapter 61 showing the repository's absolute path in its text, /tmp in an image's alt,
    and a printed pipe table wider than its box; a wide output that is not a table passes."""
    copy = tmp_path / "site"
    shutil.copytree(built, copy)
    tasks = copy / "chapters" / "61_tasks.html"
    table = "\n".join(
        [
            "| task | " + " | ".join(f"column {i}" for i in range(30)) + " |",
            "|---" * 31 + "|",
            "| BoolQ | " + " | ".join("0.500 ± 0.144" for _ in range(30)) + " |",
        ]
    )
    log = "x" * 400
    injected = (
        f'<p>examples from {site.ROOT}/tests/fixtures/eval</p><img alt="from /tmp/pytest-7/eval" src="data:,">'
        f'<div class="cell_output docutils container"><div class="output stream highlight-myst-ansi notranslate">'
        f'<div class="highlight"><pre>{table}</pre></div></div></div>'
        f'<div class="cell_output docutils container"><div class="output stream highlight-myst-ansi notranslate">'
        f'<div class="highlight"><pre>{log}</pre></div></div></div>'
    )
    html = tasks.read_text()
    at = html.index(
        '<div class="cell docutils container"'
    )  # among the chapter's cells (an output outside one is hidden)
    tasks.write_text(html[:at] + injected + html[at:])
    problems, _ = site.check_site(copy, chromium, ["chapters/61_tasks.html"])
    page = "chapters/61_tasks.html: "
    assert any(
        p.startswith(page + f"absolute path of the build machine {str(site.ROOT)!r} in the page's text")
        for p in problems
    ), problems
    assert (
        page + "absolute path of the build machine '/tmp' in an image's alt or title: 'from /tmp/pytest-7/eval'"
        in problems
    ), problems
    wide = [p for p in problems if "a printed table wider than its box" in p]
    assert len(wide) == 1 and "| task | column 0" in wide[0], problems


def test_what_counts_as_a_machine_path_and_a_table():
    paths = ["/work/repo", "/tmp", "/root"]
    assert [
        p
        for p, _ in site.path_leaks(
            "read /work/repo/tests/fixtures and /tmp/x; kept: https://a.b/tmp/q, /tmpfs, /work/repository", paths
        )
    ] == ["/work/repo", "/tmp"]
    assert site.path_leaks("tests/fixtures/eval, $MTNLG_DATA/eval, ~/data, …/run/eval", paths) == []
    assert site.table_like("| a | b |\n|---|---|\n| 1 | 2 |") and site.table_like(
        "name  GPUs  TFLOP/s\nA  8  126\nB  16  125"
    )
    assert not site.table_like("step 10 loss 5.1\nstep 20 loss 4.9\nstep 30 loss 4.7") and not site.table_like(
        "x" * 400
    )
    assert not site.table_like(
        "\n".join(f"step {i}/40 | loss 5.1 | lr 1e-3 | 9,000 tokens/s | MFU n/a" for i in (10, 20, 30))
    )


def test_without_a_browser_it_says_why(monkeypatch, tmp_path):
    monkeypatch.setattr(site, "CHROMIUM", tmp_path / "no-chromium")
    monkeypatch.setattr(site.os, "geteuid", lambda: 1000)
    assert site.ensure_chromium() == (
        None,
        f"no {tmp_path / 'no-chromium'}, and not root to `apt-get install chromium`",
    )
