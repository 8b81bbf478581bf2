"""Chapter 30's jusText (`justext_paragraphs`: one walk of lxml's tree that does the Cleaner's work as it goes) against
the jusText library itself: every paragraph, its text, DOM path, counts and classes, on pages built to hit each thing
the Cleaner does (kill, remove, the text either joins, comments, processing instructions, <br><br>, fragments, an XML
encoding declaration), the benchmark pages and the crawl fixture's pages."""

import gzip
import json
import random
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parent.parent
justext = pytest.importorskip("justext")
from mtnlg.extract import JUSTEXT_PARAMS, justext_paragraphs, html_to_text, _fewer_words, _WORD

ENGLISH = justext.get_stoplist("English")
GOOD = b"the river rose and the people of the town moved to the hills with all that they had " * 3
EDGE = [
    b"<?xml-stylesheet href='a'?>tail<!--c-->ctail<html><body><p>" + GOOD + b"</p></body></html>tail2<?pi x?>pitail",
    b"<!DOCTYPE html><html><head><title>T</title></head><body>a<script>x</script>  <span>b</span> c<!--c-->  <b>d</b>"
    b"<form>in form<input>tail of input</form>after form</body></html>",
    b"<html><body><div>x<?php echo 1 ?>  y<br><br>z<br>w</div><object>o<param "
    b"name=a>ptail</param><embed>e</embed></object>"
    b"<param>free</param>ftail<link rel='Stylesheet'>ltail<link rel=next>l2tail<image src=x>im</image></body></html>",
    b"<html><body><p>a<select><option>o</option></select>s tail<textarea>t</textarea><button>b</button>btail</p>"
    b"<iframe>if<b>bold</b>x</iframe>iftail<h2>Heading here</h2><p>" + GOOD + b"</p></body></html>",
    b"<html><body><a href=x>link text</a> text <a>more link</a><div><br></div><div><br> <br></div><table><tr><td>cell "
    b"&copy; 2020</td></tr></table><applet><p>hidden</p></applet>after applet</body></html>",
    b"<html><body><image><p>"
    + GOOD
    + b"</p></image><form><div><p>in form div</p></div></form><object><h2>in object</h2>"
    b"<param><p>x</p></param></object><iframe><h1>t</h1></iframe><p>" + GOOD + b"</p></body></html>",
    b"<p>a fragment only " + GOOD + b"</p>",
    b"<div>two</div><div>fragments</div>",
    b"   <html><body><layer>lay<form>f<p>in p</p>ft</form>lt</layer>end</body></html>",
    b"<?xml version='1.0' encoding='utf-8'?><html><body><p>an XML declaration " + GOOD + b"</p></body></html>",
    b"<!-- only a comment -->",
    b"<html><body><p>A<!--x-->B<!--y--> <!--z-->C</p><pre>  spaced\n\n  text "
    b"</pre><p>\xc2\xa0\xc2\xa0</p></body></html>",
    b"<html><body><form><form>nested</form>x</form><object><object><param>p</param>q</object></object></body></html>",
    b"<html><body><h1>Title</h1><ul><li>one</li><li>two <a href=#>l</a></li></ul><h3>Short</h3><p>"
    + GOOD
    + b"</p></body></html>",
    b"<html><head><meta charset='windows-1252'></head><body><p>caf\xe9 " + GOOD + b"</p></body></html>",
]


def fields(paragraphs) -> list:
    return [
        (p.text, p.dom_path, p.words_count, p.chars_count_in_links, p.tags_count, p.heading, p.cf_class, p.class_type)
        for p in paragraphs
    ]


def outcome(f, *a, **k):
    try:
        return fields(f(*a, **k))
    except Exception as e:
        return repr(e)


def crawl_pages() -> list[str]:
    return [
        json.loads(l)["html"]
        for f in sorted((ROOT / "tests/fixtures/warc/jsonl").glob("*.jsonl"))
        for l in f.read_text().splitlines()
        if l.strip()
    ]


@pytest.mark.parametrize(
    "params",
    [JUSTEXT_PARAMS, {}, {"no_headings": True, "max_heading_distance": 50}],
    ids=["ours", "defaults", "no-headings"],
)
def test_the_edge_pages_are_split_and_classified_as_the_library_does(params):
    for html in EDGE:
        for encoding in (None, "utf-8"):
            assert outcome(justext_paragraphs, html, ENGLISH, encoding=encoding, **params) == outcome(
                justext.justext, html, ENGLISH, encoding=encoding, **params
            ), html


def test_benchmark_and_crawl_pages_are_split_and_classified_as_the_library_does():
    pages = [
        gzip.decompress(f.read_bytes())
        for f in sorted((ROOT / "tests/fixtures/html/article-extraction-benchmark/html").glob("*.html.gz"))
    ]
    crawl = crawl_pages()
    assert (len(pages), len(crawl)) == (30, 6)
    for html in pages:
        assert fields(justext_paragraphs(html, ENGLISH, **JUSTEXT_PARAMS)) == fields(
            justext.justext(html, ENGLISH, **JUSTEXT_PARAMS)
        )
    for html in crawl:  # a str: what the WARC reader yields
        assert fields(justext_paragraphs(html, ENGLISH, encoding="utf-8", **JUSTEXT_PARAMS)) == fields(
            justext.justext(html, ENGLISH, encoding="utf-8", **JUSTEXT_PARAMS)
        )


def reference_html_to_text(html) -> str:
    "html_to_text as it was written on top of the library: a str encoded to UTF-8 ('replace'), blank bytes -> ''."
    import lxml.etree

    encoding = "utf-8" if isinstance(html, str) else None
    if isinstance(html, str):
        html = html.encode("utf-8", "replace")
    if not html.strip():
        return ""
    try:
        paragraphs = justext.justext(html, ENGLISH, encoding=encoding, **JUSTEXT_PARAMS)
    except lxml.etree.ParserError:
        return ""
    return "\n".join(p.text for p in paragraphs if not p.is_boilerplate)


def test_html_to_text_of_a_str_is_that_of_its_utf8_bytes():
    good = GOOD.decode()
    cases = [
        "",
        " \t\n",
        "\u00a0",
        "\u2003 \u00a0",
        "\u00a0<p>" + good + "</p>",
        f"<p>lone \ud800 surrogate {good}</p>",
        f"<html><body><p>caf\u00e9 \u2019quoted\u2019 {good}</p><p>\udfff</p></body></html>",
        "<!-- c -->",
    ]
    for html in cases + crawl_pages()[:10]:
        assert html_to_text(html) == reference_html_to_text(html), html[:80]
    assert html_to_text(f"<p>lone \ud800 surrogate {good}</p>").startswith("lone ? surrogate")


def test_fewer_words_is_the_word_count_test():
    rng = random.Random(0)
    texts = [
        "",
        "   ",
        "one",
        "a b",
        "x_y z-w",
        "\u00e9t\u00e9 caf\u00e9 !!",
        *(
            " ".join(rng.choice(["w", "--", "a1", "\u00fc", ".", ""]) for _ in range(rng.randrange(30)))
            for _ in range(200)
        ),
    ]
    for text in texts:
        for n in range(0, 25):
            assert _fewer_words(text, n) == (len(_WORD.findall(text)) < n), (text, n)
