"""Activation recomputation (chapter 01, `model.recompute`): with dropout on, recomputing the attention core or the
whole layer in backward gives bitwise the losses and gradients of keeping every activation — on one process and
through DeepSpeed's pipeline on TP 2 x PP 2 (x DP 2 in `make test-full`) — and keeps fewer bytes for backward."""

import json
import pytest
import torch
from mtnlg.config import load_config
from mtnlg.model import GPT, saved_tensor_bytes
from mtnlg.topology import init_distributed, seed_everything
from test_engine import CONFIG, mtnlg_train, layout, params

DROPOUT = {"model.hidden_dropout": 0.1, "model.attention_dropout": 0.1, "model.seq_length": 32}


def one_process(recompute: str, steps: int = 3) -> dict:
    "Three AdamW steps of the tiny GPT with dropout: per-step losses and gradients, final weights, bytes kept."
    init_distributed()
    cfg = load_config(CONFIG, {**DROPOUT, "model.recompute": recompute})
    model = GPT(cfg.model, init_seed=cfg.seed).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    seed_everything(cfg.seed)
    tokens = torch.randint(
        0, cfg.model.vocab_size, (4, cfg.model.seq_length + 1), generator=torch.Generator().manual_seed(0)
    )
    out = {"losses": [], "grads": [], "saved": []}
    for _ in range(steps):
        opt.zero_grad()
        loss, saved = saved_tensor_bytes(
            lambda: model(tokens[:, :-1], tokens[:, 1:]).mean(), exclude=list(model.parameters())
        )
        loss.backward()
        out["losses"].append(loss.detach())
        out["saved"].append(saved)
        out["grads"].append({n: p.grad.clone() for n, p in model.named_parameters()})
        opt.step()
    out["params"] = {n: p.detach().clone() for n, p in model.named_parameters()}
    return out


@pytest.fixture(scope="module")
def keep_all():
    return one_process("none")


@pytest.mark.parametrize("recompute", ["selective", "full"])
def test_recompute_is_bitwise_on_one_process(keep_all, recompute):
    got = one_process(recompute)
    for step in range(3):
        assert torch.equal(got["losses"][step], keep_all["losses"][step]), step
        for n, g in keep_all["grads"][step].items():
            assert torch.equal(got["grads"][step][n], g), (step, n)
    assert all(torch.equal(got["params"][n], p) for n, p in keep_all["params"].items())
    assert got["saved"][0] < keep_all["saved"][0]
    assert keep_all["losses"][0] != keep_all["losses"][1]  # the weights moved between steps


def test_recomputation_must_replay_the_tensor_parallel_stream(keep_all, monkeypatch):
    "Guard: torch's checkpoint alone restores only the default stream; attention dropout then draws new masks."
    import mtnlg.model as M

    monkeypatch.setattr(
        M,
        "recompute_in_backward",
        lambda fn, *a: torch.utils.checkpoint.checkpoint(fn, *a, use_reentrant=False, preserve_rng_state=True),
    )
    got = one_process("full", steps=1)
    assert torch.equal(got["losses"][0], keep_all["losses"][0])  # forward is the same ...
    assert not all(torch.equal(got["grads"][0][n], g) for n, g in keep_all["grads"][0].items())  # ... backward is not


# ---- through DeepSpeed's pipeline: TP 2 x PP 2 (x DP 1 in the default set; x DP 2 in `make test-full`: recomputation
# lives inside each stage, data parallelism only averages the gradients it produces)

RUN = {
    **DROPOUT,
    "schedule.train_iters": 3,
    "schedule.log_interval": 1,
    "schedule.global_batch_size": 8,
    "schedule.micro_batch_size": 2,
    "schedule.batch_size_rampup_start": "null",
    "schedule.batch_size_rampup_increment": "null",
    "schedule.lr_warmup_tokens": 0,
}


def rows(run_dir):
    return [r for r in map(json.loads, open(run_dir / "metrics.jsonl")) if "loss" in r]


_keep_all = {}


def pipelined_keep_all(tmp_path_factory, dp: int):
    "The run that keeps every activation, once per layout."
    if dp not in _keep_all:
        run_dir = tmp_path_factory.mktemp(f"keep-all-dp{dp}")
        r = mtnlg_train(run_dir, {**RUN, **layout(2, 2, dp), "model.recompute": "none"}, nproc=4 * dp)
        assert r.returncode == 0, r.stderr[-3000:]
        _keep_all[dp] = run_dir
    return _keep_all[dp]


# make test: recomputation bitwise on one process and the tensor-parallel RNG replay above; the 3D engine cases are slow
@pytest.mark.parametrize(
    "recompute,dp",
    [
        pytest.param("full", 1, marks=pytest.mark.slow),
        pytest.param("selective", 1, marks=pytest.mark.slow),
        pytest.param("full", 2, marks=pytest.mark.slow),
        pytest.param("selective", 2, marks=pytest.mark.slow),
    ],
)
def test_recompute_is_bitwise_in_the_3d_engine(tmp_path_factory, tmp_path, recompute, dp):
    keep_all = pipelined_keep_all(tmp_path_factory, dp)
    r = mtnlg_train(tmp_path, {**RUN, **layout(2, 2, dp), "model.recompute": recompute}, nproc=4 * dp)
    assert r.returncode == 0, r.stderr[-3000:]
    ref, got = rows(keep_all), rows(tmp_path)
    assert [x["loss"] for x in got] == [x["loss"] for x in ref] and len(got) == 3
    assert [x["grad_norm"] for x in got] == [x["grad_norm"] for x in ref]
    assert ref[0]["loss"] != ref[-1]["loss"]  # the weights moved
    p_ref, p_got = params(keep_all), params(tmp_path)
    assert p_ref.keys() == p_got.keys() and all(torch.equal(p_ref[k], p_got[k]) for k in p_ref)
