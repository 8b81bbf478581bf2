"""Chapter 98's memory measurement (`mtnlg.testing.MemoryTracker`, `measure_stage_memory`): exact to the byte on a
workload whose answer is known; on a real TP 2 x PP 2 DeepSpeed step (4 processes, gloo), the parameter and
optimizer bytes of every rank are what the configuration says, full recomputation lowers every stage's activation
peak, the loss without logits (chapter 20) lowers the last stage's, and chapter 50's model predicts every peak, with
sequence parallelism + selective recomputation too (measured here: 0.95 and 0.97 of the prediction)."""

from pathlib import Path
import pytest
import torch
from mtnlg.testing import MemoryTracker, memory_exactness_check, ACTIVATIONS

ROOT = Path(__file__).resolve().parent.parent
CONFIG = str(ROOT / "scaled_configs/tiny.yaml")
MiB = 2**20

# ---- the method, one process


def test_exact_on_a_known_workload():
    "W before the window; A, then B, free A, then C: the peak is W + B + C to the byte, split as tagged."
    r = memory_exactness_check()
    assert r["start"] == MiB
    assert r["peak"] == 6 * MiB  # exact: not a byte more or less
    assert r["categories"] == {"parameters": MiB, "optimizer": 0, "gradients": 3 * MiB, ACTIVATIONS: 2 * MiB}


def test_temporaries_count_and_unseen_frees_do_not():
    "A temporary that lives inside one expression is in the peak; freeing a block from before the tracker is ignored."
    old = torch.ones(MiB, dtype=torch.uint8)
    with MemoryTracker() as mt:
        with mt.window("w"):
            del old  # allocated before the tracker: never in its record
            x = torch.ones(2 * MiB, dtype=torch.uint8)
            float(torch.add(x, x)[0])  # a 2 MiB temporary, freed at once
            del x
    r = mt.peak("w")
    assert (r["start"], r["peak"]) == (0, 4 * MiB)
    assert len(mt.record) == 4  # two allocations, two frees: nothing else


# ---- a real DeepSpeed step: TP 2 x PP 2 x DP 1, 4 processes; two layers per stage, so that recomputation's saving
# (~6 MiB on stage 0, ~3 MiB on stage 1) stands well above the run-to-run jitter of the peaks (~0.5 MiB)

RUN = {
    "model.num_layers": 4,
    "model.seq_length": 128,
    "model.hidden_size": 128,
    "model.hidden_dropout": 0.1,
    "model.attention_dropout": 0.1,
    "precision": "fp32",
    "schedule.global_batch_size": 8,
    "schedule.micro_batch_size": 2,
    "schedule.batch_size_rampup_start": None,
    "schedule.batch_size_rampup_increment": None,
    "parallel.tensor_parallel": 2,
    "parallel.pipeline_parallel": 2,
    "parallel.data_parallel": 1,
}

# the same step three ways: no recomputation, full recomputation, and no recomputation with the loss computed 64 tokens
# at a time without logits (chapter 20's linear cross-entropy, `model.loss_chunk`)
MODES = {
    "none": {"model.recompute": "none"},
    "full": {"model.recompute": "full"},
    "chunked loss": {"model.recompute": "none", "model.loss_chunk": 64},
    # and what Korthikanti et al. recommend: sequence parallelism with selective recomputation
    "sequence parallel + selective": {"model.recompute": "selective", "parallel.sequence_parallel": True},
}


@pytest.fixture(scope="module")
def measured():
    from mtnlg import testing
    from mtnlg.topology import launch_each

    # the four modes one after another in one launch of 4 ranks (one start-up, not four)
    calls = [(testing.measure_stage_memory, (CONFIG, {**RUN, **over})) for over in MODES.values()]
    return dict(zip(MODES, launch_each(calls, 4)))


def test_parameter_and_optimizer_bytes(measured):
    """fp32 parameters: 4 bytes per parameter of the rank's stage (`stage_params_per_rank`), plus, on the last stage,
    the position table of the tied embedding copy DeepSpeed builds there (frozen, unused, but allocated). ZeRO-1:
    fp32 master + Adam's two moments = 12 bytes per trainable parameter / DP, up to the flat groups' padding."""
    from mtnlg.config import load_config, stage_params_per_rank

    cfg = load_config(CONFIG, RUN)
    m, p = cfg.model, cfg.parallel
    for r in sum(measured.values(), []):
        n = stage_params_per_rank(m, p.tensor_parallel, p.pipeline_parallel, r["stage"])
        last = r["stage"] == p.pipeline_parallel - 1 and p.pipeline_parallel > 1
        frozen = m.seq_length * m.hidden_size if last else 0
        assert r["trainable_numel"] == n
        assert r["categories"]["parameters"] == r["detail"]["parameters"] == (n + frozen) * 4
        opt, groups = r["categories"]["optimizer"], 2  # two param groups: with and without weight decay
        assert r["detail"]["optimizer:step"] == 4 * groups  # Adam's step counters, one fp32 scalar per group
        adam = opt - r["detail"]["optimizer:step"]
        assert 12 * n / p.data_parallel <= adam <= 12 * (n / p.data_parallel + 2 * p.data_parallel * groups)
        assert (
            r["detail"]["optimizer:fp32 master"]
            == r["detail"]["optimizer:exp_avg"]
            == r["detail"]["optimizer:exp_avg_sq"]
        )


def test_gradients_and_deepspeed_buffers(measured):
    """Gradients at the peak: one fp32 copy of every trainable parameter, and no reduction bucket. Our engine runs
    ZeRO-1 without `contiguous_gradients` (chapter 14); with it, DeepSpeed would keep two buckets of
    `reduce_bucket_size` elements, one filled by per-parameter hooks in the backward pass."""
    from mtnlg.config import load_config, reduce_bucket_elements

    cfg = load_config(CONFIG, RUN)
    for r in sum(measured.values(), []):
        assert "gradients:ipg bucket" not in r["detail"]
        assert 4 * r["trainable_numel"] <= r["categories"]["gradients"] <= 4 * r["trainable_numel"] + 64 * 1024
        # what the reduction flattens at once is capped by the bucket, sized to the largest stage (5e8 would be 2 GB)
        assert r["reduce_bucket_elements"] == reduce_bucket_elements(cfg.model, 2, 2) < 5e8


def stage_peak(ranks, stage) -> tuple[int, int]:
    """(lowest, highest) the fullest rank of `stage` can have peaked at. The record counts a block whose free it did not
    see (megatron-core's asynchronous all-reduces release theirs on gloo's threads) until its address is used again;
    the tracker reports those bytes at the peak (`of which freed unseen`), so the true peak lies in between. Under load
    there are more of them: a CI run measured a stage 1 MiB (8 activation blocks) above its usual peak."""
    rs = [r for r in ranks if r["stage"] == stage]
    return max(r["peak"] - r["of which freed unseen"] for r in rs), max(r["peak"] for r in rs)


def test_the_model_predicts_every_stage_peak_within_10_percent(measured):
    """Chapter 50's `stage_memory` (CPU: no reserve, PyTorch's math attention, fp32-wide dropout masks) vs each stage's
    fullest rank."""
    from mtnlg.config import load_config
    from mtnlg.counting import Assumptions, Setup, stage_memory
    from mtnlg.topology import Layout

    cpu = Assumptions(reserved_gib=0.0, attention="math", dropout_mask_bytes=4)
    for mode, ranks in measured.items():
        cfg = load_config(CONFIG, {**RUN, **MODES[mode]})
        setup = Setup(Layout.of(cfg), 2, cfg.model.recompute, sequence_parallel=cfg.parallel.sequence_parallel)
        predicted = stage_memory(cfg.model, setup, 8, "fp32", cpu)
        for stage in (0, 1):
            low, high = stage_peak(ranks, stage)
            p = predicted[stage]["total"]
            print(
                f"{mode}, stage {stage}: predicted {p / MiB:.2f} MiB, measured {high / MiB:.2f} MiB "
                f"({(high - low) / MiB:.2f} of it freed unseen), ratio {high / p:.3f}"
            )
            assert low <= 1.10 * p and high >= 0.90 * p, (mode, stage)  # some peak the record allows is within 10%


def test_full_recompute_lowers_every_stage_activation_peak(measured):
    "The peak of activations and working buffers alone, on every rank of every stage."
    by_stage = lambda mode: {
        s: [r["activation peak"]["peak"] for r in measured[mode] if r["stage"] == s] for s in (0, 1)
    }
    none, full = by_stage("none"), by_stage("full")
    for s in (0, 1):
        print(
            f"stage {s}: activation peak none {[round(x / MiB, 2) for x in none[s]]} MiB, "
            f"full {[round(x / MiB, 2) for x in full[s]]} MiB"
        )
        assert max(full[s]) < min(none[s])


def test_the_loss_without_logits_lowers_only_the_last_stage(measured):
    """The chunked loss removes the last stage's logits (2 x 1 MiB in DeepSpeed's pipe buffers, 2 MiB in the loss's
    backward), and adds a chunk, the hidden state's gradient and the output matrix's gradient (0.9 MiB): the model says
    1.9 MiB less (megatron-core's loss works in place on the logits: at its fullest, a third copy is being made). The
    first stage holds no logits and must not move beyond the peaks' jitter (measured 0.5 MiB once: 4 blocks)."""
    (n1, N1), (c1, C1), (n0, N0), (c0, C0) = (
        stage_peak(measured[m], s) for s, m in ((1, "none"), (1, "chunked loss"), (0, "none"), (0, "chunked loss"))
    )
    print(
        {m: [[round(x / MiB, 2) for x in stage_peak(measured[m], s)] for s in (0, 1)] for m in ("none", "chunked loss")}
    )
    assert N1 - c1 > 1.5 * MiB  # the largest drop the records allow
    block = RUN["model.seq_length"] * RUN["schedule.micro_batch_size"] * RUN["model.hidden_size"] * 4  # 128 KiB
    assert max(n0 - C0, c0 - N0) <= 6 * block  # stage 0 moves by no more than unseen frees the record missed entirely


def test_record_agrees_with_a_scan_of_live_tensors(measured):
    """At the start of the measured step the record and an independent scan of the tensors the garbage collector sees
    agree: the record holds all the scan finds but for stray scalars, and the scan finds what the record holds but for
    a few blocks whose free the profiler could not see: the activation-sized tensors (seq x micro-batch x hidden, fp32)
    of megatron-core's asynchronous all-reduces, released on gloo's threads. Measured: up to 3 such blocks on a rank
    (30 ranks over 3 launches of each mode); a real gap in the record (the 1.3 MiB of a stage's gradients) is 10."""
    block = RUN["model.seq_length"] * RUN["schedule.micro_batch_size"] * RUN["model.hidden_size"] * 4
    for r in sum(measured.values(), []):
        scan = r["scan at step start"]
        assert scan["scanned, not recorded"] <= 1024, scan
        assert scan["recorded"] - scan["found by scan"] - scan["not scanned, freed unseen"] <= 6 * block, scan
