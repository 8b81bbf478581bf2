"Chapter 71: the shot selector, the context limit, the t-interval and accuracy from known log-likelihoods, exactly."

import math
from pathlib import Path
import pytest
from mtnlg.in_context import (
    Condition,
    LabelBiasScorer,
    Prompter,
    fits,
    harness_requests,
    is_entailment,
    largest_fitting_k,
    run_condition,
    score,
    select_shots,
    t_interval,
)

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "eval"
POOL = [{"premise": f"premise {i}", "hypothesis": "h", "label": i % 3} for i in range(30)]  # 10 entailment, 20 not


def labels(shots):
    return ["E" if is_entailment(r) else "N" for r in shots]


@pytest.mark.parametrize(
    "order, expected",
    [
        ("entailment first", "EEENN"),
        ("non-entailment first", "NNEEE"),
        ("interleaved", "ENENE"),
        ("interleaved, non-entailment first", "NENEE"),
    ],
)
def test_selector_gives_the_requested_counts_in_the_requested_order(order, expected):
    shots = select_shots(POOL, 5, seed=7, n_entailment=3, order=order)
    assert "".join(labels(shots)) == expected
    assert len({r["premise"] for r in shots}) == 5  # no row twice


def test_selector_is_deterministic_per_seed_and_random_order_keeps_the_counts():
    draw = lambda seed: select_shots(POOL, 6, seed=seed, n_entailment=2, order="random")
    assert draw(3) == draw(3) and draw(3) != draw(4)
    assert sorted(labels(draw(3))) == ["E", "E", "N", "N", "N", "N"]
    assert select_shots(POOL, 4, seed=1) == select_shots(POOL, 4, seed=1) != select_shots(POOL, 4, seed=2)


def test_selector_never_includes_a_scored_item():
    scored = POOL[:12]
    for seed in range(20):
        shots = select_shots(POOL, 18, seed=seed, exclude=scored)  # all 18 rows left: every draw is the rest
        assert not {r["premise"] for r in shots} & {r["premise"] for r in scored}
        assert len(shots) == 18


def test_asking_for_more_of_a_label_than_the_pool_has_is_a_clear_error():
    with pytest.raises(ValueError, match="11 entailment shots asked but the few-shot pool has 10"):
        select_shots(POOL, 12, seed=0, n_entailment=11)
    with pytest.raises(ValueError, match=r"has 8 \(after removing 2 scored item"):
        select_shots(POOL, 9, seed=0, n_entailment=9, exclude=[POOL[0], POOL[3]])
    with pytest.raises(ValueError, match="31 shots asked but the few-shot pool has 30 rows"):
        select_shots(POOL, 31, seed=0)
    with pytest.raises(ValueError, match="needs label counts"):
        select_shots(POOL, 2, seed=0, order="interleaved")


def test_context_limit_on_a_hand_case():
    # chapter 60 scores the last seq_length + 1 tokens: 129 tokens fit a 128-token model, 130 do not
    assert fits(129, 128) and not fits(130, 128)
    lengths = {0: [40, 60], 1: [80, 100], 2: [120, 129], 3: [125, 130], 4: [100]}
    assert largest_fitting_k(lengths, 128) == 2  # K = 3 has one prompt too long; K = 4 is not reached
    assert largest_fitting_k(lengths, 1000) == 4
    assert largest_fitting_k({0: [200]}, 128) == -1


def test_t_interval_against_a_hand_computation():
    # values 0.5, 0.6, 0.7: mean 0.6, sd 0.1, se 0.1/sqrt(3); t(0.975, 2 df) = 4.302653
    mean, lo, hi = t_interval([0.5, 0.6, 0.7])
    half = 4.302653 * 0.1 / math.sqrt(3)
    assert (
        mean == pytest.approx(0.6)
        and lo == pytest.approx(0.6 - half, abs=1e-6)
        and hi == pytest.approx(0.6 + half, abs=1e-6)
    )
    assert t_interval([0.4]) == (0.4, 0.4, 0.4)
    assert t_interval([0.3, 0.3, 0.3]) == pytest.approx((0.3, 0.3, 0.3))


class Stub:
    "Known log-likelihoods per answer word; words as tokens."

    max_length = 2048

    def __init__(self, ll):
        self.ll = ll

    def tok_encode(self, text):
        return text.split()

    def loglikelihood(self, requests, disable_tqdm=False):
        return [(self.ll[r.args[1].strip()], False) for r in requests]


@pytest.fixture(scope="module")
def hans():
    return Prompter("hans", data_dir=FIXTURES)


def test_score_picks_the_highest_log_likelihood():
    stub = Stub({"True": -1.0, "False": -2.0, "Neither": -0.5})
    assert score(stub, [[("a", " True"), ("a", " False")], [("b", " True"), ("b", " Neither")], [("c", " False")]]) == [
        0,
        1,
        0,
    ]


def test_accuracy_from_a_stub_scorer_is_exact(hans):
    items = hans.items
    n_ent = sum(map(is_entailment, items))
    always_true = run_condition(
        Stub({"True": -0.1, "False": -3.0}), hans, items, Condition("shots", "2", 2), seeds=[0, 1]
    )
    for row in always_true:
        assert (row["n"], row["skipped"], row["p_entailment"]) == (len(items), 0, 1.0)
        assert row["acc"] == n_ent / len(items)
    # only label biases: entailment-first blocks end on non-entailment, so the balanced tie goes to "False"
    biased = run_condition(
        LabelBiasScorer(), hans, items, Condition("order", "entailment first", 2, 1, "entailment first"), [0]
    )[0]
    assert (biased["p_entailment"], biased["acc"]) == (0.0, 1 - n_ent / len(items))


def test_a_prompt_longer_than_the_context_is_skipped_and_counted(hans):
    words = sorted(max(len((c + x).split()) for c, x in hans.requests([], it)) for it in hans.items)
    short = Stub({"True": -0.1, "False": -3.0})
    assert words[0] < words[-1], "the fixture's prompts all have one length: nothing to split"
    short.max_length = (
        max(w for w in words if w < words[-1]) - 1
    )  # only the longest prompts are too long (n > max_length + 1)
    too_long = words.count(words[-1])
    row = run_condition(short, hans, hans.items, Condition("shots", "0", 0), [0])[0]
    assert (row["skipped"], row["n"]) == (too_long, len(words) - too_long)


def test_our_requests_are_the_harness_requests(hans):
    for k in (0, 1, 3):
        shots = select_shots(hans.pool, k, seed=k)
        for item in hans.items[:3]:
            assert hans.requests(shots, item) == harness_requests(hans, shots, item)
