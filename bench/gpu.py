"""`mtnlg train` measured on one GPU in one command, planned to take under 9 minutes: what a user gets, and against
what.

    python bench/gpu.py [--save] [--only ROWS] [--steps 7] [--dry-run] [--out PATH]

Every measurement is one `mtnlg train` process (fresh CUDA state) of gpt-1.3b at the first step of its batch ramp
(64 sequences x 2048 tokens a step), with the paper's recipe — bf16 weights with fp32 master weights and Adam states,
gradient clipping, dropout 0.1 — for --steps steps; its figures are medians over the steps after the first two (warm-up,
compilation), read from the run's metrics.jsonl (tokens/s, MFU and HFU against the device's dense bf16 peak, peak
allocated and reserved memory per step):
  - default: `mtnlg train --config scaled_configs/gpt-1.3b.yaml` and no other flag (on a GPU: the DeepSpeed engine);
  - engine / single: `--backend deepspeed` and `--backend single` (the one-process loop, fp32 weights under bf16
    autocast);
  - kernels=reference|compile|triton and recompute=none|selective|full: `--set model.kernels=...` /
    `model.recompute=...`;
  - deterministic: `--set deterministic=true`, its tokens/s against the default's (the cost of the switch);
  - hf-eager / hf-compile: Hugging Face `GPT2LMHeadModel` at the same shape (layers, hidden, heads, positions, the
    padded vocabulary), SDPA attention, dropout 0.1, fp32 weights (the masters) under bf16 autocast, the same AdamW and
    clipping, the same tokens per step, eager and under `torch.compile` (model and loss);
  - fused (issue 54): `--set optimizer.fused=true` (torch's fused AdamW), `--set model.kernels=liger
    model.loss_chunk=4096` (liger-kernel's LayerNorm and fused linear cross-entropy; optional, skipped where it is not
    installed) and both: the device commands, each under 9 minutes, are in bench/GPU_PLAN.md;
  - determinism: gpt-125m with `deterministic: true`, two identical runs and one killed with `kill -9` inside a save and
    resumed with `--resume auto`, compared bit for bit (every tensor of the last checkpoint — weights, fp32 masters,
    Adam moments — every random stream, and the per-step losses); then the same two runs without the switch.
Each configuration runs at its largest micro-batch that fits: the config's (8), then 4, then 2 after an out-of-memory
failure. Predicted memory is chapter 50's `stage_memory` (TP1 PP1 DP1, without its reserve) for the engine's rows.
The data is the committed curation output (tests/fixtures/curated), repeated as Megatron's epochs; its tokenizer has
2,048 tokens and the configs keep GPT-2's vocabulary (50,257, padded 50,304), so the output layer has the paper's shape
(token ids above 2,047 never occur: that changes no FLOP and no byte of a step). Runs are cut at
--steps (`schedule.train_tokens` shortened to twice the batch ramp, so Megatron's sample index builds in a fraction of a
second: the steps keep their batch and learning rate, only the samples they draw change) and killed once their last step
is logged (a gpt-1.3b checkpoint is ~21 GB: nothing is saved that is not needed); run directories live in a temporary
directory that is removed as it goes.

Needs what `make install` installs (torch with CUDA, DeepSpeed, megatron-core, triton, transformers). Writes
bench/results/gpu-<date>-<device>.json only with --save (--out PATH: anywhere). --dry-run runs the same code at the tiny
shape on the CPU in about two minutes (what needs a GPU is recorded as skipped, with the reason); it cannot --save.
"""

import argparse
import datetime
import json
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))
from stats import summary, ratio_of_medians, hardware, MIN_RUNS

WARMUP = 2  # steps left out of every median: the first (allocator, autotuning), the second (compile's backward)
BUDGET_S = 9 * 60
# the committed curation output (a 2,048-token BPE, 31k tokens in 191 documents); data.split 80/20: under 95/5 its
# validation documents hold 969 tokens, less than one sample at seq 1024 or 2048
DATA = {
    "data.curated": "tests/fixtures/curated",
    "data.train_files": "[]",
    "data.valid_files": "[]",
    "data.split": "80,20,0",
}
DROPOUT = {"model.hidden_dropout": 0.1, "model.attention_dropout": 0.1}  # the recipe's (tiny.yaml turns it off)
OOM = re.compile(r"out of memory|OutOfMemoryError", re.I)
# seconds a run spends outside its steps (imports, building gpt-1.3b on the GPU: ~9 s in bench/kernels.py's H100 run,
# the engine, the data index) and in torch.compile (kernels: ~3 s there; the whole HF model: a guess): the plan's
# estimate, to be corrected from what each run records (`startup_s`, `wall_s`)
START_S = {"cuda": 20, "cpu": 11}
COMPILE_S = {
    "kernels=compile": 15,
    "hf-compile": 60,
    "compile_blocks": 40,
    "compile_blocks+cudnn": 40,
    "profile": 10,
    "profile:compile_blocks": 50,
}


@dataclass
class Row:
    name: str
    group: str
    what: str
    sets: dict = field(default_factory=dict)  # --set overrides on top of the common ones
    flags: tuple = ()  # other `mtnlg train` arguments
    hf: str | None = None  # the Hugging Face anchor: eager | compile
    alias: str | None = None  # the same configuration as this row: measured once
    skip: str | None = None  # why it is not measured here
    config: str | None = None  # another config than the timed one (the memory rows' gpt-125m)
    profile: bool = False  # one step under torch.profiler: where the time goes


def plan(config: str, device: str, cfg) -> list[Row]:
    "Every measurement, in order; rows that resolve to the default's configuration are aliases of it."
    from mtnlg.train import pick_backend

    auto = pick_backend("auto", 1, False, device)
    rows = [
        Row("default", "default", f"`mtnlg train --config {config}`, no flag (auto: {auto})"),
        Row(
            "engine",
            "backend",
            "--backend deepspeed: chapter 14's engine, bf16 weights, fp32 masters and Adam (BF16_Optimizer), ZeRO-1",
            flags=("--backend", "deepspeed"),
        ),
        Row(
            "single",
            "backend",
            "--backend single: the plain loop, fp32 weights under bf16 autocast, torch AdamW",
            flags=("--backend", "single"),
        ),
    ]
    for k in ("reference", "compile", "triton"):
        rows.append(Row(f"kernels={k}", "kernels", f"--set model.kernels={k}", {"model.kernels": k}))
    for r in ("none", "selective", "full"):
        rows.append(Row(f"recompute={r}", "recompute", f"--set model.recompute={r}", {"model.recompute": r}))
    rows.append(Row("deterministic", "deterministic", "--set deterministic=true", {"deterministic": "true"}))
    # the levers, one at a time against the default (issue 36): SDPA's kernels, one compiled graph per layer, the
    # chunked loss, a smaller micro-batch
    for b in ("flash", "cudnn", "efficient"):
        rows.append(
            Row(
                f"attention={b}",
                "levers",
                f"--set model.attention_backend={b}: SDPA's {b} kernel only",
                {"model.attention_backend": b},
            )
        )
    rows += [
        Row(
            "compile_blocks",
            "levers",
            "--set model.compile_blocks=true: torch.compile of each transformer layer",
            {"model.compile_blocks": "true"},
        ),
        Row(
            "compile_blocks+cudnn",
            "levers",
            "compile_blocks and SDPA's cudnn kernel",
            {"model.compile_blocks": "true", "model.attention_backend": "cudnn"},
        ),
        Row(
            "loss_chunk=4096",
            "levers",
            "--set model.loss_chunk=4096: the linear cross-entropy, 4096 tokens' logits at a time",
            {"model.loss_chunk": 4096},
        ),
        Row("micro=4", "levers", "--set schedule.micro_batch_size=4", {"schedule.micro_batch_size": 4}),
    ]
    # issue 54's levers from maintained libraries, each against the default and, for liger's loss, against our own
    # chunked loss (loss_chunk=4096 above): torch's fused AdamW, liger-kernel's LayerNorm and fused linear cross-entropy
    rows += [
        Row(
            "fused_adamw",
            "fused",
            "--set optimizer.fused=true: torch's fused AdamW (one kernel over all parameters)",
            {"optimizer.fused": "true"},
        ),
        Row(
            "liger",
            "fused",
            "--set model.kernels=liger model.loss_chunk=4096: liger-kernel's LayerNorm and fused "
            "linear cross-entropy (against loss_chunk=4096, our chunked loss)",
            {"model.kernels": "liger", "model.loss_chunk": 4096},
        ),
        Row(
            "liger+fused_adamw",
            "fused",
            "both",
            {"model.kernels": "liger", "model.loss_chunk": 4096, "optimizer.fused": "true"},
        ),
    ]
    rows.append(
        Row(
            "profile",
            "profile",
            "the default's step under torch.profiler: GPU time by kernel kind, idle time",
            profile=True,
        )
    )
    rows.append(
        Row(
            "profile:compile_blocks",
            "compiled-profile",
            "the same with model.compile_blocks=true: what the compiled layers fuse",
            {"model.compile_blocks": "true"},
            profile=True,
        )
    )
    small = "scaled_configs/gpt-125m.yaml" if config != "scaled_configs/tiny.yaml" else config
    for r in ("none", "selective", "full"):
        rows.append(
            Row(
                f"125m:recompute={r}",
                "memory",
                f"{small} with --set model.recompute={r}: memory against stage_memory",
                {"model.recompute": r},
                config=small,
            )
        )
    # held out (issue 45): cases the memory model was not fitted to, its predictions committed (--predict) before they
    # run
    if config != "scaled_configs/tiny.yaml":
        rows += heldout_rows()
    hf = (
        "Hugging Face GPT2LMHeadModel, same shape, SDPA, fp32 weights under bf16 autocast, AdamW, clipping, dropout 0.1"
    )
    rows += [
        Row("hf-eager", "hf", hf + ", eager", hf="eager"),
        Row("hf-compile", "hf", hf + ", torch.compile(model and loss)", hf="compile"),
    ]
    for r in rows:
        if r.name == "default" or r.config or r.profile:
            continue
        if r.group == "backend" and r.flags[1] == auto:
            r.alias = "default"
        if r.group == "kernels" and r.sets["model.kernels"] == cfg.model.kernels:
            r.alias = "default"
        if r.group == "recompute" and r.sets["model.recompute"] == cfg.model.recompute:
            r.alias = "default"
        if r.group in ("levers", "fused") and all(
            str(getattr(getattr(cfg, k.split(".")[0]), k.split(".")[1])).lower() == str(v) for k, v in r.sets.items()
        ):
            r.alias = "default"
        if r.group == "deterministic" and cfg.deterministic:
            r.alias = "default"
    import importlib.util

    for r in rows:
        if r.sets.get("model.kernels") == "liger" and importlib.util.find_spec("liger_kernel") is None:
            r.skip = "liger-kernel is not installed (optional, a CUDA package: carry its wheel, bench/GPU_PLAN.md)"
    if device == "cpu":
        for r in rows:
            if r.sets.get("model.kernels") == "liger":
                r.skip = (
                    "liger-kernel's Triton kernels need a GPU (its loss runs in Triton's interpreter on a CPU: "
                    "tests/test_levers.py)"
                )
            if r.name == "kernels=triton":
                r.skip = (
                    "Triton kernels need a GPU (a CPU runs them only in Triton's interpreter, ~1000x slower: "
                    "bench/kernels.py checks them there)"
                )
            if r.name in ("kernels=compile", "hf-compile") or "compile_blocks" in r.name:
                r.skip = (
                    "torch.compile on a CPU spends about a minute in C++ code generation on 2 shared cores; "
                    "the GPU run measures it"
                )
            if r.name in ("attention=cudnn", "attention=efficient"):
                r.skip = f"SDPA's {r.name.split('=')[1]} kernel is a CUDA kernel"
            if r.name == "attention=flash":
                r.skip = "SDPA's flash kernel for the CPU takes no dropout"
    return rows


HELDOUT = "bench/results/memory-heldout-predictions.json"  # not gpu-*.json: a prediction, not a GPU result


def heldout_rows() -> list[Row]:
    """The memory model's held-out cases on one GPU: micro-batches 4 and 16 with the chunked loss, seq 1024, gpt-350m's
    shape."""
    return [
        Row(
            "heldout:micro=4+chunk",
            "heldout",
            "micro-batch 4, --set model.loss_chunk=4096: measured peak against stage_memory",
            {"schedule.micro_batch_size": 4, "model.loss_chunk": 4096},
        ),
        Row(
            "heldout:micro=16+chunk",
            "heldout",
            "micro-batch 16, --set model.loss_chunk=4096: measured peak against stage_memory",
            {"schedule.micro_batch_size": 16, "model.loss_chunk": 4096},
        ),
        Row(
            "heldout:seq=1024",
            "heldout",
            "--set model.seq_length=1024: measured peak against stage_memory",
            {"model.seq_length": 1024},
        ),
        Row(
            "heldout:350m",
            "heldout",
            "scaled_configs/gpt-350m.yaml: measured peak against stage_memory",
            config="scaled_configs/gpt-350m.yaml",
        ),
    ]


def predict_heldout(steps: int) -> dict:
    """Chapter 50's peak for every held-out case, GiB without the reserve (what `measure` compares with
    `max_memory_allocated`): written before any GPU runs them, so the measurement tests a prediction."""
    import subprocess

    config = "scaled_configs/gpt-1.3b.yaml"
    rows = []
    for r in heldout_rows():
        cfg = load(r.config or config, {**common_for(r.config or config, steps), **r.sets})
        rows.append(
            {
                "name": r.name,
                "config": r.config or config,
                "overrides": r.sets,
                "micro_batch": cfg.schedule.micro_batch_size,
                "seq": cfg.model.seq_length,
                "recompute": cfg.model.recompute,
                "loss_chunk": cfg.model.loss_chunk,
                "predicted_gib": predicted_gib(cfg),
            }
        )
    commit = (
        subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip() or None
    )
    return {
        "what": "the memory model's predictions for cases it was not fitted to (issue 45), committed before they are "
        "measured: bench/gpu.py --only heldout measures them and reports measured / predicted",
        "date": datetime.date.today().isoformat(),
        "predicted_at_commit": commit,
        "model": "chapter 50's stage_memory (counting), calibrated on the H200 run's six cases, reserve excluded",
        "rows": rows,
    }


def selected(rows: list[Row], only: str | None) -> tuple[list[Row], bool]:
    """The rows --only names (by name or group: default, backend/engine/single, kernels, recompute, deterministic, hf,
    ...)."""
    if not only:
        return rows, True
    want = {w.strip() for w in only.split(",") if w.strip()}
    known = {r.name for r in rows} | {r.group for r in rows} | {"determinism"}
    if want - known:
        raise SystemExit(f"--only: unknown {', '.join(sorted(want - known))}; choose from {', '.join(sorted(known))}")
    order = [w.strip() for w in only.split(",") if w.strip()]
    first = lambda r: min(order.index(w) for w in (r.name, r.group) if w in order)
    return sorted(
        (r for r in rows if r.name in want or r.group in want), key=first
    ), "determinism" in want  # in --only's order


# ------------------------------------------------------------------------------------------------ running `mtnlg train`


def mtnlg_head() -> list[str]:
    exe = Path(sys.executable).parent / "mtnlg"
    return (
        [str(exe)]
        if exe.exists()
        else [sys.executable, "-c", "import sys; from mtnlg.cli import main; sys.exit(main())"]
    )


def train_command(config: str, run_dir: Path, sets: dict, flags=()) -> list[str]:
    cmd = mtnlg_head() + ["train", "--config", config, "--run-dir", str(run_dir), "--no-progress", *flags]
    for k, v in sets.items():
        cmd += ["--set", f"{k}={v}"]
    return cmd


def shown(cmd: list[str]) -> str:
    "A command as a user types it (`mtnlg train ...`, `python bench/gpu.py ...`), temporary paths included."
    head = mtnlg_head()
    if cmd[: len(head)] == head:
        cmd = ["mtnlg"] + cmd[len(head) :]
    elif cmd[:2] == [sys.executable, __file__]:
        cmd = ["python", "bench/gpu.py"] + cmd[2:]
    return shlex.join(cmd)


def loss_rows(run_dir: Path) -> list[dict]:
    "The log rows (those with a loss) of a run's metrics.jsonl; a line still being written is left out."
    path, out = Path(run_dir) / "metrics.jsonl", []
    if not path.is_file():
        return out
    for line in path.read_text().splitlines():
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if "loss" in r:
            out.append(r)
    return out


LIVE: list = []  # every job started, so that an interrupted benchmark leaves no process on the device


class Job:
    """One process in its own process group, its output in a log beside its run directory; `stop_when()` true: it is
    killed (kill -9: a measurement has what it needs once the last step is logged), as it is after `timeout` seconds."""

    def __init__(self, cmd, run_dir: Path, stop_when=None, env=None, timeout: float = 600):
        self.cmd, self.run_dir, self.stop_when, self.timeout = cmd, Path(run_dir), stop_when, timeout
        self.run_dir.parent.mkdir(parents=True, exist_ok=True)
        self.log = self.run_dir.parent / f"{self.run_dir.name}.log"
        self.t0, self.done, self.stopped, self.timed_out, self.wall_s = time.time(), False, False, False, None
        with open(self.log, "a") as f:
            self.proc = subprocess.Popen(
                cmd,
                cwd=ROOT,
                stdout=f,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
            )
        LIVE.append(self)

    def poll(self) -> bool:
        if self.done:
            return True
        if self.proc.poll() is None:
            late = time.time() - self.t0 > self.timeout
            if not late and not (self.stop_when and self.stop_when()):
                return False
            self.stopped, self.timed_out = not late, late
            self.kill()
        self.done, self.wall_s = True, time.time() - self.t0
        return True

    def kill(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()

    @property
    def ok(self) -> bool:
        return self.done and not self.timed_out and (self.stopped or self.proc.returncode == 0)

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.is_file() else ""

    def tail(self, n: int = 1500) -> str:
        return self.output()[-n:]


def run_jobs(jobs: list[Job]):
    "Wait for every job (polling; each is stopped by its own condition)."
    while not all([j.poll() for j in jobs]):
        time.sleep(0.2)


def last_step_logged(run_dir: Path, steps: int):
    return lambda: any(r["step"] >= steps for r in loss_rows(run_dir))


# ---------------------------------------------------------------------------------------------------- one measurement


def common_sets(cfg, steps: int) -> dict:
    """Overrides every timed run shares: the data, --steps steps logged one by one, no evaluation to speak of, no
    checkpoint but the final one (never reached: the run is killed once its last step is logged), and a schedule
    shortened to twice the batch ramp and the warm-up, which keeps their shapes (the step's batch and learning rate) and
    makes Megatron's sample index small."""
    s = cfg.schedule
    tokens = 2 * max(
        s.batch_size_rampup_tokens,
        s.lr_warmup_tokens,
        steps * (s.batch_size_rampup_start or s.global_batch_size) * cfg.model.seq_length,
    )
    return {
        **DATA,
        "schedule.train_iters": steps,
        "schedule.log_interval": 1,
        "schedule.eval_interval": 10**6,
        "schedule.eval_iters": 1,
        "checkpoint.save_interval": "null",
        "schedule.train_tokens": int(min(s.train_tokens, tokens)),
    }


def common_for(config: str, steps: int) -> dict:
    "The overrides every timed run of `config` shares, dropout on (the recipe's; tiny.yaml turns it off)."
    base = load(config, {})
    common = common_sets(base, steps)
    if not (base.model.hidden_dropout and base.model.attention_dropout):
        common.update(DROPOUT)
    return common


def load(config: str, sets: dict):
    from mtnlg.config import load_config, parse_override

    return load_config(ROOT / config, dict(parse_override(f"{k}={v}") for k, v in sets.items()))


def micro_batches(cfg) -> list[int]:
    "The config's micro-batch, then halves down to 2 (each dividing the step's batch): tried in turn after an OOM."
    from mtnlg.schedules import iterations

    batch, mb, out = iterations(cfg)[0][1], cfg.schedule.micro_batch_size, []
    while mb >= 2 or not out:
        if batch % mb == 0:
            out.append(mb)
        mb //= 2
    return out


def summarise(rows: list[dict]) -> dict:
    "Medians of the steps after the warm-up: tokens/s, MFU, HFU, peak memory per step (None where the run has none)."
    steady = [r for r in rows if r["step"] > WARMUP]

    def s(key):
        vals = [r.get(key) for r in steady]
        return None if not vals or any(v is None for v in vals) else summary(vals)

    return {
        "tokens_per_s": s("tokens_per_s"),
        "mfu": s("mfu"),
        "hfu": s("hfu"),
        "max_allocated_gib": s("max_allocated_gib"),
        "max_reserved_gib": s("max_reserved_gib"),
        "batch_sizes": sorted({r["batch_size"] for r in rows}),
        "losses": [r["loss"] for r in rows],
        "steps_measured": [r["step"] for r in steady],
    }


def predicted_gib(cfg) -> float:
    "Chapter 50's peak for this config on one GPU (TP1 PP1 DP1, the step's batch), without its reserve, in GiB."
    from mtnlg.counting import Assumptions, GiB, Setup, stage_memory
    from mtnlg.schedules import iterations

    return (
        stage_memory(
            cfg.model,
            Setup.of(cfg, cfg.model.recompute),
            iterations(cfg)[0][1],
            cfg.precision,
            Assumptions(reserved_gib=0),
        )[0]["total"]
        / GiB
    )


def measure(row: Row, ctx) -> dict:
    """One row: its process at the largest micro-batch that fits; the summary of its steps and what ran."""
    out = {"name": row.name, "group": row.group, "what": row.what, "overrides": {}, "tried_micro_batches": []}
    config = row.config or ctx.config
    if config != ctx.config:
        out["config"] = config
    base = {**(common_for(config, ctx.steps) if config != ctx.config else ctx.common), **row.sets}
    cfg = load(config, base)
    for mb in micro_batches(cfg):
        sets = dict(base, **({} if mb == cfg.schedule.micro_batch_size else {"schedule.micro_batch_size": mb}))
        run_dir = ctx.tmp / re.sub(r"[^a-z0-9]+", "-", row.name) / f"micro-{mb}"
        if row.hf:
            cmd = [
                sys.executable,
                __file__,
                "--hf-worker",
                json.dumps({"config": config, "sets": sets, "mode": row.hf, "run_dir": str(run_dir)}),
            ]
        elif row.profile:
            cmd = [
                sys.executable,
                __file__,
                "--profile-worker",
                json.dumps({"config": config, "sets": sets, "run_dir": str(run_dir), "steps": ctx.steps}),
            ]
        else:
            cmd = train_command(config, run_dir, sets, row.flags)
        job = Job(cmd, run_dir, last_step_logged(run_dir, ctx.steps), timeout=ctx.timeout)
        run_jobs([job])
        rows, text = loss_rows(run_dir), job.output()
        profiled = json.loads((run_dir / "profile.json").read_text()) if (run_dir / "profile.json").is_file() else None
        shutil.rmtree(run_dir.parent, ignore_errors=True)
        out["tried_micro_batches"].append(mb)
        if len(rows) >= ctx.steps and job.ok:
            first = re.search(r"^([\d,]+) parameters on (.*?)(?:; |$)", text, re.M)
            out.update(
                {
                    "command": shown(cmd),
                    "overrides": {k: v for k, v in sets.items() if k not in DATA},
                    "micro_batch": mb,
                    "global_batch": rows[0]["batch_size"],
                    "seq": cfg.model.seq_length,
                    "backend": None
                    if row.hf
                    else ("single" if first and first.group(2).startswith("one process") else "deepspeed"),
                    "ran_on": first.group(2) if first else None,
                    "parameters": int(first.group(1).replace(",", "")) if first else None,
                    "wall_s": job.wall_s,
                    "startup_s": job.wall_s - sum(r.get("elapsed_s", 0) for r in rows[-1:]) if not row.hf else None,
                    **summarise(rows),
                }
            )
            if len(out["batch_sizes"]) != 1:
                out["note"] = f"the batch changed during the run: {out['batch_sizes']}"
            if profiled:
                out["profile"] = profiled
            run_cfg = load(config, sets)
            if out["backend"] == "deepspeed":
                out["predicted_gib"] = predicted_gib(run_cfg)
                if out["max_allocated_gib"]:
                    out["measured_over_predicted"] = out["max_allocated_gib"]["max"] / out["predicted_gib"]
            return out
        if OOM.search(text) and not job.timed_out:
            continue  # the next smaller micro-batch
        out.update(
            {
                "command": shown(cmd),
                "error": (
                    "timed out after %.0f s; " % ctx.timeout if job.timed_out else f"exit code {job.proc.returncode}; "
                )
                + text[-1500:],
            }
        )
        return out
    out.update({"error": f"out of memory at every micro-batch tried ({out['tried_micro_batches']})"})
    return out


# --------------------------------------------------------------------------------------------- where a step's time goes

KERNEL_KINDS = [
    (
        "attention",
        re.compile(r"flash|fmha|sdpa|attention", re.I),
    ),  # first: cuDNN's and FA2's names say sm90 / cutlass too
    ("matrix products", re.compile(r"gemm|nvjet|xmma|cutlass|sm90_|sm80_|cublas", re.I)),
    ("communication", re.compile(r"nccl", re.I)),
    ("optimizer", re.compile(r"adam|multi_tensor|foreach", re.I)),
    ("copies", re.compile(r"memcpy|memset|copy", re.I)),
]


def kernel_kind(name: str) -> str:
    return next((kind for kind, pattern in KERNEL_KINDS if pattern.search(name)), "elementwise and reductions")


def profile_worker(spec: dict) -> int:
    """`mtnlg train`'s step, in its own process: the config's steps, then one more under torch.profiler. Writes
    profile.json beside metrics.jsonl: the step's wall time, its GPU kernel time by kind (matrix products, attention,
    elementwise and reductions, optimizer, communication, copies), the time no kernel runs, the top kernels and the
    top operators by their own device time (on a CPU: by their own CPU time)."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    from mtnlg.train import MetricsLog, open_run, load_run, train_one_step, log_step

    cfg = load(spec["config"], spec["sets"])
    run = open_run(cfg, spec["run_dir"])
    load_run(run)
    metrics, t_start, steps, bar = MetricsLog(run), time.time(), spec["steps"], argparse.Namespace(disable=True)
    for step in range(1, steps):
        log_step(run, train_one_step(run, step), metrics, bar, t_start)
    cuda = run.device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    sync()
    with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])) as prof:
        t0 = time.time()
        done = train_one_step(run, steps)
        sync()
        wall = time.time() - t0
    events = prof.key_averages()
    kernels = [e for e in events if cuda and e.device_type == torch.autograd.DeviceType.CUDA]
    by_kind: dict = {}
    for e in kernels:
        by_kind[kernel_kind(e.key)] = by_kind.get(kernel_kind(e.key), 0.0) + e.self_device_time_total / 1e6
    busy = sum(by_kind.values())
    time_key = "self_device_time_total" if cuda else "self_cpu_time_total"
    ops = sorted(
        (e for e in events if e.device_type == torch.autograd.DeviceType.CPU), key=lambda e: -getattr(e, time_key)
    )
    out = {
        "step": steps,
        "wall_s": wall,
        "kernel_s": busy,
        "idle_s": wall - busy if cuda else None,
        "by_kind_s": dict(sorted(by_kind.items(), key=lambda kv: -kv[1])),
        "top_kernels": [
            {"name": e.key[:160], "s": e.self_device_time_total / 1e6, "calls": e.count, "kind": kernel_kind(e.key)}
            for e in sorted(kernels, key=lambda e: -e.self_device_time_total)[:25]
        ],
        "top_ops": [{"name": e.key[:120], "s": getattr(e, time_key) / 1e6, "calls": e.count} for e in ops[:25]],
        "ops_timed_by": "device" if cuda else "cpu",
    }
    (Path(spec["run_dir"]) / "profile.json").write_text(json.dumps(out, indent=1))
    log_step(run, done, metrics, bar, t_start)  # the profiled step's row last: the runner stops the process here
    print(
        f"profiled step {steps}: {wall:.3f} s wall"
        + (
            f", kernels {busy:.3f} s ({', '.join(f'{k} {v:.3f}' for k, v in out['by_kind_s'].items())})" if cuda else ""
        ),
        flush=True,
    )
    metrics.close()
    return 0


# ---------------------------------------------------------------------------------------------- the Hugging Face anchor


def hf_worker(spec: dict) -> int:
    """The anchor, in its own process: HF GPT-2 at the config's shape with the recipe (see the module's docstring); one
    metrics.jsonl row per step in `mtnlg train`'s format (each step timed from the batch on the host to the synchronised
    end of the optimizer step). Exit 3 on running out of memory."""
    import torch
    import torch.nn.functional as F
    from transformers import GPT2Config, GPT2LMHeadModel
    from mtnlg.data_parallel import make_optimizer
    from mtnlg.counting import gpu_for, utilization
    from mtnlg.schedules import iterations
    from mtnlg.train import autocast_for

    cfg = load(spec["config"], spec["sets"])
    m, s = cfg.model, cfg.schedule
    device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    torch.manual_seed(cfg.seed)
    hf = GPT2Config(
        vocab_size=m.padded_vocab_size(),
        n_positions=m.seq_length,
        n_embd=m.hidden_size,
        n_layer=m.num_layers,
        n_head=m.num_attention_heads,
        n_inner=m.ffn_size,
        activation_function="gelu",
        resid_pdrop=m.hidden_dropout,
        embd_pdrop=m.hidden_dropout,
        attn_pdrop=m.attention_dropout,
        layer_norm_epsilon=m.layernorm_epsilon,
        initializer_range=m.init_method_std,
        use_cache=False,
        bos_token_id=None,
        eos_token_id=None,
    )
    with torch.device(device):
        model = GPT2LMHeadModel._from_config(hf, attn_implementation="sdpa").train()
    assert all(p.dtype == torch.float32 for p in model.parameters())
    optimizer, autocast = make_optimizer(model, cfg), autocast_for(cfg, device)

    def loss_of(x, y):
        with autocast():
            logits = model(input_ids=x).logits
        return F.cross_entropy(logits.float().flatten(0, 1), y.flatten())

    step_loss = torch.compile(loss_of) if spec["mode"] == "compile" else loss_of
    gpu = gpu_for(torch.cuda.get_device_name(device)) if device.type == "cuda" else None
    gen = torch.Generator().manual_seed(cfg.seed)
    run_dir = Path(spec["run_dir"])
    run_dir.mkdir(parents=True, exist_ok=True)
    out = open(run_dir / "metrics.jsonl", "w")
    print(
        f"{sum(p.numel() for p in model.parameters()):,} parameters on Hugging Face GPT2LMHeadModel ({device.type}, "
        f"{spec['mode']}, micro-batch {s.micro_batch_size}); random tokens of the model's vocabulary",
        flush=True,
    )
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    try:
        for step, (_, batch_size) in enumerate(iterations(cfg)[: s.train_iters], 1):
            tokens = torch.randint(
                0, m.vocab_size, (batch_size, m.seq_length + 1), generator=gen
            )  # on the host, as a loader's
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            t0 = time.time()
            batch = tokens.to(device)
            optimizer.zero_grad(set_to_none=True)
            micro, total = batch.split(s.micro_batch_size), torch.zeros((), device=device)
            for mb in micro:
                loss = step_loss(mb[:, :-1], mb[:, 1:])
                (loss / len(micro)).backward()
                total += loss.detach() / len(micro)
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.optimizer.clip_grad).item()
            if math.isfinite(grad_norm):
                optimizer.step()
            loss_value = total.item()
            sync()
            seconds = time.time() - t0
            mfu, hfu = utilization(m, batch_size, seconds, 1, gpu, "none")
            row = {
                "step": step,
                "loss": loss_value,
                "batch_size": batch_size,
                "grad_norm": grad_norm,
                "tokens_per_s": batch_size * m.seq_length / seconds,
                "mfu": mfu,
                "hfu": hfu,
                "max_allocated_gib": torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None,
                "max_reserved_gib": torch.cuda.max_memory_reserved(device) / 2**30 if device.type == "cuda" else None,
            }
            out.write(json.dumps(row) + "\n")
            out.flush()
            print(f"step {step}: loss {loss_value:.4f}, {row['tokens_per_s']:,.0f} tokens/s", flush=True)
    except torch.OutOfMemoryError as e:
        print(f"out of memory at micro-batch {s.micro_batch_size}: {e}", flush=True)
        return 3
    return 0


# ---------------------------------------------------------------------------------------------------- determinism


def same(a, b) -> bool:
    "Deep equality: tensors bit for bit (dtype and values), containers item by item, the rest by ==."
    import torch

    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(map(same, a, b))
    return a == b


def compare_runs(a: Path, b: Path) -> dict:
    """Two runs' last checkpoints (chapter 43's `Checkpoint`) and per-step losses: every tensor (weights, fp32 masters,
    Adam's moments), every rank's random streams (torch, numpy, Python, the tensor-parallel one, CUDA's), the step and
    data position. `bitwise` only if all are equal; otherwise what differs, and by how much."""
    from mtnlg.checkpoint import Checkpoint, OPTIMIZER_STATES

    ca, cb = Checkpoint(a / "checkpoints"), Checkpoint(b / "checkpoints")
    la, lb = ([(r["step"], r["loss"], r["grad_norm"]) for r in loss_rows(d)] for d in (a, b))
    differ, worst, n = [], 0.0, 0
    for name in sorted(set(ca.names()) | set(cb.names())):
        for what in ("model",) + OPTIMIZER_STATES:
            n += 1
            try:
                x, y = ca.full(name, what), cb.full(name, what)
            except (KeyError, ValueError) as e:
                differ.append(f"{name} {what} ({type(e).__name__})")
                continue
            if not same(x, y):
                differ.append(f"{name} {what}")
                if x.shape == y.shape:
                    worst = max(worst, (x.float() - y.float()).abs().max().item())
    rng = {}
    for rank in range(ca.layout.world_size):
        ra, rb = ca.rng(rank), cb.rng(rank)
        for stream in sorted(set(ra) | set(rb)):
            rng[f"{stream}" + (f" rank {rank}" if rank else "")] = same(ra.get(stream), rb.get(stream))
    position = [(c.step, c.optimizer_step, c.meta["consumed_samples"]) for c in (ca, cb)]
    return {
        "bitwise": not differ and all(rng.values()) and la == lb and position[0] == position[1],
        "step": ca.step,
        "tensors_compared": n,
        "tensors_differing": len(differ),
        "differing": differ[:6],
        "largest_difference": worst,
        "rng_equal": rng,
        "losses_equal": la == lb,
        "same_position": position[0] == position[1],
        "losses": [x[1] for x in la],
        "losses_other": [x[1] for x in lb] if la != lb else None,
    }


def determinism(ctx) -> dict:
    """`deterministic: true`: runs A and B, and C killed (kill -9) inside the save of its last step — after the
    checkpoint halfway — then resumed with `--resume auto`; without the switch, runs D and E. Three processes at a time
    on the one device (A, B, C; then C's resume, D, E): the comparison is of bits, not of speed."""
    from mtnlg.checkpoint import step_name

    config, steps = ctx.det_config, ctx.det_steps
    cfg = load(config, {})
    half = steps // 2
    sets = {**common_sets(cfg, steps), **DROPOUT, "checkpoint.save_interval": half, "checkpoint.keep_last": 1}
    on, off = {**sets, "deterministic": "true"}, {**sets, "deterministic": "false"}
    d = ctx.tmp / "determinism"
    A, B, C, D, E = (d / n for n in ("on-1", "on-2", "on-killed", "off-1", "off-2"))
    paused = C / "checkpoints" / f".{step_name(steps)}.tmp" / "paused-0"
    t0 = time.time()
    first = [
        Job(train_command(config, A, on), A, timeout=ctx.timeout),
        Job(train_command(config, B, on), B, timeout=ctx.timeout),
        Job(
            train_command(config, C, on),
            C,
            paused.exists,
            env={"MTNLG_PAUSE_IN_SAVE": f"0:{steps}"},
            timeout=ctx.timeout,
        ),
    ]
    run_jobs(first)
    out = {
        "config": config,
        "steps": steps,
        "overrides": {k: v for k, v in on.items() if k not in DATA},
        "command": shown(train_command(config, Path("RUN"), on)),
        "kill": f"kill -9 inside step {steps}'s save (MTNLG_PAUSE_IN_SAVE=0:{steps}), then `--resume auto` from "
        f"{step_name(half)}",
    }
    bad = [f"{j.run_dir.name}: " + j.tail() for j in first[:2] if not j.ok] + (
        [] if first[2].stopped else [f"on-killed was not stopped in its save: {first[2].tail()}"]
    )
    if bad:
        return {**out, "error": "\n".join(bad)}
    latest = (C / "checkpoints" / "latest").read_text().strip()
    second = [
        Job(train_command(config, C, on, ("--resume", "auto")), C, timeout=ctx.timeout),
        Job(train_command(config, D, off), D, timeout=ctx.timeout),
        Job(train_command(config, E, off), E, timeout=ctx.timeout),
    ]
    run_jobs(second)
    bad = [f"{j.run_dir.name}: " + j.tail() for j in second if not j.ok]
    if bad:
        return {**out, "error": "\n".join(bad)}
    resumed = "resumed from" in second[0].output()
    out.update(
        {
            "killed_at_checkpoint": latest,
            "resumed": resumed,
            "deterministic": {"two_runs": compare_runs(A, B), "kill9_resume": compare_runs(A, C)},
            "default": {"two_runs": compare_runs(D, E)},
            "wall_s": time.time() - t0,
        }
    )
    shutil.rmtree(d, ignore_errors=True)
    return out


# -------------------------------------------------------------------------------------------------- the whole benchmark


def device_info() -> dict:
    """The device and the software, read in a child process when CUDA is there (the benchmark's own process never
    touches CUDA)."""
    import torch

    if not torch.cuda.is_available():
        return {"device": "cpu", "name": "cpu", "hardware": hardware(cuda=None), "peak_tflops": None}
    r = subprocess.run([sys.executable, __file__, "--device-info"], capture_output=True, text=True, cwd=ROOT)
    if r.returncode:
        raise SystemExit(f"reading the device failed: {r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def _device_info_child() -> int:
    import torch
    from importlib.metadata import version, PackageNotFoundError
    from mtnlg.counting import gpu_for

    name, gpu = torch.cuda.get_device_name(), gpu_for(torch.cuda.get_device_name())
    versions = {"cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version()}
    for package in ("deepspeed", "megatron-core", "triton", "transformers"):
        try:
            versions[package] = version(package)
        except PackageNotFoundError:
            versions[package] = "not installed"
    print(
        json.dumps(
            {
                "device": "cuda",
                "name": name,
                "peak_tflops": gpu.peak_tflops if gpu else None,
                "memory_gib": torch.cuda.get_device_properties(0).total_memory / 2**30,
                "hardware": hardware(**versions, shared_machine="not shared: one GPU machine lent to this run alone"),
            }
        )
    )
    return 0


def estimate_s(row: Row, ctx, cfg) -> float:
    "A rough duration of one row: process start, --steps steps at a guessed utilization (GPU) or the start alone (CPU)."
    if ctx.device == "cpu":
        return START_S["cpu"]
    from mtnlg.counting import flops_per_iteration
    from mtnlg.schedules import iterations

    batch = iterations(cfg)[0][1]
    recompute = row.sets.get("model.recompute", cfg.model.recompute)
    util = 0.35 if row.name in ("single", "hf-eager") else 0.45  # fraction of peak a step reaches (a guess)
    step = flops_per_iteration(cfg.model, batch, recompute) / (util * (ctx.peak_tflops or 989) * 1e12)
    return START_S["cuda"] + COMPILE_S.get(row.name, 0) + ctx.steps * step


def ratio(a: dict, b: dict | None) -> float | None:
    if not b or "tokens_per_s" not in b or not b.get("tokens_per_s") or "tokens_per_s" not in a:
        return None
    return ratio_of_medians(a["tokens_per_s"], b["tokens_per_s"])


def pct(s) -> str:
    return "   n/a" if s is None else f"{100 * (s['median'] if isinstance(s, dict) else s):5.1f}%"


def table(results: list[dict], det: dict | None) -> str:
    lines = [
        f"{'row':30s} {'micro':>5s} {'tokens/s median (min-max)':>30s} {'MFU':>6s} {'HFU':>6s} {'peak GiB':>8s} "
        f"{'pred.':>6s} {'meas/pred':>9s} {'x default':>9s} {'x HF comp.':>10s}"
    ]
    for r in results:
        if "tokens_per_s" not in r:
            lines.append(
                f"{r['name']:30s} "
                + (f"skipped: {r['skipped']}" if "skipped" in r else f"FAILED: {r.get('error', '')[:200]!r}")
            )
            continue
        t, mem = r["tokens_per_s"], r.get("max_allocated_gib")
        f = lambda x, spec: "n/a" if x is None else format(x, spec)
        rate = f"{t['median']:,.0f} ({t['min']:,.0f}-{t['max']:,.0f})"
        lines.append(
            f"{r['name'] + (' (= ' + r['alias_of'] + ')' if r.get('alias_of') else ''):30s} {r['micro_batch']:5d} "
            f"{rate:>30s} {pct(r['mfu'])} {pct(r['hfu'])} "
            f"{f(mem and mem['max'], '8.1f'):>8s} {f(r.get('predicted_gib'), '6.1f'):>6s} "
            f"{f(r.get('measured_over_predicted'), '9.2f'):>9s} {f(r.get('vs_default'), '9.2f'):>9s} "
            f"{f(r.get('vs_hf_compile'), '10.2f'):>10s}"
        )
    if det:
        if "error" in det:
            lines.append(f"determinism ({det['config']}): FAILED: {det['error'][:300]!r}")
        else:
            yn = lambda c: (
                "bitwise equal"
                if c["bitwise"]
                else f"DIFFER ({c['tensors_differing']} of {c['tensors_compared']} tensors, largest "
                f"{c['largest_difference']:.2e}; losses equal: {c['losses_equal']}; rng equal: "
                f"{all(c['rng_equal'].values())})"
            )
            lines += [
                f"determinism, {det['config']}, {det['steps']} steps, deterministic=true: two runs "
                f"{yn(det['deterministic']['two_runs'])}; "
                f"kill -9 + --resume auto {yn(det['deterministic']['kill9_resume'])}",
                f"determinism, the same without the switch: two runs {yn(det['default']['two_runs'])}",
            ]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--save", action="store_true", help="write bench/results/gpu-<date>-<device>.json")
    ap.add_argument("--out", help="write the results JSON here instead (any path)")
    ap.add_argument(
        "--only",
        help="comma-separated rows or groups, run in this order: default, engine, single, backend, kernels, "
        "kernels=compile, recompute, recompute=full, deterministic, levers, attention=cudnn, compile_blocks, "
        "fused, fused_adamw, liger, liger+fused_adamw, profile, memory, hf, hf-eager, hf-compile, determinism",
    )
    ap.add_argument(
        "--steps",
        type=int,
        default=WARMUP + MIN_RUNS,
        help=f"training steps per run (>= {WARMUP + MIN_RUNS}: {WARMUP} of warm-up, then at least {MIN_RUNS} measured)",
    )
    ap.add_argument("--det-steps", type=int, default=8, help="steps of each determinism run (a checkpoint halfway)")
    ap.add_argument(
        "--config", help="the timed config (default: scaled_configs/gpt-1.3b.yaml; with --dry-run tiny.yaml)"
    )
    ap.add_argument(
        "--det-config", help="the determinism config (default: scaled_configs/gpt-125m.yaml; with --dry-run tiny.yaml)"
    )
    ap.add_argument(
        "--timeout", type=float, default=420, help="seconds after which one run is killed and reported as failed"
    )
    ap.add_argument(
        "--dry-run", action="store_true", help="the same code at the tiny shape on the CPU (about two minutes)"
    )
    ap.add_argument(
        "--predict",
        action="store_true",
        help=f"no GPU: print the memory model's predictions for the held-out "
        f"cases (with --save: write {HELDOUT}, to commit before they are measured)",
    )
    ap.add_argument("--hf-worker", help=argparse.SUPPRESS)
    ap.add_argument("--profile-worker", help=argparse.SUPPRESS)
    ap.add_argument("--device-info", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.hf_worker:
        return hf_worker(json.loads(args.hf_worker))
    if args.profile_worker:
        return profile_worker(json.loads(args.profile_worker))
    if args.device_info:
        return _device_info_child()
    if args.steps < WARMUP + MIN_RUNS:
        ap.error(f"--steps must be >= {WARMUP + MIN_RUNS}")
    if args.predict:
        pred = predict_heldout(args.steps)
        for r in pred["rows"]:
            print(
                f"{r['name']:24s} {r['config']:32s} micro {r['micro_batch']:2d} seq {r['seq']} -> "
                f"{r['predicted_gib']:.2f} GiB"
            )
        if args.save:
            (ROOT / HELDOUT).write_text(json.dumps(pred, indent=1) + "\n")
            print(f"wrote {HELDOUT}")
        return 0
    if args.save and args.dry_run:
        ap.error("a dry run measures nothing worth keeping: --save writes bench/results from a GPU run only")

    if args.dry_run:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # the CPU, for this process and every run it starts, GPU or not
    info = device_info()
    if info["device"] == "cpu" and not args.dry_run:
        raise SystemExit(
            "no CUDA device: this benchmark measures a GPU (try --dry-run to check it at the tiny shape on the CPU)"
        )
    tiny = "scaled_configs/tiny.yaml"
    config = args.config or (tiny if args.dry_run else "scaled_configs/gpt-1.3b.yaml")
    det_config = args.det_config or (tiny if args.dry_run else "scaled_configs/gpt-125m.yaml")
    base = load(config, {})
    common = common_for(config, args.steps)
    cfg = load(config, common)
    tmp = Path(tempfile.mkdtemp(prefix="mtnlg-bench-gpu-"))
    ctx = argparse.Namespace(
        config=config,
        det_config=det_config,
        steps=args.steps,
        det_steps=args.det_steps,
        device=info["device"],
        peak_tflops=info["peak_tflops"],
        common=common,
        tmp=tmp,
        timeout=args.timeout,
    )
    rows, with_det = selected(plan(config, info["device"], base), args.only)

    from mtnlg.schedules import iterations

    batch = iterations(cfg)[0][1]
    from tokenizers import Tokenizer

    vocab = Tokenizer.from_file(str(ROOT / DATA["data.curated"] / "tokenizer.json")).get_vocab_size()
    print(
        f"{info['name']}"
        + (
            f": peak {info['peak_tflops']} TFLOP/s bf16 dense"
            if info["peak_tflops"]
            else " (dry run: tiny shape, no GPU)"
        )
    )
    print(
        f"{config}: {cfg.model.num_layers} layers, hidden {cfg.model.hidden_size}, "
        f"{cfg.model.num_attention_heads} heads, "
        f"seq {cfg.model.seq_length}, vocabulary {cfg.model.vocab_size} (padded "
        f"{cfg.model.padded_vocab_size()}; the data's "
        f"tokenizer has {vocab}), {cfg.precision}; {args.steps} steps of {batch} sequences, medians of "
        f"steps {WARMUP + 1}-{args.steps}"
    )
    est = 0.0
    print("plan:")
    for r in rows:
        e = (
            0
            if (r.alias and any(x.name == r.alias for x in rows)) or r.skip
            else estimate_s(
                r,
                ctx,
                load(r.config or config, {**(common_for(r.config, args.steps) if r.config else common), **r.sets}),
            )
        )
        est += e
        print(
            f"  {r.name:18s} {r.what}"
            + (f"  [= {r.alias}: measured once]" if e == 0 and r.alias and not r.skip else "")
            + (f"  [skipped: {r.skip}]" if r.skip else f"  ~{e:.0f} s" if e else "")
        )
    if with_det:
        e = 2 * (START_S[ctx.device] + 10)
        est += e
        print(
            f"  {'determinism':18s} {det_config}: deterministic=true x 2 runs + kill -9/resume; the same 2 "
            f"runs without it  ~{e:.0f} s"
        )
    print(
        f"estimated {est / 60:.1f} min"
        + (f" (over the {BUDGET_S // 60}-minute budget: --only picks rows)" if est > BUDGET_S else "")
    )

    try:
        return run(args, argv, rows, with_det, ctx, info, cfg, batch, vocab, est)
    finally:  # also on Ctrl-C: no process left on the device, no run directory on its disk
        for j in LIVE:
            j.kill()
        shutil.rmtree(tmp, ignore_errors=True)


def run(args, argv, rows, with_det, ctx, info, cfg, batch, vocab, est) -> int:
    config = ctx.config
    t_start, results, done = time.time(), [], {}
    out = (
        Path(args.out)
        if args.out
        else (
            ROOT
            / "bench"
            / "results"
            / f"gpu-{datetime.date.today()}-{re.sub(r'[^a-z0-9]+', '-', info['name'].lower()).strip('-')}.json"
            if args.save
            else None
        )
    )

    def record(det, partial: bool) -> dict:
        "The results so far (written after every row, so that a run cut short keeps what it measured)."
        engine = next((r for r in results if r["name"] == "engine" and "tokens_per_s" in r), None)
        anchor = next((r for r in results if r["name"] == "hf-compile" and "tokens_per_s" in r), None)
        default = next((r for r in results if r["name"] == "default" and "tokens_per_s" in r), None)
        for r in results:
            if "tokens_per_s" in r and r["group"] not in ("memory", "heldout"):
                r["vs_engine"], r["vs_hf_compile"], r["vs_default"] = (
                    ratio(r, engine),
                    ratio(r, anchor),
                    ratio(r, default),
                )
        dcost = done.get("deterministic")
        cost = ratio(dcost, default) if dcost and default and "tokens_per_s" in dcost else None
        rec = {
            "date": str(datetime.date.today()),
            "device": info["name"],
            "dry_run": args.dry_run,
            "partial": partial,
            "hardware": info["hardware"],
            "peak_tflops": info["peak_tflops"],
            "memory_gib": info.get("memory_gib"),
            "command": shlex.join(["python", "bench/gpu.py", *(sys.argv[1:] if argv is None else argv)]),
            "config": config,
            "steps": args.steps,
            "warmup_steps": WARMUP,
            "global_batch": batch,
            "seq": cfg.model.seq_length,
            "tokenizer_vocab": vocab,
            "data": DATA,
            "common_overrides": {k: v for k, v in ctx.common.items() if k not in DATA},
            "recipe": "bf16 weights with fp32 master weights and Adam states (engine) / fp32 weights under bf16 "
            "autocast "
            "(single, HF); AdamW beta2 0.95, weight decay 0.1, clipping 1.0, dropout 0.1",
            "rows": results,
            "deterministic_cost": cost,
            "determinism": det,
            "seconds": time.time() - t_start,
            "estimated_seconds": est,
        }
        if out:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(rec, indent=1))
        return rec

    for i, r in enumerate(rows, 1):
        if r.skip:
            res = {"name": r.name, "group": r.group, "what": r.what, "skipped": r.skip}
        elif r.alias and r.alias in done:
            res = {**done[r.alias], "name": r.name, "group": r.group, "what": r.what, "alias_of": r.alias}
        else:
            res = measure(r, ctx)
        done[r.name] = res
        results.append(res)
        if "tokens_per_s" in res:
            t = res["tokens_per_s"]
            mem = res.get("max_allocated_gib")
            print(
                f"[{i}/{len(rows)}] {r.name}: {t['median']:,.0f} tokens/s (min {t['min']:,.0f}, max {t['max']:,.0f}), "
                f"MFU {pct(res['mfu']).strip()}, HFU {pct(res['hfu']).strip()}, micro-batch {res['micro_batch']}"
                + (f", peak {mem['max']:.1f} GiB allocated" if mem else "")
                + (f" (predicted {res['predicted_gib']:.1f})" if res.get("predicted_gib") else "")
                + (f" [= {r.alias}]" if res.get("alias_of") else f", {res['wall_s']:.0f} s"),
                flush=True,
            )
            if res.get("profile"):
                print(
                    "  profile: "
                    + json.dumps(
                        {k: v for k, v in res["profile"].items() if k in ("wall_s", "kernel_s", "idle_s", "by_kind_s")}
                    ),
                    flush=True,
                )
        else:
            print(
                f"[{i}/{len(rows)}] {r.name}: "
                + (f"skipped ({res['skipped']})" if "skipped" in res else f"FAILED: {res['error'][-600:]}"),
                flush=True,
            )
        record(None, partial=True)
    det = None
    if with_det:
        det = determinism(ctx)
        print(
            "determinism: "
            + (
                "FAILED: " + det["error"][-800:]
                if "error" in det
                else f"deterministic=true: two runs bitwise {det['deterministic']['two_runs']['bitwise']}, kill "
                f"-9 + resume bitwise "
                f"{det['deterministic']['kill9_resume']['bitwise']}; without it: two runs bitwise "
                f"{det['default']['two_runs']['bitwise']} "
                f"({det['wall_s']:.0f} s)"
            ),
            flush=True,
        )
    rec = record(det, partial=False)
    print()
    print(table(results, det))
    if rec["deterministic_cost"]:
        print(
            f"deterministic=true trains at x{rec['deterministic_cost']:.3f} the default's tokens/s "
            f"({config}, medians, this run)"
        )
    print(f"total {rec['seconds']:.0f} s ({rec['seconds'] / 60:.1f} min; estimated {est / 60:.1f})")
    if out:
        print(f"wrote {out}")
    failed = [r["name"] for r in results if "error" in r] + (["determinism"] if det and "error" in det else [])
    if failed:
        print(f"FAILED: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
