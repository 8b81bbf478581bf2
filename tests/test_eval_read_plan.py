"""Chapter 66's read plan: every rank of the 530B's TP 8 x PP 3 evaluation reading a shape-only index of its
TP 8 x PP 35 x DP 8 training checkpoint with the reader's own code (chapter 43's `slice_reads`), in seconds."""

from pathlib import Path

from test_rehearsal import own_process

from mtnlg.config import load_config
from mtnlg.counting import Setup
from mtnlg.topology import Layout

ROOT = Path(__file__).resolve().parent.parent
TINY = str(ROOT / "scaled_configs" / "tiny.yaml")
MTNLG_530B = str(ROOT / "scaled_configs" / "mtnlg-530b.yaml")


@own_process
def test_the_index_holds_what_the_trainer_saves():
    """Every data-parallel-rank-0 file of a TP 2 x PP 2 x DP 2 bf16 run: the parameters the trainer's own stage
    (chapter 14's `gpt_pipeline`, built as chapter 56 builds it) saves, under its `GPT` names, shapes, split
    dimensions and dtype."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from mtnlg.checkpoint import shard_name, tp_dim
    from mtnlg.engine import gpt_name
    from mtnlg.eval_plan import checkpoint_index
    from mtnlg.rehearsal import build_stage, fake_world

    sets = {"parallel.tensor_parallel": 2, "parallel.pipeline_parallel": 2, "parallel.data_parallel": 2}
    sets |= {"parallel.world_size": 8, "precision": "bf16", "schedule.micro_batch_size": 4}
    cfg = load_config(TINY, sets)
    layout, L = Layout.of(cfg), cfg.model.num_layers
    index = checkpoint_index(cfg)
    assert len(index.meta["shards"]) == 8 and len(index.model_files()) == 4
    for stage in range(2):
        with fake_world(layout, stage), FakeTensorMode():
            module = build_stage(cfg, layout)
            saved = {  # DeepSpeedBackend.named_parameters: the last stage's copy of the tied embedding is not saved
                gpt_name(n, L): ([*p.shape], tp_dim(p), str(p.dtype).removeprefix("torch."))
                for n, p in module.named_parameters()
                if stage == 0 or not n.startswith("tied_modules.embed.")
            }
        for tp_rank in range(2):
            assert index.tensors[shard_name(layout.rank(stage, 0, tp_rank))] == saved
            assert index.meta["shards"][shard_name(layout.rank(stage, 1, tp_rank))]["model"] == []


@own_process
def test_every_rank_of_the_530b_evaluation_reads_chapter_50s_bytes():
    """TP 8 x PP 3 from TP 8 x PP 35 x DP 8: each of the 24 ranks reads exactly its stage's bf16 bytes, which are
    chapter 50's count and chapter 66's `rank_memory` weights, from only its own TP rank's files; the 24 ranks
    together open every file that holds weights (what the job verifies) and read the model once per TP slice."""
    from mtnlg.eval_plan import checkpoint_index, rank_memory, read_plan
    from mtnlg.run_plan import checkpoint_size

    cfg = load_config(MTNLG_530B)
    index = checkpoint_index(cfg)
    files = index.model_files()
    assert len(files) == 280 and len(index.meta["shards"]) == 2240
    assert sum(index.file_bytes(f) - index.optimizer_bytes[f] for f in files) == checkpoint_size(cfg).weights
    rows = read_plan(index, 8, 3)
    assert [(r["rank"], r["stage"], r["tp_rank"]) for r in rows] == [
        (8 * s + t, s, t) for s in range(3) for t in range(8)
    ]
    L = Setup(Layout(8, 3, 1), 1, "none")
    for r in rows:
        assert (
            r["bytes_read"] == r["stage_bytes"] == r["chapter_50"] == rank_memory(cfg.model, L, r["stage"])["weights"]
        )
        assert {index.meta["shards"][f]["coord"][2] for f in r["files"]} == {r["tp_rank"]}
    # stage 0: embedding + blocks 0-34 (training stages 0-11); 1: blocks 35-69 (11-23); 2: 70-104 (23-34) + the
    # embedding's token matrix from training stage 0
    assert [len(r["files"]) for r in rows[::8]] == [12, 13, 13]
    assert sum(len(r["files"]) for r in rows) == 304
    assert {f for r in rows for f in r["files"]} == set(files)
    assert [r["stage_bytes"] for r in rows[::8]] == [44_396_078_080, 44_050_048_000, 44_312_273_920]
    assert sum(r["bytes_read"] for r in rows) == 1_062_067_200_000


@own_process
def test_the_scoring_batch_rehearsed_is_chapter_66s_count():
    """A call of `cluster/eval.sbatch`'s batch (3 micro-batches of 4 full-length windows) on each TP 8 x PP 3 stage of
    the 530B, run by chapter 65's `token_scores` under fake tensors: its peak beyond the weights within 1% of chapter
    66's activations + logits, for a rolling log-likelihood batch (every position scored) and, on stages 0 and 1, a
    multiple-choice one; the last stage's logits in chunks hold a fraction of what they hold at once."""
    from dataclasses import replace
    from mtnlg import parallel_inference
    from mtnlg.eval_plan import rank_memory, rehearse_scoring

    cfg = load_config(MTNLG_530B)
    one_layer = replace(cfg, model=replace(cfg.model, num_layers=3))  # a stage's working set is one layer's
    L = Setup(Layout(8, 3, 1), 4, "none")
    for stage in range(3):
        counted = rank_memory(cfg.model, L, stage)
        counted = counted["activations"] + counted["logits"]
        rolling = rehearse_scoring(one_layer, 8, 3, stage, 12, 12 * 2048)["working"]
        assert abs(rolling / counted - 1) < 0.01, (stage, rolling, counted)
        choices = rehearse_scoring(one_layer, 8, 3, stage, 12)["working"]
        assert choices <= rolling and (stage == 2 or choices == rolling), (stage, choices, rolling)
    chunked = rehearse_scoring(one_layer, 8, 3, 2, 32, 32 * 2048)["working"]
    chunk = parallel_inference.SCORE_CHUNK
    parallel_inference.SCORE_CHUNK = 32 * 2048  # every position's logits at once
    try:
        whole = rehearse_scoring(one_layer, 8, 3, 2, 32, 32 * 2048)["working"]
    finally:
        parallel_inference.SCORE_CHUNK = chunk
    assert whole > 4 * chunked and 27 * 2**30 < whole < 28 * 2**30, (chunked, whole)  # rehearsed: 27.50 GiB
