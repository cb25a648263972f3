"""Yao's millionaires' problem, two ways: the 1982 public-key protocol and a modern MPC.

Alice is worth i and Bob j millions (1..10). Both want to know who is richer, and nothing
else.

1. Yao (FOCS 1982), :mod:`veil.crypto.millionaires`: Alice's RSA key pair, Bob's random x,
   the prime p and the sequence z_u (one RSA decryption per possible wealth).
2. Secret sharing, :mod:`veil.mpc`: each shares its wealth, the parties compute the
   comparison bit on shares (8 rounds, any size of number) and open only that bit.

Run:  .venv/bin/python examples/millionaires.py [--alice 7 --bob 4 --bits 2048 --all]
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time

import numpy as np

from veil.crypto import millionaires, multiplicative
from veil.mpc import Session


def yao(alice: int, bob: int, key: multiplicative.RSAPrivateKey) -> bool:
    a = millionaires.Alice(alice, key)
    b = millionaires.Bob(bob, key.public_key, insecure_ok=key.public_key.bits < 2048)
    first = b.start()
    print(f"  Bob -> Alice   m = E_a(x) - j + 1             ({len(first)} bytes)")
    reply = a.respond(first)
    width = int.from_bytes(reply[:2], "big")
    print(f"  Alice -> Bob   p ({8 * width}-bit prime) and z_1..z_10, "
          f"shifted by 1 after position i ({len(reply)} bytes)")
    verdict = b.finish(reply)
    print(f"  Bob -> Alice   the verdict                    ({len(verdict)} byte)")
    return a.learn(verdict)


def mpc(alice: int, bob: int, runtime: str) -> bool:
    with Session(parties=2, runtime=runtime) as s:
        a = s.share(np.array(alice), owner=0)
        b = s.share(np.array(bob), owner=1)
        with s.measure() as m:
            richer = bool((a >= b).reveal())
    print(f"  {m.cost.rounds[0]} rounds, {m.cost.sent[0]} + {m.cost.sent[1]} bytes between "
          f"the parties, {m.cost.dealer[0]} bytes from the dealer, "
          f"{1000 * m.cost.seconds:.1f} ms ({runtime} runtime)")
    return richer


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--alice", type=int, default=7, help="Alice's wealth, 1..10")
    ap.add_argument("--bob", type=int, default=4, help="Bob's wealth, 1..10")
    ap.add_argument("--bits", type=int, default=2048, help="Alice's RSA key size")
    ap.add_argument("--runtime", default="local", choices=["local", "process"])
    ap.add_argument("--all", action="store_true", help="check every pair (i, j) in 1..10")
    args = ap.parse_args()

    start = time.perf_counter()
    key = millionaires.keygen(args.bits, insecure_ok=args.bits < 2048)
    print(f"Alice's {args.bits}-bit RSA key pair with a prime e > n, so Bob can check that "
          f"encryption is a permutation ({time.perf_counter() - start:.2f} s)")
    print(f"\nYao 1982: Alice has {args.alice}, Bob has {args.bob}")
    start = time.perf_counter()
    verdict = yao(args.alice, args.bob, key)
    print(f"  => Alice is {'at least as rich as' if verdict else 'poorer than'} Bob "
          f"({1000 * (time.perf_counter() - start):.1f} ms)")

    print("\nSecure comparison on secret shares (veil.mpc, 2 parties, trusted dealer)")
    richer = mpc(args.alice, args.bob, args.runtime)
    print(f"  => Alice is {'at least as rich as' if richer else 'poorer than'} Bob")
    ok = verdict == richer == (args.alice >= args.bob)

    if args.all:
        pairs = list(itertools.product(range(1, 11), repeat=2))
        small = args.bits < 2048
        yao_ok = all(millionaires.compare(i, j, private_key=key, insecure_ok=small) == (i >= j)
                     for i, j in pairs)
        with Session(parties=2, runtime=args.runtime) as s:
            alice = s.share(np.array([i for i, _ in pairs]), owner=0)
            bob = s.share(np.array([j for _, j in pairs]), owner=1)
            bits = (alice >= bob).reveal()  # all 100 comparisons in one batch
        mpc_ok = bits.tolist() == [int(i >= j) for i, j in pairs]
        print(f"\nall 100 pairs: Yao {'correct' if yao_ok else 'WRONG'}, "
              f"MPC {'correct' if mpc_ok else 'WRONG'}")
        ok = ok and yao_ok and mpc_ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
