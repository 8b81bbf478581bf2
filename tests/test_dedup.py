"The compiled dedup kernels (chapter 32) against their numpy twin: the same signatures bit for bit, the same clusters."

import sys
import numpy as np
import pytest
from mtnlg.data import read_jsonl_texts
from mtnlg.dedup import (
    EDITS,
    EMPTY,
    _cased_table,
    compiled_candidate_pairs,
    compiled_signatures,
    candidate_pairs,
    edit_words,
    fuzzy_dedup,
    minhash_signatures,
)
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures"

TRICKY = [
    "",
    "   ",
    "two words",
    "ÉCOLE Straße ΑΣ İstanbul",
    "The KELVIN \u212a sign, a\nnewline",
    "\ud800 a lone surrogate and more",
    "école normale supérieure de paris",
    "ÆØÅ æøå 123 _under_score x",
    "日本語のテキスト です ね",
    "emoji 😀 text here ok fine",
]


@pytest.fixture(scope="module")
def corpus():
    """Wiki passages of ~300 words, every 4th followed by an edited copy, plus exact copies and texts that test the
    edges."""
    wiki, _ = read_jsonl_texts([FIXTURES / "corpus/wiki_train.jsonl"])
    words = [w for t in wiki for w in t.split()]
    rng = np.random.default_rng(0)
    docs = []
    for k in range(600):
        docs.append(" ".join(words[k * 300 : (k + 1) * 300]))
        if k % 4 == 0:
            kind, amount = EDITS[k // 4 % len(EDITS)]
            docs.append(" ".join(edit_words(docs[-1].split(), kind, amount, rng, words[:3000])))
    return TRICKY + docs + docs[:40]


@pytest.mark.parametrize("num_perm,ngram,seed", [(128, 5, 0), (64, 3, 1234)])
def test_compiled_signatures_are_the_twins(corpus, num_perm, ngram, seed):
    fast = compiled_signatures(corpus, num_perm, ngram, seed, threads=2, batch=97)
    twin = minhash_signatures(corpus, num_perm, ngram, seed)
    assert fast.dtype == twin.dtype == np.uint32 and fast.shape == (len(corpus), num_perm)
    assert np.array_equal(fast, twin)
    assert (fast[:2] == EMPTY).all() and (fast[2:] != EMPTY).all()


def test_compiled_clusters_are_the_twins(corpus):
    sig = compiled_signatures(corpus)
    datasets = ["web" if k % 3 else "wiki" for k in range(len(corpus))]
    for t in (0.5, 0.8):
        a = fuzzy_dedup(sig, datasets, ["wiki", "web"], t, engine="compiled", threads=2)
        z = fuzzy_dedup(sig, datasets, ["wiki", "web"], t, engine="numpy")
        for f in ("keep", "duplicate_of", "component"):
            assert np.array_equal(getattr(a, f), getattr(z, f)), f
        assert (a.n_candidates, a.n_edges) == (z.n_candidates, z.n_edges)
        assert 40 <= (~a.keep).sum() < 250  # the 40 exact copies and some edited ones go
    fast, twin = (
        compiled_candidate_pairs(sig, 16, 8, max_bucket=1),
        candidate_pairs(sig, 16, 8, max_bucket=1),
    )  # star buckets
    assert np.array_equal(fast[0], twin[0]) and np.array_equal(fast[1], twin[1]) and len(fast[0]) > 40


def test_cased_table_covers_every_code_point():
    table = _cased_table()
    assert all(chr(c).lower() == chr(c) for c in range(len(table), sys.maxunicode + 1))
    assert table[ord("É")] == 1 and table[ord("é")] == 0 and table[0x212A] == 1


def test_bad_arguments():
    with pytest.raises(ValueError, match="power of two"):
        compiled_signatures(["a b c"], num_perm=100)
    with pytest.raises(ValueError, match="engine must be"):
        fuzzy_dedup(np.zeros((1, 128), np.uint32), ["a"], ["a"], engine="rust")


def test_curate_config_names_the_engine():
    from mtnlg.config import ConfigError
    from mtnlg.curate_config import load_curate_config

    cfg = Path(__file__).resolve().parent.parent / "scaled_configs/curate-tiny.yaml"
    assert load_curate_config(cfg).dedup.engine == "compiled"
    assert load_curate_config(cfg, {"dedup.engine": "numpy"}).dedup.engine == "numpy"
    with pytest.raises(ConfigError, match="dedup.engine"):
        load_curate_config(cfg, {"dedup.engine": "rust"})


def _seven_shards(corpus, tmp_path) -> list:
    "Signature files of seven shards of three datasets in an order that is not their priority, with a bucket of 70."
    from mtnlg.dedup import signature_shard
    from mtnlg.extract import write_jsonl

    docs = [t for t in corpus if "\ud800" not in t] + [
        "the same short text again"
    ] * 70  # JSONL holds no lone surrogate
    names, files = ["wiki", "web", "crawl"], []
    for s in range(7):
        write_jsonl(
            tmp_path / f"{s}.jsonl",
            [{"id": f"{s}:{i}", "dataset": names[s % 3], "text": docs[i]} for i in range(s, len(docs), 7)],
        )
        signature_shard(tmp_path / f"{s}.jsonl", tmp_path / f"{s}.npz")
        files.append(tmp_path / f"{s}.npz")
    return files


@pytest.mark.parametrize("threshold,partitions,splits", [(0.5, 1, 1), (0.8, 3, 4), (0.8, 70, 1)])
def test_partitioned_plan_decides_as_the_single_process_plan(corpus, tmp_path, threshold, partitions, splits):
    """Chapter 32's partitioned plan (LSH bands, edge partitions, large-star/small-star rounds, per-shard drops) drops
    the same documents for the same reasons as `plan_dedup` on the same signature files: shards of three datasets in an
    order that is not their priority, documents without shingles, exact copies and a bucket of 70 (a star: over 64)."""
    from mtnlg.dedup import component_partitions, plan_dedup, plan_dedup_partitioned

    files = _seven_shards(corpus, tmp_path)
    drops, info = plan_dedup(files, ["web", "wiki", "crawl"], threshold)
    got = plan_dedup_partitioned(
        files,
        ["web", "wiki", "crawl"],
        threshold,
        work_dir=tmp_path / "work",
        partitions=partitions,
        band_splits=splits,
    )
    assert got == (drops, info)
    assert len(drops) == info["documents"] - info["kept"] >= 69 + 40 and {
        r.split(" a ")[1] for r in drops.values()
    } == {"web document", "wiki document"}
    assert (
        len(list((tmp_path / "work/drops").glob("*.json"))) == 7
        and len(list((tmp_path / "work/edges").glob("part-?????.npy"))) == partitions
        and len(list((tmp_path / "work/fate").glob("part-?????.npy")))
        == component_partitions(partitions)
        == min(partitions, 64)  # 70 edge partitions: 64 for the components
    )
    assert len(list((tmp_path / "work").glob("band-*"))) == 16 * splits
    rounds = {p.name.split("-")[0] for p in (tmp_path / "work/components").iterdir()}
    assert 1 <= len(rounds) <= 8, rounds  # large-star/small-star rounds until no edge changes


def test_partitioned_plan_past_2_to_the_33(corpus, tmp_path):
    """Document numbers counted from 2**33 + 5 (as if 8.6 billion documents came before): the same drops and counts.
    A pair code i * n + j would wrap int64 here (n > 2**33, i * n > 2**66), and any array of one entry a document of
    the corpus would need 8.6 billion entries: the plan holds pairs as two columns and sizes nothing by the corpus."""
    from mtnlg.dedup import plan_dedup, plan_dedup_partitioned

    files = _seven_shards(corpus, tmp_path)
    drops, info = plan_dedup(files, ["web", "wiki", "crawl"], 0.5)
    first = 2**33 + 5
    got = plan_dedup_partitioned(
        files, ["web", "wiki", "crawl"], 0.5, work_dir=tmp_path / "far", partitions=3, band_splits=2, first=first
    )
    assert got == (drops, info) and len(drops) >= 109
    edges = np.concatenate([np.load(f) for f in sorted((tmp_path / "far/edges").glob("part-?????.npy"))])
    fates = np.concatenate([np.load(f) for f in sorted((tmp_path / "far/fate").glob("part-?????.npy"))])
    assert edges.min() >= first and fates[:, 0].min() >= first and len(fates) == len(drops)
    assert int(edges.max()) * int(edges.max()) > 2**63  # i * n would have overflowed
