"""Chapter 50's activation-memory model held against what autograd really keeps (chapter 01's `saved_tensor_bytes`):
one transformer layer of the tiny and the 125M shapes, at TP 1 and TP 2 (with and without sequence parallelism),
micro-batches 1 and 2, recompute none, selective and full. The model counts exactly the bytes measured — the issue asked
for 5%; we assert equality. On this CPU the attention runs PyTorch's math path when attention dropout is on (125M) and
its flash kernel when it is off (tiny), so both of the model's attention kinds are measured. (GPU kernels are not
measured here.)"""

import json
import textwrap
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parent.parent
SHAPES = {"tiny": "scaled_configs/tiny.yaml", "125m": "scaled_configs/gpt-125m.yaml"}
MODES = ("none", "selective", "full")

MEASURE = textwrap.dedent("""
    import json, sys, torch, torch.distributed as dist
    from mtnlg.config import load_config
    from mtnlg.model import TransformerBlock, megatron_config, saved_tensor_bytes
    from mtnlg.topology import Layout, init_distributed, quiet_libraries
    quiet_libraries()
    tp, shapes, out = int(sys.argv[2]), json.loads(sys.argv[3]), {}
    init_distributed(Layout(tp, 1, 1))
    for name, path in shapes.items():
        for recompute in ("none", "selective", "full"):
            cfg = load_config(path, {"model.recompute": recompute, "parallel.tensor_parallel": tp,
                                     "parallel.data_parallel": 1, "parallel.world_size": None})
            m = cfg.model
            for sp in (False, True) if tp > 1 else (False,):    # sequence parallelism: the block sees [s/t, b, h]
                block = TransformerBlock(m, megatron_config(m, sequence_parallel=sp)).train()
                for b in (1, 2):
                    shape = (m.seq_length // tp, b, m.hidden_size) if sp else (b, m.seq_length, m.hidden_size)
                    x = torch.randn(*shape, requires_grad=True)
                    key = f"{name}/{recompute}/{b}" + ("/sp" if sp else "")
                    _, out[key] = saved_tensor_bytes(block, x, exclude=list(block.parameters()))
    if not dist.is_initialized() or dist.get_rank() == 0: json.dump(out, open(sys.argv[1], "w"))
""")


@pytest.fixture(scope="module")
def measure(tmp_path_factory):
    "shape -> {tp: measured bytes}: each shape's two launches (TP 1, TP 2) run the first time a test asks for it."
    from mtnlg.testing import torchrun_script

    done = {}

    def of(shape):
        if shape not in done:
            d = tmp_path_factory.mktemp(f"saved-{shape}")
            script = d / "measure.py"
            script.write_text(MEASURE)
            done[shape] = {}
            for tp in (1, 2):
                torchrun_script(script, tp, d / f"tp{tp}.json", tp, json.dumps({shape: SHAPES[shape]}), cwd=ROOT)
                done[shape][tp] = json.loads((d / f"tp{tp}.json").read_text())
        return done[shape]

    return of


@pytest.mark.parametrize("tp,sp", [(1, False), (2, False), (2, True)], ids=["tp1", "tp2", "tp2-sequence-parallel"])
# make test: the tiny shape (flash attention); make test-full adds the 125M's (the math path, with its dropout mask)
@pytest.mark.parametrize("shape", ["tiny", pytest.param("125m", marks=pytest.mark.slow)])
def test_saved_activation_bytes_equal_the_model(measure, shape, tp, sp):
    """Exact, per layer, in every mode; with sequence parallelism the LayerNorm inputs and statistics, the QKV and fc1
    inputs and the dropout masks — what Korthikanti et al. put outside the tensor-parallel region — are 1/t of them."""
    from mtnlg.config import load_config
    from mtnlg.counting import stored_activation_bytes

    measured = measure(shape)
    m = load_config(ROOT / SHAPES[shape]).model
    attention = "math" if m.attention_dropout > 0 else "flash"  # what PyTorch's CPU attention runs
    key = lambda recompute, b: f"{shape}/{recompute}/{b}" + ("/sp" if sp else "")
    for recompute in MODES:
        for b in (1, 2):
            got = measured[tp][key(recompute, b)]
            want = stored_activation_bytes(
                m,
                b,
                tp,
                recompute,
                act_bytes=4,
                mask_bytes=4,
                attention=attention,  # fp32 CPU
                sequence_parallel=sp,
            )
            print(
                f"{shape} TP{tp}{' SP' if sp else ''} micro {b} {recompute:9s}: measured {got:>12,} B, "
                f"model {want:>14,.0f} B"
            )
            assert got == want, (shape, tp, sp, recompute, b, got, want)
    assert measured[tp][key("none", 1)] > measured[tp][key("selective", 1)] > measured[tp][key("full", 1)]
    from mtnlg.counting import layer_activation_bytes

    for b in (1, 2):  # selective recomputation drops exactly the attention core (softmax, its dropout mask and
        core = layer_activation_bytes(m, b, tp, 4, 4, attention, sp)[
            "attention core"
        ]  # the s x s products) and no more
        assert measured[tp][key("none", b)] - measured[tp][key("selective", b)] == core, (b, core)
        if sp:
            assert measured[tp][key("full", b)] * tp == measured[tp][f"{shape}/full/{b}"]  # full keeps 1/t of the input
