"The `mtnlg` command as a user types it."

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MTNLG = str(Path(sys.executable).parent / "mtnlg")


def run(*args, cwd=ROOT):
    return subprocess.run([MTNLG, *args], cwd=cwd, capture_output=True, text=True, timeout=600)


def test_info_530b():
    r = run("info", "--config", "scaled_configs/mtnlg-530b.yaml")
    assert r.returncode == 0, r.stderr
    for frag in (
        "529.60B",
        "TP 8 x PP 35 x DP 8 = 2240 GPUs (280 nodes of 8)",
        "per replica     280 GPUs",
        "3 layers per stage",
        "vocab 50257 padded to 51200",
    ):
        assert frag in r.stdout, (frag, r.stdout)


def test_bad_config_is_one_line_not_a_traceback(tmp_path):
    r = run("info", "--config", "scaled_configs/mtnlg-530b.yaml", "--set", "parallel.pipeline_parallel=8")
    assert r.returncode == 2
    assert "Traceback" not in r.stderr and r.stderr.count("\n") == 1
    assert "choose pipeline_parallel among: 1, 3, 5, 7, 15, 21, 35, 105" in r.stderr


def test_missing_data_file_is_a_clear_error(tmp_path):
    r = run(
        "train",
        "--config",
        "scaled_configs/tiny.yaml",
        "--set",
        "data.train_files=[no/such.jsonl]",
        "--run-dir",
        str(tmp_path),
        "--no-progress",
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "data file 'no/such.jsonl' not found" in r.stderr or "no/such.jsonl' not found" in r.stderr


def test_train_smoke_from_another_directory(tmp_path):
    "A short run launched from outside the repo finds its data and writes every artifact."
    r = run(
        "train",
        "--config",
        str(ROOT / "scaled_configs/tiny.yaml"),
        "--set",
        "schedule.train_iters=6",
        "--set",
        "schedule.log_interval=2",
        "--run-dir",
        str(tmp_path / "run"),
        "--no-progress",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    run_dir = tmp_path / "run"
    rows = [json.loads(l) for l in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "loss" in r] == [2, 4, 6]
    assert rows[-1]["step"] == 6 and "valid_loss" in rows[-1]
    for f in (
        "loss.png",
        "summary.json",
        "checkpoints/latest",
        "checkpoints/step-0000006/rank-00000.pt",
        "checkpoints/step-0000006/config.yaml",
        "checkpoints/step-0000006/tokenizer.json",
    ):
        assert (run_dir / f).is_file(), f
    assert list((run_dir / "tensorboard").glob("events.out.tfevents.*"))
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == 6 and summary["tokens"] == rows[-1]["tokens"]


def test_a_rank_imports_megatron_core_without_dynamo():
    """What a rank of `mtnlg train` or `mtnlg eval` imports leaves out dynamo and inductor, which megatron-core's
    torch.compile decorators would pull in (~3 CPU s in every process): its fused activations stay plain functions
    (chapter 10's `megatron_core`), and torch.compile is torch's own again afterwards."""
    code = (
        "import sys, torch; compile_ = torch.compile\n"
        "import mtnlg.train, mtnlg.evaluate, mtnlg.parallel_inference, mtnlg.generate, mtnlg.data_loading\n"
        "from megatron.core.fusions.fused_bias_gelu import bias_gelu\n"
        "print([m for m in ('torch._dynamo', 'torch._inductor') if m in sys.modules], type(bias_gelu).__name__,"
        " torch.compile is compile_)"
    )
    r = subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.splitlines()[-1] == "[] function True", r.stdout
