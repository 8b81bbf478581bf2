"""A small crawl of good pages, as a new user would first try `mtnlg curate --config scaled_configs/curate-cc.yaml`:
the article-extraction benchmark's 181 real news and blog pages (the data setting's html/) as six .warc.gz files, and
the first 600 Wikipedia articles of the data setting's corpus as one `.jsonl.zst` shard (The Pile's container).

    MTNLG_DATA=DIR python bench/good_pages_crawl.py OUT
    # then: mtnlg curate --config scaled_configs/curate-cc.yaml --set input_dir=OUT

Chapter 31 reports what the quality filter does to it, in-sample and cross-fitted."""

import gzip
import io
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def make(out, files: int = 6, articles: int = 600):
    import zstandard
    from warcio.warcwriter import WARCWriter
    from warcio.statusandheaders import StatusAndHeaders
    from mtnlg.catalog import data_path

    html = data_path("html")
    truth = json.loads((html / "ground-truth.json").read_text())
    pages = sorted((html / "html").glob("*.html.gz"))
    out = Path(out)
    (out / "cc").mkdir(parents=True, exist_ok=True)
    (out / "wikipedia").mkdir(parents=True, exist_ok=True)
    for k in range(files):
        with open(out / "cc" / f"crawl-{k:03d}.warc.gz", "wb") as f:
            w = WARCWriter(f, gzip=True)
            for p in pages[k::files]:
                body = gzip.decompress(p.read_bytes())
                http = StatusAndHeaders(
                    "200 OK", [("Content-Type", "text/html"), ("Content-Length", str(len(body)))], protocol="HTTP/1.1"
                )
                w.write_record(
                    w.create_warc_record(
                        truth[p.name[:-8]]["url"],
                        "response",
                        payload=io.BytesIO(body),
                        http_headers=http,
                        warc_headers_dict={"WARC-Date": "2026-11-27T00:00:00Z"},
                    )
                )
    wiki = min(data_path("wikipedia").glob("*train.jsonl"))
    lines = [l for _, l in zip(range(articles), open(wiki))]
    (out / "wikipedia" / "wiki-000.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress("".join(lines).encode()))
    return len(pages), len(lines)


if __name__ == "__main__":
    print("pages, articles:", make(sys.argv[1]))
