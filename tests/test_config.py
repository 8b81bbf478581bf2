"Configs: the paper's numbers load, and invalid configs are rejected at load time with a message that names the fix."

from pathlib import Path
import pytest
import yaml
from mtnlg.config import load_config, config_from_dict, ConfigError, count_parameters, layers_per_stage, parse_override

ROOT = Path(__file__).resolve().parent.parent
PAPER, TINY = ROOT / "scaled_configs/mtnlg-530b.yaml", ROOT / "scaled_configs/tiny.yaml"


def test_paper_config():
    cfg = load_config(PAPER)
    n = count_parameters(cfg.model, cfg.parallel.tensor_parallel)
    assert abs(n / 529.6e9 - 1) < 0.002
    assert cfg.model.padded_vocab_size(8) == 51200
    assert (cfg.parallel.gpus_per_replica, layers_per_stage(cfg)) == (280, 3)
    assert (cfg.optimizer.adam_eps, cfg.schedule.train_tokens) == (1e-8, 270_000_000_000)


TRAINING_CONFIGS = sorted(p.name for p in (ROOT / "scaled_configs").glob("*.yaml") if not p.name.startswith("curate-"))


@pytest.mark.parametrize("name", TRAINING_CONFIGS)
def test_every_shipped_config_loads(name):
    load_config(ROOT / "scaled_configs" / name)


def test_curation_config_is_pointed_to_mtnlg_curate():
    with pytest.raises(ConfigError, match="is a data-curation config .* run it with `mtnlg curate --config"):
        load_config(ROOT / "scaled_configs/curate-tiny.yaml")


# (config, overrides, fragments the message must contain) - each a distinct mistake
INVALID = {
    "heads not divisible by TP": (
        PAPER,
        {"parallel.tensor_parallel": 6},
        ["`model.num_attention_heads`=128", "`parallel.tensor_parallel`=6", "choose tensor_parallel among: 1, 2, 4, 8"],
    ),
    "layers not divisible by PP": (
        PAPER,
        {"parallel.pipeline_parallel": 8},
        ["`model.num_layers`=105", "choose pipeline_parallel among: 1, 3, 5, 7, 15, 21, 35, 105"],
    ),
    "world size != TP*PP*DP": (
        PAPER,
        {"parallel.world_size": 2800},
        ["`parallel.world_size`=2800", "8*35*8 = 2240", "data_parallel = world_size / (TP*PP) = 10"],
    ),
    "global batch vs micro*DP": (
        PAPER,
        {"schedule.global_batch_size": 1924},
        ["`schedule.global_batch_size`=1924", "micro_batch_size * data_parallel = 1*8 = 8"],
    ),
    "unknown key": (TINY, {"model.num_layer": 4}, ["unknown key `model.num_layer`", "did you mean `num_layers`?"]),
    "unknown section": (TINY, {"optimiser": {"lr": 1.0}}, ["unknown key `optimiser`", "did you mean `optimizer`?"]),
    "wrong type": (TINY, {"model.hidden_size": "big"}, ["`model.hidden_size` must be an integer, got 'big' (str)"]),
    "bool is not an int": (TINY, {"model.num_layers": True}, ["`model.num_layers` must be an integer"]),
    "negative size": (TINY, {"model.num_layers": -2}, ["`model.num_layers` must be > 0, got -2"]),
    "dropout out of range": (TINY, {"model.hidden_dropout": 1.5}, ["`model.hidden_dropout` must be in [0, 1)"]),
    "hidden not divisible by heads": (
        TINY,
        {"model.num_attention_heads": 3},
        ["`model.hidden_size`=128", "choose heads among"],
    ),
    "rampup not reaching global batch": (
        PAPER,
        {"schedule.batch_size_rampup_increment": 48},
        ["whole steps of `batch_size_rampup_increment`=48"],
    ),
    "min_lr above lr": (TINY, {"optimizer.min_lr": 1.0}, ["`optimizer.min_lr`=1.0 is above `optimizer.lr`"]),
    "unknown precision": (TINY, {"precision": "fp8"}, ["`precision` must be fp32 or bf16, got 'fp8'"]),
    "unknown kernels": (
        TINY,
        {"model.kernels": "cuda"},
        ["`model.kernels` must be reference, triton, compile or liger, got 'cuda'"],
    ),
    "negative loss chunk": (TINY, {"model.loss_chunk": -16}, ["`model.loss_chunk` must be >= 0, got -16"]),
    "list expected": (TINY, {"data.train_files": "a.jsonl"}, ["`data.train_files` must be a list"]),
    "sequence not divisible for sequence parallelism": (
        TINY,
        {"parallel.tensor_parallel": 4, "parallel.sequence_parallel": True, "model.seq_length": 66},
        ["`parallel.sequence_parallel` splits the sequence", "`model.seq_length`=66", "`parallel.tensor_parallel`=4"],
    ),
}


@pytest.mark.parametrize("case", list(INVALID))
def test_invalid_config_is_rejected_with_its_own_message(case):
    path, overrides, fragments = INVALID[case]
    with pytest.raises(ConfigError) as e:
        load_config(path, overrides)
    msg = str(e.value)
    assert msg.startswith(f"{path}: ") and "\n" not in msg
    for frag in fragments:
        assert frag in msg, f"{frag!r} not in {msg!r}"


def test_messages_are_distinct():
    msgs = set()
    for path, overrides, _ in INVALID.values():
        with pytest.raises(ConfigError) as e:
            load_config(path, overrides)
        msgs.add(str(e.value))
    assert len(msgs) == len(INVALID)


def test_missing_required_key():
    data = yaml.safe_load(TINY.read_text())
    del data["model"]["seq_length"]
    with pytest.raises(ConfigError, match="missing required key `model.seq_length`"):
        config_from_dict(data)


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="not found; configs here: .*tiny.yaml"):
        load_config(ROOT / "scaled_configs/nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: [unclosed\n")
    with pytest.raises(ConfigError, match="is not valid YAML"):
        load_config(bad)
    top = tmp_path / "list.yaml"
    top.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="must be a mapping"):
        load_config(top)


def test_yaml_1_2_floats_and_integral_floats(tmp_path):
    yaml.safe_load(TINY.read_text())
    p = tmp_path / "c.yaml"
    p.write_text(
        TINY.read_text().replace("lr: 3.0e-3", "lr: 3e-3").replace("train_tokens: 614400", "train_tokens: 6.144e5")
    )
    cfg = load_config(p)
    assert (
        cfg.optimizer.lr == 3e-3 and cfg.schedule.train_tokens == 614400 and isinstance(cfg.schedule.train_tokens, int)
    )
    with pytest.raises(ConfigError, match="must be an integer, got 614400.5"):
        load_config(p, {"schedule.train_tokens": 614400.5})


def test_parse_override():
    assert parse_override("model.num_layers=4") == ("model.num_layers", 4)
    assert parse_override("optimizer.lr=1e-3") == ("optimizer.lr", 1e-3)
    assert parse_override("data.train_files=[a.jsonl, b.jsonl]") == ("data.train_files", ["a.jsonl", "b.jsonl"])
    with pytest.raises(ConfigError, match="must look like section.key=value"):
        parse_override("model.num_layers")
