"""Chapter 62: sampling restricts the support as defined and is reproducible by seed; the KV cache equals full
recomputation at TP 1 and TP 2."""

from pathlib import Path
import pytest
import torch
from mtnlg import testing
from mtnlg.topology import launch
from mtnlg.generate import filter_logits, sample_next

TINY = str(Path(__file__).resolve().parent.parent / "scaled_configs" / "tiny.yaml")
PROMPTS = [
    [5, 17, 300, 42, 9],
    [1000, 7],
    [64, 64, 64, 3, 2, 1, 800, 12],
]  # different lengths: the batch is left-padded


def support(logits):
    return (logits > float("-inf")).nonzero()[:, -1].tolist()


def test_top_k_and_top_p_keep_exactly_their_support():
    p = torch.tensor([[0.05, 0.4, 0.1, 0.3, 0.15]])
    assert support(filter_logits(p.log(), top_k=2)) == [1, 3]
    assert support(filter_logits(p.log(), top_p=0.7)) == [1, 3]  # 0.4 + 0.3 reaches 0.7
    assert support(filter_logits(p.log(), top_p=0.71)) == [1, 3, 4]  # ... and 0.71 needs the next one
    assert support(filter_logits(p.log(), top_k=3, top_p=0.5)) == [1, 3]  # both filters: the intersection
    assert support(filter_logits(p.log())) == [0, 1, 2, 3, 4]
    # the boundary, on probabilities that are exact in binary (0.7 above is 0.70000005 in float32, so it cannot tell
    # "mass before the token >= p" from "> p"): the mass before the third token is exactly 0.75 = p, so it is dropped
    q = torch.tensor([[0.5, 0.25, 0.125, 0.125]])
    assert support(filter_logits(q.log(), top_p=0.75)) == [0, 1]
    assert support(filter_logits(q.log(), top_p=0.875)) == [0, 1, 2]


def test_sampling_is_reproducible_and_stays_in_the_support():
    logits = torch.randn(500, 50, generator=torch.Generator().manual_seed(0))
    draw = lambda seed: sample_next(logits, 0.8, 5, 0.9, torch.Generator().manual_seed(seed))
    assert torch.equal(draw(1), draw(1)) and not torch.equal(draw(1), draw(2))
    allowed = filter_logits(logits / 0.8, 5, 0.9) > float("-inf")
    assert allowed.gather(1, draw(1)[:, None]).all()
    assert torch.equal(sample_next(logits, 0.0), logits.argmax(-1))


@pytest.mark.parametrize("bad", [dict(temperature=-0.1), dict(top_k=-1), dict(top_p=0.0), dict(top_p=1.01)])
def test_bad_sampling_arguments_are_refused(bad):
    with pytest.raises(ValueError, match="must be"):
        sample_next(torch.zeros(1, 4), **{"temperature": 1.0, **bad})


@pytest.mark.parametrize("tp", [pytest.param(1, marks=pytest.mark.slow), 2])  # make test: TP 2 holds TP 1's claim
def test_kv_cache_equals_full_recomputation(tp):
    """Greedy tokens equal with and without the cache and for each prompt alone; cached logits within 1e-5 of the
    training forward."""
    r = launch(testing.generate_tp_worker, tp, TINY, tp, PROMPTS, 8)[0]
    assert r["cached"] == r["recomputed"] == r["alone"], r
    assert len({tuple(row) for row in r["cached"]}) == len(
        PROMPTS
    )  # each prompt its own continuation: the batch test means something
    assert r["max_logit_diff"] <= 1e-5, r["max_logit_diff"]
