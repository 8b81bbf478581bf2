"""The speed levers bench/gpu.py times as A/B rows (issue 54), checked on the CPU first: torch's fused AdamW takes the
same steps as the default AdamW; liger-kernel is optional, and asking for it without it is refused in one line; where
it is installed, its fused linear cross-entropy gives our per-token losses and gradients (Triton's interpreter on a
CPU)."""

import importlib.util
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
import pytest
import torch
from mtnlg.config import ConfigError, load_config
from mtnlg.data_parallel import make_optimizer
from mtnlg import kernels as K

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "scaled_configs/tiny.yaml"
HAVE_LIGER = importlib.util.find_spec("liger_kernel") is not None


def _five_steps(cfg, fused: bool):
    """A small MLP trained five AdamW steps by `make_optimizer` (`optimizer.fused` = fused): its parameters and the
    optimizer."""
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 64))
    opt = make_optimizer(m, replace(cfg, optimizer=replace(cfg.optimizer, fused=fused)))
    start = [p.detach().clone() for p in m.parameters()]
    for step in range(5):
        x = torch.randn(32, 64, generator=torch.Generator().manual_seed(step))
        m(x).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
    return start, [p.detach().clone() for p in m.parameters()], opt


def test_fused_adamw_takes_the_default_steps():
    cfg = load_config(TINY)
    assert cfg.optimizer.fused is False and load_config(TINY, {"optimizer.fused": True}).optimizer.fused is True
    start, plain, opt = _five_steps(cfg, False)
    _, fused, fopt = _five_steps(cfg, True)
    assert opt.defaults["fused"] is None and fopt.defaults["fused"] is True  # the default run is untouched
    assert min((a - b).abs().max().item() for a, b in zip(plain, start)) > 1e-3  # the steps moved every tensor
    for a, b in zip(plain, fused):  # the same update, in another order:
        torch.testing.assert_close(b, a, rtol=0, atol=1e-7)  # fp32 rounding (1.5e-8 seen)


def test_liger_is_optional_and_refused_clearly_without_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "liger_kernel", None)  # as on a machine without it
    monkeypatch.setitem(sys.modules, "liger_kernel.transformers", None)
    with pytest.raises(ImportError, match="model.kernels=liger needs liger-kernel"):
        K.model_ops("liger")
    h, w, y = K.kernel_inputs("linear_cross_entropy", (5, 4, 10))
    with pytest.raises(ImportError, match="needs liger-kernel"):
        K.linear_cross_entropy(h, w, y, kernel="liger")
    if not HAVE_LIGER:
        with pytest.raises(ConfigError, match=r"`model.kernels`=liger needs liger-kernel \(pip install liger-kernel"):
            load_config(TINY, {"model.kernels": "liger"})


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_LIGER, reason="liger-kernel is optional (a CUDA package): not installed here")
def test_liger_linear_cross_entropy_equals_ours_on_the_cpu():
    """In a fresh process, TRITON_INTERPRET=1 before triton's import: liger's kernels on this CPU, against the PyTorch
    twin."""
    code = """
import torch
from mtnlg import kernels as K
torch.manual_seed(0)
h = torch.randn(16, 32, requires_grad=True)
w = torch.randn(100, 32, requires_grad=True)
y = torch.randint(0, 100, (16,))
ours, lig = K.linear_cross_entropy(h, w, y, 8, kernel="torch"), K.linear_cross_entropy(h, w, y, kernel="liger")
g = torch.rand(16)
a, b = torch.autograd.grad(ours, (h, w), g), torch.autograd.grad(lig, (h, w), g)
print((ours - lig).abs().max().item(), *[(x - z).abs().max().item() for x, z in zip(a, b)])
"""
    env = os.environ | {"TRITON_INTERPRET": "1"}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    loss_err, dh_err, dw_err = map(float, r.stdout.split())
    assert loss_err <= 1e-6 and dh_err <= 1e-5 and dw_err <= 1e-5, r.stdout  # seen: 0.0, 1.4e-6, 1.2e-6


CUDA = torch.cuda.is_available()


@pytest.mark.skipif(not CUDA, reason="the GPU half of the check: bench/GPU_PLAN.md runs it on the device first")
def test_fused_adamw_takes_the_default_steps_on_the_gpu():
    cfg = load_config(TINY)

    def steps(fused):
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256)).cuda()
        opt = make_optimizer(m, replace(cfg, optimizer=replace(cfg.optimizer, fused=fused)))
        for step in range(5):
            x = torch.randn(64, 256, generator=torch.Generator().manual_seed(step)).cuda()
            m(x).pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
        return [p.detach().cpu() for p in m.parameters()]

    for a, b in zip(steps(False), steps(True)):
        torch.testing.assert_close(b, a, rtol=0, atol=1e-6)


@pytest.mark.skipif(
    not (CUDA and HAVE_LIGER), reason="liger-kernel on a GPU: bench/GPU_PLAN.md runs it on the device first"
)
def test_liger_equals_ours_on_the_gpu():
    """liger's LayerNorm against the model's (nn.LayerNorm), its fused linear cross-entropy against our chunked loss,
    fp32 and bf16."""
    from mtnlg.model import LayerNorm

    torch.manual_seed(0)
    for dtype, tol in ((torch.float32, 1e-5), (torch.bfloat16, 2e-2)):
        ours_ln, liger_ln = LayerNorm(512, 1e-5).cuda().to(dtype), LayerNorm(512, 1e-5, "liger").cuda().to(dtype)
        with torch.no_grad():
            ours_ln.weight.normal_()
            ours_ln.bias.normal_()
        liger_ln.load_state_dict(ours_ln.state_dict())
        x = torch.randn(4, 256, 512, device="cuda", dtype=dtype, requires_grad=True)
        a, b = ours_ln(x), liger_ln(x)
        torch.testing.assert_close(b, a, rtol=tol, atol=tol)
        g = torch.randn_like(a)
        for u, v in zip(
            torch.autograd.grad(a, (x, ours_ln.weight), g), torch.autograd.grad(b, (x, liger_ln.weight), g)
        ):
            torch.testing.assert_close(v, u, rtol=tol, atol=tol * 50)  # the weight's gradient: a sum over 1024 rows
        h = torch.randn(1024, 512, device="cuda", dtype=dtype, requires_grad=True)
        w = (torch.randn(50304, 512, device="cuda") * 0.02).to(dtype).requires_grad_()
        y = torch.randint(0, 50257, (1024,), device="cuda")
        ours, lig = (
            K.linear_cross_entropy(h, w, y, 256, kernel="torch"),
            K.linear_cross_entropy(h, w, y, kernel="liger"),
        )
        torch.testing.assert_close(lig.float(), ours.float(), rtol=tol, atol=tol)
        g = torch.rand(1024, device="cuda")
        for u, v in zip(torch.autograd.grad(ours, (h, w), g), torch.autograd.grad(lig, (h, w), g)):
            torch.testing.assert_close(v.float(), u.float(), rtol=tol, atol=tol)
