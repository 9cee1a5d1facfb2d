import pytest
import torch

from attnlab.optim import SGD, Adam, AdamW


def _quartic_steps(ours_cls, ours_kw, ref_cls, ref_kw, n_steps=7, factors=None):
    """Take the same steps with ours and torch.optim on a quartic loss; return both parameter lists."""
    gen = torch.Generator().manual_seed(0)
    a = [
        torch.randn(5, generator=gen, dtype=torch.float64),
        torch.randn(2, 3, generator=gen, dtype=torch.float64),
    ]
    targets = [torch.randn(p.shape, generator=gen, dtype=p.dtype) for p in a]
    ours = [p.clone().requires_grad_(True) for p in a]
    theirs = [p.clone().requires_grad_(True) for p in a]
    opt = ours_cls([{"params": [ours[0]]}, {"params": [ours[1]], "lr": 0.03}], **ours_kw)
    ref = ref_cls([{"params": [theirs[0]]}, {"params": [theirs[1]], "lr": 0.03}], foreach=False, **ref_kw)
    for k in range(n_steps):
        factor = 1.0 if factors is None else factors[k]
        for group in ref.param_groups:  # torch's way of scheduling: rewrite the group's lr
            group.setdefault("base_lr", group["lr"])
            group["lr"] = group["base_lr"] * factor
        for ps in (ours, theirs):
            for p in ps:
                p.grad = None
            sum(((p - t) ** 4).sum() for p, t in zip(ps, targets, strict=True)).backward()
        opt.step(factor)
        ref.step()
    return ours, theirs


@pytest.mark.parametrize(
    "ours_cls,ours_kw,ref_cls,ref_kw",
    [
        (SGD, {"lr": 0.1}, torch.optim.SGD, {"lr": 0.1}),
        (SGD, {"lr": 0.1, "weight_decay": 0.3}, torch.optim.SGD, {"lr": 0.1, "weight_decay": 0.3}),
        (Adam, {"lr": 0.1, "betas": (0.9, 0.98)}, torch.optim.Adam, {"lr": 0.1, "betas": (0.9, 0.98)}),
        (Adam, {"lr": 0.1, "weight_decay": 0.3}, torch.optim.Adam, {"lr": 0.1, "weight_decay": 0.3}),
        (
            Adam,
            {"lr": 0.1, "weight_decay": 0.3, "decoupled": True},
            torch.optim.AdamW,
            {"lr": 0.1, "weight_decay": 0.3},
        ),
        (AdamW, {"lr": 0.1}, torch.optim.AdamW, {"lr": 0.1}),
    ],
)
def test_steps_match_torch_optim_with_groups_and_schedule(ours_cls, ours_kw, ref_cls, ref_kw):
    for factors in (None, [0.2, 0.5, 1.0, 0.9, 0.6, 0.3, 0.05]):
        ours, theirs = _quartic_steps(ours_cls, ours_kw, ref_cls, ref_kw, factors=factors)
        start, _ = _quartic_steps(ours_cls, ours_kw, ref_cls, ref_kw, n_steps=0)
        assert all((a - s).abs().max() > 1e-2 for a, s in zip(ours, start, strict=True))  # they moved
        for a, b in zip(ours, theirs, strict=True):
            assert torch.allclose(a, b, rtol=1e-12, atol=1e-14)


def test_coupled_and_decoupled_decay_differ():
    ours_c, _ = _quartic_steps(Adam, {"lr": 0.1, "weight_decay": 0.3}, torch.optim.Adam, {"lr": 0.1})
    ours_d, _ = _quartic_steps(AdamW, {"lr": 0.1, "weight_decay": 0.3}, torch.optim.AdamW, {"lr": 0.1})
    assert (ours_c[0] - ours_d[0]).abs().max() > 1e-3


def test_zero_grad_and_skipped_parameters():
    a = torch.ones(3, requires_grad=True)
    b = torch.ones(3, requires_grad=True)
    opt = Adam([a, b], lr=0.1)
    (a**2).sum().backward()
    opt.step()
    assert torch.all(a < 1) and torch.all(b == 1)  # b had no gradient: untouched
    opt.zero_grad()
    assert a.grad is None


@pytest.mark.parametrize(
    "args,kwargs,match",
    [
        ([[]], {"lr": 0.1}, "params must list"),
        ([[{"params": []}, torch.zeros(1)]], {"lr": 0.1}, "not a mix"),
        ([[{"params": [torch.zeros(1)], "momentum": 0.9}]], {"lr": 0.1}, "parameter groups take"),
        ([[3.0]], {"lr": 0.1}, "params must be tensors"),
        ([[torch.zeros(1)]], {"lr": -1.0}, "lr must be >= 0"),
        ([[torch.zeros(1)]], {"lr": 0.1, "weight_decay": -1.0}, "weight_decay must be >= 0"),
        ([[torch.zeros(1)]], {"lr": 0.1, "betas": (0.9, 1.0)}, "betas must be"),
    ],
)
def test_bad_arguments(args, kwargs, match):
    cls = Adam if "betas" in kwargs else SGD
    with pytest.raises(ValueError, match=match):
        cls(*args, **kwargs)
