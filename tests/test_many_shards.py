"""Curation of thousands of one-document shards under `ulimit -n 256` (issue 53): the driver and its tasks hold a few
files open whatever the shard count; the partitioned dedup decides as the single-process plan does."""

import json
import resource
import subprocess
import sys
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests/fixtures/curation"


def many_shards(tmp: Path, wiki_shards: int, web_shards: int) -> Path:
    """One document a shard: the wikipedia fixture's documents cycled over `wiki_shards` shards (so most are exact
    copies), webtext's over `web_shards`."""
    for name, n in (("wikipedia", wiki_shards), ("webtext", web_shards)):
        lines = [
            l for p in sorted((FIXTURE / "raw" / name).glob("*.jsonl")) for l in p.read_text().splitlines() if l.strip()
        ]
        (tmp / "in" / name).mkdir(parents=True)
        for k in range(n):
            (tmp / "in" / name / f"{name}-{k:05d}.jsonl").write_text(lines[k % len(lines)] + "\n")
    cfg = {
        "name": "many",
        "input_dir": str(tmp / "in"),
        "output_dir": str(tmp / "out"),
        "seed": 1234,
        "workers": 1,
        "datasets": [
            {"name": "wikipedia", "format": "text", "weight": 0.7},
            {"name": "webtext", "format": "text", "weight": 0.3},
        ],
        "decontaminate": {"eval_dir": str(FIXTURE / "eval"), "tasks": ["boolq", "lambada"]},
        "tokenize": {"tokenizer": "train-bpe", "vocab_size": 512},
        "blend": {"valid_fraction": 0.1, "seq_length": 64, "num_samples": 50},
    }
    (tmp / "curate.yaml").write_text(json.dumps(cfg))
    return tmp / "curate.yaml"


def _curate_under_ulimit(config: str, limit: int) -> dict:
    """Run in a fresh interpreter: curate with at most `limit` open files; then, the limit lifted, plan_dedup on the
    same signatures."""
    from mtnlg.curate import curate
    from mtnlg.curate_config import load_curate_config
    from mtnlg.dedup import plan_dedup
    from curate_digests import dedup_decisions

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
    cfg = load_curate_config(config)
    summary = curate(cfg, progress=False, log=lambda *a: None)
    out = Path(summary["output_dir"])
    sigs = sorted(str(p) for p in (out / "dedup_signatures").rglob("*.npz"))
    try:
        plan_dedup(sigs, ["wikipedia", "webtext"])
        old = "ran"
    except OSError as e:
        old = type(e).__name__ + ": " + e.strerror
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    order = [str(p) for d in ("wikipedia", "webtext") for p in sorted((out / "dedup_signatures" / d).glob("*.npz"))]
    drops, info = plan_dedup(order, ["wikipedia", "webtext"])
    return {
        "shards": summary["stages"]["extract"]["shards"],
        "plan": summary["stages"]["dedup"]["plan"],
        "reference": info,
        "same_drops": dedup_decisions(out) == dict(sorted(drops.items())),
        "drops": len(drops),
        "old_plan_under_limit": old,
        "kept": {s: v["kept"] for s, v in summary["stages"].items()},
    }


@pytest.mark.slow
def test_thousands_of_shards_under_ulimit_256(tmp_path):
    config = many_shards(tmp_path, 1200, 300)
    code = (
        f"import json, sys; sys.path.insert(0, {str(ROOT / 'tests')!r}); import test_many_shards as t; "
        f"print(json.dumps(t._curate_under_ulimit({str(config)!r}, 256)))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    print(got)
    assert got["shards"] == 1500 and got["same_drops"] and got["plan"] == got["reference"]
    assert got["old_plan_under_limit"].startswith("OSError")  # the single-process plan opens every shard at once
    assert got["drops"] == got["plan"]["documents"] - got["plan"]["kept"] >= 1200 - 160
