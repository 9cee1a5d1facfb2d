"""Argument checks shared by every public function.

Each helper raises ``ValueError`` naming the argument and what was expected, and returns the
(possibly converted) value so that calls can be chained: ``n = check_int("n", n, minimum=1)``.

torch is imported only by the helpers that make torch objects: a page that plots or tabulates
committed results (``attnlab.plotting``, ``attnlab.tables``, the theory solvers) does not pay
for importing it (about 2 s of every chapter's start). A value is a tensor only if torch has
been imported by whoever made it, so the checks look for torch among the loaded modules.
"""

from __future__ import annotations

import numbers
import sys
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch


def _is_tensor(value) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def _describe(value) -> str:
    if isinstance(value, np.ndarray) or _is_tensor(value):
        return f"array of shape {tuple(value.shape)}"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check_int(name: str, value, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """Return ``value`` as an ``int``; it must be an integer in ``[minimum, maximum]``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be an integer, got {_describe(value)}")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be an integer <= {maximum}, got {value}")
    return value


def check_real(
    name: str,
    value,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    strict_minimum: bool = False,
) -> float:
    """Return ``value`` as a finite ``float`` in the given range.

    ``strict_minimum=True`` excludes ``minimum`` itself (for quantities that must be positive).
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a real number, got {_describe(value)}")
    value = float(value)
    if not np.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    if minimum is not None:
        if strict_minimum and value <= minimum:
            raise ValueError(f"{name} must be > {minimum}, got {value}")
        if not strict_minimum and value < minimum:
            raise ValueError(f"{name} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {value}")
    return value


def check_positive(name: str, value) -> float:
    """Return ``value`` as a ``float``; it must be finite and strictly positive."""
    return check_real(name, value, minimum=0.0, strict_minimum=True)


def check_choice(name: str, value, choices: Iterable):
    """Return ``value``; it must be one of ``choices``."""
    choices = tuple(choices)
    if value not in choices:
        options = ", ".join(repr(c) for c in choices)
        raise ValueError(f"{name} must be one of {options}; got {_describe(value)}")
    return value


def check_shape(name: str, array, shape: Sequence[int | None]):
    """Check that ``array`` (numpy or torch) has ``shape``; ``None`` matches any length."""
    if not (isinstance(array, np.ndarray) or _is_tensor(array)):
        raise ValueError(f"{name} must be a numpy array or torch tensor, got {_describe(array)}")
    actual = tuple(array.shape)
    expected = tuple(shape)
    ok = len(actual) == len(expected) and all(
        e is None or e == a for a, e in zip(actual, expected, strict=True)
    )
    if not ok:
        pretty = "[" + ", ".join("*" if e is None else str(e) for e in expected) + "]"
        raise ValueError(f"{name} must have shape {pretty}, got {list(actual)}")
    return array


def check_finite(name: str, array):
    """Check that every entry of ``array`` (numpy or torch) is finite."""
    finite = array.isfinite().all() if _is_tensor(array) else np.isfinite(array).all()
    if not bool(finite):
        raise ValueError(f"{name} must contain only finite values")
    return array


def check_probabilities(name: str, probs, size: int | None = None) -> np.ndarray:
    """Return ``probs`` as a float array of non-negative entries summing to one."""
    p = np.asarray(probs, dtype=float)
    if p.ndim != 1 or (size is not None and p.shape[0] != size):
        want = f"length {size}" if size is not None else "one dimension"
        raise ValueError(f"{name} must be a 1-D array of {want}, got shape {list(p.shape)}")
    if np.any(p < 0) or not np.isclose(p.sum(), 1.0, atol=1e-9):
        raise ValueError(f"{name} must be non-negative and sum to 1, got sum {p.sum():.6g}")
    return p


def resolve_device(device) -> torch.device:
    """Return a ``torch.device`` for ``"cpu"``, ``"cuda"`` (or ``"cuda:N"``) or a device.

    Asking for CUDA where none is available raises ``ValueError`` rather than failing later.
    """
    import torch

    if isinstance(device, torch.device):
        dev = device
    elif isinstance(device, str):
        try:
            dev = torch.device(device)
        except RuntimeError as err:
            raise ValueError(f"device must be 'cpu' or 'cuda[:N]', got {device!r}") from err
    else:
        raise ValueError(f"device must be 'cpu', 'cuda' or a torch.device, got {_describe(device)}")
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda[:N]', got {device!r}")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' was requested but torch finds no CUDA device")
    return dev


def resolve_dtype(dtype) -> torch.dtype:
    """Return ``torch.float32`` or ``torch.float64`` from a dtype or its name."""
    import torch

    table = {"float32": torch.float32, "float64": torch.float64}
    if isinstance(dtype, str):
        dtype = table.get(dtype, dtype)
    if dtype not in (torch.float32, torch.float64):
        raise ValueError(f"dtype must be 'float32' or 'float64', got {_describe(dtype)}")
    return dtype


def make_generator(seed, *, device="cpu") -> torch.Generator:
    """Return a ``torch.Generator`` from an int seed, or pass a generator through."""
    import torch

    if isinstance(seed, torch.Generator):
        return seed
    seed = check_int("seed", seed, minimum=0)
    gen = torch.Generator(device=resolve_device(device))
    gen.manual_seed(seed)
    return gen


def make_rng(seed) -> np.random.Generator:
    """Return a ``numpy.random.Generator`` from an int seed, or pass a generator through."""
    if isinstance(seed, np.random.Generator):
        return seed
    seed = check_int("seed", seed, minimum=0)
    return np.random.default_rng(seed)
