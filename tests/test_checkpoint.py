"""The training job survives what ends jobs (chapters 41, 43): `kill -9` mid-run, a crash inside a save, SIGUSR1 before
a time limit — each followed by `mtnlg train --resume auto` that finishes *bit for bit* like an uninterrupted run, on
one process and on TP 2 x PP 2 x DP 2; a checkpoint resharded TP2xPP2xDP2 -> TP1xPP1xDP1 -> TP2xPP1xDP4 (with sequence
parallelism) -> TP1 (without) gives the same logits and keeps training like the original; bad checkpoints are one-line
errors; a flipped bit is caught by the checksums, `--resume auto` steps over it. Real processes, real signals."""

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
MTNLG = str(Path(sys.executable).parent / "mtnlg")
CONFIG = "scaled_configs/tiny.yaml"

# fp32; Adam eps 1e-6 as chapter 14's parity runs (the reshard test compares across layouts). The one-process runs
# train with dropout on, so resuming must restore the random streams (both: the default one and the tensor-parallel one)
COMMON = {
    "schedule.log_interval": 1,
    "schedule.eval_interval": 1000,
    "schedule.eval_iters": 1,
    "optimizer.adam_eps": 1e-6,
    "checkpoint.keep_last": 10,
}
CURATED = ROOT / "tests/fixtures/curated"  # real `mtnlg curate` output: indexed datasets, weights, tokenizer
ONE = {
    **COMMON,
    "schedule.train_iters": 24,
    "checkpoint.save_interval": 8,
    "model.hidden_dropout": 0.1,
    "model.attention_dropout": 0.1,
    "data.curated": CURATED,
    "data.train_files": "[]",
    "data.valid_files": "[]",
}
THREE_D = {
    **COMMON,
    "schedule.train_iters": 8,
    "checkpoint.save_interval": 4,
    "schedule.micro_batch_size": 4,
    "parallel.tensor_parallel": 2,
    "parallel.pipeline_parallel": 2,
    "parallel.data_parallel": 2,
}


def command(run_dir, sets: dict, *extra) -> list:
    cmd = [MTNLG, "train", "--config", CONFIG, "--run-dir", str(run_dir), "--no-progress", *extra]
    for k, v in sets.items():
        cmd += ["--set", f"{k}={v}"]
    return cmd


def run(run_dir, sets, *extra, env=None) -> subprocess.CompletedProcess:
    r = subprocess.run(
        command(run_dir, sets, *extra),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **(env or {})},
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return r


def start(run_dir, sets, *extra, env=None) -> subprocess.Popen:
    "The job in its own process group (so `kill -9` reaches torchrun and every rank, as Slurm's does)."
    return subprocess.Popen(
        command(run_dir, sets, *extra),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, **(env or {})},
    )


def wait_for(cond, proc, timeout=300):
    t0 = time.time()
    while not cond():
        if proc.poll() is not None:
            raise AssertionError(f"the job ended (rc {proc.returncode}) first: {proc.stderr.read()[-2000:]}")
        if time.time() - t0 > timeout:
            raise TimeoutError("condition not reached")
        time.sleep(0.02)


def kill9(proc):
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def latest(run_dir) -> str | None:
    p = Path(run_dir) / "checkpoints" / "latest"
    return p.read_text().strip() if p.is_file() else None


def losses(run_dir) -> list:
    "(step, loss, grad norm, lr) of every step, as metrics.jsonl holds them."
    rows = [json.loads(l) for l in open(Path(run_dir) / "metrics.jsonl")]
    return [(r["step"], r["loss"], r["grad_norm"], r["lr"]) for r in rows if "loss" in r]


def assert_identical(a, b):
    """Per-step losses equal, and the last checkpoints equal bit for bit: weights, fp32 masters, Adam moments, step,
    data position."""
    from mtnlg.checkpoint import Checkpoint, OPTIMIZER_STATES

    assert losses(a) == losses(b)
    ca, cb = Checkpoint(Path(a) / "checkpoints"), Checkpoint(Path(b) / "checkpoints")
    assert (ca.step, ca.optimizer_step, ca.meta["consumed_samples"]) == (
        cb.step,
        cb.optimizer_step,
        cb.meta["consumed_samples"],
    )
    assert ca.names() == cb.names()
    for n in ca.names():
        for what in ("model",) + OPTIMIZER_STATES:
            assert torch.equal(ca.full(n, what), cb.full(n, what)), (n, what)


@pytest.fixture(scope="module")
def straight_one(tmp_path_factory):
    d = tmp_path_factory.mktemp("one") / "straight"
    run(d, ONE)
    return d


@pytest.fixture(scope="module")
def straight_3d(tmp_path_factory):
    d = tmp_path_factory.mktemp("3d") / "straight"
    run(d, THREE_D, "--nproc", "8")
    return d


def assert_curations_tokenizer(run_dir: Path):
    "One tokenizer from curation to training to evaluation: the checkpoint's is curation's, byte for byte."
    assert (run_dir / "checkpoints/latest").is_file()
    assert (run_dir / "checkpoints/step-0000024/tokenizer.json").read_bytes() == (
        CURATED / "tokenizer.json"
    ).read_bytes()


@pytest.mark.slow  # make test: the kill -9 inside a save below resumes bitwise too (and test_slurm's preempted 3D job)
def test_kill9_then_resume_is_bitwise_one_process(straight_one, tmp_path):
    job = start(tmp_path, ONE)
    wait_for(lambda: latest(tmp_path) is not None, job)
    kill9(job)
    assert latest(tmp_path) < "step-0000024"  # killed before the end
    run(tmp_path, ONE, "--resume", "auto")
    assert_identical(straight_one, tmp_path)
    assert_curations_tokenizer(tmp_path)


def test_crash_during_save_and_a_corrupt_step_resume_auto_falls_back_past_both_bitwise(straight_one, tmp_path, capsys):
    """Two faults, one resume (a start of `mtnlg train` costs seconds of imports): the job is killed inside step 24's
    save (nothing of it is complete: `latest` still names step 16), then a flipped bit in step 16's Adam moment.
    `mtnlg checkpoint verify` (through `mtnlg.cli.main`, in this process) says `--resume auto` would continue from step
    8; `--resume auto` says it skipped step 16, resumes from 8, cleans the half-written save away and ends bit for bit
    as the straight run."""
    job = start(tmp_path, ONE, env={"MTNLG_PAUSE_IN_SAVE": "0:24"})  # rank 0 stops inside step 24's save
    wait_for(lambda: (tmp_path / "checkpoints/.step-0000024.tmp/paused-0").exists(), job)
    kill9(job)
    assert latest(tmp_path) == "step-0000016" and not (tmp_path / "checkpoints/step-0000024").exists()
    corrupt(
        tmp_path / "checkpoints/step-0000016/rank-00000.pt",
        lambda s: s["fragments"]["blocks.0.mlp.fc1.weight"]["exp_avg"],
    )
    code, out = verify(tmp_path / "checkpoints", capsys)
    assert code == 1 and "--resume auto would continue from step-0000008" in out, out
    r = run(tmp_path, ONE, "--resume", "auto")
    assert "--resume auto: skipped step-0000016: rank-00000.pt is corrupt" in r.stdout, r.stdout
    assert "resumed from" in r.stdout and "step-0000008" in r.stdout
    assert not list((tmp_path / "checkpoints").glob(".step-*"))  # the half-written save was cleaned up
    assert_identical(straight_one, tmp_path)
    assert_curations_tokenizer(tmp_path)
    assert verify(tmp_path / "checkpoints", capsys)[0] == 0  # step 16 written again, sound


# make test: tests/test_slurm.py sends USR1 to a TP 2 x PP 2 x DP 2 job under Slurm: checkpoint, requeue, bitwise resume
@pytest.mark.slow
def test_sigusr1_checkpoints_exits_0_and_resumes(straight_one, tmp_path):
    job = start(tmp_path, ONE)
    wait_for(lambda: latest(tmp_path) == "step-0000008", job)
    in_flight = len(losses(tmp_path)) + 1
    os.kill(job.pid, signal.SIGUSR1)  # Slurm's warning before the time limit
    assert job.wait(timeout=60) == 0
    stopped = int(latest(tmp_path)[5:])
    assert 8 <= stopped <= in_flight + 1 and stopped < 24  # the step in flight (or the next), then out
    assert losses(tmp_path)[-1][0] == stopped
    assert json.loads((tmp_path / "summary.json").read_text())["stopped_by"] == "SIGUSR1"
    run(tmp_path, ONE, "--resume", "auto")
    assert_identical(straight_one, tmp_path)


@pytest.mark.slow  # make test: a one-process crash during a save resumes bitwise (test_crash_during_save_and_...)
def test_kill9_then_resume_is_bitwise_3d(straight_3d, tmp_path):
    job = start(tmp_path, THREE_D, "--nproc", "8")
    wait_for(lambda: latest(tmp_path) is not None, job)
    kill9(job)
    assert latest(tmp_path) < "step-0000008"
    run(tmp_path, THREE_D, "--nproc", "8", "--resume", "auto")
    assert_identical(straight_3d, tmp_path)


BF16 = {
    **COMMON,
    "schedule.train_iters": 4,
    "checkpoint.save_interval": 2,
    "schedule.micro_batch_size": 4,
    "model.seq_length": 32,
    "precision": "bf16",
    "parallel.pipeline_parallel": 2,
}


# make test resumes DeepSpeed's BF16_Optimizer (fp32 masters kept where ZeRO-1 does not keep them) bit for bit after a
# kill -9 in tests/test_deterministic.py (the engine, one process) and pipelines in test_slurm's preempted 3D job (fp32)
@pytest.mark.slow
def test_bf16_pipeline_resume_is_bitwise(tmp_path):
    """bf16, as the 530B trains: DeepSpeed's BF16_Optimizer keeps its fp32 masters elsewhere than the fp32 ZeRO
    optimizer. Two steps, stop, resume to four: every step's loss and the last checkpoint equal an uninterrupted run."""
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    run(straight, BF16, "--nproc", "2")
    run(stopped, {**BF16, "schedule.train_iters": 2}, "--nproc", "2")
    run(stopped, BF16, "--nproc", "2", "--resume", "auto")
    assert_identical(straight, stopped)
    assert len(losses(straight)) == 4


@pytest.mark.slow  # three 2-process runs (~1 min on 2 idle cores); test_engine checks the balanced partition's parity
def test_balanced_partition_checkpoint_resumes_uniform(tmp_path):
    """A checkpoint of PP 2 with `parallel.partition: balanced` (tiny: stage 0 holds the embedding and both blocks,
    stage 1 only the final LayerNorm and the output layer) is keyed by GPT names, not stage-local ones: resumed with the
    uniform partition (one block per stage) it continues like the uninterrupted balanced run, to fp32 rounding."""
    from mtnlg.checkpoint import Checkpoint, OPTIMIZER_STATES

    sets = {
        **COMMON,
        "schedule.train_iters": 4,
        "schedule.micro_batch_size": 4,
        "model.seq_length": 32,
        "parallel.pipeline_parallel": 2,
        "parallel.partition": "balanced",
    }
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    run(straight, sets, "--nproc", "2")
    run(stopped, {**sets, "schedule.train_iters": 2}, "--nproc", "2")
    run(stopped, {**sets, "parallel.partition": "uniform"}, "--nproc", "2", "--resume", "auto")
    want, got = losses(straight), losses(stopped)
    assert [s for s, *_ in got] == [1, 2, 3, 4] and got[:2] == want[:2]
    assert max(abs(a[1] - b[1]) for a, b in zip(want, got)) <= 1e-6
    a, b = Checkpoint(straight / "checkpoints"), Checkpoint(stopped / "checkpoints")
    assert a.names() == b.names()
    assert (
        max((a.full(n, w) - b.full(n, w)).abs().max().item() for n in a.names() for w in ("model",) + OPTIMIZER_STATES)
        <= 1e-6
    )


def logits(ckpt) -> torch.Tensor:
    from mtnlg.checkpoint import load_checkpoint

    model, _, cfg = load_checkpoint(ckpt)
    tokens = torch.randint(
        0, cfg.model.vocab_size, (2, cfg.model.seq_length), generator=torch.Generator().manual_seed(0)
    )
    with torch.no_grad():
        return model(tokens)


@pytest.mark.slow  # ~2 min (make test: `mtnlg reshard` into a full disk, below)
def test_reshard_round_trip(straight_3d, tmp_path):
    """TP2xPP2xDP2 -> TP1xPP1xDP1 (`mtnlg reshard`) -> TP2xPP1xDP4 with sequence parallelism (resharded on load,
    training on) -> one process again without it (resharded on load): the same logits, the same model and optimizer
    state, and the next steps' losses and weights of the original layout. (Sequence parallelism changes where
    activations live, never a weight's shape or slice: its checkpoints are every other run's.)"""
    from mtnlg.checkpoint import Checkpoint, OPTIMIZER_STATES

    src = straight_3d / "checkpoints/step-0000004"
    r = subprocess.run(
        [
            MTNLG,
            "reshard",
            str(src),
            str(tmp_path / "tp1"),
            "--set",
            "parallel.tensor_parallel=1",
            "--set",
            "parallel.pipeline_parallel=1",
            "--set",
            "parallel.data_parallel=1",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    a, b = Checkpoint(src), Checkpoint(tmp_path / "tp1")
    assert (b.layout.tp, b.layout.pp, b.layout.dp, len(b.meta["shards"]), b.step) == (1, 1, 1, 1, 4)
    assert b.meta["consumed_samples"] == a.meta["consumed_samples"] and b.optimizer_step == a.optimizer_step == 4
    for n in a.names():  # model and optimizer state moved exactly
        for what in ("model",) + OPTIMIZER_STATES:
            assert torch.equal(a.full(n, what), b.full(n, what)), (n, what)
    assert (logits(src) - logits(b.dir)).abs().max() <= 1e-6
    # continue on TP 2 x PP 1 x DP 4 from the TP1 checkpoint: the original layout's losses for steps 5-8, and its
    # weights
    run(
        tmp_path / "continued",
        {
            **THREE_D,
            "parallel.pipeline_parallel": 1,
            "parallel.data_parallel": 4,
            "checkpoint.save_interval": 2,
            "parallel.sequence_parallel": True,
            "schedule.micro_batch_size": 2,
            "checkpoint.resume": b.dir,
        },
        "--nproc",
        "8",
    )
    want, got = dict((s, l) for s, l, *_ in losses(straight_3d)), losses(tmp_path / "continued")
    assert [s for s, *_ in got] == [5, 6, 7, 8]
    assert max(abs(l - want[s]) for s, l, *_ in got) <= 1e-6
    # and back: the sequence-parallel run's step 6, resumed on one process without it
    run(
        tmp_path / "back",
        {
            **THREE_D,
            "parallel.tensor_parallel": 1,
            "parallel.pipeline_parallel": 1,
            "parallel.data_parallel": 1,
            "checkpoint.resume": tmp_path / "continued/checkpoints/step-0000006",
        },
    )
    assert [s for s, *_ in losses(tmp_path / "back")] == [7, 8]
    assert max(abs(l - want[s]) for s, l, *_ in losses(tmp_path / "back")) <= 1e-6
    final_a, final_c = Checkpoint(straight_3d / "checkpoints"), Checkpoint(tmp_path / "continued/checkpoints")
    assert (final_c.layout.tp, final_c.layout.pp, final_c.layout.dp, len(final_c.meta["shards"])) == (2, 1, 4, 8)
    assert (
        max(
            (final_a.full(n, w) - final_c.full(n, w)).abs().max().item()
            for n in final_a.names()
            for w in ("model",) + OPTIMIZER_STATES
        )
        <= 1e-6
    )
    assert (logits(straight_3d / "checkpoints") - logits(final_c.dir)).abs().max() <= 1e-5


def digest(d: Path) -> dict:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.iterdir())}


@pytest.mark.slow  # a TP 2 x PP 2 x DP 2 run to read; make test: the truncated shard below
def test_a_wrong_layout_with_resharding_off_is_one_line(straight_3d, tmp_path):
    "Wrong layout with resharding off: exit 2, one line naming the file and the fix, nothing written."
    src = straight_3d / "checkpoints/step-0000004"
    before = digest(src)
    same_model = {
        **ONE,
        "model.hidden_dropout": 0.0,
        "model.attention_dropout": 0.0,
    }  # as straight_3d's: only the layout differs
    r = subprocess.run(
        command(tmp_path / "a", {**same_model, "checkpoint.reshard": "false", "checkpoint.resume": src}),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "TP 2 x PP 2 x DP 2" in r.stderr and "checkpoint.reshard" in r.stderr and str(src) in r.stderr
    assert digest(src) == before and not (tmp_path / "a").exists()


def test_a_truncated_shard_is_one_line(straight_one, tmp_path):
    "A truncated shard: exit 2, one line naming the file and what is wrong with it."
    import shutil

    bad = tmp_path / "truncated"
    shutil.copytree(straight_one / "checkpoints/step-0000024", bad)
    (bad / "rank-00000.pt").write_bytes((bad / "rank-00000.pt").read_bytes()[:4096])
    r = subprocess.run(
        command(tmp_path / "b", {**ONE, "checkpoint.resume": bad}),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert f"{bad / 'rank-00000.pt'} is corrupt" in r.stderr and "its step, truncated," in r.stderr


def test_nonfinite_gradient_step_is_skipped_by_the_engine():
    "DeepSpeed's ZeRO-1 optimizer skips a step with an Inf gradient (weights untouched) and the backend reports it."
    from mtnlg.config import load_config
    from mtnlg.topology import Layout, init_distributed
    from mtnlg.engine import DeepSpeedBackend

    init_distributed(Layout(1, 1, 1))
    b = DeepSpeedBackend(load_config(ROOT / CONFIG), Layout(1, 1, 1), 8)
    batch = torch.randint(0, 2000, (8, 129), generator=torch.Generator().manual_seed(0))
    assert b.train_step(batch, 1e-3)[2] is False
    before = {n: p.detach().clone() for n, p in b.named_parameters().items()}
    hook = b.named_parameters()["embedding.tokens.weight"].register_hook(lambda g: g * float("inf"))
    loss, norm, skipped = b.train_step(batch, 1e-3)
    hook.remove()
    assert skipped and norm == float("inf") and b.engine.skipped_steps == 1
    assert all(torch.equal(p, before[n]) for n, p in b.named_parameters().items())
    assert b.train_step(batch, 1e-3)[2] is False  # and training goes on


# A full disk (chapter 43): a save that would not fit is refused before anything is written; one that fails midway is
# cleaned up; either way every rank raises CheckpointWriteError, `mtnlg` prints one line and exits 2, `latest` stands
SHORT = {**ONE, "schedule.train_iters": 8, "checkpoint.save_interval": 4}


def fails(run_dir, sets, *extra, env=None, preexec_fn=None) -> str:
    "Run `mtnlg train`, expecting exit 2 and one line on stderr; that line."
    r = subprocess.run(
        command(run_dir, sets, *extra),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **(env or {})},
        preexec_fn=preexec_fn,
    )
    assert r.returncode == 2 and r.stderr.count("\n") == 1, (r.returncode, r.stderr[-3000:])
    return r.stderr


def files_capped_at_1mb():
    """In the child, before exec: no file may grow past 1 MB — the write that crosses it fails (EFBIG), as on a full
    disk."""
    import resource

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1_000_000, 1_000_000))


def du(d: Path) -> int:
    return sum(f.stat().st_size for f in d.rglob("*") if f.is_file())


@pytest.mark.slow  # make test: the save's size check and the reshard into a full disk below
def test_full_disk_stops_training_with_one_line_then_resume_finishes(tmp_path):
    """A 15 MB disk: step 4's checkpoint (11 MB) fits, step 8's is refused before writing. Then, with the check passing,
    files capped at 1 MB make step 8's `torch.save` fail midway (torch: "unexpected pos"). Both: exit 2, one line,
    `latest` still step 4, no temporary left. With room, `--resume auto` finishes."""
    import re

    ckpts = tmp_path / "checkpoints"
    err = fails(tmp_path, SHORT, env={"MTNLG_DISK_BYTES_FOR_TEST": "15000000"})
    m = re.search(
        rf"not enough disk space to save step-0000008 in {re.escape(str(ckpts))}: needs ([\d.]+) MB, ([\d.]+) MB free",
        err,
    )
    assert m and "`latest` still names step-0000004" in err and "--resume auto" in err, err
    step4 = du(ckpts / "step-0000004")
    assert abs(float(m[1]) * 1e6 - step4) <= 0.02 * step4 and abs(float(m[2]) * 1e6 - (15e6 - du(ckpts))) <= 0.1e6
    assert latest(tmp_path) == "step-0000004" and sorted(p.name for p in ckpts.iterdir()) == ["latest", "step-0000004"]

    err = fails(tmp_path, SHORT, "--resume", "auto", preexec_fn=files_capped_at_1mb)
    assert f"writing step-0000008 to {ckpts} failed on rank 0 (RuntimeError: [enforce fail" in err, err
    assert "removed the partial .step-0000008.tmp, `latest` still names step-0000004" in err and " MB, " in err
    assert latest(tmp_path) == "step-0000004" and sorted(p.name for p in ckpts.iterdir()) == ["latest", "step-0000004"]

    r = run(tmp_path, SHORT, "--resume", "auto")
    assert "resumed from" in r.stdout and "step-0000004" in r.stdout
    assert latest(tmp_path) == "step-0000008" and [s for s, *_ in losses(tmp_path)] == list(range(1, 9))
    assert not list(ckpts.glob(".step-*"))


def test_reshard_into_a_full_disk_is_one_line_and_writes_nothing(straight_one, tmp_path, monkeypatch, capsys):
    import mtnlg.checkpoint
    from mtnlg.cli import main

    monkeypatch.setattr(mtnlg.checkpoint, "free_bytes", lambda path: 2_000_000)
    dst = tmp_path / "dst"
    assert main(["reshard", str(straight_one / "checkpoints"), str(dst)]) == 2
    err = [
        l for l in capsys.readouterr().err.splitlines() if l.startswith("mtnlg")
    ]  # (not the import warnings of a first import)
    assert len(err) == 1 and err[0].startswith(f"mtnlg: not enough disk space to save step-0000024 in {dst}: needs "), (
        err
    )
    err = err[0]
    assert "MB, 2.0 MB free; nothing was written, no earlier checkpoint is there" in err
    assert not dst.exists()


def tiny_shard():
    "The tiny model's shard on one process: its weights, and as ZeRO-1 pieces the fp32 master and both moments."
    from mtnlg.checkpoint import OPTIMIZER_STATES, make_shard
    from mtnlg.config import load_config
    from mtnlg.model import GPT
    from mtnlg.topology import Layout, init_distributed

    init_distributed(Layout(1, 1, 1))
    cfg = load_config(ROOT / CONFIG)
    params = dict(GPT(cfg.model).named_parameters())
    return make_shard(
        params, {n: {"start": 0, **{k: p for k in OPTIMIZER_STATES}} for n, p in params.items()}, 3, True
    ), cfg


@pytest.fixture
def saved_step_4(tmp_path):
    "A checkpoints root holding step 4 of the tiny model's shard, and a `save(step)` that saves it again."
    from mtnlg.checkpoint import save_checkpoint
    from mtnlg.topology import Layout

    shard, cfg = tiny_shard()
    root = tmp_path / "checkpoints"
    save = lambda step: save_checkpoint(
        root, step, shard, cfg, Layout(1, 1, 1), CURATED / "tokenizer.json", {"consumed_samples": 0}
    )
    save(4)
    return root, save, shard


def assert_only_step_4(root: Path, before: dict):
    assert (root / "latest").read_text() == "step-0000004\n" and sorted(p.name for p in root.iterdir()) == [
        "latest",
        "step-0000004",
    ]
    assert digest(root / "step-0000004") == before


def test_save_estimates_its_size_and_refuses_what_does_not_fit(saved_step_4, monkeypatch):
    import mtnlg.checkpoint
    from mtnlg.checkpoint import CheckpointWriteError, shard_bytes

    root, save, shard = saved_step_4
    real = (root / "step-0000004/rank-00000.pt").stat().st_size
    assert real <= shard_bytes(shard) <= 1.02 * real  # the estimate: a little over the file torch.save writes
    before = digest(root / "step-0000004")
    monkeypatch.setattr(mtnlg.checkpoint, "free_bytes", lambda path: 4_000_000)
    with pytest.raises(
        CheckpointWriteError,
        match=rf"save step-0000008 in {root}: needs 11.1 MB, 4.0 MB free; nothing was "
        r"written, `latest` still names step-0000004\. Free space there or save elsewhere",
    ):
        save(8)
    assert_only_step_4(root, before)


def test_save_failing_midway_leaves_the_previous_checkpoint(saved_step_4, monkeypatch):
    """The shard's write fails after part of it is on disk; or rank 0 fails after renaming the directory over the same
    step (a resumed run saving again where it resumed): nothing of the new save is left, the old step is back intact."""
    import mtnlg.checkpoint
    from mtnlg.checkpoint import CheckpointWriteError

    root, save, _ = saved_step_4
    before = digest(root / "step-0000004")

    def disk_fills(obj, f):  # f: the shard's file, which the save streams through a HashingWriter
        f.write(b"\0" * 100_000)
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 10431509440 vs 10431509336")

    with monkeypatch.context() as m:
        m.setattr(torch, "save", disk_fills)
        with pytest.raises(
            CheckpointWriteError,
            match=r"writing step-0000008 to .* failed on rank 0 \(RuntimeError: \[enforce "
            r"fail at inline_container.cc:672\] . unexpected pos 10431509440 vs 10431509336\); removed the "
            r"partial .step-0000008.tmp, `latest` still names step-0000004",
        ):
            save(8)
    assert_only_step_4(root, before)
    fsync = mtnlg.checkpoint._fsync

    def fsync_fails_on_root(p):
        if Path(p) == root:
            raise OSError(5, "Input/output error")
        fsync(p)

    monkeypatch.setattr(mtnlg.checkpoint, "_fsync", fsync_fails_on_root)
    with pytest.raises(
        CheckpointWriteError,
        match=r"writing step-0000004 .* failed on rank 0 \(OSError: \[Errno 5\] Input/output error\)",
    ):
        save(4)
    assert_only_step_4(root, before)


# -- checkpoints that know their own bytes (chapter 43): a flipped bit is an error, not a silently different model -----
def corrupt(path: Path, pick):
    """Flip one bit in the middle of the tensor `pick(shard)` inside shard file `path` — at the copy of its bytes whose
    flip changes that tensor (fp32 master weights equal the weights): the file still loads, one number different."""
    want = pick(torch.load(path, weights_only=True)).clone()
    raw, size, at = path.read_bytes(), want.numel() * want.element_size(), -1
    while (at := raw.find(want.numpy().tobytes(), at + 1)) >= 0:
        b = bytearray(raw)
        b[at + size // 2] ^= 1 << 4
        path.write_bytes(bytes(b))
        if int((pick(torch.load(path, weights_only=True)) != want).sum()) == 1:
            return
    path.write_bytes(raw)
    raise AssertionError(f"the tensor's bytes are not in {path}")


def flip_digit(path: Path, key: str):
    "Flip the lowest bit of the first digit of `key`'s value in a JSON file (9 <-> 8, 1 <-> 0, ...): still valid JSON."
    raw = bytearray(path.read_bytes())
    at = raw.index(f'"{key}": '.encode()) + len(key) + 4
    raw[at] ^= 1
    path.write_bytes(bytes(raw))
    json.loads(path.read_text())


def verify(d, capsys) -> tuple[int, str]:
    """`mtnlg checkpoint verify d` through `mtnlg.cli.main` in this process (a process of its own costs ~9 CPU s of
    imports): its exit status and what it printed."""
    from mtnlg.cli import main

    code = main(["checkpoint", "verify", str(d)])
    return code, capsys.readouterr().out


# make test: chapter 43 catches the same four in `load_checkpoint`; the two tests below, `verify` (exit 1) and a named
# `--resume` (exit 2, one line) from the command line
@pytest.mark.slow
def test_flipped_bits_and_swapped_shards_are_caught(straight_one, tmp_path, capsys):
    """One flipped bit in a weight, in an Adam moment, in meta.json; a shard swapped for another step's: each loads
    silently without checksums (asserted: the tensor just differs), and each is now a one-line error naming the file and
    its step — from `mtnlg checkpoint verify` (exit 1), from `--resume DIR` (exit 2), from `load_checkpoint`."""
    import shutil
    from mtnlg.checkpoint import CheckpointCorruptError, load_checkpoint

    src = straight_one / "checkpoints/step-0000024"
    cases = {
        "weight": lambda d: corrupt(d / "rank-00000.pt", lambda s: s["model"]["blocks.1.attn.qkv.weight"]),
        "moment": lambda d: corrupt(
            d / "rank-00000.pt", lambda s: s["fragments"]["blocks.0.mlp.fc2.weight"]["exp_avg_sq"]
        ),
        "meta": lambda d: flip_digit(d / "meta.json", "consumed_samples"),
        "swapped": lambda d: shutil.copyfile(
            straight_one / "checkpoints/step-0000016/rank-00000.pt", d / "rank-00000.pt"
        ),
    }
    for name, damage in cases.items():
        d = tmp_path / name / "step-0000024"
        shutil.copytree(src, d)
        damage(d)
        bad = "meta.json" if name == "meta" else "rank-00000.pt"
        code, out = verify(d.parent, capsys)
        assert code == 1 and f"step-0000024  FAILED  {bad} is corrupt" in out, (name, out)
        with pytest.raises(
            CheckpointCorruptError, match=rf"{d / bad} is corrupt .* its step, step-0000024, cannot be trusted"
        ):
            load_checkpoint(d)
        r = subprocess.run(
            command(tmp_path / f"resume-{name}", {**ONE, "checkpoint.resume": d}),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and f"{d / bad} is corrupt" in r.stderr, (
            name,
            r.stderr[-2000:],
        )
    assert verify(src.parent, capsys)[0] == 0


@pytest.mark.slow  # make test: --resume auto steps over a corrupt step (test_crash_during_save_and_a_corrupt_...);
# a truncated shard is one line (test_a_truncated_shard_is_one_line)
def test_resume_auto_steps_over_a_truncated_shard(straight_one, tmp_path):
    """Step 24's shard cut short, so `torch.load` cannot read it: the checksums are checked while the model is built,
    and the unreadable file is reported by its checksum, like a flipped bit — `--resume auto` says it skipped step 24 as
    corrupt and resumes from 16; a named `--resume` is refused with one line, exit 2."""
    import shutil

    shutil.copytree(straight_one / "checkpoints", tmp_path / "checkpoints")
    shutil.copyfile(straight_one / "metrics.jsonl", tmp_path / "metrics.jsonl")
    shard = tmp_path / "checkpoints/step-0000024/rank-00000.pt"
    cut = shard.read_bytes()[: shard.stat().st_size // 2]
    shard.write_bytes(cut)
    r = run(tmp_path, ONE, "--resume", "auto")
    assert "--resume auto: skipped step-0000024: rank-00000.pt is corrupt (its xxh3_64 is" in r.stdout, r.stdout
    assert "resumed from" in r.stdout and "step-0000016" in r.stdout
    assert_identical(straight_one, tmp_path)
    bad = tmp_path / "bad/step-0000024"
    shutil.copytree(straight_one / "checkpoints/step-0000024", bad)
    (bad / "rank-00000.pt").write_bytes(cut)  # (the resume above saved step 24 again, sound)
    r = subprocess.run(
        command(tmp_path / "named-bad", {**ONE, "checkpoint.resume": bad}),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and f"{bad / 'rank-00000.pt'} is corrupt" in r.stderr, (
        r.stderr[-2000:]
    )


# -- one error, one exit code, from any number of processes (chapter 10's run_ranks) -----------------------------------
def test_nproc_8_missing_data_is_one_line_exit_2(tmp_path):
    r = subprocess.run(
        command(
            tmp_path,
            {**THREE_D, "data.curated": tmp_path / "nothing-here", "data.train_files": "[]", "data.valid_files": "[]"},
            "--nproc",
            "8",
        ),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 2 and r.stderr.count("\n") == 1, (r.returncode, r.stderr)
    assert r.stderr.startswith("mtnlg: data.curated:") and "not found" in r.stderr


@pytest.mark.slow  # make test: test_rank_errors' 2-rank faults and the truncated shard above
def test_nproc_8_corrupt_shard_is_one_line_exit_2(straight_3d, tmp_path):
    """Rank 5's shard of a TP 2 x PP 2 x DP 2 checkpoint has a flipped bit: the launcher's checks pass (they read no
    shard), the eight ranks share the hashing and all refuse; the job prints the error once and exits 2."""
    import shutil

    d = tmp_path / "step-0000004"
    shutil.copytree(straight_3d / "checkpoints/step-0000004", d)
    pick = lambda s: s["fragments"][next(iter(s["fragments"]))]["exp_avg"]
    corrupt(d / "rank-00005.pt", pick)
    r = subprocess.run(
        command(tmp_path / "run", {**THREE_D, "checkpoint.resume": d}, "--nproc", "8"),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 2 and r.stderr.count("\n") == 1, (r.returncode, r.stderr[-3000:])
    assert r.stderr.startswith(f"mtnlg: {d / 'rank-00005.pt'} is corrupt") and "step-0000004" in r.stderr
