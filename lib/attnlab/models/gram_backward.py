"""The Gram form of :class:`~attnlab.models.LinearTransformer` with a hand-written backward pass.

Layer ``l`` maps the context Gram matrix and the query by ``T_l = I + K_l(G_l)``::

    e_{l+1} = T_l e_l,    G_{l+1} = T_l G_l T_l^T,    y_l = -e_l[-1]

(:meth:`~attnlab.models.LinearTransformer.gram_forward`). :class:`GramForward` computes the
readouts ``y_0, ..., y_L`` of a flat batch of models and differentiates them with respect to the
weights by the chain rule written out by hand. With ``E_{l+1}`` the gradient of the loss with
respect to ``e_{l+1}`` and ``S_{l+1} = Gbar_{l+1} + Gbar_{l+1}^T`` the symmetrised gradient with
respect to ``G_{l+1}`` (every ``G_l`` is symmetric, so the symmetrised gradient is all the chain
needs)::

    Tbar_l = E_{l+1} e_l^T + S_{l+1} T_l G_l,    E_l = T_l^T E_{l+1} - ybar_l u_D,
    S_l = T_l^T S_{l+1} T_l + Kbar + Kbar^T,     Kbar = dK_l/dG applied to Tbar_l,

and the weights' gradients are ``dK_l/dweights`` applied to ``Tbar_l``:

- FULL (``K = sum_k P_k G Q_k``): ``Pbar_k = sum_b Tbar (G Q_k)^T``, ``Qbar_k = sum_b (P_k G)^T Tbar``,
  ``Kbar = sum_k P_k^T Tbar Q_k^T``;
- DIAG and GD++ (``K = Omega ∘ G``, ``Omega`` block-constant in the four omegas): ``omegabar`` the
  block sums of ``sum_b Tbar ∘ G``, ``Kbar = Omega ∘ Tbar``.

Autograd would store every intermediate of the broadcast batched products and reduce the
broadcast weights' gradients over the data batch one small matrix at a time; here the
reductions over the batch are single matrix products (``[D, B D] @ [B D, D]``), and nothing is
computed for ``G_0`` (the data get no gradient). The tests check the gradients against autograd
through the same form (:func:`gram_readouts_autograd`) and through the token form.
"""

from __future__ import annotations

import torch


def omega_matrix(om: torch.Tensor, D: int) -> torch.Tensor:
    """The block-constant ``Omega [..., D, D]`` of the omegas ``[..., 4]`` = ``(xx, xy, yx, yy)``."""
    return om[..., _block_index(D, om.device)]


def _block_index(D, device):
    idx = torch.zeros(D, D, dtype=torch.long, device=device)
    idx[:-1, -1], idx[-1, :-1], idx[-1, -1] = 1, 2, 3
    return idx


def _block_sums(R: torch.Tensor) -> torch.Tensor:
    """``[..., 4]``: the sums of ``R [..., D, D]`` over the four blocks of :func:`omega_matrix`."""
    xx = R[..., :-1, :-1].sum((-2, -1))
    return torch.stack([xx, R[..., :-1, -1].sum(-1), R[..., -1, :-1].sum(-1), R[..., -1, -1]], dim=-1)


def padded_state(G: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
    """``X = [[G, e], [e^T, 0]] [..., D+1, D+1]``: the Gram matrix and the query in one symmetric matrix.

    With ``T' = [[T, 0], [0, 1]]``, ``T' X T'^T = [[T G T^T, T e], [(T e)^T, 0]]``: one layer is
    two products of ``(D+1) x (D+1)`` matrices, and the readout ``-e[-1]`` is ``-X[D-1, D]``.
    """
    top = torch.cat([G, e[..., :, None]], dim=-1)
    bottom = torch.cat([e, torch.zeros_like(e[..., :1])], dim=-1)[..., None, :]
    return torch.cat([top, bottom], dim=-2)


def _pad(w):
    return torch.nn.functional.pad(w, (0, 1, 0, 1))


def _padded_weights(kind, w, Dp):
    """FULL: ``P', Q'`` padded with a zero last row and column; DIAG: ``Omega' [M, L, D+1, D+1]``, padded."""
    if kind == "full":
        return [_pad(t) for t in w]
    return [_pad(omega_matrix(w[0], Dp - 1))]


def _padded_operator(kind, w, layer, X):
    """``K'(X) [M, B, D+1, D+1]`` (zero last row and column) from :func:`_padded_weights` ``w``; FULL
    also returns ``X Q'_k [M, H, B, D+1, D+1]``."""
    B, Dp = X.shape[1], X.shape[-1]
    if kind == "full":
        P, Q = w[0][:, layer], w[1][:, layer]  # [M, H, D+1, D+1], padded
        XQ = torch.matmul(X.reshape(X.shape[0], 1, B * Dp, Dp), Q)  # GEMMs (X may be shared: [1, ...])
        XQ = XQ.reshape(*XQ.shape[:2], B, Dp, Dp)
        K = P[:, 0, None] @ XQ[:, 0]
        for h in range(1, P.shape[1]):
            K = K + P[:, h, None] @ XQ[:, h]
        return K, XQ
    return w[0][:, layer, None] * X, None


class GramForward(torch.autograd.Function):
    """Readouts ``[M, L+1, B]`` of ``M`` models from the :func:`padded_state` ``X [M, B, D+1, D+1]``.

    ``kind`` is ``"full"`` (weights ``P, Q [M, L, H, D, D]``) or ``"omega"`` (weights: the
    omegas ``[M, L, 4]``, DIAG and GD++). Gradients flow to the weights only.
    """

    @staticmethod
    def forward(ctx, kind, X, *w):
        L, Dp = w[0].shape[1], X.shape[-1]
        a, q = Dp - 2, Dp - 1  # the y coordinate, the query column
        wp = _padded_weights(kind, w, Dp)
        saved, outs = [], [-X[..., a, q]]
        for layer in range(L):
            T, XQ = _padded_operator(kind, wp, layer, X)
            T.diagonal(dim1=-2, dim2=-1).add_(1.0)  # T' = I + K' (in place: no new buffer)
            TX = T @ X
            outs.append(-TX[..., a, q])
            saved.append((X, T, TX, XQ))
            if layer < L - 1:
                X = TX @ T.transpose(-1, -2)
        ctx.kind, ctx.layers = kind, saved
        ctx.save_for_backward(*wp, *w)
        return torch.stack(outs, dim=1)

    @staticmethod
    def backward(ctx, ybar):
        kind, saved = ctx.kind, ctx.layers
        wp, w = (
            ctx.saved_tensors[: len(ctx.saved_tensors) // 2],
            ctx.saved_tensors[len(ctx.saved_tensors) // 2 :],
        )
        grads = [torch.zeros_like(x) for x in wp] if kind == "full" else [torch.zeros_like(w[0])]
        L = len(saved)
        S = None  # the symmetrised gradient with respect to X_{l+1}
        for layer in range(L - 1, -1, -1):
            X, T, TX, XQ = saved[layer]
            M, B, Dp = X.shape[0], X.shape[1], X.shape[-1]
            a, q = Dp - 2, Dp - 1
            if S is None:  # the last layer: only y_L = -(T X)[a, q] depends on it
                Tbar = torch.zeros_like(T)
                Tbar[..., a, :] = -ybar[:, L, :, None] * X[..., q, :]
            else:
                Tbar = S @ TX
            if layer > 0:
                if S is None:  # T^T (-ybar (E_aq + E_qa)) T, with T's row q the unit vector
                    S = torch.zeros_like(T)
                    S[..., :, q] = -ybar[:, L, :, None] * T[..., a, :]
                    S[..., q, :] += S[..., :, q]
                else:
                    S = T.transpose(-1, -2) @ S @ T
                S[..., a, q] -= ybar[:, layer]
                S[..., q, a] -= ybar[:, layer]
            if kind == "full":
                P, Q = wp[0][:, layer], wp[1][:, layer]  # [M, H, D+1, D+1]
                # A = Tbar Q^T; Pbar = sum_b A X, Qbar = sum_b (X P^T)^T Tbar: [D, B D] @ [B D, D] products
                A = torch.matmul(Tbar.reshape(M, 1, B * Dp, Dp), Q.transpose(-1, -2)).reshape(
                    M, -1, B, Dp, Dp
                )
                grads[0][:, layer] = A.transpose(-2, -3).reshape(M, -1, Dp, B * Dp) @ X.reshape(
                    M, 1, B * Dp, Dp
                )
                XPt = torch.matmul(X.reshape(M, 1, B * Dp, Dp), P.transpose(-1, -2)).reshape(M, -1, B, Dp, Dp)
                grads[1][:, layer] = XPt.transpose(-2, -3).reshape(M, -1, Dp, B * Dp) @ Tbar.reshape(
                    M, 1, B * Dp, Dp
                )
                if layer > 0:
                    for h in range(P.shape[1]):
                        Kbar = P[:, h, None].transpose(-1, -2) @ A[:, h]
                        S.add_(Kbar).add_(Kbar.transpose(-1, -2))
            else:
                grads[0][:, layer] = _block_sums((Tbar * X).sum(1)[..., :-1, :-1])
                if layer > 0:
                    Kbar = Tbar.mul_(wp[0][:, layer, None])  # Tbar is used up
                    S.add_(Kbar).add_(Kbar.transpose(-1, -2))
        ctx.layers = None
        if kind == "full":
            grads = [g[..., :-1, :-1] for g in grads]
        return (None, None, *grads)


def gram_readouts_autograd(kind, G, e, *w):
    """The readouts of :class:`GramForward` from ``G``, ``e``, written for autograd (also in the data)."""
    L = w[0].shape[1]
    X = padded_state(G, e)
    wp = _padded_weights(kind, w, X.shape[-1])
    eye = torch.eye(X.shape[-1], dtype=X.dtype, device=X.device)
    outs = [-X[..., -2, -1]]
    for layer in range(L):
        T = _padded_operator(kind, wp, layer, X)[0] + eye
        X = T @ X @ T.transpose(-1, -2)
        outs.append(-X[..., -2, -1])
    return torch.stack(torch.broadcast_tensors(*outs), dim=1)  # y_0 is shared when the data are
