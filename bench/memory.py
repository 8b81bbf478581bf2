"""Peak memory of every pipeline stage of a real DeepSpeed training step, measured on CPU (chapter 98's
`measure_stage_memory`), held against chapter 50's per-stage model (`mtnlg.counting.stage_memory`).

TP 2 x PP 2 x DP 1 (4 processes) and TP 2 x PP 2 x DP 2 (8 processes) on scaled_configs/tiny.yaml with sequences
long enough for activations to show and two layers per stage (4 layers, seq 128, hidden 128, global batch 8,
micro-batch 2, fp32, dropout 0.1), for recompute none / selective / full. Each rank builds the engine exactly as `mtnlg
train` does, runs step 1 (Adam's state appears), and reports step 2's peak: every CPU tensor allocation and free from
torch.profiler, replayed in time order; each allocation's category from what the engine held it as (parameters,
gradients, optimizer state; the rest: activations and working buffers).

The engine runs ZeRO-1 without `contiguous_gradients` (chapter 14), so DeepSpeed keeps no gradient-reduction bucket:
what it flattens to reduce lives only inside the reduction, and the model counts it at that moment.

Each layout and mode is launched --reps times (>= 5); per stage the measured peak and the ratio measured / predicted
are reported as median, min and max over the launches (the per-rank detail is kept for the first launch).

usage: python bench/memory.py [--modes none selective full] [--dp 1 2] [--loss-chunk 0 64] [--reps 5] [--save [--out
bench/results/memory-cpu-<date>.json]]
"""

import argparse
import datetime
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from stats import summary, fmt, hardware as machine, MIN_RUNS

CONFIG = str(ROOT / "scaled_configs/tiny.yaml")
BASE = {
    "model.num_layers": 4,
    "model.seq_length": 128,
    "model.hidden_size": 128,
    "model.hidden_dropout": 0.1,
    "model.attention_dropout": 0.1,
    "precision": "fp32",
    "schedule.global_batch_size": 8,
    "schedule.micro_batch_size": 2,
    "schedule.batch_size_rampup_start": None,
    "schedule.batch_size_rampup_increment": None,
    "schedule.lr_warmup_tokens": 0,
    "optimizer.adam_eps": 1e-6,
    "parallel.tensor_parallel": 2,
    "parallel.pipeline_parallel": 2,
}
MiB = 2**20


def hardware() -> dict:
    import deepspeed

    return machine(deepspeed=deepspeed.__version__)


def cpu_assumptions():
    """Chapter 50's assumptions for this CPU run: nothing reserved (no CUDA context), attention through SDPA's math
    kernel (on CPU, dropout on the probabilities rules out the flash kernel), dropout masks as wide as fp32
    activations."""
    from mtnlg.counting import Assumptions

    return Assumptions(reserved_gib=0.0, attention="math", dropout_mask_bytes=4)


def predicted(overrides: dict) -> list[dict] | None:
    "`mtnlg.counting.stage_memory` for this run, or None if chapter 50 does not have it."
    from mtnlg import counting
    from mtnlg.config import load_config
    from mtnlg.topology import Layout

    if not hasattr(counting, "stage_memory"):
        return None
    cfg = load_config(CONFIG, overrides)
    setup = counting.Setup(Layout.of(cfg), cfg.schedule.micro_batch_size, cfg.model.recompute)
    return counting.stage_memory(cfg.model, setup, cfg.schedule.global_batch_size, cfg.precision, cpu_assumptions())


def measure(overrides: dict) -> tuple[list[dict], float]:
    from mtnlg import testing
    from mtnlg.topology import launch

    n = (
        overrides["parallel.tensor_parallel"]
        * overrides["parallel.pipeline_parallel"]
        * overrides["parallel.data_parallel"]
    )
    t0 = time.perf_counter()
    ranks = launch(testing.measure_stage_memory, n, CONFIG, overrides, timeout_s=600)
    return ranks, time.perf_counter() - t0


def _m(x):
    return f"{x / MiB:8.3f}"


def rank_table(ranks: list[dict]) -> str:
    "One row per rank (MiB): the peak, by category, and where it is."
    head = (
        f"{'rank':>4} {'stage':>5} {'tp':>2} {'dp':>2} | {'params':>8} {'grads':>8} {'optim':>8} {'act+work':>8} "
        f"{'peak':>9}  (at)"
    )
    out = [head]
    for r in ranks:
        c = r["categories"]
        out.append(
            f"{r['rank']:4d} {r['stage']:5d} {r['tp_rank']:2d} {r['dp_rank']:2d} | {_m(c['parameters'])} "
            f"{_m(c['gradients'])} {_m(c['optimizer'])} {_m(c['activations and working buffers'])} "
            f"{r['peak'] / MiB:9.2f}  ({r['at']})"
        )
    return "\n".join(out)


def comparison(ranks: list[dict], pred: list[dict] | None) -> tuple[str, list[dict]]:
    "Per stage: the fullest rank's measured peak against the model's total, and the terms of both."
    rows, out = [], []
    for stage in sorted({r["stage"] for r in ranks}):
        mine = [r for r in ranks if r["stage"] == stage]
        worst = max(mine, key=lambda r: r["peak"])
        row = {
            "stage": stage,
            "measured": worst["peak"],
            "measured at": worst["at"],
            "measured categories": worst["categories"],
        }
        if pred is not None:
            p = pred[stage]
            row |= {
                "predicted": p["total"],
                "predicted at": p["peak at"],
                "ratio": worst["peak"] / p["total"],
                "predicted terms": {k: v for k, v in p.items() if k not in ("total", "stage", "peak at")},
            }
        rows.append(row)
    if pred is None:
        out.append("  (mtnlg.counting.stage_memory not found: no prediction to compare with)")
        for r in rows:
            out.append(f"  stage {r['stage']}: measured {_m(r['measured'])} MiB")
        return "\n".join(out), rows
    out.append(f"  {'stage':>5} {'predicted':>12} {'measured':>12} {'ratio':>6}   peak at (model / measured)")
    for r in rows:
        out.append(
            f"  {r['stage']:5d} {_m(r['predicted'])} MiB {_m(r['measured'])} MiB {r['ratio']:6.3f}   "
            f"{r['predicted at']} / {r['measured at']}"
        )
        m, p = r["measured categories"], r["predicted terms"]
        states = ("weights", "gradients", "optimizer", "reduce buckets", "reserved")
        act = sum(v for k, v in p.items() if k not in states)
        out.append(
            f"        terms (MiB, predicted/measured): weights {_m(p['weights'])}/{_m(m['parameters'])}  "
            f"gradients+buckets {_m(p['gradients'] + p['reduce buckets'])}/{_m(m['gradients'])}  "
            f"optimizer {_m(p['optimizer'])}/{_m(m['optimizer'])}  "
            f"activations and working buffers {_m(act)}/{_m(m['activations and working buffers'])}"
        )
    return "\n".join(out), rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--modes", nargs="+", default=["none", "selective", "full"])
    ap.add_argument("--dp", nargs="+", type=int, default=[1, 2])
    ap.add_argument(
        "--loss-chunk",
        nargs="+",
        type=int,
        default=[0],
        help="model.loss_chunk values: 0 keeps the logits; N "
        "computes the loss N tokens at a time (chapter 20's linear cross-entropy)",
    )
    ap.add_argument(
        "--reps", type=int, default=MIN_RUNS, help=f"launches of each layout and mode (at least {MIN_RUNS})"
    )
    ap.add_argument("--save", action="store_true", help="write the result to --out (default: print only)")
    ap.add_argument("--out", default=str(ROOT / f"bench/results/memory-cpu-{datetime.date.today()}.json"))
    args = ap.parse_args()
    if args.reps < MIN_RUNS:
        ap.error(f"--reps must be at least {MIN_RUNS}")
    results = {
        "benchmark": "stage memory peaks of a TP2xPP2 DeepSpeed step vs mtnlg.counting.stage_memory",
        "reps": args.reps,
        "date": str(datetime.date.today()),
        "hardware": hardware(),
        "config": "scaled_configs/tiny.yaml",
        "overrides": BASE,
        "method": "torch.profiler CPU memory events, replayed; categories from tags of the "
        "engine's storages (mtnlg.testing.measure_stage_memory); the second step's peak",
        "model assumptions": None,
        "runs": [],
    }
    try:
        results["model assumptions"] = __import__("dataclasses").asdict(cpu_assumptions())
    except ImportError:
        pass
    for dp, chunk, mode in [(dp, chunk, mode) for dp in args.dp for chunk in args.loss_chunk for mode in args.modes]:
        overrides = {**BASE, "parallel.data_parallel": dp, "model.recompute": mode, "model.loss_chunk": chunk}
        pred = predicted(overrides)
        reps, first, secs = [], None, []
        for rep in range(args.reps):
            ranks, seconds = measure(overrides)
            text, rows = comparison(ranks, pred)
            secs.append(round(seconds, 1))
            if first is None:
                first = ranks
                print(
                    f"\nTP 2 x PP 2 x DP {dp}, recompute {mode}, loss chunk {chunk}  ({len(ranks)} "
                    f"processes, {seconds:.0f} s)  [MiB], launch 1 of {args.reps}"
                )
                print(rank_table(ranks))
                print(text, flush=True)
            reps.append(
                [{k: v for k, v in r.items() if k not in ("measured categories", "predicted terms")} for r in rows]
            )
        per_stage = []
        for i, row in enumerate(rows):
            st = {"stage": row["stage"], "measured": summary([r[i]["measured"] for r in reps])}
            if pred is not None:
                st |= {"predicted": row["predicted"], "ratio": summary([r[i]["ratio"] for r in reps])}
                print(f"  stage {st['stage']}: measured / predicted {fmt(st['ratio'], '.3f')}", flush=True)
            per_stage.append(st)
        results["runs"].append(
            {
                "layout": {"tp": 2, "pp": 2, "dp": dp},
                "recompute": mode,
                "loss_chunk": chunk,
                "seconds": secs,
                "ranks of launch 1": first,
                "stages": per_stage,
                "stages per launch": reps,
                "predicted": pred,
            }
        )
    if not args.save:
        return
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=1, default=str))
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
