"""veil's Paillier against python-paillier (phe), same process, same keys, same inputs.

Run:  .venv/bin/python benchmarks/bench_paillier.py            (2048-bit, ~1-2 minutes)
      .venv/bin/python benchmarks/bench_paillier.py --quick    (1024-bit smoke run)

Times are CPU seconds of this process (time.process_time; everything here is
single-threaded), so other load on a shared machine disturbs them less than wall time.
Scalar rates are the median of interleaved rounds (veil, phe, veil, phe, ...).
python-paillier has no packing, pools or threshold decryption: those rows compare with
phe's scalar encryption/decryption, or (threshold) with veil's own unpacked baseline.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import phe

from veil.crypto import encoding, paillier, threshold
from veil.crypto.serialization import dumps, loads
from veil.random import check_rng


def cpu(fn, *args):
    t0 = time.process_time()
    out = fn(*args)
    return time.process_time() - t0, out


def rate(fn, count: int) -> float:
    t0 = time.process_time()
    for i in range(count):
        fn(i)
    return count / max(time.process_time() - t0, 1e-9)


def interleaved(ours, theirs, count: int, rounds: int) -> tuple[float, float]:
    a, b = [], []
    for _ in range(rounds):
        a.append(rate(ours, count))
        b.append(rate(theirs, count))
    return statistics.median(a), statistics.median(b)


class Table:
    def __init__(self) -> None:
        self.rows: list[tuple[str, str, str, str, str]] = []
        self.notes: list[str] = []

    def add(self, name: str, ours: float, theirs: float | None, unit: str,
            goal: float | None = None, higher_better: bool = True) -> None:
        if theirs:
            ratio = ours / theirs if higher_better else theirs / ours
            ratio_s = f"{ratio:,.1f}x" if ratio >= 10 else f"{ratio:.2f}x"
        else:
            ratio, ratio_s = None, "-"
        met = ""
        if goal is not None and ratio is not None:
            met = f">= {goal:g}x {'met' if ratio >= goal else 'NOT met'}"
        self.rows.append((name, f"{ours:,.1f} {unit}",
                          f"{theirs:,.1f} {unit}" if theirs else "-", ratio_s, met))

    def note(self, text: str) -> None:
        self.notes.append(text)

    def show(self) -> None:
        head = ("operation", "veil", "python-paillier", "ratio", "goal")
        widths = [max(len(r[i]) for r in [head, *self.rows]) for i in range(5)]
        line = " | ".join(h.ljust(w) for h, w in zip(head, widths))
        print(line)
        print("-" * len(line))
        for r in self.rows:
            print(" | ".join(c.ljust(w) for c, w in zip(r, widths)))
        print()
        for text in self.notes:
            print(text)


def scalar_ops(table: Table, pk, bare, sk, ppk, psk, rounds: int, reps: int) -> float:
    rng = check_rng(1)
    ms = [int(x) for x in rng.integers(-(2 ** 40), 2 ** 40, 64)]
    pk.encrypt(0)                                        # build the fixed-base table once
    enc = interleaved(lambda i: pk.encrypt(ms[i % 64]), lambda i: ppk.encrypt(ms[i % 64]),
                      reps, rounds)
    table.add("encrypt (veil key: h_s^a)", *enc, "ops/s", goal=1.0)
    bare_enc = interleaved(lambda i: bare.encrypt(ms[i % 64]),
                           lambda i: ppk.encrypt(ms[i % 64]), reps, rounds)
    table.add("encrypt (bare n: r^n, as phe)", *bare_enc, "ops/s")
    cs = [pk.encrypt(m) for m in ms]
    pcs = [ppk.encrypt(m) for m in ms]
    dec = interleaved(lambda i: sk.decrypt(cs[i % 64]), lambda i: psk.decrypt(pcs[i % 64]),
                      4 * reps, rounds)
    table.add("decrypt (CRT)", *dec, "ops/s", goal=1.0)
    add = interleaved(lambda i: cs[i % 64] + cs[(i + 1) % 64],
                      lambda i: pcs[i % 64] + pcs[(i + 1) % 64], 2000 * reps, rounds)
    table.add("add two ciphertexts", *add, "ops/s", goal=1.0)
    addp = interleaved(lambda i: cs[i % 64] + 12345, lambda i: pcs[i % 64] + 12345,
                       1000 * reps, rounds)
    table.add("add a plaintext int", *addp, "ops/s", goal=1.0)
    ks = [int(x) for x in rng.integers(-(2 ** 31), 2 ** 31, 64)]
    mul = interleaved(lambda i: cs[i % 64] * ks[i % 64], lambda i: pcs[i % 64] * ks[i % 64],
                      100 * reps, rounds)
    table.add("multiply by 32-bit int", *mul, "ops/s", goal=1.0)
    return bare_enc[1], dec[1]


def packed_ops(table: Table, pk, sk, pkd, phe_enc: float, phe_dec: float, count: int) -> None:
    pack = encoding.Packing(16, 10, key_bits=pk.bits)
    rng = check_rng(2)
    values = rng.integers(pack.low, pack.high + 1, count)
    t_enc, ct = cpu(lambda: pk.encrypt(pack.pack(values)))
    table.add(f"packed encrypt/value ({pack.slots}x16-bit)", count / t_enc, phe_enc,
              "values/s", goal=80)
    t_dec, out = cpu(lambda: pack.unpack(sk.decrypt(ct), count))
    assert np.array_equal(out, values)
    table.add("packed decrypt/value", count / t_dec, phe_dec, "values/s")
    pkd.encrypt(1)                                       # build the DJN table once
    t_djn, _ = cpu(lambda: pkd.encrypt(np.arange(200)))
    table.add("encrypt (DJN short exponent)", 200 / t_djn, phe_enc, "ops/s")
    t_djn_p, _ = cpu(lambda: pkd.encrypt(pack.pack(values)))
    table.add("packed encrypt/value (DJN)", count / t_djn_p, phe_enc, "values/s")


def pool_ops(table: Table, pk, bare, bare_sk, phe_enc: float, count: int) -> None:
    t_fill, _ = cpu(lambda: paillier.NoisePool(bare, capacity=200, private_key=bare_sk).fill())
    table.add("pool fill, key owner, bare n (CRT)", 200 / t_fill, phe_enc, "values/s")
    pool = paillier.NoisePool(pk, capacity=2 * count, rng=3)
    t_fill, _ = cpu(pool.fill)
    table.add("pool fill, veil key (h_s^a)", 2 * count / t_fill, phe_enc, "values/s")
    x = np.arange(count)
    t_online, e = cpu(lambda: pk.encrypt(x, pool=pool))
    table.add(f"pool encrypt ({count}-array)", count / t_online, phe_enc, "ops/s", goal=1000)
    scalar = rate(lambda i: pk.encrypt(i, pool=pool), count)
    table.add("pool encrypt (one int/call)", scalar, phe_enc, "ops/s")


def threshold_ops(table: Table, bits: int, parties: int, t: int, count: int,
                  subset: int) -> None:
    insecure = bits < paillier.MIN_SECURE_BITS
    t_primes, primes = cpu(lambda: threshold.generate_safe_primes(bits, insecure_ok=insecure,
                                                                   rng=4))
    table.note(f"threshold keygen: two {bits // 2}-bit safe primes {t_primes:.2f} s")
    t_key, (tpk, shares) = cpu(lambda: threshold.keygen(bits, parties, t, primes=primes,
                                                        insecure_ok=insecure, rng=5))
    table.note(f"threshold keygen: shares and verification keys for {parties} parties "
               f"{t_key:.2f} s")
    pack = encoding.Packing(16, parties, key_bits=bits)
    rng = check_rng(6)
    updates = [rng.integers(pack.low, pack.high + 1, count) for _ in range(parties)]
    t_party, total = cpu(lambda: tpk.encrypt(pack.pack(updates[0])))
    table.note(f"threshold key: one party packs and encrypts {count:,} values "
               f"({len(total)} ciphertexts, h_s^a noise) in {t_party:.2f} s")
    for u in updates[1:]:
        total = total + tpk.encrypt(pack.pack(u))
    times, partials = [], []
    for share in shares[:t]:
        dt, partial = cpu(share.partial_decrypt, total)
        times.append(dt)
        partials.append(partial)
    combiner = loads(dumps(tpk))                         # a fresh key object: cold tables
    t_cold, _ = cpu(combiner.combine, partials)
    t_comb, plain = cpu(combiner.combine, partials)
    assert np.array_equal(pack.unpack(plain, count), np.sum(updates, axis=0))
    packed_total = sum(times) + t_cold
    table.note(f"threshold {t}-of-{parties}, {count:,} packed 16-bit values "
               f"({len(total)} ciphertexts): partial decryption + proof per party: mean "
               f"{statistics.mean(times):.2f} s, max {max(times):.2f} s (goal <= 2.5 s)")
    table.note(f"threshold: verify {t} proofs + combine: first call on a freshly loaded key "
               f"{t_cold:.3f} s (builds the v^z table), then {t_comb:.3f} s (goal <= 0.5 s)")
    single = tpk.encrypt(np.asarray(np.sum(updates, axis=0)[:subset]))
    ut = []
    uparts = []
    for share in shares[:t]:
        dt, partial = cpu(share.partial_decrypt, single)
        ut.append(dt)
        uparts.append(partial)
    t_ucomb, _ = cpu(tpk.combine, uparts)
    scale = count / subset
    unpacked_total = (sum(ut) + t_ucomb) * scale
    table.note(f"threshold, one value per ciphertext ({subset} ciphertexts measured, x{scale:g}):"
               f" {statistics.mean(ut) * scale:.1f} s per party, combine "
               f"{t_ucomb * scale:.1f} s")
    table.add("threshold decrypt: packed vs unpacked, s", packed_total,
              unpacked_total, "s", goal=50, higher_better=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bits", type=int, default=2048)
    ap.add_argument("--quick", action="store_true", help="1024-bit keys, fewer repetitions")
    ap.add_argument("--values", type=int, default=10_000, help="packed/threshold vector size")
    ap.add_argument("--parties", type=int, default=10)
    ap.add_argument("--threshold", type=int, default=6)
    ap.add_argument("--subset", type=int, default=100,
                    help="ciphertexts measured for the unpacked threshold baseline")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    bits, reps = (1024, 10) if args.quick else (args.bits, 30)
    insecure = bits < paillier.MIN_SECURE_BITS
    table = Table()
    t_kg, (pk, sk) = cpu(lambda: paillier.keygen(bits, insecure_ok=insecure, rng=7))
    t_pkg, (ppk, psk) = cpu(lambda: phe.generate_paillier_keypair(n_length=bits))
    table.add("keygen, s (veil: safe primes)", t_kg, t_pkg, "s", higher_better=False)
    bare = paillier.PublicKey(pk.n)                      # the same n as a bare public key
    bare_sk = paillier.PrivateKey(sk.p, sk.q, bare)
    pk_phe = phe.PaillierPublicKey(int(pk.n))            # same modulus for both libraries
    sk_phe = phe.PaillierPrivateKey(pk_phe, int(sk.p), int(sk.q))
    phe_enc, phe_dec = scalar_ops(table, pk, bare, sk, pk_phe, sk_phe, args.rounds, reps)
    pkd, _ = paillier.keygen(bits, insecure_ok=insecure, short_exponents=True,
                             primes=(sk.p, sk.q), rng=8)
    packed_ops(table, pk, sk, pkd, phe_enc, phe_dec, args.values)
    pool_ops(table, pk, bare, bare_sk, phe_enc, 2000)
    threshold_ops(table, bits, args.parties, args.threshold, args.values, args.subset)
    print(f"veil vs python-paillier {phe.__version__}, {bits}-bit keys "
          "(CPU seconds, median of interleaved rounds)")
    table.show()


if __name__ == "__main__":
    main()
