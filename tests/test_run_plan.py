"""The run planned to its end (chapter 55): steps are chapter 40's schedule, days are chapter 51's predictions summed
(checked a second way), checkpoint bytes are what chapter 43 really writes (counted in real checkpoints, one process
and TP 2 x PP 2 x DP 2 in bf16), the save interval is the argmin of the overhead, the 530B config uses it, and
`mtnlg plan --schedule` prints the function's numbers and refuses bad input in one line."""

import glob
import math
import subprocess
import sys
from collections import Counter
from pathlib import Path
import pytest
from mtnlg.cli import main
from mtnlg.config import load_config, count_parameters
from mtnlg.counting import Setup
from mtnlg.iteration_time import predict
from mtnlg.schedules import iterations
from mtnlg.run_plan import (
    run_plan,
    format_run_plan,
    checkpoint_size,
    saved_params_per_rank,
    step_seconds,
    overhead_fraction,
    young_interval,
    daly_interval,
    round_interval,
    job_mtbf_hours,
    GPU_MTBF_HOURS,
)

ROOT = Path(__file__).resolve().parent.parent
MTNLG = str(Path(sys.executable).parent / "mtnlg")
C530 = ROOT / "scaled_configs/mtnlg-530b.yaml"
CURATED = ROOT / "tests/fixtures/curated"


@pytest.fixture(scope="module")
def cfg():
    return load_config(C530)


@pytest.fixture(scope="module")
def plan(cfg):
    return run_plan(cfg)


@pytest.mark.parametrize("name", ["mtnlg-530b", "tiny", "tiny-3d"])
def test_steps_are_the_schedule(name):
    c = load_config(ROOT / f"scaled_configs/{name}.yaml")
    p = run_plan(c)
    assert p.steps == len(iterations(c))
    assert (
        sum(p.steps_by_batch.values()) == p.steps
        and p.full_batch_steps == p.steps_by_batch[c.schedule.global_batch_size]
    )


def test_530b_steps_and_step_time(cfg, plan):
    assert plan.steps == 80_087 and plan.full_batch_steps == 65_612 and plan.batch_sizes == 60
    assert (
        1.03 < plan.step_s / 60.1 < 1.09
    )  # the paper's 280-node row; our engine's accumulation costs ~6% (chapter 51)
    assert plan.fits


def test_steps_too_small_to_fill_the_pipeline_are_the_1f1b_line(cfg):
    """Below the fill point (batch 280 = PP 35 x DP 8) the ramp's steps extend predict's line; predict is that line
    above it."""
    L = Setup.of(cfg, "full")
    t = lambda b: predict(cfg.model, L, b, "a100-80gb", cfg.precision).iteration_s
    slope = (t(288) - t(280)) / 8
    for b in (296, 640, 1920):
        assert math.isclose(t(b), t(280) + slope * (b - 280), rel_tol=1e-9)
    for b in (32, 160, 272):
        assert math.isclose(step_seconds(cfg, L, b), t(280) + slope * (b - 280), rel_tol=1e-9)
    assert step_seconds(cfg, L, 32) > 0
    with pytest.raises(ValueError, match="cannot fill"):
        predict(cfg.model, L, 32, "a100-80gb", cfg.precision)


def test_days_a_second_way(cfg, plan):
    "The sum over 80k steps, as steps per batch size times that size's prediction, and within bounds needing no model."
    L, B = Setup.of(cfg, "full"), cfg.schedule.global_batch_size
    counts = Counter(b for _, b in iterations(cfg))
    total = sum(n * step_seconds(cfg, L, b) for b, n in counts.items())
    assert math.isclose(plan.train_s, total, rel_tol=1e-9)
    samples = sum(b for _, b in iterations(cfg))
    assert samples / B * plan.step_s < plan.train_s < plan.steps * plan.step_s  # t(b) >= t(B) b/B, t(b) <= t(B)
    assert 51.0 < plan.train_s / 86400 < 52.0


def test_checkpoint_bytes_by_hand_tiny_3d():
    c = load_config(ROOT / "scaled_configs/tiny-3d.yaml")  # TP 2 x PP 2 x DP 2, h 128, 2 layers, fp32
    layer = (3 * 128 * 128 + 3 * 128 + 128 * 128 + 128 * 512 + 512 + 512 * 128) // 2 + 6 * 128
    first = layer + 2048 * 128 // 2 + 128 * 128  # + half the word embedding, the positions
    last = layer + 2 * 128  # + final LayerNorm (the tied copy is not saved)
    assert [saved_params_per_rank(c.model, 2, 2, s) for s in (0, 1)] == [first, last] == [246_976, 99_776]
    ck = checkpoint_size(c)
    assert ck.weights == 2 * (first + last) * 4 and ck.optimizer == 2 * (first + last) * 12
    assert ck.total == 11_096_064 and ck.largest_stage == 0 and ck.largest_rank == first * 4 + first * 12 / 2


def test_checkpoint_bytes_530b(cfg, plan):
    ck = plan.checkpoint
    n = count_parameters(cfg.model, 8)
    assert n * 14 < ck.total < n * 14 * 1.001  # bf16 weights + 12 bytes of optimizer state
    assert 7.41e12 < ck.total < 7.43e12 and 7.20e9 < ck.largest_rank < 7.22e9 and ck.largest_stage == 0


def _tensor_bytes(run_dir):
    "(weights, optimizer state, [bytes per rank], weight dtypes) of the tensors in a run's last checkpoint."
    import torch
    from mtnlg.checkpoint import OPTIMIZER_STATES

    weights = optimizer = 0
    per_rank, dtypes = [], set()
    for f in sorted(glob.glob(str(Path(run_dir) / "checkpoints/step-*/rank-*.pt"))):
        s = torch.load(f, weights_only=True)
        w = sum(t.numel() * t.element_size() for t in s["model"].values())
        o = sum(fr[k].numel() * fr[k].element_size() for fr in s["fragments"].values() for k in OPTIMIZER_STATES)
        weights, optimizer = weights + w, optimizer + o
        per_rank.append(w + o)
        dtypes |= {str(t.dtype) for t in s["model"].values()}
    return weights, optimizer, per_rank, dtypes


def _train(run_dir, *sets, nproc=None):
    cmd = [
        MTNLG,
        "train",
        "--config",
        "scaled_configs/tiny.yaml",
        "--run-dir",
        str(run_dir),
        "--no-progress",
        *(["--nproc", str(nproc)] if nproc else []),
    ]
    for kv in (
        "schedule.train_iters=1",
        "schedule.eval_iters=1",
        f"data.curated={CURATED}",
        "data.train_files=[]",
        "data.valid_files=[]",
        *sets,
    ):
        cmd += ["--set", kv]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return load_config(next(Path(run_dir).glob("checkpoints/step-*/config.yaml")))


def test_checkpoint_bytes_equal_a_real_checkpoint_one_process(tmp_path):
    c = _train(tmp_path)
    weights, optimizer, per_rank, dtypes = _tensor_bytes(tmp_path)
    ck = checkpoint_size(c)
    assert (
        (weights, optimizer)
        == (ck.weights, ck.optimizer)
        == (count_parameters(c.model) * 4, count_parameters(c.model) * 12)
    )
    assert per_rank == [ck.largest_rank] and dtypes == {"torch.float32"}


@pytest.mark.slow
def test_checkpoint_bytes_equal_a_real_checkpoint_3d_bf16(tmp_path):
    "TP 2 x PP 2 x DP 2 in bf16: bf16 weights from data-parallel rank 0 only, no tied copy, fp32 state from every rank."
    c = _train(
        tmp_path,
        "parallel.tensor_parallel=2",
        "parallel.pipeline_parallel=2",
        "parallel.data_parallel=2",
        "schedule.micro_batch_size=4",
        "precision=bf16",
        nproc=8,
    )
    weights, optimizer, per_rank, dtypes = _tensor_bytes(tmp_path)
    ck = checkpoint_size(c)
    assert (weights, optimizer) == (ck.weights, ck.optimizer) and dtypes == {"torch.bfloat16"}
    assert max(per_rank) == per_rank[0] == ck.largest_rank  # stage 0, data-parallel rank 0


def test_young_daly_is_the_argmin_of_the_overhead(plan):
    d, M, R = plan.save_s, plan.mtbf_s, plan.restart_s
    tau = young_interval(d, M)
    grid = [tau * (0.2 + i / 20000) for i in range(100_001)]  # 0.2 tau .. 5.2 tau, steps of 0.005%
    best = min(grid, key=lambda x: overhead_fraction(x, d, M, R))
    assert abs(best / tau - 1) < 0.01
    assert abs(daly_interval(d, M) / tau - 1) < 0.02  # Daly's higher order barely moves it here
    assert plan.interval_steps == round_interval(tau / plan.step_s) == 40


def test_defaults_are_the_cited_rates(cfg, plan):
    assert math.isclose(GPU_MTBF_HOURS, 54 * 24 * 16384 / 419)  # Llama 3, sec. 3.3.4
    assert math.isclose(plan.mtbf_s / 3600, job_mtbf_hours(2240)) and 22 < plan.mtbf_s / 3600 < 23
    assert math.isclose(plan.fs_gbps, 2500 / 27648 * 2240)  # Summit's Alpine, per GPU, x 2240
    assert math.isclose(plan.save_s, plan.checkpoint.total / (plan.fs_gbps * 1e9))


def test_the_530b_config_saves_at_the_planned_interval(cfg, plan):
    assert cfg.checkpoint.save_interval == plan.interval_steps
    assert "Young/Daly interval from `mtnlg plan --schedule`, chapter 55" in C530.read_text()


def test_allocations(plan):
    usable = 48 * 3600 - 600 - plan.load_s - max(plan.save_s, 600)
    assert math.isclose(plan.usable_s, usable)
    work = plan.train_s * (1 + plan.save_s / (plan.interval_steps * plan.step_s))
    assert plan.allocations == math.ceil(work / usable) == 27
    assert run_plan(load_config(C530), time_limit_hours=24).allocations == math.ceil(work / (usable - 24 * 3600))


def test_cli_prints_the_functions_numbers(capsys, plan):
    assert main(["plan", "--config", str(C530), "--schedule"]) == 0
    out = capsys.readouterr().out
    assert out.strip() == format_run_plan(plan)
    for frag in (
        f"{plan.steps:,} to 270B tokens",
        f"{plan.step_s:.1f} s at batch 1920",
        f"{plan.train_s / 86400:.1f} days of steps",
        f"{plan.checkpoint.total / 1e12:.2f} TB",
        f"largest rank {plan.checkpoint.largest_rank / 1e9:.2f} GB",
        f"{plan.save_s:.1f} s each at {plan.fs_gbps:.0f} GB/s",
        f"{plan.allocations} of 48 h",
        f"one per {plan.mtbf_s / 3600:.1f} h",
        f"every {plan.interval_steps} steps",
    ):
        assert frag in out, frag


def test_cli_options_change_the_plan(capsys):
    assert (
        main(
            [
                "plan",
                "--config",
                str(C530),
                "--schedule",
                "--gpus",
                "2240",
                "--time-limit-hours",
                "24",
                "--fs-gbps",
                "1000",
                "--mtbf-hours",
                "10",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    q = run_plan(load_config(C530), time_limit_hours=24, fs_gbps=1000, mtbf_hours=10)
    assert out.strip() == format_run_plan(q)
    assert (
        f"{q.allocations} of 24 h" in out and "one per 10.0 h (--mtbf-hours)" in out and "1,000 GB/s (--fs-gbps)" in out
    )
    assert q.interval_steps == round_interval(math.sqrt(2 * q.save_s * 36000) / q.step_s)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--time-limit-hours", "-1"], "--time-limit-hours must be > 0, got -1"),
        (["--fs-gbps", "0"], "--fs-gbps must be > 0, got 0"),
        (["--mtbf-hours", "0"], "--mtbf-hours must be > 0, got 0"),
        (["--startup-minutes", "-5"], "--startup-minutes must be >= 0, got -5"),
        (["--time-limit-hours", "0.2"], "leaves no time to train"),
        (["--gpus", "2800"], "--schedule plans the config's own layout (2240 GPUs), not --gpus 2800"),
    ],
)
def test_cli_bad_input_is_one_line(capsys, args, message):
    assert main(["plan", "--config", str(C530), "--schedule", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_ranking_still_needs_gpus(capsys):
    assert main(["plan", "--config", str(C530)]) == 2
    assert "--gpus is required to rank layouts" in capsys.readouterr().err


def test_command_as_a_user_types_it():
    r = subprocess.run(
        [MTNLG, "plan", "--config", "scaled_configs/mtnlg-530b.yaml", "--schedule"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert "every 40 steps: Young/Daly" in r.stdout and "7.42 TB" in r.stdout
