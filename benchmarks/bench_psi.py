"""Private set intersection: veil's ECDH-PSI (X25519) against openmined-psi (P-256).

Both protocols are DH-PSI: every identifier is hashed onto an elliptic curve and raised to
both parties' secret scalars; they differ in the curve (veil: X25519 from ``cryptography``
with RFC 9380 Elligator 2 hashing; openmined-psi: P-256 in C++) and in the encoding of the
server's set (openmined-psi: its RAW data structure here, for an exact intersection like
veil's). The receiver (openmined's client) learns the intersection; the same sets (half
overlapping) are given to both. Two settings:

* one process: both parties run in turn in this process (what openmined-psi's client and
  server do in a single script): total CPU of the protocol;
* two processes: each party in its own process (as deployed), messages through a pipe;
  timed from the moment both are ready to the receiver's result, so the parties' work
  overlaps where the protocol allows it.

    python benchmarks/bench_psi.py                 # 10,000 x 10,000 identifiers
    python benchmarks/bench_psi.py --size 2000 --repeats 1
    python benchmarks/bench_psi.py --million       # also 1M x 1M, time and bytes (minutes)
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import threading
import time


def sets(size):
    receiver = [f"user-{i:08d}@example.org" for i in range(size)]
    sender = [f"user-{i:08d}@example.org" for i in range(size // 2, size + size // 2)]
    return receiver, sender


def _send_in_background(conn, data: bytes) -> threading.Thread:
    """Both parties send at once: a blocking send could fill the pipe and deadlock."""
    thread = threading.Thread(target=conn.send_bytes, args=(data,))
    thread.start()
    return thread


# -- veil -------------------------------------------------------------------------------------
def veil_one_process(receiver, sender):
    from veil.crypto import psi

    return psi.intersect(receiver, sender)


def veil_receiver(items, conn, result, ready, go):
    from veil.crypto import psi

    party = psi.PSIReceiver(items)
    ready.set()
    go.wait()
    cpu = time.process_time()
    sending = _send_in_background(conn, party.request())
    party.receive_setup(conn.recv_bytes())
    sending.join()
    count = len(party.finish(conn.recv_bytes()))
    result.send((count, time.process_time() - cpu))


def veil_sender(items, n_receiver, conn, result, ready, go):
    from veil.crypto import psi

    party = psi.PSISender(items)
    ready.set()
    go.wait()
    cpu = time.process_time()
    conn.send_bytes(party.setup())  # sent first: the receiver works on it meanwhile
    conn.send_bytes(party.respond(conn.recv_bytes()))
    result.send((None, time.process_time() - cpu))


def veil_bytes(receiver, sender):
    """One process; (intersection size, bytes on the wire: setup + request + response)."""
    from veil.crypto import psi

    r, s = psi.PSIReceiver(receiver), psi.PSISender(sender)
    setup = s.setup()
    r.receive_setup(setup)
    request = r.request()
    response = s.respond(request)
    return len(r.finish(response)), len(setup) + len(request) + len(response)


# -- openmined-psi ------------------------------------------------------------------------------
def om_bytes(receiver, sender):
    import private_set_intersection.python as om

    client = om.client.CreateWithNewKey(True)
    server = om.server.CreateWithNewKey(True)
    setup = server.CreateSetupMessage(0.0, len(receiver), sender, om.DataStructure.RAW)
    request = client.CreateRequest(receiver)
    response = server.ProcessRequest(request)
    sizes = (len(m.SerializeToString()) for m in (setup, request, response))
    return len(client.GetIntersection(setup, response)), sum(sizes)


def om_one_process(receiver, sender):
    import private_set_intersection.python as om

    client = om.client.CreateWithNewKey(True)
    server = om.server.CreateWithNewKey(True)
    setup = server.CreateSetupMessage(0.0, len(receiver), sender, om.DataStructure.RAW)
    response = server.ProcessRequest(client.CreateRequest(receiver))
    return client.GetIntersection(setup, response)


def om_receiver(items, conn, result, ready, go):
    import private_set_intersection.python as om

    client = om.client.CreateWithNewKey(True)
    ready.set()
    go.wait()
    cpu = time.process_time()
    sending = _send_in_background(conn, client.CreateRequest(items).SerializeToString())
    setup = om.ServerSetup()
    setup.ParseFromString(conn.recv_bytes())
    sending.join()
    response = om.Response()
    response.ParseFromString(conn.recv_bytes())
    result.send((len(client.GetIntersection(setup, response)), time.process_time() - cpu))


def om_sender(items, n_receiver, conn, result, ready, go):
    import private_set_intersection.python as om

    server = om.server.CreateWithNewKey(True)
    ready.set()
    go.wait()
    cpu = time.process_time()
    conn.send_bytes(server.CreateSetupMessage(0.0, n_receiver, items,
                                              om.DataStructure.RAW).SerializeToString())
    request = om.Request()
    request.ParseFromString(conn.recv_bytes())
    conn.send_bytes(server.ProcessRequest(request).SerializeToString())
    result.send((None, time.process_time() - cpu))


def two_processes(receiver_fn, sender_fn, receiver, sender):
    """(seconds from 'go' to the receiver's result, its count, CPU seconds of each party),
    each party in its own process."""
    ctx = mp.get_context("spawn")
    r_end, s_end = ctx.Pipe()                    # the channel between the two parties
    outs = [ctx.Pipe(duplex=False) for _ in range(2)]  # each party's report, for this script
    ready, go = [ctx.Event(), ctx.Event()], ctx.Event()
    procs = [ctx.Process(target=receiver_fn, args=(receiver, r_end, outs[0][1], ready[0], go)),
             ctx.Process(target=sender_fn, args=(sender, len(receiver), s_end, outs[1][1],
                                                 ready[1], go))]
    for p in procs:
        p.start()
    for r in ready:
        r.wait(120)
    start = time.perf_counter()
    go.set()
    count, cpu_receiver = outs[0][0].recv()
    seconds = time.perf_counter() - start
    _, cpu_sender = outs[1][0].recv()
    for p in procs:
        p.join(30)
    return seconds, count, (cpu_receiver, cpu_sender)


def best_of(repeats, fn, *args):
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn(*args)
        times.append(time.perf_counter() - start)
    return min(times), result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=10_000, help="identifiers per party")
    ap.add_argument("--repeats", type=int, default=3, help="best of this many runs")
    ap.add_argument("--million", action="store_true",
                    help="also 1,000,000 x 1,000,000 once, one process (several minutes)")
    args = ap.parse_args()
    receiver, sender = sets(args.size)
    expected = len(set(receiver) & set(sender))
    veil_one_process(receiver[:10], sender[:10])  # imports and first-call set-up, untimed
    om_one_process(receiver[:10], sender[:10])
    rows = []
    t_veil, common = best_of(args.repeats, veil_one_process, receiver, sender)
    assert len(common) == expected
    t_om, common = best_of(args.repeats, om_one_process, receiver, sender)
    assert len(common) == expected
    rows.append(("one process", t_veil, t_om))
    two, cpu = {}, {}
    for name, fns in (("veil", (veil_receiver, veil_sender)), ("om", (om_receiver, om_sender))):
        runs = [two_processes(*fns, receiver, sender) for _ in range(args.repeats)]
        assert all(count == expected for _, count, _ in runs)
        two[name], _, cpu[name] = min(runs, key=lambda run: run[0])
    rows.append(("two processes", two["veil"], two["om"]))
    print(f"PSI of {args.size:,} x {args.size:,} identifiers ({expected:,} in common), "
          f"best of {args.repeats}")
    print("| setting | veil s | openmined-psi s | openmined / veil |")
    print("| --- | ---: | ---: | ---: |")
    for name, ours, theirs in rows:
        print(f"| {name} | {ours:.3f} | {theirs:.3f} | {theirs / ours:.2f}x |")
    print("two processes, CPU seconds of (receiver, sender): veil "
          f"({cpu['veil'][0]:.3f}, {cpu['veil'][1]:.3f}), openmined-psi "
          f"({cpu['om'][0]:.3f}, {cpu['om'][1]:.3f})")
    sizes = [args.size] + ([1_000_000] if args.million else [])
    print("\none process, one run each: wall s / CPU s / bytes on the wire (setup + request "
          "+ response)")
    print("| identifiers per party | veil | openmined-psi | openmined / veil (time, bytes) |")
    print("| ---: | --- | --- | --- |")
    for size in sizes:
        receiver, sender = sets(size)
        expected = len(set(receiver) & set(sender))
        runs = []
        for fn in (veil_bytes, om_bytes):
            wall, cpu0 = time.perf_counter(), time.process_time()
            count, size_bytes = fn(receiver, sender)
            assert count == expected
            runs.append((time.perf_counter() - wall, time.process_time() - cpu0, size_bytes))
        (w1, c1, b1), (w2, c2, b2) = runs
        print(f"| {size:,} | {w1:.2f} / {c1:.2f} / {b1 / 1e6:.1f} MB | {w2:.2f} / {c2:.2f} / "
              f"{b2 / 1e6:.1f} MB | {w2 / w1:.2f}x, {b2 / b1:.2f}x |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
