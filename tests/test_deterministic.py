"""`deterministic: true` (chapter 10): two identical runs, and a run killed with `kill -9` and resumed, end with the
same bits — weights, fp32 masters, Adam's moments and every random stream (torch, numpy, Python, the tensor-parallel
one) — on the path a GPU user gets by default: the DeepSpeed engine in one process, bf16, dropout on. Shown on the CPU
(where runs are bitwise repeatable without the switch too); `bench/gpu.py` runs the same comparison on a GPU."""

import json
from pathlib import Path
import torch
import pytest
from test_checkpoint import CURATED, run, start, wait_for, kill9, latest, losses

STEPS = {
    "schedule.train_iters": 12,
    "checkpoint.save_interval": 4,
    "checkpoint.keep_last": 10,
    "schedule.log_interval": 1,
    "schedule.eval_interval": 1000,
    "schedule.eval_iters": 1,
    "model.hidden_dropout": 0.1,
    "model.attention_dropout": 0.1,
    "precision": "bf16",
    "deterministic": "true",
    "data.curated": CURATED,
    "data.train_files": "[]",
    "data.valid_files": "[]",
}
ENGINE = ("--backend", "deepspeed")


def equal(a, b, where="") -> bool:
    "Deep equality of checkpoint contents: tensors bit for bit (torch.equal), everything else by ==."
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(equal, a, b))
    return a == b


def shards(step_dir: Path) -> dict:
    return {p.name: torch.load(p, weights_only=True) for p in sorted(step_dir.glob("rank-*.pt"))}


def assert_same_bits(a: Path, b: Path):
    "Every tensor and random state of every shard, and the trainer state, equal; named by what differs if not."
    sa, sb = shards(a), shards(b)
    assert sa.keys() == sb.keys() and sa
    for f in sa:
        for part in ("model", "fragments", "optimizer_step", "rng"):
            assert equal(sa[f][part], sb[f][part]), f"{a.name}/{f}: {part} differs"
        for stream in ("torch", "numpy", "python", "tracked"):
            assert stream in sa[f]["rng"], stream
    ma, mb = (json.loads((d / "meta.json").read_text()) for d in (a, b))
    assert {k: ma[k] for k in ("step", "consumed_samples", "tokens", "loss_window")} == {
        k: mb[k] for k in ("step", "consumed_samples", "tokens", "loss_window")
    }


@pytest.mark.slow  # make test: test_checkpoint's crash during a save resumes bitwise
def test_two_runs_and_a_kill9_resume_are_bitwise_equal(tmp_path):
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    run(straight, STEPS, *ENGINE)
    job = start(killed, STEPS, *ENGINE, env={"MTNLG_PAUSE_IN_SAVE": "0:8"})  # a second run, frozen inside step 8's save
    wait_for(lambda: (killed / "checkpoints/.step-0000008.tmp/paused-0").exists(), job)
    kill9(job)
    assert latest(killed) == "step-0000004"
    assert_same_bits(straight / "checkpoints/step-0000004", killed / "checkpoints/step-0000004")  # two runs
    run(killed, STEPS, *ENGINE, "--resume", "auto")
    assert losses(killed) == losses(straight) and len(losses(straight)) == 12
    for step in ("step-0000008", "step-0000012"):  # kill -9 + resume
        assert_same_bits(straight / "checkpoints" / step, killed / "checkpoints" / step)
