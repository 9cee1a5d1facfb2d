"""The numbers Part II quotes from Cui et al. (2024), typed once, each with the file it comes from.

The book compares its own computations with the authors' tabulated thresholds, their stored
theory values and their stored experiment means. Their files are not part of this project; the
values the chapters quote are copied here, once, so that every chapter glues them from one place
(never types them into prose). Where the authors' files are at hand (``ATTNLAB_PAPER_B`` or
``/work/shared/reference/paperB``), ``tests/test_pt_published.py`` reads them and checks every
value copied from them. The files live in the authors' repository
(``SPOC-group/positional-and-semantic-attention``): ``theory/repl_softmax_Mixed_*.csv`` (theory)
and ``empirics/results_mean_standardA.csv`` (means over 24 runs of gradient descent at d = 1000,
σ = 0.5, λ = 0.01, 5000 steps; ``informed=True`` is the start at Q*).

* :data:`TABLE` – the thresholds α_c(ω) and α_l(ω) as the paper tabulates them;
* :data:`STORED_CROSSING` – their stored theory curves at ω = 0.3 on both sides of their crossing
  (α, ε_t semantic, ε_t positional), ε_t = -Φ;
* :data:`STORED_THEORY` – their stored metastable theory values at chapter 03's points A and B;
* :data:`STORED_GD` – their stored gradient-descent means quoted in chapters 03 and 04;
* :data:`PROTOCOL` – their experiments' protocol (the paper's description and their scripts).
"""

from __future__ import annotations

__all__ = ["PROTOCOL", "STORED_CROSSING", "STORED_GD", "STORED_THEORY", "TABLE"]

# Their gradient descent: d = 1000, 24 fresh draws per point, 25 values of α in [0.01, 2],
# 5000 full-batch steps of lr 0.15 with weight decay λ.
PROTOCOL = {
    "d": 1000,
    "n_seeds": 24,
    "n_alpha": 25,
    "alpha_min": 0.01,
    "alpha_max": 2.0,
    "steps": 5000,
    "lr": 0.15,
}

# The paper's table of the two threshold lines, ω -> α.
TABLE = {
    "alpha_c": {0.0: 0.548, 0.1: 0.707, 0.2: 0.928, 0.3: 1.241, 0.4: 1.751},
    "alpha_l": {0.0: 0.722, 0.1: 0.851, 0.2: 1.071, 0.3: 1.451, 0.38: 1.993},
}

# theory/repl_softmax_Mixed_sig0.5_lamb0.01_omega0.3.csv (semantic) and ..._para.csv
# (positional), rows 7 and 6: (α, -Φ semantic, -Φ positional).
STORED_CROSSING = [
    (1.25, 0.002720275075475354, 0.002709734719703341),
    (1.3571428571428572, 0.002871874137655124, 0.0029549732535783108),
]

STORED_THEORY = {
    # theory/repl_softmax_Mixed_sig0.5_lamb0.01_omega0.5.csv, row 7 at α = 1.1875 (θ/σ² below:
    # θ = 0.09842596151620471). Its Φ column is not on the scale of
    # the ω = 0.3 files' (positive, about 0.127 α): the file was written by another version of
    # the notebook.
    "A": {"omega": 0.5, "alpha": 1.1875, "theta_over_sigma2": 0.09842596151620471 / 0.25,
          "q": 0.06893090948359723, "V": 21.985500619549804},
    # theory/repl_softmax_Mixed_sig0.5_lamb0.01_omega0.15_para_Aalt.csv, row 1 (files named
    # "_Aalt", the name of the appendix's alternative A in their scripts).
    "B": {"omega": 0.15, "alpha": 1.788888888888889, "m": 0.21805035664448585},
}  # fmt: skip

STORED_GD = {
    # empirics/results_mean_standardA.csv, d = 1000, σ = 0.5, λ = 0.01: (ω, α, informed) -> means
    "A": {"omega": 0.5, "alpha": 1.1708333333333334, "informed": True,
          "theta_over_sigma2": 0.38663549969593686},
    # the four grid points around B (ω = 0.14, 0.16; α = 1.75, 1.83), positional start: |m|
    "B": {(0.14, 1.75125): 0.22313528942565122, (0.14, 1.8341666666666667): 0.22259910019735496,
          (0.16, 1.75125): 0.22882374078035353, (0.16, 1.8341666666666667): 0.22632732105751832},
    # ω = 0.3, α = 2: test error from each start and |m| from the positional one
    "alpha_2": {"eps_g_semantic": 0.0014427437604268391, "eps_g_positional": 0.003491743008931478,
                "m_positional": 0.26184023121992744},
    # σ = 0.7, ω = 0.3, α = 1.005, positional start: |m| (chapter 04's exercise on σ)
    "sigma_0.7": {"sigma": 0.7, "omega": 0.3, "alpha": 1.005, "m_positional": 0.20732251207033792},
    # ω = 0.3: the two grid values of α between which the mean training errors of the two
    # starts change order (semantic lower from the second on)
    "crossing": (1.3366666666666667, 1.4195833333333334),
}  # fmt: skip
