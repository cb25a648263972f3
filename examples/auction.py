"""A sealed-bid auction by secure multi-party computation: only the winner and the price
are revealed.

Every bidder is a party of a :class:`veil.mpc.Session` and secret-shares its bid; the
parties find the highest bid and its owner with a tournament of secure comparisons and
open exactly two numbers: the winner's index and the price — the highest bid
(first-price) or the highest losing bid (second-price, Vickrey). No bidder, and not the
auctioneer, learns any other bid. Semi-honest bidders; a trusted dealer supplies the
correlated randomness (see veil.mpc.session).

Run:  .venv/bin/python examples/auction.py [--bids 120 340 95 310 200] [--price second]
      [--runtime process]
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from veil.mpc import Session
from veil.mpc.queries import sealed_bid_auction
from veil.random import check_rng


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bids", type=int, nargs="+", help="one non-negative bid per bidder "
                    "(default: 6 random bids)")
    ap.add_argument("--price", default="first", choices=["first", "second"])
    ap.add_argument("--runtime", default="local", choices=["local", "process"])
    args = ap.parse_args()
    bids = args.bids or [int(b) for b in check_rng().integers(10, 1000, size=6)]
    if len(bids) < 2 or min(bids) < 0:
        ap.error("need at least two non-negative bids")

    with Session(parties=len(bids), runtime=args.runtime) as s:
        sealed = [s.share(np.array(bid), owner=i) for i, bid in enumerate(bids)]
        with s.measure() as m:
            winner, price = sealed_bid_auction(sealed, price=args.price)
    print(f"{len(bids)} bidders, {args.price}-price sealed-bid auction ({args.runtime} runtime)")
    print(f"revealed: bidder {winner} wins and pays {price:g}")
    print(f"cost: {m.cost.rounds[0]} rounds, {max(m.cost.sent)} bytes sent by the busiest "
          f"bidder, {1000 * m.cost.seconds:.1f} ms")

    # The check below uses the bids in the clear: it is the example's test, not the protocol.
    expected = max(bids) if args.price == "first" else sorted(bids)[-2]
    ok = winner == bids.index(max(bids)) and price == expected
    print(f"check against the plaintext bids: {'correct' if ok else 'WRONG'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
