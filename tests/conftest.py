import os, sys
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parent.parent

@pytest.fixture
def root(): return ROOT

def shared_data() -> Path | None:
    "`../shared/data` beside the checkout (developers and CI), or $MTNLG_SHARED_DATA; None if absent."
    for p in (os.environ.get("MTNLG_SHARED_DATA"), ROOT.parent / "shared" / "data"):
        if p and Path(p).is_dir(): return Path(p)
    return None
