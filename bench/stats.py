"""What every benchmark reports: median, min and max over at least 5 runs (never only the most favourable run), ratios
of medians, and the machine it ran on — which, here, is shared with other work."""

import os
import platform
import statistics

MIN_RUNS = 5
SHARED = (
    "2 CPU cores shared with other jobs (tests and builds of other sessions ran at the same time): "
    "absolute rates move with their load; the spread (min..max) shows how much"
)


def summary(values, runs_needed: int = MIN_RUNS) -> dict:
    "Median, min, max and the runs themselves; refuses fewer than `runs_needed` runs."
    values = [float(v) for v in values]
    if len(values) < runs_needed:
        raise ValueError(f"{len(values)} runs; a benchmark reports at least {runs_needed}")
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "runs": len(values),
        "values": values,
    }


def ratio_of_medians(a: dict, b: dict) -> float:
    "median(a) / median(b) of two `summary`s."
    return a["median"] / b["median"]


def ratio_interval(a: list, b: list, level: float = 0.95, resamples: int = 2000, seed: int = 0) -> tuple[float, float]:
    """Bootstrap interval of median(a) / median(b) over paired runs (run i of `a` alternated with run i of `b`; pairs
    are resampled together): the range the ratio of medians would likely take on another run of the same length."""
    import random

    if len(a) != len(b):
        raise ValueError(f"paired runs needed: {len(a)} vs {len(b)}")
    if len(a) < MIN_RUNS:
        raise ValueError(f"{len(a)} pairs; a benchmark reports at least {MIN_RUNS}")
    rng, n = random.Random(seed), len(a)
    ratios = []
    for _ in range(resamples):
        idx = [rng.randrange(n) for _ in range(n)]
        ratios.append(statistics.median(a[i] for i in idx) / statistics.median(b[i] for i in idx))
    ratios.sort()
    tail = (1 - level) / 2
    return ratios[int(tail * resamples)], ratios[min(resamples - 1, int((1 - tail) * resamples))]


def fmt(s: dict, spec: str = ".0f", unit: str = "") -> str:
    "`median (min–max, n runs)`."
    return f"{s['median']:{spec}}{unit} (min {s['min']:{spec}}, max {s['max']:{spec}}, {s['runs']} runs)"


def cpu_model() -> str | None:
    "The CPU's model name as the kernel reports it (/proc/cpuinfo), or None where there is none."
    try:
        lines = open("/proc/cpuinfo").read().splitlines()
    except OSError:
        return None
    return next((l.split(":", 1)[1].strip() for l in lines if l.startswith("model name")), None)


def hardware(**extra) -> dict:
    """The machine: CPU (architecture, model and the vector instructions torch's kernels use: machines with the same
    architecture differ in matmul speed, and a ratio against a fixed overhead moves with it), cores, torch, load
    average, and the note that it is shared."""
    import torch

    return {
        "cpu": platform.processor() or platform.machine(),
        "cpu_model": cpu_model(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cores": os.cpu_count(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "load_avg_1min_start": os.getloadavg()[0],
        "shared_machine": SHARED,
        **extra,
    }
