"""The prose check (tests/prose_check.py): its parts, a fixture chapter broken one target at a
time, and the book's chapters held to the targets."""

from __future__ import annotations

from pathlib import Path

import prose_check as pc
import pytest
from convert_chapters import chapter_paths

GOOD = Path(__file__).parent / "fixtures" / "prose" / "good.md"
NAMES = ("pt_gd", "icl_mixed_noise")


def _check(text: str, kind: str = "chapter") -> pc.Report:
    return pc.check_text(text, kind, names=NAMES)


# --- sentences and numbers -------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("One. Two.", ["One.", "Two."]),
        ("Use e.g. a ridge. Then stop.", ["Use e.g. a ridge.", "Then stop."]),
        (
            "That is, i.e. the mean. See Fig. 3 and Eq. 2.",
            ["That is, i.e. the mean.", "See Fig. 3 and Eq. 2."],
        ),
        ("The rate is 0.15 and 2.5. Next.", ["The rate is 0.15 and 2.5.", "Next."]),
        ("As Cui et al. show, it works.", ["As Cui et al. show, it works."]),
        ("Loss, memory, etc. are kept. It ends.", ["Loss, memory, etc. are kept.", "It ends."]),
        ("It is small (about 1 %). ⟨math⟩ grows.", ["It is small (about 1 %).", "⟨math⟩ grows."]),
        ('He said "stop." Then left!', ['He said "stop."', "Then left!"]),
        ("Is it? Yes. 3 seeds agree.", ["Is it?", "Yes.", "3 seeds agree."]),
        ("No full stop at the end", ["No full stop at the end"]),
        ("The answer is no. The next one is yes.", ["The answer is no.", "The next one is yes."]),
    ],
)
def test_split_sentences(text, expected):
    assert pc.split_sentences(text) == expected


@pytest.mark.parametrize(
    "text, n",
    [
        ("no numbers here, four seeds", 0),
        ("lr 0.15 at d = 400", 2),
        ("30,000 prompts", 1),
        ("a tolerance of 1e-4, or 1e−4", 2),
        ("10⁴ steps, 10^4 steps", 2),
        ("2.5× faster, 2.5×10⁴ tokens", 2),
        ("U(0, 5) and 2–5 and 1/31", 6),
        ("float64, x_2, H200, d2l", 0),
        ("6k steps and 7L models", 2),
        ("2 % or 50%", 2),
        ("⟨num⟩ against ⟨num⟩ at 3", 3),
        ("Table 1 and chapter 03", 2),
    ],
)
def test_count_numbers(text, n):
    assert pc.count_numbers(text) == n


def test_roles_math_and_code_carry_no_numbers():
    report = _check(
        "# T\n\nSee {eq}`eq-1`, {numref}`fig-2`, {doc}`03-x` and {cite:p}`a2024` "
        "with $x_1 = 2, 3, 4$ and `f(1, 2, 3)`.\n"
    )
    assert len(report.sentences) == 1 and not report.numeric
    glued = _check("# T\n\nIt is {glue:text}`a` against {glue:}`b` and {glue}`c`; {glue:md}`names`.\n")
    assert len(glued.numeric) == 1


def test_run_in_titles_and_sentences_across_display_math():
    report = _check(
        "# T\n\n**Check.** The formula holds.\n\nTake\n\n```{math}\n:label: eq-a\nx = 1\n```\n\n"
        "with $x$ the input. Then\n\n$$\ny\n$$\n\nThe next paragraph starts anew\n"
    )
    assert [f.text for f in report.sentences] == [
        "The formula holds.",
        f"Take {pc.MATH} with {pc.MATH} the input.",
        "Then",
        "The next paragraph starts anew",
    ]
    assert [f.line for f in report.sentences] == [3, 5, 12, 18]


# --- what counts as running prose --------------------------------------------------------------

ASIDES = {
    "margin": "```{margin}\n{body}\n```",
    "colon-fence margin": ":::{margin}\n{body}\n:::",
    "collapsed proof": "```{prf:proof}\n:class: dropdown\n{body}\n```",
    "dropdown": "```{admonition} How we checked this\n:class: dropdown\n{body}\n```",
    "exercise": "```{exercise}\n:label: ex-x\n{body}\n```",
    "solution": "```{solution} ex-x\n{body}\n```",
    "gated solution": "```{solution-start} ex-x\n```\n\n{body}\n\n```{solution-end}\n```",
    "footnote": "Text[^1].\n\n[^1]: {body}",
    "math": "$$\n{body}\n$$",
    "code cell": "```{code-cell} ipython3\n# {body}\n```",
}


@pytest.mark.parametrize("aside", ASIDES)
def test_the_record_set_aside_is_not_measured(aside):
    body = "The run `pt_gd` in `results/pt_gd.csv` took 1, 2 and 3 s at 1e-4."
    report = _check("# T\n\n" + ASIDES[aside].replace("{body}", body) + "\n")
    assert not report.numeric and not report.experiments and not report.files


def test_open_admonitions_and_statements_are_prose():
    for opening in ("```{admonition} In this chapter\n:class: tip\n", "```{prf:theorem}\n:label: thm-x\n"):
        report = _check("# T\n\n" + opening + "\nThe run `pt_gd` took 1, 2 and 3 s.\n```\n")
        assert len(report.numeric) == 1 and [f.text for f in report.experiments] == ["pt_gd"]


def test_names():
    report = _check(
        "# T\n\nThe experiment `pt_gd` (and `icl_mixed_noise-cpu`, not `pt_gdx`) writes "
        "`results/pt_gd.csv` and gram_kernel.c under lib/attnlab/results/; `run(name)` and "
        "{func}`~attnlab.theory.solve` and attnlab.plotting are functions. Not files: e.g. i.e. n/d.\n"
    )
    assert [f.text for f in report.experiments] == ["pt_gd", "icl_mixed_noise", "pt_gd"]
    assert {f.text for f in report.files} == {"results/pt_gd.csv", "gram_kernel.c", "lib/attnlab/results/"}
    assert {f.text for f in report.functions} == {"run", "attnlab.theory.solve", "attnlab.plotting"}


# --- figures, worked examples, equations -------------------------------------------------------

PROSE = "Words that fill the page up with running prose for a while.\n\n" * 10


@pytest.mark.parametrize(
    "figure",
    [
        "```{code-cell} ipython3\nfig, ax = plt.subplots()\n```",
        "```{code-cell} ipython3\n---\nmystnb:\n  figure:\n    name: fig-x\n---\nshow()\n```",
        "```{code-cell} ipython3\nplotting.attention_map(ax, A)\n```",
        "```{code-cell} ipython3\nfig = recipe.reduced_figure(run)\n```",
        "```{glue:figure} fig-x\n```",
        "```{figure} x.png\nA caption.\n```",
        "```{prf:example}\nTwo tokens.\n```",
        "```{admonition} Worked example: two tokens\nTwo tokens.\n```",
        "```{admonition} Example\nTwo tokens.\n```",
        "**Worked example.** Two tokens.",
    ],
)
def test_first_figure(figure):
    report = _check("# T\n\n" + PROSE + figure + "\n\n" + PROSE * 3)
    assert report.first_figure == pytest.approx(0.25, abs=0.02)


def test_no_figure():
    for not_a_figure in (
        "```{code-cell} ipython3\nplotting.use_style()\nx = 1\n```",
        "```{code-cell} ipython3\n:tags: [remove-output]\nfig, ax = plt.subplots()\nglue('f', fig)\n```",
        "```{admonition} Worked example\n:class: dropdown\nTwo tokens.\n```",
        "```{exercise}\n**Worked example.** Two tokens.\n```",
    ):
        assert _check("# T\n\n" + PROSE + not_a_figure + "\n").first_figure is None


def test_equations():
    assert _check("# T\n\n```{math}\n:label: eq-a\nx\n```\n\n$$\ny\n$$ (eq-b)\n\n$$\nz\n$$\n").equations == 2
    assert _check("# T\n\n```{exercise}\n\n$$\ny\n$$ (eq-b)\n```\n").equations == 0
    derives = _check("# T\n\n```{prf:proof}\nObvious.\n```\n")
    assert derives.derives and derives.equations == 0


# --- the targets, on a chapter that meets them and on copies that break one each ---------------

BREAKS = {
    "numbers": (
        "The rest of the chapter says why.",
        "The rest of the chapter says why. It took 3 runs of 2 s at 1e-4. Then 4, 5 and 6 more.",
        "sentences with >= 3 numbers",
    ),
    "experiment name": (
        "The rest of the chapter",
        "The run `pt_gd` and the rest of the chapter",
        "experiment names",
    ),
    "file name": (
        "The rest of the chapter",
        "The file `weights.json` and the rest of the chapter",
        "file names",
    ),
    "equation": (":label: eq-fixture-weight\n", "", "no numbered display equation"),
    "late figure": ("derives them after.\n", "derives them after.\n\n" + PROSE, "figure"),
}


def test_the_fixture_meets_every_target():
    report = _check(GOOD.read_text())
    assert pc.failures(report) == []
    assert report.derives and report.equations == 1 and report.first_figure < pc.FIGURE_BEFORE


@pytest.mark.parametrize("target", BREAKS)
def test_a_broken_target_is_caught(target):
    old, new, message = BREAKS[target]
    text = GOOD.read_text()
    assert old in text
    missed = pc.failures(_check(text.replace(old, new, 1)))
    assert len(missed) == 1 and message in missed[0], missed


def test_overviews_have_no_figure_target_and_other_pages_no_targets():
    late = GOOD.read_text().replace(*BREAKS["late figure"][:2], 1)
    assert pc.failures(_check(late, "overview")) == []
    broken = late.replace(*BREAKS["experiment name"][:2], 1)
    assert len(pc.failures(_check(broken, "overview"))) == 1
    assert pc.failures(_check(broken, "other")) == []


def test_page_kinds():
    assert pc.page_kind(pc.BOOK / "in-context" / "04-mixed-noise.md") == "chapter"
    assert pc.page_kind(pc.BOOK / "linear-nn" / "index.md") == "overview"
    assert pc.page_kind(pc.BOOK / "lab-notes" / "in-context.md") == "other"
    assert pc.page_kind(pc.BOOK / "intro.md") == "other"
    with pytest.raises(ValueError, match="kind"):
        pc.check_text("# T\n", "lab")


# --- the book ----------------------------------------------------------------------------------

HELD = [p for p in chapter_paths() if pc.page_kind(p) != "other"]


def test_every_chapter_folder_has_pages():
    assert {p.parent.name for p in HELD} == set(pc.CHAPTER_FOLDERS)


@pytest.mark.parametrize("path", HELD, ids=[str(p.relative_to(pc.BOOK)) for p in HELD])
def test_chapter_meets_the_prose_targets(path):
    missed = pc.failures(pc.check(path))
    assert not missed, f"{path.relative_to(pc.BOOK)}: " + "; ".join(missed)


def test_the_command_line_prints_the_table(capsys):
    assert pc.main(["--kind", "chapter", "-v", str(GOOD)]) == 0
    out = capsys.readouterr().out
    assert "| page | sentences | with ≥3 numbers |" in out
    assert "| 0.0% | 0 | 0 | 0 | 1 (derives) |" in out and "meets the targets" in out
