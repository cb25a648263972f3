"""Dealer-free threshold Paillier key generation: veil.crypto.dkg against TNO's package.

Both run every party in this one process (TNO: its own example's way, asyncio over HTTP
on localhost; veil: the sans-I/O parties under the local runner), so wall time is the sum
of all parties' work on one core. Reported per setting, as medians over ``--runs`` runs
(the run time is geometric in the number of candidates, so single runs vary a lot):
wall seconds, CPU seconds per party (veil: measured per party; TNO: process CPU / n),
megabytes sent per party, and for veil the candidate primes tried.

    python benchmarks/bench_dkg.py                               # 2048-bit, 3 and 10 parties
    python benchmarks/bench_dkg.py --bits 512 --parties 3 --runs 3 --tno-bits 512

TNO's ``tno.mpc.protocols.distributed_keygen`` needs
``tno.mpc.encryption_schemes.utils==0.15.0`` (the ``bench`` extra installs both); it is
skipped with a note when it is absent.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from veil.crypto import dkg
from veil.random import Generator


def run_veil(bits: int, parties: int, threshold: int) -> dict:
    params = dkg.KeygenParams.make(bits, parties, threshold, insecure_ok=bits < 2048)
    base = Generator()
    streams = base.spawn(parties)
    session = base.bytes(16)
    members = [dkg.KeygenParty(i + 1, params, session, rng=streams[i]) for i in range(parties)]
    results, stats = dkg.run_local(members)
    pk = results[0][0]
    c = pk.encrypt(2024)
    assert pk.combine([s.partial_decrypt(c) for _, s in results[:threshold]]) == 2024
    return {"wall": stats.wall, "cpu": statistics.mean(stats.cpu),
            "mb": statistics.mean(stats.bytes_sent) / 1e6, "candidates": stats.candidates}


def run_tno(bits: int, parties: int, corruption: int, port: int) -> dict:
    from tno.mpc.communication import Pool
    from tno.mpc.protocols.distributed_keygen import DistributedPaillier

    ports = [port + i for i in range(parties)]
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)        # TNO's pools bind to the current loop
    pools = []
    for own in ports:
        pool = Pool()
        pool.add_http_server(own)
        for other in ports:
            if other != own:
                pool.add_http_client(f"client{other}", "localhost", other)
        pools.append(pool)
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        schemes = loop.run_until_complete(asyncio.gather(*(
            DistributedPaillier.from_security_parameter(pool, corruption, bits, 2000, 40, 40,
                                                        distributed=False)
            for pool in pools)))
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        sent = [sum(h.total_bytes_sent for h in pool.pool_handlers.values()) for pool in pools]
        loop.run_until_complete(asyncio.gather(*(pool.shutdown() for pool in pools)))
    finally:
        loop.close()
    assert schemes[0].public_key.n.bit_length() >= bits - 1
    return {"wall": wall, "cpu": cpu / parties, "mb": statistics.mean(sent) / 1e6,
            "candidates": float("nan")}


def median(rows: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bits", type=int, default=2048)
    ap.add_argument("--parties", type=int, nargs="+", default=[3, 10])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--tno-bits", type=int, default=512,
                    help="TNO's key size (its 2048-bit run takes about an hour here)")
    ap.add_argument("--tno-runs", type=int, default=3, help="0: veil only")
    args = ap.parse_args()

    table = []
    for n in args.parties:
        t = n // 2 + 1
        rows = [run_veil(args.bits, n, t) for _ in range(args.runs)]
        table.append(("veil", args.bits, n, rows))
        print(f"veil {args.bits}-bit, {n} parties: " + ", ".join(
            f"{r['wall']:.1f}s" for r in rows), flush=True)
    try:
        import tno.mpc.protocols.distributed_keygen  # noqa: F401
        have_tno = args.tno_runs > 0
    except ImportError:
        have_tno = False
        print("TNO's tno.mpc.protocols.distributed_keygen is not installed: skipped "
              "(pip install -e '.[bench]')")
    if have_tno:
        n = 3
        if args.tno_bits != args.bits:
            rows = [run_veil(args.tno_bits, n, 2) for _ in range(args.runs)]
            table.append(("veil", args.tno_bits, n, rows))
        rows = [run_tno(args.tno_bits, n, 1, 43000 + 10 * k) for k in range(args.tno_runs)]
        table.append(("TNO", args.tno_bits, n, rows))
        print(f"TNO {args.tno_bits}-bit, {n} parties: " + ", ".join(
            f"{r['wall']:.1f}s" for r in rows), flush=True)

    print()
    print(f"{'impl':6} {'bits':>5} {'n':>3} {'runs':>4} {'wall s':>9} {'CPU s/party':>12} "
          f"{'MB/party':>9} {'candidates':>10}")
    for impl, bits, n, rows in table:
        print(f"{impl:6} {bits:5d} {n:3d} {len(rows):4d} {median(rows, 'wall'):9.1f} "
              f"{median(rows, 'cpu'):12.2f} {median(rows, 'mb'):9.1f} "
              f"{median(rows, 'candidates'):10.0f}")
    ours = {(b, n): median(r, "wall") for i, b, n, r in table if i == "veil"}
    for impl, bits, n, rows in table:
        if impl == "TNO" and (bits, n) in ours:
            print(f"\nmedian wall time, {bits}-bit, {n} parties: TNO / veil = "
                  f"{median(rows, 'wall') / ours[bits, n]:.1f}x")


if __name__ == "__main__":
    main()
