"""Every chapter is a MyST notebook with its jupytext header, converts, and is in the TOC.

Every chapter is also in the exact style jupytext writes (``make normalize``), so that JupyterLab
saving an unchanged chapter leaves ``git diff`` empty; that check runs once
``normalize_chapters.CHAPTERS_NORMALISED`` is true (the lead sets it when normalising the chapters).
"""

from __future__ import annotations

import jupytext
import normalize_chapters
import pytest
import yaml
from convert_chapters import BOOK, ROOT, chapter_paths

CHAPTERS = chapter_paths()


def _toc_files(node) -> list[str]:
    files = []
    if isinstance(node, dict):
        if "file" in node:
            files.append(node["file"])
        if "root" in node:
            files.append(node["root"])
        for value in node.values():
            files += _toc_files(value)
    elif isinstance(node, list):
        for item in node:
            files += _toc_files(item)
    return files


def test_there_are_chapters():
    assert len(CHAPTERS) >= 4


@pytest.mark.parametrize("path", CHAPTERS, ids=[str(p.relative_to(BOOK)) for p in CHAPTERS])
def test_header_and_conversion(path):
    text = path.read_text()
    assert text.startswith("---\njupytext:"), f"{path} must start with the jupytext header"
    nb = jupytext.reads(text, fmt="md:myst")
    meta = nb.metadata["jupytext"]["text_representation"]
    assert meta["format_name"] == "myst"
    assert nb.metadata["kernelspec"]["name"] == "python3"
    assert any(c.cell_type == "markdown" for c in nb.cells)
    # The round trip through .ipynb keeps every cell.
    back = jupytext.reads(jupytext.writes(nb, fmt="ipynb"), fmt="ipynb")
    assert [c.source for c in back.cells] == [c.source for c in nb.cells]


@pytest.mark.parametrize("path", CHAPTERS, ids=[str(p.relative_to(BOOK)) for p in CHAPTERS])
def test_normalising_converges_in_one_pass(path):
    """``make normalize`` gives a fixed point of jupytext's round trip, with readable captions."""
    once = normalize_chapters.normalize(path.read_text())
    assert normalize_chapters.normalize(once) == once
    assert normalize_chapters.write(jupytext.reads(once, fmt="md:myst")) == once
    for cell in jupytext.reads(once, fmt="md:myst").cells:
        figure = cell.metadata.get("mystnb", {}).get("figure", {})
        assert "\n" not in figure.get("caption", ""), "a caption keeps a line break"


@pytest.mark.parametrize("path", CHAPTERS, ids=[str(p.relative_to(BOOK)) for p in CHAPTERS])
def test_jupytext_round_trip_leaves_no_diff(path):
    if not normalize_chapters.CHAPTERS_NORMALISED:
        pytest.skip("chapters not normalised yet: run `make normalize`, then set CHAPTERS_NORMALISED = True")
    text = path.read_text()
    nb = jupytext.reads(text, fmt="md:myst")
    assert nb.metadata["kernelspec"] == normalize_chapters.KERNELSPEC, (
        "JupyterLab would rewrite the kernelspec"
    )
    assert normalize_chapters.write(nb) == text, (
        f"{path.relative_to(ROOT)} is not in jupytext's style: run `make normalize`"
    )


def test_every_chapter_is_in_the_toc_and_every_toc_entry_exists():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    listed = set(_toc_files(toc))
    on_disk = {str(p.relative_to(ROOT).with_suffix("")) for p in CHAPTERS}
    assert on_disk - listed == set(), "chapters missing from _toc.yml"
    assert listed - on_disk == set(), "_toc.yml entries without a chapter"


def test_no_generated_notebooks_are_tracked():
    import subprocess

    tracked = subprocess.run(
        ["git", "ls-files", "*.ipynb"], cwd=ROOT, capture_output=True, text=True, check=False
    ).stdout.split()
    assert tracked == [], f"generated notebooks must not be committed: {tracked}"
