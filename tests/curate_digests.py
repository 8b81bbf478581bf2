"""Digests of everything a curation writes except timings, and its dedup decisions with their reasons (issue 53).

`python tests/curate_digests.py OUT.json` curates curate-tiny, curate-demo, two crawl-format fixtures (WARC, JSONL)
and the bad-input corpus with the code on the path and saves, per corpus, {relative path: sha256} of every output
file (manifests and summary.json with their seconds and paths taken out) and {document id: drop reason} of dedup.
Run before and after a change to the curation driver: `compare(before, after)` lists what differs. The dedup plan's
own files are compared through the decisions they hold, whatever their layout (one dedup_plan.json, or per-shard
drops)."""

import hashlib
import json
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TIMING = {"seconds", "wall_seconds", "cpu_seconds", "driver_cpu_seconds", "started", "resumed"}
PLAN_FILES = ("dedup_plan.json", "dedup_drops/", "dedup_lsh/")  # compared through `dedup_decisions`


def _scrub(x, paths):
    if isinstance(x, dict):
        return {k: _scrub(v, paths) for k, v in x.items() if k not in TIMING}
    if isinstance(x, list):
        return [_scrub(v, paths) for v in x]
    if isinstance(x, str):
        for p, name in paths:
            x = x.replace(p, name)
    return x


def dedup_decisions(out: Path) -> dict:
    "{document id: drop reason} of the dedup plan, read from dedup_plan.json's `drops` or the per-shard drop files."
    plan = out / "dedup_plan.json"
    got = dict(json.loads(plan.read_text()).get("drops", {})) if plan.is_file() else {}
    for f in sorted((out / "dedup_drops").rglob("*.json")):
        got.update(json.loads(f.read_text()))
    return dict(sorted(got.items()))


def digests(out: Path, paths=()) -> dict:
    """{relative path: sha256} of every file under `out` but the dedup plan's, with timings and `paths` scrubbed from
    JSON."""
    paths = [(str(out), "<out>"), *paths]
    got = {}
    for p in sorted(out.rglob("*")):
        rel = str(p.relative_to(out))
        if not p.is_file() or rel.startswith(PLAN_FILES):
            continue
        data = p.read_bytes()
        if p.suffix == ".json" and (rel.startswith("manifests/") or rel == "summary.json"):
            data = json.dumps(_scrub(json.loads(data), paths), sort_keys=True).encode()
        elif rel == "blend/megatron_data_path.txt":
            data = data.replace(str(out).encode(), b"<out>")
        got[rel] = hashlib.sha256(data).hexdigest()
    decisions = dedup_decisions(out)
    got["<dedup decisions>"] = hashlib.sha256(json.dumps(decisions, sort_keys=True).encode()).hexdigest()
    got["<dedup drops>"] = len(decisions)
    return got


def _run(cfg_path, out, overrides=None):
    from mtnlg.curate import curate
    from mtnlg.curate_config import load_curate_config

    curate(load_curate_config(cfg_path, overrides or {}), out, "local", 1, progress=False, log=lambda *a: None)


def curate_all(tmp: Path) -> dict:
    "Each corpus curated under `tmp`: {corpus: digests}."
    sys.path.insert(0, str(ROOT / "tests"))
    import test_crawl_formats as tcf

    res = {}
    for name in ("curate-tiny", "curate-demo"):
        _run(ROOT / f"scaled_configs/{name}.yaml", tmp / name)
        res[name] = digests(tmp / name)
    for fmt in ("warc", "jsonl"):
        out = tcf.run_format(tmp / f"formats-{fmt}", fmt)
        res[f"formats-{fmt}"] = digests(out, [(str(tmp / f"formats-{fmt}"), "<tmp>")])
    raw = tmp / "bad/raw"
    shutil.copytree(ROOT / "tests/fixtures/curation/raw", raw)  # test_curation's bad_corpus
    crawl = raw / "crawl/crawl-000.jsonl"
    crawl.write_bytes(
        crawl.read_bytes()
        + b"".join(
            [
                b'{"html": "\xff\xfe not UTF-8"}\n',
                b'{"html": "<p>half a line\n',
                b"\n",
                b'{"html": "<p>' + b"word " * 2_100_000 + b'</p>"}\n',
                json.dumps({"html": "<html><script>a()</script><script>b()</script></html>"}).encode() + b"\n",
                b'{"html": ""}\n',
            ]
        )
    )
    (raw / "crawl/crawl-002.jsonl").write_bytes(bytes(range(256)) * 64)
    _run(ROOT / "scaled_configs/curate-tiny.yaml", tmp / "bad/out", {"input_dir": str(raw)})
    res["bad-input"] = digests(tmp / "bad/out", [(str(raw), "<raw>")])
    return res


def compare(before: dict, after: dict) -> list[str]:
    """What differs: a file of `before` missing or changed in `after` (new files in `after` are listed apart by the
    caller)."""
    bad = []
    for corpus, files in before.items():
        for rel, h in files.items():
            if after.get(corpus, {}).get(rel) != h:
                bad.append(f"{corpus}: {rel}")
    return bad


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as t:
        res = curate_all(Path(t))
    Path(sys.argv[1]).write_text(json.dumps(res, indent=1, sort_keys=True))
    if len(sys.argv) > 2:
        before = json.loads(Path(sys.argv[2]).read_text())
        bad = compare(before, res)
        print(
            "\n".join(bad) or "identical",
            "\nnew files:",
            sorted({f"{c}: {r}" for c in res for r in res[c] if r not in before.get(c, {})}),
        )
