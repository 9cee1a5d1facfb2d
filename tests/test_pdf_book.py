"""The printed book's bookmarks: a heading's formulas written as text (tests/pdf_book.py)."""

import pytest
from pdf_book import bookmark_title, tex_to_text


@pytest.mark.parametrize(
    ("tex", "text"),
    [
        (r"l_{tf}", "l_tf"),
        (r"c \cdot l_{df}", "c · l_df"),
        (r"\gamma^{-1}\log(1/z_0)", "γ⁻¹ log(1/z₀)"),
        (r"1/((d-1)\sigma^2)", "1/((d-1)σ²)"),
        (r"v_k = 0", "vₖ = 0"),
        (r"q_k \perp m_k", "qₖ ⊥ mₖ"),
        (r"\log\log(1/\varepsilon)", "log log(1/ε)"),
        (r"\alpha = 1.5", "α = 1.5"),
        (r"\omega_{yy}", "ω_yy"),
        (r"\frac{1}{\sqrt{d}}", "1/√d"),
        (r"\hat c_k^\top q_k", "ĉₖᵀ qₖ"),
        (r"\mathbb{E}[x]", "𝔼[x]"),
        (r"\operatorname{Tr}(A)", "Tr(A)"),
    ],
)
def test_tex_to_text(tex, text):
    assert tex_to_text(tex) == text


def test_bookmark_title_writes_each_formula_as_text():
    title = r"5.7.1. Small initialisation: a plateau of length \(\gamma^{-1}\log(1/z_0)\)"
    assert bookmark_title(title) == "5.7.1. Small initialisation: a plateau of length γ⁻¹ log(1/z₀)"
    assert bookmark_title(r"Testing the assumption: \(l_{tf}\)  against \(c \cdot l_{df}\) ") == (
        "Testing the assumption: l_tf against c · l_df"
    )
    assert bookmark_title("One-dimensional problems and the \\(r\\)–\\(s\\) solution") == (
        "One-dimensional problems and the r–s solution"
    )
