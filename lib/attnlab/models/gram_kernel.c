/* The Gram form of the DIAG and GD++ linear transformers (T = I + Omega' o X), forward and backward,
 * for attnlab.models.gram_kernel. The algorithm is attnlab.models.gram_backward's (kind "omega"),
 * line by line; only the order of the loops differs.
 *
 * Compiled at first use with -DREAL=float|double -DDP=<d+2> -DW=<lanes>. A block of W sequences
 * is held as [DP][DP][W] (the sequence index last), so every statement over the lanes is one
 * vector instruction, and a block's states of every layer stay in the core's cache: the
 * backward pass recomputes the block's forward pass instead of reading it back from memory.
 *
 * X0    [M or 1][B][DP][DP]   the padded state (padded_state), batch first, as torch holds it
 * om    [M][L][4]             the omegas (xx, xy, yx, yy) of every model and layer
 * y     [M][L+1][B]           the readouts -X_l[a][q] (forward)
 * ybar  [M][L+1][B]           their upstream gradient (backward)
 * gom   [M][L][4]             the omegas' gradient (backward, overwritten)
 */
#include <stddef.h>
#include <string.h>

#define A_ (DP - 2) /* the y coordinate */
#define Q_ (DP - 1) /* the query column */
#define MAT (DP * DP * W)
#define AT(M_, i, j) ((M_) + ((i) * DP + (j)) * W)

typedef REAL real;

/* C = A B, per lane: for each row of C, DP accumulators of one vector each stay in registers, and
 * every entry A(i, k) loaded serves the whole row. */
static void mm(const real *restrict A, const real *restrict B, real *restrict C) {
    for (int i = 0; i < DP; i++) {
        real acc[DP][W];
        memset(acc, 0, sizeof acc);
        for (int k = 0; k < DP; k++) {
            const real *a = AT(A, i, k), *b = AT(B, k, 0);
            for (int j = 0; j < DP; j++)
                for (int v = 0; v < W; v++) acc[j][v] += a[v] * b[j * W + v];
        }
        memcpy(AT(C, i, 0), acc, sizeof acc);
    }
}

/* C = A B^T, per lane */
static void mm_nt(const real *restrict A, const real *restrict B, real *restrict C) {
    for (int i = 0; i < DP; i++) {
        real acc[DP][W];
        memset(acc, 0, sizeof acc);
        for (int k = 0; k < DP; k++) {
            const real *a = AT(A, i, k);
            for (int j = 0; j < DP; j++) {
                const real *b = AT(B, j, k);
                for (int v = 0; v < W; v++) acc[j][v] += a[v] * b[v];
            }
        }
        memcpy(AT(C, i, 0), acc, sizeof acc);
    }
}

/* C = A^T B, per lane */
static void mm_tn(const real *restrict A, const real *restrict B, real *restrict C) {
    for (int i = 0; i < DP; i++) {
        real acc[DP][W];
        memset(acc, 0, sizeof acc);
        for (int k = 0; k < DP; k++) {
            const real *a = AT(A, k, i), *b = AT(B, k, 0);
            for (int j = 0; j < DP; j++)
                for (int v = 0; v < W; v++) acc[j][v] += a[v] * b[j * W + v];
        }
        memcpy(AT(C, i, 0), acc, sizeof acc);
    }
}

/* Omega' [L][DP][DP] of one model: the omega of (i, j)'s block, zero in the last row and column. */
static void omegas(int L, const real *om, real *Om) {
    for (int l = 0; l < L; l++)
        for (int i = 0; i < DP; i++)
            for (int j = 0; j < DP; j++) {
                int blk = (i < A_ ? 0 : 2) + (j < A_ ? 0 : 1);
                Om[(l * DP + i) * DP + j] = (i == Q_ || j == Q_) ? 0 : om[l * 4 + blk];
            }
}

/* The block of lanes b0 .. b0+n-1 of X0 (batch first) into X [DP][DP][W]; missing lanes are zero
 * sequences (their readouts and gradients are zero). */
static void load(const real *X0, ptrdiff_t b0, int n, real *X) {
    memset(X, 0, MAT * sizeof(real));
    for (int v = 0; v < n; v++) {
        const real *src = X0 + (b0 + v) * DP * DP;
        for (int ij = 0; ij < DP * DP; ij++) X[ij * W + v] = src[ij];
    }
}

/* The forward pass of one block; states X_l, T_l, (T X)_l of every layer into Xs, Ts, TXs. */
static void forward_block(int L, const real *Om, real *Xs, real *Ts, real *TXs, real *y, ptrdiff_t ystride, int n) {
    for (int v = 0; v < n; v++) y[v] = -AT(Xs, A_, Q_)[v];
    for (int l = 0; l < L; l++) {
        real *X = Xs + l * MAT, *T = Ts + l * MAT, *TX = TXs + l * MAT;
        const real *Ol = Om + l * DP * DP;
        for (int i = 0; i < DP; i++) /* T = I + Omega' o X */
            for (int j = 0; j < DP; j++) {
                real w = Ol[i * DP + j], *t = AT(T, i, j);
                const real *x = AT(X, i, j);
                for (int v = 0; v < W; v++) t[v] = w * x[v] + (i == j);
            }
        mm(T, X, TX);
        for (int v = 0; v < n; v++) y[(l + 1) * ystride + v] = -AT(TX, A_, Q_)[v];
        if (l < L - 1) mm_nt(TX, T, Xs + (l + 1) * MAT);
    }
}

/* The number of reals of work space gram_forward and gram_backward need for L layers: Xs, Ts, TXs
 * (L each), S, Tbar, tmp and the block's readouts. */
ptrdiff_t gram_work_size(int L) { return (ptrdiff_t)(3 * L + 3) * MAT + (L + 1) * W; }

void gram_forward(int M, int L, ptrdiff_t B, const real *X0, ptrdiff_t x0_model_stride, const real *om,
                  real *y, real *work) {
    real *Xs = work, *Ts = Xs + L * MAT, *TXs = Ts + L * MAT;
    real Om[L * DP * DP]; /* local: the compiler sees that it aliases no state */
    for (int m = 0; m < M; m++) {
        omegas(L, om + m * L * 4, Om);
        for (ptrdiff_t b0 = 0; b0 < B; b0 += W) {
            int n = B - b0 < W ? (int)(B - b0) : W;
            load(X0 + m * x0_model_stride, b0, n, Xs);
            forward_block(L, Om, Xs, Ts, TXs, y + m * (L + 1) * B + b0, B, n);
        }
    }
}

void gram_backward(int M, int L, ptrdiff_t B, const real *X0, ptrdiff_t x0_model_stride, const real *om,
                   const real *ybar, real *gom, real *work) {
    real *Xs = work, *Ts = Xs + L * MAT, *TXs = Ts + L * MAT;
    real *S = TXs + L * MAT, *Tbar = S + MAT, *tmp = Tbar + MAT, *ydump = tmp + MAT;
    real Om[L * DP * DP], G[L * DP * DP]; /* G: the sum over the lanes of Tbar o X */
    for (int m = 0; m < M; m++) {
        omegas(L, om + m * L * 4, Om);
        memset(G, 0, sizeof G);
        for (ptrdiff_t b0 = 0; b0 < B; b0 += W) {
            int n = B - b0 < W ? (int)(B - b0) : W;
            load(X0 + m * x0_model_stride, b0, n, Xs);
            forward_block(L, Om, Xs, Ts, TXs, ydump, W, n);
            real yb[L + 1][W]; /* the block's upstream gradients, zero on missing lanes */
            memset(yb, 0, sizeof yb);
            for (int l = 0; l <= L; l++)
                for (int v = 0; v < n; v++) yb[l][v] = ybar[(m * (L + 1) + l) * B + b0 + v];
            for (int l = L - 1; l >= 0; l--) {
                const real *X = Xs + l * MAT, *T = Ts + l * MAT, *TX = TXs + l * MAT;
                const real *Ol = Om + l * DP * DP;
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
                real *Gl = G + l * DP * DP;
                for (int ij = 0; ij < DP * DP; ij++) {
                    real s = 0;
                    for (int v = 0; v < W; v++) s += Tbar[ij * W + v] * X[ij * W + v];
                    Gl[ij] += s;
                }
                if (l > 0) /* S += Kbar + Kbar^T, Kbar = Omega' o Tbar */
                    for (int i = 0; i < DP; i++)
                        for (int j = 0; j < DP; j++) {
                            real wij = Ol[i * DP + j], wji = Ol[j * DP + i];
                            const real *tij = AT(Tbar, i, j), *tji = AT(Tbar, j, i);
                            real *s = AT(S, i, j);
                            for (int v = 0; v < W; v++) s[v] += wij * tij[v] + wji * tji[v];
                        }
            }
        }
        for (int l = 0; l < L; l++) { /* the block sums of G over its first DP-1 rows and columns */
            real *g = gom + (m * L + l) * 4;
            g[0] = g[1] = g[2] = g[3] = 0;
            for (int i = 0; i < Q_; i++)
                for (int j = 0; j < Q_; j++) g[(i < A_ ? 0 : 2) + (j < A_ ? 0 : 1)] += G[(l * DP + i) * DP + j];
        }
    }
}
