"""Chapter 33's compiled decontamination engine against its reference (a document at a time): the same hits, counts and
bytes."""

import json
import random
from pathlib import Path
import numpy as np
import pytest
from mtnlg.decontaminate import (
    build_task_ngrams,
    count_shard,
    cut_spans,
    decontaminate_shard,
    eval_task_texts,
    find_task_ngrams,
    find_task_ngrams_batch,
)
from mtnlg.extract import write_jsonl

FIX = Path(__file__).resolve().parent / "fixtures"


def _texts(pattern: str, field: str = "text") -> list[str]:
    return [
        json.loads(l)[field]
        for f in sorted(FIX.glob(pattern))
        for l in open(f, encoding="utf-8")
        if field in json.loads(l)
    ]


@pytest.fixture(scope="module")
def kit():
    """Every evaluation fixture's n-grams; the curate-tiny and curate-demo text corpora; adversarial texts built from
    task texts."""
    tasks = eval_task_texts(FIX / "eval")
    table = build_task_ngrams([t for ts in tasks.values() for t in ts])
    corpora = (
        _texts("curation/raw/wikipedia/*.jsonl")
        + _texts("curation/raw/webtext/*.jsonl")
        + _texts("demo/raw/wikipedia/*.jsonl")
        + _texts("demo/raw/webtext/*.jsonl")
        + _texts("corpus/wiki_train.jsonl")
    )
    boolq = [p.split(" -- ", 1)[-1] for p in tasks["boolq"][:20]]
    short = [t for ts in tasks.values() for t in ts if 8 <= len(t.split()) <= 12][:20]  # matched whole
    words = boolq[0].split()
    rng = random.Random(0)
    adversarial = [
        "",
        " ",
        "...",
        " ".join(words[:13]),
        " ".join(words[:12]),
        " ".join(words[:14]),
        *short,
        *(s[:-1] for s in short),
        boolq[1].upper(),
        "İstanbul İİ " + boolq[2] + " İ",
        "ΣΊΣΥΦΟΣ ΟΔΥΣΣΕΎΣ. " + boolq[3] + " ΤΈΛΟΣ.",
        "\ud800 " + boolq[4] + " \udfff x",
        "日本語の文章です。 " + boolq[5] + " 終わり。",
        boolq[6].replace(" ", "\u00a0 \u2003\t\n"),
        "ﬁnal ǅ ẞ " + boolq[7],
        "é" * 300 + ". " + boolq[8] + " " + "ö" * 300 + ".",
    ]
    for _ in range(60):  # task text amid noise, in random cases and scripts
        w = rng.choice(boolq).split()
        a = rng.randrange(len(w))
        piece = w[a : a + rng.randrange(5, 30)]
        noise = lambda: " ".join(
            rng.choice(["Ünïcödé", "İ", "ΣΑΣ", "the", "a", "x.", "Ωmega!", "日本", "ǈ"])
            for _ in range(rng.randrange(0, 80))
        )
        piece = [x.upper() if rng.random() < 0.2 else x for x in piece]
        adversarial.append(noise() + " " + " ".join(piece) + " " + noise())
    return dict(table=table, corpora=corpora, adversarial=adversarial, boolq=boolq)


def test_compiled_equals_reference_on_fixture_corpora(kit):
    found = find_task_ngrams_batch(kit["corpora"], kit["table"])
    assert found == [find_task_ngrams(t, kit["table"]) for t in kit["corpora"]]
    assert sum(map(len, found)) > 0 and len(kit["corpora"]) > 100


def test_compiled_equals_reference_on_adversarial_texts(kit):
    texts, table = kit["adversarial"], kit["table"]
    found = find_task_ngrams_batch(texts, table)
    assert found == [find_task_ngrams(t, table) for t in texts]
    assert found[3] and not found[4] and found[5]  # exactly 13 words of a passage: a hit; 12: none; 14: two
    assert len(found[5]) == 2 and sum(bool(f) for f in found) > 40
    ignore = np.array(sorted({h for f in found for _, _, h in f})[::2], np.uint64)
    assert find_task_ngrams_batch(texts, table, ignore) == [find_task_ngrams(t, table, ignore) for t in texts]
    assert find_task_ngrams_batch(texts, {}) == [[] for _ in texts] and find_task_ngrams_batch([], table) == []


@pytest.mark.parametrize("batch", [1, 7, None])
def test_shard_outputs_are_byte_identical(kit, tmp_path, batch):
    "Pass 1's counts (in the same order) and pass 2's file and manifest, by both engines, any batch size."
    docs = [
        {"id": f"x/s:{i}", "dataset": "x", "text": t}
        for i, t in enumerate(kit["corpora"][:150] + kit["adversarial"])
        if "\ud800" not in t
    ]  # a shard holds no lone surrogates (write_jsonl refuses them)
    docs += [
        {
            "id": f"x/p:{i}",
            "dataset": "x",
            "text": ("Filler words here. " * 40 + kit["boolq"][i % 3] + " And after. ") * (1 + i % 13),
        }
        for i in range(30)
    ]  # planted passages: cut, split, split > 10 times
    write_jsonl(tmp_path / "in.jsonl", docs)
    counts = {e: count_shard(tmp_path / "in.jsonl", kit["table"], batch=batch, engine=e) for e in ("numpy", "compiled")}
    assert list(counts["numpy"].items()) == list(counts["compiled"].items()) and len(counts["numpy"]) > 10
    mans = {
        e: decontaminate_shard(
            tmp_path / "in.jsonl", tmp_path / f"{e}.jsonl", kit["table"], batch=batch, engine=e
        ).to_dict()
        for e in ("numpy", "compiled")
    }
    assert (tmp_path / "numpy.jsonl").read_bytes() == (tmp_path / "compiled.jsonl").read_bytes()
    assert {**mans["numpy"], "seconds": 0} == {**mans["compiled"], "seconds": 0}
    assert mans["numpy"]["extra"]["documents_split"] > 0 and mans["numpy"]["dropped"]
    with pytest.raises(ValueError, match="unknown engine 'fast'"):
        count_shard(tmp_path / "in.jsonl", kit["table"], engine="fast")


def _cut_spans_by_character(text, spans, remove_chars=200, min_piece_chars=200, stops=".!?"):
    "cut_spans as first written: a character at a time to the sentence ends."
    cuts = []
    for s, e in spans:
        a, b = max(0, s - remove_chars), min(len(text), e + remove_chars)
        while a > 0 and text[a] not in stops:
            a -= 1
        a = a + 1 if a > 0 else 0
        while b < len(text) and text[b] not in stops:
            b += 1
        cuts.append((a, min(len(text), b + 1)))
    pieces, pos = [], 0
    for a, b in sorted(cuts):
        if a > pos:
            pieces.append(text[pos:a])
        pos = max(pos, b)
    pieces.append(text[pos:])
    return [p.strip() for p in pieces if len(p.strip()) >= min_piece_chars]


def test_cut_spans_matches_the_character_loop():
    rng = random.Random(1)
    for _ in range(2000):
        text = "".join(rng.choice("ab .!?\n") for _ in range(rng.randrange(0, 400)))
        spans = sorted(
            (s, min(len(text), s + rng.randrange(0, 30)))
            for s in (rng.randrange(0, len(text) + 1) for _ in range(rng.randrange(0, 4)))
        )
        r, m = rng.randrange(0, 50), rng.randrange(0, 60)
        assert cut_spans(text, spans, r, m) == _cut_spans_by_character(text, spans, r, m), (text, spans, r, m)
