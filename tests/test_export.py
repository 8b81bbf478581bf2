"""The package is what nbdev_export makes from the notebooks: exporting again changes nothing. The export runs on a copy
of the tree, never in place: rewriting `mtnlg/*.py` while the other test worker imports them (make test runs two)
would let it read a half-written module."""

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _snapshot(root: Path):
    return {p.relative_to(root): p.read_bytes() for p in sorted((root / "mtnlg").rglob("*.py"))}


def test_nbdev_export_is_a_no_op(tmp_path):
    for name in ("settings.ini", "pyproject.toml"):
        shutil.copy(ROOT / name, tmp_path / name)
    shutil.copytree(ROOT / "nbs", tmp_path / "nbs", ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    shutil.copytree(ROOT / "mtnlg", tmp_path / "mtnlg", ignore=shutil.ignore_patterns("__pycache__"))
    exe = Path(sys.executable).parent / "nbdev_export"
    subprocess.run([str(exe)], cwd=tmp_path, check=True, capture_output=True)
    before, after = _snapshot(ROOT), _snapshot(tmp_path)
    changed = sorted(str(k) for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    assert not changed, f"nbdev_export changed {changed}: edit nbs/, run nbdev_export, commit both"
