import numpy as np
import pytest
import torch

from attnlab import validation as v


def test_check_int_accepts_and_converts():
    assert v.check_int("n", np.int64(3), minimum=1) == 3


@pytest.mark.parametrize("bad", [1.5, "3", True, None])
def test_check_int_rejects_non_integers(bad):
    with pytest.raises(ValueError, match="n must be an integer"):
        v.check_int("n", bad)


def test_check_int_range():
    with pytest.raises(ValueError, match="n must be an integer >= 1, got 0"):
        v.check_int("n", 0, minimum=1)
    with pytest.raises(ValueError, match="n must be an integer <= 5"):
        v.check_int("n", 6, maximum=5)


def test_check_real_and_positive():
    assert v.check_real("x", 2) == 2.0
    with pytest.raises(ValueError, match="x must be finite"):
        v.check_real("x", float("nan"))
    with pytest.raises(ValueError, match="lr must be > 0"):
        v.check_positive("lr", 0.0)
    with pytest.raises(ValueError, match="x must be >= 0"):
        v.check_real("x", -1.0, minimum=0.0)
    with pytest.raises(ValueError, match="x must be <= 1"):
        v.check_real("x", 2.0, maximum=1.0)
    with pytest.raises(ValueError, match="x must be a real number"):
        v.check_real("x", "1")


def test_check_choice():
    assert v.check_choice("branch", "semantic", ("semantic", "positional")) == "semantic"
    with pytest.raises(ValueError, match="branch must be one of 'semantic', 'positional'"):
        v.check_choice("branch", "other", ("semantic", "positional"))


def test_check_shape_numpy_and_torch():
    v.check_shape("X", np.zeros((2, 3)), (None, 3))
    v.check_shape("X", torch.zeros(2, 3), (2, 3))
    with pytest.raises(ValueError, match=r"X must have shape \[\*, 4\], got \[2, 3\]"):
        v.check_shape("X", np.zeros((2, 3)), (None, 4))
    with pytest.raises(ValueError, match="X must be a numpy array or torch tensor"):
        v.check_shape("X", [[1, 2]], (1, 2))


def test_check_finite():
    v.check_finite("X", np.ones(3))
    with pytest.raises(ValueError, match="X must contain only finite values"):
        v.check_finite("X", torch.tensor([1.0, float("inf")]))


def test_check_probabilities():
    p = v.check_probabilities("probs", [0.25, 0.75], size=2)
    assert p.dtype == float
    with pytest.raises(ValueError, match="probs must be non-negative and sum to 1"):
        v.check_probabilities("probs", [0.5, 0.6])
    with pytest.raises(ValueError, match="probs must be a 1-D array of length 3"):
        v.check_probabilities("probs", [0.5, 0.5], size=3)


def test_devices_and_dtypes():
    assert v.resolve_device("cpu") == torch.device("cpu")
    assert v.resolve_dtype("float64") is torch.float64
    with pytest.raises(ValueError, match="device must be"):
        v.resolve_device("tpu")
    with pytest.raises(ValueError, match="device must be"):
        v.resolve_device(3)
    with pytest.raises(ValueError, match="dtype must be"):
        v.resolve_dtype("float16")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="device='cuda' was requested"):
            v.resolve_device("cuda")


def test_generators_are_reproducible():
    a = torch.randn(3, generator=v.make_generator(5))
    b = torch.randn(3, generator=v.make_generator(5))
    assert torch.equal(a, b)
    g = torch.Generator()
    assert v.make_generator(g) is g
    assert v.make_rng(1).integers(100) == np.random.default_rng(1).integers(100)
    with pytest.raises(ValueError, match="seed must be an integer >= 0"):
        v.make_rng(-1)
