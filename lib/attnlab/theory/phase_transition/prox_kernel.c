/* The global prox of Part II's scalar channel, compiled: prox.py's _prox_batch, node by node.
 *
 * The algorithm is prox.py's, step for step: a safeguarded Newton method on the 2-D problem
 * min_h |h - u|^2 / V + l(h; h*) (eigenvalue-shifted Hessian, backtracking Armijo line search,
 * the same stopping rules), run from every starting point, the lowest objective kept, and the
 * nodes whose minimum has a Hessian that is not positive definite restarted from four kicks.
 * numpy runs each step for all nodes at once; here each node runs to the end in registers.
 * Built without floating-point contraction, so the arithmetic is numpy's, operation by operation.
 */
#include <math.h>
#include <stddef.h>

static inline double sigmoid(double z) {
    if (z >= 0) return 1.0 / (1.0 + exp(-z));
    double e = exp(z);
    return e / (1.0 + e);
}

static inline void softmax_diag(double h1, double h2, double *ab) {
    ab[0] = sigmoid(h1 * (h1 - h2));
    ab[1] = sigmoid(h2 * (h2 - h1));
}

/* The objective |h - u|^2 / V + l(h; h*) at h, given the diagonal ab of S(h). */
static inline double objective_ab(double h1, double h2, const double *ab, double u1, double u2, double V,
                                  const double *T, double s2) {
    double a = ab[0], b = ab[1];
    double d1 = a - T[0], d2 = 1 - a - T[1], d3 = 1 - b - T[2], d4 = b - T[3];
    double e1 = h1 - u1, e2 = h2 - u2;
    return (e1 * e1 + e2 * e2) / V + s2 * (d1 * d1 + d2 * d2 + d3 * d3 + d4 * d4);
}

static inline double objective(double h1, double h2, double u1, double u2, double V, const double *T,
                               double s2) {
    double ab[2];
    softmax_diag(h1, h2, ab);
    return objective_ab(h1, h2, ab, u1, u2, V, T, s2);
}

/* Gradient g[0:2] and Hessian (g[2], g[3], g[4]) = (H11, H12, H22) at h, given ab = diag S(h). */
static inline void grad_hess(double h1, double h2, const double *ab, double u1, double u2, double V,
                             const double *T, double s2, double *g) {
    double a = ab[0], b = ab[1];
    double pa = a * (1 - a), pb = b * (1 - b);
    double La = 2 * s2 * (2 * a - 1 - T[0] + T[1]);
    double Lb = 2 * s2 * (2 * b - 1 - T[3] + T[2]);
    double z11 = 2 * h1 - h2, z12 = -h1, z21 = -h2, z22 = 2 * h2 - h1;
    double ca = La * pa, cb = Lb * pb;
    double ka = 4 * s2 * (pa * pa) + La * pa * (1 - 2 * a);
    double kb = 4 * s2 * (pb * pb) + Lb * pb * (1 - 2 * b);
    g[0] = 2 * (h1 - u1) / V + ca * z11 + cb * z21;
    g[1] = 2 * (h2 - u2) / V + ca * z12 + cb * z22;
    g[2] = 2 / V + ka * (z11 * z11) + kb * (z21 * z21) + 2 * ca;
    g[3] = ka * z11 * z12 + kb * z21 * z22 - ca - cb;
    g[4] = 2 / V + ka * (z12 * z12) + kb * (z22 * z22) + 2 * cb;
}

static inline double lambda_min(const double *g) {
    double dh = g[2] - g[4];
    return 0.5 * (g[2] + g[4]) - sqrt(0.25 * (dh * dh) + g[3] * g[3]);
}

/* prox.py's _newton for one node: max_iter 60, gradient tolerance 1e-9. The diagonal of S(h) is
 * computed once per point (the accepted point of the line search is the next iterate). */
static void newton(double *h1p, double *h2p, double u1, double u2, double V, const double *T, double s2) {
    double h1 = *h1p, h2 = *h2p, g[5], ab[2], ab_t[2], floor = 0.1 / V;
    softmax_diag(h1, h2, ab);
    for (int it = 0; it < 60; it++) {
        grad_hess(h1, h2, ab, u1, u2, V, T, s2, g);
        int done = fabs(g[0]) + fabs(g[1]) < 1e-9;
        double lmin = lambda_min(g);
        double shift = lmin < floor ? floor - lmin : 0.0;
        double H11 = g[2] + shift, H12 = g[3], H22 = g[4] + shift;
        double det = H11 * H22 - H12 * H12;
        double p1 = -(H22 * g[0] - H12 * g[1]) / det;
        double p2 = -(H11 * g[1] - H12 * g[0]) / det;
        double f0 = objective_ab(h1, h2, ab, u1, u2, V, T, s2);
        double slope = g[0] * p1 + g[1] * p2;
        done = done || -slope <= 1e-13 * (fabs(f0) + 1e-300);
        double t = 0.0;
        if (!done) {
            double tt = 1.0;
            for (int ls = 0; ls < 30; ls++) {
                softmax_diag(h1 + tt * p1, h2 + tt * p2, ab_t);
                double f = objective_ab(h1 + tt * p1, h2 + tt * p2, ab_t, u1, u2, V, T, s2);
                if (f <= f0 + 1e-4 * tt * slope) {
                    t = tt;
                    break;
                }
                tt *= 0.5;
            }
        }
        double n1 = h1 + t * p1, n2 = h2 + t * p2;
        int tiny = fabs(t * p1) + fabs(t * p2) <= 1e-12 * (1 + fabs(h1) + fabs(h2));
        if (t != 0.0) {
            ab[0] = ab_t[0];
            ab[1] = ab_t[1];
        }
        h1 = n1;
        h2 = n2;
        if (done || tiny) break;
    }
    *h1p = h1;
    *h2p = h2;
}

static inline double lower(double f, double best) {
    return (isnan(f) || isnan(best)) ? NAN : (f < best ? f : best);
}

/* prox.py's _prox_batch: starts[2k], starts[2k+1] are the k-th starting point's h1, h2. */
void prox_batch(ptrdiff_t N, const double *u1, const double *u2, double V, const double *T11,
                const double *T12, const double *T21, const double *T22, double s2, int n_starts,
                const double *const *starts, double *h1, double *h2, double *f) {
    static const double kicks[4][2] = {{0.3, -0.3}, {-0.3, 0.3}, {0.3, 0.3}, {-0.3, -0.3}};
    for (ptrdiff_t i = 0; i < N; i++) {
        const double T[4] = {T11[i], T12[i], T21[i], T22[i]};
        double b1 = 0, b2 = 0, bf = 0;
        for (int k = 0; k < n_starts; k++) {
            double x1 = starts[2 * k][i], x2 = starts[2 * k + 1][i];
            newton(&x1, &x2, u1[i], u2[i], V, T, s2);
            double fx = objective(x1, x2, u1[i], u2[i], V, T, s2);
            if (k == 0 || fx < bf - 1e-14) {
                b1 = x1;
                b2 = x2;
            }
            bf = k == 0 ? fx : lower(fx, bf);
        }
        double g[5], ab[2];
        softmax_diag(b1, b2, ab);
        grad_hess(b1, b2, ab, u1[i], u2[i], V, T, s2, g);
        if (lambda_min(g) <= 1e-12) {
            for (int k = 0; k < 4; k++) {
                double x1 = b1 + kicks[k][0], x2 = b2 + kicks[k][1];
                newton(&x1, &x2, u1[i], u2[i], V, T, s2);
                double fx = objective(x1, x2, u1[i], u2[i], V, T, s2);
                if (fx < bf - 1e-14) {
                    b1 = x1;
                    b2 = x2;
                }
                bf = lower(fx, bf);
            }
        }
        h1[i] = b1;
        h2[i] = b2;
        f[i] = bf;
    }
}
