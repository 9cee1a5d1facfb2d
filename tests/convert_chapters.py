"""Convert every chapter (``book/**/*.md``) to a notebook in a scratch folder, for nbval.

Usage: ``python tests/convert_chapters.py OUTDIR``. The folder structure under ``book/`` is kept.
The ``.md`` stays the only source; the notebooks written here are throw-away.

A chapter is a ``.md`` under ``book/`` with no hidden folder (``.*``) on its path: JupyterLab's
checkpoints (``book/part/.ipynb_checkpoints/ch-checkpoint.md``) are copies, not chapters, and
the book build skips them too (``exclude_patterns: "**/.*"`` in ``_config.yml``). Lint,
``make normalize``, nbval, ``make notebooks`` and the benchmarks take their chapters from here
(the Makefile's ``CHAPTERS`` prunes the same folders).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "book"


def chapter_paths(book: Path = BOOK) -> list[Path]:
    """Every chapter under ``book``, in a stable order, without hidden folders' copies."""
    return sorted(
        p for p in book.rglob("*.md") if not any(part.startswith(".") for part in p.relative_to(book).parts)
    )


def convert(out: Path, book: Path = BOOK) -> list[Path]:
    import jupytext  # here, so that importing chapter_paths stays quick (tests/prose_check.py)

    written = []
    for md in chapter_paths(book):
        target = out / md.relative_to(book).with_suffix(".ipynb")
        target.parent.mkdir(parents=True, exist_ok=True)
        jupytext.write(jupytext.read(md), target, fmt="ipynb")
        written.append(target)
    return written


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python tests/convert_chapters.py OUTDIR")
    paths = convert(Path(sys.argv[1]))
    print(f"converted {len(paths)} chapters into {sys.argv[1]}")
