"""Tests of ``book_run``, the chapters' access to Part II's book-scale experiments (04, 05)."""

import pytest

from attnlab import experiments as ex
from attnlab.experiments.phase_transition import book_run, engine


def test_without_overrides_it_is_the_committed_result_and_prints_nothing(capsys):
    result = book_run("pt_untied")
    committed = ex.load_result("pt_untied", "book")
    assert result.rows == committed.rows
    assert result.config == ex.get("pt_untied").config("book")
    assert result.meta["command"] == committed.meta["command"]
    assert capsys.readouterr().out == ""  # a page prints no shell command


def test_a_stale_committed_result_raises(monkeypatch):
    """A committed result whose configuration is no longer the registered one is refused."""
    stale = ex.load_result("pt_value", "book")
    stale.config = {**stale.config, "n_seeds": stale.config["n_seeds"] + 1}
    monkeypatch.setattr(engine, "load_result", lambda name, scale: stale)
    with pytest.raises(RuntimeError, match="registered"):
        book_run("pt_value")


def test_overrides_run_anew_with_them(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path / "cache"))
    tiny = {"d": 12, "n_seeds": 2, "steps": 20, "n_alpha": 1, "n_test": 50}
    result = book_run("pt_correlated", correlation=0.8, **tiny)
    assert result.config == ex.get("pt_correlated").config("book", {"correlation": 0.8, **tiny})
    assert {row["d"] for row in result.rows} == {12}
    assert capsys.readouterr().out == ""  # a new run has no committed command
    with pytest.raises(ValueError, match="overrides key"):
        book_run("pt_correlated", not_a_key=1)


@pytest.mark.parametrize("name", ["icl_mixed_noise", "pt_nonexistent", ""])
def test_a_name_that_is_not_a_part_ii_experiment_raises(name):
    with pytest.raises(ValueError, match="name must be a registered Part II experiment"):
        book_run(name)


def test_the_committed_book_scale_gd_run_is_todays_code():
    # chapter 03 loads pt_gd at book scale (d = 400, about 7 s of CPU) instead of running it:
    # run it again here and compare every row (float32 GD: the CPU's kernels move the last bits,
    # up to 3.6e-6 relative between torch's AVX2 and default kernels on one machine, measured)
    result = ex.run("pt_gd", "book", cache=False)
    committed = book_run("pt_gd")
    assert len(result.rows) == len(committed.rows)
    key = ("alpha", "seed_index", "init")
    stored = {tuple(r[k] for k in key): r for r in committed.rows}
    for row in result.rows:
        old = stored[tuple(row[k] for k in key)]
        for col in ("eps_g", "eps_t", "m", "theta_over_sigma2"):
            assert row[col] == pytest.approx(old[col], rel=1e-5, abs=1e-12), (row, col)
