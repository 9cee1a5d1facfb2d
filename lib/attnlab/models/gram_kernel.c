/* The Gram form of the linear transformers, forward and backward, for attnlab.models.gram_kernel:
 * DIAG and GD++ (kind "omega", T = I + Omega' o X) and FULL (kind "full", T = I + sum_h P'_h X Q'_h).
 * The algorithm is attnlab.models.gram_backward's, line by line; only the order of the loops differs.
 *
 * Compiled at first use with -DREAL=float|double -DDP=<d+2> -DW=<lanes>. A block of W sequences
 * is held as [DP][DP][W] (the sequence index last), so every statement over the lanes is one
 * vector instruction, and a block's states of every layer stay in the core's cache: the
 * backward pass recomputes the block's forward pass instead of reading it back from memory.
 * FULL's weights, shared by the sequences, are copied once per model into every lane
 * ([DP][DP][W]), so that their products are the same per-lane products as the others.
 *
 * G0    [M or 1][B][D][D]     the context Gram matrices (D = DP - 1), batch first, as torch holds them
 * e0    [M or 1][B][D]        the queries; model_stride 1: one data set per model, 0: one for all
 * w0    omega: [M][L][4], the omegas (xx, xy, yx, yy) of every model and layer; full: P [M][L][H][D][D]
 * w1    full: Q [M][L][H][D][D] (D = DP - 1); omega: unused
 * y     [M][L+1][B]           the readouts -X_l[a][q] (forward)
 * ybar  [M][L+1][B]           their upstream gradient (backward)
 * g0,g1 the gradients of w0, w1 (backward, overwritten)
 * The weights' gradients are summed per lane over the blocks and added up across the lanes once per
 * model. gram_matrices computes the context Gram matrices G0 themselves, W sequences at a time.
 */
#include <stddef.h>
#include <string.h>

#define A_ (DP - 2) /* the y coordinate */
#define Q_ (DP - 1) /* the query column */
#define MAT (DP * DP * W)
#define AT(M_, i, j) ((M_) + ((i) * DP + (j)) * W)

typedef REAL real;
/* The W lanes of one matrix entry as one vector (GCC's vector extension), for the elementwise
 * statements, which the compiler otherwise vectorises across entries with permutations. */
typedef real vec __attribute__((vector_size(W * sizeof(real)), aligned(sizeof(real)), may_alias));

/* C = A B, per lane, with A(i, k) at A + (i ar + k ak) W and B(k, j) at B + (k bk + j bj) W (a
 * transposed operand is a swap of strides): for each row of C, DP accumulators of one vector each
 * stay in registers, and every entry A(i, k) loaded serves the whole row. */
static inline __attribute__((always_inline)) void product(const real *restrict A, int ar, int ak,
                                                          const real *restrict B, int bk, int bj,
                                                          real *restrict C) {
    for (int i = 0; i < DP; i++) {
        real acc[DP][W];
        const real *a0 = A + i * ar * W; /* k = 0 starts the sums: no zeroing, no copies */
        for (int j = 0; j < DP; j++)
            for (int v = 0; v < W; v++) acc[j][v] = a0[v] * B[j * bj * W + v];
        for (int k = 1; k < DP; k++) {
            const real *a = A + (i * ar + k * ak) * W;
            for (int j = 0; j < DP; j++) {
                const real *b = B + (k * bk + j * bj) * W;
                for (int v = 0; v < W; v++) acc[j][v] += a[v] * b[v];
            }
        }
        real *c = AT(C, i, 0);
        for (int j = 0; j < DP; j++)
            for (int v = 0; v < W; v++) c[j * W + v] = acc[j][v];
    }
}

static void mm(const real *A, const real *B, real *C) { product(A, DP, 1, B, DP, 1, C); }    /* A B */
static void mm_nt(const real *A, const real *B, real *C) { product(A, DP, 1, B, 1, DP, C); } /* A B^T */
static void mm_tn(const real *A, const real *B, real *C) { product(A, 1, DP, B, DP, 1, C); } /* A^T B */

/* Omega' [L][DP][DP] of one model: the omega of (i, j)'s block, zero in the last row and column. */
static void omegas(int L, const real *om, real *Om) {
    for (int l = 0; l < L; l++)
        for (int i = 0; i < DP; i++)
            for (int j = 0; j < DP; j++) {
                int blk = (i < A_ ? 0 : 2) + (j < A_ ? 0 : 1);
                Om[(l * DP + i) * DP + j] = (i == Q_ || j == Q_) ? 0 : om[l * 4 + blk];
            }
}

/* The padded states X = [[G, e], [e^T, 0]] (padded_state) of the lanes b0 .. b0+n-1 of model m
 * into X [DP][DP][W]; missing lanes are zero sequences (their readouts and gradients are zero). */
static void load(const real *G0, const real *e0, ptrdiff_t model_stride, int m, ptrdiff_t B, ptrdiff_t b0,
                 int n, real *X) {
    int D = DP - 1;
    const real *G = G0 + m * model_stride * B * D * D, *e = e0 + m * model_stride * B * D;
    memset(X, 0, MAT * sizeof(real));
    for (int v = 0; v < n; v++) {
        const real *g = G + (b0 + v) * D * D, *q = e + (b0 + v) * D;
        for (int i = 0; i < D; i++) {
            for (int j = 0; j < D; j++) AT(X, i, j)[v] = g[i * D + j];
            AT(X, i, Q_)[v] = AT(X, Q_, i)[v] = q[i];
        }
    }
}

/* FULL's P'_h or Q'_h of every layer ([L][H][D][D], zero padded) copied into every lane: [L][H][DP][DP][W]. */
static void expand(int LH, const real *src, real *dst) {
    int D = DP - 1;
    memset(dst, 0, (size_t)LH * MAT * sizeof(real));
    for (int lh = 0; lh < LH; lh++)
        for (int i = 0; i < D; i++)
            for (int j = 0; j < D; j++)
                for (int v = 0; v < W; v++) AT(dst + lh * MAT, i, j)[v] = src[(lh * D + i) * D + j];
}

/* G += A, both [DP][DP][W]: sums per lane, added up over the lanes once per model (store_gradients). */
static void add_to(const real *restrict A, real *restrict G) {
    const vec *a = (const vec *)A;
    vec *g = (vec *)G;
    for (int ij = 0; ij < DP * DP; ij++) g[ij] += a[ij];
}

/* The weights of one model: Om [L][DP][DP] (omega), or Pe, Qe [L][H][DP][DP][W] (full, H heads). */
typedef struct {
    int L, H;
    const real *Om, *Pe, *Qe;
} Weights;

/* T = I + K(X) of layer l; FULL uses tmp[0 .. 2 MAT). */
static void operator_T(const Weights *w, int l, const real *X, real *restrict T, real *restrict tmp) {
    if (w->Om) {
        const real *Ol = w->Om + l * DP * DP;
        const vec *x = (const vec *)X;
        vec *t = (vec *)T;
        for (int ij = 0; ij < DP * DP; ij++) t[ij] = x[ij] * Ol[ij]; /* Omega' o X */
    } else {
        for (int h = 0; h < w->H; h++) { /* sum_h P'_h (X Q'_h) */
            mm(X, w->Qe + (l * w->H + h) * MAT, tmp);
            mm(w->Pe + (l * w->H + h) * MAT, tmp, h ? tmp + MAT : T);
            if (h)
                for (int e = 0; e < MAT; e++) T[e] += tmp[MAT + e];
        }
    }
    for (int i = 0; i < DP; i++)
        for (int v = 0; v < W; v++) AT(T, i, i)[v] += 1;
}

/* The forward pass of one block; states X_l, T_l, (T X)_l of every layer into Xs, Ts, TXs. */
static void forward_block(const Weights *w, real *Xs, real *Ts, real *TXs, real *tmp, real *y,
                          ptrdiff_t ystride, int n) {
    for (int v = 0; v < n; v++) y[v] = -AT(Xs, A_, Q_)[v];
    for (int l = 0; l < w->L; l++) {
        real *X = Xs + l * MAT, *T = Ts + l * MAT, *TX = TXs + l * MAT;
        operator_T(w, l, X, T, tmp);
        mm(T, X, TX);
        for (int v = 0; v < n; v++) y[(l + 1) * ystride + v] = -AT(TX, A_, Q_)[v];
        if (l < w->L - 1) mm_nt(TX, T, Xs + (l + 1) * MAT);
    }
}

/* The number of reals of work space gram_forward and gram_backward need: Xs, Ts, TXs (L each), S,
 * Tbar, three temporaries, the block's readouts, FULL's expanded weights, and the gradients' sums per
 * lane (FULL: P's and Q's [L][H][DP][DP][W]; omega: its blocks' [L][4][W]). */
ptrdiff_t gram_work_size(int full, int L, int H) {
    return (ptrdiff_t)(3 * L + 5) * MAT + (L + 1) * W + (full ? 4 * (ptrdiff_t)L * H * MAT : 4 * L * W);
}

/* The weights of model m (omega: Om is the caller's; full: expanded into the end of work). */
static Weights model_weights(int full, int L, int H, const real *w0, const real *w1, int m, real *Om, real *work) {
    Weights w = {L, H, NULL, NULL, NULL};
    if (!full) {
        omegas(L, w0 + (ptrdiff_t)m * L * 4, Om);
        w.Om = Om;
        return w;
    }
    ptrdiff_t size = (ptrdiff_t)L * H * (DP - 1) * (DP - 1);
    real *Pe = work + (ptrdiff_t)(3 * L + 5) * MAT + (L + 1) * W, *Qe = Pe + (ptrdiff_t)L * H * MAT;
    expand(L * H, w0 + m * size, Pe);
    expand(L * H, w1 + m * size, Qe);
    w.Pe = Pe;
    w.Qe = Qe;
    return w;
}

void gram_forward(int full, int M, int L, int H, ptrdiff_t B, const real *G0, const real *e0, ptrdiff_t model_stride,
                  const real *w0, const real *w1, real *y, real *work) {
    real *Xs = work, *Ts = Xs + L * MAT, *TXs = Ts + L * MAT, *tmp = TXs + (L + 2) * MAT;
    real Om[L * DP * DP]; /* local: the compiler sees that it aliases no state */
    for (int m = 0; m < M; m++) {
        Weights w = model_weights(full, L, H, w0, w1, m, Om, work);
        for (ptrdiff_t b0 = 0; b0 < B; b0 += W) {
            int n = B - b0 < W ? (int)(B - b0) : W;
            load(G0, e0, model_stride, m, B, b0, n, Xs);
            forward_block(&w, Xs, Ts, TXs, tmp, y + m * (L + 1) * B + b0, B, n);
        }
    }
}

/* The backward pass of one block whose states forward_block left in Xs, Ts, TXs, for the upstream
 * gradients yb [L+1][W]; adds the weights' gradients, per lane, to G (and GQ, full). S, Tbar
 * and tmp[0 .. 3 MAT) are work space. */
static void backward_block(const Weights *w, const real *Xs, const real *Ts, const real *TXs, real yb[][W],
                           real *restrict S, real *restrict Tbar, real *restrict tmp, real *G, real *GQ) {
    int L = w->L, H = w->H;
    for (int l = L - 1; l >= 0; l--) {
        const real *X = Xs + l * MAT, *T = Ts + l * MAT, *TX = TXs + l * MAT;
        if (l == L - 1) { /* only y_L = -(T X)[a][q] depends on the last layer */
            memset(Tbar, 0, MAT * sizeof(real));
            for (int j = 0; j < DP; j++)
                for (int v = 0; v < W; v++) AT(Tbar, A_, j)[v] = -yb[L][v] * AT(X, Q_, j)[v];
        } else {
            mm(S, TX, Tbar);
        }
        if (l > 0) {
            if (l == L - 1) { /* S = C + C^T, C's column q = -ybar_L T[a][:] */
                memset(S, 0, MAT * sizeof(real));
                for (int i = 0; i < DP; i++)
                    for (int v = 0; v < W; v++) {
                        real c = -yb[L][v] * AT(T, A_, i)[v];
                        AT(S, i, Q_)[v] += c;
                        AT(S, Q_, i)[v] += c;
                    }
            } else { /* S = T^T (S T) */
                mm(S, T, tmp);
                mm_tn(T, tmp, S);
            }
            for (int v = 0; v < W; v++) {
                AT(S, A_, Q_)[v] -= yb[l][v];
                AT(S, Q_, A_)[v] -= yb[l][v];
            }
        }
        if (w->Om) {
            const real *Ol = w->Om + l * DP * DP;
            const vec *tb = (const vec *)Tbar, *x = (const vec *)X;
            vec *g = (vec *)G + l * 4; /* per lane: the sums of Tbar o X over omega's four blocks */
            for (int i = 0; i < Q_; i++) {
                vec row = tb[i * DP] * x[i * DP];
                for (int j = 1; j < A_; j++) row += tb[i * DP + j] * x[i * DP + j];
                g[i < A_ ? 0 : 2] += row;
                g[i < A_ ? 1 : 3] += tb[i * DP + A_] * x[i * DP + A_];
            }
            if (l > 0) { /* S += Kbar + Kbar^T, Kbar = Omega' o Tbar */
                vec *s = (vec *)S;
                for (int i = 0; i < DP; i++)
                    for (int j = 0; j < DP; j++)
                        s[i * DP + j] += tb[i * DP + j] * Ol[i * DP + j] + tb[j * DP + i] * Ol[j * DP + i];
            }
            continue;
        }
        for (int h = 0; h < H; h++) {
            const real *P = w->Pe + (l * H + h) * MAT, *Q = w->Qe + (l * H + h) * MAT;
            real *A = tmp, *U = tmp + MAT, *V = tmp + 2 * MAT;
            mm_nt(Tbar, Q, A); /* A = Tbar Q'^T */
            mm(A, X, U);       /* Pbar += sum over the lanes of A X */
            add_to(U, G + (l * H + h) * MAT);
            if (l > 0) { /* S += Kbar + Kbar^T, Kbar = P'^T A */
                mm_tn(P, A, U);
                for (int i = 0; i < DP; i++)
                    for (int j = 0; j < DP; j++) {
                        const real *kij = AT(U, i, j), *kji = AT(U, j, i);
                        real *s = AT(S, i, j);
                        for (int v = 0; v < W; v++) s[v] += kij[v] + kji[v];
                    }
            }
            mm_nt(X, P, U); /* Qbar += sum over the lanes of (X P'^T) Tbar */
            mm(U, Tbar, V);
            add_to(V, GQ + (l * H + h) * MAT);
        }
    }
}

/* The weights' gradients of model m from the lane sums G (and GQ). */
static void store_gradients(int full, int m, int L, int H, const real *G, const real *GQ, real *g0, real *g1) {
    if (!full) { /* G [L][4][W]: the sums over the lanes */
        for (int lb = 0; lb < L * 4; lb++) {
            real s = 0;
            for (int v = 0; v < W; v++) s += G[lb * W + v];
            g0[m * L * 4 + lb] = s;
        }
        return;
    }
    int D = DP - 1;
    ptrdiff_t size = (ptrdiff_t)L * H * D * D;
    for (int lh = 0; lh < L * H; lh++) /* G, GQ [L][H][DP][DP][W] */
        for (int i = 0; i < D; i++)
            for (int j = 0; j < D; j++) {
                const real *p = AT(G + lh * MAT, i, j), *q = AT(GQ + lh * MAT, i, j);
                real sp = 0, sq = 0;
                for (int v = 0; v < W; v++) {
                    sp += p[v];
                    sq += q[v];
                }
                g0[m * size + (lh * D + i) * D + j] = sp;
                g1[m * size + (lh * D + i) * D + j] = sq;
            }
}

/* With target == NULL: the weights' gradients g0, g1 for the upstream gradient ybar [M][L+1][B] of
 * the readouts. Otherwise (ybar unused): the half mean squared error of the last readout against
 * target [M][B] into loss [M], and its gradients (one pass: nothing recomputed). */
static void gradients(int full, int M, int L, int H, ptrdiff_t B, const real *G0, const real *e0, ptrdiff_t model_stride,
                      const real *w0, const real *w1, const real *ybar, const real *target, real *loss,
                      real *g0, real *g1, real *work) {
    real *Xs = work, *Ts = Xs + L * MAT, *TXs = Ts + L * MAT;
    real *S = TXs + L * MAT, *Tbar = S + MAT, *tmp = Tbar + MAT;
    int LH = full ? L * H : L;
    real Om[L * DP * DP];
    real *G = tmp + (ptrdiff_t)3 * MAT + (L + 1) * W + (full ? 2 * (ptrdiff_t)LH * MAT : 0);
    real *GQ = full ? G + (ptrdiff_t)LH * MAT : NULL;
    size_t sums = (full ? 2 * (size_t)LH * MAT : 4 * (size_t)L * W) * sizeof(real); /* G (and GQ) */
    for (int m = 0; m < M; m++) {
        Weights w = model_weights(full, L, H, w0, w1, m, Om, work);
        memset(G, 0, sums);
        double sq = 0;
        for (ptrdiff_t b0 = 0; b0 < B; b0 += W) {
            int n = B - b0 < W ? (int)(B - b0) : W;
            real yb[L + 1][W]; /* the block's readouts, then their upstream gradients (zero on missing lanes) */
            load(G0, e0, model_stride, m, B, b0, n, Xs);
            forward_block(&w, Xs, Ts, TXs, tmp, yb[0], W, n);
            if (target) {
                const real *t = target + m * B + b0;
                for (int v = 0; v < W; v++) {
                    real r = v < n ? yb[L][v] - t[v] : 0;
                    sq += (double)r * r;
                    yb[L][v] = r / (real)B;
                }
                memset(yb, 0, L * W * sizeof(real));
            } else {
                memset(yb, 0, sizeof yb);
                for (int l = 0; l <= L; l++)
                    for (int v = 0; v < n; v++) yb[l][v] = ybar[(m * (L + 1) + l) * B + b0 + v];
            }
            backward_block(&w, Xs, Ts, TXs, yb, S, Tbar, tmp, G, GQ);
        }
        if (target) loss[m] = (real)(0.5 * sq / (double)B);
        store_gradients(full, m, L, H, G, GQ, g0, g1);
    }
}

void gram_backward(int full, int M, int L, int H, ptrdiff_t B, const real *G0, const real *e0, ptrdiff_t model_stride,
                   const real *w0, const real *w1, const real *ybar, real *g0, real *g1, real *work) {
    gradients(full, M, L, H, B, G0, e0, model_stride, w0, w1, ybar, NULL, NULL, g0, g1, work);
}

void gram_half_mse(int full, int M, int L, int H, ptrdiff_t B, const real *G0, const real *e0, ptrdiff_t model_stride,
                   const real *w0, const real *w1, const real *target, real *loss, real *g0, real *g1,
                   real *work) {
    gradients(full, M, L, H, B, G0, e0, model_stride, w0, w1, NULL, target, loss, g0, g1, work);
}

/* The context Gram matrices G [B][D][D] = E^T E of E = [X, y] (X [B][n][D-1], y [B][n]), as
 * attnlab.tasks.icl_regression.gram_inputs: W sequences at a time, one lane each, so that the sums
 * over the context are vector statements (torch's batched 11 x 20 x 11 products run at a few
 * percent of the matmul peak). */
void gram_matrices(ptrdiff_t B, int n, const real *X, const real *y, real *G) {
    enum { D = DP - 1 };
    vec acc[D][D], e[D];
    for (ptrdiff_t b0 = 0; b0 < B; b0 += W) {
        int nb = B - b0 < W ? (int)(B - b0) : W;
        memset(acc, 0, sizeof acc);
        memset(e, 0, sizeof e); /* missing lanes stay zero */
        for (int t = 0; t < n; t++) {
            real *el = (real *)e;
            for (int v = 0; v < nb; v++) {
                const real *x = X + ((b0 + v) * n + t) * (D - 1);
                for (int i = 0; i < D - 1; i++) el[i * W + v] = x[i];
                el[(D - 1) * W + v] = y[(b0 + v) * n + t];
            }
            for (int i = 0; i < D; i++)
                for (int j = i; j < D; j++) acc[i][j] += e[i] * e[j];
        }
        for (int v = 0; v < nb; v++) {
            real *g = G + (b0 + v) * D * D;
            for (int i = 0; i < D; i++)
                for (int j = i; j < D; j++) g[i * D + j] = g[j * D + i] = acc[i][j][v];
        }
    }
}
