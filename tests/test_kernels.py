"""Chapter 20's kernels on a CPU. Triton runs here only in its interpreter, which must be on before triton is first
imported (its own helpers, e.g. `tl.rand`, are decided then) — and megatron-core imports triton with `mtnlg` — so the
Triton cases run in one worker process started with TRITON_INTERPRET=1; this process's environment is left alone.
Tolerances: the largest error of the output and of every input gradient, relative to the reference's largest
magnitude (absolute below 1), against the reference computed in fp32 on the same inputs: 1e-5 in fp32, 2e-2 in bf16."""

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
import pytest
import torch
from mtnlg import kernels as K
from mtnlg.config import load_config
from mtnlg.counting import GPUS, layer_forward_flops
from mtnlg.iteration_time import FUSIONS, layer_ops, layer_time, ridge_point

TOL = {"float32": 1e-5, "bfloat16": 2e-2}
# rows x cols (batch, heads, seq for softmax; batch, heads, seq, head_dim for attention): odd sizes, one row, one query
SHAPES = {
    "softmax": [(2, 3, 37), (1, 1, 1), (1, 2, 70)],
    "bias_gelu": [(37, 100), (1, 7), (3, 2049)],
    "bias_dropout_add": [(37, 100), (1, 7), (3, 2049)],
    "layer_norm": [(37, 100), (1, 7), (3, 5000)],  # 5000 > one 4096 block: the chunked loop
    "attention": [(2, 3, 37, 24), (1, 2, 1, 16), (1, 1, 33, 64)],
    # tokens x hidden x vocabulary; chunks of 16 rows: 37 = 16 + 16 + 5; 5000 > one 4096 block
    "linear_cross_entropy": [(37, 24, 100), (1, 8, 7), (20, 16, 5000)],
}
CASES = [(n, s, d) for n, shapes in SHAPES.items() for s in shapes for d in TOL]


@pytest.fixture(scope="module")
def interpreter():
    "One worker process whose triton was imported with TRITON_INTERPRET=1."
    saved = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
        assert pool.submit(_interpreted).result(timeout=120)  # the worker starts now, with the variable set
    finally:
        if saved is None:
            del os.environ["TRITON_INTERPRET"]
        else:
            os.environ["TRITON_INTERPRET"] = saved
    yield pool
    pool.shutdown()


def _interpreted() -> bool:
    return K._interpreted()


@pytest.mark.parametrize("name,shape,dtype", CASES, ids=[f"{n}-{'x'.join(map(str, s))}-{d}" for n, s, d in CASES])
def test_triton_kernel_equals_reference(interpreter, name, shape, dtype):
    e = interpreter.submit(K.kernel_errors, name, shape, getattr(torch, dtype)).result()
    assert e["forward"] < TOL[dtype] and e["backward"] < TOL[dtype], e


def _dropout_agrees(seed: int, p: float) -> dict:
    x, b, r, _, _ = K.kernel_inputs("bias_dropout_add", (37, 100))
    mask = K.dropout_mask(seed, x.shape, p)
    out = K.bias_dropout_add_triton(x, b, r, p, seed)
    dx, db, dr = torch.autograd.grad(out, (x, b, r), torch.ones_like(out))
    return {
        "equal": torch.equal(out, K.bias_dropout_add_reference(x, b, r, p, mask)),
        "grad equal": torch.equal(dx, mask * (1 / (1 - p))) and torch.equal(dr, torch.ones_like(r)),
        "kept": mask.float().mean().item(),
        "same seed": torch.equal(K.dropout_mask(seed, x.shape, p), mask),
        "other seed": torch.equal(K.dropout_mask(seed + 1, x.shape, p), mask),
    }


def test_dropout_mask_is_the_seeds_and_exact(interpreter):
    got = interpreter.submit(_dropout_agrees, 7, 0.25).result()
    assert got["equal"] and got["grad equal"] and got["same seed"] and not got["other seed"], got
    assert abs(got["kept"] - 0.75) < 0.03, got  # 3700 draws: 4 standard deviations


def _model_run(
    kernels: str,
    recompute: str = "none",
    dropout: float = 0.0,
    dtype: str = "float32",
    loss_chunk: int = 0,
    compile_blocks: bool = False,
):
    "The tiny GPT (2 layers, seq 32): loss and every gradient for one batch."
    from mtnlg.model import GPT
    from mtnlg.topology import init_distributed, seed_everything

    init_distributed()
    cfg = load_config(
        os.path.join(os.path.dirname(__file__), "..", "scaled_configs", "tiny.yaml"),
        {
            "model.kernels": kernels,
            "model.recompute": recompute,
            "model.hidden_dropout": dropout,
            "model.attention_dropout": dropout,
            "model.seq_length": 32,
            "model.loss_chunk": loss_chunk,
            "model.compile_blocks": compile_blocks,
        },
    )
    seed_everything(3)
    model = GPT(cfg.model, init_seed=1).to(getattr(torch, dtype)).train()  # bf16: as DeepSpeed's bf16 engine casts it
    tokens = torch.randint(0, cfg.model.vocab_size, (2, 33), generator=torch.Generator().manual_seed(0))
    loss = model(tokens[:, :-1], tokens[:, 1:]).mean()
    loss.backward()
    return loss.detach().float(), {n: p.grad.float() for n, p in model.named_parameters()}


def _model_errors(kernels: str, dtype: str = "float32", loss_chunk: int = 0) -> tuple[float, float]:
    """(|loss - reference loss|, largest gradient error relative to that tensor's largest reference magnitude); the
    reference keeps its logits, `loss_chunk` > 0 computes the loss without them (64 tokens: 4 chunks of 16)."""
    ref_loss, ref = _model_run("reference", dtype="float32")
    loss, grads = _model_run(kernels, dtype=dtype, loss_chunk=loss_chunk)
    return abs(loss - ref_loss).item(), max(
        ((g - ref[n]).abs().max() / ref[n].abs().max()).item() for n, g in grads.items()
    )


def test_model_with_triton_kernels_equals_reference(interpreter):
    loss, grad = interpreter.submit(_model_errors, "triton", "float32", 16).result()
    assert loss < 1e-5 and grad < 1e-4, (loss, grad)  # fp32: summation order and erf's last bit


def test_model_with_triton_kernels_in_bf16(interpreter):
    loss, grad = interpreter.submit(_model_errors, "triton", "bfloat16", 16).result()
    ref_loss, ref_grad = _model_errors("reference", "bfloat16")  # PyTorch's own bf16 model, for scale
    assert loss < 2e-2 and grad < max(0.1, 2 * ref_grad), (loss, grad, ref_loss, ref_grad)


def _recompute_is_bitwise(kernels: str) -> bool:
    "With dropout on, selective and full recomputation give the losses and gradients of `none`, bit for bit."
    loss, grads = _model_run(kernels, "none", 0.1)
    for mode in ("selective", "full"):
        l, g = _model_run(kernels, mode, 0.1)
        if not (torch.equal(l, loss) and all(torch.equal(g[n], grads[n]) for n in grads)):
            return False
    return True


def test_recompute_replays_the_triton_dropout(interpreter):
    assert interpreter.submit(_recompute_is_bitwise, "triton").result()


def test_triton_on_cpu_without_interpreter_says_how():
    if K._interpreted():
        pytest.skip("this process imported triton with TRITON_INTERPRET=1")
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1 set before triton is first imported"):
        K.bias_gelu_triton(torch.randn(3, 4), torch.randn(4))


@pytest.mark.parametrize("name", ["bias_gelu", "layer_norm", "softmax", "bias_dropout_add", "attention"])
def test_compile_variant_equals_reference(name):
    shape = SHAPES[name][0]
    if name == "bias_dropout_add":  # the mask from torch here: no triton needed
        x, b, r, p, _ = K.kernel_inputs(name, shape)
        mask = torch.rand(x.shape, generator=torch.Generator().manual_seed(0)) >= p
        fn = lambda x, b, r: K.bias_dropout_add_reference(x, b, r, p, mask)
        assert torch.allclose(K.compiled(fn)(x, b, r), fn(x, b, r), atol=1e-6)
        return
    e = K.kernel_errors(name, shape, torch.float32, "compile")
    assert e["forward"] < 1e-5 and e["backward"] < 1e-5, e


def _saved_bytes(loss_chunk: int) -> tuple[int, int]:
    "(bytes autograd saves for the tiny GPT's backward, one [tokens, padded vocabulary] fp32 tensor's bytes)."
    from mtnlg.model import GPT, saved_tensor_bytes
    from mtnlg.topology import init_distributed

    init_distributed()
    cfg = load_config(
        os.path.join(os.path.dirname(__file__), "..", "scaled_configs", "tiny.yaml"),
        {"model.seq_length": 32, "model.loss_chunk": loss_chunk},
    )
    model = GPT(cfg.model, init_seed=1)
    tokens = torch.randint(0, cfg.model.vocab_size, (2, 33), generator=torch.Generator().manual_seed(0))
    _, saved = saved_tensor_bytes(lambda: model(tokens[:, :-1], tokens[:, 1:]).mean(), exclude=list(model.parameters()))
    return saved, 2 * 32 * cfg.model.padded_vocab_size() * 4


def test_model_loss_without_logits_equals_reference():
    """model.loss_chunk with the PyTorch twin (kernels=reference): the loss and every gradient of the model that keeps
    its logits, and backward keeps no logits (the reference's loss saves their fp32 softmax)."""
    loss, grad = _model_errors("reference", loss_chunk=16)
    assert loss < 1e-6 and grad < 1e-5, (loss, grad)
    (kept, logits), (chunked, _) = _saved_bytes(0), _saved_bytes(16)
    assert kept - chunked >= logits - 16 * 64, (kept, chunked, logits)  # less what it keeps per token (log-sum-exp)


def test_model_with_compiled_layers_equals_reference():
    """`model.compile_blocks`: each layer one `torch.compile` graph, its biases added outside megatron-core's linear
    layers where the compiler can fuse them: the reference's loss and gradients (fp32, no dropout; the compiler's
    summation order differs in the last bits); with dropout, full recomputation replays the compiled layer's masks."""
    ref_loss, ref = _model_run("reference")
    loss, grads = _model_run("reference", compile_blocks=True)
    assert abs(loss - ref_loss).item() < 1e-5
    assert max(((g - ref[n]).abs().max() / ref[n].abs().max()).item() for n, g in grads.items()) < 1e-4
    loss, grads = _model_run("reference", "none", 0.1, compile_blocks=True)
    l, g = _model_run("reference", "full", 0.1, compile_blocks=True)
    assert torch.equal(l, loss) and all(torch.equal(g[n], grads[n]) for n in grads)


def _compiled_layer_graphs(recompute: str, tp_layers: str = "megatron") -> tuple[int, list[str]]:
    "How Dynamo splits one layer of the tiny GPT (dropout on): (graphs, the functions it broke at)."
    from mtnlg.model import GPT, TransformerBlock
    from mtnlg.topology import init_distributed

    init_distributed()
    cfg = load_config(
        os.path.join(os.path.dirname(__file__), "..", "scaled_configs", "tiny.yaml"),
        {
            "model.seq_length": 32,
            "model.compile_blocks": True,
            "model.recompute": recompute,
            "model.tp_layers": tp_layers,
            "model.hidden_dropout": 0.1,
            "model.attention_dropout": 0.1,
        },
    )
    block = next(m for m in GPT(cfg.model, init_seed=1).train().modules() if isinstance(m, TransformerBlock))
    torch._dynamo.reset()
    ex = torch._dynamo.explain(block.layer)(torch.randn(2, 32, cfg.model.hidden_size, requires_grad=True))
    return ex.graph_count, [b.user_stack[-1].line.strip() for b in ex.break_reasons]


@pytest.mark.parametrize("recompute,tp_layers", [("none", "megatron"), ("selective", "megatron"), ("none", "scratch")])
def test_compiled_layer_is_two_whole_graphs(recompute, tp_layers):
    """`model.compile_blocks`: one break per layer, at the attention core (SDPA: one kernel already, with dropout from
    the tensor-parallel stream, whose RNG fork Dynamo cannot trace). Everything else, the projection's bias, dropout and
    residual add, the LayerNorms, the MLP, lands in two whole graphs (megatron-core's row-parallel layer is handed its
    group, so it no longer warns, and breaks, on every call)."""
    graphs, breaks = _compiled_layer_graphs(recompute, tp_layers)
    assert graphs == 2 and len(breaks) == 1 and "attn.attend" in breaks[0], (graphs, breaks)


def test_model_with_compiled_kernels_equals_reference():
    loss, grad = _model_errors("compile")
    assert loss < 1e-5 and grad < 1e-4, (loss, grad)


def test_roofline_counts_the_perf_models_flops_and_finds_the_memory_bound_ops():
    m = load_config(os.path.join(os.path.dirname(__file__), "..", "scaled_configs", "mtnlg-530b.yaml")).model
    dense, attn = layer_forward_flops(m, m.seq_length)
    for fusion in FUSIONS:
        ops = layer_ops(m, 8, 1, fusion)
        assert sum(o.flops for o in ops if o.kind == "matmul") == pytest.approx(dense / 8, rel=1e-12)
        assert sum(o.flops for o in ops if o.kind == "attention") == pytest.approx(attn / 8, rel=1e-12)
    ops = {o.name: o for o in layer_ops(m, 8, 1, "megatron")}
    ridge = ridge_point(GPUS["a100-80gb"])
    assert ridge == pytest.approx(312e12 / 2039e9)
    memory = {
        "LayerNorm 1",
        "LayerNorm 2",
        "scale+mask+softmax",
        "attention dropout",
        "bias+GeLU",
        "bias+dropout+add 1",
        "bias+dropout+add 2",
    }
    # at head size 160 and 2048 keys, the two attention matmuls sit just under the A100's ridge (138 vs 153 FLOP/B)
    assert {n for n, o in ops.items() if o.intensity < ridge} == memory | {"attention scores", "attention x V"}
    scores = 16 * 2048 * 2048  # 16 heads per rank: 2 x scores x 160 FLOPs, read Q, K, write S
    assert ops["attention scores"].intensity == pytest.approx(2 * scores * 160 / ((2 * 2048 * 2560 + scores) * 2))
    assert {n for n, o in ops.items() if o.intensity > 5 * ridge} == {"QKV GEMM", "proj GEMM", "fc1 GEMM", "fc2 GEMM"}
    # bias+GeLU on TP 8: 2048 tokens x 10240 columns, read and written once in bf16 (+ the bias) when fused, twice
    # unfused
    unfused = {o.name: o for o in layer_ops(m, 8, 1, "none")}
    assert ops["bias+GeLU"].bytes == 2048 * 10240 * 2 * 2 + 10240 * 2
    assert unfused["bias+GeLU"].bytes == 2 * 2048 * 10240 * 2 * 2 + 10240 * 2
    # a layer's lower bound falls with each fusion, on every device
    for g in GPUS:
        t = [layer_time(m, g, 8, 1, f) for f in FUSIONS]
        assert t[0] > t[1] > t[2], (g, t)
    with pytest.raises(ValueError, match="fusion must be one of none, megatron, flash"):
        layer_ops(m, fusion="full")


def test_the_model_imports_and_runs_where_triton_is_missing(root):
    "Triton has Linux wheels only: elsewhere `reference` runs and `triton` says what to install."
    code = (
        "import sys; sys.modules['triton'] = None\n"
        "import dataclasses, torch\nfrom mtnlg.config import load_config\nfrom mtnlg.model import GPT\n"
        "from mtnlg.topology import init_distributed\ninit_distributed()\n"
        "m = load_config('scaled_configs/tiny.yaml').model\nt = torch.randint(0, 100, (1, 9))\n"
        "print(torch.isfinite(GPT(m, init_seed=1)(t[:, :-1], t[:, 1:])).all().item())\n"
        "try: GPT(dataclasses.replace(m, kernels='triton'))(t[:, :-1], t[:, 1:])\n"
        "except ImportError as e: print(e)\n"
    )
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    r = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.splitlines() == [
        "True",
        "model.kernels=triton needs `pip install 'triton>=3.3'` (wheels for Linux)",
    ], r.stdout


# ---- the fused linear cross-entropy's PyTorch twin, its vocabulary-parallel form and what it saves


def _errors(ours, truth) -> float:
    return max(((a.float() - b).abs().max() / b.abs().max().clamp_min(1.0)).item() for a, b in zip(ours, truth))


@pytest.mark.parametrize("chunk", [1, 16, 64])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_chunked_cross_entropy_equals_reference(chunk, dtype):
    "Any chunk (one row, not dividing the 37 tokens, more than all of them), any upstream gradient per token."
    h, w, y = K.kernel_inputs("linear_cross_entropy", (37, 24, 100), getattr(torch, dtype))
    truth = K._run(K.linear_cross_entropy_reference, [h.detach().float(), w.detach().float(), y])
    ours = K._run(lambda h, w, y: K.linear_cross_entropy(h, w, y, chunk, kernel="torch"), [h, w, y])
    assert _errors(ours, truth) < TOL[dtype]


def _vocab_parallel(T: int, H: int, V: int, chunk: int) -> dict:
    """On each of the launch's ranks: the loss and gradients with this rank's half of the vocabulary, and the
    reference's."""
    import torch.distributed as dist

    rank, tp = dist.get_rank(), dist.get_world_size()
    h, w, y = (a.detach() for a in K.kernel_inputs("linear_cross_entropy", (T, H, V)))
    part = w[rank * V // tp : (rank + 1) * V // tp].clone().requires_grad_()
    hh = h.clone().requires_grad_()
    loss = K.linear_cross_entropy(hh, part, y, chunk, group=dist.group.WORLD, kernel="torch")
    dy = torch.randn(T, generator=torch.Generator().manual_seed(1))
    dh, dw = torch.autograd.grad(loss, (hh, part), dy)
    dist.all_reduce(dh)  # what copy_to_tp's backward does in the model
    ref = K._run(K.linear_cross_entropy_reference, [h, w, y])
    return {
        "loss": (loss - ref[0]).abs().max().item(),
        "dh": (dh - ref[1]).abs().max().item(),
        "dw": (dw - ref[2][rank * V // tp : (rank + 1) * V // tp]).abs().max().item(),
    }


def test_vocab_parallel_cross_entropy_equals_reference():
    """TP 2 (gloo), a vocabulary of 130 (halves of 65), labels in both halves: the row statistics combined over the
    group give the reference's losses, input gradient (summed over the group) and each half of the weight gradient."""
    from mtnlg.topology import launch

    for r in launch(_vocab_parallel, 2, 37, 24, 130, 16):
        assert max(r.values()) < 1e-5, r


def test_chunked_cross_entropy_never_holds_the_logits():
    "Peak memory of one forward and backward (chapter 98's tracker): chunks of 256 rows against 2048 rows of logits."
    from mtnlg.testing import MemoryTracker

    def peak(fn, T=2048, H=64, V=8192):
        g = torch.Generator().manual_seed(0)
        h, w = torch.randn(T, H, generator=g).requires_grad_(), (torch.randn(V, H, generator=g) / 8).requires_grad_()
        y = torch.randint(0, V, (T,), generator=g)
        with MemoryTracker() as mt:
            with mt.window("loss"):
                fn(h, w, y).mean().backward()
        p = mt.peak("loss")
        return p["peak"] - p["start"]

    logits = 2048 * 8192 * 4
    ref, fused = (
        peak(K.linear_cross_entropy_reference),
        peak(lambda h, w, y: K.linear_cross_entropy(h, w, y, 256, kernel="torch")),
    )
    assert ref >= 2 * logits  # the reference holds the logits and their gradient
    # one chunk of logits (turned into its gradient in place), dW's fp32 sum and one chunk's share of it, dh, and a
    # few fp32 numbers per token (log-sum-exp, label logit, loss, its gradient)
    assert fused <= 256 * 8192 * 4 + 2 * 8192 * 64 * 4 + 2048 * 64 * 4 + 8 * 2048 * 4
    assert ref > 10 * fused


def test_chunked_cross_entropy_rejects_bad_input():
    h, w, y = K.kernel_inputs("linear_cross_entropy", (5, 4, 10))
    with pytest.raises(ValueError, match="kernel must be 'triton', 'torch' or 'liger', got 'cuda'"):
        K.linear_cross_entropy(h, w, y, kernel="cuda")
    with pytest.raises(
        ValueError, match=r"h must be \[tokens, hidden\] and labels \[tokens\], got \(5, 4\) and \(4,\)"
    ):
        K.linear_cross_entropy(h, w, y[:4], kernel="torch")
    with pytest.raises(ValueError, match="chunk must be >= 1, got 0"):
        K.linear_cross_entropy(h, w, y, 0, kernel="torch")
