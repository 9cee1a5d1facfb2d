"""Glossary terms are linked with ``{term}`` at their first use in a chapter's running prose (headings,
directive titles, code and math are not running prose)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

BOOK = Path(__file__).resolve().parents[1] / "book"
# every chapter of the three parts and the common ground (the lab notes and the guide are not chapters)
CHAPTERS = sorted(p for p in BOOK.glob("*/*.md") if p.parent.name != "lab-notes")


def glossary_terms() -> list[str]:
    text = (BOOK / "glossary.md").read_text()
    block = text.split("```{glossary}")[1].split("\n```")[0]
    return [line for line in block.splitlines() if line and not line.startswith((" ", ":"))]


def running_prose(text: str) -> str:
    """The chapter without its front matter, code cells, headings, directive lines and math; the
    text of a ``{term}`` link is kept, marked as ``[[text]]``."""
    text = re.sub(r"\A---\n.*?\n---\n", "", text, flags=re.S)
    text = re.sub(r"^(`{3,4})\{code-cell\}.*?^\1$", "", text, flags=re.M | re.S)
    text = re.sub(r"^(`{3,4})\{math\}.*?^\1$", "", text, flags=re.M | re.S)
    text = re.sub(r"^(#.*|`{3,4}.*|:\w[\w-]*:.*)$", "", text, flags=re.M)  # headings, fences, options
    text = re.sub(r"^(\s*- )?\*\*[^*]+\*\*", "", text, flags=re.M)  # run-in headings, "**What this means.**"
    text = re.sub(r"\$\$.*?\$\$|\$[^$\n]*\$", " ", text, flags=re.S)
    text = re.sub(r"\{term\}`([^`<]*?)\s*(?:<[^>]*>)?`", r"[[\1]]", text)
    return re.sub(r"\{[\w:-]+\}`[^`]*`|`[^`]*`", " ", text)  # other roles and inline code


def unlinked_first_uses(text: str, terms: list[str]) -> list[str]:
    prose = running_prose(text)
    out = []
    for term in terms:
        first = re.search(r"(\[\[)?\b" + re.escape(term) + r"(?:s|es)?\b", prose, re.I)
        if first and not first.group(1):
            out.append(term)
    return out


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: str(p.relative_to(BOOK)))
def test_glossary_terms_are_linked_at_their_first_use(path):
    assert unlinked_first_uses(path.read_text(), glossary_terms()) == []


def test_an_unlinked_first_use_is_found():
    terms = ["Plateau", "Sign rule"]
    text = "# Plateau\n\n**Plateau.** The plateau is long; the {term}`plateau` ends.\n"
    text += "The {term}`sign rule <Sign rule>` holds; the sign rule.\n"
    assert unlinked_first_uses(text, terms) == ["Plateau"]
    assert unlinked_first_uses(text.replace("The plateau is long; t", "T"), terms) == []
