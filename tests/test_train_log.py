"""Every log line carries speed and memory (chapter 41): tokens/s, the paper's TFLOP/s, MFU and HFU against the device's
bf16 peak ("n/a" on a CPU), and on CUDA the peak allocated/reserved memory since the last line — in the console, in
metrics.jsonl and in TensorBoard. The CUDA branch is checked on the CPU with torch.cuda's counters stood in for."""

import json
import re
import subprocess
import sys
from pathlib import Path
import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
MTNLG = str(Path(sys.executable).parent / "mtnlg")
GiB = 2**30


def test_speed_metrics_on_cuda_reports_mfu_hfu_and_peak_memory(monkeypatch):
    from mtnlg.config import load_config
    from mtnlg.topology import Layout
    from mtnlg import train

    calls = []
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: int(57.9 * GiB))
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda device=None: 61 * GiB)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device=None: calls.append(device))
    cfg = load_config(ROOT / "scaled_configs/gpt-1.3b.yaml", {"model.recompute": "full"})
    row = train.speed_metrics(cfg, Layout(1, 1, 1), 64, 64 * 2048 / 49_435, torch.device("cuda", 0))
    assert row["tokens_per_s"] == pytest.approx(49_435)
    assert row["mfu"] == pytest.approx(0.454, abs=5e-4)  # the first GPU issue's engine row on one H100
    l, h, s, V = 24, 2048, 2048, 50304  # + the recomputed forward of every layer (not the logits)
    assert row["hfu"] / row["mfu"] == pytest.approx(
        (96 * l * h * h * (1 + s / (6 * h)) + 6 * h * V) / (72 * l * h * h * (1 + s / (6 * h)) + 6 * h * V), rel=1e-9
    )
    assert (row["max_allocated_gib"], row["max_reserved_gib"]) == (pytest.approx(57.9), 61.0)
    assert calls == [torch.device("cuda", 0)]  # the next line's peak starts from here
    line = train.log_line({"step": 10, "loss": 2.5, "lr": 1e-4, "grad_norm": 0.5, **row}, 20)
    assert "49,435 tokens/s | MFU 45.4% | HFU 59.4% | memory 57.9 GiB allocated, 61.0 reserved" in line
    # a device without a datasheet in counting.GPUS: no peak to divide by, memory still reported
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA GeForce GTX 750 Ti")
    row = train.speed_metrics(cfg, Layout(1, 1, 1), 64, 1.0, torch.device("cuda", 0))
    assert row["mfu"] is None and row["hfu"] is None and row["max_allocated_gib"] == pytest.approx(57.9)


def test_every_log_line_carries_speed_in_console_jsonl_and_tensorboard(tmp_path):
    r = subprocess.run(
        [
            MTNLG,
            "train",
            "--config",
            "scaled_configs/tiny.yaml",
            "--run-dir",
            str(tmp_path),
            "--no-progress",
            "--set",
            "schedule.train_iters=4",
            "--set",
            "schedule.log_interval=2",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    lines = [l for l in r.stdout.splitlines() if l.startswith("step ")]
    assert len(lines) == 2 and all(
        re.fullmatch(
            r"step [24]/4 \| loss [\d.]+ \| lr [\d.e+-]+ \| grad norm [\d.]+ \| "
            r"[\d,]+ tokens/s \| MFU n/a \| HFU n/a",
            l,
        )
        for l in lines
    ), lines
    rows = [json.loads(l) for l in open(tmp_path / "metrics.jsonl") if '"loss"' in l]
    assert [x["step"] for x in rows] == [2, 4]
    for x in rows:
        assert x["tokens_per_s"] > 0 and x["tflops_per_gpu"] > 0
        assert x["mfu"] is x["hfu"] is x["max_allocated_gib"] is x["max_reserved_gib"] is None  # a CPU
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tb = EventAccumulator(str(tmp_path / "tensorboard"))
    tb.Reload()
    assert {"loss", "tokens_per_s", "tflops_per_gpu"} <= set(tb.Tags()["scalars"])
    assert "mfu" not in tb.Tags()["scalars"]  # a None is not written as a number
    assert [e.step for e in tb.Scalars("tokens_per_s")] == [2, 4]
