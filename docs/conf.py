# Sphinx configuration of the book's website (`make docs`; docs/site.py stages the sources and runs sphinx-build).
# Chapters are the notebooks as `tests/test_notebooks.py` executed them under papermill: nothing is executed here.
project = "mtnlg"
author = "mtnlg developers"
copyright = "2026 onwards, mtnlg developers"
html_title = "mtnlg: Megatron-Turing NLG 530B as a book"

import importlib.util
from pathlib import Path

extensions = [
    "myst_nb",  # .md pages and executed .ipynb chapters
    "sphinx.ext.autodoc",  # the API reference, from the package's docstrings
]
# Math: MathJax 3 as the PyPI package `sphinx-mathjax-offline` ships it, copied into the site's _static/mathjax/ and
# loaded from there: no CDN when building or reading. (Its own extension does the same copy after the build, but is not
# declared safe for parallel reading; serving its folder as a static path is.)
html_static_path = [str(Path(importlib.util.find_spec("sphinx-mathjax-offline").origin).parent / "static")]
mathjax_path = "mathjax/tex-chtml.js"

nb_execution_mode = "off"  # outputs come from the papermill runs of the tests
nb_merge_streams = True
nb_output_stderr = "remove"  # progress bars and warnings stay in the notebooks, not on the page
nb_render_text_lexer = "none"  # printed outputs as plain text: no per-line Pygments pass over every output
nb_render_markdown_format = "myst"  # a chapter's display(Markdown(table)) renders as a table (commonmark has none)
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence"]
myst_heading_anchors = 3
suppress_warnings = ["mystnb.unknown_mime_type", "myst.header", "misc.highlighting_failure"]

autodoc_default_options = {"members": True, "show-inheritance": False}
autodoc_typehints = "description"
autodoc_member_order = "bysource"

html_theme = "sphinx_book_theme"
html_theme_options = {
    "home_page_in_toc": True,
    "show_navbar_depth": 1,
    "use_download_button": False,
    "use_fullscreen_button": False,
    "search_bar_text": "Search the book…",
}
html_show_sourcelink = False
html_last_updated_fmt = None
exclude_patterns = ["_build", "**.ipynb_checkpoints"]
html_copy_source = False
html_context = {
    "default_mode": "light"
}  # the theme's light/dark switch starts set: no "invalid theme mode" console error


# nbdev's docstrings are Markdown, not reStructuredText: `code` becomes a literal, everything else is taken literally.
import re


def _markdown_docstring(app, what, name, obj, options, lines):
    for i, line in enumerate(lines):
        parts = re.split(r"(`[^`]+`)", line)
        lines[i] = "".join(
            f"``{p[1:-1].strip()}``"
            if p.startswith("`") and p.endswith("`") and p[1:-1].strip()
            else re.sub(r"([\\*|_`])", r"\\\1", p)
            for p in parts
        )


def setup(app):
    app.connect("autodoc-process-docstring", _markdown_docstring)
