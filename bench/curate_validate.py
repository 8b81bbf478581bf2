"""The curation plan (chapter 36) checked against a run it was not fitted to: `mtnlg curate` on Common Crawl-like input
(bench/crawl.py: .warc.gz shards of real page markup, a small Wikipedia shard as the quality classifier's positives) at
three sizes, the plan's rates fitted over them (`fit_rate`: least squares, a negative rate refused), then the plan's own
arithmetic (`curation_plan` on this machine's workers) predicts a larger run's wall time, CPU seconds and peak memory.
The prediction is written to disk before the larger run starts; then the run, and the two side by side.

    MTNLG_DATA=DIR nice -n 10 python bench/curate_validate.py [--fit 2,4,8] [--predict 16] [--shard-mb 8] [--workers 2]
                                                              [--work /tmp/mtnlg-curate-validate] [--save]

Every size holds the first N shards of one generated input (the same shard size; shards and gigabytes grow together),
curated with scaled_configs/curate-cc.yaml and the settings bench/curate.py uses (a fixed GPT-2-sized tokenizer, Pareto
alpha 0.001), and quality.max_train_chunks = 100 so that the classifier's sample cap binds as it does at scale. Each
map's tasks are timed on their workers (`manifests/task_seconds.json` of the run), in CPU seconds (the worker process's
`time.process_time`) beside wall seconds; the rates are fitted from the CPU seconds, which other jobs on a shared
machine hardly change (the wall-clock fit is kept beside them, `wall_clock_fit`). The rates:
- each stage's per-shard maps: their task CPU seconds added up, against the gigabytes of .warc.gz (core-seconds a GB
  and a fixed part: the Wikipedia shard, loading models);
- the maps of fewer tasks: the quality models (a task a fold, against the shards they sample) and the GPT-sample check
  (fixed); the dedup maps set by bands and partitions take bench/dedup_scale.py's rates in the plan, and their work a
  GB fitted here in this machine's prediction;
- the driver's own CPU seconds (the process tree's, from getrusage, less its tasks'; at scale, plus
  bench/dedup_scale.py's seconds a shard);
- bytes read and written by each stage a GB (the I/O term); a worker's and the driver's peak RSS (the largest task is
  one shard, the same at every size; plus the LSH band task's bytes a document).
The result (bench/results/curate_validate-DATE-cpu.json) holds `plan_rates`, which `mtnlg curate --plan` reads. The
machine is shared: the 1-minute load average is recorded at the start and end of each run. The wall-time prediction
assumes each worker has a core to itself: under load the measured wall time exceeds it by about the load's share of
the cores, while the CPU seconds compare like with like.

`--sampling-only [--save]` measures the quality sample's rates alone (`sampling_rate`: each shard's sample written as
its extract task writes it, then read by a fold's task) and writes them into the newest result file."""

import argparse
import datetime
import json
import os
import resource
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from stats import hardware  # noqa: E402
from crawl import make_input  # noqa: E402
from curate import run_measured, tokenizer_files  # noqa: E402

STAGE_OF = {  # each map of a curation (its `what`) -> the stage whose per-shard work it is
    "extract": "extract",
    "quality": "quality",
    "dedup signatures": "dedup",
    "dedup: drops": "dedup",
    "dedup": "dedup",
    "count task n-grams": "decontaminate",
    "decontaminate": "decontaminate",
    "tokenize": "tokenize",
    "blend: count tokens": "blend",
    "blend: boundary": "blend",
    "blend: text": "blend",
    "merge: headers": "blend",
    "merge: copy": "blend",
}
FEW = {"train quality models": "quality: train models", "blend: samples": "blend: GPT-sample check"}
DEDUP_SCALE = (  # costed from bench/dedup_scale.py's rates (chapter 36's `few_worker_tasks`), not fitted here
    "dedup: band keys",
    "dedup: LSH bands",
    "dedup: verify pairs",
    "dedup: components (large-star)",
    "dedup: components (small-star)",
    "dedup: fates",
)
TRAIN_CHUNKS = (
    100  # quality.max_train_chunks: its cap binds at every size, so a model's task samples each shard as at scale
)
WIKI_LINES = 3000  # the Wikipedia shard's first articles: the classifier's positives, a fixed cost at every size
READS = {
    "extract": None,
    "quality": "extract",
    "dedup": "quality",
    "decontaminate": "dedup",
    "tokenize": "decontaminate",
}


def build_input(work: Path, shards: int, shard_mb: float, workers: int) -> dict:
    "One input of `shards` .warc.gz shards (built once), its Wikipedia shard cut to its first WIKI_LINES articles."
    import zstandard

    inp = work / f"input-{shards}x{shard_mb:g}mb"
    if (inp / "input.json").is_file():
        return json.loads((inp / "input.json").read_text())
    info = make_input(inp, shards, int(shard_mb * 1e6), seed=0, workers=workers)
    wiki = inp / info["wikipedia"]["file"]
    lines = zstandard.ZstdDecompressor().decompress(wiki.read_bytes(), max_output_size=1 << 31).splitlines(True)
    wiki.write_bytes(zstandard.ZstdCompressor(level=3).compress(b"".join(lines[:WIKI_LINES])))
    (inp / "input.json").write_text(json.dumps(info))
    return info


def size_dir(work: Path, info: dict, inp: Path, n: int) -> tuple[Path, dict]:
    "A folder of the input's first `n` shards (links) and the Wikipedia shard: what a size curates."
    d = work / f"size-{n}"
    if not d.is_dir():
        for sub in ("cc", "wikipedia"):
            (d / sub).mkdir(parents=True)
        for f in info["files"][:n]:
            (d / "cc" / f["file"]).symlink_to(inp / "cc" / f["file"])
        (d / "wikipedia" / "wiki-000.jsonl.zst").symlink_to(inp / info["wikipedia"]["file"])
    files = info["files"][:n]
    return d, {
        "cc_shards": n,
        "shards": n + 1,
        "warc_bytes": sum(f["bytes"] for f in files),
        "html_pages": sum(f["html"] for f in files),
    }


def run_size(inp: Path, out: Path, tok: dict, workers: int) -> dict:
    "`mtnlg curate` on one size in a fresh process: wall seconds, peak RSS, the maps' task seconds, bytes by stage."
    shutil.rmtree(out, ignore_errors=True)
    cmd = [str(Path(sys.executable).parent / "mtnlg"), "curate", "--config", "scaled_configs/curate-cc.yaml"]
    cmd += ["--fresh", "--no-progress", "--workers", str(workers), "--output-dir", str(out)]
    for s in (
        f"input_dir={inp}",
        "quality.alpha=0.001",
        f"quality.max_train_chunks={TRAIN_CHUNKS}",
        "tokenize.tokenizer=gpt2",
        f"tokenize.vocab_file={tok['vocab']}",
        f"tokenize.merges_file={tok['merges']}",
    ):
        cmd += ["--set", s]
    load = [os.getloadavg()[0]]
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    m = run_measured(cmd, out.parent / f"{out.name}.log")
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)  # the driver and its pool's workers, all reaped by now
    m.pop("sampler")
    load.append(os.getloadavg()[0])
    du = lambda p: sum(f.stat().st_size for f in Path(p).rglob("*") if f.is_file())
    written = {s: du(out / s) for s in READS}
    written["tokenize"] = du(out / "tokenize")
    read = {s: (du(inp / "cc") if p is None else written[p]) for s, p in READS.items()}
    summary = json.loads((out / "summary.json").read_text())
    return {
        "started_utc": started,
        "wall_seconds": m["wall_seconds"],
        "tree_cpu_seconds": cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime,
        "driver_rss_bytes": m["rss"]["driver_bytes"],
        "worker_rss_bytes": m["rss"]["worker_max_bytes"],
        "maps": json.loads((out / "manifests/task_seconds.json").read_text())["maps"],
        "io_bytes": {s: read[s] + written[s] for s in READS},
        "kept_cc_docs": summary["datasets"]["cc"]["extract"]["kept"] if "cc" in summary.get("datasets", {}) else None,
        "load_average_1min": load,
    }


def task_seconds(sizes: list[dict], clock: str = "cpu_seconds") -> tuple[list[dict], list[dict]]:
    """Each size's task seconds (`clock`: "cpu_seconds", the workers' CPU, or "seconds", wall) added up by stage, and
    a task's mean seconds of each map of fewer tasks (the first task on a worker pays the imports)."""
    work, few = [], []
    for s in sizes:
        w, f = {}, {}
        for m in s["run"]["maps"]:
            t = m[clock]
            if m["what"] in FEW:
                f[FEW[m["what"]]] = sum(t) / max(1, len(t))
            elif m["what"] in STAGE_OF:
                w[STAGE_OF[m["what"]]] = w.get(STAGE_OF[m["what"]], 0.0) + sum(t)
            elif m["what"] in DEDUP_SCALE:
                w["local dedup"] = w.get("local dedup", 0.0) + sum(t)
            else:
                raise KeyError(f"map {m['what']!r} is in no stage of bench/curate_validate.py's STAGE_OF: add it")
        work.append(w)
        few.append(f)
    return work, few


def wall_fit(sizes: list[dict]) -> dict:
    "The per-GB rates fitted from the tasks' wall seconds instead, for comparison (a refusal kept as its message)."
    from mtnlg.curate_plan import fit_rate

    gb = [s["input"]["warc_bytes"] / 1e9 for s in sizes]
    work, _ = task_seconds(sizes, "seconds")
    out = {}
    for stage in ("extract", "quality", "dedup", "decontaminate", "tokenize", "blend", "local dedup"):
        try:
            out[stage] = fit_rate(gb, [w.get(stage, 0.0) for w in work], f"{stage}: task wall seconds")[1][0]
        except ValueError as e:  # the refusal is the finding: a wall clock on a shared machine
            out[stage] = str(e)
    return out


def driver_seconds(run: dict) -> float:
    """The driver's own CPU seconds: the process tree's less its tasks' (and so with the workers' start-up); from a run
    without the tree's CPU, the run's wall time less its maps'."""
    if "tree_cpu_seconds" in run:
        return run["tree_cpu_seconds"] - sum(sum(m["cpu_seconds"]) for m in run["maps"])
    return run["wall_seconds"] - sum(m["wall_seconds"] for m in run["maps"])


def sampling_rate(cc_files: list, repeats: int = 3, work: Path | None = None) -> dict:
    """A quality model's part of every shard as a snapshot's shards make it: one chunk a shard (4 x max_train_chunks
    over ~62,000 shards). Each shard's sample is written as its extract task writes it (`write_fold_sample`: 5 folds, a
    quota of one chunk; timed too: what the extract map adds a shard), then a fold's task reads the samples
    (`_sampled_chunks`) of a quarter, half and all of the first 32 shards, the least CPU of `repeats` reads each (a
    first write and read, untimed, pay the imports); the CPU seconds a shard fitted over the counts. The fitted sizes
    cannot show this: their few shards each give a model hundreds of chunks."""
    import tempfile
    from mtnlg.curate_plan import fit_rate
    from mtnlg.curate_tasks import _raw_texts, _sampled_chunks, write_fold_sample

    n = min(32, len(cc_files))
    folder = Path(tempfile.mkdtemp(dir=work))
    write_fold_sample(folder / "first.json", _raw_texts(cc_files[0], "cc", "html", "warc", "html", 4e6, True), 1, 5)
    t = time.process_time()  # the first write, untimed, paid the imports
    files = [folder / f"{k:05d}.json" for k in range(n)]
    for f, src in zip(files, cc_files):
        write_fold_sample(f, _raw_texts(src, "cc", "html", "warc", "html", 4_000_000, True), 1, 5)
    write = (time.process_time() - t) / n

    def read(files: list) -> float:
        t = time.process_time()
        assert len(_sampled_chunks(files, 0, 5, len(files))) == len(files)  # a chunk a shard
        return time.process_time() - t

    counts = (n // 4, n // 2, n)
    read(files[:1])
    cpu = [min(read(files[:k]) for _ in range(repeats)) for k in counts]
    fixed, (rate,) = fit_rate(list(counts), cpu, "quality: a model's read of the samples, a chunk a shard", ("shard",))
    return {
        "shards": list(counts),
        "cpu_seconds": cpu,
        "fixed_seconds": fixed,
        "seconds_per_shard": rate,
        "write_cpu_seconds_per_shard": write,  # in the extract task, beside its ~200 CPU-s a 1 GB shard
    }


def _sampling_how(b: float) -> str:
    return (
        f"a fold each, reading every shard's sample written by extraction (at scale a chunk each: {b * 1e3:.2f} ms CPU "
        "a shard)"
    )


def sampling_only(a, argv) -> int:
    """`--sampling-only`: the quality sample's rates alone (`sampling_rate`, on 32 shards of 1 MB), written into the
    newest bench/results/curate_validate-*.json (with `--save`): its `quality_sampling` and the quality models' seconds
    a shard; every other rate stays the one its run measured, and the file says so."""
    from mtnlg.curate import newest_rates_file

    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    info = build_input(work, 32, 1.0, a.workers)
    inp = work / "input-32x1mb"
    sampling = sampling_rate([inp / "cc" / f["file"] for f in info["files"]], work=work)
    sampling |= {"date": datetime.date.today().isoformat(), "load_average_1min": os.getloadavg()[0]}
    sampling["command"] = "python bench/curate_validate.py " + " ".join(argv if argv is not None else sys.argv[1:])
    print(json.dumps(sampling, indent=1))
    p = newest_rates_file(ROOT, "curate_validate")
    if a.save and p is not None:
        data = json.loads(p.read_text())
        r = data["plan_rates"]
        r["quality_sampling"] = sampling | {"measured_apart": "by --sampling-only; the other rates are the run's"}
        q = r["few_worker_tasks"]["quality: train models"]
        q |= {"seconds_per_shard": sampling["seconds_per_shard"], "how": _sampling_how(sampling["seconds_per_shard"])}
        p.write_text(json.dumps(data, indent=1, default=str))
        print("wrote", p)
    return 0


def fit_plan_rates(sizes: list[dict], workers: int, sampling: dict | None = None) -> dict:
    """The plan's rates (chapter 36's `plan_rates` schema) fitted over the measured sizes from the tasks' CPU seconds,
    and (`local_dedup`) the dedup maps that the plan costs from bench/dedup_scale.py's rates, fitted here as work a GB
    for this machine's prediction."""
    from mtnlg.curate_plan import fit_rate

    gb = [s["input"]["warc_bytes"] / 1e9 for s in sizes]
    shards = [s["input"]["shards"] for s in sizes]
    work, few = task_seconds(sizes)
    driver = [driver_seconds(s["run"]) for s in sizes]  # at scale, plus bench/dedup_scale.py's seconds a shard
    cpu, fixed, io = {}, {}, {}
    for stage in ("extract", "quality", "dedup", "decontaminate", "tokenize", "blend"):
        fixed[stage], (cpu[stage],) = fit_rate(gb, [w.get(stage, 0.0) for w in work], f"{stage}: task seconds")
    for stage in READS:
        _, (io[stage],) = fit_rate(gb, [s["run"]["io_bytes"][stage] for s in sizes], f"{stage}: bytes read + written")
    local = fit_rate(gb, [w.get("local dedup", 0.0) for w in work], "dedup (partitioned maps): task seconds")
    model = [f["quality: train models"] for f in few]
    if sampling is None:
        a, (b,) = fit_rate(shards, model, "quality: a model's task seconds", ("shard",))
    else:  # a shard's cost as a snapshot's quota makes it; the rest of a model's task, each size's less its shards'
        b = sampling["seconds_per_shard"]
        a = sum(y - b * n for y, n in zip(model, shards)) / len(model)
    largest = sizes[-1]
    return {
        "input": "warc.gz",
        "fitted_from_gb": gb,
        "pages_per_gb": largest["input"]["html_pages"] / gb[-1],
        "kept_docs_per_page": largest["run"]["kept_cc_docs"] / largest["input"]["html_pages"],
        "cpu_seconds_per_gb": cpu,
        "fixed_core_seconds": fixed,
        "io_bytes_per_gb": io,
        "few_worker_tasks": {
            "quality: train models": {
                "tasks": "folds",
                "seconds": a,
                "seconds_per_shard": b,
                "how": _sampling_how(b) if sampling else "a fold each, reading every shard's sample",
            },
            "blend: GPT-sample check": {
                "tasks": 1,
                "seconds": sum(f["blend: GPT-sample check"] for f in few) / len(few),
                "how": "a bounded sample, the same at every size",
            },
        },
        "driver_seconds": sum(driver) / len(driver),
        "peak_rss_per_worker_bytes": max(s["run"]["worker_rss_bytes"] for s in sizes),
        "driver_rss_bytes": max(s["run"]["driver_rss_bytes"] for s in sizes),
        "dedup_index_bytes_per_doc": None,
        "workers": workers,
        "local_dedup": {"fixed_core_seconds": local[0], "cpu_seconds_per_gb": local[1][0]},
        "clock": "CPU seconds: each task's (time.process_time of its worker), the driver's (the process tree's less "
        "its tasks'), not wall seconds",
        "device": "cpu",
        "date": datetime.date.today().isoformat(),
    }


def predict(rates: dict, size: dict, workers: int) -> dict:
    """The plan's wall time (`curation_plan` on one node of `workers` workers, no I/O bound) and peak memory of a size,
    at the rates fitted here alone: the partitioned dedup's maps as work a GB (`local_dedup`)."""
    from mtnlg.curate_config import load_curate_config
    from mtnlg.curate_plan import DEDUP_STAGES, Snapshot, curation_plan, wall_parts

    ld, cpu, fixed = rates["local_dedup"], dict(rates["cpu_seconds_per_gb"]), dict(rates["fixed_core_seconds"])
    cpu["dedup"] += ld["cpu_seconds_per_gb"]
    fixed["dedup"] += ld["fixed_core_seconds"]
    zero = {f"{s}_seconds_per_{u}": 0.0 for s in DEDUP_STAGES for u in ("doc", "shard")}
    zero |= {"band_bytes_per_doc": 0.0, "components_bytes_per_doc": 0.0, "driver_cpu_seconds_per_shard": 0.0}
    rates = {**rates, "partitioned_dedup": zero, "cpu_seconds_per_gb": cpu, "fixed_core_seconds": fixed}
    cfg = load_curate_config(ROOT / "scaled_configs/curate-cc.yaml")
    snap = Snapshot("validate", "", size["html_pages"], size["warc_bytes"], "generated", size["shards"])
    plan = curation_plan(rates, [snap], (1,), workers, 1e15, None, cfg)
    c = plan["snapshots"][0]
    gb, folds = size["warc_bytes"] / 1e9, cfg.quality.folds
    q, gpt = rates["few_worker_tasks"]["quality: train models"], rates["few_worker_tasks"]["blend: GPT-sample check"]
    tasks_cpu = sum(fixed[s] + cpu[s] * gb for s in cpu)
    tasks_cpu += folds * (q["seconds"] + q["seconds_per_shard"] * size["shards"]) + gpt["seconds"]
    return {
        "wall_seconds": c["wall_hours"][1] * 3600,
        "task_cpu_seconds": tasks_cpu,  # every map's tasks: what a busy machine hardly changes
        "tree_cpu_seconds": tasks_cpu + rates["driver_seconds"],  # and the driver's
        "parts_seconds": {k: v * 3600 for k, v in wall_parts(c, workers, 1, None).items()},
        "worker_rss_bytes": rates["peak_rss_per_worker_bytes"],  # the largest task: one shard, at every size
        "driver_rss_bytes": rates["driver_rss_bytes"],
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fit", default="2,4,8", help="the sizes the rates are fitted over: .warc.gz shards")
    ap.add_argument("--predict", type=int, default=16, help="the larger size predicted, then run: shards")
    ap.add_argument("--shard-mb", type=float, default=8.0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--work", default="/tmp/mtnlg-curate-validate")
    ap.add_argument("--dedup-rates", help="the bench/dedup_scale.py result the plan reads beside (default: the newest)")
    ap.add_argument("--save", action="store_true")
    ap.add_argument(
        "--reuse", action="store_true", help="take the fitted sizes' runs saved under --work by a run before"
    )
    ap.add_argument(
        "--sampling-only", action="store_true", help="only the quality sample's rates, into the newest result file"
    )
    a = ap.parse_args(argv)
    if a.sampling_only:
        return sampling_only(a, argv)
    from mtnlg.catalog import shown_path
    from mtnlg.curate import newest_rates_file

    work, fit = Path(a.work), [int(x) for x in a.fit.split(",")]
    if a.predict <= max(fit):
        raise SystemExit(f"--predict {a.predict}: the predicted run must be larger than every fitted size {fit}")
    work.mkdir(parents=True, exist_ok=True)
    t0, load0 = time.time(), os.getloadavg()[0]
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    tok = tokenizer_files(work)
    info = build_input(work, a.predict, a.shard_mb, a.workers)
    inp = work / f"input-{a.predict}x{a.shard_mb:g}mb"
    sizes = []
    for n in fit:
        d, size = size_dir(work, info, inp, n)
        print(f"[fit] {n} shards, {size['warc_bytes'] / 1e6:.0f} MB of .warc.gz ...", flush=True)
        saved = work / f"run-{n}.json"  # --reuse: a size measured before (a refit after a refused rate)
        run = (
            json.loads(saved.read_text())
            if a.reuse and saved.is_file()
            else run_size(d, work / f"out-{n}", tok, a.workers)
        )
        saved.write_text(json.dumps(run))
        sizes.append({"input": size, "run": run, "reused": a.reuse and run["started_utc"] < started})
        print(f"  {sizes[-1]['run']['wall_seconds']:.1f} s, load {sizes[-1]['run']['load_average_1min']}", flush=True)
    sampling = sampling_rate([inp / "cc" / f["file"] for f in info["files"]], work=work)
    print(
        f"[sampling] a quality model's read of the samples, a chunk a shard: "
        f"{sampling['seconds_per_shard'] * 1e3:.2f} ms CPU a shard"
    )
    rates = fit_plan_rates(sizes, a.workers, sampling) | {"quality_sampling": sampling}
    d, size = size_dir(work, info, inp, a.predict)
    pred = {**predict(rates, size, a.workers), "size": size}
    pred["written_utc"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    (work / "prediction.json").write_text(json.dumps(pred, indent=1, default=str))  # before the run
    print(
        f"[predict] {a.predict} shards: {pred['wall_seconds']:.1f} s, tasks' CPU {pred['task_cpu_seconds']:.1f} s, "
        f"the whole tree's CPU {pred['tree_cpu_seconds']:.1f} s, "
        f"worker peak "
        f"{pred['worker_rss_bytes'] / 2**20:.0f} MiB, driver peak {pred['driver_rss_bytes'] / 2**20:.0f} MiB",
        flush=True,
    )
    measured = run_size(d, work / f"out-{a.predict}", tok, a.workers)
    measured["task_cpu_seconds"] = sum(sum(m["cpu_seconds"]) for m in measured["maps"])
    err = {
        k: measured[k] / pred[k] - 1 if pred[k] else None
        for k in ("wall_seconds", "task_cpu_seconds", "tree_cpu_seconds", "worker_rss_bytes", "driver_rss_bytes")
    }
    print(
        f"[measured] {measured['wall_seconds']:.1f} s, tasks' CPU {measured['task_cpu_seconds']:.1f} s, "
        f"the whole tree's CPU {measured['tree_cpu_seconds']:.1f} s, "
        f"worker peak {measured['worker_rss_bytes'] / 2**20:.0f} MiB, "
        f"driver peak {measured['driver_rss_bytes'] / 2**20:.0f} MiB; measured / predicted - 1: "
        + ", ".join(f"{k} {v:+.1%}" for k, v in err.items()),
        flush=True,
    )
    loads = [load0] + [x for s in sizes for x in s["run"]["load_average_1min"]] + measured["load_average_1min"]
    result = {
        "benchmark": "curate_validate",
        "date": datetime.date.today().isoformat(),
        "device": "cpu",
        "command": "python bench/curate_validate.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "hardware": hardware(),
        "workers": a.workers,
        "load_average_1min": {"start": load0, "end": os.getloadavg()[0], "max": max(loads)},
        "seconds": time.time() - t0,
        "sizes": sizes,
        "wall_clock_fit": wall_fit(sizes),
        "plan_rates": rates | {"dedup_rates": shown_path(a.dedup_rates or newest_rates_file(ROOT, "dedup-scale"))},
        "prediction": pred,
        "measured": {**measured, "size": size},
        "measured_over_predicted_minus_1": err,
        "within_15_percent": {k: v is not None and abs(v) <= 0.15 for k, v in err.items()},
    }
    print(json.dumps({k: result[k] for k in ("load_average_1min", "measured_over_predicted_minus_1")}, indent=1))
    if a.save:
        p = ROOT / "bench/results" / f"curate_validate-{result['date']}-cpu.json"
        p.write_text(json.dumps(result, indent=1, default=str))
        print("wrote", p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
