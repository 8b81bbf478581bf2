"""Sharded checkpoints (chapter 43) against plain `torch.save` / `torch.load`, on CPU, one process, all in one run:

1. Save, GB/s per rank: `save_checkpoint` of a real shard (a `SingleProcess` backend after one training step on
   scaled_configs/tiny.yaml scaled up to --hidden x --layers; the shard holds the weights, fp32 masters, Adam's two
   moments and the RNG streams) vs `torch.save` of the same dict to the same filesystem — once without fsync (page
   cache only) and once followed by `os.fsync` (what our save does: it fsyncs every file, the directory and the
   `latest` pointer; their time is reported). The snapshot (`checkpoint_shard()`: copying the tensors out of the
   model, which the training loop pays before the save) is timed apart.
2. Load, GB/s per rank: `Checkpoint(dir)` + `SingleProcess.load_checkpoint(ckpt)` (memory-mapped `torch.load`, tensors
   assembled whole, copied into the model and Adam's state) vs plain `torch.load(weights_only=True)` of the same shard
   file (which copies nothing into the model), and vs that load followed by the same copies (like for like). Warm: the
   file is in the page cache (just written); cold: its pages are dropped first (posix_fadvise DONTNEED after fsync).
   Checksums (chapter 43): every save hashes the shard as it writes it; every load checks it, in a second thread
   while `torch.load` maps the file and `load_checkpoint` copies the tensors out (an error on a mismatch, after). Both
   are also timed without (`ours_unhashed`: the shard written by plain `torch.save`, no checksum; `ours_unverified`: the
   load with the checks off), in the same run, alternating: `checksum_cost` is ours / without, in seconds (target: <=
   1.05 on load).
3. The resume path, seconds: what the trainer does with a checkpoint, minus the data — choose the step (`--resume
   auto`), build the model, copy the weights and Adam's state in, and the checksums' verdict (`resume_from`,
   `make_backend`, `load_start`). The shards are hashed in a background thread from the moment the step is chosen,
   while the model is built and filled; timed also with the checks off and in the order used before 2026-11-27 (every
   file hashed first, then build and load). `checksum_cost` here is the cost a resume pays for its checksums.
4. Resume, seconds: `train()` from the call to its return for one step, from a fresh start vs resuming from the step-1
   checkpoint (`checkpoint.resume=<dir>`, one more step). Both build the model, read the (cached) data, run the step,
   one validation batch, and save the final checkpoint; the difference is the cost of resuming.

Each save and load timing is repeated --reps times, each train() call --resume-reps times (the sides alternate; both
at least 5), and the median reported with min and max (the machine is shared); ratios are of medians, ours / baseline
(GB/s) or resume / fresh (seconds). GB/s = bytes of the shard file / seconds. Files go under --dir (default
.cache/bench_checkpoint in the repository, i.e. the filesystem checkpoints go to), deleted at the end. torch runs on
--threads intra-op threads (default 1: on a shared machine two OpenMP threads wait on each other and our load, which
is made of parallel tensor fills and copies, ran 3-13x slower that way here; the warm load is also timed at
torch's default).

    .venv/bin/python bench/checkpoint.py [--hidden 512 --layers 8] [--reps 5] [--resume-reps 3] [--dir DIR]

Prints a table; with --save also writes bench/results/checkpoint-cpu-<date>.json (config, bytes per shard, machine).
"""

import argparse
import datetime
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from stats import summary, hardware, MIN_RUNS

CONFIG = ROOT / "scaled_configs/tiny.yaml"
GB = 1e9


def overrides(a, work: Path) -> dict:
    return {
        "model.hidden_size": a.hidden,
        "model.num_layers": a.layers,
        "model.num_attention_heads": max(1, a.hidden // 64),
        "schedule.batch_size_rampup_start": None,
        "schedule.batch_size_rampup_increment": None,
        "schedule.global_batch_size": 8,
        "schedule.micro_batch_size": 8,
        "schedule.eval_iters": 1,  # a short step
        "schedule.train_iters": 1,
        "output_dir": str(work / "run"),
    }


def fsync(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def drop_cache(path):
    "Evict `path`'s (clean) pages from the page cache, so the next read comes from the disk."
    fsync(path)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def settle():
    "Write back dirty pages left by the previous measurement, outside the timers."
    os.sync()


def timed(fn):
    t0 = time.perf_counter()
    r = fn()
    return time.perf_counter() - t0, r


def med(xs):
    return statistics.median(xs)


def bench_save(backend, cfg, layout, tokenizer_file, work: Path, reps: int) -> dict:
    import torch
    import mtnlg.checkpoint as C
    from mtnlg.checkpoint import save_checkpoint, shard_name

    fsyncs = {"calls": 0, "s": 0.0}
    real_fsync = C._fsync

    def counted_fsync(path):  # save_checkpoint fsyncs every file it writes, the step directory and the root
        t0 = time.perf_counter()
        real_fsync(path)
        fsyncs["s"] += time.perf_counter() - t0
        fsyncs["calls"] += 1

    state = {"step": 1, "consumed_samples": 0, "tokens": 0, "skipped_steps": 0, "loss_window": [], "elapsed_s": 0.0}
    t = {"snapshot": [], "ours": [], "ours_fsync": [], "ours_unhashed": [], "torch_save": [], "torch_save_fsync": []}
    real_save_hashed = C.save_hashed

    def unhashed(obj, path):
        torch.save(obj, path)
        return "0" * 16  # the same save, no checksum computed

    size = {}
    for i in range(reps):
        dt, shard = timed(backend.checkpoint_shard)
        t["snapshot"].append(dt)
        root = work / f"save-{i}"
        settle()
        fsyncs.update(calls=0, s=0.0)
        C._fsync = counted_fsync
        try:
            dt, final = timed(lambda: save_checkpoint(root, 1, shard, cfg, layout, tokenizer_file, state, keep_last=2))
        finally:
            C._fsync = real_fsync
        t["ours"].append(dt)
        t["ours_fsync"].append(fsyncs["s"])
        size["ours"] = (final / shard_name(0)).stat().st_size
        bare = work / f"unhashed-{i}"
        settle()
        C.save_hashed = unhashed
        try:
            dt, _ = timed(lambda: save_checkpoint(bare, 1, shard, cfg, layout, tokenizer_file, state, keep_last=2))
        finally:
            C.save_hashed = real_save_hashed
        t["ours_unhashed"].append(dt)
        shutil.rmtree(bare)
        for kind in ("torch_save", "torch_save_fsync"):
            p = work / f"{kind}-{i}.pt"
            settle()
            dt, _ = timed(lambda: (torch.save(shard, p), kind.endswith("fsync") and fsync(p)))
            t[kind].append(dt)
            size[kind] = p.stat().st_size
            p.unlink()
        if i < reps - 1:
            shutil.rmtree(root)  # the last one is loaded below
    settle()
    out = {
        "bytes_per_shard": size["ours"],
        "torch_save_bytes": size["torch_save"],
        "seconds": t,
        "median_s": {k: med(v) for k, v in t.items()},
        "min_s": {k: min(v) for k, v in t.items()},
        "max_s": {k: max(v) for k, v in t.items()},
        "gb_per_s": {
            k: size.get(k, size["ours"]) / GB / med(v) for k, v in t.items() if k not in ("snapshot", "ours_fsync")
        },
        "gb_per_s_runs": {
            k: summary([size.get(k, size["ours"]) / GB / x for x in v])
            for k, v in t.items()
            if k not in ("snapshot", "ours_fsync")
        },
        "ours_fsync_calls": fsyncs["calls"],
    }
    g = out["gb_per_s"]
    out["ratio_vs_torch_save"] = g["ours"] / g["torch_save"]
    out["ratio_vs_torch_save_fsync"] = g["ours"] / g["torch_save_fsync"]
    out["checksum_cost"] = out["median_s"]["ours"] / out["median_s"]["ours_unhashed"]
    out["checkpoint"] = str(work / f"save-{reps - 1}" / "step-0000001")
    return out


def bench_load(backend, ckpt_dir: Path, reps: int, default_threads: int) -> dict:
    import torch
    from mtnlg.checkpoint import Checkpoint, shard_name
    from mtnlg.checkpoint import tp_dim

    path = ckpt_dir / shard_name(0)
    size = path.stat().st_size
    params = dict(backend.model.named_parameters())

    def ours():  # the shard's checksum runs in a second thread beside torch.load and the copies
        t0 = time.perf_counter()
        ckpt = Checkpoint(ckpt_dir)
        t1 = time.perf_counter()
        backend.load_checkpoint(ckpt)  # memory-mapped torch.load, assemble, copy in
        t2 = time.perf_counter()
        return {"total": t2 - t0, "open_and_check": t1 - t0, "load_checkpoint": t2 - t1}

    def ours_unverified():  # the same load with the checksum checks off
        import mtnlg.checkpoint as C

        real, C.check_file = C.check_file, lambda *a: None
        try:
            return ours()
        finally:
            C.check_file = real

    def plain():
        t0 = time.perf_counter()
        torch.load(path, map_location="cpu", weights_only=True)
        return {"total": time.perf_counter() - t0}

    @torch.no_grad()
    def plain_and_copy():  # the same end state as load_checkpoint, from one plain torch.load
        t0 = time.perf_counter()
        sd = torch.load(path, map_location="cpu", weights_only=True)
        t1 = time.perf_counter()
        step = sd["optimizer_step"]
        for n, p in params.items():
            f = sd["fragments"][n]
            p.copy_(f["master"].view(p.shape))
            if step:
                backend.optimizer.state[p] = {
                    "step": torch.tensor(float(step)),
                    "exp_avg": f["exp_avg"].view(p.shape),
                    "exp_avg_sq": f["exp_avg_sq"].view(p.shape),
                }
        t2 = time.perf_counter()
        return {"total": t2 - t0, "torch_load": t1 - t0, "copy": t2 - t1}

    out = {"bytes_per_shard": size, "tp_dim_all_whole": all(tp_dim(p) < 0 for p in params.values())}
    for cache in ("warm", "cold"):
        runs = {"ours": [], "ours_unverified": [], "torch_load": [], "torch_load_and_copy": []}
        sides = (
            (ours, "ours"),
            (ours_unverified, "ours_unverified"),
            (plain, "torch_load"),
            (plain_and_copy, "torch_load_and_copy"),
        )
        for fn, key in sides:
            fn()  # warm-up (and the page cache for `warm`)
        for i in range(reps):
            for fn, key in sides if i % 2 == 0 else sides[1::-1] + sides[2:]:  # verified / unverified alternate first
                if cache == "cold":
                    drop_cache(path)
                runs[key].append(fn())
        m = {k: {part: med([r[part] for r in v]) for part in v[0]} for k, v in runs.items()}
        g = {k: size / GB / m[k]["total"] for k in m}
        out[cache] = {
            "seconds": runs,
            "median_s": m,
            "min_total_s": {k: min(r["total"] for r in v) for k, v in runs.items()},
            "max_total_s": {k: max(r["total"] for r in v) for k, v in runs.items()},
            "gb_per_s": g,
            "gb_per_s_runs": {k: summary([size / GB / r["total"] for r in v]) for k, v in runs.items()},
            "ratio_vs_torch_load": g["ours"] / g["torch_load"],
            "ratio_vs_torch_load_and_copy": g["ours"] / g["torch_load_and_copy"],
            "checksum_cost": m["ours"]["total"] / m["ours_unverified"]["total"],
        }
    threads = torch.get_num_threads()
    if threads != default_threads:  # the same warm load with torch's own thread count (all cores), as the trainer runs
        torch.set_num_threads(default_threads)
        try:
            ours()
            runs = [ours() for _ in range(reps)]
        finally:
            torch.set_num_threads(threads)
        m = {part: med([r[part] for r in runs]) for part in runs[0]}
        out["warm_ours_default_threads"] = {
            "threads": default_threads,
            "seconds": runs,
            "median_s": m,
            "gb_per_s": size / GB / m["total"],
            "min_total_s": min(r["total"] for r in runs),
            "max_total_s": max(r["total"] for r in runs),
        }
    return out


def bench_resume_path(base: dict, layout, root: Path, reps: int) -> dict:
    """The trainer's own resume, minus the data: choose the step (`--resume auto`), build the model, copy the weights
    and Adam's state in, and every rank's checksum verdict (`resume_from`, `make_backend`, `load_start`). `ours`: the
    shards are hashed in a background thread from the moment the step is chosen, while the model is built and filled;
    `ours_unverified`: the same with the checks off; `verify_first`: the order before 2026-11-27 (every file hashed,
    then the model built and filled)."""
    import torch
    import mtnlg.checkpoint as C
    from mtnlg.config import load_config
    from mtnlg.train import Run, resume_from, make_backend, load_start

    cfg = load_config(CONFIG, {**base, "checkpoint.dir": str(root), "checkpoint.resume": "auto"})
    cpu, quiet = torch.device("cpu"), lambda *a, **k: None
    path = C.latest_checkpoint(root) / C.shard_name(0)

    def ours():
        t0 = time.perf_counter()
        start = resume_from(cfg, root, layout, quiet)
        t1 = time.perf_counter()
        run = Run(cfg, layout, cpu, root, start)
        run.engine = make_backend(cfg, layout, "single", cpu)
        t2 = time.perf_counter()
        load_start(run, quiet)
        t3 = time.perf_counter()
        return {"total": t3 - t0, "choose": t1 - t0, "build": t2 - t1, "load_and_verdict": t3 - t2}

    def ours_unverified():
        real, C.check_file = C.check_file, lambda *a: None
        try:
            return ours()
        finally:
            C.check_file = real

    def verify_first():
        t0 = time.perf_counter()
        start = C.newest_verified_checkpoint(root, quiet)
        t1 = time.perf_counter()
        engine = make_backend(cfg, layout, "single", cpu)
        t2 = time.perf_counter()
        engine.load_checkpoint(start)
        t3 = time.perf_counter()
        return {"total": t3 - t0, "choose": t1 - t0, "build": t2 - t1, "load_and_verdict": t3 - t2}

    out = {
        "what": bench_resume_path.__doc__.split("\n\n")[0].replace("\n    ", " "),
        "bytes_per_shard": path.stat().st_size,
    }
    sides = ((ours, "ours"), (ours_unverified, "ours_unverified"), (verify_first, "verify_first"))
    for cache in ("warm", "cold"):
        runs = {k: [] for _, k in sides}
        for fn, _ in sides:
            fn()  # warm-up
        for i in range(reps):
            for fn, key in sides[i % 3 :] + sides[: i % 3]:  # each side first in turn
                if cache == "cold":
                    drop_cache(path)
                runs[key].append(fn())
        m = {k: {part: med([r[part] for r in v]) for part in v[0]} for k, v in runs.items()}
        out[cache] = {
            "seconds": runs,
            "median_s": m,
            "min_total_s": {k: min(r["total"] for r in v) for k, v in runs.items()},
            "max_total_s": {k: max(r["total"] for r in v) for k, v in runs.items()},
            "checksum_cost": m["ours"]["total"] / m["ours_unverified"]["total"],
            "verify_first_cost": m["verify_first"]["total"] / m["ours_unverified"]["total"],
        }
    return out


def bench_resume(work: Path, base: dict, reps: int) -> dict:
    import mtnlg.train as T
    from mtnlg.config import load_config

    quiet = lambda *x, **k: None
    src = work / "ckpt-src"
    fresh = load_config(CONFIG, {**base, "checkpoint.dir": str(work / "ckpt-fresh")})
    resume = load_config(
        CONFIG,
        {
            **base,
            "schedule.train_iters": 2,
            "checkpoint.dir": str(work / "ckpt-resume"),
            "checkpoint.resume": str(src / "step-0000001"),
        },
    )
    # inside each train() call, time the parts a resume adds (finding + checking the checkpoint, loading it) and the
    # final save both pay, by wrapping what train() calls (module globals and a method; restored after each call)
    spent = {}

    def wrap(owner, name, key):
        real = getattr(owner, name)

        def timed_call(*args, **kw):
            t0 = time.perf_counter()
            r = real(*args, **kw)
            spent[key] = spent.get(key, 0.0) + time.perf_counter() - t0
            return r

        setattr(owner, name, timed_call)
        return lambda: setattr(owner, name, real)

    def run(cfg):
        spent.clear()
        undo = [
            wrap(T, "resume_from", "find_and_check_checkpoint_s"),
            wrap(T.SingleProcess, "load_checkpoint", "load_checkpoint_s"),
            wrap(T, "save_checkpoint", "save_checkpoint_s"),
        ]
        try:
            dt, r = timed(lambda: T.train(cfg, progress=False, log=quiet, backend="single"))
        finally:
            for u in undo:
                u()
        return dt, r, dict(spent)

    t0 = time.perf_counter()
    T.train(load_config(CONFIG, {**base, "checkpoint.dir": str(src)}), progress=False, log=quiet, backend="single")
    prepare_s = time.perf_counter() - t0  # tokenizer training and data indexing happen here, once
    run(resume)  # warm-up: megatron's index for 2 steps' samples
    t, parts = {"fresh": [], "resume": []}, {"fresh": [], "resume": []}
    for i in range(reps):
        order = (("fresh", fresh), ("resume", resume))
        for key, cfg in order if i % 2 == 0 else order[::-1]:  # alternate which goes first
            shutil.rmtree(cfg.checkpoint.dir, ignore_errors=True)
            settle()
            dt, r, part = run(cfg)
            t[key].append(dt)
            parts[key].append(part)
            assert r.metrics[-1]["step"] == (1 if key == "fresh" else 2), r.metrics[-1]
    m = {k: med(v) for k, v in t.items()}
    return {
        "first_call_with_data_preparation_s": prepare_s,
        "seconds": t,
        "median_s": m,
        "min_s": {k: min(v) for k, v in t.items()},
        "max_s": {k: max(v) for k, v in t.items()},
        "runs": {k: summary(v) for k, v in t.items()},
        "resume_overhead_s": m["resume"] - m["fresh"],
        "ratio_resume_vs_fresh": m["resume"] / m["fresh"],
        "inside_train_s": parts,
        "inside_train_median_s": {k: {p: med([x.get(p, 0.0) for x in v]) for p in v[0]} for k, v in parts.items()},
        "source_checkpoint": str(src / "step-0000001"),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hidden", type=int, default=512, help="model.hidden_size (heads: hidden / 64)")
    ap.add_argument("--layers", type=int, default=8, help="model.num_layers")
    ap.add_argument("--reps", type=int, default=5, help="repetitions of each save and load timing (median reported)")
    ap.add_argument(
        "--resume-reps", type=int, default=MIN_RUNS, help="repetitions of each train() call (median reported)"
    )
    ap.add_argument(
        "--dir", default=str(ROOT / ".cache" / "bench_checkpoint"), help="scratch directory (deleted at the end)"
    )
    ap.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads for everything (0: torch's default, "
        "all cores); 1 keeps timings stable on a shared machine, where OpenMP threads wait on each other",
    )
    ap.add_argument("--skip-resume", action="store_true", help="only the save and load measurements")
    ap.add_argument("--note", default="", help="a remark stored with the result (what else loaded the machine)")
    ap.add_argument("--save", action="store_true", help="write the result to --out (default: print only)")
    ap.add_argument(
        "--out", default=str(ROOT / "bench" / "results" / f"checkpoint-cpu-{datetime.date.today().isoformat()}.json")
    )
    a = ap.parse_args()
    if min(a.reps, a.resume_reps) < MIN_RUNS:
        ap.error(f"--reps and --resume-reps must be at least {MIN_RUNS}")
    import torch
    from mtnlg.topology import Layout, init_distributed, quiet_libraries

    quiet_libraries()  # before megatron-core is imported: its CPU warnings
    from mtnlg.config import load_config, count_parameters
    from mtnlg.train import SingleProcess

    default_threads = torch.get_num_threads()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    work = Path(a.dir)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    t_start = time.perf_counter()
    res = {
        "benchmark": "sharded checkpoint save / load / resume vs torch.save / torch.load",
        "date": datetime.date.today().isoformat(),
        "hardware": hardware(),
        "scratch_dir": str(work),
        "reps": a.reps,
        "resume_reps": a.resume_reps,
        **({"note": a.note} if a.note else {}),
    }
    base = overrides(a, work)
    cfg = load_config(CONFIG, base)
    layout = init_distributed(Layout.of(cfg))  # one process, no launcher: a gloo group of 1
    res["config"] = {
        "base": str(CONFIG.relative_to(ROOT)),
        "overrides": base,
        "parameters": count_parameters(cfg.model),
        "layout": str(layout),
        "precision": cfg.precision,
        "torch_threads": torch.get_num_threads(),
        "torch_default_threads": default_threads,
    }
    try:
        if not a.skip_resume:
            res["resume"] = bench_resume(work, base, a.resume_reps)
            tokenizer_file = Path(res["resume"]["source_checkpoint"]) / "tokenizer.json"
        else:
            tokenizer_file = work / "tokenizer.json"
            tokenizer_file.write_text("{}")  # save_checkpoint copies it; any file will do
        backend = SingleProcess(cfg, torch.device("cpu"))
        g = torch.Generator().manual_seed(0)
        batch = torch.randint(
            0, cfg.model.vocab_size, (cfg.schedule.global_batch_size, cfg.model.seq_length + 1), generator=g
        )
        backend.train_step(batch, cfg.optimizer.lr)  # Adam's moments exist: the shard is a real one
        res["save"] = bench_save(backend, cfg, layout, tokenizer_file, work, a.reps)
        res["load"] = bench_load(backend, Path(res["save"]["checkpoint"]), a.reps, default_threads)
        res["resume_path"] = bench_resume_path(base, layout, Path(res["save"]["checkpoint"]).parent, a.reps)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    res["total_s"] = time.perf_counter() - t_start
    res["hardware"]["load_avg_1min_end"] = os.getloadavg()[0]

    s, l = res["save"], res["load"]
    mb = s["bytes_per_shard"] / 1e6
    print(
        f"{res['config']['parameters']:,} parameters (hidden {a.hidden}, {a.layers} layers), one rank, "
        f"shard {mb:,.0f} MB; "
        f"{os.cpu_count()} CPUs (load average {res['hardware']['load_avg_1min_start']:.1f} at the start: "
        f"other work slows both sides), "
        f"torch {torch.__version__} on {torch.get_num_threads()} thread(s); medians of {a.reps} (train: "
        f"{a.resume_reps})"
    )
    sv = lambda k: (s["median_s"][k], s["min_s"][k], s["max_s"][k])
    rows = [
        ("save", "ours: save_checkpoint (fsyncs)", *sv("ours"), s["gb_per_s"]["ours"], ""),
        (
            "",
            "torch.save (page cache)",
            *sv("torch_save"),
            s["gb_per_s"]["torch_save"],
            f"{s['ratio_vs_torch_save']:.2f}",
        ),
        (
            "",
            "torch.save + fsync",
            *sv("torch_save_fsync"),
            s["gb_per_s"]["torch_save_fsync"],
            f"{s['ratio_vs_torch_save_fsync']:.2f}",
        ),
        ("", f"(of ours: {s['ours_fsync_calls']} fsyncs)", *sv("ours_fsync"), None, ""),
        (
            "",
            "ours without the checksum",
            *sv("ours_unhashed"),
            s["gb_per_s"]["ours_unhashed"],
            f"{s['checksum_cost']:.3f}",
        ),
        (
            "",
            "(snapshot: checkpoint_shard)",
            *sv("snapshot"),
            s["bytes_per_shard"] / GB / s["median_s"]["snapshot"],
            "",
        ),
    ]
    for cache in ("warm", "cold"):
        c = l[cache]
        ld = lambda k: (c["median_s"][k]["total"], c["min_total_s"][k], c["max_total_s"][k])
        rows += [
            (f"load {cache}", "ours: Checkpoint + load_checkpoint", *ld("ours"), c["gb_per_s"]["ours"], ""),
            (
                "",
                "ours, checksums not checked",
                *ld("ours_unverified"),
                c["gb_per_s"]["ours_unverified"],
                f"{c['checksum_cost']:.3f}",
            ),
            ("", "torch.load", *ld("torch_load"), c["gb_per_s"]["torch_load"], f"{c['ratio_vs_torch_load']:.2f}"),
            (
                "",
                "torch.load + copy in",
                *ld("torch_load_and_copy"),
                c["gb_per_s"]["torch_load_and_copy"],
                f"{c['ratio_vs_torch_load_and_copy']:.2f}",
            ),
        ]
    print(
        f"{'':10} {'':36} {'median s':>8} {'min s':>7} {'max s':>7} {'GB/s':>7} {'ours/it':>8}   (GB/s and "
        f"ratios: of medians)"
    )
    if "warm_ours_default_threads" in l:
        w = l["warm_ours_default_threads"]
        rows.insert(
            10,
            (
                "",
                f"(ours at {w['threads']} threads)",
                w["median_s"]["total"],
                w["min_total_s"],
                w["max_total_s"],
                w["gb_per_s"],
                "",
            ),
        )
    for a_, b, sec, lo, hi, gbs, r in rows:
        print(f"{a_:10} {b:36} {sec:8.3f} {lo:7.3f} {hi:7.3f} {'' if gbs is None else f'{gbs:7.2f}':>7} {r:>8}")
    rp = res["resume_path"]
    for cache in ("warm", "cold"):
        c = rp[cache]
        rows_rp = [
            (f"resume {cache}", "ours: hashed while the model is built", "ours", ""),
            ("", "ours, checksums not checked", "ours_unverified", f"{c['checksum_cost']:.3f}"),
            ("", "hash every file, then build and load", "verify_first", f"{c['verify_first_cost']:.3f}"),
        ]
        for a_, b, k, r in rows_rp:
            print(
                f"{a_:10} {b:36} {c['median_s'][k]['total']:8.3f} {c['min_total_s'][k]:7.3f} "
                f"{c['max_total_s'][k]:7.3f} {'':>7} {r:>8}"
            )
    for cache in ("warm", "cold"):
        o = l[cache]["median_s"]["ours"]
        print(
            f"load {cache}, ours split: open+check {o['open_and_check']:.3f}s, load_checkpoint (mmap torch.load, "
            f"assemble, copy in; the shard's checksum beside them) {o['load_checkpoint']:.3f}s"
        )
    if "resume" in res:
        r = res["resume"]
        i = r["inside_train_median_s"]["resume"]
        print(
            f"train() for 1 step, call to return: fresh {r['median_s']['fresh']:.2f}s "
            f"({r['min_s']['fresh']:.2f}-{r['max_s']['fresh']:.2f}), "
            f"resumed {r['median_s']['resume']:.2f}s ({r['min_s']['resume']:.2f}-{r['max_s']['resume']:.2f}) "
            f"({r['resume_overhead_s']:+.2f}s, ratio {r['ratio_resume_vs_fresh']:.2f}); inside the resumed "
            f"call: finding and "
            f"checking the checkpoint {i['find_and_check_checkpoint_s']:.2f}s, load_checkpoint "
            f"{i['load_checkpoint_s']:.2f}s "
            f"(the final save: {i['save_checkpoint_s']:.2f}s, fresh "
            f"{r['inside_train_median_s']['fresh']['save_checkpoint_s']:.2f}s)"
        )
    print(
        f"checksums (xxh3-64) cost: save x{s['checksum_cost']:.3f}, load warm x{l['warm']['checksum_cost']:.3f}, "
        f"cold x{l['cold']['checksum_cost']:.3f} (ours / ours without them, seconds; target on load <= 1.05)"
    )
    print(f"total {res['total_s']:.0f}s")
    if not a.save:
        return
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
