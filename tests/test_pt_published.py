"""Tests of attnlab.theory.phase_transition.published: every value copied from the authors' files
is checked against those files where they are at hand (skipped elsewhere)."""

import csv
import os
from pathlib import Path

import pytest

from attnlab.theory.phase_transition import published

REFERENCE = Path(os.environ.get("ATTNLAB_PAPER_B", "/work/shared/reference/paperB"))
needs_files = pytest.mark.skipif(not REFERENCE.is_dir(), reason="the authors' files are not at hand")


def _rows(name):
    with open(REFERENCE / name, newline="") as fh:
        return list(csv.DictReader(fh))


@needs_files
def test_the_stored_crossing_is_their_omega_03_curves():
    name = "repl_softmax_Mixed_sig0.5_lamb0.01_omega0.3{}.csv"
    sem = {float(r["alpha"]): -float(r["Phi"]) for r in _rows(name.format(""))}
    pos = {float(r["alpha"]): -float(r["Phi"]) for r in _rows(name.format("_para"))}
    for alpha, e_sem, e_pos in published.STORED_CROSSING:
        assert sem[alpha] == e_sem and pos[alpha] == e_pos
    # the two rows are neighbours on their grid and the difference changes sign between them
    (a0, s0, p0), (a1, s1, p1) = published.STORED_CROSSING
    assert not any(a0 < a < a1 for a in sem) and (s0 - p0) * (s1 - p1) < 0


@needs_files
def test_the_stored_gradient_descent_means_are_their_files():
    rows = [
        r for r in _rows("results_mean_standardA.csv")
        if r["d"] == "1000" and r["sigma"] == "0.5" and r["attention_lmbda"] == "0.01"
    ]  # fmt: skip

    def mean(omega, alpha, informed, column):
        (row,) = [r for r in rows if float(r["omega"]) == omega and float(r["alpha"]) == alpha
                  and r["informed"] == str(informed)]  # fmt: skip
        return float(row[column])

    s7 = published.STORED_GD["sigma_0.7"]
    (row,) = [r for r in _rows("results_mean_standardA.csv") if r["d"] == "1000" and r["sigma"] == "0.7"
              and r["attention_lmbda"] == "0.01" and float(r["omega"]) == s7["omega"]
              and float(r["alpha"]) == s7["alpha"] and r["informed"] == "False"]  # fmt: skip
    assert float(row["attention_mag_mean"]) == s7["m_positional"]
    a = published.STORED_GD["A"]
    assert mean(a["omega"], a["alpha"], True, "attention_theta_mean") == a["theta_over_sigma2"]
    for (omega, alpha), m in published.STORED_GD["B"].items():
        assert mean(omega, alpha, False, "attention_mag_mean") == m
    at2 = published.STORED_GD["alpha_2"]
    assert mean(0.3, 2.0, True, "attention_gen_error_mean") == at2["eps_g_semantic"]
    assert mean(0.3, 2.0, False, "attention_gen_error_mean") == at2["eps_g_positional"]
    assert mean(0.3, 2.0, False, "attention_mag_mean") == at2["m_positional"]
    # the crossing: the last grid value with the semantic start's training error higher, and the next
    alphas = sorted({float(r["alpha"]) for r in rows if float(r["omega"]) == 0.3})
    col = "attention_train_error_mean"
    gap = [mean(0.3, x, True, col) - mean(0.3, x, False, col) for x in alphas]
    flips = [i for i in range(len(gap) - 1) if gap[i] > 0 >= gap[i + 1]]
    assert [(alphas[i], alphas[i + 1]) for i in flips] == [published.STORED_GD["crossing"]]


def test_the_table_is_ordered_like_the_paper():
    # both lines rise with omega, and alpha_l lies above alpha_c at every tabulated omega
    for line in published.TABLE.values():
        values = [line[w] for w in sorted(line)]
        assert values == sorted(values)
    for w in set(published.TABLE["alpha_c"]) & set(published.TABLE["alpha_l"]):
        assert published.TABLE["alpha_l"][w] > published.TABLE["alpha_c"][w]
