"""Benchmark of the 3D engine (chapter 14), both numbers measured in this run:

1. Overhead: tokens/s of the tiny config trained through our engine (DeepSpeed PipelineEngine + ZeRO-1 +
   megatron-core layers, 1 process) vs a plain PyTorch loop (chapter 41's `train_step`: same GPT, same
   AdamW, same clipping, same batches). Target: ratio >= 0.9. Single steps alternate between the two so
   that load from other processes hits both alike; tokens/s of every step is kept and reported as median, min
   and max; the ratio is that of the medians.
2. Pipeline bubble: a PP=2 run (2 processes, torchrun) with m micro-batches per step; each stage times its
   forward and backward passes; bubble = 1 - busy / schedule time (step minus optimizer step), per step, reported
   as median, min and max over the steps,
   against the 1F1B formula (p-1)/(m+p-1), which assumes equal stages, and against the same schedule with the
   measured stage times t_i: T = (m-1) max t_i + sum t_i (our last stage also holds the output layer and loss).

usage: python bench/engine.py [--steps 60] [--save]    (--save: write bench/results/engine-<date>.json; --steps >= 5)
"""
import argparse, datetime, json, os, platform, statistics, subprocess, sys, time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from stats import summary, ratio_of_medians, fmt, hardware, MIN_RUNS
CONFIG = str(ROOT / "scaled_configs/tiny.yaml")
MB = 8                                   # micro-batch of the bubble runs: compute well above communication
FIXED = {"schedule.batch_size_rampup_start": None, "schedule.batch_size_rampup_increment": None}

def overhead(steps: int) -> dict:
    "tokens/s of the engine (1 process) vs a plain PyTorch loop on the same model, data and optimizer."
    import numpy as np, torch
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
    model = GPT(cfg.model, init_seed=cfg.seed); model.train()
    opt = make_optimizer(model, cfg)
    autocast = autocast_for(cfg, torch.device("cpu"))
    sampler = TokenSampler(tokens, seq, seed=0)
    batches = [torch.as_tensor(sampler.random_batch(s.global_batch_size), dtype=torch.long) for _ in range(steps)]

    def run_engine(b): engine.train_batch(iter(E.micro_batches(b, s.micro_batch_size, 0, 1)))
    def run_plain(b): train_step(model, opt, b, s.micro_batch_size, cfg.optimizer.clip_grad, autocast)
    for b in batches[:2]: run_engine(b); run_plain(b)          # warm-up
    t_engine, t_plain = [], []
    for i in range(steps):                                     # alternate single steps: load from others hits both alike
        for fn, out in ((run_engine, t_engine), (run_plain, t_plain)):
            t0 = time.perf_counter(); fn(batches[i]); out.append(time.perf_counter() - t0)
    ntok = s.global_batch_size * seq
    eng, pla = summary([ntok / t for t in t_engine]), summary([ntok / t for t in t_plain])
    return {"config": "tiny", "global_batch": s.global_batch_size, "micro_batch": s.micro_batch_size, "seq": seq,
            "steps": steps, "engine_tokens_per_s": eng, "plain_tokens_per_s": pla, "ratio": ratio_of_medians(eng, pla),
            "ratio_is": "median / median", "target_ratio": 0.9,
            "pair_ratio": summary([p / e for p, e in zip(t_plain, t_engine)]),
            "engine_step_s": t_engine, "plain_step_s": t_plain}

def bubble_worker(out: str, micro_counts: list[int], steps: int):
    "Runs inside torchrun (2 processes, PP=2): time forward/backward per stage for each micro-batch count."
    import torch, torch.distributed as dist
    from mtnlg.config import load_config
    from mtnlg import engine as E
    from mtnlg.topology import Layout, init_distributed, quiet_libraries
    from deepspeed.runtime.pipe.engine import PipelineEngine
    quiet_libraries()
    from deepspeed.runtime.pipe import schedule
    spent = {"busy": 0.0, "step": 0.0}
    def timed(instruction, key):            # the engine dispatches instructions through this table
        orig = PipelineEngine._INSTRUCTION_MAP[instruction]
        def wrapper(self, *a, **k):
            t0 = time.perf_counter(); r = orig(self, *a, **k); spent[key] += time.perf_counter() - t0; return r
        PipelineEngine._INSTRUCTION_MAP[instruction] = wrapper
    timed(schedule.ForwardPass, "busy"); timed(schedule.BackwardPass, "busy")
    for ins in (schedule.OptimizerStep, schedule.ReduceGrads, schedule.ReduceTiedGrads): timed(ins, "step")
    cfg = load_config(CONFIG, {**FIXED, "parallel.pipeline_parallel": 2, "schedule.micro_batch_size": MB,
                               "schedule.global_batch_size": MB * max(micro_counts)})
    engine, _ = E.build_engine(cfg, init_distributed(Layout.of(cfg)))
    results = []
    for m in micro_counts:
        engine.set_train_batch_size(MB * m)                                 # m micro-batches per step
        batch = torch.randint(0, cfg.model.vocab_size, (MB * m, cfg.model.seq_length + 1))
        engine.train_batch(iter(E.micro_batches(batch, MB, 0, 1)))          # warm-up
        runs = []
        for _ in range(steps):
            dist.barrier(); spent.update(busy=0.0, step=0.0); t0 = time.perf_counter()
            engine.train_batch(iter(E.micro_batches(batch, MB, 0, 1)))
            sched = time.perf_counter() - t0 - spent["step"]             # the pipeline schedule, without the optimizer step
            runs.append([sched, spent["busy"]])
        t = torch.tensor(runs)                 # [steps, (schedule time, busy time)] of this stage
        both = [torch.zeros_like(t) for _ in range(2)]
        dist.all_gather(both, t)
        per_step = {"measured_bubble": [], "stage0": [], "stage1": [], "with_measured_stage_times": []}
        per_mb_steps = []
        for k in range(steps):                                              # every step: the slower stage's schedule time
            T = max(b[k, 0].item() for b in both)
            busy = [b[k, 1].item() for b in both]
            per_mb = [x / m for x in busy]                                  # forward + backward of one micro-batch, per stage
            predicted_T = (m - 1) * max(per_mb) + sum(per_mb)               # 1F1B with unequal stages
            per_step["measured_bubble"].append(1 - sum(busy) / (2 * T))
            per_step["stage0"].append(1 - busy[0] / T); per_step["stage1"].append(1 - busy[1] / T)
            per_step["with_measured_stage_times"].append(1 - m * sum(per_mb) / (2 * predicted_T))
            per_mb_steps.append(per_mb)
        results.append({"micro_batches": m, "stages": 2, "formula": 1 / (m + 1),
                        "measured_bubble": summary(per_step["measured_bubble"]),
                        "measured_bubble_per_stage": [summary(per_step["stage0"]), summary(per_step["stage1"])],
                        "stage_time_per_micro_batch_s": [summary([x[i] for x in per_mb_steps]) for i in range(2)],
                        "formula_with_measured_stage_times": summary(per_step["with_measured_stage_times"])})
    if dist.get_rank() == 0: Path(out).write_text(json.dumps(results))

def bubble(micro_counts, steps) -> list:
    out = ROOT / ".cache" / "bubble.json"; out.parent.mkdir(exist_ok=True)
    from mtnlg.topology import free_port
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(free_port()), __file__,
           "--bubble-worker", str(out), "--micro", *map(str, micro_counts), "--steps", str(steps)]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if r.returncode: sys.exit(r.stderr[-3000:])
    return json.loads(out.read_text())

if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--micro", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--bubble-worker")
    ap.add_argument("--save", action="store_true", help="write bench/results/engine-<date>.json")
    a = ap.parse_args()
    if a.bubble_worker: bubble_worker(a.bubble_worker, a.micro, a.steps); sys.exit(0)
    if a.steps < MIN_RUNS: ap.error(f"--steps must be at least {MIN_RUNS}")
    res = {"benchmark": "3D engine: overhead vs a plain loop, PP=2 bubble", "date": datetime.date.today().isoformat(),
           "hardware": hardware()}
    res["overhead"] = overhead(a.steps)
    o = res["overhead"]
    print(f"engine {fmt(o['engine_tokens_per_s'], ',.0f', ' tokens/s')}\nplain  {fmt(o['plain_tokens_per_s'], ',.0f', ' tokens/s')}\n"
          f"ratio of medians {o['ratio']:.3f} (target >= 0.9); per alternated pair of steps {fmt(o['pair_ratio'], '.3f')}")
    res["bubble"] = bubble(a.micro, max(MIN_RUNS, a.steps // 3))
    for b in res["bubble"]:
        print(f"PP=2, m={b['micro_batches']}: measured bubble {fmt(b['measured_bubble'], '.3f')} vs (p-1)/(m+p-1) = "
              f"{b['formula']:.3f}; with the measured, unequal stage times {fmt(b['formula_with_measured_stage_times'], '.3f')}")
    res["hardware"]["load_avg_1min_end"] = os.getloadavg()[0]
    if a.save:
        out = ROOT / "bench" / "results" / f"engine-{datetime.date.today().isoformat()}.json"
        out.parent.mkdir(parents=True, exist_ok=True); out.write_text(json.dumps(res, indent=1))
        print(f"wrote {out}")
