"""The README's measured figures are what bench/results/*.json say: `bench/report.py --check` regenerates the
benchmark rows from the JSONs and fails if README.md differs."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_readme_measured_figures_are_written_from_bench_results():
    r = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "report.py"), "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-1000:]


def test_every_benchmark_reports_median_min_max_of_at_least_5_runs():
    "Each result holds summaries (median, min, max, runs >= 5) for the figures the README shows."
    sys.path.insert(0, str(ROOT / "bench"))
    import report

    def summaries(x):
        if isinstance(x, dict):
            if {"median", "min", "max", "runs"} <= x.keys():
                yield x
            else:
                for v in x.values():
                    yield from summaries(v)
        elif isinstance(x, list):
            for v in x:
                yield from summaries(v)

    gpu = ("gpu-*.json",) if list(report.RESULTS.glob("gpu-*.json")) else ()  # bench/gpu.py: once a GPU has run it
    for pattern in (
        "engine-*.json",
        "dedup-2*-cpu.json",
        "eval-*-cpu.json",
        "memory-cpu-*.json",
        "checkpoint-cpu-*.json",
        "generate-*.json",
        "kernels-*.json",
        *gpu,
    ):
        path, data = report.newest(pattern)
        found = list(summaries(data))
        assert found, f"{path.name}: no median/min/max summaries"
        assert all(s["runs"] >= 5 and s["min"] <= s["median"] <= s["max"] for s in found), path.name
        assert "shared" in data["hardware"]["shared_machine"], path.name


def test_kernel_bench_host_diagnostics_see_a_wait_inside_a_call():
    """bench/kernels.py's host_seconds and host_ops (what a launch-bound Triton kernel is measured with), on this CPU: a
    call that sleeps 20 ms is 20 ms of host time, and the profile names the ops of a call."""
    import time
    import torch

    sys.path.insert(0, str(ROOT / "bench"))
    import kernels as bench

    x = torch.randn(64, 64, requires_grad=True)

    def call():
        time.sleep(0.02)
        torch.autograd.grad((x @ x).sum(), [x])

    assert 0.02 <= bench.host_seconds(call, calls=3) < 0.5
    ops = bench.host_ops(call, top=20, calls=2)
    assert "aten::mm" in {o["op"] for o in ops} and all(o["self_cpu_us"] >= 0 and o["calls"] > 0 for o in ops)


def test_engine_bench_splits_the_plain_step_into_its_phases():
    """bench/engine.py's split of the plain loop's step (chapter 41's `train_step`): a forward that sleeps 20 ms and a
    backward that sleeps 100 ms are found as such (neither counted in the other, with 80 ms of slack for a loaded
    machine), and clipping and the AdamW step are timed once each."""
    import contextlib
    import time
    import torch

    sys.path.insert(0, str(ROOT / "bench"))
    import engine as bench
    from mtnlg.train import train_step

    class Slow(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(3))

        def forward(self, x, y):
            time.sleep(0.02)
            return SlowBackward.apply((self.w * x.float()).sum(-1, keepdim=True).expand(-1, y.shape[1]))

    class SlowBackward(torch.autograd.Function):
        @staticmethod
        def forward(ctx, z):
            return z.clone()

        @staticmethod
        def backward(ctx, g):
            time.sleep(0.1)
            return g

    model = Slow()
    opt = torch.optim.AdamW(model.parameters())
    clip = torch.nn.utils.clip_grad_norm_
    with bench.time_plain_phases(model, opt) as spent:
        t0 = time.perf_counter()
        train_step(model, opt, torch.ones(2, 4, dtype=torch.long), 2, 1.0, contextlib.nullcontext)  # one micro-batch
        total = time.perf_counter() - t0
    assert torch.nn.utils.clip_grad_norm_ is clip and "step" not in vars(opt)  # everything put back
    assert not model._forward_hooks and not model._forward_pre_hooks
    backward = spent["forward and backward"] - spent["forward"]
    assert 0.02 <= spent["forward"] < 0.1 <= backward < 0.5
    assert 0 < spent["clip"] < 0.1 and 0 < spent["AdamW step"] < 0.1
    assert spent["forward and backward"] + spent["clip"] + spent["AdamW step"] <= total


def test_ratio_interval_brackets_the_ratio_of_medians_and_narrows_with_steadier_runs():
    """bench/stats.py's bootstrap interval of a ratio of medians (the engine's ratio is reported with it): pairs with
    the same ratio give that ratio exactly; noisy pairs give an interval around the measured ratio that is wider than
    for the same pairs with less noise; unpaired or too few runs are refused."""
    import random
    import pytest

    sys.path.insert(0, str(ROOT / "bench"))
    from stats import ratio_interval

    base = [100.0 + i for i in range(20)]
    assert ratio_interval([0.95 * x for x in base], base) == pytest.approx((0.95, 0.95))
    rng = random.Random(1)
    noise = [rng.gauss(0, 1) for _ in base]

    def interval(scale):
        a = [0.95 * x + scale * n for x, n in zip(base, noise)]
        lo, hi = ratio_interval(a, base)
        point = sorted(a)[len(a) // 2 - 1 : len(a) // 2 + 1]
        assert lo <= sum(point) / 2 / ((base[9] + base[10]) / 2) <= hi
        return hi - lo

    assert 0 < interval(1.0) < interval(8.0)
    with pytest.raises(ValueError, match="paired"):
        ratio_interval(base, base[:-1])
    with pytest.raises(ValueError, match="at least 5"):
        ratio_interval(base[:3], base[:3])


def test_engine_bench_break_even_step_is_where_the_ratio_meets_its_target():
    """bench/engine.py's reading of its fixed per-step overhead: a plain step of `break_even_ms` plus the engine's extra
    time gives exactly the target ratio; a longer plain step gives more, a shorter one less."""
    sys.path.insert(0, str(ROOT / "bench"))
    import engine as bench

    o = {"extra_ms_per_step": {"median": 2.6}, "target_ratio": 0.95}
    t = bench.break_even_ms(o)
    assert abs(t - 49.4) < 1e-9 and abs(t / (t + 2.6) - 0.95) < 1e-12
    assert (2 * t) / (2 * t + 2.6) > 0.95 > (t / 2) / (t / 2 + 2.6)


def test_benchmarks_record_the_cpu_model_and_the_vector_instructions_torch_uses():
    """Two x86_64 machines can differ 1.5x in matmul speed: results name the CPU (from /proc/cpuinfo) and torch's
    kernels."""
    import torch

    sys.path.insert(0, str(ROOT / "bench"))
    import stats

    hw = stats.hardware()
    assert hw["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    if Path("/proc/cpuinfo").exists() and "model name" in Path("/proc/cpuinfo").read_text():
        assert hw["cpu_model"] and hw["cpu_model"] in Path("/proc/cpuinfo").read_text()


def test_benchmarks_write_results_only_when_asked():
    """DESIGN §9: a benchmark that can write bench/results/*.json does so only with --save, so a casual run leaves the
    tree clean."""
    helpers = (
        "report.py",
        "stats.py",
        "crawl.py",
        "datatrove_side.py",
        "good_pages_crawl.py",
    )  # they write no result: inputs (bench/curate.py's, chapter 31's), the datatrove run
    writers = [p for p in sorted((ROOT / "bench").glob("*.py")) if p.name not in helpers]  # every benchmark
    assert {p.name for p in writers} >= {
        "checkpoint.py",
        "curate.py",
        "dedup.py",
        "engine.py",
        "eval.py",
        "generate.py",
        "gpu.py",
        "kernels.py",
        "memory.py",
    }
    for p in helpers[2:]:
        assert "bench/results" not in (ROOT / "bench" / p).read_text()
    for p in writers:
        assert 'add_argument("--save"' in p.read_text(), f"{p.name} writes bench/results without being asked (--save)"
