"The performance model (chapter 50): the paper's rows, memory, the planner and `mtnlg plan` as a user runs it."
import subprocess, sys
from dataclasses import replace
from pathlib import Path
import pytest
from mtnlg.config import load_config, count_parameters
from mtnlg.topology import Layout
from mtnlg.perf import (Assumptions, GiB, Setup, PAPER_ROWS, flops_per_iteration, memory_per_gpu, narayanan_flops,
                        paper_predictions, plan, predict, stage_params_per_rank)

ROOT = Path(__file__).resolve().parent.parent
MTNLG = str(Path(sys.executable).parent / "mtnlg")
CFG = load_config(ROOT / "scaled_configs/mtnlg-530b.yaml")

def run(*args):
    return subprocess.run([MTNLG, *args], cwd=ROOT, capture_output=True, text=True, timeout=120)

def test_paper_flops_formula_gives_the_reported_tflops():
    m = CFG.model
    F = narayanan_flops(1920, m.seq_length, m.num_layers, m.hidden_size, m.padded_vocab_size(8))
    assert flops_per_iteration(m, 1920, "full", 8) == pytest.approx(F, rel=1e-9)
    for nodes, _, seconds, tflops in PAPER_ROWS:
        assert abs(F / (nodes * 8 * seconds) / 1e12 - tflops) <= 1

def test_three_paper_rows_within_5_percent_with_one_parameter_set():
    rows = paper_predictions(CFG)
    assert [r["gpus"] for r in rows] == [2240, 2800, 3360]
    for r in rows: assert abs(r["error"]) <= 0.05, r
    # the trend is the paper's: each added replica costs per-GPU throughput
    assert rows[0]["predicted_tflops"] > rows[1]["predicted_tflops"] > rows[2]["predicted_tflops"]
    # and the fit is not slack: 10% less efficiency breaks it
    worse = paper_predictions(CFG, replace(Assumptions(), matmul_efficiency=0.9 * Assumptions().matmul_efficiency))
    assert max(r["error"] for r in worse) > 0.05

def test_per_gpu_parameters_add_up_to_count_parameters():
    for name in ("tiny", "gpt-125m", "mtnlg-530b"):
        c = load_config(ROOT / f"scaled_configs/{name}.yaml")
        m, t = c.model, 1
        assert sum(stage_params_per_rank(m, t, 1, i) for i in range(1)) == count_parameters(m, t)
    m, h, V = CFG.model, CFG.model.hidden_size, CFG.model.padded_vocab_size(8)
    per_gpu = 8 * sum(stage_params_per_rank(m, 8, 35, i) for i in range(35))
    replicated = 7 * (105 * 6 * h + m.seq_length * h + 2 * h) + V * h
    assert per_gpu - replicated == count_parameters(m, 8)

def test_memory_full_recompute_fits_and_none_does_not():
    full = memory_per_gpu(CFG.model, Setup(Layout(8, 35, 8), 1, "full"), 1920)
    none = memory_per_gpu(CFG.model, Setup(Layout(8, 35, 8), 1, "none"), 1920)
    assert 25 * GiB < full["total"] < 35 * GiB < 100 * GiB < none["total"]
    assert full["stage"] == 0                      # stage 0 holds 35 micro-batches in flight
    assert none["activations"] == pytest.approx(35 * 3 * 2048 * 20480 * (10 + 24 / 8 + 5 * 128 * 2048 / (20480 * 8)))
    # ZeRO-1: optimizer states shrink with DP, weights and gradients do not
    dp16 = memory_per_gpu(CFG.model, Setup(Layout(8, 35, 16), 1, "full"), 1920)
    assert dp16["optimizer"] == pytest.approx(full["optimizer"] / 2) and dp16["weights"] == full["weights"]

def test_predict_refuses_impossible_layouts():
    with pytest.raises(ValueError, match="global batch 1920 is not divisible by micro-batch x DP = 1 x 7"):
        predict(CFG.model, Setup(Layout(8, 35, 7)), 1920)
    with pytest.raises(ValueError, match="TP 16 > 8 GPUs per node"):
        predict(CFG.model, Setup(Layout(16, 35, 4)), 1920)

def test_plan_2240_a100_has_the_paper_layout_in_the_top_three():
    feasible, infeasible = plan(CFG, 2240)
    assert (8, 35) in [(p.layout.tp, p.layout.pp) for p in feasible[:3]]
    assert all(p.fits and p.memory["total"] <= 80 * GiB for p in feasible)
    assert [p.iteration_s for p in feasible] == sorted(p.iteration_s for p in feasible)
    reasons = {r for _, rs, _ in infeasible for r in rs}
    assert "does not fit: 103.5 GiB > 80 GiB" in reasons

def test_h200_fits_what_a100_does_not():
    L = Setup(Layout(8, 35, 8), 1, "none")
    assert not predict(CFG.model, L, 1920, "a100-80gb").fits
    h200 = predict(CFG.model, L, 1920, "h200")
    assert h200.fits and h200.iteration_s < predict(CFG.model, L, 1920, "a100-80gb").iteration_s / 2.5

def test_cli_plan_ranks_layouts():
    r = run("plan", "--config", "scaled_configs/mtnlg-530b.yaml", "--gpus", "2240", "--top", "3")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("mtnlg-530b on 2240 x A100 80GB (280 nodes of 8)")
    top = [l.split()[1:3] for l in lines[2:5]]
    assert ["8", "35"] in top, r.stdout
    assert "does not fit: 103.5 GiB > 80 GiB" in r.stdout and "GPUs per node" in r.stdout

@pytest.mark.parametrize("args, message", [
    (["--config", "scaled_configs/mtnlg-530b.yaml", "--gpus", "2240", "--tp", "16", "--pp", "35"], "TP 16 > 8 GPUs per node"),
    (["--config", "scaled_configs/mtnlg-530b.yaml", "--gpus", "2241"], "2241 GPUs is not a whole number of 8-GPU nodes"),
    (["--config", "scaled_configs/mtnlg-530b.yaml", "--gpus", "2240", "--tp", "8", "--pp", "3"], "TP 8 x PP 3 = 24 GPUs does not divide 2240 GPUs"),
    (["--config", "scaled_configs/tiny.yaml", "--gpus", "4", "--tp", "1", "--pp", "4"], "PP 4 > 2 layers"),
    (["--config", "scaled_configs/tiny.yaml", "--gpus", "3", "--tp", "1", "--pp", "1"], "global batch 16 is not divisible by micro-batch x DP"),
])
def test_cli_plan_bad_layouts_are_one_line(args, message):
    r = run("plan", *args)
    assert r.returncode == 2 and "Traceback" not in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert message in r.stderr, r.stderr

def test_cli_plan_nothing_fits_exits_1():
    r = run("plan", "--config", "scaled_configs/mtnlg-530b.yaml", "--gpus", "2240", "--tp", "8", "--pp", "35",
            "--recompute", "none")
    assert r.returncode == 1 and "(no layout fits)" in r.stdout and "does not fit: 103.5 GiB > 80 GiB" in r.stdout
