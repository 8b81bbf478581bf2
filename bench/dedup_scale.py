"""The partitioned dedup plan (chapter 32) at two corpus sizes 4x apart (4x the documents in 4x the shards): each
stage's task timed and its memory measured in a fresh process, and the driver's peak RSS while the whole plan runs on a
local pool of 2 workers — against the single-process `plan_dedup`, whose memory grows by its signatures.

    [BAND_SPLITS=4] python bench/dedup_scale.py [--docs 100000] [--shards 25] [--driver-shards 300]
                                                [--work /tmp/mtnlg-dedup-scale] [--save]

Input: synthetic MinHash signatures (uniform random uint32, 128 a document) in `.npz` files as `signature_shard`
writes them; 5% of the documents are copies of an earlier one with 4 of 128 entries changed (estimated Jaccard 0.97:
candidates and edges). A third size, 4x the documents in the 1x shard count, separates the cost a document from the
cost a shard. Per-document constants are marginal: (peak at 4x - peak at 1x) / (documents added), from
tracemalloc (numpy's buffers and Python objects); peak RSS (VmHWM) is reported beside them. Then a whole curation
(tests/test_many_shards.py's one-document shards) at `--driver-shards` and 4x as many, on a pool of 2 workers: the
driver's CPU seconds a shard, in all and, by stage, while the stage's maps ran (the rest, between maps, is what no
node count shortens), and its and the workers' peak RSS (sampled every 0.1 s). These rates feed `mtnlg curate --plan`
(chapter 39). `--driver-only` measures the driver alone and saves it as bench/results/curate_driver-<date>-cpu.json,
which the plan reads beside the newest dedup-scale file."""

import argparse
import datetime
import json
import os
import resource
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
BANDS, ROWS, THRESHOLD, PRIORITY = 16, 8, 0.8, ["wikipedia", "cc"]
SPLITS = int(os.environ.get("BAND_SPLITS", 4))
REPEATS = 3  # LSH tasks a band (dedup.band_splits); the plan assumes the measured one


def _key_files(work, files) -> list[str]:
    return [str(Path(work) / "keys" / f"{k:06d}.npy") for k in range(len(files))]


def make_signatures(folder: Path, docs: int, shards: int, seed: int = 0) -> list[str]:
    """Signature files of `docs` documents over `shards` shards (dataset cc, the first tenth wikipedia), 5% planted
    copies."""
    folder.mkdir(parents=True, exist_ok=True)
    done = folder / "files.json"
    if done.is_file():
        return json.loads(done.read_text())
    rng = np.random.default_rng(seed)
    sig = rng.integers(0, 2**32 - 1, (docs, 128), dtype=np.uint32)
    copies = rng.choice(np.arange(docs // 2, docs), docs // 20, replace=False)
    sig[copies] = sig[rng.integers(0, docs // 2, len(copies))]
    cols = rng.integers(0, 128, (len(copies), 4))
    sig[copies[:, None], cols] = rng.integers(0, 2**32 - 1, cols.shape, dtype=np.uint32)
    files, bounds = [], np.linspace(0, docs, shards + 1).astype(int)
    for s in range(shards):
        a, b = bounds[s], bounds[s + 1]
        ds = "wikipedia" if s < max(1, shards // 10) else "cc"
        f = folder / f"{ds}-{s:05d}.npz"
        np.savez(
            f,
            sig=sig[a:b],
            ids=np.array([f"{ds}/{s}:{i}" for i in range(b - a)], dtype=object),
            datasets=np.array([ds] * (b - a), dtype=object),
        )
        files.append(str(f))
    done.write_text(json.dumps(files))
    return files


def _vmhwm() -> int:
    "This process's peak resident set (VmHWM): unlike getrusage's ru_maxrss, not inherited from the parent across exec."
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def _child(stage: str, files: list, work: str) -> dict:
    "One stage in this (fresh) process: seconds, tracemalloc peak, peak RSS."
    from mtnlg import dedup
    from mtnlg.curate_config import LocalExecutor

    offsets = np.concatenate([[0], np.cumsum([dedup.signature_count(f) for f in files])]).astype(np.int64)
    P, keys = dedup.plan_partitions(len(files)), _key_files(work, files)
    Q, shards = dedup.component_partitions(P), dedup.write_shard_list(work, files, keys, offsets)
    run = {
        "band_keys": lambda: [dedup.band_keys_task(f, k, BANDS, ROWS, PRIORITY) for f, k in zip(files, keys)],
        "band": lambda: dedup.lsh_band_task(shards, 0, P, work, 0, SPLITS),
        "verify": lambda: [
            dedup.verify_partition_task(shards, p, BANDS, THRESHOLD, work, 65536, SPLITS, Q) for p in range(P)
        ],
        "components": lambda: dedup.components_rounds(shards, Q, work, edge_files=P),  # every task, one at a time
        "shard_drops": lambda: len(
            dedup.shard_drops(files[0], 0, PRIORITY, Path(work) / "fate", Path(work) / "drops-0.json", Q)
        ),
        "plan_dedup": lambda: dedup.plan_dedup(files, PRIORITY, THRESHOLD, BANDS, ROWS)[1],
    }
    if stage == "driver":  # the whole partitioned plan on a pool of 2 workers: this process is the driver
        from curate import PeakRSS

        ex, rss = LocalExecutor(2), PeakRSS(os.getpid(), 0.1)
        t = time.time()
        try:
            info = dedup.partitioned_plan(
                files,
                PRIORITY,
                THRESHOLD,
                BANDS,
                ROWS,
                Path(work) / "driver",
                0,
                lambda fn, a, w="": ex.map(fn, a, w, False),
                SPLITS,
            )[0]
        finally:
            ex.close()
        r = rss.result()
        return {
            "seconds": time.time() - t,
            "driver_rss_bytes": _vmhwm(),
            "worker_rss_bytes": r["worker_max_bytes"],
            "plan": info,
        }
    if stage == "plan_dedup":
        dedup.plan_dedup(files[:1], PRIORITY, THRESHOLD, BANDS, ROWS)
    tracemalloc.start()
    out = run[stage]()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    seconds = []
    for _ in range(REPEATS):  # timed apart from tracemalloc (it slows allocation); the median of REPEATS runs
        _forget(stage, work, keys)
        t = time.time()
        run[stage]()
        seconds.append(time.time() - t)
    return {
        "seconds": float(np.median(seconds)),
        "all_seconds": seconds,
        "peak_traced_bytes": peak,
        "rss_bytes": _vmhwm(),
        "result": out if not isinstance(out, np.ndarray) else None,
    }


def _forget(stage: str, work, keys):
    "Remove what a stage wrote, so that running it again redoes the work (each task skips work whose output exists)."
    import shutil

    work = Path(work)
    if stage == "band_keys":
        for k in keys:
            Path(k).with_suffix(".live.npy").unlink(missing_ok=True)
    elif stage == "band":
        shutil.rmtree(work / "band-000-000", ignore_errors=True)
    elif stage == "verify":
        for f in (work / "edges").glob("*.json"):
            f.unlink()
    elif stage == "components":
        shutil.rmtree(work / "components", ignore_errors=True)
        shutil.rmtree(work / "fate", ignore_errors=True)
    elif stage == "shard_drops":
        (work / "drops-0.json").unlink(missing_ok=True)


def _curate_child(config: str) -> dict:
    """A whole curation on a pool of 2 workers, this process its driver: the driver's CPU seconds (in all, and by
    stage while its maps ran) and peak RSS, the workers' peak RSS."""
    from mtnlg.curate import curate
    from mtnlg.curate_config import load_curate_config
    from curate import PeakRSS

    rss = PeakRSS(os.getpid(), 0.1)
    t = time.time()
    cfg = load_curate_config(config)
    summary = curate(cfg, workers=2, progress=False, log=lambda *a: None)
    me, r = resource.getrusage(resource.RUSAGE_SELF), rss.result()
    timed = json.loads((cfg.path(cfg.output_dir) / "manifests/task_seconds.json").read_text())["driver_cpu_seconds"]
    return {
        "shards": summary["stages"]["extract"]["shards"],
        "seconds": time.time() - t,
        "driver_cpu_seconds": me.ru_utime + me.ru_stime,  # the whole process, imports and all
        "driver_map_cpu_seconds": timed["maps"],  # by stage: while its maps ran (beside the workers)
        "driver_rss_bytes": _vmhwm(),
        "worker_rss_bytes": r["worker_max_bytes"],
        "dedup_plan": summary["stages"]["dedup"]["plan"],
    }


def driver_at(shards: int, work: Path) -> dict:
    "tests/test_many_shards.py's corpus of one-document shards, `shards` of them, curated in a fresh process."
    import shutil

    sys.path.insert(0, str(ROOT / "tests"))
    from test_many_shards import many_shards

    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    config = many_shards(work, shards * 4 // 5, shards // 5)
    r = subprocess.run(
        [sys.executable, __file__, "--curate-child", str(config)], capture_output=True, text=True, cwd=ROOT
    )
    if r.returncode:
        raise RuntimeError(r.stderr[-3000:])
    return json.loads(r.stdout.strip().splitlines()[-1])


def child(stage: str, files: list, work: Path) -> dict:
    r = subprocess.run(
        [sys.executable, __file__, "--child", stage, "--work", str(work)],
        input=json.dumps(files),
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    if r.returncode:
        raise RuntimeError(f"{stage}: {r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def measure(files: list, work: Path) -> dict:
    "Every stage once (the bands first, so that verify and components have their input), in fresh processes."
    from mtnlg import dedup
    import shutil

    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    out = {
        "documents": sum(dedup.signature_count(f) for f in files),
        "shards": len(files),
        "band_splits": SPLITS,
        "band_keys": child("band_keys", files, work),
        "band": child("band", files, work),
    }
    offsets = np.concatenate([[0], np.cumsum([dedup.signature_count(f) for f in files])]).astype(np.int64)
    shards = dedup.write_shard_list(work, files, _key_files(work, files), offsets)
    for b in range(BANDS):
        for s in range(SPLITS):
            dedup.lsh_band_task(shards, b, dedup.plan_partitions(len(files)), work, s, SPLITS)
    out["verify"] = child("verify", files, work)
    for stage in ("components", "shard_drops", "plan_dedup", "driver"):
        out[stage] = child(stage, files, work)
    return out


def per_doc(small: dict, more_docs: dict, large: dict) -> dict:
    """Marginal bytes and seconds a document of each stage (1x -> 4x the documents in the same shards) and seconds a
    shard (4x the documents in the same shards -> in 4x the shards): a task that visits every shard pays both."""
    dn, ds = more_docs["documents"] - small["documents"], large["shards"] - more_docs["shards"]
    stages = ("band_keys", "band", "verify", "components", "shard_drops", "plan_dedup")
    return {
        "traced_bytes_per_doc": {
            s: (more_docs[s]["peak_traced_bytes"] - small[s]["peak_traced_bytes"]) / dn for s in stages
        },
        "seconds_per_doc": {s: (more_docs[s]["seconds"] - small[s]["seconds"]) / dn for s in stages},
        "seconds_per_shard": {s: (large[s]["seconds"] - more_docs[s]["seconds"]) / ds for s in stages},
        "driver_rss_ratio_4x": large["driver"]["driver_rss_bytes"] / small["driver"]["driver_rss_bytes"],
        "worker_rss_ratio_4x": large["driver"]["worker_rss_bytes"] / small["driver"]["worker_rss_bytes"],
    }


def driver_rates(driver: dict) -> dict:
    "The driver's CPU seconds a shard (1x -> 4x), in all and by stage while the maps ran; the rest: between maps."
    a, b = driver["1x"], driver["4x"]
    n = b["shards"] - a["shards"]
    maps = {s: (b["driver_map_cpu_seconds"].get(s, 0.0) - v) / n for s, v in a["driver_map_cpu_seconds"].items()}
    total = (b["driver_cpu_seconds"] - a["driver_cpu_seconds"]) / n
    return {
        "driver_cpu_seconds_per_shard": total,
        "driver_map_cpu_seconds_per_shard": maps,
        "driver_serial_cpu_seconds_per_shard": total - sum(maps.values()),
    }


def driver_only(a, argv) -> int:
    "The curation driver alone at `--driver-shards` x 1, 2, 4: bench/results/curate_driver-<date>-cpu.json."
    work, load = Path(a.work), [os.getloadavg()[0]]
    driver = {
        name: driver_at(a.driver_shards * k, work / f"curate-{name}") for name, k in (("1x", 1), ("2x", 2), ("4x", 4))
    }
    result = {
        "benchmark": "curate_driver",
        "date": datetime.date.today().isoformat(),
        "device": "this 2-core CPU",
        "machine_note": "shared with other jobs: CPU seconds, which its load hardly changes",
        "load_average_1min": load + [os.getloadavg()[0]],
        "command": "python bench/dedup_scale.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "curation_driver": driver,
        **driver_rates(driver),
    }
    print(json.dumps({k: v for k, v in result.items() if k.startswith("driver_")}, indent=1))
    if a.save:
        p = ROOT / "bench/results" / f"curate_driver-{result['date']}-cpu.json"
        p.write_text(json.dumps(result, indent=1, default=str))
        print("wrote", p)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=100_000)
    ap.add_argument("--shards", type=int, default=25)
    ap.add_argument("--work", default="/tmp/mtnlg-dedup-scale")
    ap.add_argument("--save", action="store_true")
    ap.add_argument(
        "--driver-shards",
        type=int,
        default=300,
        help="the curation's one-document shards at 1x (4x: four times as many)",
    )
    ap.add_argument("--driver-only", action="store_true", help="only the curation driver (curate_driver-*.json)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--curate-child", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        print(json.dumps(_child(a.child, json.loads(sys.stdin.read()), a.work), default=str))
        return 0
    if a.curate_child:
        print(json.dumps(_curate_child(a.curate_child), default=str))
        return 0
    if a.driver_only:
        return driver_only(a, argv)
    work, sizes, load = Path(a.work), {}, [os.getloadavg()[0]]
    for name, k, ks in (("1x", 1, 1), ("2x-docs", 2, 1), ("4x-docs", 4, 1), ("4x", 4, 4)):
        files = make_signatures(work / f"sig-{name}", a.docs * k, a.shards * ks)
        sizes[name] = measure(files, work / f"plan-{name}")
        print(
            name,
            json.dumps(
                {
                    s: (v if not isinstance(v, dict) else {kk: vv for kk, vv in v.items() if kk != "result"})
                    for s, v in sizes[name].items()
                }
            ),
            flush=True,
        )
    driver = {
        name: driver_at(a.driver_shards * k, work / f"curate-{name}") for name, k in (("1x", 1), ("2x", 2), ("4x", 4))
    }
    print("driver", json.dumps(driver), flush=True)
    result = {
        "benchmark": "dedup_scale",
        "date": datetime.date.today().isoformat(),
        "device": "this 2-core CPU",
        "machine_note": "shared with other jobs: seconds are upper bounds under its load; memory is not affected",
        "load_average_1min": load + [os.getloadavg()[0]],  # at the start and at the end
        "command": "python bench/dedup_scale.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "band_splits": SPLITS,
        "sizes": sizes,
        "marginal": per_doc(sizes["1x"], sizes["4x-docs"], sizes["4x"]),
        "curation_driver": driver,
        **driver_rates(driver),
        "curation_driver_rss_ratio_4x": driver["4x"]["driver_rss_bytes"] / driver["1x"]["driver_rss_bytes"],
        "curation_worker_rss_ratio_4x": driver["4x"]["worker_rss_bytes"] / driver["1x"]["worker_rss_bytes"],
    }
    print(
        json.dumps(
            {
                k: result[k]
                for k in (
                    "marginal",
                    "driver_cpu_seconds_per_shard",
                    "driver_serial_cpu_seconds_per_shard",
                    "curation_driver_rss_ratio_4x",
                    "curation_worker_rss_ratio_4x",
                )
            },
            indent=1,
        )
    )
    if a.save:
        p = ROOT / "bench/results" / f"dedup-scale-{result['date']}-cpu.json"
        p.write_text(json.dumps(result, indent=1, default=str))
        print("wrote", p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
