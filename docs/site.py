"""The book as a website: built from the chapters as the tests executed them, checked in a headless Chromium.

    python docs/site.py build          # execute the chapters whose executed copy is missing or stale, then sphinx-build
    python docs/site.py check [PAGE…]  # open every page (or these) in Chromium; print each problem (page: what),
                                       # exit 1 if any
    python docs/site.py screenshots    # docs/screenshots/*.png of the chapters in SCREENSHOTS
    python docs/site.py map            # docs/figures/book_map.png, the landing page's map (`build` redraws it too)

`tests/test_notebooks.py` keeps each chapter it executed under papermill as `runs/book/<name>.ipynb`; `build` stages
those copies with the pages in `docs/` into `runs/site-src/` and renders them with Sphinx + myst-nb (execution off)
into `runs/site/`. Math is MathJax 3 from the `sphinx-mathjax-offline` package, served from the site itself.
"""

from __future__ import annotations
import argparse
import functools
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit, unquote

ROOT = Path(__file__).resolve().parent.parent
NBS, DOCS = ROOT / "nbs", ROOT / "docs"
BOOK = ROOT / "runs" / "book"  # executed chapters (tests/test_notebooks.py writes them)
SRC, SITE = ROOT / "runs" / "site-src", ROOT / "runs" / "site"
PARTS = {
    "0": "Foundations",
    "1": "Part 1: 3D parallelism",
    "2": "Part 2: kernels",
    "3": "Part 3: data curation",
    "4": "Part 4: the training recipe",
    "5": "Part 5: performance",
    "6": "Part 6: evaluation",
    "7": "Part 7: bias and in-context learning",
    "9": "Tools",
}
GENERATED = {"genindex.html", "py-modindex.html", "search.html"}  # Sphinx's own pages: a title, no <h1>
SCREENSHOTS = {"12_pipeline_parallel": "img", "61_tasks": "img"}  # chapter -> what to scroll to (its first figure)
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


# ---- the chapters ---------------------------------------------------------------------------------------------------
def chapters() -> list[Path]:
    return sorted(NBS.glob("[0-9]*.ipynb"))


def plain(md: str) -> str:
    "Text as a heading shows it, for comparing: no Markdown backticks, straight quotes, single spaces."
    md = md.replace("`", "").translate(str.maketrans("‘’“”", "''\"\""))
    return re.sub(r"\s+", " ", md).strip()


def chapter_title(nb: Path) -> str:
    "The chapter's `# Title` (the first line of its first markdown cell), as the page shows it."
    cells = json.loads(nb.read_text())["cells"]
    first = next(c for c in cells if c["cell_type"] == "markdown")
    line = "".join(first["source"]).lstrip().splitlines()[0]
    if not line.startswith("# "):
        raise ValueError(f"{nb.name}: the first markdown cell must start with '# Title'")
    return plain(line[2:])


def short_title(nb: Path) -> str:
    "The chapter's title up to its colon, as a link names it: '12 — Pipeline parallelism'."
    cells = json.loads(nb.read_text())["cells"]
    first = next(c for c in cells if c["cell_type"] == "markdown")
    title = "".join(first["source"]).lstrip().splitlines()[0][2:].strip()
    return f"{nb.name[:2]} — {title.split(': ', 1)[0]}"


LAST = "This is the last chapter. Back to [the map of the book](../index.md)."


def next_line(nb: Path, notebooks: list[Path] | None = None) -> str:
    """The one line every chapter ends with (its last cell, Markdown): a link to the next chapter in reading order,
    which the site resolves to that chapter's page; the last chapter's leads back to the landing page."""
    notebooks = chapters() if notebooks is None else notebooks
    i = notebooks.index(nb)
    if i + 1 == len(notebooks):
        return LAST
    nxt = notebooks[i + 1]
    return f"Next: [{short_title(nxt)}]({nxt.name})"


# ---- the map of the book --------------------------------------------------------------------------------------------
MAP_PATH = ["foundations, data", "curation", "training in 3D", "evaluation", "bias"]
MAP_PARTS = dict(
    zip(MAP_PATH, ("0", "3", "1245", "6", "7"))
)  # stage -> the parts (first digits) whose chapters build it


def book_map(out: Path = DOCS / "figures" / "book_map.png", notebooks: list[Path] | None = None) -> Path:
    """The landing page's figure: the reader's path data → curation → training in 3D → evaluation → bias, one box per
    stage with its chapters (number and short title) under it, read from the chapters' files so it cannot drift."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyBboxPatch

    notebooks = chapters() if notebooks is None else notebooks
    stages = {st: [nb for nb in notebooks if nb.name[0] in digits] for st, digits in MAP_PARTS.items()}
    rest = [nb for nb in notebooks if not any(nb in v for v in stages.values())]
    width, tall = 3.4, max(len(v) for v in stages.values()) + (1.2 if rest else 0)
    fig, ax = plt.subplots(figsize=(len(MAP_PATH) * width, 1.2 + 0.26 * (tall + 1.6)))
    ax.set(xlim=(0, len(MAP_PATH) * width), ylim=(-(tall + 0.6), 1.3))
    ax.axis("off")
    colours = ["#d9e7f5", "#dcefd9", "#fbe3c8", "#e9def3", "#f6d6d6"]
    for k, st in enumerate(MAP_PATH):
        x = k * width + 0.15
        ax.add_patch(FancyBboxPatch((x, -0.1), width - 0.55, 1.0, boxstyle="round,pad=0.05", fc=colours[k], ec="#555"))
        ax.text(x + (width - 0.55) / 2, 0.4, st, ha="center", va="center", fontsize=13, weight="bold")
        if k + 1 < len(MAP_PATH):
            ax.annotate(
                "", xy=(x + width - 0.05, 0.4), xytext=(x + width - 0.45, 0.4), arrowprops=dict(arrowstyle="->", lw=2)
            )
        for j, nb in enumerate(stages[st]):
            ax.text(x + 0.02, -0.75 - j, short_title(nb).replace("`", ""), fontsize=9, va="center")
    if rest:
        ax.text(
            0.17,
            -(tall + 1.0),
            "and the tools behind them: " + ";  ".join(short_title(nb).replace("`", "") for nb in rest),
            fontsize=9,
            va="center",
        )
    ax.set_title(
        "The book's path, from raw text to a model's bias: each stage and the chapters that build it",
        fontsize=12,
        loc="left",
    )
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


# ---- build ----------------------------------------------------------------------------------------------------------
def stale(nb: Path, book: Path = BOOK) -> bool:
    "No executed copy of chapter `nb`, or one older than the chapter."
    copy = book / nb.name
    return not copy.exists() or copy.stat().st_mtime < nb.stat().st_mtime


def execute_missing(book: Path = BOOK) -> list[str]:
    """Run the papermill tests (tests/test_notebooks.py, which keep their executed copies in `book`) of every group of
    chapters with a stale chapter: a group shares a run directory, so it runs whole. Returns the groups run."""
    sys.path.insert(0, str(ROOT / "tests"))
    from test_notebooks import notebook_groups

    groups = [g for g, members in notebook_groups(chapters()).items() if any(stale(m, book) for m in members)]
    if groups:
        ids = [f"tests/test_notebooks.py::TestChapters_{g}" for g in groups]
        workers = ["-n", "2", "--dist", "loadscope"] if len(groups) > 1 else ["-p", "no:xdist"]
        print(
            f"executing {len(groups)} chapter group(s) without an up-to-date executed copy: {', '.join(groups)}",
            flush=True,
        )
        subprocess.run([sys.executable, "-m", "pytest", "-q", *workers, *ids], cwd=ROOT, check=True)
    return groups


def strip_nbdev(nb: dict) -> dict:
    "Drop `#| hide` cells, papermill's injected parameters, and the `#|` directive lines from code the reader sees."
    cells = []
    for c in nb["cells"]:
        if "injected-parameters" in c.get("metadata", {}).get("tags", []):
            continue
        if c["cell_type"] == "code":
            lines = "".join(c["source"]).splitlines(keepends=True)
            if any(re.match(r"#\|\s*hide\b", l) for l in lines):
                continue
            c["source"] = "".join(l for l in lines if not l.startswith("#|")).lstrip("\n")
        cells.append(c)
    return {**nb, "cells": cells}


def toctrees() -> str:
    "One captioned table of contents per part of the book, in chapter order, then the API reference."
    parts: dict[str, list[str]] = {}
    for nb in chapters():
        parts.setdefault(nb.name[0], []).append(nb.stem)
    out = []
    for digit, stems in parts.items():
        out += [
            "```{toctree}",
            f":caption: {PARTS.get(digit, f'Part {digit}')}",
            ":maxdepth: 1",
            "",
            *[f"chapters/{s}" for s in stems],
            "```",
            "",
        ]
    return "\n".join(out + ["```{toctree}", ":caption: Reference", ":maxdepth: 1", "", "api", "```", ""])


def api_page() -> str:
    "The API reference: every module of the package, its exported names with their docstrings."
    mods = sorted(p.stem for p in (ROOT / "mtnlg").glob("*.py") if not p.stem.startswith("_"))
    lines = [
        "# API reference",
        "",
        "The `mtnlg` package, as nbdev exports it from the chapters: each module's public names.",
        "",
    ]
    for m in mods:
        lines += [f"## mtnlg.{m}", "", "```{eval-rst}", f".. automodule:: mtnlg.{m}", "```", ""]
    return "\n".join(lines)


def stage(book: Path = BOOK, src: Path = SRC) -> None:
    """Sphinx's source folder: docs/'s pages, the executed chapters (nbdev directives stripped), their figures, the API
    page."""
    missing = [nb.name for nb in chapters() if not (book / nb.name).exists()]
    if missing:
        raise FileNotFoundError(f"no executed copy in {book} of: {', '.join(missing)}")
    shutil.rmtree(src, ignore_errors=True)
    shutil.copytree(DOCS, src, ignore=shutil.ignore_patterns("site.py", "__pycache__", "screenshots"))
    (src / "chapters").mkdir()
    for nb in chapters():
        (src / "chapters" / nb.name).write_text(json.dumps(strip_nbdev(json.loads((book / nb.name).read_text()))))
    if (NBS / "figures").exists():
        shutil.copytree(NBS / "figures", src / "chapters" / "figures")
    book_map(
        src / "figures" / "book_map.png"
    )  # drawn from the chapters being built: the landing page's map cannot drift
    index = src / "index.md"
    index.write_text(
        index.read_text().replace("<!-- parts: docs/site.py writes one table of contents per part here -->", toctrees())
    )
    (src / "api.md").write_text(api_page())


def build(site: Path = SITE, book: Path = BOOK) -> Path:
    "Execute what is missing from `book` (the tests' copies only), stage, render: the site's index.html."
    t0 = time.time()
    if book == BOOK:
        execute_missing()
    stage(book)
    env = {
        **os.environ,
        "PYTHONWARNINGS": "ignore",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    subprocess.run(
        [
            sys.executable,
            "-m",
            "sphinx",
            "-b",
            "html",
            "-q",
            "-j",
            "2",
            "-d",
            str(SRC.parent / "site-doctrees"),
            str(SRC),
            str(site),
        ],
        cwd=ROOT,
        check=True,
        env=env,
    )
    print(f"site built in {time.time() - t0:.1f} s: {site / 'index.html'}", flush=True)
    return site / "index.html"


# ---- the browser ----------------------------------------------------------------------------------------------------
def ensure_chromium() -> tuple[Path | None, str]:
    "Debian's chromium: installed with apt-get when missing and we are root. (path, '') or (None, why not)."
    if CHROMIUM.exists():
        return CHROMIUM, ""
    if not shutil.which("apt-get"):
        return None, f"no {CHROMIUM} and no apt-get to install Debian's chromium"
    if os.geteuid() != 0:
        return None, f"no {CHROMIUM}, and not root to `apt-get install chromium`"
    install = ["apt-get", "-o", "DPkg::Lock::Timeout=600", "install", "-y", "-q", "chromium"]
    for step in ([install], [["apt-get", "-o", "DPkg::Lock::Timeout=600", "update", "-q"], install]):
        for cmd in step:
            subprocess.run(
                cmd,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
            )
        if CHROMIUM.exists():
            return CHROMIUM, ""
    return None, "apt-get could not install Debian's chromium (no package source reachable?)"


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *a):
        pass


class serve:
    "The site on http://127.0.0.1:<free port>/ from a thread, for a `with` block."

    def __init__(self, site: Path):
        self.site = site

    def __enter__(self):
        self.httpd = http.server.ThreadingHTTPServer(
            ("127.0.0.1", 0), functools.partial(_Quiet, directory=str(self.site))
        )
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/"

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def launch(playwright, chromium: Path, user_data: Path):
    return playwright.chromium.launch_persistent_context(
        str(user_data),
        executable_path=str(chromium),
        headless=True,
        args=CHROMIUM_FLAGS,
        viewport={"width": 1280, "height": 900},
    )


# What each page reports back, after MathJax (if the page loads it) has typeset everything.
PAGE_STATE = """async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) await MathJax.startup.promise;
  const h1 = document.querySelector('main h1, article h1, h1');
  const text = el => el ? el.textContent.replace(/[¶#]/g, '').replace(/\\s+/g, ' ').trim() : null;
  const visible = document.body.cloneNode(true);
  visible.querySelectorAll('pre, code, script, style, mjx-container, .highlight, textarea').forEach(e => e.remove());
  return {
    title: document.title, h1: text(h1),
    images: [...document.images].map(i => ({src: i.getAttribute('src'), ok: i.complete && i.naturalWidth > 0})),
    math: [...document.querySelectorAll('.math')].map(m => ({tex: m.textContent.slice(0, 60),
                                                            ok: !!m.querySelector('mjx-container')})),
    text: visible.textContent,
    links: [...document.querySelectorAll('a[href]')].map(a => a.href),
    ids: [...document.querySelectorAll('[id]')].map(e => e.id),
    all_text: [...document.body.querySelectorAll(':scope > *')].filter(e => !['SCRIPT', 'STYLE'].includes(e.tagName))
                .map(e => e.textContent).join('\\n'),
    alts: [...document.images].flatMap(i => [i.getAttribute('alt'), i.getAttribute('title')]).filter(Boolean),
    wide_outputs: [...document.querySelectorAll('.cell_output pre, .output pre')]
      .filter(p => p.scrollWidth > p.clientWidth + 1)
      .map(p => ({text: p.textContent, scroll: p.scrollWidth, client: p.clientWidth})),
  };
}"""


def machine_paths() -> list[str]:
    """Absolute paths of the machine that built the site, which no page may show: the repository, the data root, $HOME,
    /tmp."""
    paths = [str(ROOT), "/tmp"]
    if os.environ.get("MTNLG_DATA"):
        d = Path(os.environ["MTNLG_DATA"]).expanduser()
        paths += [os.path.abspath(d), str(d.resolve())]
    home = os.path.expanduser("~")
    if home not in ("", "/"):
        paths.append(home)
    return list(dict.fromkeys(paths))


def path_leaks(text: str, paths: list[str] | None = None) -> list[tuple[str, str]]:
    """(path, the text around it) for each absolute machine path in `text`: the path as a whole name (not inside a URL
    or a word)."""
    out = []
    for p in paths if paths is not None else machine_paths():
        m = re.search(r"(?<![\w.~/-])" + re.escape(p.rstrip("/")) + r"(?![\w.-])", text)
        if m:
            out.append((p, text[max(0, m.start() - 40) : m.end() + 40].replace("\n", " ")))
    return out


def table_like(text: str) -> bool:
    """Printed text a table would show better: at least three lines, and either a pipe table (three rows that start and
    end with `|`, or a `|---|` rule) or columns aligned with runs of spaces (three or more fields on most lines). A log
    line with ` | ` between its fields (`step 10/40 | loss 5.1 | ...`) is a line, not a row."""
    lines = [l for l in text.splitlines() if l.strip()]
    if len(lines) < 3:
        return False
    rows = sum(l.strip().startswith("|") and l.strip().endswith("|") for l in lines)
    if rows >= 3 or any(re.match(r"\s*\|\s*:?-{3,}.*\|", l) for l in lines):
        return True
    aligned = sum(len(re.split(r"\s{2,}", l.strip())) >= 3 for l in lines)
    return aligned >= max(3, 0.6 * len(lines))


def expected_titles() -> dict[str, str]:
    return {f"chapters/{nb.stem}.html": chapter_title(nb) for nb in chapters()}


def pages_of(site: Path) -> list[str]:
    return sorted(
        p.relative_to(site).as_posix() for p in site.rglob("*.html") if not p.relative_to(site).parts[0].startswith("_")
    )


def check_site(site: Path = SITE, chromium: Path = CHROMIUM, pages: list[str] | None = None) -> tuple[list[str], dict]:
    """Open every page of `site` in headless Chromium; return (problems as 'page: what', stats).
    `pages` (paths relative to `site`) limits which pages are opened; all by default.
    A page passes when its title and first heading name its chapter, every <img> has loaded (naturalWidth > 0), the
    console has no error, nothing was requested from outside the site, every .math element was typeset by MathJax and
    no raw TeX delimiters are left in the visible text; no absolute path of the build machine (`machine_paths`) is in
    its text, code and outputs included, or in an image's alt or title; no code output that looks like a table
    (`table_like`) is wider than its box; every link to another page of the site resolves (no 404) and its #fragment
    exists there."""
    import tempfile
    from playwright.sync_api import sync_playwright

    problems, titles, paths = [], expected_titles(), machine_paths()
    if pages is None:
        pages = pages_of(site)
        problems += [f"{p}: chapter page missing from the site" for p in sorted(set(titles) - set(pages))]
    t0, state, linked = time.time(), {}, {}
    with serve(site) as base, tempfile.TemporaryDirectory() as tmp, sync_playwright() as pw:
        host = urlsplit(base).netloc
        ctx = launch(pw, chromium, Path(tmp))  # an empty profile
        outside: list[tuple[str, str]] = []

        def route(r):
            if urlsplit(r.request.url).netloc == host or r.request.url.startswith(("data:", "blob:")):
                return r.continue_()
            outside.append((current[0], r.request.url))
            r.abort()

        ctx.route("**/*", route)
        page, current = ctx.new_page(), [""]
        console, failed = [], []

        def on(url: str) -> str:  # the page an event came from (events may arrive after the next page was opened)
            return url[len(base) :] if url.startswith(base) else current[0]

        def frame_url(r) -> str:
            try:
                return r.frame.url
            except Exception:
                return ""

        page.on("console", lambda m: m.type == "error" and console.append((on(m.page.url if m.page else ""), m.text)))
        page.on("pageerror", lambda e: console.append((current[0], str(e))))
        page.on(
            "response", lambda r: r.status >= 400 and failed.append((on(frame_url(r.request)), f"{r.status} {r.url}"))
        )
        for rel in pages:
            current[0] = rel
            page.goto(base + rel, wait_until="load")
            s = state[rel] = page.evaluate(PAGE_STATE)
            expect = titles.get(rel) or s["h1"]
            if rel in GENERATED:
                pass
            elif not s["h1"]:
                problems.append(f"{rel}: no <h1> heading")
            elif plain(s["h1"]) != plain(expect):
                problems.append(f"{rel}: first heading {s['h1']!r}, expected {expect!r}")
            if expect and not plain(s["title"]).startswith(plain(expect)):
                problems.append(f"{rel}: title {s['title']!r} does not start with {expect!r}")
            problems += [f"{rel}: image did not load: {i['src']}" for i in s["images"] if not i["ok"]]
            problems += [f"{rel}: math not rendered: {m['tex']!r}" for m in s["math"] if not m["ok"]]
            problems += [
                f"{rel}: absolute path of the build machine {p!r} in the page's text: …{around!r}…"
                for p, around in path_leaks(s["all_text"], paths)
            ]
            problems += [
                f"{rel}: absolute path of the build machine {p!r} in an image's alt or title: {a!r}"
                for a in s["alts"]
                for p, _ in path_leaks(a, paths)
            ]
            problems += [
                f"{rel}: a printed table wider than its box ({w['scroll']} > {w['client']} px), show it as "
                f"a table: {w['text'].strip().splitlines()[0][:80]!r}"
                for w in s["wide_outputs"]
                if table_like(w["text"])
            ]
            for raw in ("$$", "\\(", "\\)", "\\[", "\\begin{"):
                if raw in s["text"]:
                    at = s["text"].index(raw)
                    problems.append(
                        f"{rel}: raw TeX {raw!r} in the visible text: …{s['text'][max(0, at - 40) : at + 40]!r}…"
                    )
            for href in s["links"]:
                u = urlsplit(href)
                if u.netloc == host and u.scheme in ("http", "https"):
                    linked.setdefault(u._replace(query="").geturl(), set()).add(rel)
        problems += [f"{p}: console error: {m}" for p, m in console]
        problems += [f"{p}: requested from outside the site: {u}" for p, u in outside]
        problems += [f"{p}: failed request: {f}" for p, f in failed]
        # every link between pages: the target exists (HTTP status), and its #fragment is an id on it
        t_links, fetched = time.time(), 0
        for url, sources in sorted(linked.items()):
            target, frag = url.split("#", 1) if "#" in url else (url, "")
            rel = unquote(urlsplit(target).path.lstrip("/")) or "index.html"
            if rel.endswith("/"):
                rel += "index.html"
            if rel not in state:
                status, fetched = page.request.get(target).status, fetched + 1
                if status >= 400:
                    problems += [f"{src}: broken link ({status}): {rel}" for src in sorted(sources)]
                    continue
                if not rel.endswith(".html") or not frag:
                    continue
                current[0] = rel
                page.goto(target, wait_until="load")
                state[rel] = page.evaluate(PAGE_STATE)
            if frag and rel in state and unquote(frag) not in state[rel]["ids"]:
                problems += [f"{src}: broken link: {rel}#{frag} (no such anchor)" for src in sorted(sources)]
        ctx.close()
    problems = list(dict.fromkeys(problems))  # a missing image is also a failed request, reported once each
    stats = {
        "pages": len(pages),
        "images": sum(len(s["images"]) for s in state.values()),
        "math": sum(len(s["math"]) for s in state.values()),
        "links": len(linked),
        "fetched": fetched,
        "seconds": round(time.time() - t0, 1),
        "links_seconds": round(time.time() - t_links, 1),
    }
    return problems, stats


def external_assets(site: Path = SITE) -> list[str]:
    "Every script, stylesheet, image or font the HTML would fetch from outside the site: 'page: url'."
    pat = re.compile(r"""<(?:script|img|iframe|source|link)\b[^>]*?\b(?:src|href)=["']((?:https?:)?//[^"']+)""", re.I)
    out = []
    for p in sorted(site.rglob("*.html")):
        for tag in re.finditer(r"<(?:script|img|iframe|source|link)\b[^>]*>", p.read_text(errors="replace"), re.I):
            if tag.group(0).lower().startswith("<link") and not re.search(
                r"rel=[\"']?(stylesheet|preload|icon|modulepreload)", tag.group(0), re.I
            ):
                continue
            m = pat.match(tag.group(0))
            if m:
                out.append(f"{p.relative_to(site)}: {m.group(1)}")
    for p in sorted(site.rglob("*.css")):
        out += [
            f"{p.relative_to(site)}: {u}"
            for u in re.findall(r"url\(\s*['\"]?((?:https?:)?//[^'\")]+)", p.read_text(errors="replace"))
        ]
    return out


def screenshots(site: Path = SITE, out: Path = DOCS / "screenshots", chromium: Path = CHROMIUM) -> list[Path]:
    "A 1280 x 900 view of each chapter in SCREENSHOTS, scrolled to its first figure."
    import tempfile
    from playwright.sync_api import sync_playwright

    out.mkdir(parents=True, exist_ok=True)
    shots = []
    with serve(site) as base, tempfile.TemporaryDirectory() as tmp, sync_playwright() as pw:
        ctx = launch(pw, chromium, Path(tmp))
        page = ctx.new_page()
        for stem, selector in SCREENSHOTS.items():
            page.goto(f"{base}chapters/{stem}.html", wait_until="load")
            page.evaluate(PAGE_STATE)
            page.locator(f"article {selector}").first.evaluate("e => e.scrollIntoView({block: 'center'})")
            shots.append(out / f"{stem}.png")
            page.screenshot(path=str(shots[-1]))
        ctx.close()
    return shots


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["build", "check", "screenshots", "map"])
    ap.add_argument(
        "pages",
        nargs="*",
        help="check: only these pages (relative to the site), e.g. chapters/12_pipeline_parallel.html",
    )
    ap.add_argument("--site", type=Path, default=SITE)
    ap.add_argument("--book", type=Path, default=BOOK, help="executed chapters (another folder: nothing is executed)")
    a = ap.parse_intermixed_args(argv)
    if a.what == "build":
        build(a.site, a.book)
        return 0
    if a.what == "map":
        print(book_map())
        return 0
    chromium, why = ensure_chromium()
    if chromium is None:
        print(f"no browser: {why}")
        return 2
    if a.what == "screenshots":
        print("\n".join(map(str, screenshots(a.site, chromium=chromium))))
        return 0
    problems, stats = check_site(a.site, chromium, a.pages or None)
    problems += [f"{x}: external asset" for x in external_assets(a.site)]
    print("\n".join(problems) or "site ok", f"\n{stats}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
