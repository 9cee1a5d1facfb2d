"""The exercises of a part are a participant's kit: each states a difficulty and a time, each solution
with code runs (a gated ``solution-start`` / ``solution-end`` pair, whose code cells nbval and the
build execute), and at least half of the coding exercises name a self-check (``verify_*``) that the
library has."""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

import pytest

import attnlab

BOOK = Path(__file__).resolve().parents[1] / "book"
# every chapter of the book's parts (the lab notes and the guide have no exercises)
CHAPTERS = sorted(p for p in BOOK.glob("*/*.md") if p.parent.name != "lab-notes")

EXERCISE = re.compile(
    r"^```\{exercise\} (?P<title>[^\n]*)\n:label: (?P<label>\S+)\n(?P<body>.*?)^```$", re.M | re.S
)
GATED = re.compile(
    r"^````\{solution-start\} (?P<label>\S+)\n.*?^````\n(?P<body>.*?)^```\{solution-end\}\n```$", re.M | re.S
)
STATIC = re.compile(r"^```\{solution\} (?P<label>\S+)\n(?P<body>.*?)^```$", re.M | re.S)
FENCE = re.compile(r"^(```|~~~)", re.M)  # a code block, with either fence
DIFFICULTY = re.compile(r" · (★{1,3}) · (\d+) min$")


def exercises(text: str) -> dict:
    """label -> (title, body, solution body, gated?) of every exercise of a chapter's source."""
    gated = {m["label"]: m["body"] for m in GATED.finditer(text)}
    static = {m["label"]: m["body"] for m in STATIC.finditer(text)}
    out = {}
    for m in EXERCISE.finditer(text):
        label = m["label"]
        solution = gated.get(label, static.get(label))
        out[label] = (m["title"], m["body"], solution, label in gated)
    return out


def library_verifiers() -> set[str]:
    names = set()
    for info in pkgutil.walk_packages(attnlab.__path__, "attnlab."):
        if ".experiments." in info.name or info.name.endswith(".__main__"):
            continue
        module = importlib.import_module(info.name)
        names |= {n for n in vars(module) if n.startswith("verify_")}
    return names


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: str(p.relative_to(BOOK)))
def test_every_exercise_has_a_difficulty_a_time_and_a_solution_that_runs(path):
    text = path.read_text()
    found = exercises(text)
    assert len(found) == text.count("```{exercise}")  # none missed by the patterns above
    for label, (title, _, solution, gated) in found.items():
        assert DIFFICULTY.search(title), f"{label}: title {title!r} lacks ' · ★… · N min'"
        assert solution is not None, f"{label}: no solution"
        if not gated:  # a static solution must hold no code that nothing runs
            assert not FENCE.search(solution), f"{label}: code in a static solution (gate it)"


def test_half_of_the_coding_exercises_have_a_self_check_the_library_has():
    verifiers = library_verifiers()
    coding, checked = [], []
    for path in CHAPTERS:
        for label, (_, body, solution, gated) in exercises(path.read_text()).items():
            if gated and "```{code-cell}" in solution:
                coding.append(label)
                named = set(re.findall(r"verify_\w+", body + solution))
                assert named <= verifiers, f"{label}: {named - verifiers} not in the library"
                if named:
                    checked.append(label)
    assert len(coding) >= 10 and 2 * len(checked) >= len(coding), (checked, coding)


def test_the_patterns_see_a_bad_exercise():
    bad = (
        "```{exercise} No stars\n:label: ex-bad\n\nText.\n```\n\n"
        "```{solution} ex-bad\n:class: dropdown\n\n~~~python\nprint(1)\n~~~\n```\n"
    )
    ((title, _, solution, gated),) = exercises(bad).values()
    assert not DIFFICULTY.search(title) and not gated and FENCE.search(solution)
