"Every chapter runs top to bottom under papermill with its CPU-tiny parameters."
from pathlib import Path
import json
import pytest, papermill as pm

NBS = Path(__file__).resolve().parent.parent / "nbs"
NOTEBOOKS = sorted(NBS.glob("[0-9]*.ipynb"))

def test_every_chapter_has_a_parameters_cell():
    for nb in NOTEBOOKS:
        cells = json.loads(nb.read_text())["cells"]
        tagged = [c for c in cells if "parameters" in c.get("metadata", {}).get("tags", [])]
        assert len(tagged) == 1, f"{nb.name}: needs exactly one cell tagged 'parameters' (has {len(tagged)})"

@pytest.mark.parametrize("nb", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(nb, tmp_path):
    params = {"run_dir": str(tmp_path / "run")} if nb.stem == "41_train" else {}
    pm.execute_notebook(str(nb), str(tmp_path / nb.name), parameters=params, cwd=str(NBS),
                        kernel_name="python3", progress_bar=False)
