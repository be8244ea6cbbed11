#!/usr/bin/env python3
"""The tail-growth rule's cost model (docs/architecture.md#the-tail-growth-rule-and-its-cost-model).

Prints the worked example's tables: a star of N streams with Zipf-skewed
traffic, each stream settled with the rule off (f = 0: every stream at its
linger) and at the fraction f, priced at S3 list prices. Every figure is the
model's, not a measurement: see the docs for its assumptions.

    python3 scripts/tail-cost.py [--streams 100000] [--zipf 1.1] [--rate-mb 50] [--f 1]
"""
import argparse
import math

MiB = 1 << 20
GB = 1e9

p = argparse.ArgumentParser()
p.add_argument("--streams", type=int, default=100_000)
p.add_argument("--zipf", type=float, default=1.1, help="Zipf exponent s: stream k's rate is proportional to k^-s")
p.add_argument("--rate-mb", type=float, default=50, help="the star's total rate, MB/s (10^6 bytes)")
p.add_argument("--f", type=float, default=1.0, help="--denorm-tail-growth")
p.add_argument("--linger", type=float, default=300, help="--denorm-linger, seconds")
p.add_argument("--age-cap", type=float, default=86400, help="--denorm-age-cap, seconds")
p.add_argument("--cycle", type=float, default=30, help="--schedule interval, seconds")
p.add_argument("--cap-mib", type=float, default=256, help="--denorm-output-cap-mib")
a = p.parse_args()

F = 5 * MiB                     # copy floor: S3's part minimum (objstore.Limits.CopyFloor)
C = a.cap_mib * MiB             # output cap
L, A, f = a.linger, a.age_cap, a.f
M = max(L, A / 4)               # DeferMargin
H = max(L, A - M)               # HoldFor: a held-back stream is due this long after its since
MONTH = 30 * 86400
PUT, GET, STORE = 0.005 / 1000, 0.0004 / 1000, 0.023  # $ per request, $ per GB-month

# Requests of one settle (per stream; the slot reads a cycle shares among
# its streams are the same with and without the rule, and left out):
#   a sub-floor tail rewrite: 1 PUT (the whole object) + 1 GET (the tail);
#   a first object (no tail): 1 PUT;
#   a tail at or past the floor: CreateMultipartUpload, UploadPartCopy (the
#   tail), UploadPart (the new bytes and footer), CompleteMultipartUpload:
#   4 PUT-class requests, the new bytes uploaded once.
def subfloor(r, f):
    """The sub-floor phase of one output object of a stream of r bytes/s:
    from its first settle until its tail reaches the copy floor. Returns
    its settles, PUTs, tail GETs, bytes uploaded, new bytes, duration,
    the tail it ends with and the longest a record waited."""
    T = r * L  # the first object: no tail to rewrite
    settles, puts, gets, up, dur, wait = 1, 1, 0, T, L, L
    while T < F:
        interval = max(L, min(f * T / r, F / r, H)) if f > 0 else L
        T += r * interval
        settles, puts, gets, up = settles + 1, puts + 1, gets + 1, up + T
        dur += interval
        wait = max(wait, interval)
    return dict(settles=settles, puts=puts, gets=gets, up=up, new=T, dur=dur, T=T, wait=wait)


def cycle_costs(r, f):
    """One output object's life for a stream of r bytes/s, from empty to
    the cap C: settles, PUT-class and GET requests, bytes uploaded, and the
    longest a record waited (its residency bound)."""
    if r * L >= F:
        # A hot stream: every settle's chunks reach the floor; copied server
        # side, one object per cap (Create + parts + Complete).
        n = C / (r * L)
        parts = max(1, math.ceil(r * L / (16 * MiB)))
        return dict(settles=n, puts=n * (2 + parts), gets=0.0, up=0.0, wait=L)
    s = subfloor(r, f)
    # The copy phase: the tail is copied server side, at the linger.
    n = max(0.0, (C - s["T"]) / (r * L))
    return dict(settles=s["settles"] + n, puts=s["puts"] + 4 * n, gets=s["gets"], up=s["up"] + C - s["T"], wait=s["wait"])


def star(f):
    hz = sum(k ** -a.zipf for k in range(1, a.streams + 1))
    R = a.rate_mb * 1e6
    tot = dict(settles=0.0, puts=0.0, gets=0.0, up=0.0)
    wait = 0.0
    rows = []
    for k in range(1, a.streams + 1):
        r = R * k ** -a.zipf / hz
        c = cycle_costs(r, f)
        per_month = r * MONTH / C  # objects a month, in the long run
        for key in tot:
            tot[key] += c[key] * per_month
        wait = max(wait, c["wait"])
        if k in (1, 10, 100, 1000, 10_000, 100_000) and k <= a.streams:
            rows.append((k, r, c))
    # Transit: trim keeps every slot from the oldest unsettled ref on, so
    # the star's slots held are its rate times the longest wait (plus a
    # cycle).
    held = R * (wait + a.cycle)
    return tot, held, rows, R


def fmt_bytes(n):
    for unit, d in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= d:
            return f"{n / d:.3g} {unit}"
    return f"{n:.3g} B"


off, held0, rows0, R = star(0)
on, held1, rows1, _ = star(f)
new = R * MONTH

print(f"star: {a.streams:,} streams, Zipf s={a.zipf}, {a.rate_mb:g} MB/s in all; linger {L:g}s, age cap {A:g}s "
      f"(margin {M:g}s, hold {H:g}s); copy floor {F / MiB:g} MiB, output cap {C / MiB:g} MiB; f={f:g}\n")
print("per stream, the sub-floor phase of one output object (its first settle until its tail reaches the floor):")
print(f"| stream k | rate | phase f=0 | settles f=0 | f={f:g} | uploaded per new byte f=0 | f={f:g} | tail GETs f=0 | f={f:g} | longest wait f=0 | f={f:g} |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for k, r, _ in rows0:
    if r * L >= F:
        print(f"| {k:,} | {fmt_bytes(r)}/s | none: a linger's chunks reach the floor | | | | | | | | |")
        continue
    s0, s1 = subfloor(r, 0), subfloor(r, f)
    print(f"| {k:,} | {fmt_bytes(r)}/s | {s0['dur'] / 86400:.2g} d | {s0['settles']:,} | {s1['settles']:,} | {s0['up'] / s0['new']:.1f} "
          f"| {s1['up'] / s1['new']:.1f} | {s0['gets']:,} | {s1['gets']:,} | {s0['wait'] / 60:.0f} min | {s1['wait'] / 3600:.1f} h |")

print("\nthe star, a month in the long run (every stream's objects at every age):")
print(f"| | f=0 | f={f:g} |")
print("|---|---|---|")
print(f"| settles | {off['settles']:,.0f} | {on['settles']:,.0f} |")
print(f"| PUT-class requests | {off['puts']:,.0f} | {on['puts']:,.0f} |")
print(f"| GET requests (tails) | {off['gets']:,.0f} | {on['gets']:,.0f} |")
print(f"| uploaded | {fmt_bytes(off['up'])} | {fmt_bytes(on['up'])} |")
print(f"| uploaded per new byte | {off['up'] / new:.2f} | {on['up'] / new:.2f} |")
print(f"| transit slots held | {fmt_bytes(held0)} | {fmt_bytes(held1)} |")
cost = lambda t, held: (t["puts"] * PUT, t["gets"] * GET, held / GB * STORE)
c0, c1 = cost(off, held0), cost(on, held1)
print(f"| PUT $ | {c0[0]:,.0f} | {c1[0]:,.0f} |")
print(f"| GET $ | {c0[1]:,.0f} | {c1[1]:,.0f} |")
print(f"| transit storage $ | {c0[2]:,.0f} | {c1[2]:,.0f} |")
print(f"| total $ | {sum(c0):,.0f} | {sum(c1):,.0f} |")
