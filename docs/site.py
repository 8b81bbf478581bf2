"""The book as a website: built from the chapters as the tests executed them, checked in a headless Chromium.

    python docs/site.py build          # execute the chapters whose executed copy is missing or stale, then sphinx-build
    python docs/site.py check [PAGE…]  # open every page (or these) in Chromium; print each problem (page: what), exit 1 if any
    python docs/site.py screenshots    # docs/screenshots/*.png of the chapters in SCREENSHOTS

`tests/test_notebooks.py` keeps each chapter it executed under papermill as `runs/book/<name>.ipynb`; `build` stages
those copies with the pages in `docs/` into `runs/site-src/` and renders them with Sphinx + myst-nb (execution off)
into `runs/site/`. Math is MathJax 3 from the `sphinx-mathjax-offline` package, served from the site itself.
"""
from __future__ import annotations
import argparse, functools, http.server, json, os, re, shutil, subprocess, sys, threading, time
from pathlib import Path
from urllib.parse import urlsplit, unquote

ROOT = Path(__file__).resolve().parent.parent
NBS, DOCS = ROOT / "nbs", ROOT / "docs"
BOOK = ROOT / "runs" / "book"          # executed chapters (tests/test_notebooks.py writes them)
SRC, SITE = ROOT / "runs" / "site-src", ROOT / "runs" / "site"
PARTS = {"0": "Foundations", "1": "Part 1: 3D parallelism", "2": "Part 2: kernels", "3": "Part 3: data curation",
         "4": "Part 4: the training recipe", "5": "Part 5: performance", "6": "Part 6: evaluation",
         "7": "Part 7: bias and in-context learning", "9": "Tools"}
GENERATED = {"genindex.html", "py-modindex.html", "search.html"}   # Sphinx's own pages: a title, no <h1>
SCREENSHOTS = {"12_pipeline_parallel": "img", "61_tasks": "img"}   # chapter -> what to scroll to (its first figure)
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


# ---- the chapters ---------------------------------------------------------------------------------------------------
def chapters() -> list[Path]: return sorted(NBS.glob("[0-9]*.ipynb"))

def plain(md: str) -> str:
    "Text as a heading shows it, for comparing: no Markdown backticks, straight quotes, single spaces."
    md = md.replace("`", "").translate(str.maketrans("‘’“”", "''\"\""))
    return re.sub(r"\s+", " ", md).strip()

def chapter_title(nb: Path) -> str:
    "The chapter's `# Title` (the first line of its first markdown cell), as the page shows it."
    cells = json.loads(nb.read_text())["cells"]
    first = next(c for c in cells if c["cell_type"] == "markdown")
    line = "".join(first["source"]).lstrip().splitlines()[0]
    if not line.startswith("# "): raise ValueError(f"{nb.name}: the first markdown cell must start with '# Title'")
    return plain(line[2:])


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
        print(f"executing {len(groups)} chapter group(s) without an up-to-date executed copy: {', '.join(groups)}", flush=True)
        subprocess.run([sys.executable, "-m", "pytest", "-q", *workers, *ids], cwd=ROOT, check=True)
    return groups

def strip_nbdev(nb: dict) -> dict:
    "Drop `#| hide` cells, papermill's injected parameters, and the `#|` directive lines from code the reader sees."
    cells = []
    for c in nb["cells"]:
        if "injected-parameters" in c.get("metadata", {}).get("tags", []): continue
        if c["cell_type"] == "code":
            lines = "".join(c["source"]).splitlines(keepends=True)
            if any(re.match(r"#\|\s*hide\b", l) for l in lines): continue
            c["source"] = "".join(l for l in lines if not l.startswith("#|")).lstrip("\n")
        cells.append(c)
    return {**nb, "cells": cells}

def toctrees() -> str:
    "One captioned table of contents per part of the book, in chapter order, then the API reference."
    parts: dict[str, list[str]] = {}
    for nb in chapters(): parts.setdefault(nb.name[0], []).append(nb.stem)
    out = []
    for digit, stems in parts.items():
        out += ["```{toctree}", f":caption: {PARTS.get(digit, f'Part {digit}')}", ":maxdepth: 1", "",
                *[f"chapters/{s}" for s in stems], "```", ""]
    return "\n".join(out + ["```{toctree}", ":caption: Reference", ":maxdepth: 1", "", "api", "```", ""])

def api_page() -> str:
    "The API reference: every module of the package, its exported names with their docstrings."
    mods = sorted(p.stem for p in (ROOT / "mtnlg").glob("*.py") if not p.stem.startswith("_"))
    lines = ["# API reference", "", "The `mtnlg` package, as nbdev exports it from the chapters: each module's public names.", ""]
    for m in mods:
        lines += [f"## mtnlg.{m}", "", "```{eval-rst}", f".. automodule:: mtnlg.{m}", "```", ""]
    return "\n".join(lines)

def stage(book: Path = BOOK, src: Path = SRC) -> None:
    "Sphinx's source folder: docs/'s pages, the executed chapters (nbdev directives stripped), their figures, the API page."
    missing = [nb.name for nb in chapters() if not (book / nb.name).exists()]
    if missing: raise FileNotFoundError(f"no executed copy in {book} of: {', '.join(missing)}")
    shutil.rmtree(src, ignore_errors=True)
    shutil.copytree(DOCS, src, ignore=shutil.ignore_patterns("site.py", "__pycache__", "screenshots"))
    (src / "chapters").mkdir()
    for nb in chapters():
        (src / "chapters" / nb.name).write_text(json.dumps(strip_nbdev(json.loads((book / nb.name).read_text()))))
    if (NBS / "figures").exists(): shutil.copytree(NBS / "figures", src / "chapters" / "figures")
    index = src / "index.md"
    index.write_text(index.read_text().replace("<!-- parts: docs/site.py writes one table of contents per part here -->", toctrees()))
    (src / "api.md").write_text(api_page())

def build(site: Path = SITE, book: Path = BOOK) -> Path:
    "Execute what is missing from `book` (the tests' copies only), stage, render: the site's index.html."
    t0 = time.time()
    if book == BOOK: execute_missing()
    stage(book)
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    subprocess.run([sys.executable, "-m", "sphinx", "-b", "html", "-q", "-j", "2", "-d", str(SRC.parent / "site-doctrees"),
                    str(SRC), str(site)], cwd=ROOT, check=True, env=env)
    print(f"site built in {time.time() - t0:.1f} s: {site / 'index.html'}", flush=True)
    return site / "index.html"


# ---- the browser ----------------------------------------------------------------------------------------------------
def ensure_chromium() -> tuple[Path | None, str]:
    "Debian's chromium: installed with apt-get when missing and we are root. (path, '') or (None, why not)."
    if CHROMIUM.exists(): return CHROMIUM, ""
    if not shutil.which("apt-get"): return None, f"no {CHROMIUM} and no apt-get to install Debian's chromium"
    if os.geteuid() != 0: return None, f"no {CHROMIUM}, and not root to `apt-get install chromium`"
    install = ["apt-get", "-o", "DPkg::Lock::Timeout=600", "install", "-y", "-q", "chromium"]
    for step in ([install], [["apt-get", "-o", "DPkg::Lock::Timeout=600", "update", "-q"], install]):
        for cmd in step: subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                        env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
        if CHROMIUM.exists(): return CHROMIUM, ""
    return None, "apt-get could not install Debian's chromium (no package source reachable?)"

class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *a): pass

class serve:
    "The site on http://127.0.0.1:<free port>/ from a thread, for a `with` block."
    def __init__(self, site: Path): self.site = site
    def __enter__(self):
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(self.site)))
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/"
    def __exit__(self, *exc): self.httpd.shutdown(); self.httpd.server_close()

def launch(playwright, chromium: Path, user_data: Path):
    return playwright.chromium.launch_persistent_context(str(user_data), executable_path=str(chromium), headless=True,
                                                        args=CHROMIUM_FLAGS, viewport={"width": 1280, "height": 900})

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
    math: [...document.querySelectorAll('.math')].map(m => ({tex: m.textContent.slice(0, 60), ok: !!m.querySelector('mjx-container')})),
    text: visible.textContent,
    links: [...document.querySelectorAll('a[href]')].map(a => a.href),
    ids: [...document.querySelectorAll('[id]')].map(e => e.id),
  };
}"""

def expected_titles() -> dict[str, str]:
    return {f"chapters/{nb.stem}.html": chapter_title(nb) for nb in chapters()}

def pages_of(site: Path) -> list[str]:
    return sorted(p.relative_to(site).as_posix() for p in site.rglob("*.html") if not p.relative_to(site).parts[0].startswith("_"))

def check_site(site: Path = SITE, chromium: Path = CHROMIUM, pages: list[str] | None = None) -> tuple[list[str], dict]:
    """Open every page of `site` in headless Chromium; return (problems as 'page: what', stats).
    `pages` (paths relative to `site`) limits which pages are opened; all by default.
    A page passes when its title and first heading name its chapter, every <img> has loaded (naturalWidth > 0), the
    console has no error, nothing was requested from outside the site, every .math element was typeset by MathJax and
    no raw TeX delimiters are left in the visible text; every link to another page of the site resolves (no 404) and
    its #fragment exists there."""
    import tempfile
    from playwright.sync_api import sync_playwright
    problems, titles = [], expected_titles()
    if pages is None:
        pages = pages_of(site)
        problems += [f"{p}: chapter page missing from the site" for p in sorted(set(titles) - set(pages))]
    t0, state, linked = time.time(), {}, {}
    with serve(site) as base, tempfile.TemporaryDirectory() as tmp, sync_playwright() as pw:
        host = urlsplit(base).netloc
        ctx = launch(pw, chromium, Path(tmp))   # an empty profile
        outside: list[tuple[str, str]] = []
        def route(r):
            if urlsplit(r.request.url).netloc == host or r.request.url.startswith(("data:", "blob:")): return r.continue_()
            outside.append((current[0], r.request.url)); r.abort()
        ctx.route("**/*", route)
        page, current = ctx.new_page(), [""]
        console, failed = [], []
        def on(url: str) -> str:   # the page an event came from (events may arrive after the next page was opened)
            return url[len(base):] if url.startswith(base) else current[0]
        def frame_url(r) -> str:
            try: return r.frame.url
            except Exception: return ""
        page.on("console", lambda m: m.type == "error" and console.append((on(m.page.url if m.page else ""), m.text)))
        page.on("pageerror", lambda e: console.append((current[0], str(e))))
        page.on("response", lambda r: r.status >= 400 and failed.append((on(frame_url(r.request)), f"{r.status} {r.url}")))
        for rel in pages:
            current[0] = rel
            page.goto(base + rel, wait_until="load")
            s = state[rel] = page.evaluate(PAGE_STATE)
            expect = titles.get(rel) or s["h1"]
            if rel in GENERATED: pass
            elif not s["h1"]: problems.append(f"{rel}: no <h1> heading")
            elif plain(s["h1"]) != plain(expect): problems.append(f"{rel}: first heading {s['h1']!r}, expected {expect!r}")
            if expect and not plain(s["title"]).startswith(plain(expect)): problems.append(f"{rel}: title {s['title']!r} does not start with {expect!r}")
            problems += [f"{rel}: image did not load: {i['src']}" for i in s["images"] if not i["ok"]]
            problems += [f"{rel}: math not rendered: {m['tex']!r}" for m in s["math"] if not m["ok"]]
            for raw in ("$$", "\\(", "\\)", "\\[", "\\begin{"):
                if raw in s["text"]:
                    at = s["text"].index(raw)
                    problems.append(f"{rel}: raw TeX {raw!r} in the visible text: …{s['text'][max(0, at - 40):at + 40]!r}…")
            for href in s["links"]:
                u = urlsplit(href)
                if u.netloc == host and u.scheme in ("http", "https"): linked.setdefault(u._replace(query="").geturl(), set()).add(rel)
        problems += [f"{p}: console error: {m}" for p, m in console]
        problems += [f"{p}: requested from outside the site: {u}" for p, u in outside]
        problems += [f"{p}: failed request: {f}" for p, f in failed]
        # every link between pages: the target exists (HTTP status), and its #fragment is an id on it
        t_links, fetched = time.time(), 0
        for url, sources in sorted(linked.items()):
            target, frag = url.split("#", 1) if "#" in url else (url, "")
            rel = unquote(urlsplit(target).path.lstrip("/")) or "index.html"
            if rel.endswith("/"): rel += "index.html"
            if rel not in state:
                status, fetched = page.request.get(target).status, fetched + 1
                if status >= 400:
                    problems += [f"{src}: broken link ({status}): {rel}" for src in sorted(sources)]
                    continue
                if not rel.endswith(".html") or not frag: continue
                current[0] = rel; page.goto(target, wait_until="load"); state[rel] = page.evaluate(PAGE_STATE)
            if frag and rel in state and unquote(frag) not in state[rel]["ids"]:
                problems += [f"{src}: broken link: {rel}#{frag} (no such anchor)" for src in sorted(sources)]
        ctx.close()
    problems = list(dict.fromkeys(problems))   # a missing image is also a failed request, reported once each
    stats = {"pages": len(pages), "images": sum(len(s["images"]) for s in state.values()),
             "math": sum(len(s["math"]) for s in state.values()), "links": len(linked), "fetched": fetched,
             "seconds": round(time.time() - t0, 1), "links_seconds": round(time.time() - t_links, 1)}
    return problems, stats

def external_assets(site: Path = SITE) -> list[str]:
    "Every script, stylesheet, image or font the HTML would fetch from outside the site: 'page: url'."
    pat = re.compile(r"""<(?:script|img|iframe|source|link)\b[^>]*?\b(?:src|href)=["']((?:https?:)?//[^"']+)""", re.I)
    out = []
    for p in sorted(site.rglob("*.html")):
        for tag in re.finditer(r"<(?:script|img|iframe|source|link)\b[^>]*>", p.read_text(errors="replace"), re.I):
            if tag.group(0).lower().startswith("<link") and not re.search(r"rel=[\"']?(stylesheet|preload|icon|modulepreload)", tag.group(0), re.I):
                continue
            m = pat.match(tag.group(0))
            if m: out.append(f"{p.relative_to(site)}: {m.group(1)}")
    for p in sorted(site.rglob("*.css")):
        out += [f"{p.relative_to(site)}: {u}" for u in re.findall(r"url\(\s*['\"]?((?:https?:)?//[^'\")]+)", p.read_text(errors="replace"))]
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
    ap.add_argument("what", choices=["build", "check", "screenshots"])
    ap.add_argument("pages", nargs="*", help="check: only these pages (relative to the site), e.g. chapters/12_pipeline_parallel.html")
    ap.add_argument("--site", type=Path, default=SITE)
    ap.add_argument("--book", type=Path, default=BOOK, help="executed chapters (another folder: nothing is executed)")
    a = ap.parse_intermixed_args(argv)
    if a.what == "build": build(a.site, a.book); return 0
    chromium, why = ensure_chromium()
    if chromium is None: print(f"no browser: {why}"); return 2
    if a.what == "screenshots": print("\n".join(map(str, screenshots(a.site, chromium=chromium)))); return 0
    problems, stats = check_site(a.site, chromium, a.pages or None)
    problems += [f"{x}: external asset" for x in external_assets(a.site)]
    print("\n".join(problems) or "site ok", f"\n{stats}")
    return 1 if problems else 0

if __name__ == "__main__": sys.exit(main())
