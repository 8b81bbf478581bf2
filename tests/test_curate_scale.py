"""Curation's checks that must not grow with the corpus: the GPT-sample check of the blend reads a bounded sample
through the memory-mapped index, whatever the dataset's size, and counts as the full draw does."""

import tracemalloc

import numpy as np
import pytest

from mtnlg.curate_blend import _window, task_gpt_samples
from mtnlg.indexed import blended_gpt_samples, read_index, write_indexed_dataset


def _dataset(path, n_docs: int, seed: int, longest: int = 40) -> str:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, longest, n_docs)
    write_indexed_dataset(path, np.split(rng.integers(0, 500, lengths.sum()), np.cumsum(lengths)[:-1]))
    return str(path)


def test_gpt_sample_check_counts_as_the_full_draw(tmp_path):
    prefixes = [_dataset(tmp_path / f"d{k}", n, k) for k, n in enumerate((300, 50, 900))]
    for weights, samples in (([0.5, 0.2, 0.3], 100), ([1, 1, 5], 333)):
        bs = blended_gpt_samples(prefixes, weights, 32, samples, 7)
        shares = (np.bincount(bs.dataset_index, minlength=3) / len(bs)).round(4).tolist()
        assert task_gpt_samples(prefixes, weights, 32, samples, 7) == (len(bs), shares)


def test_gpt_sample_check_is_bounded(tmp_path):
    """A dataset of 200,000 documents: the check holds under 2 MB; the full draw holds over 6 (epochs of document
    indices)."""
    big = _dataset(tmp_path / "big", 200_000, 1, longest=4)
    lengths = read_index(big)[1]
    assert isinstance(lengths, np.memmap)
    assert _window(lengths, 64 * 128 + 1) == int(np.searchsorted(np.cumsum(lengths), 64 * 128 + 1)) + 1
    assert _window(lengths, 10**9) == 200_000  # fewer tokens than asked: every document
    tracemalloc.start()
    got = task_gpt_samples([big], [1.0], 128, 1000, 0)
    bounded = tracemalloc.get_traced_memory()[1]
    tracemalloc.reset_peak()
    blended_gpt_samples([big], [1.0], 128, 1000, 0)
    full = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert got == (1000, [1.0])
    assert bounded < 2e6 < 6e6 < full, (bounded, full)


def test_gpt_sample_check_says_which_dataset_is_short(tmp_path):
    short = _dataset(tmp_path / "short", 3, 0, longest=5)
    with pytest.raises(ValueError, match="3 documents hold [0-9]+ tokens, fewer than one sample"):
        task_gpt_samples([_dataset(tmp_path / "ok", 300, 1), short], [0.5, 0.5], 64, 10, 0)
