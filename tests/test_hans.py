"""HANS generated from McCoy et al.'s templates (chapter 64): counts, the heuristics' definitions, determinism, the
fixture, the CLI."""

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
import pytest
from mtnlg.hans import (
    SUBCASES,
    FIXTURE_PER_SUBCASE,
    generate_hans,
    write_hans,
    overlaps_lexically,
    is_subsequence,
    is_clause,
    repeats_word,
    fill_template,
    LEX_RC_TEMPLATES,
)
from mtnlg.tasks import task_spec, read_task_jsonl

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "eval" / "hans"
MTNLG = str(Path(sys.executable).parent / "mtnlg")
HEURISTICS = ("lexical_overlap", "subsequence", "constituent")


@pytest.fixture(scope="module")
def full():
    return {split: generate_hans(split) for split in ("validation", "train")}


@pytest.mark.parametrize("split", ["validation", "train"])
def test_full_counts(full, split):
    rows = full[split]
    assert len(rows) == 30_000
    assert Counter(r["subcase"] for r in rows) == Counter({s: 1000 for _, s, _, _ in SUBCASES})
    assert Counter(r["label"] for r in rows) == Counter({0: 15_000, 1: 15_000})
    assert Counter(r["heuristic"] for r in rows) == Counter({h: 10_000 for h in HEURISTICS})
    assert Counter((r["heuristic"], r["label"]) for r in rows) == Counter(
        {(h, l): 5000 for h in HEURISTICS for l in (0, 1)}
    )
    assert len({(r["premise"], r["hypothesis"]) for r in rows}) == 30_000
    assert [r["pairID"] for r in rows[:2]] == ["ex0", "ex1"] and rows[-1]["pairID"] == "ex29999"
    assert set(rows[0]) == {"premise", "hypothesis", "label", "heuristic", "subcase", "template", "pairID"}
    # labels follow the sub-case names: `ln_`/`sn_`/`cn_` non-entailment (1), `le_`/`se_`/`ce_` entailment (0)
    assert all(r["label"] == (r["subcase"][1] == "n") for r in rows)


def test_train_and_validation_share_no_pair(full):
    pairs = lambda rows: {(r["premise"], r["hypothesis"]) for r in rows}
    assert not pairs(full["validation"]) & pairs(full["train"])


@pytest.mark.parametrize("split", ["validation", "train"])
def test_heuristic_definitions(full, split):
    rows = full[split]
    assert all(overlaps_lexically(r["premise"], r["hypothesis"]) for r in rows)  # every HANS hypothesis
    assert all(is_subsequence(r["premise"], r["hypothesis"]) for r in rows if r["heuristic"] != "lexical_overlap")
    assert all(is_clause(r["premise"], r["hypothesis"]) for r in rows if r["heuristic"] == "constituent")
    # ... and where the heuristics part ways: no lexical-overlap pair is a subsequence, no non-entailed subsequence pair
    # a clause
    assert not any(is_subsequence(r["premise"], r["hypothesis"]) for r in rows if r["heuristic"] == "lexical_overlap")
    assert not any(is_clause(r["premise"], r["hypothesis"]) for r in rows if r["subcase"].startswith("sn_"))
    assert not any(repeats_word(r["premise"]) for r in rows)


def test_property_checks_can_fail():
    assert not overlaps_lexically("The doctor slept .", "The lawyer slept .")
    assert not is_subsequence("The doctor saw the lawyer .", "The lawyer saw the doctor .")
    assert is_subsequence("The doctor near the actor danced .", "The actor danced .")
    assert not is_clause("The doctor near the actor danced .", "The actor danced .")
    assert is_clause("If the doctor slept , the lawyer ran .", "The doctor slept .")
    assert repeats_word("The doctor saw the doctors .") and not repeats_word("The doctor saw the lawyer .")


def test_deterministic_and_seeded():
    a = generate_hans("validation", 5, seed=3)
    assert a == generate_hans("validation", 5, seed=3)
    assert a != generate_hans("validation", 5, seed=4)
    strip = lambda rows: [{k: v for k, v in r.items() if k != "pairID"} for r in rows]
    bigger = generate_hans("validation", 7, seed=3)  # a smaller set is the per-sub-case prefix of a larger one
    assert strip(a) == strip([r for _, s, _, _ in SUBCASES for r in [r for r in bigger if r["subcase"] == s][:5]])


def test_template_quirk_kept():
    "templates.py's temp15 copies `the` twice into its hypothesis; the transcription keeps it (see chapter 64)."
    import random

    temp15 = [t for t in LEX_RC_TEMPLATES if t[3] == "temp15"]
    p, h, tag = fill_template(temp15, random.Random(0))
    assert tag == "temp15" and " the the " in h


def test_bad_arguments():
    with pytest.raises(ValueError, match="unknown HANS split"):
        generate_hans("test")
    with pytest.raises(ValueError, match="positive integer"):
        generate_hans("validation", 0)


@pytest.mark.parametrize("split", ["validation", "train"])
def test_committed_fixture_is_the_generator_output(split):
    spec = task_spec("hans")
    rows = read_task_jsonl(FIXTURE / f"{split}.jsonl", spec)
    assert rows == generate_hans(split, FIXTURE_PER_SUBCASE[split])
    assert len(rows) == 30 * FIXTURE_PER_SUBCASE[split]
    assert "7299f6f657089ce06a0f98e7e81f8d0f5b7741ce" in (FIXTURE / "SOURCES.md").read_text()


def test_write_hans_is_read_by_the_task(tmp_path):
    out = write_hans(tmp_path, per_subcase=3, train_per_subcase=2)
    assert out == tmp_path / "eval" / "hans"
    spec = task_spec("hans")
    assert read_task_jsonl(tmp_path / "eval" / spec.eval_file, spec) == generate_hans("validation", 3)
    assert len(read_task_jsonl(tmp_path / "eval" / spec.fewshot_file, spec)) == 60
    assert "MIT" in (out / "SOURCES.md").read_text()


def test_cli_writes_the_sets(tmp_path):
    r = subprocess.run(
        [MTNLG, "hans", "--out", str(tmp_path), "--per-subcase", "2"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stderr
    lines = (tmp_path / "eval/hans/validation.jsonl").read_text().splitlines()
    assert [json.loads(l) for l in lines] == generate_hans("validation", 2)
    assert len((tmp_path / "eval/hans/train.jsonl").read_text().splitlines()) == 60
    r = subprocess.run(
        [MTNLG, "hans", "--out", str(tmp_path), "--per-subcase", "-1"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert r.returncode == 2 and "positive integer" in r.stderr and "Traceback" not in r.stderr
