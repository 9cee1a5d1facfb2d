"""The solver of Part II's fixed-point equations: damped iteration with Anderson mixing.

``solve`` finds one fixed point on one branch, ``solve_both`` both branches and the global
minimum (lower training loss ε_t), ``hat_variables`` evaluates one step of the map three ways
(Stein form on Gauss–Hermite, Monte Carlo, the authors' averages).

Numerics: the fixed point of hats -> overlaps is found by damped iteration (``damping`` is the
weight of the old value, as in the authors' code) accelerated with Anderson mixing close to the
fixed point; the residual is the largest relative change of (q, m, V, θ). Each branch is kept in
its invariant subspace: θ = 0 (positional: θ̂ ≡ 0) or m = 0 (semantic: m̂ ≡ 0); by symmetry the
exact map preserves both, for any A. Plain steps are limited and halved when the iteration
oscillates away, and every point that meets the tolerance is checked for stability (the Jacobian
on the branch, ``FixedPoint.mu_max``): a repelling point is escaped, so the fixed point reached does
not depend on the damping; a positional point at m = 0 (the agnostic point) is never reported as
converged. ``continue_branch`` follows a branch in α. The default of 20 nodes per dimension is
converged: doubling it changes ε_g by less than 0.1 % on both branches (chapter 02). Fewer nodes
oscillate on the positional branch, where the jumps of the prox cut through the bulk of the
Gaussian mass (12 nodes: 0.13 % off). With the compiled prox a single solve takes about 0.1 s
of CPU at ``n_nodes=8`` and under a second at the default 20 (three times as long with numpy's);
the 20 x 20 (α, ω) grid of the phase diagram at 8 nodes takes about 100 CPU-seconds.
"""

from __future__ import annotations

import numpy as np

from attnlab.theory.phase_transition.authors import _AuthorsProblem
from attnlab.theory.phase_transition.equations import BRANCHES, METHODS, STARTS, FixedPoint, _Problem, _result
from attnlab.theory.phase_transition.prox import _check_common, _global_starts, _prox_batch, _target
from attnlab.validation import check_choice, check_finite, check_int, check_real, check_shape, make_rng

__all__ = [
    "continue_branch",
    "global_minimum",
    "hat_variables",
    "on_branch",
    "solve",
    "solve_both",
    "verify_min_damping",
]


def hat_variables(
    alpha,
    omega,
    q,
    m,
    V,
    theta,
    sigma=0.5,
    lam=0.01,
    A=None,
    *,
    n_nodes: int = 20,
    monte_carlo: int | None = None,
    seed: int = 0,
    method: str = "converged",
) -> dict:
    """One step of the fixed-point map at (q, m, V, θ): the hats (eq-pt-se-hats) and new overlaps.

    By default the averages use the Gauss–Hermite rule and the Stein form of the solver. With
    ``monte_carlo=N`` they are instead the direct averages of eq-pt-se-hats over ``N`` Gaussian
    samples (ξ, η) drawn with ``seed``, with the same global prox as the solver (from u, -u and
    0): an independent check of the quadrature. With
    ``method="authors"`` they are the authors' direct averages on their degree-7 rule, with the
    prox from h = 0 (as in :func:`solve_authors`).
    Returns ``{"q_hat", "m_hat", "V_hat", "theta_hat", "q", "m", "V", "theta"}``.
    """
    alpha, omega, sigma, lam, A = _check_common(alpha, omega, sigma, lam, A)
    q = check_real("q", q, minimum=0.0, strict_minimum=True)
    m = check_real("m", m)
    V = check_real("V", V, minimum=0.0, strict_minimum=True)
    theta = check_real("theta", theta)
    if theta**2 >= sigma**2 * q:
        raise ValueError(f"theta must satisfy theta**2 < sigma**2 * q, got theta={theta}, q={q}")
    prob = _Problem(alpha, omega, sigma, lam, A, check_int("n_nodes", n_nodes, minimum=2, maximum=60), 1e-10)
    method = check_choice("method", method, METHODS)
    if method == "authors" and monte_carlo is not None:
        raise ValueError("monte_carlo and method='authors' are two different averages: give one")
    if method == "authors":
        prob = _AuthorsProblem(alpha, omega, sigma, lam, A)
        hats = prob.hats(q, m, V, theta)
    elif monte_carlo is None:
        hats = prob.hats(q, m, V, theta, all_starts=True)[:4]
    else:
        n = check_int("monte_carlo", monte_carlo, minimum=100)
        rng = make_rng(seed)
        xi, eta = rng.standard_normal((2, 2, n))  # [2 tokens, n] each
        rho = prob.rho
        sq, s_star = np.sqrt(q), np.sqrt(rho - theta**2 / q)
        u1, u2 = sq * xi[0] + m, sq * xi[1] - m  # eq-pt-se-fields
        hs1, hs2 = theta / sq * xi[0] + s_star * eta[0], theta / sq * xi[1] + s_star * eta[1]
        T = _target(hs1, hs2, omega, A)
        h1, h2, _ = _prox_batch(u1, u2, V, T, sigma**2, _global_starts(u1, u2))  # as the solver's
        g1, g2 = (h1 - u1) / V, (h2 - u2) / V
        theta_hat = alpha * np.mean(g1 * eta[0] + g2 * eta[1]) / s_star
        hats = (
            alpha * np.mean(g1**2 + g2**2),
            alpha * np.mean(g1 - g2),
            -alpha * np.mean(g1 * xi[0] + g2 * xi[1]) / sq + theta * theta_hat / q,
            theta_hat,
        )
    new = prob.overlaps(*hats)
    names = ("q_hat", "m_hat", "V_hat", "theta_hat", "q", "m", "V", "theta")
    return dict(zip(names, (float(v) for v in (*hats, *new)), strict=True))


def _project(x, rho):
    """Keep (q, m, V, θ) in the domain: q, V > 0 and θ² < ρ q."""
    q = max(x[0], 1e-12)
    V = max(x[2], 1e-8)
    bound = 0.999999 * np.sqrt(rho * q)
    return np.array([q, x[1], V, float(np.clip(x[3], -bound, bound))])


def _residual(new, x):
    return float(np.max(np.abs(new - x) / (np.abs(x) + 1e-3)))


VERIFY_ITER = 40  # iterations with the global prox after a failed verification, at most


def _iterate(
    prob, x, damping, tol, max_iter, anderson, anderson_from=0.2, max_step=0.2, refresh=4, escape=False
):
    """Damped fixed-point iteration with Anderson mixing; returns (x, hats, e_min, it, res).

    Anderson steps are only taken once the residual is below ``anderson_from`` and are limited to
    a change ``max_step`` relative to |x| + 0.05, so that the acceleration stays in the basin of
    the fixed point that the damped iteration is heading to (another one may lie close by). When
    the residual grows while the step reverses direction (an eigenvalue of the Jacobian below
    -1 that this damping cannot tame, e.g. μ ≈ -5.5 on the positional branch at α = 2, ω = 0.3,
    which needs damping > 0.69), the step ``1 - damping`` is halved and the Anderson history
    dropped: which fixed point is reached does not depend on the damping asked for. With
    ``escape=True`` (a start kicked off a repelling fixed point) Anderson waits until the residual
    is ten times below its first value, so that it cannot pull the iterate back to that point.
    The prox is warm-started from the previous iteration (and also solved from u every ``refresh``
    iterations); at convergence it is re-solved from all starting points (u, 0, warm) and the
    iteration goes on if the residual is not small then, with the global prox, for at most
    ``VERIFY_ITER`` iterations: where a node sits on the surface where its prox jumps between two
    minima, the map with the global prox has no fixed point to ``tol`` and the iteration cycles
    (ω = 0.025, α = 0.648, semantic, 8 nodes: the residual cycles between 1e-6 and 5e-5 for 440
    iterations). On the 20 x 20 grid of the phase diagram (8 nodes) no solve that converged used
    the global prox in more than 11 iterations; the three that cycled used it in about 430.
    """
    x = _project(np.asarray(x, dtype=float), prob.rho)
    hist_x, hist_f = [], []  # Anderson history: iterates and residuals f = G(x) - x
    res = res_prev = np.inf
    f_prev = None
    step_size = 1 - damping
    all_starts, verified_at = False, None
    for it in range(1, max_iter + 1):
        fresh = it % refresh == 0  # re-solve the prox from u every ``refresh`` iterations
        *hats, _ = prob.hats(*x, all_starts=all_starts, fresh=fresh)
        gx = prob.overlaps(*prob.restrict(hats))
        if not np.all(np.isfinite(gx)):
            return x, None, None, it, np.inf
        res = _residual(gx, x)
        if escape and it == 1:
            anderson_from = min(anderson_from, res / 10)
        if res < tol:
            if all_starts:
                x = gx
                break
            all_starts, verified_at = True, it  # verify with a global prox before accepting
            continue
        if all_starts and it - verified_at >= VERIFY_ITER:
            break  # the map with the global prox has no fixed point to ``tol`` here: stop
        f = gx - x
        scale = np.abs(x) + 1e-3
        if f_prev is not None and res > res_prev and (f / scale) @ (f_prev / scale) < 0:
            step_size = max(step_size / 2, 0.01)  # oscillating away: damp more
            hist_x, hist_f = [], []
        f_prev, res_prev = f, res
        # far from a fixed point the map can overshoot wildly (one step of the positional branch
        # sends m = 0.46 to -0.63): a plain step changes no coordinate by more than ``max_step``
        # relative to |x| + 0.05, so the iterate cannot jump across to another basin
        reach = np.max(np.abs(step_size * f) / (np.abs(x) + 0.05))
        step = x + step_size * f * min(1.0, max_step / reach)
        if anderson > 0 and res < anderson_from:
            hist_x.append(x.copy())
            hist_f.append(f)
            hist_x, hist_f = hist_x[-anderson - 1 :], hist_f[-anderson - 1 :]
            if len(hist_f) > 1:
                dF = np.stack([hist_f[i + 1] - hist_f[i] for i in range(len(hist_f) - 1)], axis=1)
                dX = np.stack([hist_x[i + 1] - hist_x[i] for i in range(len(hist_x) - 1)], axis=1)
                gamma, *_ = np.linalg.lstsq(dF / scale[:, None], f / scale, rcond=None)
                cand = x + step_size * f - (dX + step_size * dF) @ gamma
                if np.all(np.isfinite(cand)) and np.max(np.abs(cand - x) / (np.abs(x) + 0.05)) < max_step:
                    step = cand
                else:
                    hist_x, hist_f = hist_x[-1:], hist_f[-1:]
        x = _project(step, prob.rho)
    *hats, e_min = prob.hats(*x, all_starts=True)
    return x, prob.restrict(hats), e_min, it, res


# The coordinates of (q, m, V, θ) that move on each branch (the other one is held at 0).
_FREE = {"positional": [0, 1, 2], "semantic": [0, 2, 3]}
_ORDER = {"positional": 1, "semantic": 3}  # the branch's order parameter: m or θ
M_MIN = 1e-3  # a positional point with |m| below this is the agnostic point m = θ = 0
THETA_MIN = 1e-3  # a semantic point with |θ|/σ² below this is the agnostic point θ = 0: off the branch
MU_TOL = 1e-3  # slack on mu_max < 1 for the finite-difference error of the Jacobian


def _stability(prob, x, rel_step=1e-4):
    """Largest real part of the eigenvalues of the map's Jacobian on the branch, and its eigenvector.

    Forward differences in the branch's free coordinates, with the prox warm-started at every
    node from its solution at ``x`` (``prob.h``, left there by the global prox of the last
    evaluation), so each node stays on its own minimum and the derivative is that of the map, not
    of a node switching valleys. Returns ``(mu_max, v)`` with ``v`` a real vector in
    (q, m, V, θ) (zero outside the branch's coordinates).
    """
    free = _FREE[prob.branch]
    h0 = prob.h.copy()

    def G(point):
        prob.h = h0.copy()
        return prob.overlaps(*prob.restrict(prob.hats(*point, fresh=False)[:4]))[free]

    g0 = G(x)
    J = np.zeros((len(free), len(free)))
    for j, k in enumerate(free):
        e = np.zeros(4)
        e[k] = rel_step * (abs(x[k]) + 0.05)
        J[:, j] = (G(x + e) - g0) / e[k]
    prob.h = h0
    mu, vecs = np.linalg.eig(J)
    i = int(np.argmax(mu.real))
    v = np.zeros(4)
    v[free] = vecs[:, i].real
    return float(mu.real[i]), v


def solve(
    alpha,
    omega,
    branch,
    sigma=0.5,
    lam=0.01,
    A=None,
    *,
    n_nodes: int = 20,
    prune: float = 1e-10,
    damping: float = 0.8,
    anderson: int = 4,
    tol: float = 1e-7,
    max_iter: int = 500,
    init=None,
    max_escapes: int = 2,
) -> FixedPoint:
    """Solve the fixed-point equations (chapter 02, eq-pt-se-hats and eq-pt-se-overlaps) on one branch.

    ``branch`` picks the authors' starting point: ``"positional"`` (q, m, V, θ) = (0.0207, 0.2,
    14.575, 0) or ``"semantic"`` (0.907, 0.0002, 14.575, 0.3472); ``init`` overrides it.
    ``damping`` is the weight of the old iterate (the authors used 0.8 without acceleration),
    ``anderson`` the Anderson memory (0 = plain damped iteration), ``tol`` the tolerance on the
    largest relative change of (q, m, V, θ).

    At a point that meets ``tol`` the Jacobian of the map on the branch is computed (``mu_max``,
    the largest real part of its eigenvalues). A point with ``mu_max > 1`` repels a damped
    iteration for every damping (Anderson mixing can still land on one, e.g. the agnostic point
    m = 0 inside the positional subspace); the iteration is then kicked along the unstable
    direction and goes on, at most ``max_escapes`` times. ``converged`` is ``True`` only for a
    point that meets ``tol``, has ``mu_max <= 1 + 1e-3`` and, on the positional branch, has
    ``|m| >= 1e-3`` (a positional result at m = 0 is the agnostic point: the positional branch
    was not found). The sign of the branch's order parameter (m, or θ) is reported ``>= 0``:
    Q -> -Q maps (m, θ) to (-m, -θ) and leaves the model unchanged.
    """
    alpha, omega, sigma, lam, A = _check_common(alpha, omega, sigma, lam, A)
    branch = check_choice("branch", branch, BRANCHES)
    n_nodes = check_int("n_nodes", n_nodes, minimum=2, maximum=60)
    damping = check_real("damping", damping, minimum=0.0, maximum=0.99)
    anderson = check_int("anderson", anderson, minimum=0, maximum=20)
    tol = check_real("tol", tol, minimum=0.0, strict_minimum=True)
    max_iter = check_int("max_iter", max_iter, minimum=1)
    max_escapes = check_int("max_escapes", max_escapes, minimum=0, maximum=10)
    if init is None:
        init = STARTS[branch]
    init = np.array(init, dtype=float)
    check_shape("init", init, (4,))
    check_finite("init", init)
    if init[0] <= 0 or init[2] <= 0 or init[3] ** 2 >= sigma**2 * init[0]:
        raise ValueError("init must be (q, m, V, theta) with q > 0, V > 0 and theta**2 < sigma**2 * q")
    if branch == "positional":
        init[3] = 0.0
    else:
        init[1] = 0.0
    prob = _Problem(alpha, omega, sigma, lam, A, n_nodes, prune, branch)
    x, hats, e_min, it, res = _iterate(prob, init, damping, tol, max_iter, anderson)
    mu_max, total = float("nan"), it
    for escape in range(max_escapes + 1):
        if hats is None or res >= tol:
            break
        mu_max, v = _stability(prob, x)
        if mu_max <= 1 + MU_TOL or escape == max_escapes:
            break
        # A repelling fixed point (Anderson can land on one): kick along its unstable direction,
        # towards a larger order parameter, and iterate on.
        k = _ORDER[branch]
        v = v * (np.sign(v[k]) if v[k] != 0 else 1.0) * np.sign(x[k] if x[k] != 0 else 1.0)
        kick = 0.1 * v / np.max(np.abs(v) / (np.abs(x) + 0.05))
        x, hats, e_min, it, res = _iterate(prob, x + kick, damping, tol, max_iter, anderson, escape=True)
        total += it
        mu_max = float("nan")
    if hats is None:  # the map left its domain: report a non-converged point
        nan = float("nan")
        return FixedPoint(
            alpha,
            omega,
            branch,
            sigma,
            lam,
            *map(float, x),
            nan,
            nan,
            nan,
            nan,
            nan,
            nan,
            total,
            res,
            False,
            n_nodes,
        )
    k = _ORDER[branch]
    if x[k] < 0:  # Q -> -Q maps (m, θ) to (-m, -θ) and leaves the model unchanged: report x[k] >= 0
        x = x * np.array([1, -1, 1, -1])
        hats = (hats[0], -hats[1], hats[2], -hats[3])
    converged = res < tol and mu_max <= 1 + MU_TOL and not (branch == "positional" and abs(x[1]) < M_MIN)
    phi = prob.phi(x, hats, e_min)
    return _result(prob, branch, x, hats, phi, total, res, converged, n_nodes, mu_max=mu_max)


def solve_both(alpha, omega, sigma=0.5, lam=0.01, A=None, **kwargs) -> dict:
    """Both branches and the global minimum (lower ``eps_t``) at one (α, ω)."""
    out = {b: solve(alpha, omega, b, sigma, lam, A, **kwargs) for b in BRANCHES}
    out["global"] = min((out[b] for b in BRANCHES), key=lambda r: r.eps_t)
    return out


def global_minimum(alpha, omega, sigma=0.5, lam=0.01, A=None, **kwargs) -> FixedPoint:
    """The fixed point with the lower training loss ``eps_t`` of the two branches."""
    return solve_both(alpha, omega, sigma, lam, A, **kwargs)["global"]


def on_branch(fp: FixedPoint) -> bool:
    """Whether ``fp`` lies on its branch: ``converged`` (tolerance met, ``mu_max <= 1 + 1e-3``,
    positional |m| >= 1e-3) and, on the semantic branch, |θ|/σ² >= ``THETA_MIN`` (below that the
    iteration sits on the agnostic point θ = 0, which stays converged inside the semantic subspace)."""
    return bool(fp.converged) and (fp.branch == "positional" or fp.theta_over_sigma2 >= THETA_MIN)


def continue_branch(alphas, omega, branch, sigma=0.5, lam=0.01, A=None, *, init=None, **kwargs) -> list:
    """Follow one branch along ``alphas`` (in the order given) by warm-started continuation.

    The first α starts from ``init`` (default: the branch's starting point); every later one from
    the last fixed point on the branch (:func:`on_branch`), so the branch is followed continuously
    instead of being re-found from a fixed start at each α (which may land on another solution).
    A point off the branch is never a start: from the agnostic point θ ≈ 1e-7 (semantic, α = 0.5,
    ω = 0.3, 8 nodes) θ must grow by six orders of magnitude, and whether the iteration reaches the
    branch at α = 0.8 within ``max_iter`` (it took 403 of 500 iterations) turned on rounding. Returns
    one :class:`FixedPoint` per α, each with ``mu_max``. Where the branch ends (a spinodal: a fold
    where it meets an unstable solution, or the collapse of its order parameter), ``mu_max``
    rises towards 1 and past it the solves are not on the branch; the spinodal lies between the
    last α on the branch and the next. ``kwargs`` go to :func:`solve`.
    """
    alphas = np.atleast_1d(np.asarray(alphas, dtype=float))
    if alphas.ndim != 1 or alphas.size == 0 or not np.all(np.isfinite(alphas)) or np.any(alphas <= 0):
        raise ValueError("alphas must be a non-empty 1-D array of finite numbers > 0")
    branch = check_choice("branch", branch, BRANCHES)
    out, start = [], init
    for alpha in alphas:
        fp = solve(float(alpha), omega, branch, sigma, lam, A, init=start, **kwargs)
        out.append(fp)
        if on_branch(fp):
            start = (fp.q, fp.m, fp.V, fp.theta)
    return out


def verify_min_damping(answer, mu, *, atol: float = 1e-3) -> str:
    """Exercise checker (chapter 02): the smallest damping that converges at an eigenvalue ``mu``.

    A damped iteration x <- (1 - γ) G(x) + γ x contracts along an eigenvector of the Jacobian of G
    with real eigenvalue μ when |(1 - γ) μ + γ| < 1. For -1 <= μ < 1 every γ in [0, 1) does
    (answer 0); for μ < -1 the damping must exceed (μ + 1)/(μ - 1); for μ >= 1 none does (answer
    ``None``). Raises ``ValueError`` with a hint unless ``answer`` is right within ``atol``.
    """
    mu = check_real("mu", mu)
    ref = None if mu >= 1 else max(0.0, (mu + 1) / (mu - 1))
    if ref is None or answer is None:
        if ref is None and answer is None:
            return f"Correct: at mu = {mu} no damping in [0, 1) converges."
        hint = (
            "for mu >= 1, (1 - gamma) mu + gamma >= 1 for every gamma < 1"
            if ref is None
            else "a damping close enough to 1 always tames mu < 1"
        )
        raise ValueError(f"answer {answer!r} is not right for mu = {mu}. Hint: {hint}")
    answer = check_real("answer", answer)
    if abs(answer - ref) > atol:
        raise ValueError(
            f"answer {answer:.4g} is not the smallest damping for mu = {mu}. "
            "Hint: solve (1 - gamma) mu + gamma = -1 for gamma"
        )
    return f"Correct: every damping above {ref:.3f} converges at mu = {mu}."
