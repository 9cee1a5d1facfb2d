"""Every chapter is a MyST notebook with its jupytext header, converts, and is in the TOC.

Every chapter is also in the exact style jupytext writes (``make normalize``), so that JupyterLab
saving an unchanged chapter leaves ``git diff`` empty; that check runs once
``normalize_chapters.CHAPTERS_NORMALISED`` is true (the lead sets it when normalising the chapters).
"""

from __future__ import annotations

from pathlib import Path

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


@pytest.mark.parametrize("path", CHAPTERS, ids=[str(p.relative_to(BOOK)) for p in CHAPTERS])
def test_every_page_reads_in_one_sitting(path):
    """Issue 35: every page of the book, lab notes included, is at most 6,000 words (prose and
    code, as ``wc -w`` counts them: what the chapters' reading times are computed from)."""
    from attnlab.reading import words

    assert words(path) <= 6000, f"{path.relative_to(ROOT)} has {words(path):,} words"


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


def test_jupyterlab_checkpoints_are_not_chapters(tmp_path):
    """A ``.ipynb_checkpoints`` copy left by a lab session is not linted, normalised or executed.

    In a scratch copy of ``book/`` with a checkpoint of a chapter (as JupyterLab writes it, next
    to the chapter), every tool's list of chapters is the same as without it: the conversion that
    lint and nbval run, ``make normalize``, the Makefile's ``CHAPTERS`` (``make notebooks``) and
    the benchmarks' chapters.
    """
    import shutil
    import subprocess
    import sys

    import convert_chapters

    sys.path.insert(0, str(ROOT))
    from benchmarks import bench

    book = tmp_path / "book"
    shutil.copytree(BOOK, book, ignore=shutil.ignore_patterns("*.ipynb", ".*"))
    chapters = sorted(p.relative_to(book) for p in book.rglob("*.md"))
    chapter = book / chapters[-1]
    checkpoint = chapter.parent / ".ipynb_checkpoints" / f"{chapter.stem}-checkpoint.md"
    checkpoint.parent.mkdir()
    shutil.copy(chapter, checkpoint)
    assert checkpoint in set(book.rglob("*.md")), "the checkpoint copy must look like a chapter"

    def relative(paths, root=book):
        return sorted(p.relative_to(root) for p in paths)

    assert relative(convert_chapters.chapter_paths(book)) == chapters
    assert relative(normalize_chapters.chapters(book)) == chapters
    assert relative(bench.chapters(book)) == chapters
    converted = convert_chapters.convert(tmp_path / "nbval", book)
    assert relative(converted, tmp_path / "nbval") == [c.with_suffix(".ipynb") for c in chapters]
    assert not list((tmp_path / "nbval").rglob(".*")), "nbval would collect a checkpoint"
    listed = subprocess.run(
        ["make", "--no-print-directory", "-s", "-f", str(ROOT / "Makefile"), "-C", str(tmp_path),
         "--eval", "print-chapters: ; @echo $(CHAPTERS)", "print-chapters"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert sorted(listed) == sorted(str(Path("book") / c) for c in chapters)
