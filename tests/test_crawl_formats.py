"""The same pages as WARC, JSONL (plain, .gz, .zst) and parquet give byte-identical curated output (issue 44);
every bad record is counted with its reason; bad input is a one-line error or counted and skipped. WARC files with one
fault in page 5 (tests/fixtures/warc/make_faulty.py) lose page 5 at most, and say why (issue 52).

What the comparison excludes, and why: the `id` field of every stage's documents (it names the source: file and
line / WARC-Record-ID / row), the ids inside `dedup_drops/` and `dedup_signatures/*.npz` (the same ids; their
decisions and signatures are compared), `manifests/` and `summary.json` (paths, seconds, examples with file
positions; their counts are compared separately — the extract counts differ by exactly the WARC's responses that
are no pages; its other records are noted beside the documents), and the output directory's own path inside
`blend/megatron_data_path.txt`. Everything else — every stage's documents (text, url, dataset, quality score), the
quality model, the task n-grams, the tokenizer, the per-shard and merged `.bin/.idx`, the blend's train/valid JSONL — is
compared byte for byte."""

import json
import re
import shutil
from pathlib import Path
import numpy as np
import pytest
from mtnlg.config import ConfigError
from mtnlg.data import ReadReport

ROOT = Path(__file__).resolve().parent.parent
FX = ROOT / "tests/fixtures/warc"
FORMATS = {"warc": {}, "jsonl": {}, "jsonl-gz": {}, "jsonl-zst": {}, "parquet": {"text_column": "content"}}
WARC_ONLY = {
    "non-HTML response (image/png)": 1,
    "non-HTML response (text/plain)": 1,
    "malformed WARC record (Content-Length)": 1,
    "truncated WARC record": 1,
}
WARC_NOTED = [
    {"WARC warcinfo record": 1, "WARC request record": 1, "WARC metadata record": 1},
    {},
    {"bytes skipped (not a WARC record)": 7, "bytes skipped (unreadable gzip data)": 4510},
]  # "hello\r\n"; the half member


def config_yaml(tmp: Path, crawl: dict, **extra) -> Path:
    """A curation of the wikipedia fixture (curated text, the quality classifier's positives) and the six crawl pages
    (its negatives, read through the format's reader). The Pareto filter runs on wikipedia, so that every crawl page
    that survives extraction reaches the indexed dataset (filtered, the classifier trained against them drops them
    all)."""
    cfg = {
        "name": "formats",
        "input_dir": str(tmp / "in"),
        "output_dir": str(tmp / "out"),
        "seed": 1234,
        "workers": 1,
        "datasets": [
            {"name": "wikipedia", "format": "text", "weight": 0.7, "quality_filter": True},
            {"name": "crawl", "format": "html", "weight": 0.3, **crawl},
        ],
        "quality": {"positive_datasets": ["wikipedia"], "negative_datasets": ["crawl"]},
        "decontaminate": {"eval_dir": str(ROOT / "tests/fixtures/curation/eval"), "tasks": ["boolq", "lambada"]},
        "tokenize": {"tokenizer": "train-bpe", "vocab_size": 512},
        "blend": {"valid_fraction": 0.1, "seq_length": 64, "num_samples": 50},
        **extra,
    }
    (tmp / "in").mkdir(parents=True, exist_ok=True)
    p = tmp / "curate.yaml"
    p.write_text(json.dumps(cfg))
    return p


def run_format(tmp: Path, fmt: str) -> Path:
    from mtnlg.curate import curate
    from mtnlg.curate_config import load_curate_config

    shutil.copytree(ROOT / "tests/fixtures/curation/raw/wikipedia", tmp / "in/wikipedia")
    shutil.copytree(FX / fmt, tmp / "in/crawl")
    curate(load_curate_config(config_yaml(tmp, FORMATS[fmt])), progress=False, log=lambda *a: None)
    return tmp / "out"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return {fmt: run_format(tmp_path_factory.mktemp(fmt), fmt) for fmt in FORMATS}


def comparable(out: Path) -> dict:
    """{relative path: bytes} of everything curation wrote, with the source-naming fields taken out (see the module
    docstring)."""
    got = {}
    for p in sorted(out.rglob("*")):
        rel = str(p.relative_to(out))
        if not p.is_file() or rel.startswith("manifests/") or rel == "summary.json":
            continue
        if p.suffix == ".jsonl":
            data = "".join(
                json.dumps({k: v for k, v in json.loads(l).items() if k != "id"}, ensure_ascii=False) + "\n"
                for l in p.read_text(encoding="utf-8").splitlines()
            ).encode()
        elif rel.startswith("dedup_drops/"):
            data = json.dumps(sorted(json.loads(p.read_text()).values())).encode()
        elif rel.startswith("dedup_signatures/"):
            z = np.load(p, allow_pickle=True)
            data = z["sig"].tobytes() + "|".join(z["datasets"]).encode()
        elif rel == "blend/megatron_data_path.txt":
            data = p.read_bytes().replace(str(out).encode(), b"<out>")
        else:
            data = p.read_bytes()
        got[rel] = data
    return got


def test_same_pages_give_byte_identical_output_in_every_format(runs):
    ref = comparable(runs["warc"])
    assert {
        "indexed/crawl.bin",
        "indexed/crawl.idx",
        "tokenizer.json",
        "blend/train.jsonl",
        "quality_models/fold0-of-5.bin",
        "decontaminate/crawl/crawl-000.jsonl",
    } <= set(ref)
    for fmt in FORMATS:
        got = comparable(runs[fmt])
        assert sorted(got) == sorted(ref), fmt
        for rel in ref:
            assert got[rel] == ref[rel], (fmt, rel)
    crawl_docs = [json.loads(l) for f in sorted((runs["warc"] / "extract/crawl").glob("*.jsonl")) for l in open(f)]
    curated = (runs["warc"] / "decontaminate/crawl/crawl-000.jsonl").read_text(encoding="utf-8")
    assert (
        "headline reads \u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8 in Japanese" in curated
    )  # shift_jis, declared only in a meta tag
    assert len(crawl_docs) >= 4 and all(
        d["url"].startswith("https://") for d in crawl_docs
    )  # the URL travels with the text
    assert all(d["id"].split(":", 1)[1].startswith("<urn:uuid:") for d in crawl_docs)  # WARC ids name the record
    jsonl_ids = [
        json.loads(l)["id"] for f in sorted((runs["jsonl-zst"] / "extract/crawl").glob("*.jsonl")) for l in open(f)
    ]
    assert jsonl_ids[0] == "crawl/crawl-000:1"  # JSONL ids name the line
    parquet_ids = [
        json.loads(l)["id"] for f in sorted((runs["parquet"] / "extract/crawl").glob("*.jsonl")) for l in open(f)
    ]
    assert parquet_ids[0] == "crawl/crawl-000:row1"  # parquet ids name the row
    for stage in ("quality", "dedup", "decontaminate"):  # and every later stage keeps the URL
        assert all("url" in json.loads(l) for f in (runs["warc"] / stage / "crawl").glob("*.jsonl") for l in open(f)), (
            stage
        )


def test_manifest_counts_every_record_with_its_reason(runs):
    s = {fmt: json.loads((out / "summary.json").read_text())["stages"] for fmt, out in runs.items()}
    for fmt in FORMATS:
        for stage, t in s[fmt].items():
            assert t["docs_in"] == t["kept"] + sum(t["dropped"].values()), (fmt, stage)
    ex = {
        fmt: {
            n: json.loads((runs[fmt] / f"manifests/extract/crawl/crawl-00{i}.json").read_text())
            for i, n in enumerate("abc")
        }
        for fmt in FORMATS
    }
    warc = [ex["warc"][n] for n in "abc"]
    # crawl-000.warc.gz: 3 pages, png, robots.txt (+ warcinfo, request, metadata: noted); crawl-001.warc: 2 pages;
    # crawl-002: malformed, 1 page, truncated
    assert [m["docs_in"] for m in warc] == [5, 2, 3]  # responses, not records
    assert (
        [m["dropped"] for m in warc]
        == [  # exactly these, nothing else
            {r: 1 for r in list(WARC_ONLY)[:2]},
            {},
            {"malformed WARC record (Content-Length)": 1, "truncated WARC record": 1},
        ]
    )
    assert [m["extra"].get("noted", {}) for m in warc] == WARC_NOTED
    assert s["warc"]["extract"]["noted"] == {**WARC_NOTED[0], **WARC_NOTED[2]}
    for fmt in set(FORMATS) - {"warc"}:
        for n in "abc":
            m, w = ex[fmt][n], ex["warc"][n]
            assert m["kept"] == w["kept"] and m["docs_in"] == w["docs_in"] - sum(
                w["dropped"].get(r, 0) for r in WARC_ONLY
            ), (fmt, n)
    where = [e for m in warc for e in m["examples"] if e[1] in WARC_ONLY]
    assert len(where) == 4 and all(
        ".warc" in e[0] and ":@" in e[0] for e in where
    )  # file:@byte-offset of each bad record


def test_bad_input_is_a_clear_error_or_counted(tmp_path):
    from mtnlg.curate_config import load_curate_config
    from mtnlg.curate_stages import discover_shards
    from mtnlg.extract import iter_documents, extract_shard

    with pytest.raises(FileNotFoundError, match="not found"):
        list(iter_documents(tmp_path / "nope.warc.gz", ReadReport()))
    with pytest.raises(FileNotFoundError, match="not found"):
        list(iter_documents(tmp_path / "nope.jsonl.zst", ReadReport()))
    with pytest.raises(ValueError, match="unknown format"):
        list(iter_documents(tmp_path / "x.csv", ReadReport()))
    with pytest.raises(ConfigError, match=r"`datasets\[1\].reader` must be auto, jsonl, warc, parquet, got 'arc'"):
        load_curate_config(config_yaml(tmp_path, {"reader": "arc"}))
    # a parquet without the named column: one line naming the columns it has, before any work starts
    shutil.copytree(FX / "parquet", tmp_path / "in/crawl")
    shutil.copytree(FX / "jsonl", tmp_path / "in/wikipedia")
    with pytest.raises(
        ValueError, match=r"no column 'html' \(columns: url, content\); set `text_column` of dataset 'crawl'"
    ):
        discover_shards(load_curate_config(config_yaml(tmp_path, {})))
    # corrupt .gz / .zst / parquet / warc shards: counted and skipped, the accounting holds
    lines = b"".join(b'{"html": "<p>page %d</p>"}\n' % i for i in range(3000))
    import gzip
    import zstandard

    bad = {
        "a.jsonl.gz": gzip.compress(lines)[:2000],
        "b.jsonl.zst": zstandard.ZstdCompressor().compress(lines)[:300] + b"junk",
        "c.parquet": b"PAR1 this is not parquet",
        "d.warc.gz": b"\x1f\x8b\x08\x00 not a gzip member",
        "e.jsonl.zst": b"not zstd at all",
    }
    for name, data in bad.items():
        (tmp_path / name).write_bytes(data)
        man = extract_shard(tmp_path / name, tmp_path / f"{name}.out.jsonl", "crawl", "html")
        assert man.docs_in == man.kept + sum(man.dropped.values()) and sum(man.dropped.values()) >= 1, (name, man)
        assert any(
            k.startswith(("corrupt or truncated", "unreadable", "malformed", "corrupt gzip", "truncated gzip"))
            for k in man.dropped
        ), (name, man.dropped)


def test_curate_cc_config_reads_a_folder_of_warc_files(tmp_path):
    """scaled_configs/curate-cc.yaml validates, reads .warc.gz with its paper stages, and names gpt-1.3b's vocabulary
    size."""
    from mtnlg.curate_config import load_curate_config
    from mtnlg.curate_stages import discover_shards
    from mtnlg.config import load_config

    cfg = load_curate_config(ROOT / "scaled_configs/curate-cc.yaml", {"input_dir": str(tmp_path)})
    assert {d.name: d.reader for d in cfg.datasets} == {"wikipedia": "auto", "cc": "warc"}
    assert cfg.tokenize.vocab_size == load_config(ROOT / "scaled_configs/gpt-1.3b.yaml").model.vocab_size == 50257
    assert cfg.blend.seq_length == load_config(ROOT / "scaled_configs/gpt-1.3b.yaml").model.seq_length
    shutil.copytree(FX / "warc", tmp_path / "cc")
    shutil.copytree(FX / "jsonl-zst", tmp_path / "wikipedia")
    (tmp_path / "cc/notes.jsonl").write_text("{}\n")  # reader: warc reads only WARC files
    shards = discover_shards(cfg)
    assert [p.name for p in shards["cc"]] == ["crawl-000.warc.gz", "crawl-001.warc", "crawl-002.warc.gz"]
    assert [p.name for p in shards["wikipedia"]] == [
        "crawl-000.jsonl.zst",
        "crawl-001.jsonl.zst",
        "crawl-002.jsonl.zst",
    ]


def test_cli_prints_one_line_for_a_parquet_without_the_column(tmp_path, capsys):
    from mtnlg.cli import main

    shutil.copytree(FX / "parquet", tmp_path / "in/crawl")
    shutil.copytree(FX / "jsonl", tmp_path / "in/wikipedia")
    cfg = config_yaml(tmp_path, {"text_column": "body"})
    assert main(["curate", "--config", str(cfg), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no column 'body' (columns: url, content)" in err[0], err


def test_readers_stream_memory_does_not_grow_with_the_shard(tmp_path):
    """tracemalloc's peak while reading a 24 MB (uncompressed) shard stays a few MB, for .jsonl.zst, .jsonl.gz, .warc.gz
    and parquet."""
    import gzip
    import io
    import tracemalloc
    import zstandard
    import pyarrow as pa
    import pyarrow.parquet as pq
    from warcio.warcwriter import WARCWriter
    from warcio.statusandheaders import StatusAndHeaders
    from mtnlg.extract import iter_documents

    rng = np.random.default_rng(0)
    vocab = ["".join(rng.choice(list("abcdefghijklmnopqrstuvwxyz"), rng.integers(2, 10))) for _ in range(5000)]
    n = 400
    pages = [
        "<html><body><p>" + " ".join(rng.choice(vocab, 10_000)) + "</p></body></html>" for _ in range(n)
    ]  # ~60 KB each
    lines = "".join(json.dumps({"html": p}) + "\n" for p in pages).encode()
    (tmp_path / "a.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(lines))
    (tmp_path / "a.jsonl.gz").write_bytes(gzip.compress(lines))
    del lines
    with open(tmp_path / "a.warc.gz", "wb") as f:
        w = WARCWriter(f, gzip=True)
        for i in range(n):
            body = pages[i].encode()
            http = StatusAndHeaders("200 OK", [("Content-Type", "text/html")], protocol="HTTP/1.1")
            w.write_record(
                w.create_warc_record(
                    f"https://example.com/{i}", "response", payload=io.BytesIO(body), http_headers=http
                )
            )
    pq.write_table(pa.table({"html": pages}), tmp_path / "a.parquet", row_group_size=16)
    del pages
    for name in ("a.jsonl.zst", "a.jsonl.gz", "a.warc.gz", "a.parquet"):
        tracemalloc.start()
        count = sum(1 for _ in iter_documents(tmp_path / name, ReadReport(), field="html"))
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert count == n and peak < 8 << 20, (name, count, peak / 2**20)


# --- issue 52: WARC files of 10 pages with one fault in page 5 (tests/fixtures/warc/make_faulty.py) ---
import gzip
import importlib.util

_spec = importlib.util.spec_from_file_location("make_faulty", FX / "make_faulty.py")
make_faulty = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_faulty)


@pytest.fixture(scope="module")
def faulty(tmp_path_factory):
    return make_faulty.write_faulty(tmp_path_factory.mktemp("faulty"))


def read_pages(path, **kw):
    "`({page number: html}, report)` of a faulty file, read by the WARC reader."
    from mtnlg.extract import iter_warc

    rep = ReadReport()
    return {int(rec["url"].split("-")[-1][: -len(".html")]): rec["html"] for _, rec in iter_warc(path, rep, **kw)}, rep


def page5_offset(path) -> str:
    "Where page 5's record starts: after pages 1-4, a gzip member each (or uncompressed in a .warc)."
    recs = [make_faulty.page_record(i) for i in range(1, 5)]
    return "@" + str(sum(len(gzip.compress(r, mtime=0)) if path.name.endswith(".gz") else len(r) for r in recs))


@pytest.mark.parametrize("fault", list(make_faulty.FAULTS))
def test_a_fault_in_page_5_costs_page_5_at_most(faulty, fault, capfd):
    """Every other page is read; page 5's fault is counted with its reason at page 5's offset, or page 5 is read as a
    browser reads it."""
    f, path = make_faulty.FAULTS[fault], faulty[fault]
    pages, rep = read_pages(path)
    assert sorted(pages) == f.kept, (fault, sorted(pages), dict(rep.dropped))
    assert dict(rep.dropped) == f.dropped, fault  # the reason, and nothing else
    assert [(line, reason) for _, line, reason in rep.examples] == [(page5_offset(path), r) for r in f.dropped], (
        rep.examples
    )
    for i in pages:
        assert f"<p>{make_faulty.page_text(i)}" in pages[i], (fault, i)
    if f.text5:
        assert f"<p>{f.text5}</p>" in pages[5], (fault, pages[5])  # the encoding cases: the exact text
    assert capfd.readouterr().err == ""  # nothing only printed


def test_unreadable_gzip_data_counts_the_bytes_skipped(faulty):
    for fault in ("corrupt-gzip-member", "not-gzip-between-members", "truncated-gzip-member"):
        path, member5 = faulty[fault], int(page5_offset(faulty[fault])[1:])
        data = path.read_bytes()
        page6 = data.index(gzip.compress(make_faulty.page_record(6), mtime=0))
        assert read_pages(path)[1].noted == {"bytes skipped (unreadable gzip data)": page6 - member5}, fault
    assert read_pages(faulty["foreign-gzip-member"])[1].noted == {
        "bytes skipped (not a WARC record)": 54
    }  # the member's two lines


def test_windows_1252_labelled_iso_8859_1_has_no_c1_controls(faulty):
    html = read_pages(faulty["windows-1252-labelled-iso-8859-1"])[0][5]
    assert "\u201cSmart quotes\u201d \u2014 and a caf\u00e9\u2019s r\u00e9sum\u00e9 \u2026" in html
    assert not any("\x80" <= ch <= "\x9f" for ch in html)


def test_warc_truncated_is_kept_and_counted_or_dropped(faulty):
    pages, rep = read_pages(faulty["warc-truncated"])
    assert sorted(pages) == list(range(1, 11)) and dict(rep.noted) == {"WARC-Truncated (length) page kept": 1}
    pages, rep = read_pages(faulty["warc-truncated"], keep_truncated=False)
    assert 5 not in pages and len(pages) == 9 and dict(rep.dropped) == {"WARC-Truncated (length)": 1}


def test_a_gzip_bomb_payload_is_never_inflated_whole(faulty):
    "Page 5 inflates to 300 MB from a 760 KB record, under the size limit: skipped while reading, memory a few MB."
    import tracemalloc

    assert faulty["gzip-bomb-payload"].stat().st_size < 4_000_000
    tracemalloc.start()
    pages, rep = read_pages(faulty["gzip-bomb-payload"])
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert 5 not in pages and dict(rep.dropped) == {"decoded payload over 4,000,000 bytes": 1}
    assert peak < 16 << 20, peak / 2**20  # the limit (4 MB) and a block, not 300 MB


def test_docs_in_counts_pages_and_the_summary_says_what_else(faulty, tmp_path):
    "A crawl's requests, metadata and warcinfo are noted beside the documents; truncated pages kept are in the summary."
    from mtnlg.extract import extract_shard
    from mtnlg.curate import format_summary
    from mtnlg.curate_stages import summarize

    man = extract_shard(faulty["requests-and-metadata"], tmp_path / "a.jsonl", "cc")
    assert (man.docs_in, man.kept, dict(man.dropped)) == (10, 10, {})
    assert man.extra["noted"] == {"WARC warcinfo record": 1, "WARC request record": 10, "WARC metadata record": 10}
    cut = extract_shard(faulty["warc-truncated"], tmp_path / "b.jsonl", "cc")
    assert (cut.docs_in, cut.kept) == (10, 10) and cut.extra["noted"] == {"WARC-Truncated (length) page kept": 1}
    tot = summarize([man.to_dict(), cut.to_dict()])
    assert tot["docs_in"] == 20 and tot["noted"]["WARC request record"] == 10
    text = format_summary({"stages": {"extract": tot}})
    assert (
        "beside the documents: 10 WARC request record; 10 WARC metadata record; 1 WARC warcinfo record; 1 "
        "WARC-Truncated (length) page kept" in text
    ), text
    dropped = extract_shard(faulty["warc-truncated"], tmp_path / "c.jsonl", "cc", keep_truncated=False)
    assert (dropped.docs_in, dropped.kept, dict(dropped.dropped)) == (10, 9, {"WARC-Truncated (length)": 1})


# --- every reader x every fault: ten pages, page 5 bad, extraction keeps the other nine and says what page 5 cost ---
READER_EXTS = ("jsonl", "jsonl.gz", "jsonl.zst", "parquet", "warc", "warc.gz")
HUGE = 200_000  # max_line_bytes of these runs: a document over it is "huge"
BAD5 = make_faulty.page_html(5, " caf\u00e9 ").encode().replace(b"caf\xc3\xa9", b"caf\xff\xfe")  # not UTF-8
# fault -> page 5 as a JSONL line / parquet value / WARC record, and what each family of readers must count
RECORD_FAULTS = {
    "bad-utf-8": {
        "jsonl": b'{"html": "' + BAD5.replace(b'"', b'\\"') + b'"}',
        "parquet": {"html": BAD5},  # bytes in a string column: pyarrow does not check them
        "warc": make_faulty.record("response", 5, BAD5),
        "expect": {"jsonl": ({"invalid UTF-8": 1}, {}), "parquet": ({"invalid UTF-8": 1}, {}), "warc": ({}, {})},
    },  # a browser decodes the WARC page with U+FFFD: page 5 kept
    "truncated-record": {
        "jsonl": json.dumps({"html": make_faulty.page_html(5)}).encode()[:150],
        "parquet": "corrupt",  # page 5's row group unreadable
        "warc": make_faulty.page_record(5)[:-60],
        "expect": {
            "jsonl": ({"malformed JSON": 1}, {}),
            "parquet": ({"unreadable parquet row group (OSError)": 1}, {}),
            "warc": ({"truncated WARC record": 1}, {}),
        },
    },
    "wrong-type": {
        "jsonl": json.dumps({"html": 5, "url": make_faulty.url(5)}).encode(),
        "parquet": {"html": None},
        "warc": make_faulty.page_record(5).replace(b"Content-Length: ", b"Content-Length: x", 1),
        "expect": {
            "jsonl": ({"no string field 'html'": 1}, {}),
            "parquet": ({"no string field 'html'": 1}, {}),
            "warc": ({"malformed WARC record (Content-Length)": 1}, {"bytes skipped (not a WARC record)": 294}),
        },  # a WARC's fields are text: its wrong type is a Content-Length that is no number (its block, skipped)
    },
    "malformed-url": {
        "jsonl": json.dumps({"html": make_faulty.page_html(5), "url": "\ud800 not a url"}).encode(),
        "parquet": {"url": "not a url"},
        "warc": make_faulty.page_record(5).replace(make_faulty.url(5).encode(), b"mailto:" + b"x" * 9000),
        "expect": {k: ({}, {"url removed (malformed)": 1}) for k in ("jsonl", "parquet", "warc")},
    },  # the document is kept, without its URL
    "malformed-id": {
        "jsonl": json.dumps({"html": make_faulty.page_html(5), "url": make_faulty.url(5), "id": {"no": 1}}).encode(),
        "parquet": {"id": 5},
        "warc": re.sub(  # page 4's WARC-Record-ID again
            rb"WARC-Record-ID: \S+",
            re.search(rb"WARC-Record-ID: \S+", make_faulty.page_record(4))[0],
            make_faulty.page_record(5),
        ),
        "expect": {
            "jsonl": ({}, {}),
            "parquet": ({}, {}),
            "warc": ({}, {"WARC-Record-ID replaced by its offset (malformed or repeated)": 1}),
        },
    },  # a record's own id field is never read; a WARC page's repeated id is replaced by its offset
    "empty-document": {
        "jsonl": b'{"html": ""}',
        "parquet": {"html": ""},
        "warc": make_faulty.record("response", 5, b""),
        "expect": {k: ({"no main text": 1}, {}) for k in ("jsonl", "parquet", "warc")},
    },
    "huge-document": {
        "jsonl": json.dumps({"html": "<p>" + "word " * HUGE + "</p>"}).encode(),
        "parquet": {"html": "<p>" + "word " * HUGE + "</p>"},
        "warc": make_faulty.record("response", 5, b"<p>" + b"word " * HUGE + b"</p>"),
        "expect": {
            "jsonl": ({f"line over {HUGE:,} bytes": 1}, {}),
            "parquet": ({f"value over {HUGE:,} bytes": 1}, {}),
            "warc": ({f"WARC record over {HUGE:,} bytes": 1}, {}),
        },
    },
}


def write_shard(path: Path, fault: dict):
    "Pages 1-10 with page 5 as `fault` has it, in the container `path`'s extension names."
    import zstandard
    import pyarrow as pa
    import pyarrow.parquet as pq

    name, good = path.name, lambda i: {"html": make_faulty.page_html(i), "url": make_faulty.url(i)}
    if ".jsonl" in name:
        data = b"".join((fault["jsonl"] if i == 5 else json.dumps(good(i)).encode()) + b"\n" for i in range(1, 11))
        path.write_bytes(
            gzip.compress(data) if name.endswith(".gz") else zstandard.compress(data) if name.endswith(".zst") else data
        )
    elif name.endswith(".warc") or name.endswith(".warc.gz"):
        recs = make_faulty.with_page5(fault["warc"])
        path.write_bytes(make_faulty.members(recs) if name.endswith(".gz") else b"".join(recs))
    else:
        rows = [
            {**good(i), **(fault["parquet"] if i == 5 and fault["parquet"] != "corrupt" else {})} for i in range(1, 11)
        ]
        text = lambda v: v.encode() if isinstance(v, str) else v  # bytes that are no UTF-8 go in as they are
        table = {
            c: pa.array([text(r[c]) for r in rows], pa.binary()).cast(pa.string(), safe=False) for c in ("html", "url")
        }
        if any("id" in r for r in rows):
            table["id"] = [r.get("id") for r in rows]
        pq.write_table(
            pa.table(table),
            path,
            row_group_size=1,
            compression="snappy",
        )
        if fault["parquet"] == "corrupt":  # overwrite the page header of page 5's text
            at = pq.ParquetFile(path).metadata.row_group(4).column(0).data_page_offset
            data = bytearray(path.read_bytes())
            data[at : at + 12] = b"\xff" * 12
            path.write_bytes(bytes(data))


@pytest.mark.parametrize("ext", READER_EXTS)
@pytest.mark.parametrize("fault", list(RECORD_FAULTS))
def test_a_bad_record_costs_only_itself_in_every_reader(tmp_path, fault, ext):
    """Each reader, each kind of bad record in page 5: extraction finishes, keeps the other nine pages, and counts page
    5 under its reason (or keeps it cleaned, and notes what was removed)."""
    from mtnlg.extract import extract_shard, iter_docs

    f = RECORD_FAULTS[fault]
    src = tmp_path / f"crawl-000.{ext}"
    write_shard(src, f)
    man = extract_shard(src, tmp_path / "out.jsonl", "crawl", "html", max_line_bytes=HUGE)
    dropped, noted = f["expect"][ext.split(".")[0]]
    assert (man.docs_in, dict(man.dropped), man.extra.get("noted", {})) == (10, dropped, noted), man
    docs = list(iter_docs(tmp_path / "out.jsonl"))
    pages = [int(d["text"].split(":")[0].split()[-1]) for d in docs]
    assert pages == [i for i in range(1, 11) if i != 5 or not dropped], pages
    assert all(d["url"] == make_faulty.url(i) for d, i in zip(docs, pages) if i != 5)
    assert len({d["id"] for d in docs}) == len(docs)  # every document's id names one record
