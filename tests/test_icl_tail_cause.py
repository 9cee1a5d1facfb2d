"""Tests of ``icl_tail_cause``: the heavy tail of the table's 3-layer DIAG at sigma_max = 0 comes
from prompts whose largest eigenvalue lies beyond the model's edge (chapter 04)."""

import pandas as pd
import pytest

from attnlab.experiments import load_result, run


def _frames(result):
    df = pd.DataFrame(result.rows)
    summary = df[df.kind == "summary"].set_index("arm").dropna(axis=1, how="all")
    return summary, df[df.kind == "prompt"], df[df.kind == "given"]


def test_committed_tail_cause_is_reproduced_and_pinned():
    """The book scale (fewer prompts at given lambda_max) re-derives the committed summaries and
    per-prompt rows with today's code; the numbers chapter 04 cites are pinned."""
    committed = load_result("icl_tail_cause", "paper")
    s, prompts, given = _frames(committed)
    s2, prompts2, given2 = _frames(run("icl_tail_cause", "book", cache=False))
    cols = ["mean", "se", "median", "trimmed", "index", "worst_share", "edge", "worst_loss", "worst_moved"]
    pd.testing.assert_frame_equal(s2[cols].astype(float), s[cols].astype(float), rtol=1e-9)
    per = ["lmax", "loss", "moved"]
    pd.testing.assert_frame_equal(
        prompts2[per].astype(float).reset_index(drop=True),
        prompts[per].astype(float).reset_index(drop=True),
        rtol=1e-9,
    )
    drawn, moved = s.loc["drawn"], s.loc["moved"]
    assert drawn.seed == 3 and drawn.edge == pytest.approx(88.18280, rel=1e-6)
    assert (drawn.n_beyond, drawn.worst) == (4, 55_417)
    assert drawn.worst_lmax == pytest.approx(93.3836, rel=1e-5)
    assert drawn.worst_loss == pytest.approx(11456.28, rel=1e-5)
    assert drawn.worst_moved == pytest.approx(5.47e-4, rel=1e-2)
    # moving lambda_max of the 4 prompts beyond the edge (of 100,000) removes the catastrophe
    assert drawn["mean"] == pytest.approx(0.130689, rel=1e-5)
    assert moved["mean"] == pytest.approx(0.011387, rel=1e-4)
    assert drawn.worst_share > 0.85 and moved.worst_share < 0.1
    assert not drawn.mean_ok and drawn["index"] < 0.5
    # the trimmed mean hardly moves: it already leaves the catastrophic prompts out
    assert abs(moved.trimmed / drawn.trimmed - 1) < 0.01
    # at a given lambda_max: typical inside the edge, catastrophic beyond it
    med = given.set_index(given.lmax.astype(float))["median"].astype(float)
    assert med.loc[:80].max() < 0.01 and med.loc[100.0] > 1e4
    assert (med.loc[90:].diff().dropna() > 0).all()
    for t, m in zip(given2.lmax.astype(float), given2["median"].astype(float), strict=True):
        assert (m < 0.01) if t < 85 else (m > 1e4), (t, m)
