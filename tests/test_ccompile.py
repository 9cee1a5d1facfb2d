"""The compiled kernels' fallback is loud: a kernel that cannot be built warns once, with why."""

import importlib
import warnings

import pytest
import torch

from attnlab import ccompile
from attnlab.models import gram_kernel

prox = importlib.import_module("attnlab.theory.phase_transition.prox")  # the module, not its function


@pytest.fixture
def no_compiler(monkeypatch, tmp_path):
    monkeypatch.setenv("CC", "no-such-cc")
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path))  # nothing built before
    monkeypatch.setattr(ccompile, "_WARNED", set())
    monkeypatch.setattr(ccompile, "FAILURES", {})
    gram_kernel._library.cache_clear()
    prox._kernel.cache_clear()
    yield
    gram_kernel._library.cache_clear()
    prox._kernel.cache_clear()


def test_the_gram_kernel_fallback_warns_once_with_the_reason_and_the_cost(no_compiler):
    with pytest.warns(
        RuntimeWarning,
        match=r"gram_kernel could not be built \(no C compiler \('no-such-cc'.*3 to 4 times slower",
    ):
        assert not gram_kernel.available(torch.float32, 10)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once: the second dtype does not warn again
        assert not gram_kernel.available(torch.float64, 10)


def test_the_prox_kernel_fallback_warns_with_the_reason(no_compiler):
    with pytest.warns(
        RuntimeWarning, match=r"prox_kernel could not be built \(no C compiler.*2\.5 to 3 times slower"
    ):
        assert prox._kernel() is None


def test_a_failing_compile_names_the_compiler_error(monkeypatch, tmp_path):
    bad = tmp_path / "bad.c"
    bad.write_text("this is not C\n")
    monkeypatch.setattr(ccompile, "FAILURES", {})
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path / "cache"))
    if ccompile.load(bad, "bad_kernel", ("-shared",)) is not None:
        pytest.fail("a source that is not C must not load")
    assert (
        ccompile.FAILURES["bad_kernel"].startswith("cc failed on bad.c:")
        or "failed on bad.c" in ccompile.FAILURES["bad_kernel"]
    )


def test_a_deliberately_disabled_kernel_does_not_warn(monkeypatch):
    monkeypatch.setenv("ATTNLAB_GRAM_KERNEL", "0")
    monkeypatch.setattr(ccompile, "_WARNED", set())
    gram_kernel._library.cache_clear()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert not gram_kernel.available()
    finally:
        gram_kernel._library.cache_clear()
