# CPU f32 model of layernorm slice_row SHIFT=2's statistics against a double two-pass.
import numpy as np
rng = np.random.default_rng(1)
f = np.float32
def run(cols, slice_elems, mean, spread, outlier=False, shift2=True):
    x = (rng.standard_normal(cols) * spread + mean).astype(np.float32)
    if outlier: x[0] = mean + 1000 * spread
    xd = x.astype(np.float64)
    tm, tv = xd.mean(), xd.var()
    P = -(-cols // slice_elems)
    L = 384
    def sums(s, k):
        d = (s - f(k)).astype(np.float32)
        s1 = np.zeros(L, np.float32); s2 = np.zeros(L, np.float32)
        for j in range(0, len(s), L):
            seg = d[j:j+L]; s1[:len(seg)] += seg; s2[:len(seg)] += seg*seg
        return f(s1.sum(dtype=np.float32)), f(s2.sum(dtype=np.float32))
    if not shift2:  # SHIFT=1: the row's median of three, sums added
        a, b, c = x[0], x[cols//2], x[cols-1]
        k = max(min(a, b), min(max(a, b), c))
        S1 = f(0); S2 = f(0)
        for i in range(P):
            q1, q2 = sums(x[i*slice_elems:(i+1)*slice_elems], k); S1 = f(S1+q1); S2 = f(S2+q2)
        md = f(S1 / f(cols)); return abs(f(k + md) - tm) / spread, abs(max(f(S2 - f(md*f(cols))*md), 0) / cols - tv) / tv
    parts = []
    for i in range(P):
        s = x[i*slice_elems:(i+1)*slice_elems]; n = len(s)
        a, b, c = s[0], s[n//2], s[n-1]
        ks = max(min(a, b), min(max(a, b), c))
        S1, S2 = sums(s, ks)
        m1 = f(S1 / f(n))
        parts.append((n, f(ks + m1), f(max(f(S2 - m1*S1), 0))))
    m0 = parts[0][1]
    d1 = f(0); d2 = f(0)
    for n, mk, M2 in parts:
        dd = f(mk - m0); nd = f(f(n) * dd); d1 = f(d1 + nd); d2 = f(d2 + f(nd*dd + M2))
    dm = f(d1 / f(cols)); mean_ = f(m0 + dm); M2 = f(max(f(d2 - dm*d1), 0))
    return abs(mean_ - tm) / spread, abs(M2 / cols - tv) / tv
for cols, se in ((131072, 8192), (262144, 4096), (32768, 8192)):
    for mean, spread in ((0, 1), (30, 0.5), (-5, 0.01)):
        e2 = run(cols, se, mean, spread); e1 = run(cols, se, mean, spread, shift2=False)
        print(f"cols {cols} slice {se} mean {mean} spread {spread}: SHIFT=2 mean err {e2[0]:.1e} spreads, var rel err {e2[1]:.1e}; SHIFT=1 {e1[0]:.1e}, {e1[1]:.1e}")
print("far outlier at column 0, 131072 x 8192: SHIFT=2 %.1e %.1e; SHIFT=1 %.1e %.1e" % (run(131072, 8192, 30, 0.5, True) + run(131072, 8192, 30, 0.5, True, False)))
