"""Training data (chapter 42): megatron-core's blended datasets over a curated directory are chapter 35's twin sample
for sample, depend only on the seed, carry curation's tokenizer byte for byte, and bad inputs fail in one line."""

import shutil
from pathlib import Path
import numpy as np
import pytest
from mtnlg.blend import FIGURE_2
from mtnlg.config import ConfigError, load_config
from mtnlg.data_loading import training_data
from mtnlg.indexed import blended_gpt_samples
from mtnlg.topology import init_distributed

ROOT = Path(__file__).resolve().parent.parent
CURATED, TINY = ROOT / "tests/fixtures/curated", ROOT / "scaled_configs/tiny.yaml"
quiet = lambda *a: None


def curated_cfg(curated=CURATED, **overrides):
    return load_config(
        TINY, {"data.train_files": [], "data.valid_files": [], "data.curated": str(curated), **overrides}
    )


@pytest.fixture(scope="module")
def td(tmp_path_factory):
    init_distributed()
    return training_data(curated_cfg(), 300, 16, tmp_path_factory.mktemp("run"), quiet)


def test_blended_samples_equal_megatron_cores_index_for_index(td):
    seq = 128
    assert len(td.train) >= 300 and len(td.valid) >= 16
    for part, n, got in (("train", 300, td.train), ("valid", 16, td.valid)):
        ours = blended_gpt_samples(got.prefixes, got.weights, seq, n, 1234, "95,5,0", part)
        assert len(ours) == len(got)
        for i in range(len(got)):
            x = got[i]
            assert x.dtype == np.int64 and x.shape == (seq + 1,)
            assert np.array_equal(ours[i], x), (part, i)
    assert [Path(p).name for p in td.train.prefixes] == ["wikipedia", "webtext", "crawl"] and td.train.weights == [
        0.6,
        0.2,
        0.2,
    ]
    assert [Path(p).name for p in td.valid.prefixes] == ["wikipedia", "webtext"]  # crawl's one document trains only
    shares = np.bincount(np.asarray(td.train.dataset.dataset_index)) / len(td.train)
    np.testing.assert_allclose(shares, [0.6, 0.2, 0.2], atol=0.01)
    assert "crawl has too few valid documents" in td.description and "\n" not in td.description
    assert 5.0 < td.unigram_entropy < np.log(2048)


def test_same_seed_same_samples_other_seed_other_samples(td, tmp_path):
    again = training_data(curated_cfg(), 300, 16, tmp_path / "again", quiet)
    assert all(np.array_equal(again.train[i], td.train[i]) for i in range(len(td.train)))
    assert all(np.array_equal(again.valid[i], td.valid[i]) for i in range(len(td.valid)))
    other = training_data(curated_cfg(seed=99), 300, 16, tmp_path / "other", quiet)
    assert np.mean([np.array_equal(other.train[i], td.train[i]) for i in range(len(td.train))]) < 0.05


def test_tokenizer_is_curations_byte_for_byte(td):
    assert td.tokenizer_file.read_bytes() == (CURATED / "tokenizer.json").read_bytes()


def test_jsonl_is_converted_once_and_reused(td, tmp_path):
    cfg = load_config(
        TINY,
        {
            "data.train_files": [str(ROOT / "tests/fixtures/corpus/wiki_valid.jsonl")],
            "data.valid_files": [],
            "model.vocab_size": 512,
            "data.split": "50,50,0",
        },
    )
    logs = []
    a = training_data(cfg, 50, 4, tmp_path, logs.append)
    b = training_data(cfg, 50, 4, tmp_path, logs.append)
    assert "reusing" in logs[-1] and not any("reusing" in l for l in logs[:-1])
    assert a.tokenizer_file == tmp_path / "data/tokenizer.json" and a.tokenizer_file.is_file()
    assert np.array_equal(a.train[7], b.train[7]) and len(a.valid[0]) == 129


def test_530b_config_blends_figure_2():
    cfg = load_config(ROOT / "scaled_configs/mtnlg-530b.yaml")
    assert [e.weight for e in cfg.data.blend] == [w for _, _, w, _ in FIGURE_2]
    assert all(e.path.startswith("data/indexed/") for e in cfg.data.blend) and cfg.data.tokenizer == "gpt2"


def broken_copy(tmp_path, edit):
    shutil.copytree(CURATED, tmp_path / "curated")
    edit(tmp_path / "curated")
    return tmp_path / "curated"


ERRORS = {
    "curated dir missing": (
        lambda t: curated_cfg("/no/such/curate"),
        ["data.curated: '/no/such/curate' not found", "mtnlg curate"],
    ),
    "not a curate output": (lambda t: curated_cfg(ROOT / "tests/fixtures/corpus"), ["is not a `mtnlg curate` output"]),
    "missing .bin": (
        lambda t: curated_cfg(broken_copy(t, lambda c: (c / "indexed/webtext.bin").unlink())),
        ["indexed/webtext.bin not found"],
    ),
    "missing .idx": (
        lambda t: curated_cfg(broken_copy(t, lambda c: (c / "indexed/crawl.idx").unlink())),
        ["names dataset 'crawl'", "crawl.idx is missing"],
    ),
    "weights sum to 0": (
        lambda t: curated_cfg(
            broken_copy(t, lambda c: (c / "blend/megatron_data_path.txt").write_text("0 a/wikipedia 0 a/webtext"))
        ),
        ["weights must sum to more than 0"],
    ),
    "blend names a missing dataset": (
        lambda t: curated_cfg(**{"data.blend": [{"path": "wikipedia", "weight": 1}, {"path": "books3", "weight": 1}]}),
        ["data.blend[1].path 'books3': no such dataset", "crawl, webtext, wikipedia"],
    ),
    "dataset too small for a sample": (
        lambda t: curated_cfg(**{"data.blend": [{"path": "crawl", "weight": 1}]}),
        ["dataset 'crawl'", "holds 0 tokens, fewer than one sample of seq_length + 1 = 129"],
    ),
    "vocab smaller than the tokenizer's": (
        lambda t: curated_cfg(**{"model.vocab_size": 1024}),
        ["has 2,048 tokens but model.vocab_size is 1,024"],
    ),
    "jsonl missing": (
        lambda t: load_config(TINY, {"data.train_files": ["no/such.jsonl"]}),
        ["data file 'no/such.jsonl' not found"],
    ),
}


@pytest.mark.parametrize("case", list(ERRORS))
def test_bad_input_is_one_clear_line(case, td, tmp_path):
    make, fragments = ERRORS[case]
    with pytest.raises((ValueError, FileNotFoundError)) as e:
        training_data(make(tmp_path), 300, 16, tmp_path / "run", quiet)
    msg = str(e.value)
    assert "\n" not in msg
    for f in fragments:
        assert f in msg, (f, msg)


def test_bad_data_config_fails_at_load():
    for overrides, fragment in (
        (
            {
                "data.blend": [{"path": "a", "weight": 0.0}],
                "data.train_files": [],
                "data.valid_files": [],
                "data.tokenizer": "t.json",
            },
            "weights must sum to more than 0",
        ),
        ({"data.curated": "x"}, "not both"),
        ({"data.split": "100,0,0", "data.valid_files": []}, "no validation documents"),
    ):
        with pytest.raises(ConfigError, match=fragment):
            load_config(TINY, overrides)
