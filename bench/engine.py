"""Benchmark of the 3D engine (chapter 14), both numbers measured in this run:

1. Overhead: tokens/s of the tiny config trained through our engine (DeepSpeed PipelineEngine + ZeRO-1 +
   megatron-core layers, 1 process) vs a plain PyTorch loop (chapter 41's `train_step`: the same GPT layers, fp32,
   the same AdamW (torch's, per tensor) with the same global-norm clipping at 1.0, the same 2 micro-batches of 8 x 128
   tokens accumulated per step, one `.item()` per micro-batch and one for the norm). Target: ratio >= 0.95. Single
   steps alternate between the two so that load from other processes hits both alike; tokens/s of every step is kept
   and reported as median, min and max; the ratio is that of the medians, of wall-clock time and of this process's
   CPU time (which other processes' load disturbs less), with a 95% bootstrap interval over the alternated pairs of
   steps (`stats.ratio_interval`). The engine's extra time per step (engine minus plain, paired steps) is reported
   too: it is a fixed cost, the same on machines of different speed, so it says where the ratio meets its target (a
   plain step of at least extra * 0.95 / 0.05). The engine's steps are split into DeepSpeed's instructions
   (forward, backward, gradient reduction, optimizer step), the plain loop's into forward (model hooks), backward,
   clipping and the AdamW step (wrappers around `clip_grad_norm_` and `step`), medians over the steps.
2. Pipeline bubble: a PP=2 run (2 processes, torchrun) of tiny with 4 layers, hidden size 256 and a 6656-token
   vocabulary (random tokens; the output layer then costs exactly 2 blocks of FLOPs, so whole layers can balance the
   stages: uniform puts 2 blocks | 2 blocks + output layer, balanced 3 blocks | 1 block + output layer; hidden 256
   rather than tiny's 128 keeps the blocking gloo sends of the activations and their gradients, which grow as h while
   the compute grows as h^2, a small part of a stage's time), for `parallel.partition`
   uniform and balanced, with m micro-batches per step; each stage times its
   forward and backward passes; bubble = 1 - busy / schedule time (step minus optimizer step), per step, reported
   as median, min and max over the steps,
   against the 1F1B formula (p-1)/(m+p-1), which assumes equal stages, and against the same schedule with the
   measured stage times t_i: T = (m-1) max t_i + sum t_i (our last stage also holds the output layer and loss).

usage: python bench/engine.py [--steps 60] [--save]    (--save: write bench/results/engine-<date>-cpu.json;
                                                        --steps >= 5)
       python bench/engine.py --only overhead             (the first half alone, about 30 s; not saved)
(about 3 minutes on an idle 2-core machine)
"""

import argparse
import contextlib
import datetime
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from stats import summary, ratio_of_medians, ratio_interval, fmt, hardware, MIN_RUNS

CONFIG = str(ROOT / "scaled_configs/tiny.yaml")
MB = 8  # micro-batch of the bubble runs: compute well above communication
FIXED = {"schedule.batch_size_rampup_start": None, "schedule.batch_size_rampup_increment": None}
BUBBLE_MODEL = {
    "model.num_layers": 4,
    "model.hidden_size": 256,
    "model.vocab_size": 6656,
}  # stages whole layers balance
PHASES = ("ForwardPass", "BackwardPass", "ReduceGrads", "ReduceTiedGrads", "OptimizerStep")


def time_instructions(spent: dict, keys: dict):
    """Time DeepSpeed's pipeline instructions: the engine dispatches them through `_INSTRUCTION_MAP` (class `name` ->
    key)."""
    from deepspeed.runtime.pipe.engine import PipelineEngine
    from deepspeed.runtime.pipe import schedule

    for name, key in keys.items():
        instruction = getattr(schedule, name)
        orig = PipelineEngine._INSTRUCTION_MAP[instruction]

        def wrapper(self, *a, _orig=orig, _key=key, **k):
            t0, c0 = time.perf_counter(), time.process_time()
            r = _orig(self, *a, **k)
            spent[_key] = spent.get(_key, 0.0) + time.perf_counter() - t0
            spent[_key + "_cpu"] = spent.get(_key + "_cpu", 0.0) + time.process_time() - c0
            return r

        PipelineEngine._INSTRUCTION_MAP[instruction] = wrapper


PLAIN_PHASES = ("forward", "backward", "clip", "AdamW step", "rest")


@contextlib.contextmanager
def time_plain_phases(model, optimizer):
    """Inside: a dict of the seconds the plain loop's steps spend in the model's forward, in forward + backward (up to
    clipping), clipping and the AdamW step. Hooks and wrappers are removed on exit."""
    import torch

    spent, clock = {}, {}
    add = lambda key, dt: spent.__setitem__(key, spent.get(key, 0.0) + dt)

    def pre(module, args):
        clock["forward"] = time.perf_counter()
        clock.setdefault("first", clock["forward"])

    clip, step = torch.nn.utils.clip_grad_norm_, optimizer.step

    def timed_clip(*a, **k):
        t0 = time.perf_counter()
        add("forward and backward", t0 - clock.pop("first"))
        r = clip(*a, **k)
        float(r)
        add("clip", time.perf_counter() - t0)
        return r

    def timed_step(*a, **k):
        t0 = time.perf_counter()
        r = step(*a, **k)
        add("AdamW step", time.perf_counter() - t0)
        return r

    hooks = [
        model.register_forward_pre_hook(pre),
        model.register_forward_hook(lambda module, args, out: add("forward", time.perf_counter() - clock["forward"])),
    ]
    torch.nn.utils.clip_grad_norm_, optimizer.step = timed_clip, timed_step  # train_step looks both up at call time
    try:
        yield spent
    finally:
        for h in hooks:
            h.remove()
        torch.nn.utils.clip_grad_norm_ = clip
        del optimizer.step  # the class's method again


def overhead(steps: int) -> dict:
    "tokens/s of the engine (1 process) vs a plain PyTorch loop on the same model, data and optimizer."
    import torch
    from mtnlg.config import load_config
    from mtnlg import engine as E
    from mtnlg.model import GPT
    from mtnlg.topology import Layout, init_distributed, quiet_libraries
    from mtnlg.data_parallel import make_optimizer
    from mtnlg.train import train_step, autocast_for
    from mtnlg.data import read_jsonl_texts, train_bpe, tokenize_documents, TokenSampler

    quiet_libraries()
    cfg = load_config(CONFIG, FIXED)
    texts, _ = read_jsonl_texts([ROOT / f for f in cfg.data.train_files])
    tokens = tokenize_documents(train_bpe(texts, cfg.model.vocab_size), texts)
    s, seq = cfg.schedule, cfg.model.seq_length
    layout = init_distributed(Layout.of(cfg))  # one process, no launcher: world of 1
    engine, _ = E.build_engine(cfg, layout)
    model = GPT(cfg.model, init_seed=cfg.seed)
    model.train()
    opt = make_optimizer(model, cfg)
    autocast = autocast_for(cfg, torch.device("cpu"))
    sampler = TokenSampler(tokens, seq, seed=0)
    batches = [torch.as_tensor(sampler.random_batch(s.global_batch_size), dtype=torch.long) for _ in range(steps)]

    spent = {}
    time_instructions(spent, {n: n for n in PHASES})

    def run_engine(b):
        engine.train_batch(iter(E.micro_batches(b, s.micro_batch_size, 0, 1)))

    def run_plain(b):
        train_step(model, opt, b, s.micro_batch_size, cfg.optimizer.clip_grad, autocast)

    for b in batches[:2]:
        run_engine(b)
        run_plain(b)  # warm-up
    t = {"engine": [], "plain": []}
    cpu = {"engine": [], "plain": []}
    phases = []
    plain_phases = []
    with time_plain_phases(model, opt) as plain_spent:
        for i in range(steps):  # alternate single steps: load from others hits both alike
            for name, fn in (("engine", run_engine), ("plain", run_plain)):
                spent.clear()
                plain_spent.clear()
                c0, t0 = time.process_time(), time.perf_counter()
                fn(batches[i])
                t[name].append(time.perf_counter() - t0)
                cpu[name].append(time.process_time() - c0)
                if name == "engine":
                    phases.append({k: v for k, v in spent.items() if not k.endswith("_cpu")})
                if name == "engine":
                    phases[-1]["rest"] = t[name][-1] - sum(phases[-1].values())
                if name == "plain":
                    split = dict(plain_spent)
                    split["backward"] = split.pop("forward and backward") - split["forward"]
                    plain_phases.append(split | {"rest": t[name][-1] - sum(split.values())})
    ntok = s.global_batch_size * seq
    eng, pla = summary([ntok / x for x in t["engine"]]), summary([ntok / x for x in t["plain"]])
    eng_cpu, pla_cpu = summary([ntok / x for x in cpu["engine"]]), summary([ntok / x for x in cpu["plain"]])
    return {
        "config": "tiny",
        "global_batch": s.global_batch_size,
        "micro_batch": s.micro_batch_size,
        "seq": seq,
        "torch_threads": torch.get_num_threads(),
        "steps": steps,
        "engine_tokens_per_s": eng,
        "plain_tokens_per_s": pla,
        "ratio": ratio_of_medians(eng, pla),
        "ratio_interval_95": ratio_interval(eng["values"], pla["values"]),
        "ratio_is": "median / median",
        "target_ratio": 0.95,
        "pair_ratio": summary([p / e for p, e in zip(t["plain"], t["engine"])]),
        # the engine's extra time is a fixed cost per step, the same on machines of different speed; the ratio is
        # not: it reaches the target where the plain step takes at least extra * target / (1 - target)
        "extra_ms_per_step": summary([1e3 * (e - p) for e, p in zip(t["engine"], t["plain"])]),
        "plain_step_ms": statistics.median(t["plain"]) * 1e3,
        "cpu_ratio": ratio_of_medians(eng_cpu, pla_cpu),
        "engine_phase_ms": {k: 1e3 * statistics.median(p.get(k, 0.0) for p in phases) for k in (*PHASES, "rest")},
        "plain_phase_ms": {k: 1e3 * statistics.median(p[k] for p in plain_phases) for k in PLAIN_PHASES},
        "engine_step_s": t["engine"],
        "plain_step_s": t["plain"],
        "engine_cpu_s": cpu["engine"],
        "plain_cpu_s": cpu["plain"],
    }


def break_even_ms(o: dict) -> float:
    "The plain step (ms) at and above which the engine's median extra time leaves the ratio at or above the target."
    return o["extra_ms_per_step"]["median"] * o["target_ratio"] / (1 - o["target_ratio"])


def bubble_worker(out: str, micro_counts: list[int], steps: int, partition: str):
    "Runs inside torchrun (2 processes, PP=2): time forward/backward per stage for each micro-batch count."
    import torch
    import torch.distributed as dist
    from mtnlg.config import load_config
    from mtnlg import engine as E
    from mtnlg.topology import Layout, init_distributed, quiet_libraries

    quiet_libraries()
    spent = {"busy": 0.0, "step": 0.0, "busy_cpu": 0.0}
    time_instructions(
        spent,
        {
            "ForwardPass": "busy",
            "BackwardPass": "busy",
            "OptimizerStep": "step",
            "ReduceGrads": "step",
            "ReduceTiedGrads": "step",
        },
    )
    cfg = load_config(
        CONFIG,
        {
            **FIXED,
            **BUBBLE_MODEL,
            "parallel.pipeline_parallel": 2,
            "parallel.partition": partition,
            "schedule.micro_batch_size": MB,
            "schedule.global_batch_size": MB * max(micro_counts),
        },
    )
    engine, _ = E.build_engine(cfg, init_distributed(Layout.of(cfg)))
    results = []
    for m in micro_counts:
        engine.set_train_batch_size(MB * m)  # m micro-batches per step
        batch = torch.randint(0, cfg.model.vocab_size, (MB * m, cfg.model.seq_length + 1))
        engine.train_batch(iter(E.micro_batches(batch, MB, 0, 1)))  # warm-up
        runs = []
        for _ in range(steps):
            dist.barrier()
            spent.update(busy=0.0, step=0.0, busy_cpu=0.0)
            t0 = time.perf_counter()
            engine.train_batch(iter(E.micro_batches(batch, MB, 0, 1)))
            sched = time.perf_counter() - t0 - spent["step"]  # the pipeline schedule, without the optimizer step
            runs.append([sched, spent["busy"], spent["busy_cpu"]])
        t = torch.tensor(runs, dtype=torch.float64)  # [steps, (schedule time, busy time, busy CPU time)] of this stage
        both = [torch.zeros_like(t) for _ in range(2)]
        dist.all_gather(both, t)
        per_step = {"measured_bubble": [], "stage0": [], "stage1": [], "with_measured_stage_times": []}
        per_mb_steps, cpu_steps, cpu_pred = [], [], []
        for k in range(steps):  # every step: the slower stage's schedule time
            T = max(b[k, 0].item() for b in both)
            busy = [b[k, 1].item() for b in both]
            per_mb = [x / m for x in busy]  # forward + backward of one micro-batch, per stage
            predicted_T = (m - 1) * max(per_mb) + sum(per_mb)  # 1F1B with unequal stages
            per_step["measured_bubble"].append(1 - sum(busy) / (2 * T))
            per_step["stage0"].append(1 - busy[0] / T)
            per_step["stage1"].append(1 - busy[1] / T)
            per_step["with_measured_stage_times"].append(1 - m * sum(per_mb) / (2 * predicted_T))
            per_mb_steps.append(per_mb)
            cpu = [
                b[k, 2].item() / m for b in both
            ]  # the same from CPU time: what load from other processes leaves alone
            cpu_steps.append(cpu)
            cpu_pred.append(1 - m * sum(cpu) / (2 * ((m - 1) * max(cpu) + sum(cpu))))
        results.append(
            {
                "partition": partition,
                "model": BUBBLE_MODEL,
                "stage_bounds": [int(x) for x in engine.module.parts],
                "micro_batches": m,
                "stages": 2,
                "formula": 1 / (m + 1),
                "measured_bubble": summary(per_step["measured_bubble"]),
                "measured_bubble_per_stage": [summary(per_step["stage0"]), summary(per_step["stage1"])],
                "stage_time_per_micro_batch_s": [summary([x[i] for x in per_mb_steps]) for i in range(2)],
                "formula_with_measured_stage_times": summary(per_step["with_measured_stage_times"]),
                "stage_cpu_time_per_micro_batch_s": [summary([x[i] for x in cpu_steps]) for i in range(2)],
                "formula_with_cpu_stage_times": summary(cpu_pred),
            }
        )
    if dist.get_rank() == 0:
        Path(out).write_text(json.dumps(results))


def bubble(micro_counts, steps, partition: str) -> list:
    out = ROOT / ".cache" / "bubble.json"
    out.parent.mkdir(exist_ok=True)
    from mtnlg.topology import free_port

    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "--master-port",
        str(free_port()),
        __file__,
        "--bubble-worker",
        str(out),
        "--micro",
        *map(str, micro_counts),
        "--steps",
        str(steps),
        "--partition",
        partition,
    ]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if r.returncode:
        sys.exit(r.stderr[-3000:])
    return json.loads(out.read_text())


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--micro", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--bubble-worker")
    ap.add_argument("--partition", nargs="+", default=["uniform", "balanced"])
    ap.add_argument("--only", choices=["overhead", "bubble"], help="run one half (default: both)")
    ap.add_argument("--save", action="store_true", help="write bench/results/engine-<date>-cpu.json")
    a = ap.parse_args()
    if a.bubble_worker:
        bubble_worker(a.bubble_worker, a.micro, a.steps, a.partition[0])
        sys.exit(0)
    if a.steps < MIN_RUNS:
        ap.error(f"--steps must be at least {MIN_RUNS}")
    res = {
        "benchmark": "3D engine: overhead vs a plain loop, PP=2 bubble",
        "date": datetime.date.today().isoformat(),
        "hardware": hardware(),
    }
    if a.only != "bubble":
        res["overhead"] = overhead(a.steps)
    o = res.get("overhead")
    if o:
        print(
            f"engine {fmt(o['engine_tokens_per_s'], ',.0f', ' tokens/s')}\nplain  "
            f"{fmt(o['plain_tokens_per_s'], ',.0f', ' tokens/s')}\n"
            f"ratio of medians {o['ratio']:.3f} (95% bootstrap interval "
            f"{'-'.join(format(x, '.3f') for x in o['ratio_interval_95'])}; target >= 0.95); per "
            f"alternated pair of steps {fmt(o['pair_ratio'], '.3f')}; "
            f"of CPU time {o['cpu_ratio']:.3f}; load average {os.getloadavg()[0]:.2f}"
        )
    if o:
        print(
            f"engine - plain: {fmt(o['extra_ms_per_step'], '.1f', ' ms a step')} (paired steps); the plain step takes "
            f"{o['plain_step_ms']:.1f} ms here, and the ratio is >= {o['target_ratio']} wherever it takes >= "
            f"{break_even_ms(o):.0f} ms"
        )
    if o:
        print("engine step, median ms: " + ", ".join(f"{k} {v:.1f}" for k, v in o["engine_phase_ms"].items()))
    if o:
        print("plain step, median ms:  " + ", ".join(f"{k} {v:.1f}" for k, v in o["plain_phase_ms"].items()))
    res["bubble"] = (
        []
        if a.only == "overhead"
        else [b for part in a.partition for b in bubble(a.micro, max(MIN_RUNS, a.steps // 4), part)]
    )
    for b in res["bubble"]:
        t0, t1 = (x["median"] * 1e3 for x in b["stage_time_per_micro_batch_s"])
        print(
            f"PP=2 {b['partition']:8s} {b['stage_bounds']}, m={b['micro_batches']}: stage times {t0:.1f} | "
            f"{t1:.1f} ms per micro-batch; "
            f"measured bubble {fmt(b['measured_bubble'], '.3f')} vs (p-1)/(m+p-1) = {b['formula']:.3f}; "
            f"with the measured stage times {b['formula_with_measured_stage_times']['median']:.3f}; with "
            f"their CPU times "
            f"({' | '.join(format(x['median'] * 1e3, '.1f') for x in b['stage_cpu_time_per_micro_batch_s'])} ms) "
            f"{b['formula_with_cpu_stage_times']['median']:.3f}"
        )
    res["hardware"]["load_avg_1min_end"] = os.getloadavg()[0]
    if a.save:
        if a.only:
            sys.exit("--save writes a whole result: run both halves")
        out = ROOT / "bench" / "results" / f"engine-{datetime.date.today().isoformat()}-cpu.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(res, indent=1))
        print(f"wrote {out}")
