# Summarises a slice_row trace written by harness.cu (pure Python). usage: analyze.py PREFIX
import json, struct, sys, statistics as st
pre = sys.argv[1]
m = json.load(open(pre + '.meta'))
G, S, NE, P = m['G'], m['steps'], m['nev'], m['P']
raw = open(pre + '.trace', 'rb').read()
tr = struct.unpack('<%dI' % (len(raw) // 4), raw)
gtr = open(pre + '.gt', 'rb').read()
gt = struct.unpack('<%dQ' % (len(gtr) // 8), gtr)
NONE = 0xffffffff
def ev(b, s, e):
    if s < 0 or s >= S: return None
    v = tr[(b * S + s) * NE + e]
    return None if v == NONE else v
# clock rate per block: end clock cycles / (end gt - start gt)
rates = [gt[3 * b + 2] / max(1, gt[3 * b + 1] - gt[3 * b]) for b in range(G)]
rate = st.median(rates)  # cycles per ns
us = lambda c: c / rate / 1000.0
print(f"{pre}: {m['rows']}x{m['cols']} G={G} P={P} median {m['median_us']} us, traced {m['traced_us']} us; clock {rate:.3f} GHz (blocks {min(rates):.3f}-{max(rates):.3f})")
starts = [gt[3 * b] for b in range(G)]; ends = [gt[3 * b + 1] for b in range(G)]
t0 = min(starts)
print(f"  block start spread {(max(starts) - t0) / 1000:.2f} us; ends {(min(ends) - t0) / 1000:.2f}..{(max(ends) - t0) / 1000:.2f} us after the first start")
gts = sorted(set(starts))
print(f"  globaltimer distinct start values: {len(gts)} (resolution hint: min diff {min([b - a for a, b in zip(gts, gts[1:])] or [0])} ns)")
steps_b = [sum(1 for s in range(S) if ev(b, s, 0) is not None) for b in range(G)]
print(f"  steps per block: {min(steps_b)}..{max(steps_b)}")
names = {'period': 'loader issue period e0[s]-e0[s-1]', 'land': 'issue -> consumer0 sees full (e1-e0)',
         'reduce': 'consumer0 reduce (e2-e1)', 'statd': 'consumer0 arrive -> control sees statd (e3-e2)',
         'gwait': 'gather spin of row t (e4-e7)', 'pub2fin': 'control statd(t) -> consumer0 sees finr(t) (e5[t]-e3[t])',
         'write': 'consumer0 write (e6-e5)', 'refill': 'write done -> refill issued (e0[t+SLOTS]-e6[t])',
         'g_start_lag': 'gather start (e7[t]) - statd seen of t (e3[t])'}
SL = int(m.get('slots', 6))
def collect(lo, hi):
    d = {k: [] for k in names}
    for b in range(G):
        for s in range(lo, min(hi, steps_b[b])):
            e = [ev(b, s, i) for i in range(NE)]
            p = ev(b, s - 1, 0)
            if e[0] is not None and p is not None: d['period'].append(e[0] - p)
            if e[1] is not None and e[0] is not None: d['land'].append(e[1] - e[0])
            if e[2] is not None and e[1] is not None: d['reduce'].append(e[2] - e[1])
            if e[3] is not None and e[2] is not None: d['statd'].append(e[3] - e[2])
            if e[4] is not None and e[7] is not None: d['gwait'].append(e[4] - e[7])
            if e[5] is not None and e[3] is not None: d['pub2fin'].append(e[5] - e[3])
            if e[6] is not None and e[5] is not None: d['write'].append(e[6] - e[5])
            if e[7] is not None and e[3] is not None: d['g_start_lag'].append(e[7] - e[3])
            r = ev(b, s + SL, 0)
            if r is not None and e[6] is not None: d['refill'].append(r - e[6])
    return d
def show(title, d):
    print('  ' + title)
    for k, v in d.items():
        if v:
            v = sorted(v)
            print(f"    {names[k]:<58} median {us(v[len(v) // 2]):7.3f} us  p10 {us(v[len(v) // 10]):7.3f}  p90 {us(v[9 * len(v) // 10]):7.3f}  (n={len(v)})")
nst = min(steps_b)
show(f'steady state (steps 8..{nst - 8})', collect(8, nst - 8))
# ramp: absolute times of the first events, median over blocks
for s in range(0, 6):
    vals = [[ev(b, s, i) for b in range(G)] for i in range(NE)]
    med = [us(st.median([x for x in col if x is not None])) if any(x is not None for x in col) else float('nan') for col in vals]
    print(f"  step {s}: median event times (us from block start): " + ' '.join(f"e{i}={med[i]:.2f}" for i in range(NE)))
for s in range(nst - 3, max(steps_b)):
    vals = [[ev(b, s, i) for b in range(G)] for i in range(NE)]
    med = [us(st.median([x for x in col if x is not None])) if any(x is not None for x in col) else float('nan') for col in vals]
    print(f"  step {s}: median event times (us from block start): " + ' '.join(f"e{i}={med[i]:.2f}" for i in range(NE)))
endc = sorted(us(gt[3 * b + 2]) for b in range(G))
print(f"  block end (us from its start): median {endc[G // 2]:.2f}, max {endc[-1]:.2f}")
# cross-block: per row, the spread of its slices' publish times (global), and when its gathers finish
pub = {}
for b in range(G):
    for s in range(steps_b[b]):
        j = s * G + b
        row = j // P
        e3 = ev(b, s, 3)
        if e3 is not None:
            pub.setdefault(row, []).append(starts[b] + e3 / rate)
spread = sorted(max(v) - min(v) for v in pub.values() if len(v) == P)
if spread:
    print(f"  a row's P publications span (global ns): median {spread[len(spread) // 2]:.0f} p90 {spread[9 * len(spread) // 10]:.0f} max {spread[-1]:.0f}")
# row gather done relative to the row's last publication
lag = []
for b in range(G):
    for s in range(steps_b[b]):
        row = (s * G + b) // P
        e4 = ev(b, s, 4)
        if e4 is not None and row in pub and len(pub[row]) == P:
            lag.append(starts[b] + e4 / rate - max(pub[row]))
lag.sort()
if lag:
    print(f"  gather done - row's last publication (global ns): median {lag[len(lag) // 2]:.0f} p10 {lag[len(lag) // 10]:.0f} p90 {lag[9 * len(lag) // 10]:.0f}")
