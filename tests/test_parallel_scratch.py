"""Multi-process checks of chapters 11-13 (gloo on CPU): each from-scratch mechanism equals the library and the
unparallelised computation. Workers live in `mtnlg.testing` (spawn imports them by name); `launch` runs them.
Chapter 10's notebook runs `init_distributed` in 8 processes, checking megatron-core's groups against `Layout` in
each."""

import os
from pathlib import Path
import pytest
import torch
from mtnlg.topology import Layout, launch, launch_each
from mtnlg import pipeline_parallel as pp, testing

TINY = str(Path(__file__).resolve().parent.parent / "scaled_configs" / "tiny.yaml")


@pytest.mark.slow  # chapter 11's notebook runs the same check (make test executes it)
def test_tensor_parallel_layers_equal_megatron_and_dense():
    results = launch(testing.toy_parity_worker, 2, 3)
    for r in results:
        for impl, row in testing.max_differences(r).items():  # scratch and megatron vs dense
            assert max(row.values()) < 1e-6, (impl, row)
        assert max(testing.max_differences(r, "megatron")["scratch"].values()) < 1e-6
    assert results[0]["scratch"][0].item() == results[1]["scratch"][0].item()


@pytest.mark.slow  # chapter 11's notebook runs it on both sets of layers (make test executes it)
@pytest.mark.parametrize("tp_layers", ["scratch"])
def test_gpt_tp2_equals_tp1(tp_layers):
    "The whole GPT at TP 2 on chapter 11's layers equals the TP 1 model on megatron-core's layers."
    ((loss1, params1, grads1),) = launch(testing.gpt_tp_worker, 1, TINY, 1)
    loss2, params2, grads2 = launch(testing.gpt_tp_worker, 2, TINY, 2, {"model.tp_layers": tp_layers})[0]
    assert params2.keys() == params1.keys()
    assert max((params2[n] - p).abs().max().item() for n, p in params1.items()) == 0.0
    assert abs(loss1.item() - loss2.item()) <= 1e-6 * loss1.item()
    scale = max(g.abs().max().item() for g in grads1.values())
    assert max((grads2[n] - g).abs().max().item() for n, g in grads1.items()) < 1e-5 * max(scale, 1.0)


SEQUENCE_PARALLEL = {"parallel.tensor_parallel": 2, "parallel.sequence_parallel": True}


def tp_parity(reference, result) -> dict:
    """Max |difference| of the loss (relative), the weights, and the gradients (over the largest) against `reference`,
    by name."""
    (loss1, params1, grads1), (loss2, params2, grads2) = reference, result
    assert params2.keys() == params1.keys()
    scale = max(max(g.abs().max().item() for g in grads1.values()), 1.0)
    return {
        "loss": abs(loss1.item() - loss2.item()) / loss1.item(),
        "params": max((params2[n] - p).abs().max().item() for n, p in params1.items()),
        "grads": {n: (grads2[n] - g).abs().max().item() / scale for n, g in grads1.items()},
    }


# make test: chapter 11 runs both (with recomputation) and the guard; the 3D engine case the chunked loss
@pytest.mark.slow
@pytest.mark.parametrize("tp_layers,loss_chunk,recompute", [("megatron", 0, "selective"), ("scratch", 16, "full")])
def test_sequence_parallel_tp2_equals_tp1(tp_layers, loss_chunk, recompute):
    """TP 2 with sequence parallelism and recomputation equals TP 1 without (megatron-core's layers with selective
    recomputation, and chapter 11's twin with full recomputation and the chunked loss):
    the same weights, the loss within 1e-6 relative, every gradient within 1e-6 of the largest. Without summing the
    LayerNorm weights' gradients over the TP group (the rest still summed), the LayerNorm gradients are wrong and the
    same check fails: each rank's are only its half of the sequence's."""
    over = {"model.tp_layers": tp_layers, "model.loss_chunk": loss_chunk, "model.recompute": recompute}
    (ref,) = launch(testing.gpt_tp_worker, 1, TINY, 1, {"model.loss_chunk": loss_chunk})
    for summed in (True, False):
        ranks = launch(testing.gpt_tp_worker, 2, TINY, 2, {**over, **SEQUENCE_PARALLEL}, summed)
        err = tp_parity(ref, ranks[0])
        worst = max(err["grads"], key=err["grads"].get)
        print(
            f"{tp_layers}, LayerNorm grads {'summed' if summed else 'NOT summed'}: loss {err['loss']:.1e}, "
            f"weights {err['params']:.1e}, worst gradient {worst} {err['grads'][worst]:.1e}"
        )
        assert err["params"] == 0.0 and err["loss"] <= 1e-6
        ln = max(v for n, v in err["grads"].items() if "ln" in n)
        if summed:
            assert max(err["grads"].values()) <= 1e-6, worst
        else:
            assert (
                ln > 1e-3 and max(v for n, v in err["grads"].items() if "ln" not in n) <= 1e-6
            )  # the guard fails there
        assert ranks[0][0].item() == ranks[1][0].item()


def test_three_stage_1f1b_equals_unpipelined():
    "3 processes, 3 layers: the middle stage both receives and sends in each direction."
    results = launch(testing.pipeline_worker, 3, TINY, "1f1b", 4, 2, {"model.num_layers": 3})
    assert [r["peak_activations"] for r in results] == [3, 2, 1]
    last = results[-1]
    assert abs(last["loss"].item() - last["ref_loss"].item()) < 1e-6
    owned = [n for r in results for n in r["grads"]]
    assert set(owned) == set(last["model_names"])  # every parameter lives on some stage
    assert owned.count("embedding.tokens.weight") == 2  # the tied embedding on the first and the last
    for r in results:
        for n, g in r["grads"].items():
            assert (g - r["ref_grads"][n]).abs().max().item() < 1e-7, n


def test_schedules_rejected_and_bubbles():
    with pytest.raises(ValueError, match="schedule must be"):
        testing.pipeline_worker(TINY, "zigzag")
    with pytest.raises(RuntimeError, match="deadlocks"):
        pp.simulate([[pp.Step("F", 0), pp.Step("B", 0)], [pp.Step("B", 0), pp.Step("F", 0)]])
    for p_, m in [(3, 5), (35, 240), (6, 1)]:
        for sched in (pp.gpipe_schedule, pp.one_f_one_b_schedule):
            assert abs(pp.bubble_fraction(pp.simulate(sched(p_, m)), p_) - pp.bubble_formula(p_, m)) < 1e-12


STEPS, CLIP = 3, 0.05  # a clip below every step's gradient norm: clipping acts on each step


@pytest.fixture(scope="module")
def data_parallel_runs():
    """DP 2: chapter 12's ZeRO-1 and plain AdamW, then DeepSpeed's ZeRO-1 in fp32, in one launch of 2 processes (a spawn
    costs each process seconds of imports; a call in running processes none): every rank's result of each."""
    calls = [
        (testing.data_parallel_worker, (TINY, STEPS, CLIP)),
        (testing.deepspeed_worker, (TINY, STEPS, CLIP, ("fp32",))),
    ]
    return dict(zip(("scratch", "deepspeed"), launch_each(calls, 2)))


@pytest.fixture(scope="module")
def reference_run():
    "One process, the full batch: what both data-parallel runs must equal."
    return testing.reference_run(TINY, STEPS, CLIP)


def test_zero1_equals_unsharded_adamw(data_parallel_runs, reference_run):
    runs = data_parallel_runs["scratch"]
    zero, plain = runs[0]["zero1"], runs[0]["adamw"]
    assert testing.max_param_difference(zero["params"], plain["params"]) == 0.0  # same gradients: bit for bit
    assert testing.max_param_difference(zero["params"], runs[1]["zero1"]["params"]) == 0.0
    assert runs[0]["zero1"]["state_numel"] + runs[1]["zero1"]["state_numel"] == plain["state_numel"]
    ref = reference_run
    assert min(ref["grad_norms"]) > CLIP
    assert testing.max_param_difference(zero["params"], ref["params"]) < 1e-5
    for a, b in zip(zero["losses"], ref["losses"]):
        assert abs(a - b) <= 1e-5 * b


def test_reference_run_stays_one_process_under_a_launcher(monkeypatch):
    """RANK/WORLD_SIZE (torchrun), SLURM_PROCID/SLURM_NTASKS (srun), OMPI_* (mpirun) set: the reference is still one
    process."""
    import torch.distributed as dist
    from mtnlg.topology import free_port

    launcher = {
        "RANK": "1",
        "WORLD_SIZE": "2",
        "LOCAL_RANK": "1",
        "SLURM_PROCID": "1",
        "SLURM_NTASKS": "2",
        "SLURM_LOCALID": "1",
        "OMPI_COMM_WORLD_RANK": "1",
        "OMPI_COMM_WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
    }
    for k, v in launcher.items():
        monkeypatch.setenv(k, v)
    r = testing.reference_run(TINY, 2, 1.0)
    assert (dist.get_rank(), dist.get_world_size()) == (0, 1)
    assert {k: os.environ.get(k) for k in launcher} == launcher  # put back as they were
    assert len(r["losses"]) == 2 and r["losses"][1] < r["losses"][0]


def test_deepspeed_zero1_fp32_equals_torch_adamw(data_parallel_runs, reference_run):
    ds, ref = data_parallel_runs["deepspeed"], reference_run
    r = ds[0]["fp32"]
    assert r["optimizer"] == "DeepSpeedZeroOptimizer"
    assert testing.max_param_difference(r["params"], ref["params"]) < 1e-5
    for a, b in zip(r["losses"], ref["losses"]):
        assert abs(a - b) <= 1e-5 * b
    n = sum(p.numel() for p in ref["params"].values())
    assert max(x["fp32"]["master_numel"] for x in ds) < 0.51 * n  # each rank: half the fp32 state


def test_the_optimizer_takes_its_settings_from_the_config():
    "AdamW's eps, betas and weight decay are the config's (the paper's eps 1e-8 is not a default hidden in code)."
    from mtnlg.config import load_config
    from mtnlg.data_parallel import make_optimizer

    cfg = load_config(TINY, {"optimizer.adam_eps": 3e-7, "optimizer.adam_beta2": 0.97, "optimizer.weight_decay": 0.05})
    opt = make_optimizer(torch.nn.Linear(4, 4), cfg)
    assert {(g["eps"], g["betas"]) for g in opt.param_groups} == {(3e-7, (cfg.optimizer.adam_beta1, 0.97))}
    assert [g["weight_decay"] for g in opt.param_groups] == [0.05, 0.0]


def test_layout_rejects_bad_rank():
    with pytest.raises(ValueError, match="outside a world of 8"):
        Layout(2, 2, 2).coord(8)
    with pytest.raises(ValueError, match="axis must be one of"):
        Layout(2, 2, 2).groups("tensor")
