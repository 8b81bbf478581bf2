"""Chapter 56's rehearsal: one rank of a job under fake tensors, against a real step on this CPU and chapter 50's
count."""

import functools
import multiprocessing
import sys
import pytest
import torch.distributed as dist
from dataclasses import replace
from pathlib import Path

from mtnlg.config import load_config
from mtnlg.counting import GiB
from mtnlg.rehearsal import CPU_CHECK, build_stage, fake_world, real_cpu_peak, rehearse
from mtnlg.topology import Layout

ROOT = Path(__file__).resolve().parent.parent
TINY = str(ROOT / "scaled_configs" / "tiny.yaml")


_SPAWNED = {}  # the one process this file's rehearsals share, started the first time one needs it


def own_process(test):
    """A rehearsal needs a process without a process group (it makes a fake one, and takes it down after); an earlier
    test on this pytest worker may have left one: then the test runs in a spawned process, its assertion errors raised
    here. The rehearsals share that process (a spawn costs seconds of imports), one after another as they would run
    here."""

    @functools.wraps(test)
    def run():
        if not dist.is_initialized():
            return test()
        if "pool" not in _SPAWNED:
            _SPAWNED["pool"] = multiprocessing.get_context("spawn").Pool(1)
        return _SPAWNED["pool"].apply(getattr(sys.modules[test.__module__], test.__name__))

    return run


@pytest.fixture(scope="module", autouse=True)
def _end_the_spawned_process():
    yield
    if "pool" in _SPAWNED:
        _SPAWNED.pop("pool").terminate()


@pytest.mark.slow  # a real engine step on this CPU (~40 s); make test keeps the rehearsal against chapter 50's count
@own_process
def test_rehearsal_matches_a_real_cpu_step():
    "The rehearsal's peak against the real engine's measured step-2 peak, same config, this CPU's kernels: within 2%."
    overrides = {**CPU_CHECK, "model.recompute": "none"}
    fake = rehearse(load_config(TINY, overrides), 0, gpu=False)
    real = real_cpu_peak(TINY, overrides)
    assert abs(fake["peak"] / real - 1) < 0.02, (fake["peak"], real)  # seen: 1.0045 (none), 1.0060 (full)


@own_process
def test_every_stage_of_a_deep_pipeline_builds():
    "A middle stage has no embedding: the trainer's gpt_pipeline builds it (it once froze a position table there)."
    from torch._subclasses.fake_tensor import FakeTensorMode

    cfg = load_config(TINY, {"model.num_layers": 3, "parallel.pipeline_parallel": 3})
    frozen = {}
    for stage in range(3):
        with fake_world(Layout.of(cfg), stage), FakeTensorMode():
            module = build_stage(cfg, Layout.of(cfg))
            frozen[stage] = [n for n, p in module.named_parameters() if not p.requires_grad]
    assert frozen == {0: [], 1: [], 2: ["tied_modules.embed.positions.weight"]}


@own_process
def test_a_small_3d_layout_agrees_with_chapter_50():
    "TP 2 x PP 4 x DP 2, every stage, GPU kernels: the rehearsed peak within 5% of chapter 50's count less its reserve."
    cfg = load_config(
        TINY,
        {
            "precision": "bf16",
            "model.num_layers": 8,
            "model.hidden_size": 256,
            "model.num_attention_heads": 4,
            "model.seq_length": 256,
            "model.hidden_dropout": 0.1,
            "model.attention_dropout": 0.1,
            "parallel.tensor_parallel": 2,
            "parallel.pipeline_parallel": 4,
            "parallel.data_parallel": 2,
            "schedule.global_batch_size": 16,
            "schedule.micro_batch_size": 1,
        },
    )
    for stage in (0, 3):
        row = rehearse(replace(cfg, model=replace(cfg.model, recompute="none")), stage)
        assert row["in_flight"] == 4 - stage
        assert abs(row["peak"] / row["predicted"] - 1) < 0.05, (stage, row["peak"] / GiB, row["predicted"] / GiB)


@own_process
def test_a_stage_outside_the_layout_is_refused():
    cfg = load_config(TINY)
    with pytest.raises(ValueError, match="stage 1 is outside the 1 stages of TP 1 x PP 1 x DP 1"):
        rehearse(cfg, 1)


def test_the_cli_refuses_a_stage_outside_the_layout(capsys):
    from mtnlg.cli import main

    assert main(["rehearse", "--config", TINY, "--stage", "3"]) == 2
    assert "--stage 3: tiny has 1 pipeline stages (0..0, or -1 for the last)" in capsys.readouterr().err
