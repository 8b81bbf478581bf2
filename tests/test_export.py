"The package is what nbdev_export makes from the notebooks: exporting again changes nothing."
import shutil, subprocess, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

def _snapshot():
    return {p.relative_to(ROOT): p.read_bytes() for p in sorted((ROOT / "mtnlg").rglob("*.py"))}

def test_nbdev_export_is_a_no_op():
    before = _snapshot()
    exe = Path(sys.executable).parent / "nbdev_export"
    subprocess.run([str(exe)], cwd=ROOT, check=True, capture_output=True)
    after = _snapshot()
    changed = sorted(str(k) for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    assert not changed, f"nbdev_export changed {changed}: edit nbs/, run nbdev_export, commit both"
