"""The histogram task and its "histogram-like" relatives (Part I, chapters 1, 2 and 4).

A sequence is ``N`` tokens drawn i.i.d. from an alphabet ``[d] = {0, ..., d-1}`` and embedded as
one-hot rows of ``X`` (``[N, d]``; the embedding is the identity, so the alphabet size equals the
embedding dimension). The count vector is ``h = X^T 1_N`` (``[d]``). A *task matrix* ``M``
(``[d, d]``) defines the target

    y = X M h,        i.e.  y_i = sum_b M[x_i, b] h_b,

so row ``a`` of ``M`` says which letters a token ``a`` counts:

* ``M = I``: the histogram, ``y_i`` = number of occurrences of the ``i``-th token;
* a permutation matrix: the count of a partner letter (e.g. the next letter, cyclically);
* ``M[a, b] = 1`` when ``a`` and ``b`` are in the same class: the count of the token's class;
* sums of these (e.g. ``I + next``), and ``11^T``, the sequence length.

:func:`count_moments` gives the exact third moments ``S[a, b, c] = E[h_a h_b h_c]`` of the
multinomial counts (chapter 2, eq. ``eq-moments``), which turn the transformer's population loss
into a weighted diagonal-linear-network loss.
"""

from __future__ import annotations

import numpy as np
import torch

from attnlab.validation import (
    check_finite,
    check_int,
    check_probabilities,
    check_shape,
    make_generator,
    resolve_dtype,
)

__all__ = [
    "sample_tokens",
    "one_hot",
    "sample_sequences",
    "counts",
    "targets",
    "histogram_matrix",
    "permutation_matrix",
    "next_letter_matrix",
    "class_matrix",
    "length_matrix",
    "task_matrix",
    "make_sampler",
    "count_moments",
    "verify_count_moments",
    "verify_scaled_map",
]

TASKS = ("histogram", "next_letter", "classes", "histogram+next_letter", "length")


# ----------------------------------------------------------------------------------------------
# Sequences
# ----------------------------------------------------------------------------------------------


def sample_tokens(n_seq: int, N: int, d: int, seed=0, probs=None) -> torch.Tensor:
    """Draw ``n_seq`` sequences of ``N`` tokens from ``[d]``; returns int64 ``[n_seq, N]``.

    Tokens are i.i.d., uniform unless ``probs`` (length ``d``, summing to one) is given.
    ``seed`` is an int or a ``torch.Generator`` (reproducible, no global state).
    """
    n_seq = check_int("n_seq", n_seq, minimum=1)
    N = check_int("N", N, minimum=1)
    d = check_int("d", d, minimum=1)
    gen = make_generator(seed)
    if probs is None:
        return torch.randint(0, d, (n_seq, N), generator=gen)
    p = torch.as_tensor(check_probabilities("probs", probs, d), dtype=torch.float64)
    return torch.multinomial(p, n_seq * N, replacement=True, generator=gen).reshape(n_seq, N)


def one_hot(tokens, d: int, dtype="float64") -> torch.Tensor:
    """One-hot embedding: int tokens ``[..., N]`` -> ``X`` ``[..., N, d]`` (float)."""
    d = check_int("d", d, minimum=1)
    tokens = torch.as_tensor(tokens)
    if tokens.dtype.is_floating_point or tokens.dtype == torch.bool:
        raise ValueError(f"tokens must be an integer tensor, got dtype {tokens.dtype}")
    if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= d):
        raise ValueError(f"tokens must lie in [0, d-1] = [0, {d - 1}]")
    return torch.nn.functional.one_hot(tokens.long(), d).to(resolve_dtype(dtype))


def sample_sequences(n_seq: int, N: int, d: int, seed=0, probs=None, dtype="float64") -> torch.Tensor:
    """Sample one-hot sequences ``X`` ``[n_seq, N, d]`` (see :func:`sample_tokens`)."""
    return one_hot(sample_tokens(n_seq, N, d, seed, probs), d, dtype)


def _check_X(X) -> torch.Tensor:
    X = torch.as_tensor(X)
    if X.ndim not in (2, 3):
        raise ValueError(f"X must have shape [N, d] or [batch, N, d], got {list(X.shape)}")
    if not X.dtype.is_floating_point:
        X = X.to(torch.float64)
    ok = bool(((X == 0) | (X == 1)).all()) and bool((X.sum(-1) == 1).all())
    if not ok:
        raise ValueError("X must be one-hot: every row (token) has exactly one entry 1, the rest 0")
    return X


def counts(X) -> torch.Tensor:
    """The count vector ``h = X^T 1_N``: ``[batch, N, d] -> [batch, d]`` (or ``[N, d] -> [d]``)."""
    X = _check_X(X)
    return X.sum(-2)


def targets(X, M) -> torch.Tensor:
    """Targets ``y = X M h`` (eq. ``eq-task``): ``X`` ``[batch, N, d]`` -> ``y`` ``[batch, N]``."""
    X = _check_X(X)
    d = X.shape[-1]
    M = torch.as_tensor(M, dtype=X.dtype)
    check_shape("M", M, (d, d))
    check_finite("M", M)
    h = X.sum(-2)  # [batch, d]
    return torch.einsum("...nd,de,...e->...n", X, M, h)


# ----------------------------------------------------------------------------------------------
# Task matrices
# ----------------------------------------------------------------------------------------------


def histogram_matrix(d: int) -> np.ndarray:
    """``M = I``: the histogram task (each token counts its own letter)."""
    d = check_int("d", d, minimum=1)
    return np.eye(d)


def permutation_matrix(perm) -> np.ndarray:
    """``M[a, perm[a]] = 1``: token ``a`` counts the letter ``perm[a]``."""
    perm = np.asarray(perm)
    if perm.ndim != 1 or perm.size == 0 or not np.issubdtype(perm.dtype, np.integer):
        raise ValueError("perm must be a non-empty 1-D integer array")
    d = perm.size
    if sorted(perm.tolist()) != list(range(d)):
        raise ValueError(f"perm must be a permutation of 0..{d - 1}, got {perm.tolist()}")
    M = np.zeros((d, d))
    M[np.arange(d), perm] = 1.0
    return M


def next_letter_matrix(d: int, shift: int = 1) -> np.ndarray:
    """The cyclic next-letter permutation: token ``a`` counts the letter ``(a + shift) mod d``."""
    d = check_int("d", d, minimum=1)
    shift = check_int("shift", shift)
    return permutation_matrix((np.arange(d) + shift) % d)


def class_matrix(labels) -> np.ndarray:
    """``M[a, b] = 1`` if letters ``a`` and ``b`` have the same class label (count of the class)."""
    labels = np.asarray(labels)
    if labels.ndim != 1 or labels.size == 0:
        raise ValueError("labels must be a non-empty 1-D array of class labels, one per letter")
    return (labels[:, None] == labels[None, :]).astype(float)


def length_matrix(d: int) -> np.ndarray:
    """``M = 1 1^T``: every output is the sequence length ``N``."""
    d = check_int("d", d, minimum=1)
    return np.ones((d, d))


def task_matrix(name: str, d: int) -> np.ndarray:
    """A named task matrix: ``"histogram"``, ``"next_letter"``, ``"classes"`` (two classes:
    the first ``d // 2`` letters, "vowels", and the rest), ``"histogram+next_letter"``, ``"length"``.
    """
    if name not in TASKS:
        raise ValueError(f"name must be one of {', '.join(TASKS)}; got {name!r}")
    d = check_int("d", d, minimum=2)
    if name == "histogram":
        return histogram_matrix(d)
    if name == "next_letter":
        return next_letter_matrix(d)
    if name == "classes":
        return class_matrix((np.arange(d) >= d // 2).astype(int))
    if name == "length":
        return length_matrix(d)
    return histogram_matrix(d) + next_letter_matrix(d)


def make_sampler(N: int, d: int, M=None, probs=None):
    """A sampler ``sample(batch_size, generator) -> (X, y)`` of fresh sequences for
    :func:`attnlab.train.train` (online SGD). ``M`` defaults to the histogram ``I``.
    """
    N = check_int("N", N, minimum=1)
    d = check_int("d", d, minimum=1)
    M = histogram_matrix(d) if M is None else np.asarray(M, dtype=float)
    check_shape("M", M, (d, d))
    check_finite("M", M)
    if probs is not None:
        probs = check_probabilities("probs", probs, d)

    M_t = torch.as_tensor(M, dtype=torch.float64)
    p_t = None if probs is None else torch.as_tensor(probs, dtype=torch.float64)

    def sample(batch_size: int, generator: torch.Generator):
        # Hot path of online SGD: no re-validation, one_hot + two matrix products.
        if p_t is None:
            tokens = torch.randint(0, d, (batch_size, N), generator=generator)
        else:
            tokens = torch.multinomial(p_t, batch_size * N, replacement=True, generator=generator)
            tokens = tokens.reshape(batch_size, N)
        X = torch.nn.functional.one_hot(tokens, d).to(torch.float64)  # [batch, N, d]
        h = X.sum(1)  # [batch, d]
        y = (X @ (h @ M_t.T).unsqueeze(-1)).squeeze(-1)  # y = X M h: [batch, N]
        return X, y

    return sample


# ----------------------------------------------------------------------------------------------
# Moments of the counts
# ----------------------------------------------------------------------------------------------


def count_moments(N: int, d: int, probs=None) -> np.ndarray:
    """Exact third moments ``S[a, b, c] = E[h_a h_b h_c]`` of the counts, ``[d, d, d]`` float64.

    ``h`` is multinomial(``N``, ``p``) with ``p`` uniform unless ``probs`` is given. With falling
    factorials ``N^(k) = N (N-1) ... (N-k+1)`` (chapter 2, eq. ``eq-moments``)::

        E[h_a h_b h_c] = N^(3) p_a p_b p_c
                         + N^(2) (d_ab p_a p_c + d_ac p_a p_b + d_bc p_a p_b)
                         + N d_ab d_ac p_a

    ``S[a]`` is the matrix ``S_a = E[h_a h h^T]`` that weights row ``a`` of the residual in
    ``l_tf``.
    """
    N = check_int("N", N, minimum=1)
    d = check_int("d", d, minimum=1)
    p = np.full(d, 1.0 / d) if probs is None else check_probabilities("probs", probs, d)
    N2 = N * (N - 1)
    N3 = N2 * (N - 2)
    I = np.eye(d)
    S = N3 * np.einsum("a,b,c->abc", p, p, p)
    S += N2 * np.einsum("ab,a,c->abc", I, p, p)  # a = b
    S += N2 * np.einsum("ac,a,b->abc", I, p, p)  # a = c
    S += N2 * np.einsum("bc,a,b->abc", I, p, p)  # b = c
    S += N * np.einsum("ab,ac,a->abc", I, I, p)  # a = b = c
    return S


def verify_count_moments(S_answer, N: int, probs, *, rtol: float = 1e-9) -> str:
    """Exercise checker (chapter 2): is ``S_answer`` ``[d, d, d]`` the tensor ``E[h_a h_b h_c]``
    of the counts of ``N`` tokens with letter probabilities ``probs``?

    Raises ``AssertionError`` naming the kind of entries that are wrong (three equal indices,
    exactly two, all different) and returns a confirmation message.
    """
    p = check_probabilities("probs", probs)
    d = p.size
    S_answer = np.asarray(S_answer, dtype=float)
    check_shape("S_answer", S_answer, (d, d, d))
    check_finite("S_answer", S_answer)
    S, S_uniform = count_moments(N, d, p), count_moments(N, d)
    if np.allclose(S_answer, S_uniform, rtol=rtol, atol=0) and not np.allclose(S, S_uniform):
        raise AssertionError("this is the tensor of uniform letters: use p_a, p_b, p_c, not 1/d")
    a, b, c = np.indices((d, d, d))
    kinds = {
        "a = b = c": (a == b) & (b == c),
        "exactly two equal indices": ((a == b) | (a == c) | (b == c)) & ~((a == b) & (b == c)),
        "three different indices": (a != b) & (a != c) & (b != c),
    }
    wrong = [k for k, sel in kinds.items() if not np.allclose(S_answer[sel], S[sel], rtol=rtol, atol=0)]
    if wrong:
        where = " and ".join(wrong)
        raise AssertionError(f"wrong entries with {where}: count the triples of positions again")
    return "Correct: your moments equal E[h_a h_b h_c] for every a, b, c."


def verify_scaled_map(map_answer, tokens, M) -> str:
    """Exercise checker (chapter 6): is ``map_answer`` ``[N, N]`` the predicted scaled attention map
    ``A_ij v_{x_j} = M[x_i, x_j]`` (eq. ``eq-map``) of the sequence ``tokens`` ``[N]``?"""
    tokens = np.asarray(tokens)
    if tokens.ndim != 1 or not np.issubdtype(tokens.dtype, np.integer):
        raise ValueError("tokens must be a 1-D integer array (one sequence)")
    M = np.asarray(M, dtype=float)
    if M.ndim != 2 or M.shape[0] != M.shape[1] or tokens.min() < 0 or tokens.max() >= M.shape[0]:
        raise ValueError("M must be a square [d, d] task matrix with every token in [0, d-1]")
    N = tokens.size
    map_answer = np.asarray(map_answer, dtype=float)
    check_shape("map_answer", map_answer, (N, N))
    expected = M[np.ix_(tokens, tokens)]
    if np.allclose(map_answer, expected):
        return "Correct: position i attends to the positions whose letter x_i counts."
    if np.allclose(map_answer, expected.T):
        raise AssertionError("transposed: row i is the attending position, so the entry is M[x_i, x_j]")
    raise AssertionError("not M[x_i, x_j]: read row x_i of M at the letter x_j of each position j")
