"""What every benchmark reports: median, min and max over at least 5 runs (never only the most favourable run), ratios
of medians, and the machine it ran on — which, here, is shared with other work."""
import os, platform, statistics

MIN_RUNS = 5
SHARED = ("2 CPU cores shared with other jobs (tests and builds of other sessions ran at the same time): "
          "absolute rates move with their load; the spread (min..max) shows how much")

def summary(values, runs_needed: int = MIN_RUNS) -> dict:
    "Median, min, max and the runs themselves; refuses fewer than `runs_needed` runs."
    values = [float(v) for v in values]
    if len(values) < runs_needed: raise ValueError(f"{len(values)} runs; a benchmark reports at least {runs_needed}")
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "runs": len(values), "values": values}

def ratio_of_medians(a: dict, b: dict) -> float:
    "median(a) / median(b) of two `summary`s."
    return a["median"] / b["median"]

def fmt(s: dict, spec: str = ".0f", unit: str = "") -> str:
    "`median (min–max, n runs)`."
    return f"{s['median']:{spec}}{unit} (min {s['min']:{spec}}, max {s['max']:{spec}}, {s['runs']} runs)"

def hardware(**extra) -> dict:
    "The machine: CPU, cores, torch, load average, and the note that it is shared."
    import torch
    return {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(), "torch": torch.__version__,
            "python": platform.python_version(), "platform": platform.platform(),
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
            "load_avg_1min_start": os.getloadavg()[0], "shared_machine": SHARED, **extra}
