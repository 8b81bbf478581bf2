"""A Common Crawl-like input for bench/curate.py, made from what the project holds: folders of `.warc.gz` files in
the layout Common Crawl ships (warcinfo, then request / response / metadata records per capture, each record its own
gzip member, WARC/1.0 headers with payload types and digests), whose HTML responses are real pages of the
article-extraction benchmark (their own markup: navigation, scripts, styles, footers) with the article replaced by
Wikipedia paragraphs, plus a few non-HTML responses, and planted near-duplicates (the same paragraphs on another site's
template, one word deleted from every other paragraph) whose ids are written to `planted.json`.

    python bench/crawl.py OUT --shards 8 --shard-mb 128    # 1 GB: .warc.gz under OUT/cc/, OUT/wikipedia/*.jsonl.zst"""

import argparse
import io
import json
import re
import sys
import uuid
from multiprocessing import Pool
from pathlib import Path
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

ARTICLE = "@@ARTICLE@@"
PLANTED_EVERY = 20  # one page in 20 is a near-duplicate of an earlier page of its shard
NON_HTML_EVERY = 50  # one capture in 50 is a PDF (dropped by both pipelines as a non-HTML response)


def _norm(s: str) -> str:
    return re.sub(r"\s+", " ", s).strip()


def templates(html_dir) -> list[str]:
    """The benchmark pages with their article's paragraphs replaced by one slot (pages where fewer than 2 are found are
    left out)."""
    import lxml.html
    from mtnlg.extract import load_benchmark_pages, decode_html

    out = []
    for _, html, truth in load_benchmark_pages(html_dir):
        body, doc = _norm(truth), lxml.html.fromstring(decode_html(html)[0])  # bytes alone: lxml would guess Latin-1
        ps = [p for p in doc.iter("p") if len(t := _norm(p.text_content())) > 40 and t[:40] in body]
        if len(ps) < 2:
            continue
        for p in ps[1:]:
            p.drop_tree()
        slot, tail = ps[0], ps[0].tail
        slot.clear()
        slot.tag, slot.text, slot.tail = "div", ARTICLE, tail
        out.append(lxml.html.tostring(doc, encoding="unicode"))
    return out


def paragraphs(corpus_file, min_words: int = 30) -> list[str]:
    "Every line of at least `min_words` words of the Wikipedia articles (one JSON object per article)."
    out = []
    with open(corpus_file) as f:
        for line in f:
            out += [p for p in json.loads(line)["text"].split("\n") if len(p.split()) >= min_words]
    return out


def page(template: str, title: str, paras: list[str]) -> str:
    from html import escape

    return template.replace(ARTICLE, f"<h1>{escape(title)}</h1>\n" + "\n".join(f"<p>{escape(p)}</p>" for p in paras), 1)


def _delete_word(p: str, rng) -> str:
    w = p.split()
    del w[int(rng.integers(len(w)))]
    return " ".join(w)


def write_shard(path, target_bytes: int, seed: int, templates: list, paras: list) -> dict:
    """Write captures until the file holds `target_bytes` of gzip; return counts and the planted (copy, original)
    WARC-Record-ID pairs."""
    from warcio.warcwriter import WARCWriter
    from warcio.statusandheaders import StatusAndHeaders

    rng, path = np.random.default_rng(seed), Path(path)
    pages, planted, counts = [], [], {"html": 0, "pdf": 0, "planted": 0}
    with open(path, "wb") as f:
        w = WARCWriter(f, gzip=True)
        info = w.create_warcinfo_record(
            path.name, {"software": "mtnlg bench/crawl.py", "format": "WARC File Format 1.0"}
        )
        w.write_record(info)
        n = 0
        while f.tell() < target_bytes:
            n += 1
            host = f"site{int(rng.integers(100_000))}.example.com"
            url = f"https://{host}/{n}/{uuid.UUID(int=int(rng.integers(1 << 62)) << 64 | n).hex[:12]}.html"
            if n % NON_HTML_EVERY == 0:
                body, ctype, kind = b"%PDF-1.4\n" + rng.bytes(20_000), "application/pdf", "pdf"
            else:
                if n % PLANTED_EVERY == 0 and pages:
                    src_id, title, ps = pages[int(rng.integers(len(pages)))]
                    ps = [_delete_word(p, rng) if i % 2 else p for i, p in enumerate(ps)]
                else:
                    src_id, title = None, paras[int(rng.integers(len(paras)))][:60]
                    ps = [paras[i] for i in rng.integers(0, len(paras), int(rng.integers(4, 30)))]
                body = page(templates[int(rng.integers(len(templates)))], title, ps).encode("utf-8")
                ctype, kind = "text/html; charset=UTF-8", "html"
            req = w.create_warc_record(
                url,
                "request",
                http_headers=StatusAndHeaders(
                    f"GET /{n} HTTP/1.1",
                    [("Host", host), ("User-Agent", "CCBot/2.0 (https://commoncrawl.org/faq/)")],
                    is_http_request=True,
                ),
            )
            http = StatusAndHeaders(
                "200 OK", [("Content-Type", ctype), ("Content-Length", str(len(body)))], protocol="HTTP/1.1"
            )
            resp = w.create_warc_record(
                url,
                "response",
                payload=io.BytesIO(body),
                http_headers=http,
                warc_headers_dict={"WARC-Identified-Payload-Type": ctype.split(";")[0]},
            )
            meta = w.create_warc_record(
                url,
                "metadata",
                payload=io.BytesIO(b"fetchTimeMs: 120\ncharset-detected: UTF-8\n"),
                warc_content_type="application/warc-fields",
            )
            for r in (req, resp, meta):
                w.write_record(r)
            counts[kind] += 1
            if kind == "html":
                rid = resp.rec_headers.get_header("WARC-Record-ID")
                if src_id:
                    planted.append([rid, src_id])
                    counts["planted"] += 1
                else:
                    pages.append((rid, title, ps))
    return {"file": path.name, "bytes": path.stat().st_size, **counts, "planted_pairs": planted}


def write_wikipedia(corpus_file, out_dir) -> Path:
    "The Wikipedia articles as The Pile ships its shards: JSONL in zstd (the quality classifier's positives)."
    import zstandard

    out = Path(out_dir) / "wiki-000.jsonl.zst"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(zstandard.ZstdCompressor(level=3).compress(Path(corpus_file).read_bytes()))
    return out


def make_input(out, shards: int, shard_bytes: int, seed: int = 0, workers: int = 2) -> dict:
    """Build OUT/cc/crawl-NNNNN.warc.gz and OUT/wikipedia/wiki-000.jsonl.zst; return (and write OUT/input.json) what it
    holds."""
    from mtnlg.catalog import data_path

    out = Path(out)
    (out / "cc").mkdir(parents=True, exist_ok=True)
    corpus = min(data_path("wikipedia").glob("*train.jsonl"))
    tpl, paras = templates(data_path("html")), paragraphs(corpus)
    jobs = [(out / "cc" / f"crawl-{i:05d}.warc.gz", shard_bytes, seed * 1000 + i, tpl, paras) for i in range(shards)]
    with Pool(workers) as pool:
        files = pool.starmap(write_shard, jobs)
    wiki = write_wikipedia(corpus, out / "wikipedia")
    info = {
        "shards": shards,
        "shard_bytes_target": shard_bytes,
        "warc_bytes": sum(f["bytes"] for f in files),
        "html_pages": sum(f["html"] for f in files),
        "non_html": sum(f["pdf"] for f in files),
        "planted_pairs": [p for f in files for p in f["planted_pairs"]],
        "templates": len(tpl),
        "paragraphs": len(paras),
        "wikipedia": {"file": str(wiki.relative_to(out)), "bytes": wiki.stat().st_size, "source": str(corpus)},
        "files": [{k: v for k, v in f.items() if k != "planted_pairs"} for f in files],
    }
    (out / "input.json").write_text(json.dumps(info, indent=1))
    return info


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--shard-mb", type=float, default=128)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args()
    info = make_input(a.out, a.shards, int(a.shard_mb * 1e6), a.seed, a.workers)
    print(
        f"{info['warc_bytes'] / 1e9:.2f} GB of .warc.gz in {a.shards} shards: {info['html_pages']:,} HTML pages "
        f"({len(info['planted_pairs']):,} planted near-duplicates), {info['non_html']} PDFs; {a.out}/input.json"
    )
