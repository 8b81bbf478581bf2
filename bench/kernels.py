"""Chapter 20's kernels measured: each kernel's eager PyTorch reference, `torch.compile` of it, and the Triton kernel
(attention: also `F.scaled_dot_product_attention`), forward and forward+backward, at the shapes of one 530B layer on
TP 8 (micro-batch 1, seq 2048) and of gpt-1.3b (micro-batch 8, seq 2048); then the whole model end to end (tokens/s
and MFU of gpt-125m and gpt-1.3b, one GPU, bf16 weights, forward + backward + fused AdamW on random tokens) with each
`model.kernels` choice.

    python bench/kernels.py [--repeats 7] [--save] [--skip-model] [--steps 6]

On a GPU every timing is the median, min and max of --repeats runs (>= 5; each run times several calls between CUDA
events); ratios are of medians against eager PyTorch measured in the same run; achieved GB/s counts the bytes a kernel
must move (inputs read once, outputs written once) against the device's peak HBM bandwidth from `mtnlg.counting.GPUS`.
Where forward+backward's wall time exceeds its GPU-busy time (the profiler's kernel time), each row also says why:
`fwd_bwd_host_s`, the host time to issue one call (near the wall time: launch-bound), and `fwd_bwd_host_ops`, the
host-side ops of a call by self CPU time (a synchronisation or copy in there: the call waits for the GPU).
With --save it writes bench/results/kernels-<date>-<device>.json. Without a GPU it checks correctness only (Triton's
interpreter, tiny shapes) and says that nothing was timed. Needs torch, triton and megatron-core (no DeepSpeed).
"""

import argparse
import datetime
import json
import os
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))
from stats import summary, ratio_of_medians, fmt, hardware, MIN_RUNS

# (kernel, label, shape as kernel_inputs takes it, bf16 bytes moved by forward / backward per element of the main
# tensor)
SHAPES = {
    "530b-tp8": {
        "softmax": (1, 16, 2048),
        "bias_gelu": (2048, 10240),
        "bias_dropout_add": (2048, 20480),
        "layer_norm": (2048, 20480),
        "attention": (1, 16, 2048, 160),
    },
    "gpt-1.3b": {
        "softmax": (8, 16, 2048),
        "bias_gelu": (16384, 8192),
        "bias_dropout_add": (16384, 2048),
        "layer_norm": (16384, 2048),
        "attention": (8, 16, 2048, 128),
    },
}
# passes over the main tensor a kernel cannot avoid: forward (read + write), backward (reads + writes)
PASSES = {"softmax": (2, 3), "bias_gelu": (2, 3), "bias_dropout_add": (3, 2), "layer_norm": (2, 3)}


def scaled(s: dict, k: float) -> dict:
    "A `summary` with its median, min and max multiplied by k (units)."
    return {**s, **{key: s[key] * k for key in ("median", "min", "max")}}


def gpu_spec(name: str):
    "The `mtnlg.counting.GPUS` entry for a CUDA device name."
    from mtnlg.counting import GPUS

    for pattern, key in (("H200", "h200"), ("H100", "h100"), ("A100", "a100-80gb")):
        if pattern in name:
            return GPUS[key]
    raise SystemExit(f"no peak numbers for {name!r} in mtnlg.counting.GPUS: add it there")


def cuda_times(fn, repeats: int, inner: int = 10, warmup: int = 3) -> list[float]:
    "Seconds per call of `fn`, one value per run of `inner` calls timed with CUDA events."
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(repeats):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(inner):
            fn()
        b.record()
        torch.cuda.synchronize()
        out.append(a.elapsed_time(b) / 1e3 / inner)
    return out


def gpu_correctness() -> list[dict]:
    """Every Triton kernel, compiled for this GPU, against its reference: odd sizes, fp32 and bf16 (the tests'
    tolerances)."""
    import torch
    from mtnlg import kernels as K

    cases = {
        "softmax": [(2, 3, 37), (1, 1, 1), (1, 4, 1000)],
        "bias_gelu": [(37, 100), (1, 7), (300, 5000)],
        "bias_dropout_add": [(37, 100), (1, 7), (300, 5000)],
        "layer_norm": [(37, 100), (1, 7), (300, 20480)],
        "attention": [(2, 3, 37, 24), (1, 2, 1, 16), (2, 4, 300, 64), (1, 2, 257, 128), (1, 2, 130, 160)],
        "linear_cross_entropy": [(37, 24, 100), (1, 8, 7), (300, 64, 6400)],
    }
    out = []
    for name, shapes in cases.items():
        for shape in shapes:
            for dt, tol in ((torch.float32, 1e-5 if name != "attention" else 1e-4), (torch.bfloat16, 2e-2)):
                e = K.kernel_errors(name, shape, dt, device="cuda")
                ok = max(e.values()) < tol
                out.append(
                    {"kernel": name, "shape": list(shape), "dtype": str(dt)[6:], **e, "tolerance": tol, "ok": ok}
                )
                if not ok:
                    print(f"GPU correctness FAILED: {name} {shape} {dt}: {e} (tolerance {tol})")
    print(
        f"GPU correctness: {sum(r['ok'] for r in out)} of {len(out)} kernel cases within tolerance "
        f"(worst fp32 {max(max(r['forward'], r['backward']) for r in out if r['dtype'] == 'float32'):.1e}, "
        f"worst bf16 {max(max(r['forward'], r['backward']) for r in out if r['dtype'] == 'bfloat16'):.1e})"
    )
    return out


def device_seconds(fn, calls: int = 5) -> float:
    "Seconds per call that GPU kernels ran (torch.profiler, CUDA activity only): the time without launch gaps."
    import torch
    from torch.profiler import profile, ProfilerActivity

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    return sum(e.self_device_time_total for e in prof.key_averages()) / calls / 1e6


def _sync():
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def host_seconds(fn, calls: int = 10) -> float:
    """Seconds per call the host spends issuing `fn`: the device drained first, then `calls` calls with no wait between
    them. Near the wall time when a kernel is launch-bound; far below it when something inside `fn` waits for the
    device."""
    fn()
    _sync()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t = (time.perf_counter() - t0) / calls
    _sync()
    return t


def host_ops(fn, top: int = 8, calls: int = 5) -> list[dict]:
    """The host-side work of one call by self CPU time: PyTorch ops and CUDA runtime/driver calls (a launch, a
    synchronisation, an allocation), microseconds per call. Python time between them (a Triton launcher's) is the rest
    of `host_seconds`."""
    import torch
    from torch.profiler import profile, ProfilerActivity

    fn()
    _sync()
    with profile(
        activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    ) as prof:
        for _ in range(calls):
            fn()
        _sync()
    events = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[:top]
    return [{"op": e.key, "self_cpu_us": e.self_cpu_time_total / calls, "calls": e.count / calls} for e in events]


def model_correctness() -> dict:
    """The tiny GPT on the GPU, fp32: each kernel choice's loss and gradients against `reference` (dropout off), and
    with dropout on whether selective and full recomputation reproduce `none` bit for bit for each choice."""
    import torch
    from mtnlg.config import load_config
    from mtnlg.topology import init_distributed, seed_everything
    from mtnlg.model import GPT

    init_distributed()

    def run(kernels, recompute="none", dropout=0.0):
        cfg = load_config(
            ROOT / "scaled_configs" / "tiny.yaml",
            {
                "model.kernels": kernels,
                "model.recompute": recompute,
                "model.hidden_dropout": dropout,
                "model.attention_dropout": dropout,
                "model.seq_length": 64,
            },
        )
        seed_everything(3, "cuda")
        model = GPT(cfg.model, init_seed=1).cuda().train()
        tokens = torch.randint(0, cfg.model.vocab_size, (4, 65), generator=torch.Generator().manual_seed(0)).cuda()
        loss = model(tokens[:, :-1], tokens[:, 1:]).mean()
        loss.backward()
        return loss.detach(), {n: p.grad for n, p in model.named_parameters()}

    ref_loss, ref = run("reference")
    out = {}
    for kernels in ("reference", "triton", "compile"):
        loss, grads = run(kernels)
        err = max(((g - ref[n]).abs().max() / ref[n].abs().max()).item() for n, g in grads.items())
        base = run(kernels, "none", 0.1)
        same = {
            mode: (lambda o: torch.equal(o[0], base[0]) and all(torch.equal(o[1][n], base[1][n]) for n in base[1]))(
                run(kernels, mode, 0.1)
            )
            for mode in ("selective", "full")
        }
        out[kernels] = {"loss_error": abs(loss - ref_loss).item(), "grad_error": err, "recompute_bitwise": same}
        print(
            f"tiny GPT on the GPU, kernels={kernels:9s}: loss error {out[kernels]['loss_error']:.1e}, largest gradient "
            f"error {err:.1e} vs reference; with dropout, recompute selective/full bitwise = "
            f"{same['selective']}/{same['full']}"
        )
    return out


def kernel_bench(args, gpu) -> list[dict]:
    import torch
    from mtnlg import kernels as K

    rows = []
    for label, shapes in SHAPES.items():
        for name, shape in shapes.items():
            inputs = [
                a.detach().requires_grad_() if isinstance(a, torch.Tensor) else a
                for a in K.kernel_inputs(name, shape, torch.bfloat16, "cuda")
            ]
            tensors = [a for a in inputs if isinstance(a, torch.Tensor)]
            reference, triton_fn = K.KERNELS[name]
            if name == "bias_dropout_add":  # eager: torch's dropout (its own mask), the same probability
                reference = lambda x, b, r, p, s: K.bias_dropout_add_reference(x, b, r, p, training=True)
            variants = {"eager": reference, "compile": torch.compile(reference, dynamic=False), "triton": triton_fn}
            if name == "attention":
                variants = {"eager (SDPA)": lambda q, k, v: K.attention_sdpa(q, k, v), **variants}
            if name == "attention":
                variants["eager (math)"] = variants.pop("eager")
            main = tensors[0]
            dy = torch.randn_like(variants["triton"](*inputs))
            for variant, fn in variants.items():
                if (
                    name == "attention"
                    and variant in ("eager (math)", "compile")
                    and shape[0] * shape[1] * shape[2] ** 2 > 2**27
                ):
                    continue  # the math path materialises b x h x s x s fp32 scores: skipped where that is > 0.5 GB
                fwd = lambda: fn(*inputs)

                def fwd_bwd():
                    torch.autograd.grad(fn(*inputs), tensors, dy)

                try:
                    t_f, t_fb = cuda_times(fwd, args.repeats), cuda_times(fwd_bwd, args.repeats)
                except Exception as e:  # report, do not hide: a variant that fails is a result
                    rows.append(
                        {"shape": label, "kernel": name, "variant": variant, "error": f"{type(e).__name__}: {e}"[:300]}
                    )
                    print(f"{label:9s} {name:17s} {variant:13s} FAILED: {rows[-1]['error']}")
                    continue
                row = {
                    "shape": label,
                    "kernel": name,
                    "variant": variant,
                    "dims": list(shape),
                    "forward_s": summary(t_f),
                    "fwd_bwd_s": summary(t_fb),
                    "fwd_bwd_gpu_busy_s": device_seconds(fwd_bwd),
                }
                try:  # where a wall time above the GPU-busy time goes: issuing work, or waiting inside the call
                    row["fwd_bwd_host_s"], row["fwd_bwd_host_ops"] = host_seconds(fwd_bwd), host_ops(fwd_bwd)
                except Exception as e:
                    row["host_error"] = f"{type(e).__name__}: {e}"[:300]
                if name == "attention":
                    b, h, s, d = shape
                    flops = 4 * b * h * s * s * d / 2  # causal: half the scores
                    row["forward_tflops"] = flops / row["forward_s"]["median"] / 1e12
                    row["fwd_bwd_tflops"] = 3.5 * flops / row["fwd_bwd_s"]["median"] / 1e12  # backward = 2.5 forwards
                    row["fraction_of_peak"] = row["fwd_bwd_tflops"] / gpu.peak_tflops
                else:
                    f, bw = PASSES[name]
                    nbytes = main.numel() * main.element_size()
                    row["forward_gbps"] = f * nbytes / row["forward_s"]["median"] / 1e9
                    row["fwd_bwd_gbps"] = (f + bw) * nbytes / row["fwd_bwd_s"]["median"] / 1e9
                    row["fraction_of_peak"] = row["fwd_bwd_gbps"] / gpu.hbm_gbps
                    row["fraction_of_peak_gpu_busy"] = (
                        (f + bw) * nbytes / row["fwd_bwd_gpu_busy_s"] / 1e9 / gpu.hbm_gbps
                    )
                rows.append(row)
            base = next(r for r in rows if r["shape"] == label and r["kernel"] == name and "error" not in r)
            for r in rows:
                if r["shape"] == label and r["kernel"] == name and "error" not in r:
                    r["speedup_vs_" + base["variant"]] = {
                        k: ratio_of_medians(base[k], r[k]) for k in ("forward_s", "fwd_bwd_s")
                    }
                    rate = (
                        f"{r['fwd_bwd_tflops']:6.0f} TFLOP/s"
                        if name == "attention"
                        else f"{r['fwd_bwd_gbps']:6.0f} GB/s"
                    )
                    print(
                        f"{label:9s} {name:17s} {r['variant']:13s} fwd {r['forward_s']['median'] * 1e6:8.1f} us  "
                        f"fwd+bwd {fmt(scaled(r['fwd_bwd_s'], 1e6), '.1f', ' us')}  "
                        f"{rate} = {r['fraction_of_peak']:.0%} of peak"
                        + (
                            f" ({r['fraction_of_peak_gpu_busy']:.0%} over GPU-busy time "
                            f"{r['fwd_bwd_gpu_busy_s'] * 1e6:.0f} us)  "
                            if "fraction_of_peak_gpu_busy" in r
                            else f" (GPU-busy {r['fwd_bwd_gpu_busy_s'] * 1e6:.0f} us)  "
                        )
                        + (f"host {r['fwd_bwd_host_s'] * 1e6:.0f} us  " if "fwd_bwd_host_s" in r else "")
                        + f"x{r['speedup_vs_' + base['variant']]['fwd_bwd_s']:.2f} vs {base['variant']}"
                    )
    return rows


def model_bench(args, gpu) -> list[dict]:
    import torch
    import dataclasses
    from mtnlg.config import load_config
    from mtnlg.model import GPT
    from mtnlg.counting import flops_per_iteration
    from mtnlg.topology import init_distributed, seed_everything

    init_distributed()
    rows = []
    for config in ("gpt-125m", "gpt-1.3b"):
        cfg = load_config(ROOT / "scaled_configs" / f"{config}.yaml")
        mb, s = cfg.schedule.micro_batch_size, cfg.model.seq_length
        flops = flops_per_iteration(cfg.model, mb, "none")  # model FLOPs of one micro-batch step
        for kernels in ("reference", "compile", "triton"):
            m = dataclasses.replace(
                cfg.model, kernels=kernels, hidden_dropout=args.dropout, attention_dropout=args.dropout
            )
            seed_everything(0, "cuda")
            t0 = time.perf_counter()
            model = GPT(m, init_seed=0).to(device="cuda", dtype=torch.bfloat16).train()
            opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
            tokens = torch.randint(0, m.vocab_size, (mb, s + 1), device="cuda")

            def step():
                opt.zero_grad(set_to_none=True)
                loss = model(tokens[:, :-1], tokens[:, 1:]).float().mean()
                loss.backward()
                opt.step()
                return loss

            try:
                for _ in range(2):
                    step()  # warm-up (and compilation)
                torch.cuda.synchronize()
                built = time.perf_counter() - t0
                times = []
                for _ in range(max(args.steps, MIN_RUNS)):
                    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    a.record()
                    loss = step()
                    b.record()
                    torch.cuda.synchronize()
                    times.append(a.elapsed_time(b) / 1e3)
            except Exception as e:
                rows.append({"config": config, "kernels": kernels, "error": f"{type(e).__name__}: {e}"[:300]})
                print(f"{config:9s} {kernels:9s} FAILED: {rows[-1]['error']}")
                model = opt = None  # free the failed configuration's memory
                torch.cuda.empty_cache()
                continue
            t = summary(times)
            row = {
                "config": config,
                "kernels": kernels,
                "micro_batch": mb,
                "seq": s,
                "dropout": args.dropout,
                "step_s": t,
                "tokens_per_s": summary([mb * s / x for x in times]),
                "mfu": flops / (t["median"] * gpu.peak_tflops * 1e12),
                "loss": loss.item(),
                "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30,
                "setup_s": built,
            }
            rows.append(row)
            print(
                f"{config:9s} {kernels:9s} {fmt(row['tokens_per_s'], '.0f', ' tokens/s')}  MFU {row['mfu']:.1%}  "
                f"loss {row['loss']:.3f}  peak {row['peak_memory_gib']:.1f} GiB  (build + warm-up {built:.0f} s)"
            )
            model = opt = tokens = None  # free this configuration before the next
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        base = next(
            (r for r in rows if r["config"] == config and r["kernels"] == "reference" and "error" not in r), None
        )
        for r in rows:
            if base and r["config"] == config and "error" not in r:
                r["speedup_vs_reference"] = ratio_of_medians(r["tokens_per_s"], base["tokens_per_s"])
                print(f"{config:9s} {r['kernels']:9s} x{r['speedup_vs_reference']:.2f} tokens/s vs reference (medians)")
    return rows


def correctness_only():
    "No GPU: every kernel against its reference in Triton's interpreter (a fresh process with TRITON_INTERPRET=1)."
    import subprocess

    code = (
        "import torch\nfrom mtnlg import kernels as K\nassert K._interpreted()\n"
        "for name, shape in [('softmax', (2, 3, 37)), ('bias_gelu', (37, 100)), ('bias_dropout_add', (37, 100)),"
        " ('layer_norm', (37, 100)), ('attention', (2, 3, 37, 24)),"
        " ('linear_cross_entropy', (37, 24, 100))]:\n"
        "    for dt, tol in ((torch.float32, 1e-5), (torch.bfloat16, 2e-2)):\n"
        "        e = K.kernel_errors(name, shape, dt)\n"
        '        print(f\'{name:17s} {str(dt):15s} fwd {e["forward"]:.1e} bwd {e["backward"]:.1e}\', '
        "'ok' if max(e.values()) < tol else 'FAIL')\n"
        "        assert max(e.values()) < tol\n"
    )
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    subprocess.run([sys.executable, "-c", code], check=True, env=env)
    print("no CUDA device: correctness checked in Triton's interpreter; GPU timing was not measured")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--steps", type=int, default=6, help="timed training steps per model and kernel choice (>= 5)")
    ap.add_argument(
        "--dropout",
        type=float,
        default=0.0,
        help="hidden and attention dropout of the end-to-end runs (0: the triton choice runs its flash attention)",
    )
    ap.add_argument("--skip-model", action="store_true", help="kernels only, no end-to-end runs")
    ap.add_argument("--save", action="store_true")
    args = ap.parse_args(argv)
    if args.repeats < MIN_RUNS:
        ap.error(f"--repeats must be >= {MIN_RUNS}")
    import torch

    if not torch.cuda.is_available():
        return correctness_only()
    import warnings

    warnings.filterwarnings("ignore", message=".*Transformer Engine and Apex.*")
    name = torch.cuda.get_device_name()
    gpu = gpu_spec(name)
    print(f"{name}: peak {gpu.peak_tflops} TFLOP/s bf16, {gpu.hbm_gbps} GB/s HBM (mtnlg.counting.GPUS['{gpu.name}'])")
    t0 = time.perf_counter()
    correctness = gpu_correctness()
    try:
        model_check = model_correctness()
    except Exception as e:  # report it and go on to the timings
        model_check = {"error": f"{type(e).__name__}: {e}"[:300]}
        print(f"model correctness FAILED: {model_check['error']}")
    kernels = kernel_bench(args, gpu)
    model = [] if args.skip_model else model_bench(args, gpu)
    print(f"total {time.perf_counter() - t0:.0f} s")
    if args.save:
        device = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
        out = ROOT / "bench" / "results" / f"kernels-{datetime.date.today()}-{device}.json"
        import triton

        out.write_text(
            json.dumps(
                {
                    "date": str(datetime.date.today()),
                    "hardware": hardware(
                        triton=triton.__version__, shared_machine=("not shared: one GPU machine lent to this run alone")
                    ),
                    "peak": {"tflops": gpu.peak_tflops, "hbm_gbps": gpu.hbm_gbps},
                    "correctness": correctness,
                    "model_correctness": model_check,
                    "kernels": kernels,
                    "model": model,
                },
                indent=1,
            )
        )
        print(f"wrote {out}")


if __name__ == "__main__":
    main()
