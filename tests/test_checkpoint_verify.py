"""`mtnlg checkpoint verify` beside a running job, and checkpoints from before checksums (chapter 43): a step the job
prunes or saves again while verify reads it is said so, not called corrupt, and the exit status says nothing corrupt
was found; the hint names the step `--resume auto` takes (the same `resume_step`); an old-format (v1) step warns on
load and makes verify exit 3. The job's prune and save run inside verify's read, at a chosen file: deterministic."""

import json
import re
import shutil
from pathlib import Path
import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
TOKENIZER = ROOT / "tests/fixtures/curated/tokenizer.json"


def shard(value: float) -> dict:
    "A small rank file: a weight and its Adam state, all `value` (another value: other bytes, another checksum)."
    w = torch.full((64, 64), value)
    return {
        "model": {"w": w},
        "shape": {"w": [64, 64]},
        "tp_dim": {"w": -1},
        "fragments": {"w": {"start": 0, "master": w.clone(), "exp_avg": w.clone(), "exp_avg_sq": w.clone()}},
        "optimizer_step": 3,
        "rng": {"torch": torch.get_rng_state()},
    }


@pytest.fixture
def job(tmp_path):
    "A checkpoints root with steps 4 and 8 (`latest`: 8), and the running job's `save(step, value)` into it."
    from mtnlg.checkpoint import save_checkpoint
    from mtnlg.config import load_config
    from mtnlg.topology import Layout, init_distributed

    init_distributed(Layout(1, 1, 1))
    cfg, root = load_config(ROOT / "scaled_configs/tiny.yaml"), tmp_path / "checkpoints"
    save = lambda step, value=1.0: save_checkpoint(
        root, step, shard(value), cfg, Layout(1, 1, 1), TOKENIZER, {"consumed_samples": step}, keep_last=10
    )
    save(4)
    save(8)
    return root, save


def verify(root, capsys) -> tuple[list[str], int]:
    "`mtnlg checkpoint verify ROOT`, in this process: its lines and its exit status."
    from mtnlg.cli import main

    code = main(["checkpoint", "verify", str(root)])
    return capsys.readouterr().out.splitlines(), code


def while_reading(monkeypatch, step: str, action, times: int = 1):
    "Run `action()` (the job pruning or saving) just before verify hashes `step`'s rank file, the first `times` times."
    import mtnlg.checkpoint as C

    real, left = C.file_digest, [times]

    def digest(path):
        if Path(path).parent.name == step and Path(path).name == "rank-00000.pt" and left[0] > 0:
            left[0] -= 1
            action()
        return real(path)

    monkeypatch.setattr(C, "file_digest", digest)


def resume_auto_step(root) -> str:
    from mtnlg.checkpoint import newest_verified_checkpoint

    return newest_verified_checkpoint(root, say=lambda *a: None).dir.name


def to_v1(step_dir: Path):
    "Rewrite a step's meta.json as an mtnlg from before checksums wrote it (format v1: no checksums, no meta_checksum)."
    meta = json.loads((step_dir / "meta.json").read_text())
    for k in ("checksums", "meta_checksum"):
        meta.pop(k)
    (step_dir / "meta.json").write_text(json.dumps({**meta, "format": "mtnlg-sharded-v1"}, indent=1))


SUMMARY = re.compile(r"(.*) \([\d.]+ [kMG]?B read in [\d.]+ s\)(.*)")


def summary(line: str) -> tuple[str, str]:
    m = SUMMARY.fullmatch(line)
    assert m, line
    return m.group(1), m.group(2)


def test_a_step_pruned_while_verify_reads_it_is_not_corrupt(job, monkeypatch, capsys):
    from mtnlg.checkpoint import prune

    root, _ = job
    while_reading(monkeypatch, "step-0000004", lambda: prune(root, keep_last=1))
    lines, code = verify(root, capsys)
    assert code == 0 and lines[:2] == [
        "step-0000004  REMOVED  pruned by the running job while verify read it (not corrupt)",
        "step-0000008  ok",
    ], lines
    assert summary(lines[2]) == (
        "1 of 2 step(s) verify, 1 pruned or saved again by the running job while read (not corrupt)",
        "; --resume auto would continue from step-0000008",
    )
    assert sorted(p.name for p in root.iterdir()) == ["latest", "step-0000008"]  # pruned whole: no .pruned left


def test_prune_renames_a_step_away_before_deleting_it(job, monkeypatch):
    "What a reader beside the job sees at prune's delete: no step-0000004 at all, never a half-deleted one."
    import mtnlg.checkpoint as C

    root, _ = job
    seen = []
    real = shutil.rmtree
    monkeypatch.setattr(
        C.shutil,
        "rmtree",
        lambda p, **k: (seen.append((Path(p).name, sorted(q.name for q in root.iterdir()))), real(p, **k)),
    )
    C.prune(root, keep_last=1)
    assert seen[0] == (".step-0000004.pruned", [".step-0000004.pruned", "latest", "step-0000008"]), seen


def test_a_step_saved_again_while_verify_reads_it_is_read_again(job, monkeypatch, capsys):
    """The job saves step 8 again (other bytes) between verify reading its meta.json and its rank file: read again, it
    verifies."""
    root, save = job
    while_reading(monkeypatch, "step-0000008", lambda: save(8, 2.0))
    lines, code = verify(root, capsys)
    assert code == 0 and lines[:2] == [
        "step-0000004  ok",
        "step-0000008  ok  saved again by the running job while verify read it; the new copy verifies",
    ], lines
    assert summary(lines[2]) == ("2 of 2 step(s) verify", "; --resume auto would continue from step-0000008")


def test_a_step_saved_again_at_every_read_is_changing_not_corrupt(job, monkeypatch, capsys):
    """Saved again at each of verify's two reads, and at the two the hint makes: CHANGING, exit 0; the hint moves to
    step 4, where a resume would go while step 8 keeps changing."""
    root, save = job
    while_reading(monkeypatch, "step-0000008", lambda: save(8, 2.0), times=4)
    lines, code = verify(root, capsys)
    assert code == 0 and lines[1] == (
        "step-0000008  CHANGING  saved again by the running job each of 2 times verify read "
        "it (not corrupt): run verify again"
    ), lines
    assert summary(lines[2]) == (
        "1 of 2 step(s) verify, 1 pruned or saved again by the running job while read (not corrupt)",
        "; --resume auto would continue from step-0000004",
    )


def test_the_hint_is_the_step_resume_auto_takes(job, capsys):
    """A save renamed step 12 into place but has not moved `latest` (still step 8), and step 4 is corrupt: `--resume
    auto` takes step 8 (`latest` first), and so says verify (it said step 12: the newest that verifies)."""
    root, _ = job
    shutil.copytree(root / "step-0000008", root / "step-0000012")
    raw = bytearray((root / "step-0000004/rank-00000.pt").read_bytes())
    raw[-100] ^= 1
    (root / "step-0000004/rank-00000.pt").write_bytes(bytes(raw))
    lines, code = verify(root, capsys)
    assert (
        code == 1
        and lines[0].startswith("step-0000004  FAILED  rank-00000.pt is corrupt (its xxh3_64 is ")
        and lines[1:3] == ["step-0000008  ok", "step-0000012  ok"]
    ), lines
    assert summary(lines[3]) == ("2 of 3 step(s) verify, 1 corrupt", "; --resume auto would continue from step-0000008")
    assert resume_auto_step(root) == "step-0000008"


def test_an_old_format_checkpoint_warns_on_load_and_verify_exits_3(job, capsys):
    from mtnlg.checkpoint import Checkpoint, OldFormatWarning

    root, _ = job
    to_v1(root / "step-0000008")
    with pytest.warns(
        OldFormatWarning,
        match=r"step-0000008 was written before checksums \(format v1\): its files load "
        r"unchecked, so a flipped bit would go unnoticed; save it again to add them \(mtnlg reshard ",
    ):
        Checkpoint(root / "step-0000008")
    lines, code = verify(root, capsys)
    assert code == 3 and lines[:2] == [
        "step-0000004  ok",
        "step-0000008  UNCHECKED  written before checksums (format v1): "
        "nothing to check it against; save it again to add them (mtnlg reshard)",
    ], lines
    assert summary(lines[2]) == (
        "1 of 2 step(s) verify, 1 in the old format (v1), unchecked",
        "; --resume auto would continue from step-0000008",
    )
    with pytest.warns(OldFormatWarning):
        assert resume_auto_step(root) == "step-0000008"  # what a resume takes, with the warning
    raw = bytearray((root / "step-0000004/rank-00000.pt").read_bytes())
    raw[-100] ^= 1
    (root / "step-0000004/rank-00000.pt").write_bytes(bytes(raw))
    assert verify(root, capsys)[1] == 1  # corrupt outranks old format


def test_checking_behind_returns_before_the_check_and_raises_after(job):
    """A load that copies while the checksum runs (`checking_behind`): a good shard is marked verified; a flipped bit
    raises on leaving."""
    from mtnlg.checkpoint import Checkpoint, CheckpointCorruptError

    root, _ = job
    ckpt = Checkpoint(root / "step-0000008")
    with ckpt.checking_behind():
        assert torch.equal(ckpt.shard("rank-00000.pt")["model"]["w"], torch.full((64, 64), 1.0))
    assert "rank-00000.pt" in ckpt.verified
    f = root / "step-0000004/rank-00000.pt"
    raw = bytearray(f.read_bytes())
    raw[-100] ^= 1
    f.write_bytes(bytes(raw))
    ckpt, copied = Checkpoint(root / "step-0000004"), []
    with pytest.raises(CheckpointCorruptError, match=rf"{f} is corrupt \(its xxh3_64 is [0-9a-f]{{16}}, not the "):
        with ckpt.checking_behind():
            copied.append(ckpt.shard("rank-00000.pt")["optimizer_step"])
    assert copied == [3] and "rank-00000.pt" not in ckpt.verified  # it was read; the error came on leaving
