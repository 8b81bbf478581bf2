"""One way to train the tiny model for a test: `mtnlg train --config scaled_configs/tiny.yaml` in a subprocess (the
test's process keeps no training state), with `--set` overrides."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def train_tiny(run: Path, **sets) -> Path:
    "Train tiny.yaml into `run` with the overrides `sets` (config keys, as `--set` takes them); its checkpoints/ root."
    argv = [str(Path(sys.executable).parent / "mtnlg"), "train", "--config", str(ROOT / "scaled_configs" / "tiny.yaml")]
    argv += [a for k, v in sets.items() for a in ("--set", f"{k}={v}")]
    subprocess.run([*argv, "--run-dir", str(run), "--no-progress"], cwd=ROOT, check=True, capture_output=True)
    return Path(run) / "checkpoints"
