"""bench/gpu.py, the one-command GPU benchmark, run as its --dry-run on this CPU: the same code at the tiny shape, a
subset of its rows (the default path, the engine, the one-process loop — the default's own configuration here —, a row a
CPU skips, the Hugging Face anchor), and in `make test-full` the determinism group: two runs, a kill -9 and resume, two
runs without the switch (`make test` proves the same on the engine in tests/test_deterministic.py). On a GPU the same
rows are `mtnlg train` of gpt-1.3b and the comparison is of gpt-125m."""

import json
import math
import subprocess
import sys
from pathlib import Path
import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))


ROWS = "default,engine,single,kernels=triton,hf-eager,profile,fused_adamw,liger"


def bench_dry_run(tmp_path_factory, only: str):
    out = tmp_path_factory.mktemp("gpu") / "gpu.json"
    before = sorted((ROOT / "bench" / "results").iterdir())
    r = subprocess.run(
        [sys.executable, "bench/gpu.py", "--dry-run", "--only", only, "--det-steps", "4", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert sorted((ROOT / "bench" / "results").iterdir()) == before  # only --save writes bench/results
    return json.loads(out.read_text()), r.stdout


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    "The rows alone: `make test` (test_deterministic.py runs the determinism comparison on the engine itself)."
    return bench_dry_run(tmp_path_factory, ROWS)


@pytest.fixture(scope="module")
def dry_run_determinism(tmp_path_factory):
    "The determinism group alone (five `mtnlg train` runs, ~40 s on 2 idle cores): `make test-full`."
    return bench_dry_run(tmp_path_factory, "determinism")


@pytest.mark.slow  # ~1 min of CPU runs; make test: the comparison and the refusal below
def test_dry_run_measures_every_row_it_was_asked_for(dry_run):
    d, stdout = dry_run
    rows = {r["name"]: r for r in d["rows"]}
    assert list(rows) == [
        "default",
        "engine",
        "single",
        "kernels=triton",
        "hf-eager",
        "profile",
        "fused_adamw",
        "liger",
    ]
    assert d["dry_run"] and d["device"] == "cpu" and d["config"] == "scaled_configs/tiny.yaml" and d["steps"] == 7
    assert "shared" in d["hardware"]["shared_machine"] and d["hardware"]["torch"] == torch.__version__
    for name in ("default", "engine", "single", "hf-eager", "fused_adamw"):
        r = rows[name]
        t = r["tokens_per_s"]
        assert t["runs"] == 5 and 0 < t["min"] <= t["median"] <= t["max"], name  # steps 3-7 of 7
        assert r["mfu"] is None and r["hfu"] is None and r["max_allocated_gib"] is None, (
            name
        )  # no peak, no CUDA memory on a CPU
        assert r["micro_batch"] == 8 and r["global_batch"] == 8 and r["seq"] == 128 and r["batch_sizes"] == [8], name
        assert len(r["losses"]) == 7 and abs(r["losses"][0] - math.log(2048)) < 0.3, (
            name
        )  # a fresh model on the same vocabulary
        assert r["overrides"]["model.hidden_dropout"] == 0.1, name  # the recipe's dropout, also at the tiny shape
    assert rows["default"]["backend"] == "single" and rows["default"]["ran_on"].startswith(
        "one process (cpu)"
    )  # auto on a CPU
    assert rows["single"]["alias_of"] == "default" and rows["single"]["tokens_per_s"] == rows["default"]["tokens_per_s"]
    e = rows["engine"]
    assert e["backend"] == "deepspeed" and "--backend deepspeed" in e["command"] and e["vs_engine"] == 1.0
    assert (
        0 < e["predicted_gib"] < 1 and "measured_over_predicted" not in e
    )  # chapter 50's prediction; nothing measured to set it against
    assert rows["default"]["vs_engine"] == pytest.approx(
        rows["default"]["tokens_per_s"]["median"] / e["tokens_per_s"]["median"]
    )
    assert (
        rows["hf-eager"]["parameters"] == rows["default"]["parameters"] == rows["engine"]["parameters"]
    )  # the same shape
    assert "Hugging Face" in rows["hf-eager"]["what"] and rows["hf-eager"]["command"].startswith(
        "python bench/gpu.py --hf-worker"
    )
    assert "Triton" in rows["kernels=triton"]["skipped"] and "tokens_per_s" not in rows["kernels=triton"]
    # issue 54's levers: torch's fused AdamW takes the default's steps (its losses within fp32 rounding); liger needs a
    # GPU
    f = rows["fused_adamw"]
    assert f["overrides"]["optimizer.fused"] == "true" and "--set optimizer.fused=true" in f["command"]
    assert f["losses"] == pytest.approx(rows["default"]["losses"], abs=1e-4)
    assert "need a GPU" in rows["liger"]["skipped"] and "tokens_per_s" not in rows["liger"]
    for name in rows:
        assert f"] {name}:" in stdout  # one progress line per measurement
    assert "x default" in stdout and "total" in stdout
    prof = rows["profile"]["profile"]  # one more step, under torch.profiler
    assert prof["step"] == 7 and prof["ops_timed_by"] == "cpu" and prof["wall_s"] > 0 and prof["by_kind_s"] == {}
    assert any(op["name"] == "aten::mm" for op in prof["top_ops"])  # no CUDA kernels here: the CPU's operators


@pytest.mark.slow
def test_dry_run_determinism_is_bitwise_on_the_cpu(dry_run_determinism, monkeypatch, tmp_path):
    "Two runs, a kill -9 and resume, two runs without the switch; and bench/report.py's row for them."
    import report

    d, _ = dry_run_determinism
    det = d["determinism"]
    assert "error" not in det, det.get("error")
    assert det["steps"] == 4 and det["killed_at_checkpoint"] == "step-0000002" and det["resumed"]
    for case in (det["deterministic"]["two_runs"], det["deterministic"]["kill9_resume"], det["default"]["two_runs"]):
        assert case["bitwise"] and case["step"] == 4 and case["losses_equal"] and case["same_position"]
        assert (
            case["tensors_compared"] == 4 * 28 and case["tensors_differing"] == 0
        )  # 28 parameters x (weights, master, 2 moments)
        assert set(case["rng_equal"]) >= {"torch", "numpy", "python", "tracked"} and all(case["rng_equal"].values())
    assert det["overrides"]["deterministic"] == "true" and det["overrides"]["model.attention_dropout"] == 0.1
    monkeypatch.setattr(report, "RESULTS", tmp_path)
    (row,) = report.gpu_rows({**d, "dry_run": False, "device": "NVIDIA H100 80GB HBM3"})  # no rows measured: this one
    assert "`bench/gpu.py`" in row.split("|")[1] and "bitwise / bitwise" in row
    assert "without the switch two runs bitwise" in row


def test_checkpoint_comparison_sees_the_last_bit():
    "bench/gpu.py's `same`: one ulp, another dtype, another shape or a changed random stream is a difference."
    import gpu

    x = torch.randn(64, dtype=torch.float32)
    y = x.clone()
    y[7] = torch.nextafter(y[7], torch.tensor(math.inf))
    assert gpu.same(x, x.clone()) and not gpu.same(x, y)
    assert not gpu.same(x.bfloat16(), x.bfloat16().float()) and not gpu.same(x, x[:63])
    rng = {
        "torch": torch.get_rng_state(),
        "python": (3, tuple(range(5)), None),
        "numpy": ["MT19937", torch.arange(4), 2, 0, 0.0],
    }
    assert gpu.same(rng, {**rng}) and not gpu.same(rng, {**rng, "python": (3, (0, 1, 2, 3, 5), None)})
    assert not gpu.same(rng, {k: v for k, v in rng.items() if k != "numpy"})


def test_dry_run_refuses_to_save(tmp_path):
    r = subprocess.run(
        [sys.executable, "bench/gpu.py", "--dry-run", "--save"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 2 and "--save" in r.stderr


@pytest.mark.slow  # needs the dry run above
def test_report_writes_the_gpu_rows_from_a_gpu_result(dry_run, tmp_path, monkeypatch):
    """bench/report.py: a dry run's JSON never reaches the README; a GPU result (here the dry run's, relabelled) gives
    one row per part it has — recipe and baselines, memory against today's prediction (determinism: the slow case above)
    — each naming bench/gpu.py in its first cell (so `--check` regenerates it); bench/kernels.py's end-to-end rows, not
    the recipe, stay until a GPU result has measured the kernel choices on the recipe."""
    import report

    d, _ = dry_run
    monkeypatch.setattr(report, "RESULTS", tmp_path)
    (tmp_path / "gpu-2026-01-01-cpu.json").write_text(json.dumps(d))
    assert report.newest_gpu() is None  # a dry run is not a measurement
    g = {**d, "dry_run": False, "device": "NVIDIA H100 80GB HBM3"}
    for r in g["rows"]:
        if r["name"] == "default":
            r.update(max_allocated_gib={"median": 0.1, "min": 0.1, "max": 0.12, "runs": 5})
    rows = report.gpu_rows(g)
    assert len(rows) == 2 and all(
        "`bench/gpu.py`" in r.split("|")[1] for r in rows
    )  # no lever, profile on a GPU, or memory but the default's; no determinism here (its row: the slow case above)
    assert "H100 80GB HBM3" in rows[0] and f"{g['rows'][0]['tokens_per_s']['median']:,.0f}" in rows[0]
    assert "one-process loop 1.00× the default's" in rows[0] and "HF eager" in rows[0]  # single = default on a CPU
    predicted = report.predicted_now(g["rows"][0], g)  # chapter 50, today's model
    assert 0 < predicted < 1 and f"tiny none 0.1/{predicted:.1f} ({0.12 / predicted:.3f})" in rows[1]
    assert len(report.kernel_rows(with_model=False)) == 0  # no kernels JSON in this results folder
