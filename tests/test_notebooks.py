"""Every chapter runs top to bottom under papermill with its CPU-tiny parameters.

`make test` runs on two workers (`pytest -n 2 --dist loadscope`), which keeps each test class on one worker: chapters
that share a run directory (one trains a stand-in model there, the next reuses it) form one class and run in order;
every other chapter is its own class, so the chapters spread over both workers."""

from pathlib import Path
import json
import re
import shutil
import pytest
import papermill as pm
from preloaded_kernel import Server

KERNELS = Server()  # each chapter's kernel forked from one process that imported torch, megatron-core, DeepSpeed

NBS = Path(__file__).resolve().parent.parent / "nbs"
NOTEBOOKS = sorted(NBS.glob("[0-9]*.ipynb"))


def test_every_chapter_has_a_parameters_cell():
    for nb in NOTEBOOKS:
        cells = json.loads(nb.read_text())["cells"]
        tagged = [c for c in cells if "parameters" in c.get("metadata", {}).get("tags", [])]
        assert len(tagged) == 1, f"{nb.name}: needs exactly one cell tagged 'parameters' (has {len(tagged)})"


def test_every_chapter_is_a_valid_notebook():
    """nbformat 4.5: every cell carries an id (a missing one is a warning now, an error in nbformat's next major
    version)."""
    import nbformat

    for nb in NOTEBOOKS:
        cells = json.loads(nb.read_text())["cells"]
        assert all("id" in c for c in cells), (
            f"{nb.name}: cells without an id (write them with nbformat, or run nbformat's normalize)"
        )
        nbformat.validate(nbformat.reads(nb.read_text(), as_version=4))


def test_every_chapter_ends_with_a_link_to_the_next():
    """The book reads in numeric order: each chapter's last cell is one Markdown line linking the next chapter (by its
    file, which the site resolves to its page), the last chapter's leads back to the map; docs/site.py's `next_line`."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("docs_site", NBS.parent / "docs" / "site.py")
    site = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(site)
    wrong = []
    for nb in NOTEBOOKS:
        last, want = json.loads(nb.read_text())["cells"][-1], site.next_line(nb, NOTEBOOKS)
        got = "".join(last["source"]).strip() if last["cell_type"] == "markdown" else f"a {last['cell_type']} cell"
        if got != want:
            wrong.append(f"{nb.name}: the last cell should be the Markdown line {want!r}, not {got[:80]!r}")
    assert not wrong, "\n".join(wrong)
    assert site.next_line(NBS / "41_train.ipynb", NOTEBOOKS) == "Next: [42 — Training data](42_data_loading.ipynb)"


def notebook_groups(notebooks) -> dict[str, list[Path]]:
    "Chapters that write or read the same `../runs/<dir>` -> one group, named after its first chapter, in book order."
    dirs = {
        nb: set(re.findall(r"\.\./runs/([\w-]+)", nb.read_text())) - {"tiny-3d"} for nb in notebooks
    }  # make demo's: read only
    first = {nb: nb for nb in notebooks}
    for a in notebooks:
        for b in notebooks:
            if a < b and dirs[a] & dirs[b]:
                old, new = max(first[a], first[b]), min(first[a], first[b])
                first = {k: (new if v == old else v) for k, v in first.items()}
    return {g.stem: [nb for nb in notebooks if first[nb] == g] for g in dict.fromkeys(first.values())}


KERNEL_NEVER_STARTED = "Kernel died before replying to kernel_info"
BOOK = NBS.parent / "runs" / "book"  # each chapter as executed here: the site (`make docs`) is built from these copies


# `make test` runs chapter 41's training run up to step 100 (it asserts the loss fell by a nat); `make test-full` the
# whole schedule, which asserts the model gets 0.75 nats below the unigram entropy (test_chapter_41_trains_the_schedule)
QUICK = {"41_train": {"overrides": {"schedule.train_iters": 100}}}


def run_notebook(nb: Path, tmp_path: Path, keep: Path | None = BOOK, whole: bool = False):
    """Execute `nb` under papermill (cwd `nbs/`) with its `QUICK` parameters unless `whole`; when it ran to the end,
    keep the executed copy as `keep/<name>.ipynb`."""
    params = {} if whole else QUICK.get(nb.stem, {})
    if nb.stem == "41_train":  # its own default, `../runs/tiny-notebook`, emptied first: a path the page shows as it is
        shutil.rmtree(NBS.parent / "runs" / "tiny-notebook", ignore_errors=True)
    out = tmp_path / nb.name
    tmp_path.mkdir(parents=True, exist_ok=True)
    preloaded = {"kernel_manager_class": km} if (km := KERNELS.kernel_manager(nb.read_text())) else {}
    for attempt in (1, 2):
        try:
            pm.execute_notebook(
                str(nb),
                str(out),
                parameters=params,
                cwd=str(NBS),
                kernel_name="python3",
                progress_bar=False,
                request_save_on_cell_execute=False,  # written once at the end (and on a failure): not after each cell
                **preloaded,
            )
            break
        except RuntimeError as e:
            # the kernel never started: jupyter_client picks free ephemeral ports and the kernel binds them a moment
            # later, and another process's outgoing connection can take one in between (seen once: "Address already in
            # use" while the other worker ran gloo ranks). No cell ran, so the chapter is started once more.
            if attempt == 2 or KERNEL_NEVER_STARTED not in str(e):
                raise
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        tmp = keep / (nb.name + ".part")
        tmp.write_bytes(out.read_bytes())
        tmp.replace(keep / nb.name)  # atomic: a failed or interrupted run never leaves a half-written chapter


def chapters_class(members: list[Path]):
    class Chapters:
        @pytest.mark.parametrize("nb", members, ids=[p.stem for p in members])
        def test_notebook_runs(self, nb, tmp_path):
            run_notebook(nb, tmp_path)

    return Chapters


for _group, _members in notebook_groups(NOTEBOOKS).items():
    _cls = chapters_class(_members)
    _cls.__name__ = _cls.__qualname__ = "TestChapters_" + _group
    globals()[_cls.__name__] = _cls


@pytest.mark.slow
def test_chapter_41_trains_the_schedule(tmp_path):
    "The whole tiny schedule (310 steps): training and validation loss 0.75 nats below the unigram entropy."
    run_notebook(NBS / "41_train.ipynb", tmp_path, whole=True)


def test_chapters_sharing_a_run_directory_form_one_group(tmp_path):
    nbs = [tmp_path / f"{n}.ipynb" for n in ("10_a", "20_b", "30_c", "40_d")]
    for nb, text in zip(nbs, ['"../runs/x"', '"../runs/y"', '"../runs/x" "../runs/y"', '"../runs/tiny-3d"']):
        nb.write_text(text)
    assert {g: [m.stem for m in ms] for g, ms in notebook_groups(nbs).items()} == {
        "10_a": ["10_a", "20_b", "30_c"],
        "40_d": ["40_d"],
    }


def test_only_a_chapter_that_ran_to_the_end_is_kept_for_the_site(tmp_path):
    import nbformat

    keep = tmp_path / "book"
    for name, code in (("ok.ipynb", "x = 1 + 1"), ("fails.ipynb", "raise ValueError('no')")):
        nbformat.write(
            nbformat.v4.new_notebook(
                cells=[
                    nbformat.v4.new_code_cell("", metadata={"tags": ["parameters"]}),
                    nbformat.v4.new_code_cell(code),
                ]
            ),
            tmp_path / name,
        )
    run_notebook(tmp_path / "ok.ipynb", tmp_path / "run-ok", keep)
    with pytest.raises(pm.PapermillExecutionError):
        run_notebook(tmp_path / "fails.ipynb", tmp_path / "run-fails", keep)
    assert sorted(p.name for p in keep.iterdir()) == ["ok.ipynb"]
    assert json.loads((keep / "ok.ipynb").read_text())["metadata"]["papermill"]["exception"] is None


def test_a_kernel_that_never_started_is_started_once_more_and_only_that(tmp_path, monkeypatch):
    calls = []

    def execute(nb, out, **kw):
        calls.append(nb)
        if len(calls) == 1:
            raise RuntimeError(KERNEL_NEVER_STARTED)
        Path(out).write_text("{}")

    monkeypatch.setattr(pm, "execute_notebook", execute)
    monkeypatch.setenv("MTNLG_PLAIN_KERNELS", "1")  # no kernel server for a notebook that never runs
    (tmp_path / "a.ipynb").write_text("{}")
    run_notebook(tmp_path / "a.ipynb", tmp_path / "run", keep=None)
    assert len(calls) == 2

    def broken(nb, out, **kw):
        calls.append(nb)
        raise RuntimeError("something else")

    monkeypatch.setattr(pm, "execute_notebook", broken)
    with pytest.raises(RuntimeError, match="something else"):
        run_notebook(tmp_path / "a.ipynb", tmp_path / "run", keep=None)
    assert len(calls) == 3  # any other error: no second try
