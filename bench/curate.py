"""Curation at scale, against the field: `mtnlg curate` and datatrove on the same Common Crawl-like input
(bench/crawl.py: .warc.gz shards of real page markup around Wikipedia paragraphs, planted near-duplicates, The
Pile-style Wikipedia shard), in the same run, on this machine's cores, at two input sizes 4x apart (shards 4x bigger,
same shard count).

    MTNLG_DATA=DIR python bench/curate.py [--gb 1.0] [--shards 8] [--workers 2] [--work /tmp/mtnlg-curate-bench]
                                          [--save]
    MTNLG_DATA=DIR python bench/curate.py --speed-rows [--gb 0.25] [--speed-shards 1] [--speed-reps 3]
                                          [--before-rev REV] [--save]
                                          [--speed-stages extract,decontaminate] [--save-suffix NAME]
    MTNLG_DATA=DIR python bench/curate.py --speed-rows --speed-stages tokenize [--tokenize-from RUN_OUTPUT]
                                          [--before-rev REV] [--save]
                                          (extraction, decontamination and tokenize before/after rows only,
                                          bytes compared)

Ours: the whole pipeline, `mtnlg curate --config scaled_configs/curate-cc.yaml` (extract -> quality -> dedup ->
decontaminate -> tokenize -> blend), with two settings changed and said: the tokenizer is a fixed GPT-2-sized BPE
(`tokenize.tokenizer: gpt2` pointing at files trained once here, the same file datatrove uses, so neither side times
tokenizer training), and the Pareto shape `quality.alpha: 0.001`, which scores every document but keeps ~all of them
(the synthetic pages share 168 templates, so the classifier learns their words and the paper's alpha = 9 would drop
nearly every crawl page, leaving the later stages nothing to do that datatrove's stages do).
datatrove: bench/datatrove_side.py (read+extract with the same jusText settings and language id, its four-stage
MinHash at the same 5-grams / 16 bands x 8 rows, its DocumentTokenizer).

Reported per stage and tool: wall seconds, CPU seconds (driver and workers), documents/s and MB/s of the stage's
input; per-shard seconds and their median (ours from the manifests, datatrove from its stats files); peak RSS of the
driver and of each worker process (sampled every 0.2 s) at both sizes; dedup recall and precision on the planted
pairs; ratios (datatrove seconds / ours: above 1, ours is faster) per matching stage and end to end. Each size runs
once per tool (a gigabyte run is minutes): the spread shown is across shards, not across repeats."""

import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from stats import hardware
from crawl import make_input

MATCHING = {"read+extract": ["extract"], "dedup": ["dedup"], "tokenize": ["tokenize"]}  # datatrove stage -> ours


class PeakRSS:
    "Samples a process tree every `every` seconds; keeps each process's peak resident set size."

    def __init__(self, pid: int, every: float = 0.2):
        import psutil

        self.root, self.every, self.peak, self.names, self.stop = psutil.Process(pid), every, {}, {}, threading.Event()
        self.samples = []  # (time, pid, rss): peaks per stage afterwards
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        import psutil

        while not self.stop.is_set():
            try:
                procs = [self.root, *self.root.children(recursive=True)]
            except psutil.NoSuchProcess:
                break
            for p in procs:
                try:
                    rss = p.memory_info().rss
                    self.names.setdefault(p.pid, " ".join(p.cmdline()[:3])[-80:])
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    continue
                self.peak[p.pid] = max(self.peak.get(p.pid, 0), rss)
                self.samples.append((time.time(), p.pid, rss))
            time.sleep(self.every)

    def result(self) -> dict:
        self.stop.set()
        self.thread.join()
        workers = {p: r for p, r in self.peak.items() if p != self.root.pid}
        return {
            "driver_bytes": self.peak.get(self.root.pid, 0),
            "worker_max_bytes": max(workers.values(), default=0),
            "workers": len(workers),
            "per_process": {f"{p} {self.names.get(p, '')}": r for p, r in sorted(workers.items())},
        }

    def between(self, t0: float, t1: float) -> dict:
        "Peak RSS of the driver and of the largest worker between two times."
        s = [(pid, rss) for t, pid, rss in self.samples if t0 <= t <= t1]
        return {
            "driver_bytes": max((r for p, r in s if p == self.root.pid), default=0),
            "worker_max_bytes": max((r for p, r in s if p != self.root.pid), default=0),
        }


def run_measured(cmd: list, log: Path, env=None) -> dict:
    "Run `cmd` to its end, its output into `log`; wall seconds and the tree's peak RSS."
    t = time.time()
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as f:
        p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        rss = PeakRSS(p.pid)
        rc = p.wait()
    out = {"wall_seconds": time.time() - t, "rss": rss.result(), "returncode": rc, "sampler": rss}
    if rc:
        raise RuntimeError(f"{' '.join(map(str, cmd[:4]))} failed ({rc}); see {log}:\n" + log.read_text()[-3000:])
    return out


def tokenizer_files(work: Path) -> dict:
    """A GPT-2-sized byte-level BPE trained once on the Wikipedia corpus: vocab.json + merges.txt (ours) and
    tokenizer.json (datatrove)."""
    from mtnlg.catalog import data_path
    from mtnlg.data import train_bpe, load_gpt2_tokenizer

    d = work / "tokenizer"
    files = {"vocab": d / "vocab.json", "merges": d / "merges.txt", "json": d / "tokenizer.json"}
    if not files["json"].is_file():
        d.mkdir(parents=True, exist_ok=True)
        texts = [json.loads(l)["text"] for l in open(min(data_path("wikipedia").glob("*train.jsonl")))]
        train_bpe(texts, 50257).model.save(str(d))
        load_gpt2_tokenizer(files["vocab"], files["merges"]).save(str(files["json"]))
    return files


def run_ours(inp: Path, work: Path, tok: dict, workers: int) -> dict:
    out = work / "ours"
    cmd = [
        str(Path(sys.executable).parent / "mtnlg"),
        "curate",
        "--config",
        "scaled_configs/curate-cc.yaml",
        "--fresh",
        "--no-progress",
        "--workers",
        str(workers),
        "--output-dir",
        str(out),
        "--set",
        f"input_dir={inp}",
        "--set",
        "quality.alpha=0.001",
        "--set",
        "tokenize.tokenizer=gpt2",
        "--set",
        f"tokenize.vocab_file={tok['vocab']}",
        "--set",
        f"tokenize.merges_file={tok['merges']}",
    ]
    m = run_measured(cmd, work / "ours.log")
    sampler = m.pop("sampler")
    summary = json.loads((out / "summary.json").read_text())
    stages = {}
    for name, s in {**summary["stages"], "blend": summary["blend"]}.items():
        shard_s = (
            [json.loads(f.read_text())["seconds"] for f in sorted((out / "manifests" / name).glob("*/*.json"))]
            if name != "blend"
            else []
        )
        stages[name] = {
            "wall_seconds": s["wall_seconds"],
            "cpu_seconds": s["cpu_seconds"],
            "docs_in": s.get("docs_in"),
            "kept": s.get("kept"),
            "input_bytes": stage_input_bytes(out, inp, name),
            "shard_seconds": shard_s,
            "dropped": s.get("dropped"),
            "peak_rss": sampler.between(s["started"], s["started"] + s["wall_seconds"]),
        }
    drops = {
        i: r for f in sorted((out / "dedup_drops").rglob("*.json")) for i, r in json.loads(f.read_text()).items()
    }  # per shard (chapter 32)
    cc_kept = sum(json.loads(f.read_text())["kept"] for f in (out / "manifests/extract/cc").glob("*.json"))
    return {
        **m,
        "stages": stages,
        "removed_as_duplicates": [i.split(":", 1)[1] for i in drops if i.startswith("cc/")],
        "dedup_index": dedup_index_bytes(out),
        "cc_documents_extracted": cc_kept,
        "dedup_plan": json.loads((out / "dedup_plan.json").read_text())["summary"],
    }


def stage_input_bytes(out: Path, inp: Path, stage: str) -> int:
    "Bytes the stage reads: the input shards for extract, the previous stage's JSONL after that."
    prev = {
        "extract": None,
        "quality": "extract",
        "dedup": "quality",
        "decontaminate": "dedup",
        "tokenize": "decontaminate",
        "blend": "decontaminate",
    }[stage]
    files = (
        [p for p in inp.glob("*/*") if p.name.endswith((".warc.gz", ".jsonl.zst"))]
        if prev is None
        else (out / prev).glob("*/*.jsonl")
    )
    return sum(p.stat().st_size for p in files)


def run_datatrove(inp: Path, work: Path, tok: dict, shards: int, workers: int) -> dict:
    import shutil

    out = work / "datatrove"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    cmd = [
        sys.executable,
        str(ROOT / "bench/datatrove_side.py"),
        str(inp),
        str(out),
        str(tok["json"]),
        "--tasks",
        str(shards),
        "--workers",
        str(workers),
        "--out",
        str(out / "timings.json"),
    ]
    m = run_measured(cmd, work / "datatrove.log")
    sampler = m.pop("sampler")
    stages = json.loads((out / "timings.json").read_text())
    for s in stages.values():
        s["peak_rss"] = sampler.between(s["started"], s["started"] + s["wall_seconds"])
    removed = [json.loads(l)["id"] for f in (out / "minhash/removed").glob("*.jsonl") for l in open(f)]
    return {**m, "stages": stages, "removed_as_duplicates": removed}


def planted_jaccard(out: Path, planted: list) -> dict:
    """Exact word 5-gram Jaccard of each planted pair's extracted texts (ours): the paper's duplicates are the pairs >=
    0.8."""
    from mtnlg.dedup import exact_jaccard

    want, text = {i for p in planted for i in p}, {}
    for f in (out / "extract/cc").glob("*.jsonl"):
        for line in open(f):
            d = json.loads(line)
            rid = d["id"].split(":", 1)[1]
            if rid in want:
                text[rid] = d["text"]
    return {c: exact_jaccard(text[c], text[o]) for c, o in planted if c in text and o in text}


def dedup_quality(removed: list, planted: list, jaccard: dict, threshold: float = 0.8) -> dict:
    """Recall over the planted pairs whose extracted texts are duplicates by the paper's definition (Jaccard >= 0.8; a
    pair is found when either copy is removed) and over all planted pairs; precision: removals that belong to a planted
    pair."""
    removed, pair_ids = set(removed), {i for p in planted for i in p}
    found = lambda pairs: sum(c in removed or o in removed for c, o in pairs) / max(1, len(pairs))
    dup = [(c, o) for c, o in planted if jaccard.get(c, 0) >= threshold]
    return {
        "planted_pairs": len(planted),
        "pairs_at_or_above_threshold": len(dup),
        "recall": found(dup),
        "recall_all_planted": found(planted),
        "removed": len(removed),
        "precision": len(removed & pair_ids) / max(1, len(removed)),
    }


def rates(stage: dict) -> dict:
    w = stage["wall_seconds"]
    out = {
        "wall_seconds": round(w, 2),
        "cpu_seconds": round(stage["cpu_seconds"], 2) if stage.get("cpu_seconds") is not None else None,
    }
    if stage.get("docs_in"):
        out["docs_per_s"] = round(stage["docs_in"] / w, 1)
    if stage.get("input_bytes"):
        out["mb_per_s"] = round(stage["input_bytes"] / w / 1e6, 2)
    if stage.get("shard_seconds"):
        out["shard_seconds_median"] = round(statistics.median(stage["shard_seconds"]), 2)
    out["peak_rss_mib"] = {k.replace("_bytes", ""): round(v / 2**20) for k, v in stage["peak_rss"].items()}
    return out


def compare(ours: dict, theirs: dict) -> dict:
    rows, t_sum, o_sum = {}, 0.0, 0.0
    for dt, names in MATCHING.items():
        o = sum(ours["stages"][n]["wall_seconds"] for n in names)
        t = theirs["stages"][dt]["wall_seconds"]
        rows[dt] = {"ours_s": round(o, 2), "datatrove_s": round(t, 2), "ours_faster_x": round(t / o, 3)}
        t_sum += t
        o_sum += o
    rows["matching stages, end to end"] = {
        "ours_s": round(o_sum, 2),
        "datatrove_s": round(t_sum, 2),
        "ours_faster_x": round(t_sum / o_sum, 3),
    }
    return rows


DEDUP_INDEX_CHILD = """
import json, sys, tracemalloc, numpy as np
from pathlib import Path
from mtnlg.dedup import plan_dedup
files, dd = sorted(Path(sys.argv[1]).glob("dedup_signatures/*/*.npz")), json.loads(sys.argv[2])
smallest = min(files, key=lambda f: f.stat().st_size)
# compiles the kernels
plan_dedup([smallest], sys.argv[3].split(","), dd["threshold"], dd["bands"], dd["rows"], dd["engine"])
tracemalloc.start()                      # numpy's buffers and the ids' strings, not the compiler's memory
drops, info = plan_dedup(files, sys.argv[3].split(","), dd["threshold"], dd["bands"], dd["rows"], dd["engine"])
print(json.dumps({"documents": info["documents"], "peak_traced_bytes": tracemalloc.get_traced_memory()[1]}))
"""


def dedup_index_bytes(out: Path) -> dict:
    """The driver's dedup planning as a fresh process runs it on this run's signature files: its peak traced memory per
    document."""
    import yaml

    cfg = yaml.safe_load((ROOT / "scaled_configs/curate-cc.yaml").read_text())
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            DEDUP_INDEX_CHILD,
            str(out),
            json.dumps(cfg["dedup"]),
            ",".join(d["name"] for d in cfg["datasets"]),
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    m = json.loads(r.stdout.strip().splitlines()[-1])
    return {**m, "bytes_per_doc": m["peak_traced_bytes"] / max(1, m["documents"])}


def plan_rates(small: dict, large: dict) -> dict:
    """Per-GB-of-.warc.gz rates for `mtnlg curate --plan` (chapter 36): the marginal cost between the two sizes of ours
    ((large - small) / (its GB - small's GB)), so that fixed costs (training the classifier on its capped sample,
    building the evaluation sets' n-gram table, process start-up) are not multiplied by a snapshot's 65,000 GB; they are
    kept apart as `fixed_seconds`. Serial (driver) seconds: a stage's wall time minus its CPU time spread over the
    workers."""
    gb = lambda z: z["input"]["warc_bytes"] / 1e9
    serial = lambda z, n: (
        z["ours"]["stages"][n]["wall_seconds"]
        if n == "blend"
        else max(0.0, z["ours"]["stages"][n]["wall_seconds"] - z["ours"]["stages"][n]["cpu_seconds"] / z["workers"])
    )
    cpu = lambda z, n: z["ours"]["stages"][n]["cpu_seconds"]
    d_gb = gb(large) - gb(small)
    marginal = lambda f, n: max(0.0, (f(large, n) - f(small, n)) / d_gb)
    stages, drivers = (
        ("extract", "quality", "dedup", "decontaminate", "tokenize"),
        ("quality", "dedup", "decontaminate", "tokenize", "blend"),
    )
    o = large["ours"]
    return {
        "input": "warc.gz",
        "pages_per_gb": large["input"]["html_pages"] / gb(large),
        "kept_docs_per_page": o["cc_documents_extracted"] / large["input"]["html_pages"],
        "note": (
            "marginal rates between the two sizes of one run (each also curated the same 44 MB Wikipedia shard, so its "
            "work cancels); the synthetic pages are all English articles, so every page is kept: a real "
            "crawl keeps fewer"
        ),
        "cpu_seconds_per_gb": {n: marginal(cpu, n) for n in stages},
        "serial_seconds_per_gb": {n: marginal(serial, n) for n in drivers},
        "fixed_seconds": {
            "cpu": {n: cpu(small, n) - marginal(cpu, n) * gb(small) for n in stages},
            "serial": {n: serial(small, n) - marginal(serial, n) * gb(small) for n in drivers},
        },
        "dedup_index_bytes_per_doc": o["dedup_index"]["bytes_per_doc"],
        "peak_rss_per_worker_bytes": o["rss"]["worker_max_bytes"],
    }


def add_plan_rates(result: dict) -> dict:
    if {"small", "large"} <= set(result["sizes"]):
        result["plan_rates"] = {
            **plan_rates(result["sizes"]["small"], result["sizes"]["large"]),
            "device": "cpu",
            "date": result["date"],
        }
    return result


# --- issue 52 items 4-5: extraction and decontamination, before/after, in one run (separate from the rows above) ---
SPEED_CHILD = """
import json, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])                    # the tree under test: its mtnlg is the one imported
import numpy as np
from mtnlg.extract import extract_shard
from mtnlg.decontaminate import count_shard, decontaminate_shard, frequent_ngrams
stage, src, dst = sys.argv[2], [Path(p) for p in json.loads(sys.argv[3])], Path(sys.argv[4])
if stage == "extract":
    from mtnlg.extract import html_to_text, language_of
    # imports
    warm_up = "<html><body><p>" + "A warm-up paragraph of plain English words. " * 5 + "</p></body></html>"
    language_of(html_to_text(warm_up))
    t = time.process_time()
    for s in src: extract_shard(s, dst / s.name.replace(".warc.gz", ".jsonl"), "cc")
else:
    z = np.load(sys.argv[5]); table = {int(k): z[k] for k in z.files}
    from mtnlg.extract import write_jsonl
    write_jsonl(dst / "warm.jsonl", [{"id": "w/w:0", "dataset": "w", "text": "a warm-up document " * 20}])
    count_shard(dst / "warm.jsonl", table)                                    # imports; loads the compiled kernel
    t = time.process_time()
    ignore = frequent_ngrams([count_shard(s, table) for s in src], 10)
    for s in src: decontaminate_shard(s, dst / s.name, table, ignore)
print(json.dumps({"cpu_seconds": time.process_time() - t}))
"""


def before_tree(rev: str, work: Path) -> Path:
    "The repository's mtnlg package at `rev` (git archive), for the 'before' rows."
    d = work / f"tree-{rev}"
    if not (d / "mtnlg").is_dir():
        d.mkdir(parents=True, exist_ok=True)
        subprocess.run(f"git -C {ROOT} archive {rev} mtnlg | tar -x -C {d}", shell=True, check=True)
    return d


def speed_rows(warc_shards: list, work: Path, rev: str, reps: int, stages=("extract", "decontaminate")) -> dict:
    """Extraction (chapter 30) and both decontamination passes (chapter 33: count, then cut) over the same shards, by
    the code at `rev` (before) and this working tree (after): each a fresh process per measurement, CPU seconds of the
    timed part (imports, numba compilation and a warm-up shard excluded), repetitions interleaved, medians. Each stage's
    output files must be byte-identical between before and after. The 1-minute load average is read before each
    measurement (the machine is shared)."""
    import numpy as np
    from mtnlg.catalog import data_path
    from mtnlg.decontaminate import eval_task_texts, build_task_ngrams

    trees = {"before": before_tree(rev, work), "after": ROOT}
    table = work / "task_ngrams.npz"
    if not table.is_file():
        t = build_task_ngrams([x for ts in eval_task_texts(data_path("eval")).values() for x in ts])
        np.savez(table, **{str(k): v for k, v in t.items()})

    def child(tree, stage, src, dst):
        dst.mkdir(parents=True, exist_ok=True)
        r = subprocess.run(
            [
                sys.executable,
                "-c",
                SPEED_CHILD,
                str(tree),
                stage,
                json.dumps([str(s) for s in src]),
                str(dst),
                str(table),
            ],
            capture_output=True,
            text=True,
            cwd=work,
        )
        if r.returncode:
            raise RuntimeError(f"{stage} ({tree}) failed:\n{r.stderr[-3000:]}")
        return json.loads(r.stdout.strip().splitlines()[-1])["cpu_seconds"]

    rows, docs, loads = {}, work / "speed" / "extract-after", []
    for stage in stages:
        src = warc_shards if stage == "extract" else sorted(docs.glob("crawl-*.jsonl"))
        times = {"before": [], "after": []}
        for rep in range(reps):
            for side, tree in trees.items():
                loads.append(os.getloadavg()[0])
                times[side].append(child(tree, stage, src, work / "speed" / f"{stage}-{side}"))
                print(f"  {stage} {side} rep {rep}: {times[side][-1]:.2f} CPU s", flush=True)
        outs = {side: sorted(p for p in (work / "speed" / f"{stage}-{side}").glob("crawl-*.jsonl")) for side in trees}
        same = len(outs["before"]) == len(src) and all(
            a.read_bytes() == b.read_bytes() for a, b in zip(outs["before"], outs["after"])
        )
        if not same:
            raise AssertionError(f"{stage}: the speed work changed output bytes")
        b, a = statistics.median(times["before"]), statistics.median(times["after"])
        in_bytes = sum(s.stat().st_size for s in src)
        rows[stage] = {
            "shards": len(src),
            "input_bytes": in_bytes,
            "before_cpu_s": round(b, 2),
            "after_cpu_s": round(a, 2),
            "speedup_x": round(b / a, 2),
            "before_mb_per_cpu_s": round(in_bytes / b / 1e6, 2),
            "after_mb_per_cpu_s": round(in_bytes / a / 1e6, 2),
            "repetitions_cpu_s": {k: [round(x, 2) for x in v] for k, v in times.items()},
            "output_byte_identical": True,
        }
    return {
        "before": f"mtnlg at {rev}",
        "after": "this working tree",
        "reps": reps,
        **rows,
        "load_avg_1min_before_each_run": {"min": min(loads), "median": statistics.median(loads), "max": max(loads)},
    }


TOKENIZE_CHILD = """
import json, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])                    # the tree under test: its mtnlg is the one imported
from tokenizers import Tokenizer
from mtnlg.indexed import tokenize_shard
src, dst, tok_file = [Path(p) for p in json.loads(sys.argv[2])], Path(sys.argv[3]), sys.argv[4]
t, w = time.process_time(), time.time()            # as a worker runs the stage: load the tokenizer, then each shard
tok = Tokenizer.from_file(tok_file)
tokens = sum(tokenize_shard(s, dst / s.parent.name / s.stem, tok).extra["tokens"] for s in src)
print(json.dumps({"cpu_seconds": time.process_time() - t, "wall_seconds": time.time() - w, "tokens": tokens}))
"""


def tokenize_row(curated: Path, work: Path, rev: str, reps: int) -> dict:
    """The tokenize stage (chapter 35's `tokenize_shard`, as chapter 36's workers call it) over a pipeline run's curated
    shards (`curated`/decontaminate/*/*.jsonl, its tokenizer.json), by the code at `rev` (before) and this working tree
    (after): one fresh process per measurement, one shard after another, CPU and wall seconds from loading the tokenizer
    to the last shard (imports excluded), repetitions interleaved, medians. Every .bin and .idx must be
    byte-identical."""
    src, tok = sorted((curated / "decontaminate").glob("*/*.jsonl")), curated / "tokenizer.json"
    if not src or not tok.is_file():
        raise FileNotFoundError(f"no curated shards or tokenizer.json under {curated} (run the pipeline first)")
    trees, runs = {"before": before_tree(rev, work), "after": ROOT}, {"before": [], "after": []}
    load = [os.getloadavg()[0]]  # the machine is shared: its 1-minute load at the start and end
    for side in trees:
        shutil.rmtree(work / "speed" / f"tokenize-{side}", ignore_errors=True)  # an earlier run's files
    for rep in range(reps):
        for side, tree in trees.items():
            dst = work / "speed" / f"tokenize-{side}"
            r = subprocess.run(
                [
                    sys.executable,
                    "-c",
                    TOKENIZE_CHILD,
                    str(tree),
                    json.dumps([str(s) for s in src]),
                    str(dst),
                    str(tok),
                ],
                capture_output=True,
                text=True,
                cwd=work,
            )
            if r.returncode:
                raise RuntimeError(f"tokenize ({tree}) failed:\n{r.stderr[-3000:]}")
            runs[side].append(json.loads(r.stdout.strip().splitlines()[-1]))
            print(
                f"  tokenize {side} rep {rep}: {runs[side][-1]['cpu_seconds']:.2f} CPU s, "
                f"{runs[side][-1]['wall_seconds']:.2f} s wall",
                flush=True,
            )
    outs = {side: sorted((work / "speed" / f"tokenize-{side}").glob("*/*.[bi][id][nx]")) for side in trees}
    rel = lambda side: [p.relative_to(work / "speed" / f"tokenize-{side}") for p in outs[side]]
    if (
        len(outs["after"]) != 2 * len(src)
        or rel("before") != rel("after")
        or any(a.read_bytes() != b.read_bytes() for a, b in zip(outs["before"], outs["after"]))
    ):
        raise AssertionError("tokenize: the speed work changed output bytes")
    if len({r["tokens"] for v in runs.values() for r in v}) != 1:
        raise AssertionError("tokenize: token counts differ")
    med = {
        side: {k: statistics.median(r[k] for r in v) for k in ("cpu_seconds", "wall_seconds")}
        for side, v in runs.items()
    }
    in_bytes = sum(s.stat().st_size for s in src)
    return {
        "input": str(curated / "decontaminate"),
        "shards": len(src),
        "input_bytes": in_bytes,
        "tokens": runs["after"][0]["tokens"],
        "before_cpu_s": round(med["before"]["cpu_seconds"], 2),
        "after_cpu_s": round(med["after"]["cpu_seconds"], 2),
        "before_wall_s": round(med["before"]["wall_seconds"], 2),
        "after_wall_s": round(med["after"]["wall_seconds"], 2),
        "speedup_x": round(med["before"]["cpu_seconds"] / med["after"]["cpu_seconds"], 2),
        "wall_speedup_x": round(med["before"]["wall_seconds"] / med["after"]["wall_seconds"], 2),
        "before_mb_per_cpu_s": round(in_bytes / med["before"]["cpu_seconds"] / 1e6, 2),
        "after_mb_per_cpu_s": round(in_bytes / med["after"]["cpu_seconds"] / 1e6, 2),
        "repetitions": {
            side: [{k: round(x, 2) for k, x in r.items() if k != "tokens"} for r in v] for side, v in runs.items()
        },
        "output_byte_identical": True,
        "outputs_compared": len(outs["after"]),
        "load_average_1min": load + [os.getloadavg()[0]],
    }


def speed_rows_only(a) -> dict:
    """`--speed-rows`: only the before/after rows: extraction and decontamination on the first `--speed-shards` shards
    of the larger input (built if missing), tokenize on a pipeline run's curated shards (`--tokenize-from`)."""
    work, stages = Path(a.work), a.speed_stages.split(",")
    rows, inputs = {"before": f"mtnlg at {a.before_rev}", "after": "this working tree", "reps": a.speed_reps}, {}
    if ed := [s for s in stages if s in ("extract", "decontaminate")]:
        inp = work / f"input-{a.gb:g}gb"
        (
            json.loads((inp / "input.json").read_text())
            if (inp / "input.json").is_file()
            else make_input(inp, a.shards, int(a.gb * 1e9 / a.shards), seed=0, workers=a.workers)
        )
        shards = sorted((inp / "cc").glob("*.warc.gz"))[: a.speed_shards]
        warc = sum(s.stat().st_size for s in shards)
        rows = speed_rows(shards, work, a.before_rev, a.speed_reps, ed)
        for stage in ed:  # per GB of .warc.gz, as plan_rates counts
            rows[stage] |= {
                "before_cpu_s_per_gb_warc": round(rows[stage]["before_cpu_s"] / (warc / 1e9), 1),
                "after_cpu_s_per_gb_warc": round(rows[stage]["after_cpu_s"] / (warc / 1e9), 1),
            }
        inputs = {"warc_shards": len(shards), "warc_bytes": warc, "from": str(inp)}
    if "tokenize" in stages:
        rows["tokenize"] = tokenize_row(
            Path(a.tokenize_from or work / "small" / "ours"), work, a.before_rev, a.speed_reps
        )
    return {
        "benchmark": "curate",
        "date": datetime.date.today().isoformat(),
        "device": "cpu",
        "command": "python bench/curate.py " + " ".join(sys.argv[1:]),
        "hardware": hardware(),
        "workers": 1,
        "input": inputs,
        "speed_before_after": rows,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--gb", type=float, default=1.0, help="the larger input's .warc.gz gigabytes (the smaller is a quarter)"
    )
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--work", default="/tmp/mtnlg-curate-bench")
    ap.add_argument("--save", action="store_true")
    ap.add_argument("--sizes", default="small,large", help="which sizes to run: small,large")
    ap.add_argument(
        "--speed-rows",
        action="store_true",
        help="only issue 52's before/after rows of extraction and decontamination (no pipeline, no datatrove)",
    )
    ap.add_argument("--before-rev", default="156f8ea", help="the 'before' code of --speed-rows")
    ap.add_argument("--speed-shards", type=int, default=2)
    ap.add_argument("--speed-reps", type=int, default=3)
    ap.add_argument(
        "--speed-stages",
        default="extract,decontaminate",
        help="which stages --speed-rows measures (decontaminate reads extract's output; tokenize reads "
        "--tokenize-from)",
    )
    ap.add_argument(
        "--tokenize-from",
        help="the tokenize row's input: a pipeline run's output (its decontaminate/ and tokenizer.json; default "
        "WORK/small/ours)",
    )
    ap.add_argument(
        "--save-suffix",
        default="",
        help="--speed-rows --save writes curate_speed-DATE[-SUFFIX]-cpu.json (a second result the same day)",
    )
    ap.add_argument(
        "--replan", metavar="RESULT", help="recompute plan_rates of a saved result from its measurements (runs nothing)"
    )
    a = ap.parse_args(argv)
    if a.replan:
        p = Path(a.replan)
        p.write_text(json.dumps(add_plan_rates(json.loads(p.read_text())), indent=1))
        print("rewrote plan_rates in", p)
        return 0
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    if a.speed_rows:
        r = speed_rows_only(a)
        print(json.dumps(r["speed_before_after"], indent=1))
        if a.speed_stages == "tokenize" and not a.save_suffix:
            a.save_suffix = "tokenize"  # beside the day's other rows
        if (
            a.save
        ):  # not curate-*.json: `mtnlg curate --plan` and bench/report.py read the newest full run's plan_rates there
            p = (
                ROOT
                / "bench/results"
                / f"curate_speed-{r['date']}{'-' + a.save_suffix if a.save_suffix else ''}-cpu.json"
            )
            p.write_text(json.dumps(r, indent=1))
            print("wrote", p)
        return 0
    tok = tokenizer_files(work)
    result = {
        "benchmark": "curate",
        "date": datetime.date.today().isoformat(),
        "device": "cpu",
        "command": "python bench/curate.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "hardware": hardware(),
        "workers": a.workers,
        "sizes": {},
    }
    for name in a.sizes.split(","):
        gb = a.gb / (4 if name == "small" else 1)
        inp = work / f"input-{gb:g}gb"
        info = json.loads((inp / "input.json").read_text()) if (inp / "input.json").is_file() else None
        if not info or info["shards"] != a.shards:
            print(f"building {gb:g} GB of .warc.gz in {a.shards} shards under {inp} ...", flush=True)
            info = make_input(inp, a.shards, int(gb * 1e9 / a.shards), seed=0, workers=a.workers)
        size = {"input": {k: v for k, v in info.items() if k not in ("planted_pairs", "files")}, "workers": a.workers}
        size["input"]["planted_pairs"] = len(info["planted_pairs"])
        print(f"[{name}] ours: mtnlg curate on {info['warc_bytes'] / 1e9:.2f} GB ...", flush=True)
        size["ours"] = run_ours(inp, work / name, tok, a.workers)
        print(f"[{name}] datatrove ...", flush=True)
        size["datatrove"] = run_datatrove(inp, work / name, tok, a.shards, a.workers)
        for dt, names in MATCHING.items():  # the same input documents and bytes as our matching stage
            size["datatrove"]["stages"][dt] |= {
                k: size["ours"]["stages"][names[0]][k] for k in ("docs_in", "input_bytes")
            }
        jac = planted_jaccard(work / name / "ours", info["planted_pairs"])
        for side in ("ours", "datatrove"):
            size[side]["dedup_quality"] = dedup_quality(
                size[side].pop("removed_as_duplicates"), info["planted_pairs"], jac
            )
            size[side]["rates"] = {n: rates(s) for n, s in size[side]["stages"].items()}
        size["ours_vs_datatrove"] = compare(size["ours"], size["datatrove"])
        result["sizes"][name] = size
        report(name, size)
        if a.save:
            save(result)
    add_plan_rates(result)
    if a.save:
        print("wrote", save(result))
    return 0


def save(result: dict) -> Path:
    p = ROOT / "bench/results" / f"curate-{result['date']}-cpu.json"
    p.write_text(json.dumps(result, indent=1))
    return p


def report(name: str, size: dict):
    print(f"[{name}] {size['input']['warc_bytes'] / 1e9:.2f} GB .warc.gz, {size['input']['html_pages']:,} pages")
    for side in ("ours", "datatrove"):
        s = size[side]
        print(
            f"  {side}: total {s['wall_seconds']:.0f} s wall; peak RSS driver "
            f"{s['rss']['driver_bytes'] / 2**20:.0f} MiB, "
            f"worker max {s['rss']['worker_max_bytes'] / 2**20:.0f} MiB; dedup recall "
            f"{s['dedup_quality']['recall']:.3f} (all planted "
            f"{s['dedup_quality']['recall_all_planted']:.3f}) precision {s['dedup_quality']['precision']:.3f}"
            + (f"; dedup planning {s['dedup_index']['bytes_per_doc']:.0f} B/document" if "dedup_index" in s else "")
        )
        for n, r in s["rates"].items():
            print(f"    {n:14s} {r}")
    for n, r in size["ours_vs_datatrove"].items():
        print(
            f"  {n:28s} ours {r['ours_s']:8.1f} s  datatrove {r['datatrove_s']:8.1f} s  ours faster "
            f"x{r['ours_faster_x']:.2f}"
        )


if __name__ == "__main__":
    sys.exit(main())
