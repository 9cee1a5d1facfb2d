"""Table 1 of Vladymyrov et al. (2024) and the target a trained model's cell must meet.

Chapter 04 and its lab notes compare every cell of a result of ``icl_mixed_noise`` (one model,
one noise distribution, its best seed) with the paper's value:

- :data:`TABLE1`: the adjusted losses of Table 1 per ``(param, n_layers)``, in the order of
  :data:`TABLE1_NOISE` (σ_max = 0..7, then {1, 3} and {1, 3, 5}); :data:`TABLE1_BASELINES` the
  paper's ConstRR, AdaRR and TunedRR rows.
- :func:`within`: the target, within 15% of the paper's value, or within 0.002 where the paper's
  value is below 0.01 (:func:`target_halfwidth`, its half-width).
- :func:`cells`: a result's best-seed cells that Table 1 has, with the paper's value and the
  target.
- :func:`label` and :data:`NAMES`: how a noise distribution and a parameterization are written.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

TABLE1_NOISE = [f"uniform:{s}" for s in range(8)] + [
    "categorical:1,3",
    "categorical:1,3,5",
]

#: How the book writes each parameterization.
NAMES = {"gdpp": "GD++", "diag": "DIAG", "full": "FULL"}

_TABLE1_TEXT = """
gdpp 1  1.768  1.639  1.396  1.175  1.015  0.907  0.841  0.806  1.007  0.819
diag 1  1.767  1.639  1.396  1.175  1.015  0.906  0.841  0.806  1.007  0.819
gdpp 2  0.341  0.295  0.243  0.265  0.347  0.366  0.440  0.530  0.305  0.427
diag 2  0.265  0.214  0.173  0.188  0.219  0.242  0.254  0.259  0.201  0.246
gdpp 3  0.019  0.021  0.071  0.161  0.259  0.344  0.454  0.530  0.222  0.422
diag 3  0.013  0.015  0.048  0.087  0.109  0.118  0.121  0.123  0.098  0.119
gdpp 4  9.9e-5 0.014  0.066  0.160  0.258  0.344  0.454  0.530  0.222  0.422
diag 4  1.2e-4 0.006  0.024  0.041  0.050  0.059  0.065  0.073  0.043  0.062
diag 5  1.8e-7 0.004  0.016  0.029  0.041  0.051  0.058  0.062  0.026  0.051
gdpp 7 2.7e-12 0.009  0.066  0.161  0.265  0.344  0.454  0.530  0.222  0.422
diag 7 2.5e-12 0.002  0.014  0.027  0.040  0.047  0.052  0.059  0.018  0.046
full 1  1.768  1.640  1.397  1.176  1.016  0.907  0.842  0.806  1.008  0.820
full 2  0.264  0.215  0.173  0.188  0.220  0.245  0.259  0.263  0.202  0.276
full 3  0.012  0.015  0.049  0.075  0.101  0.117  0.124  0.127  0.076  0.113
full 4 1.6e-4  0.005  0.021  0.038  0.052  0.065  0.068  0.076  0.032  0.061
full 5 1.8e-7  0.002  0.015  0.026  0.038  0.048  0.059  0.065  0.016  0.048
full 7 2.5e-12 0.002  0.010  0.025  0.035  0.047  0.050  0.057  0.010  0.035
"""

#: Table 1's adjusted loss of each model, ``(param, n_layers)``, per :data:`TABLE1_NOISE`.
TABLE1 = {
    (p, int(L)): [float(v) for v in values]
    for p, L, *values in map(str.split, _TABLE1_TEXT.strip().splitlines())
}

#: Table 1's baselines, per :data:`TABLE1_NOISE`.
TABLE1_BASELINES = {
    "const": [0, 0.009, 0.066, 0.161, 0.265, 0.365, 0.454, 0.530, 0.222, 0.422],
    "ada": [0, 0.003, 0.016, 0.034, 0.053, 0.068, 0.081, 0.092, 0.051, 0.084],
    "tuned": [0, 0.002, 0.010, 0.023, 0.037, 0.049, 0.060, 0.068, 0.021, 0.054],
}


def label(spec: str) -> str:
    """``'uniform:3'`` -> ``'U(0, 3)'``, ``'categorical:1,3'`` -> ``'{1, 3}'``."""
    if not isinstance(spec, str) or spec.split(":")[0] not in ("uniform", "categorical"):
        raise ValueError(f"spec must be 'uniform:S' or 'categorical:A,B,...', got {spec!r}")
    kind, values = spec.split(":")
    if kind == "uniform":
        return f"U(0, {values})"
    return "{" + values.replace(",", ", ") + "}"


def target_halfwidth(paper):
    """Half-width of the target around ``paper``: 15% of it, or 0.002 where it is below 0.01."""
    paper = np.asarray(paper, dtype=float)
    if not (paper >= 0).all():
        raise ValueError(f"paper must be >= 0 (an adjusted loss), got {paper}")
    return np.where(paper >= 0.01, 0.15 * paper, 0.002)


def within(value, paper):
    """The target: within :func:`target_halfwidth` of ``paper`` (15%, or 0.002 below 0.01)."""
    value, paper = np.asarray(value, dtype=float), np.asarray(paper, dtype=float)
    if value.shape != paper.shape:
        raise ValueError(f"value and paper must have one shape, got {value.shape} and {paper.shape}")
    return np.abs(value - paper) <= target_halfwidth(paper)


def cells(result) -> pd.DataFrame:
    """Best-seed adjusted loss of every model of ``result`` (an ``icl_mixed_noise`` result) that
    Table 1 has: columns param, L, noise, ours, trimmed (the mean without the worst 0.01% of the
    prompts), outliers (mean > 2 × trimmed), paper and met (:func:`within`)."""
    if not hasattr(result, "rows"):
        raise ValueError(f"result must be an experiment result with rows, got {type(result).__name__}")
    rows = []
    for r in result.rows:
        key = (r.get("param"), r.get("n_layers"))
        if r.get("kind") != "table" or not r["best"] or key not in TABLE1:
            continue
        rows.append(
            {
                "param": r["param"],
                "L": r["n_layers"],
                "noise": r["noise"],
                "ours": r["adjusted"],
                "trimmed": r.get("adjusted_trimmed", np.nan),
                "outliers": r.get("outliers", False),
                "paper": TABLE1[key][TABLE1_NOISE.index(r["noise"])],
            }
        )
    df = pd.DataFrame(rows)
    df["met"] = within(df.ours, df.paper)
    return df
