"""Log-likelihood requests per second: our `mtnlg` lm-eval backend vs the harness's `hf` backend on the exported
model — the same requests (0-shot requests of the nine local tasks), the same batch size and threads, in one run —
and the model-parallel reader of chapter 65 on the same requests: TP 2, PP 2 and DP 2 on two processes of one thread
each, beside one process on the same two threads.

    .venv/bin/python bench/eval.py [--checkpoint DIR] [--data-dir DIR] [--docs 40] [--batch-size 32] [--threads 1]
                                   [--repeats 5]
                                   [--layouts tp2,pp2,dp2] [--save]

Each backend answers all requests --repeats times (>= 5, the two alternating); requests/s is reported as median, min and
max, and the ratio is that of the medians (target >= 2x); with --save also writes bench/results/eval-DATE-cpu.json
(--out to name another file; the README reads the newest). A
model-parallel row times the same requests in one job of spawned processes (gloo), every rank between barriers, the
processes' start and the checkpoint's load left out, as for one process; DP 2's replicas share the requests out
(every other one each, chapter 65), TP and PP split the model.
"""

import argparse
import datetime
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from stats import summary, ratio_of_medians, fmt, hardware, MIN_RUNS


def requests_of(tasks, data_dir, docs: int):
    "All loglikelihood Instances of the first `docs` examples of each local task, 0-shot."
    from mtnlg.tasks import local_task

    out = {}
    for name in tasks:
        t = local_task(name, data_dir, 0)
        t.build_all_requests(limit=docs, rank=0, world_size=1)
        out[name] = list(t.instances)
    return out


def timed(lm, reqs):
    "Wall time of one lm.loglikelihood(reqs), and the answers."
    t0 = time.perf_counter()
    res = lm.loglikelihood(reqs, disable_tqdm=True)
    return time.perf_counter() - t0, res


LAYOUTS = {"tp2": (2, 1, 1), "pp2": (1, 2, 1), "dp2": (1, 1, 2)}


def parallel_worker(ckpt: str, tp: int, pp: int, args: list, batch_size: int, repeats: int) -> dict:
    "In each rank of a job (chapter 10's `launch`): this replica's share of the requests answered `repeats` times."
    import torch.distributed as dist
    from lm_eval.api.instance import Instance
    from mtnlg.evaluate import MtnlgLM, offline_environment
    from mtnlg.topology import quiet_libraries

    offline_environment()
    quiet_libraries()
    lm = MtnlgLM(ckpt, device="cpu", dtype="float32", batch_size=batch_size, tensor_parallel=tp, pipeline_parallel=pp)
    mine = [Instance("loglikelihood", {}, a, i) for i, a in enumerate(args)]  # the replicas share them out (chapter 65)
    lm.loglikelihood(mine[:64], disable_tqdm=True)  # warm-up
    seconds, res = [], None
    for _ in range(repeats):
        dist.barrier()
        t0 = time.perf_counter()
        res = lm.loglikelihood(mine, disable_tqdm=True)
        dist.barrier()
        seconds.append(time.perf_counter() - t0)
    return {"seconds": seconds, "results": res}


def parallel_rows(ckpt, reqs, layouts, batch_size: int, repeats: int, reference: list) -> dict:
    "requests/s of each layout (every rank one thread), and its answers' largest difference from one process's."
    from mtnlg.topology import launch

    args = [r.args for r in reqs]
    rows = {}
    for name in layouts:
        tp, pp, dp = LAYOUTS[name]
        ranks = launch(parallel_worker, tp * pp * dp, str(ckpt), tp, pp, args, batch_size, repeats)
        answers = ranks[0]["results"]
        assert all(r["results"] == answers for r in ranks), "the ranks of a job returned different answers"
        rows[name] = {
            "layout": f"TP {tp} x PP {pp} x DP {dp}",
            "processes": tp * pp * dp,
            "threads_each": 1,
            "requests_per_s": summary([len(args) / t for t in ranks[0]["seconds"]]),
            "max_abs_loglikelihood_diff": max(abs(a[0] - b[0]) for a, b in zip(answers, reference)),
            "greedy_equal": [a[1] for a in answers] == [b[1] for b in reference],
        }
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkpoint", help="consolidated checkpoint (default: train the tiny config for 60 steps)")
    ap.add_argument(
        "--data-dir", help="local task data (default: the data setting's eval/, $MTNLG_DATA, else tests/fixtures/eval)"
    )
    ap.add_argument("--docs", type=int, default=40, help="examples per task")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1, help="torch threads for both (1: stable on a shared machine)")
    ap.add_argument("--repeats", type=int, default=MIN_RUNS, help=f"runs of each backend (at least {MIN_RUNS})")
    ap.add_argument(
        "--layouts", default="tp2,pp2,dp2", help=f"model-parallel rows among {', '.join(LAYOUTS)} ('' for none)"
    )
    ap.add_argument("--save", action="store_true", help="write the result to --out (default: print only)")
    ap.add_argument("--out", help="where --save writes (default: bench/results/eval-DATE[-SUFFIX]-cpu.json)")
    ap.add_argument("--save-suffix", default="", help="a name after the date, beside the day's other results")
    args = ap.parse_args(argv)
    if args.repeats < MIN_RUNS:
        ap.error(f"--repeats must be at least {MIN_RUNS}")
    from mtnlg.evaluate import offline_environment

    offline_environment()  # before datasets/transformers load: never download
    import torch

    torch.set_num_threads(args.threads)
    from mtnlg.evaluate import MtnlgLM, encode_pair
    from mtnlg.export_hf import export_hf
    from mtnlg.tasks import TASKS, eval_dir
    from lm_eval.models.huggingface import HFLM

    tmp = Path(tempfile.mkdtemp(prefix="bench-eval-"))
    ckpt = args.checkpoint
    if ckpt is None:
        from mtnlg.config import load_config
        from mtnlg.train import train

        ckpt = train(
            load_config(ROOT / "scaled_configs" / "tiny.yaml", {"schedule.train_iters": 60}),
            tmp / "run",
            progress=False,
            log=lambda *a: None,
        ).checkpoint
    data_dir = (
        Path(args.data_dir) if args.data_dir else eval_dir()
    )  # the data setting's eval/ (chapter 03), else the slices
    tasks = [n for n in TASKS if (data_dir / TASKS[n].eval_file).is_file()]
    if not tasks:
        data_dir, tasks = ROOT / "tests" / "fixtures" / "eval", list(TASKS)
    by_task = requests_of(tasks, data_dir, args.docs)
    reqs = [r for rs in by_task.values() for r in rs]

    ours = MtnlgLM(str(ckpt), device="cpu", dtype="float32", batch_size=args.batch_size)
    fits = [
        r for r in reqs if len(encode_pair(ours.tok_encode, *r.args)[1]) <= ours.max_length
    ]  # hf refuses longer continuations
    skipped, reqs = len(reqs) - len(fits), fits
    hf = HFLM(pretrained=str(export_hf(ckpt, tmp / "hf")), device="cpu", dtype="float32", batch_size=args.batch_size)
    timed(ours, reqs[:64])
    timed(hf, reqs[:64])  # warm-up
    t_hf, t_ours = [], []
    for _ in range(args.repeats):  # alternate: other load hits both alike
        t, r_hf = timed(hf, reqs)
        t_hf.append(t)
        t, r_ours = timed(ours, reqs)
        t_ours.append(t)
    s_ours, s_hf = summary([len(reqs) / t for t in t_ours]), summary([len(reqs) / t for t in t_hf])
    max_diff = max(abs(a[0] - b[0]) for a, b in zip(r_ours, r_hf))
    layouts = [x for x in args.layouts.split(",") if x]
    if unknown := [x for x in layouts if x not in LAYOUTS]:
        ap.error(f"unknown layouts {unknown}; choose among {list(LAYOUTS)}")
    two_threads = None
    if layouts:  # one process on as many threads as the two-process rows use
        torch.set_num_threads(2)
        timed(ours, reqs[:64])
        two_threads = summary([len(reqs) / timed(ours, reqs)[0] for _ in range(args.repeats)])
        torch.set_num_threads(args.threads)
    parallel = parallel_rows(ckpt, reqs, layouts, args.batch_size, args.repeats, r_ours)
    result = {
        "benchmark": "eval loglikelihood requests/s",
        "requests": len(reqs),
        "skipped_long_continuations": skipped,
        "docs_per_task": args.docs,
        "tasks": {n: len(r) for n, r in by_task.items()},
        "data_dir": str(data_dir),
        "batch_size": args.batch_size,
        "threads": args.threads,
        "repeats": args.repeats,
        "checkpoint": str(ckpt) if args.checkpoint else "tiny config, 60 steps (temporary)",
        "ours_requests_per_s": s_ours,
        "hf_requests_per_s": s_hf,
        "ratio": ratio_of_medians(s_ours, s_hf),
        "ratio_is": "median / median",
        "hardware": hardware(threads=args.threads),
        "ours_2_threads_requests_per_s": two_threads,
        "model_parallel": parallel,
        "model_parallel_vs_hf": {k: ratio_of_medians(v["requests_per_s"], s_hf) for k, v in parallel.items()},
        "model_parallel_vs_one_process_2_threads": {
            k: ratio_of_medians(v["requests_per_s"], two_threads) for k, v in parallel.items()
        },
        "max_abs_loglikelihood_diff": max_diff,
        "greedy_equal": [a[1] for a in r_ours] == [b[1] for b in r_hf],
        "torch": torch.__version__,
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "date": datetime.date.today().isoformat(),
        "time": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    if args.save:
        suffix = f"-{args.save_suffix}" if args.save_suffix else ""
        args.out = args.out or str(ROOT / "bench" / "results" / f"eval-{result['date']}{suffix}-cpu.json")
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=1))
    print(f"{len(reqs)} requests ({', '.join(f'{k} {v}' for k, v in result['tasks'].items())})")
    print(
        f"mtnlg {fmt(s_ours, '.0f', ' req/s')}\nhf    {fmt(s_hf, '.0f', ' req/s')}\n"
        f"ratio of medians {result['ratio']:.2f}x (target >= 2x) | max |dlogL| {max_diff:.1e}"
    )
    if parallel:
        print(f"mtnlg, one process on 2 threads {fmt(two_threads, '.0f', ' req/s')}")
        for k, v in parallel.items():
            print(
                f"mtnlg {v['layout']} ({v['processes']} processes x 1 thread) "
                f"{fmt(v['requests_per_s'], '.0f', ' req/s')}: "
                f"{result['model_parallel_vs_hf'][k]:.2f}x hf, "
                f"{result['model_parallel_vs_one_process_2_threads'][k]:.2f}x one "
                f"process on 2 threads | max |dlogL| vs one process {v['max_abs_loglikelihood_diff']:.1e}, "
                f"greedy equal {v['greedy_equal']}"
            )
    if args.save:
        print(f"wrote {args.out}")
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
