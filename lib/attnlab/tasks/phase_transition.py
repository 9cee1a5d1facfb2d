"""The positional/semantic task of Part II (pt = phase transition; paper B, Cui et al. 2024).

Chapter ``book/phase-transition/01-model``. Two tokens ``x_l = p_l + z_l`` in ``R^d``
(``l = 1, 2``) with positional encodings ``p_1 = -p_2 = 1_d / sqrt(d)`` and content
``z_l ~ N(0, sigma^2 I_d)``. The target mixes a *semantic* softmax attention on the content and a
fixed *positional* attention ``A``::

    y(x) = [ (1 - omega) softmax(z Q* Q*^T z^T / d) + omega A ] z ,    Q* ~ N(0, I_d)

Everything is batched over independent draws ("seeds"): a teacher holds ``Q_star`` of shape
``[*seeds, d]``, and data come as ``[*seeds, n, L, d]``. Conventions (those of the spec and of
the authors' code): a student ``Q`` has entries of order one and acts as ``x Q / sqrt(d)``; its
overlaps are ``m = 1^T Q / d``, ``theta = sigma^2 Q*^T Q / d`` and ``q = sigma^2 ||Q||^2 / d``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from attnlab.validation import (
    check_finite,
    check_int,
    check_positive,
    check_real,
    check_shape,
    make_generator,
    resolve_device,
    resolve_dtype,
)

L_TOKENS = 2
DEFAULT_A = ((0.6, 0.4), (0.4, 0.6))
OTHER_A = ((0.3, 0.7), (0.8, 0.2))  # the appendix variant

__all__ = [
    "DEFAULT_A",
    "OTHER_A",
    "Teacher",
    "make_A",
    "positional_encodings",
    "make_teacher",
    "target_attention",
    "sample",
    "overlaps",
    "error_from_overlaps",
    "fit_positional_linear",
    "linear_error",
    "verify_encoding_term",
    "verify_overlaps",
]


def make_A(A=None, *, dtype="float64", device="cpu") -> torch.Tensor:
    """The positional attention ``A`` of the target, ``[2, 2]``; ``None`` gives ``DEFAULT_A``.

    Rows must be non-negative and sum to one (``A`` is an attention matrix).
    """
    dtype = resolve_dtype(dtype)
    A = torch.as_tensor(DEFAULT_A if A is None else A, dtype=dtype, device=resolve_device(device))
    check_shape("A", A, (L_TOKENS, L_TOKENS))
    check_finite("A", A)
    if bool((A < 0).any()) or not torch.allclose(A.sum(-1), torch.ones((), dtype=dtype), atol=1e-9):
        raise ValueError("A must have non-negative rows summing to 1 (an attention matrix)")
    return A


def positional_encodings(d: int, *, dtype="float64", device="cpu") -> torch.Tensor:
    """``p`` of shape ``[2, d]`` with ``p_1 = -p_2 = 1_d / sqrt(d)`` (each of norm one)."""
    d = check_int("d", d, minimum=1)
    p1 = torch.full((d,), 1.0 / math.sqrt(d), dtype=resolve_dtype(dtype), device=resolve_device(device))
    return torch.stack([p1, -p1])  # [2, d]


@dataclass
class Teacher:
    """The target of eq. (eq-pt-target): ``Q_star`` ``[*seeds, d]``, ``omega``, ``A`` ``[2, 2]``, ``sigma``.

    ``omega`` is the mixing weight ω of the positional part ``A``.
    """

    Q_star: torch.Tensor
    omega: float
    A: torch.Tensor
    sigma: float

    @property
    def d(self) -> int:
        return self.Q_star.shape[-1]

    @property
    def seeds_shape(self) -> tuple[int, ...]:
        return tuple(self.Q_star.shape[:-1])

    def attention(self, z: torch.Tensor) -> torch.Tensor:
        """The target attention ``T(z) = (1-omega) softmax(z Q* Q*^T z^T / d) + omega A``."""
        return target_attention(z, self.Q_star, self.omega, self.A)

    def __call__(self, z: torch.Tensor) -> torch.Tensor:
        """``y = T(z) z``, shape of ``z`` (``[*seeds, n, 2, d]``)."""
        return self.attention(z) @ z


def make_teacher(
    d: int,
    omega: float,
    *,
    sigma: float = 0.5,
    A=None,
    n_seeds: int | None = None,
    seed=0,
    dtype="float64",
    device="cpu",
) -> Teacher:
    """Draw ``Q* ~ N(0, I_d)``; ``n_seeds`` independent teachers give ``Q_star`` ``[n_seeds, d]``."""
    d = check_int("d", d, minimum=1)
    omega = check_real("omega", omega, minimum=0.0, maximum=1.0)
    sigma = check_positive("sigma", sigma)
    shape = (d,) if n_seeds is None else (check_int("n_seeds", n_seeds, minimum=1), d)
    dtype = resolve_dtype(dtype)
    device = resolve_device(device)
    gen = make_generator(seed, device=device)
    Q_star = torch.randn(shape, generator=gen, dtype=dtype, device=device)
    return Teacher(Q_star, omega, make_A(A, dtype=dtype, device=device), sigma)


def target_attention(z: torch.Tensor, Q_star: torch.Tensor, omega: float, A: torch.Tensor) -> torch.Tensor:
    """``(1 - omega) softmax(z Q* Q*^T z^T / d) + omega A`` for ``z`` ``[*seeds, n, L, d]`` (eq-pt-target).

    ``Q_star`` is ``[*seeds, d]`` (rank one); the result is ``[*seeds, n, L, L]``. The semantic part
    is the attention of :class:`attnlab.models.TiedLowRankAttention` at ``Q = Q*``, fed the content.
    """
    h = z @ Q_star[..., None, :, None] / math.sqrt(z.shape[-1])  # [*seeds, n, L, 1]
    return (1.0 - omega) * torch.softmax(h @ h.transpose(-1, -2), dim=-1) + omega * A


def sample(
    n: int,
    teacher: Teacher,
    *,
    seed=0,
    correlation: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Draw ``n`` samples per teacher: ``(x, y, z)``, each ``[*seeds, n, 2, d]``.

    ``x = p + z`` is the student's input, ``z`` the content and ``y = T(z) z`` the target.
    ``correlation`` (a reviewer's question, not in the paper) makes the two tokens' contents
    correlated: ``z_2 = c z_1 + sqrt(1 - c^2) z_2'``, keeping each token ``N(0, sigma^2 I)``.
    """
    if not isinstance(teacher, Teacher):
        raise ValueError(f"teacher must be a Teacher (from make_teacher), got {type(teacher).__name__}")
    n = check_int("n", n, minimum=1)
    c = check_real("correlation", correlation, minimum=-1.0, maximum=1.0)
    Qs = teacher.Q_star
    gen = make_generator(seed, device=Qs.device)
    shape = (*teacher.seeds_shape, n, L_TOKENS, teacher.d)
    z = teacher.sigma * torch.randn(shape, generator=gen, dtype=Qs.dtype, device=Qs.device)
    if c != 0.0:
        z = torch.stack([z[..., 0, :], c * z[..., 0, :] + math.sqrt(1.0 - c * c) * z[..., 1, :]], dim=-2)
    p = positional_encodings(teacher.d, dtype=Qs.dtype, device=Qs.device)
    x = z + p
    return x, teacher(z), z


def overlaps(Q, Q_star, sigma: float = 0.5) -> dict[str, np.ndarray]:
    """The order parameters of a student ``Q`` (chapter 1, eq-pt-overlaps).

    ``Q`` is ``[..., d]`` or ``[..., d, 1]`` (rank one), ``Q_star`` ``[..., d]``. Returns
    ``m = 1^T Q / d`` (positional), ``theta = sigma^2 Q*^T Q / d`` (semantic) and
    ``q = sigma^2 ||Q||^2 / d``, as numpy arrays (0-d for a single student).
    """
    sigma = check_positive("sigma", sigma)
    Q = torch.as_tensor(Q)
    Q_star = torch.as_tensor(Q_star)
    if Q.ndim >= 2 and Q.shape[-1] == 1 and Q.shape[-2] == Q_star.shape[-1]:
        Q = Q[..., 0]
    if Q.ndim < 1 or Q.shape[-1] != Q_star.shape[-1]:
        raise ValueError(
            f"Q must have shape [..., d] or [..., d, 1] with d = {Q_star.shape[-1]} (from Q_star), "
            f"got {list(Q.shape)}"
        )
    check_finite("Q", Q)
    Q = Q.detach().to(torch.float64)
    Q_star = Q_star.detach().to(torch.float64)
    d = Q.shape[-1]
    return {
        "m": (Q.sum(-1) / d).cpu().numpy(),
        "theta": (sigma**2 * (Q_star * Q).sum(-1) / d).cpu().numpy(),
        "q": (sigma**2 * (Q * Q).sum(-1) / d).cpu().numpy(),
    }


def error_from_overlaps(
    m, theta, q, omega: float, *, sigma: float = 0.5, rho: float | None = None, A=None, n_nodes: int = 16
) -> np.ndarray:
    """The test error ``eps_g`` of a student, from its overlaps alone (chapter 1, eq-pt-eps-overlaps).

    For Gaussian contents the scores of student and teacher on token ``l`` are
    ``h_l = s_l m + sqrt(q) xi_l`` and ``h*_l = (theta/sqrt(q)) xi_l + sqrt(rho - theta^2/q) eta_l``
    with ``s = (+1, -1)`` and ``xi, eta ~ N(0, I_2)``; up to ``O(1/d)`` corrections
    ``eps_g = (sigma^2 / 2) E || S(h) - T(h*) ||_F^2`` with ``S(h) = softmax_row(h h^T)`` and
    ``T = (1 - omega) S(h*) + omega A``. The 4-D Gaussian average is a Gauss-Hermite product rule
    with ``n_nodes`` per dimension. ``m, theta, q`` broadcast; ``rho`` defaults to ``sigma^2``.
    """
    sigma = check_positive("sigma", sigma)
    omega = check_real("omega", omega, minimum=0.0, maximum=1.0)
    rho = sigma**2 if rho is None else check_positive("rho", rho)
    n_nodes = check_int("n_nodes", n_nodes, minimum=2)
    m, theta, q = np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in (m, theta, q)))
    if np.any(q <= 0) or np.any(theta**2 > rho * q * (1 + 1e-12)):
        raise ValueError("q must be > 0 and theta^2 <= rho q (theta is a covariance)")
    x, w = np.polynomial.hermite_e.hermegauss(n_nodes)
    w = w / w.sum()
    # nodes of (xi_1, xi_2, eta_1, eta_2): [N^4] each, flattened
    g = np.stack(np.meshgrid(x, x, x, x, indexing="ij")).reshape(4, -1)
    wt = np.einsum("i,j,k,l->ijkl", w, w, w, w).reshape(-1)
    Amat = make_A(A).numpy()
    shape = m.shape
    m, theta, q = (v.reshape(-1, 1, 1) for v in (m, theta, q))  # [P, 1, 1]
    s = np.array([1.0, -1.0]).reshape(1, 1, 2)
    h = s * m + np.sqrt(q) * g[None, :2].transpose(0, 2, 1)  # [P, N, 2]
    h_star = (theta / np.sqrt(q)) * g[None, :2].transpose(0, 2, 1) + np.sqrt(
        np.maximum(rho - theta**2 / q, 0.0)
    ) * g[None, 2:].transpose(0, 2, 1)

    def softmax_outer(v):  # [P, N, 2] -> [P, N, 2, 2]
        logits = v[..., :, None] * v[..., None, :]
        logits = logits - logits.max(-1, keepdims=True)
        e = np.exp(logits)
        return e / e.sum(-1, keepdims=True)

    diff = softmax_outer(h) - (1 - omega) * softmax_outer(h_star) - omega * Amat
    return (0.5 * sigma**2 * ((diff**2).sum((-1, -2)) @ wt)).reshape(shape)


def fit_positional_linear(z: torch.Tensor, y: torch.Tensor, lam: float = 1e-4) -> torch.Tensor:
    """The ridge-optimal positional baseline ``B`` (``[*seeds, 2, 2]``) for ``y ~ B z``.

    Minimises ``sum_mu ||B z^mu - y^mu||^2 / (2d) + lam/2 ||B||_F^2`` in closed form. The authors
    fit the same objective with Adam (lr 0.5, 200 steps) on the contents ``z`` (no positional
    part), with ``lam = 1e-4``; the closed form is its exact minimiser.
    """
    lam = check_real("lam", lam, minimum=0.0)
    if z.shape != y.shape or z.ndim < 3 or z.shape[-2] != L_TOKENS:
        raise ValueError(
            f"z and y must both have shape [..., n, 2, d], got {list(z.shape)} and {list(y.shape)}"
        )
    d = z.shape[-1]
    Gzz = (z @ z.transpose(-1, -2)).sum(-3) / d  # [*seeds, 2, 2]
    Gyz = (y @ z.transpose(-1, -2)).sum(-3) / d  # [*seeds, 2, 2]
    eye = torch.eye(L_TOKENS, dtype=z.dtype, device=z.device)
    # B (Gzz + lam I) = Gyz  ->  B = Gyz (Gzz + lam I)^{-1}
    return torch.linalg.solve(Gzz + lam * eye, Gyz, left=False)


def linear_error(B: torch.Tensor, z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean of ``||B z - y||^2 / (2d)`` over samples: ``[*seeds]``."""
    d = z.shape[-1]
    r = B[..., None, :, :] @ z - y
    return (r * r).sum((-1, -2)).mean(-1) / (2 * d)


def verify_overlaps(answer: dict, *, d: int = 50, sigma: float = 0.5, seed: int = 0) -> str:
    """Exercise checker (chapter 1): the overlaps of the two *starting points* of GD.

    ``answer`` maps ``"positional"`` and ``"semantic"`` to ``(m, theta)`` pairs for
    ``Q = 1_d / sqrt(d)`` and ``Q = Q*`` in the large-``d`` limit. Raises ``ValueError`` with a hint
    when an entry is wrong, else returns ``"correct"``.
    """
    if not isinstance(answer, dict) or set(answer) != {"positional", "semantic"}:
        raise ValueError("answer must be a dict with keys 'positional' and 'semantic'")
    expected = {"positional": (0.0, 0.0), "semantic": (0.0, sigma**2)}
    hints = {
        "positional": "1^T Q / d = 1/sqrt(d) vanishes as d grows; Q*^T 1 / d averages mean-zero entries",
        "semantic": "Q*^T Q* / d -> 1, so theta -> sigma^2; and 1^T Q* / d -> 0",
    }
    for key, (m_exp, th_exp) in expected.items():
        try:
            m_ans, th_ans = (float(v) for v in answer[key])
        except (TypeError, ValueError) as err:
            raise ValueError(f"answer[{key!r}] must be a pair of numbers (m, theta)") from err
        if abs(m_ans - m_exp) > 1e-3 or abs(th_ans - th_exp) > 1e-3:
            raise ValueError(f"answer[{key!r}] = ({m_ans}, {th_ans}) is not right. Hint: {hints[key]}")
    return "correct"


def verify_encoding_term(answer, *, m: float, q: float, d: int, rtol: float = 0.02) -> str:
    """Exercise checker (chapter 1): the encodings' share ``E ||S(h) p||^2 / (2d)`` of the test error.

    ``S(h) p`` has rows ``(S_l1 - S_l2) p_1`` with ``||p_1|| = 1``, so the term is
    ``E sum_l (S_l1 - S_l2)^2 / (2d)`` over the student's scores ``h_l = s_l m + sqrt(q) xi_l``
    (``xi ~ N(0, I_2)``, ``s = (+1, -1)``), here by a 2-D Gauss-Hermite rule of 40 nodes per axis.
    Raises ``ValueError`` with a hint unless ``answer`` is within ``rtol`` of it; returns a message.
    """
    answer = check_real("answer", answer)
    m = check_real("m", m)
    q = check_positive("q", q)
    d = check_int("d", d, minimum=1)
    rtol = check_positive("rtol", rtol)
    x, w = np.polynomial.hermite_e.hermegauss(40)
    w = w / w.sum()
    xi1, xi2 = (g.ravel() for g in np.meshgrid(x, x, indexing="ij"))
    weight = np.outer(w, w).ravel()
    h1, h2 = m + math.sqrt(q) * xi1, -m + math.sqrt(q) * xi2
    a = 1 / (1 + np.exp(-h1 * (h1 - h2)))  # S_11; S_12 = 1 - a
    b = 1 / (1 + np.exp(-h2 * (h2 - h1)))  # S_22; S_21 = 1 - b
    ref = float(weight @ ((2 * a - 1) ** 2 + (1 - 2 * b) ** 2)) / (2 * d)
    if abs(answer - ref) > rtol * ref:
        hint = (
            "divide by 2d" if abs(answer / ref - 2 * d) < 0.1 * d else "the rows of S p are (S_l1 - S_l2) p_1"
        )
        raise ValueError(f"answer {answer:.4g} is not the encodings' term (relative error "
                         f"{abs(answer - ref) / ref:.2g}). Hint: {hint}")  # fmt: skip
    return f"Correct: the encodings add {ref:.3g} to the test error at d = {d}."
