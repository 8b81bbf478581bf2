"""Chapter 70: each bias statistic recomputed by hand where the answer is known — a stub model's log-ratio, a corpus
where "nurse" only meets "she", log-odds on hand counts, VADER on known words — the tagger and VADER offline, bad input
refused with a clear error, and `mtnlg bias` writing its report from a real (tiny) checkpoint."""

import json
import math
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
import numpy as np
import pytest
from mtnlg.bias import (
    FEMALE_WORDS,
    MALE_WORDS,
    OCCUPATION_TEMPLATES,
    TOKEN,
    corpus_gender_counts,
    corpus_lean,
    gender_lean,
    log_odds,
    read_corpus,
    read_occupations,
    sentiment_by_group,
    top_words,
    word_sentiment,
)

ROOT = Path(__file__).resolve().parent.parent
SLICE = ROOT / "tests" / "fixtures" / "corpus" / "wiki_valid.jsonl"


def stub_scorer(probs: dict):
    "A 'model' whose next-word probabilities are fixed: probs[occupation][word], the occupation found in the context."
    return lambda pairs: [math.log(probs[next(o for o in probs if o in c)][w.strip()]) for c, w in pairs]


def test_stub_model_lean_is_its_log_ratio():
    probs = {
        "nurse": {
            "woman": 0.3,
            "female": 0.1,
            "lady": 0.2,
            "man": 0.05,
            "male": 0.05,
            "gentleman": 0.05,
        },  # 0.6 vs 0.15
        "pilot": {
            "woman": 0.01,
            "female": 0.01,
            "lady": 0.01,
            "man": 0.5,
            "male": 0.2,
            "gentleman": 0.02,
        },  # 0.03 vs 0.72
        "person": dict(zip(FEMALE_WORDS + MALE_WORDS, [0.1, 0.1, 0.1, 0.2, 0.2, 0.2])),
    }  # 0.3 vs 0.6
    g = gender_lean(stub_scorer(probs), ["nurse", "pilot"])
    assert g.log_ratio.shape == (2, len(OCCUPATION_TEMPLATES))
    np.testing.assert_allclose(g.lean, [math.log(4), math.log(0.03 / 0.72)], rtol=0, atol=1e-12)
    assert g.fraction_male == 0.5
    assert g.baseline == pytest.approx(math.log(0.5), abs=1e-12)
    np.testing.assert_allclose(g.relative_lean, [math.log(8), math.log(0.03 / 0.36)], rtol=0, atol=1e-12)
    assert gender_lean(stub_scorer(probs), ["nurse"], baseline=None).baseline == 0.0


def test_corpus_where_nurse_meets_only_she(tmp_path):
    """A nurse seen only near 'she' leans fully female; an engineer only near 'he' fully male; words out of the window
    do not count."""
    docs = [
        "The nurse said that she would stay. " * 3,
        "Nurses know her well.",
        "The engineer said he was ready; his plan worked.",
        "engineer " + "word " * 30 + "she",
    ]
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in docs))
    counts = corpus_gender_counts(read_corpus(path), ["nurse", "engineer", "pilot"], window=10)
    # by hand: (nurse, she) pairs at most 10 tokens apart in the first document, and "her" beside "Nurses"
    toks = [w.lower() for w in TOKEN.findall(docs[0])]
    nurse = [i for i, w in enumerate(toks) if w == "nurse"]
    she = [i for i, w in enumerate(toks) if w == "she"]
    by_hand = sum(abs(i - j) <= 10 for i in nurse for j in she) + 1  # + "her" in the plural document
    assert counts["nurse"] == {"female": by_hand, "male": 0, "mentions": 4}
    assert counts["engineer"] == {"female": 0, "male": 2, "mentions": 2}
    assert counts["pilot"] == {"female": 0, "male": 0, "mentions": 0}
    lean = corpus_lean(counts)
    assert lean["nurse"] == pytest.approx(math.log((by_hand + 0.5) / 0.5)) and lean["nurse"] > 0
    assert lean["engineer"] == pytest.approx(-math.log(5)) and lean["pilot"] == 0.0


def test_log_odds_on_hand_counts():
    counts = {"A": Counter(kind=3, tall=1), "B": Counter(kind=1, tall=3), "C": Counter(kind=2, tall=2)}
    z = log_odds(counts)
    # A against B + C pooled (kind 3 vs 3, tall 1 vs 5), prior = pooled counts (kind 6, tall 6, a0 = 12)
    d = math.log((3 + 6) / (4 + 12 - 3 - 6)) - math.log((3 + 6) / (8 + 12 - 3 - 6))
    assert z["A"]["kind"] == pytest.approx(d / math.sqrt(1 / 9 + 1 / 9), abs=1e-12)
    assert z["B"]["tall"] == pytest.approx(z["A"]["kind"], abs=1e-12)
    assert z["C"]["kind"] == pytest.approx(-z["C"]["tall"], abs=1e-12)
    assert top_words(z, counts, k=1)["A"] == [("kind", 3, round(z["A"]["kind"], 2))]
    # an explicit prior: a word the prior does not know is not ranked
    assert set(log_odds(counts, prior=Counter(kind=10))["A"]) == {"kind"}


def test_vader_average_on_known_words():
    s = sentiment_by_group({"g": ["good terrible", "table"], "h": ["happy"]}, boot=200)
    assert word_sentiment("good") == pytest.approx(0.4404, abs=1e-4)
    assert s["g"]["mean"] == pytest.approx((0.4404 - 0.4767 + 0) / 3, abs=1e-4)
    assert (s["g"]["words"], s["g"]["texts"]) == (3, 2)
    assert s["h"]["mean"] == s["h"]["lo"] == s["h"]["hi"] == pytest.approx(word_sentiment("happy"))


def test_tagger_and_vader_run_offline():
    "TextBlob's PatternTagger and VADER in a process whose sockets fail and whose NLTK data path is empty."
    code = (
        "import socket\n"
        "class NoNet(socket.socket):\n"
        "    def connect(self, *a): raise OSError('no network in this test')\n"
        "socket.socket = NoNet\n"
        "from mtnlg.bias import descriptive_words, word_sentiment\n"
        "print(descriptive_words('She was very', ' tall and walked slowly.'), word_sentiment('good'))\n"
    )
    env = {**os.environ, "NLTK_DATA": "/nonexistent", "HOME": "/nonexistent"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().splitlines()[-1] == "['tall', 'slowly'] 0.4404"


def test_bad_input_is_refused(tmp_path):
    with pytest.raises(ValueError, match="no occupations"):
        gender_lean(stub_scorer({}), [])
    with pytest.raises(ValueError, match="no occupations"):
        corpus_gender_counts([], [])
    with pytest.raises(ValueError, match=r"\{occupation\} slot"):
        gender_lean(stub_scorer({}), ["nurse"], templates=["The x"])
    with pytest.raises(FileNotFoundError, match="not found"):
        read_occupations(tmp_path / "missing.tsv")
    (tmp_path / "bad.tsv").write_text("job\tshare\nnurse\t90\n")
    with pytest.raises(ValueError, match="needs the columns occupation and bls_pct_female"):
        read_occupations(tmp_path / "bad.tsv")
    with pytest.raises(FileNotFoundError, match="not found"):
        read_corpus(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no .jsonl files"):
        read_corpus(tmp_path / "empty")
    (tmp_path / "broken.jsonl").write_text('{"text": "fine"}\n{"title": "no text"}\n')
    with pytest.raises(ValueError, match=r"broken.jsonl:2: not a JSON object with a 'text' field"):
        read_corpus(tmp_path / "broken.jsonl")
    with pytest.raises(ValueError, match="need >= 2"):
        log_odds({"only": Counter(a=1)})


def test_winogender_slice_without_the_data_setting(monkeypatch):
    monkeypatch.delenv("MTNLG_DATA", raising=False)
    from mtnlg.catalog import data_path

    assert data_path("winogender") == ROOT / "tests" / "fixtures" / "bias" / "winogender"
    occ = read_occupations()
    assert len(occ) == 60 and occ[0] == {
        "occupation": "technician",
        "bls_pct_female": 40.34,
        "bergsma_pct_female": 9.42,
    }


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    "A tiny model trained for one step on a 70 KB slice (in a subprocess): its checkpoints/ root."
    from tiny_runs import train_tiny

    sets = {"schedule.train_iters": 1, "schedule.eval_iters": 1, "data.train_files": f"[{SLICE}]"}
    return train_tiny(tmp_path_factory.mktemp("tiny-bias"), **sets)


@pytest.mark.slow
def test_harness_lean_equals_logits_by_hand(checkpoint):
    """Through chapter 60's MtnlgLM, the log-ratio after 'The nurse was a' equals the one summed from the model's own
    logits"""
    " (chapter 70's notebook checks the same on its model in `make test`; this runs it on a fresh checkpoint)."
    import torch
    from mtnlg.bias import lm_scorer
    from mtnlg.evaluate import MtnlgLM

    lm = MtnlgLM(str(checkpoint), device="cpu")

    def logp(context, word):
        ctx, whole = lm.tokenizer_bpe.encode(context).ids, lm.tokenizer_bpe.encode(f"{context} {word}").ids
        with torch.no_grad():
            lp = lm.model(torch.tensor([whole]))[0].log_softmax(-1)
        return sum(lp[i - 1, whole[i]].item() for i in range(len(ctx), len(whole)))

    g = gender_lean(lm_scorer(lm), ["nurse"], templates=["The {occupation} was a"])
    f, m = (math.log(sum(math.exp(logp("The nurse was a", w)) for w in ws)) for ws in (FEMALE_WORDS, MALE_WORDS))
    assert g.log_ratio[0, 0] == pytest.approx(f - m, abs=1e-4)


def test_cli_bias_writes_the_report(checkpoint, tmp_path, capsys):
    from mtnlg.cli import main

    code = main(
        ["bias", "--checkpoint", str(checkpoint), "--samples", "2", "--max-new-tokens", "8", "--corpus", str(SLICE)]
    )
    out = capsys.readouterr()
    assert code == 0, out.err
    report = checkpoint.parent / "bias"  # default: <run>/bias, beside checkpoints/
    doc = json.loads((report / "bias.json").read_text())
    assert list(doc["sections"]) == [
        "gender_occupation",
        "cooccurrence",
        "sentiment",
        "data_vs_model",
        "benchmarks",
        "limits",
    ]
    bench = doc["sections"]["benchmarks"]["tasks"]  # chapter 72's tasks, 40 items each by default
    assert list(bench) == ["crows_pairs", "winogender", "winobias", "bbq"] and all(
        0 < b["n"] <= 40 for b in bench.values()
    )
    assert all(0 <= b["metrics"]["acc_pro"] <= 1 for b in bench.values() if "acc_pro" in b["metrics"])
    g = doc["sections"]["gender_occupation"]
    assert g["occupations"] == 60 and len(g["per_occupation"]) == 60 and 0 <= g["fraction_male"] <= 1
    assert g["fraction_male"] == sum(r["lean"] < 0 for r in g["per_occupation"]) / 60
    assert doc["sections"]["limits"]["settings"]["samples"] == 2 and doc["meta"]["checkpoint"].endswith("step-0000001")
    for f in ("bias.md", "gender_occupation.png", "sentiment.png", "benchmarks.png"):
        assert (report / f).stat().st_size > 1000, f
    assert "## Gender and occupation" in (report / "bias.md").read_text() and "lean male" in out.out
    # bad input: one line, exit 2, before a model loads
    for args, msg in (
        (["--samples", "0"], "--samples must be >= 1"),
        (["--corpus", str(tmp_path / "none")], "not found"),
        (["--occupations", str(tmp_path / "none.tsv")], "occupation list"),
        (["--benchmarks-limit", "-2"], "--benchmarks-limit must be"),
    ):
        assert main(["bias", "--checkpoint", str(checkpoint), "--out", str(tmp_path / "x"), *args]) == 2
        assert msg in capsys.readouterr().err
    assert main(["bias", "--checkpoint", str(tmp_path / "no-checkpoint")]) == 2
    assert "not found" in capsys.readouterr().err
