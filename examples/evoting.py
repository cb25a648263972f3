"""Private e-voting with threshold Paillier: nobody but a quorum of trustees sees any count.

The protocol (Cramer, Gennaro & Schoenmakers' template, with Paillier as in Baudron,
Fouque, Pointcheval, Poupard & Stern, PODC 2001, and Damgard & Jurik, PKC 2001):

1. A dealer makes a threshold Paillier key: any ``--quorum`` of ``--trustees`` can decrypt.
2. Each voter packs a one-hot ballot (1 in the slot of the chosen candidate) into one
   plaintext M_k with :class:`veil.crypto.encoding.Packing` (slots wide enough for every
   voter choosing the same candidate), encrypts it as c = (1 + M_k n) r^n mod n^2 and
   attaches a non-interactive proof that c encrypts *one of* the valid ballots
   M_1..M_L: a Cramer-Damgard-Schoenmakers OR-composition (CRYPTO 1994) of L proofs that
   u_k = c (1 + n)^(-M_k) is an n-th residue, made non-interactive with Fiat-Shamir. The
   voter knows r with u_k = r^n for its own k and simulates the other L - 1 branches.
3. The bulletin board checks every proof and multiplies the valid ciphertexts: the
   product encrypts the packed vector of counts. A ballot stuffed with extra votes has
   no valid proof and is dropped.
4. ``--quorum`` trustees publish partial decryptions of the tally only, each with a proof
   of correctness; anyone combines them and unpacks the counts.

Run:  .venv/bin/python examples/evoting.py [--voters 100 --candidates 3 --bits 2048]
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time

import gmpy2
import numpy as np
from gmpy2 import mpz

from veil.crypto import encoding, threshold
from veil.crypto.paillier import EncryptedNumber, PublicKey
from veil.random import check_rng

CHALLENGE_BITS = 128


def _challenge(pk: PublicKey, c: mpz, options: list[int], commitments: list[mpz]) -> int:
    h = hashlib.sha256(b"veil.evoting.ballot" + pk.fingerprint)
    width = (pk.n2.bit_length() + 8) // 8          # room for a sign bit
    for x in [c, *options, *commitments]:
        h.update(int(x).to_bytes(width, "big", signed=True))
    return int.from_bytes(h.digest()[:CHALLENGE_BITS // 8], "big")


def _residue_targets(pk: PublicKey, c: mpz, options: list[int]) -> list[mpz]:
    """u_k = c (1 + n)^(-M_k) mod n^2: an n-th residue exactly for the encrypted M_k."""
    return [c * (1 - m * pk.n) % pk.n2 for m in options]      # (1 + n)^-M = 1 - M n


def cast_ballot(pk: PublicKey, choice: int, options: list[int],
                rng) -> tuple[EncryptedNumber, tuple[list[int], list[mpz]]]:
    """Encrypt options[choice] and prove it is one of ``options`` (OR-proof)."""
    n, n2 = pk.n, pk.n2
    r = mpz(rng.randbelow(n - 1) + 1)
    c = (1 + options[choice] * n) * gmpy2.powmod(r, n, n2) % n2
    targets = _residue_targets(pk, c, options)
    es, zs, commitments = [], [], []
    rho = mpz(rng.randbelow(n - 1) + 1)
    for k, u in enumerate(targets):
        if k == choice:
            es.append(0)
            zs.append(mpz(0))
            commitments.append(gmpy2.powmod(rho, n, n2))
        else:                                   # simulated branch: pick (e, z), solve for a
            e, z = rng.randbits(CHALLENGE_BITS), mpz(rng.randbelow(n - 1) + 1)
            es.append(e)
            zs.append(z)
            commitments.append(gmpy2.powmod(z, n, n2) * gmpy2.powmod(u, -e, n2) % n2)
    total = _challenge(pk, c, options, commitments)
    es[choice] = (total - sum(es)) % (1 << CHALLENGE_BITS)
    zs[choice] = rho * gmpy2.powmod(r, es[choice], n) % n
    return EncryptedNumber(pk, c), (es, zs)


def ballot_is_valid(pk: PublicKey, ballot: EncryptedNumber, options: list[int],
                    proof: tuple[list[int], list[mpz]]) -> bool:
    """Check the OR-proof: z_k^n = a_k u_k^(e_k) for all k and sum e_k = H(..., a_1..a_L)."""
    es, zs = proof
    if len(es) != len(options) or len(zs) != len(options):
        return False
    n, n2 = pk.n, pk.n2
    c = mpz(ballot.ciphertext)
    commitments = []
    for e, z, u in zip(es, zs, _residue_targets(pk, c, options)):
        if not (0 <= e < 1 << CHALLENGE_BITS and 0 < z < n and gmpy2.gcd(z, n) == 1):
            return False
        commitments.append(gmpy2.powmod(z, n, n2) * gmpy2.powmod(u, -e, n2) % n2)
    return sum(es) % (1 << CHALLENGE_BITS) == _challenge(pk, c, options, commitments)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--voters", type=int, default=100)
    ap.add_argument("--candidates", type=int, default=3)
    ap.add_argument("--trustees", type=int, default=5)
    ap.add_argument("--quorum", type=int, default=3)
    ap.add_argument("--bits", type=int, default=2048)
    ap.add_argument("--seed", type=int, default=2024,
                    help="seed for the simulated voters' choices only (crypto uses the OS CSPRNG)")
    args = ap.parse_args()

    t0 = time.perf_counter()
    tpk, shares = threshold.keygen(args.bits, args.trustees, args.quorum,
                                   insecure_ok=args.bits < 2048)
    print(f"dealer: {args.bits}-bit threshold key, any {args.quorum} of {args.trustees} "
          f"trustees decrypt ({time.perf_counter() - t0:.1f} s)")
    packing = encoding.Packing(value_bits=2, summands=args.voters, key_bits=tpk.bits)
    if args.candidates > packing.slots:
        sys.exit(f"--candidates must be <= {packing.slots} for this key and voter count")
    options = [int(packing.pack(np.eye(args.candidates, dtype=np.int64)[k])[0])
               for k in range(args.candidates)]

    choices = check_rng(args.seed).integers(0, args.candidates, args.voters)
    t0 = time.perf_counter()
    board = [cast_ballot(tpk, int(k), options, check_rng(None)) for k in choices]
    print(f"voters: {args.voters} encrypted ballots with validity proofs "
          f"({time.perf_counter() - t0:.1f} s)")

    # a cheater encrypts 5 votes for candidate 0 and proves it is one of a doctored list
    doctored = [5 * options[0], *options[1:]]
    board.append(cast_ballot(tpk, 0, doctored, check_rng(None)))

    t0 = time.perf_counter()
    valid = [c for c, proof in board if ballot_is_valid(tpk, c, options, proof)]
    print(f"bulletin board: {len(valid)} valid, {len(board) - len(valid)} rejected "
          f"({time.perf_counter() - t0:.1f} s)")
    tally = valid[0]
    for c in valid[1:]:
        tally = tally + c

    t0 = time.perf_counter()
    quorum = shares[-args.quorum:]
    partials = [s.partial_decrypt(tally) for s in quorum]
    counts = packing.unpack([tpk.combine(partials)], args.candidates)
    print(f"trustees {[s.index for s in quorum]}: decrypted the tally only "
          f"({time.perf_counter() - t0:.2f} s)\n")

    expected = np.bincount(choices, minlength=args.candidates)
    print("candidate  votes  (plaintext check)")
    for k in range(args.candidates):
        print(f"{k:>9}  {counts[k]:>5}  ({expected[k]})")
    if len(valid) != args.voters or not np.array_equal(counts, expected):
        print("MISMATCH: the decrypted tally differs from the votes cast")
        return 1
    print("\nthe decrypted tally matches the votes cast; the stuffed ballot was rejected")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
