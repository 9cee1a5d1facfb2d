"""Convert every chapter (``book/**/*.md``) to a notebook in a scratch folder, for nbval.

Usage: ``python tests/convert_chapters.py OUTDIR``. The folder structure under ``book/`` is kept.
The ``.md`` stays the only source; the notebooks written here are throw-away.
"""

from __future__ import annotations

import sys
from pathlib import Path

import jupytext

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "book"


def chapter_paths() -> list[Path]:
    """Every chapter of the book, in a stable order."""
    return sorted(BOOK.rglob("*.md"))


def convert(out: Path) -> list[Path]:
    written = []
    for md in chapter_paths():
        target = out / md.relative_to(BOOK).with_suffix(".ipynb")
        target.parent.mkdir(parents=True, exist_ok=True)
        jupytext.write(jupytext.read(md), target, fmt="ipynb")
        written.append(target)
    return written


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python tests/convert_chapters.py OUTDIR")
    paths = convert(Path(sys.argv[1]))
    print(f"converted {len(paths)} chapters into {sys.argv[1]}")
