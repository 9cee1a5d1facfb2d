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
