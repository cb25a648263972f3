"""Vertical federated learning: alignment, vertical LR, split learning, transfer learning.

Each section runs veil and its peer in this process and prints the ratio:

1. PSI alignment of two string-id columns (veil.fl.vertical.align over veil.crypto.psi):
   time and bytes, beside FATE 2.0's published 10M ids in 7m43s (per id; their
   ECDH-PSI on a cluster, not rerun here).
2. Vertical logistic regression on FATE's tables with FATE's settings (README of
   ../shared/datasets/fate: 16 epochs, batch 10,000, rmsprop, L2 0.1, lr 0.15): AUC and
   accuracy of both protocols against scikit-learn's LogisticRegression on the same
   aligned rows; the Paillier protocol on default-credit behind --credit-paillier (with a
   512-bit key, labelled: accuracy does not depend on the key size, time does).
3. Time and bytes per epoch of both protocols at 2 and 3 parties (2048-bit keys).
4. --anchor: FATE 2.0's benchmark shape (guest 100k x 30 with labels, host 100k x 300;
   synthetic standardized features, labels of a noisy linear model): one full epoch of
   the Paillier protocol with guest, host and arbiter each in its own OS process (pipes
   carry the protocol's bytes messages), FATE's 2048-bit key and full batch, beside
   FATE's 2m16s Coordinated-LR per epoch (two 16-core hosts, 1 GbE); and one epoch of the
   secret-shared protocol beside FATE's SSHE-LR 4m54s. --anchor-rows for a smaller run,
   --anchor-profile prints each party's cProfile.
5. Split learning on Adult (columns split among 3 parties) against a centralized MLP of
   the same layers; accuracy against the label-DP epsilon.
6. Transfer: Adult split by sex (source: men; targets: women, 3 parties with 100 labeled
   rows each, 2,000 unlabeled public rows): target accuracy with and without the source.

7. --only taylor: Paillier LR's loss approximations on default credit, in the clear
   (the protocol's weights equal this schedule's, tests/fl/vertical/test_linear.py): the
   second-order Taylor residual against third-order ones (Taylor at 0, least-squares
   cubics of the sigmoid), on raw and on per-party winsorized features, with FATE's
   schedule and with full-batch gradient descent; AUC beside scikit-learn's. --only links:
   the protocol's time and bytes per epoch with each link (2048-bit key).
8. --only sftl: secure federated transfer learning (Liu et al. 2018), HE and secret-sharing
   variants side by side (dealer and Paillier triples, one layer and an MLP): seconds and
   bytes per iteration of 500 overlapping people, beside their 35 s (HE) and the 0.8 s of
   Sharma et al. 2019 (SS); the target's accuracy and AUC on its own people.
9. --only dp: the secret-shared LR with noisy gradients on default credit: AUC against
   epsilon (every party's ledger charged).

    python benchmarks/bench_vertical.py                  # sections 1-3, 5, 6 (small)
    python benchmarks/bench_vertical.py --anchor --psi 1000000 --credit-paillier
"""

from __future__ import annotations

import argparse
import math
import sys
import time

import numpy as np


def _table(title, header, rows):
    print(f"\n## {title}")
    print(" | ".join(header))
    for row in rows:
        print(" | ".join(f"{v:.4g}" if isinstance(v, float) else str(v) for v in row))


# -- 1. PSI ----------------------------------------------------------------------------
def bench_psi(size):
    from veil.fl.vertical import align

    guest = [f"customer-{i:09d}" for i in range(size)]
    host = [f"customer-{i:09d}" for i in range(size // 2, size + size // 2)]
    start = time.perf_counter()
    out = align(guest, {"host": host})
    seconds = time.perf_counter() - start
    fate_per_id = (7 * 60 + 43) / 10_000_000
    _table(f"PSI alignment {size:,} x {size:,} string ids (one process, both parties)",
           ["aligned", "seconds", "MB exchanged", "FATE 2.0 s/id x size", "ratio"],
           [[out.size, seconds, out.bytes["host"] / 1e6, fate_per_id * size,
             seconds / (fate_per_id * size)]])


# -- 2. accuracy against scikit-learn on FATE's tables -----------------------------------
def fate_blocks(name):
    from veil.fl.vertical import align
    from veil.fl.vertical.data import load_fate

    guest, host = load_fate(name)
    out = align(guest, {"host": host}, column="id")
    g, h = out.take("guest", guest), out.take("host", host)
    return [g.drop(columns=["id", "y"]).to_numpy(float), h.drop(columns=["id"]).to_numpy(
        float)], g["y"].to_numpy()


def bench_accuracy(credit_paillier):
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score

    from veil.fl.vertical import VerticalLogisticRegression

    fate = {"epochs": 16, "batch_size": 10_000, "learning_rate": 0.15, "alpha": 0.1,
            "optimizer": "rmsprop"}
    rows = []
    for name in ("breast", "default_credit"):
        blocks, y = fate_blocks(name)
        joined = np.hstack(blocks)
        ref = LogisticRegression(max_iter=2000).fit(joined, y)
        auc_ref = roc_auc_score(y, ref.decision_function(joined))
        acc_ref = ref.score(joined, y)
        runs = [("ss", "sgd", {}), ("paillier", "rmsprop", {})]
        if name == "default_credit" and not credit_paillier:
            runs = runs[:1]
        for protocol, optimizer, extra in runs:
            key = {} if name == "breast" else {"key_bits": 512, "insecure_ok": True}
            settings = {**fate, "optimizer": optimizer, **extra, **key}
            if protocol == "ss":       # plain GD on shares: FATE's lr/steps, no rmsprop
                settings["epochs"] = 16
            start = time.perf_counter()
            model = VerticalLogisticRegression(protocol, random_state=0, **settings)
            model.fit(blocks, y)
            seconds = time.perf_counter() - start
            auc = roc_auc_score(y, model.decision_function(blocks))
            label = protocol + (" (512-bit key)" if key and protocol == "paillier" else "")
            rows.append([name, label, f"FATE's, {optimizer}", auc, auc_ref, auc - auc_ref,
                         model.score(blocks, y), acc_ref, seconds])
        # scikit-learn's own objective (L2 1/(C n), C = 1) by full-batch gradient descent
        n = y.size
        tuned = {"ss": {"epochs": 300, "learning_rate": 1.0},
                 "paillier": {"epochs": 100, "learning_rate": 0.2, "key_bits": 512,
                              "insecure_ok": True}}
        for protocol, extra in tuned.items():
            if protocol == "paillier" and name == "default_credit" and not credit_paillier:
                continue
            start = time.perf_counter()
            model = VerticalLogisticRegression(protocol, batch_size=n, alpha=1.0 / n,
                                               random_state=0, **extra).fit(blocks, y)
            seconds = time.perf_counter() - start
            auc = roc_auc_score(y, model.decision_function(blocks))
            label = protocol + (" (512-bit key)" if protocol == "paillier" else "")
            rows.append([name, label, f"full batch x {extra['epochs']}, sklearn's L2", auc,
                         auc_ref, auc - auc_ref, model.score(blocks, y), acc_ref, seconds])
    _table("Vertical LR on FATE's tables vs scikit-learn LogisticRegression (C=1), same "
           "aligned rows", ["table", "protocol", "schedule", "AUC", "sklearn AUC", "diff",
                            "accuracy", "sklearn acc", "seconds"], rows)


# -- 3. time and bytes per epoch --------------------------------------------------------
def bench_epochs(rows, epochs):
    from veil.fl.vertical import VerticalLogisticRegression

    rng = np.random.default_rng(0)
    out = []
    for parties, widths in ((2, [10, 20]), (3, [10, 20, 20])):
        X = rng.normal(size=(rows, sum(widths)))
        y = (X @ rng.normal(size=X.shape[1]) > 0).astype(int)
        blocks = np.split(X, np.cumsum(widths)[:-1], axis=1)
        for protocol, decryption in (("paillier", "arbiter"), ("paillier", "threshold"),
                                     ("ss", "arbiter")):
            model = VerticalLogisticRegression(protocol, epochs=epochs, batch_size=256,
                                               learning_rate=0.15, decryption=decryption,
                                               random_state=0)
            model.fit(blocks, y)
            sec = float(np.mean(model.stats_.seconds))
            mb = sum(model.stats_.bytes[0].values()) / 1e6
            name = f"paillier, {decryption}" if protocol == "paillier" else protocol
            out.append([parties, name, f"{rows} x {widths}", sec, mb])
    _table(f"Time and bytes per epoch ({rows} rows, batch 256, 2048-bit Paillier key)",
           ["parties", "protocol", "shape", "s / epoch", "MB / epoch"], out)


# -- 4. FATE's anchor shape ----------------------------------------------------------------
# FATE 2.0's Coordinated-LR: the arbiter makes a 2048-bit key (python/fate/ml/glm/hetero/
# coordinated_lr/arbiter.py, ``ctx.cipher.phe.keygen(options=dict(key_length=2048))``,
# FederatedAI/FATE commit 23d821de) and batch_size defaults to None, "full batch"
# (python/fate/components/components/coordinated_lr.py).
FATE_COORDINATED_LR_S = 2 * 60 + 16
FATE_SSHE_LR_S = 4 * 60 + 54


def _anchor_data(rows):
    """Synthetic standardized features (guest 30, host 300) and labels of a linear model."""
    rng = np.random.default_rng(1)
    Xg, Xh = rng.standard_normal((rows, 30)), rng.standard_normal((rows, 300))
    w = rng.standard_normal(330) / np.sqrt(330)
    y = (np.hstack([Xg, Xh]) @ w + rng.logistic(size=rows) * 0.5 > 0).astype(int)
    return Xg, Xh, y


class _Link:
    """One end of a pipe that counts the bytes this party sends."""

    def __init__(self, conn):
        self.conn, self.sent = conn, 0

    def send(self, data):
        self.conn.send_bytes(data)
        self.sent += len(data)

    def recv(self):
        return self.conn.recv_bytes()


def _cpu():
    import resource

    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _anchor_party(role, conns, setup, report, profile):
    """One party in its own process: set up, wait for the start, run the plan, report."""
    import cProfile
    import io
    import pstats

    from veil.fl.vertical import Arbiter, PaillierGuest, PaillierHost, Plan

    links = {k: _Link(c) for k, c in conns.items()}
    plan = Plan(**setup["plan"])
    if role == "arbiter":
        arbiter = Arbiter(setup["sizes"], key_bits=setup["key_bits"],
                          short_exponents=setup["short"])
    elif role == "guest":
        party = PaillierGuest(setup["X"], setup["y"], ["host"], plan, rng=0)
    else:
        party = PaillierHost("host", setup["X"], plan, workers=setup["workers"], rng=1)
    report.send(("ready", role))
    report.recv()                                       # the common start
    prof = cProfile.Profile() if profile else None
    if prof:
        prof.enable()
    cpu, start = _cpu(), time.perf_counter()
    if role == "arbiter":
        from multiprocessing.connection import wait

        key = arbiter.key_message()
        for link in links.values():
            link.send(key)
        open_ = {links[k].conn: links[k] for k in links}
        while open_:
            for conn in wait(list(open_)):
                message = open_[conn].recv()
                if not message:
                    del open_[conn]
                    continue
                open_[conn].send(arbiter.decrypt(message))
    elif role == "guest":
        host, arb = links["host"], links["arbiter"]
        party.receive_key(arb.recv())
        # the residuals' noise, computed while the guest waits for the host's scores; the
        # pool stops once this plan's noise is drawn
        pool = party.noise_pool(setup["X"].shape[0] * plan.epochs).start()
        while (batch := party.next_batch()) is not None:
            host.send(batch)
            residual = party.residual({"host": host.recv()})
            if party._order == [] and party._step[0] == plan.epochs - 1:
                pool.stop()
            host.send(residual)
            arb.send(party.gradient())
            party.update(arb.recv())
        pool.stop()
        host.send(b"")
        arb.send(b"")
    else:
        guest, arb = links["guest"], links["arbiter"]
        party.receive_key(arb.recv())
        while batch := guest.recv():
            guest.send(party.forward(batch))
            arb.send(party.backward(guest.recv()))
            party.update(arb.recv())
        arb.send(b"")
    wall, cpu = time.perf_counter() - start, _cpu() - cpu
    top = ""
    if prof:
        prof.disable()
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(8)
        top = out.getvalue()
    coef = None if role == "arbiter" else party.coef_
    report.send(("done", role, wall, cpu, sum(x.sent for x in links.values()), coef, top))


def run_anchor_epoch(rows, *, key_bits=2048, short=False, batch_size=None, workers=2,
                     profile=False):
    """One epoch of the Paillier protocol, guest, host and arbiter each in its own process
    (forked; multiprocessing pipes carry the protocol's bytes messages). Returns the wall
    seconds (the start barrier to the last party's end), per-party CPU seconds and bytes
    sent, and the weights."""
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    Xg, Xh, y = _anchor_data(rows)
    plan = {"task": "logistic", "epochs": 1, "batch_size": batch_size or rows,
            "learning_rate": 0.15}
    gh, hg = ctx.Pipe()
    ga, ag = ctx.Pipe()
    ha, ah = ctx.Pipe()
    setups = {"guest": ({"host": gh, "arbiter": ga}, {"X": Xg, "y": y, "plan": plan}),
              "host": ({"guest": hg, "arbiter": ha}, {"X": Xh, "plan": plan,
                                                      "workers": workers}),
              "arbiter": ({"guest": ag, "host": ah},
                          {"plan": plan, "key_bits": key_bits, "short": short,
                           "sizes": {"guest": Xg.shape[1] + 1, "host": Xh.shape[1]}})}
    reports, procs = {}, []
    for role, (conns, setup) in setups.items():
        mine, theirs = ctx.Pipe()
        reports[role] = mine
        procs.append(ctx.Process(target=_anchor_party, args=(role, conns, setup, theirs,
                                                             profile)))
        procs[-1].start()
    for conn in reports.values():
        assert conn.recv()[0] == "ready"
    for conn in reports.values():
        conn.send("start")
    done = {}
    for role, conn in reports.items():
        _, _, wall, cpu, sent, coef, top = conn.recv()
        done[role] = {"wall": wall, "cpu": cpu, "sent": sent, "coef": coef, "profile": top}
    for p in procs:
        p.join()
    return done


def bench_anchor(rows, profile=False, noises=("short", "full")):
    import os

    fate = FATE_COORDINATED_LR_S
    out = []
    for noise in noises:
        done = run_anchor_epoch(rows, short=noise == "short", profile=profile)
        wall = max(d["wall"] for d in done.values())
        mb = sum(d["sent"] for d in done.values()) / 1e6
        out.append(["2048 (FATE's default), " + ("DJN short exponents" if noise == "short"
                                                 else "full-length noise"),
                    wall, done["guest"]["cpu"], done["host"]["cpu"], done["arbiter"]["cpu"],
                    mb, float(fate), wall / fate])
        print(f"# {out[-1]} (load {os.getloadavg()[0]:.2f})", flush=True)
        if profile:
            for role in ("guest", "host"):
                print(f"\n### cProfile, {role}, {noise}\n{done[role]['profile']}", flush=True)
    _table(f"FATE 2.0 anchor: guest {rows:,} x 30 + labels, host {rows:,} x 300, one epoch, "
           f"full batch, 3 processes on {os.cpu_count()} cores (load {os.getloadavg()[0]:.2f})",
           ["key bits, noise", "wall s / epoch", "guest CPU s", "host CPU s",
            "arbiter CPU s", "MB / epoch", "FATE Coordinated-LR s", "ratio veil / FATE"],
           out)


def bench_anchor_ss(rows):
    """One epoch (one full-batch step, FATE's default batch) of the secret-shared protocol
    at the anchor shape, each party in its own process (veil.mpc's process runtime, dealer
    triples: the dealer-free Paillier source makes multiplication triples only, and the
    logistic model's sigmoid needs comparisons)."""
    import os

    from veil.fl.vertical.linear import train_ss

    Xg, Xh, y = _anchor_data(rows)
    start = time.perf_counter()
    _, _, stats = train_ss([Xg, Xh], y, "logistic", steps=1, epochs=1, learning_rate=0.15,
                           alpha=0.0, fit_intercept=True,
                           session_options={"runtime": "process", "timeout": 3600.0})
    wall = time.perf_counter() - start
    _table(f"FATE 2.0 anchor, secret-shared LR: {rows:,} rows, one full-batch epoch, 2 party "
           f"processes, dealer triples (load {os.getloadavg()[0]:.2f})",
           ["wall s (session)", "s / epoch (measured)", "MB / epoch", "FATE SSHE-LR s",
            "ratio veil / FATE"],
           [[wall, stats.seconds[0], sum(stats.bytes[0].values()) / 1e6,
             float(FATE_SSHE_LR_S), stats.seconds[0] / FATE_SSHE_LR_S]])


# -- 5. split learning -------------------------------------------------------------------
def adult_blocks():
    from veil.datasets import encode_adult, load_adult

    df = load_adult("train")
    ds = encode_adult(df)
    return df, ds.X, ds.y.astype(np.int64)


def _central_mlp(Xa, ya, Xb, yb, epochs, hidden, lr, batch):
    import torch

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(Xa.shape[1], hidden), torch.nn.ReLU(),
                              torch.nn.Linear(hidden, 2))
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    A, B = torch.tensor(Xa, dtype=torch.float32), torch.tensor(Xb, dtype=torch.float32)
    t = torch.as_tensor(ya)
    gen = np.random.default_rng(0)
    for _ in range(epochs):
        order = gen.permutation(len(ya))
        for i in range(0, len(ya), batch):
            rows = torch.as_tensor(order[i:i + batch])
            opt.zero_grad()
            torch.nn.functional.cross_entropy(net(A[rows]), t[rows]).backward()
            opt.step()
    with torch.no_grad():
        return float((net(B).argmax(1).numpy() == yb).mean())


def bench_split(epochs):
    import torch

    from veil.dp import Ledger
    from veil.fl.vertical.split import SplitNN

    torch.set_num_threads(1)
    _, X, y = adult_blocks()
    order = np.random.default_rng(0).permutation(len(y))
    cut = int(0.8 * len(y))
    tr, te = order[:cut], order[cut:]
    parts = np.array_split(np.arange(X.shape[1]), 3)
    blocks = lambda rows: [X[rows][:, p] for p in parts]  # noqa: E731
    settings = {"epochs": epochs, "batch_size": 256, "learning_rate": 1e-3, "hidden": 64,
                "embedding": 16}
    start = time.perf_counter()
    model = SplitNN(classes=2, random_state=0, **settings).fit(blocks(tr), y[tr])
    seconds = time.perf_counter() - start
    acc = model.score(blocks(te), y[te])
    central = _central_mlp(X[tr], y[tr], X[te], y[te], epochs, 64, 1e-3, 256)
    _table(f"Split learning on Adult (3 parties, {X.shape[1]} features, {epochs} epochs) vs "
           "a centralized MLP", ["split acc", "central MLP acc", "diff (points)", "seconds",
                                  "MB sent"],
           [[acc, central, 100 * (acc - central), seconds, sum(model.bytes_.values()) / 1e6]])
    rows = []
    for eps in (0.5, 1.0, 2.0, 4.0):
        for prior in (False, True):
            ledger = Ledger(epsilon=eps, delta=1e-5)
            m = SplitNN(classes=2, label_epsilon=eps, label_prior=prior, ledger=ledger,
                        random_state=0, **settings).fit(blocks(tr), y[tr])
            rows.append([eps, "RRWithPrior (2 stages)" if prior else "RR",
                         m.score(blocks(te), y[te]), ledger.spent()[0]])
    _table("Split learning with label DP (Adult, test accuracy)",
           ["epsilon", "mechanism", "accuracy", "ledger epsilon"], rows)


# -- 6. transfer ---------------------------------------------------------------------------
def bench_transfer(rounds):
    import torch

    from veil.dp import Ledger
    from veil.fl.strategies import FedAvg
    from veil.fl.vertical.transfer import SourceParty, transfer_learn

    torch.set_num_threads(1)
    df, X, y = adult_blocks()
    male = (df["sex"].str.strip() == "Male").to_numpy()
    Xs, ys, Xt, yt = X[male], y[male], X[~male], y[~male]
    order = np.random.default_rng(0).permutation(len(yt))
    Xt, yt = Xt[order], yt[order]
    test, public = (Xt[:3000], yt[:3000]), Xt[3000:5000]
    clients = [(Xt[5000 + 100 * i:5100 + 100 * i], yt[5000 + 100 * i:5100 + 100 * i])
               for i in range(3)]

    def mlp(d, k):
        return torch.nn.Sequential(torch.nn.Linear(d, 32), torch.nn.ReLU(),
                                   torch.nn.Linear(32, k))

    strategy = FedAvg(local_epochs=1, learning_rate=0.05, batch_size=32)
    torch.manual_seed(0)
    source = SourceParty(Xs, ys, mlp, classes=2, epochs=5, rng=1)
    torch.manual_seed(1)
    student = mlp(X.shape[1], 2)
    base, _ = transfer_learn(None, None, clients, student, strategy, rounds, test=test, rng=2)
    moved, _ = transfer_learn(source, public, clients, student, strategy, rounds, test=test,
                              rng=2)
    rows = [["none (targets only)", base.rounds[-1]["accuracy"], "-"],
            ["source model, soft labels", moved.rounds[-1]["accuracy"], "no claim"]]
    queries = 500
    for eps in (2.0, 8.0):
        ledger = Ledger(epsilon=eps, delta=1e-5)
        sigma = _pate_sigma(eps, queries)
        torch.manual_seed(0)
        pate = SourceParty(Xs, ys, mlp, classes=2, teachers=100, epochs=5, noise_multiplier=sigma,
                           ledger=ledger, max_queries=queries, rng=3)
        run, _ = transfer_learn(pate, public[:queries], clients, student, strategy, rounds,
                                test=test, rng=2)
        rows.append([f"PATE 100 teachers, {queries} queries, sigma {sigma:.3g}",
                     run.rounds[-1]["accuracy"], f"{ledger.spent()[0]:.3g}"])
    majority = max(np.mean(test[1]), 1 - np.mean(test[1]))
    _table(f"Transfer on Adult split by sex (women: 3 targets x 100 labels; majority "
           f"{majority:.3f}), {rounds} FedAvg rounds", ["start", "target accuracy",
                                                         "source epsilon"], rows)


def _pate_sigma(epsilon, queries, delta=1e-5):
    """The smallest noise multiplier (to 2%) whose data-independent charge fits."""
    from dp_accounting import dp_event as de

    from veil.dp import Ledger

    sigma = 1.0
    while not Ledger(epsilon=epsilon, delta=delta).fits(
            de.SelfComposedDpEvent(de.GaussianDpEvent(sigma / math.sqrt(2)), queries)):
        sigma *= 1.02
    return sigma


# -- 7. loss approximations of the Paillier protocol ------------------------------------
def bench_taylor():
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score

    from veil.fl.vertical.optim import Optimizer

    blocks, y = fate_blocks("default_credit")
    raw = np.hstack(blocks)
    n = y.size
    z0 = math.log(y.mean() / (1 - y.mean()))

    def sigmoid(z):
        return 1 / (1 + np.exp(-z))

    def cubic_fit(half):          # least-squares odd cubic of the sigmoid on [-half, half]
        t = np.linspace(-half, half, 4001)
        a1, a3 = np.linalg.lstsq(np.column_stack([t, t ** 3]), sigmoid(t) - 0.5,
                                 rcond=None)[0]
        return lambda z: 0.5 + a1 * z + a3 * z ** 3

    links = {"exact sigmoid (reference)": sigmoid,
             "2nd-order Taylor at 0 (the protocol)": lambda z: 0.5 + z / 4,
             "2nd-order Taylor at logit(mean y)": lambda z: sigmoid(z0) + sigmoid(z0) * (
                 1 - sigmoid(z0)) * (z - z0),
             "3rd-order Taylor at 0": lambda z: 0.5 + z / 4 - z ** 3 / 48,
             "LS cubic on [-4, 4]": cubic_fit(4), "LS cubic on [-6, 6]": cubic_fit(6)}
    schedules = {"FATE's (rmsprop, 16 ep, batch 10k, L2 0.1, lr 0.15)":
                 ("rmsprop", 0.15, 0.1, 16, 10_000),
                 "full-batch GD x 600, lr 0.3, sklearn's L2": ("sgd", 0.3, 1 / n, 600, n)}
    rows = []
    for cap in (None, 3.0, 2.0):
        X = raw if cap is None else np.clip(raw, -cap, cap)   # each party winsorizes its own
        ref = roc_auc_score(y, LogisticRegression(max_iter=2000).fit(X, y).decision_function(X))
        Xi = np.hstack([X, np.ones((n, 1))])
        for sched, (opt_name, lr, alpha, epochs, batch) in schedules.items():
            for name, link in links.items():
                w = np.zeros(Xi.shape[1])
                opt = Optimizer(opt_name, lr, w.size)
                penalty = np.r_[np.ones(X.shape[1]), 0.0]
                order = np.random.default_rng(0)
                with np.errstate(all="ignore"):
                    for _ in range(epochs):
                        perm = order.permutation(n)
                        for i in range(0, n, batch):
                            r = perm[i:i + batch]
                            g = Xi[r].T @ (link(Xi[r] @ w) - y[r]) / r.size + alpha * w * penalty
                            w = opt.step(w, g)
                score = Xi @ w
                label = "raw" if cap is None else f"clipped to +-{cap:g}"
                if not np.all(np.isfinite(score)) or np.abs(score).max() > 1e3:
                    rows.append([label, sched, name, "diverged", ref, "-"])
                    continue
                auc = roc_auc_score(y, score)
                rows.append([label, sched, name, auc, ref, auc - ref])
    _table("Default credit: loss approximations of vertical LR (plaintext twin of the "
           "Paillier protocol) vs scikit-learn on the same features",
           ["features", "schedule", "link", "AUC", "sklearn AUC", "diff"], rows)


def bench_links():
    """The protocol's cost of each link: one epoch on 1,000 aligned rows, 2048-bit key."""
    from veil.fl.vertical import VerticalLogisticRegression

    blocks, y = fate_blocks("default_credit")
    part = [np.clip(b[:1000], -2, 2) for b in blocks]
    cost = []
    for link in ("taylor2", "cubic"):
        model = VerticalLogisticRegression("paillier", epochs=1, batch_size=1000, link=link,
                                           learning_rate=0.3, random_state=0).fit(part, y[:1000])
        cost.append([link, model.stats_.seconds[0], sum(model.stats_.bytes[0].values()) / 1e6])
    _table("Paillier protocol, 1 epoch of 1,000 default-credit rows (13 + 10 features, one "
           "batch, 2048-bit key)", ["link", "s / epoch", "MB / epoch"], cost)


# -- 8. secure federated transfer learning ----------------------------------------------
def bench_sftl(iterations, key_bits):
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score

    from veil.fl.vertical.secure_ftl import (
        FTLSource,
        FTLTarget,
        predict_secure_ftl,
        train_secure_ftl,
    )
    from veil.fl.vertical.secure_ftl_ss import (
        SSFTLSource,
        SSFTLTarget,
        predict_ss_ftl,
        train_ss_ftl,
    )

    _, X, y = adult_blocks()
    order = np.random.default_rng(0).permutation(len(y))
    X, y = X[order], y[order]
    # A: 6,000 people, columns 50-103 (relationship, race, sex, country), labels; B: 6,000
    # people, columns 0-49 (numbers, workclass, education, marital status), no labels; 2,000
    # in both (A's rows 4,000-5,999 are B's rows 0-1,999); B's own 4,000 for testing
    XA, yA, XB, y_own = X[:6000, 50:], y[:6000], X[4000:10000, :50], y[6000:10000]
    ov_a, ov_b = np.arange(4000, 6000), np.arange(2000)
    kw = {"dim": 8, "learning_rate": 1.0, "gamma": 0.1}
    runs = []   # (protocol, setting, batch, iterations, published s, train -> stats, scores)
    for bits in key_bits:
        def he(bits=bits):
            keys = {"key_bits": bits, "insecure_ok": True}
            source = FTLSource(XA, yA, ov_a, peer_features=XB.shape[1], rng=0, **kw, **keys)
            target = FTLTarget(XB, ov_b, peer_features=XA.shape[1], rng=1, **kw, **keys)
            stats = train_secure_ftl(source, target, iterations, batch_size=500, rng=2)
            return stats, predict_secure_ftl(source, target, XB[2000:])
        runs.append(("HE (Paillier)", f"{bits}-bit keys, one layer", 500, iterations, 35.0, he))
    # Paillier triples cost ~1 s of 1024-bit Paillier per 1,000 shared products: one
    # iteration of a batch of 50 (timing only; its scores are not trained)
    settings = [("dealer", (), 2048, 500, iterations), ("dealer", (16,), 2048, 500, iterations),
                ("paillier", (), min(key_bits), 50, 1)]
    for correlation, layers, bits, batch, steps in settings:
        def ss(correlation=correlation, layers=layers, bits=bits, batch=batch, steps=steps):
            session = {"correlation": correlation, "paillier_bits": bits, "insecure_ok": True}
            source = SSFTLSource(XA, yA, ov_a, layers=layers, rng=0, **kw)
            target = SSFTLTarget(XB, ov_b, layers=layers, rng=1, **kw)
            stats = train_ss_ftl(source, target, steps, batch_size=batch, rng=2, **session)
            return stats, None if correlation == "paillier" else \
                predict_ss_ftl(source, target, XB[2000:], **session)
        triples = "dealer triples" if correlation == "dealer" else f"Paillier {bits}-bit triples"
        shape = f"MLP {list(layers)}" if layers else "one layer"
        runs.append(("SS (Beaver)", f"{triples}, {shape}", batch, steps, 0.8, ss))
    rows = []
    for protocol, setting, batch, steps, theirs, train in runs:
        stats, scores = train()
        per = float(np.median(stats.seconds))
        mb = sum(stats.bytes[0].values()) / 1e6
        quality = ["-", "-"] if scores is None else \
            [np.mean((scores > 0) == (y_own == 1)), roc_auc_score(y_own, scores)]
        rows.append([protocol, setting, batch, steps, per, mb, *quality, theirs, per / theirs])
    clear = LogisticRegression(max_iter=1000).fit(XB[:2000], yA[4000:6000])
    clear_acc = clear.score(XB[2000:], y_own)
    clear_auc = roc_auc_score(y_own, clear.decision_function(XB[2000:]))
    majority = max(y_own.mean(), 1 - y_own.mean())
    _table(f"Secure FTL on Adult (A: 54 columns + labels, B: 50 columns, 2,000 shared people, "
           f"dim 8); B's own people: majority {majority:.3f}, LR on B's columns "
           f"with the shared labels in the clear: accuracy {clear_acc:.3f}, AUC {clear_auc:.3f}."
           " Liu et al.: 35 s (HE, 1812.03337); Sharma et al.: 0.8 s (SS, semi-honest, "
           "1910.13271)",
           ["protocol", "setting", "batch", "iterations", "s / iteration (median)",
            "MB / iteration (with dealer)", "B accuracy", "B AUC", "published s / iteration",
            "ratio"], rows)


# -- 9. noisy-gradient SS-LR ----------------------------------------------------------
def bench_dp():
    from sklearn.metrics import roc_auc_score

    from veil.dp import Ledger
    from veil.fl.vertical import VerticalLogisticRegression

    blocks, y = fate_blocks("default_credit")
    n = y.size
    rows = []
    for eps in (None, 0.5, 1.0, 4.0, 16.0):
        ledgers = None if eps is None else [Ledger(eps, 1e-5, accountant="rdp")
                                            for _ in blocks]
        start = time.perf_counter()
        model = VerticalLogisticRegression("ss", epochs=50, batch_size=n, learning_rate=1.0,
                                           alpha=1.0 / n, epsilon=eps, clip=3.0,
                                           ledgers=ledgers, random_state=0).fit(blocks, y)
        auc = roc_auc_score(y, model.decision_function(blocks))
        spent = "-" if eps is None else f"{max(lg.spent()[0] for lg in ledgers):.3f}"
        rows.append(["none" if eps is None else eps, spent, auc, time.perf_counter() - start])
    _table("Default credit, secret-shared LR, 50 full-batch steps, rows clipped to 3 per "
           "party (noise from two parties, delta 1e-5)",
           ["epsilon", "spent (every ledger)", "AUC", "seconds"], rows)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--psi", type=int, default=100_000, help="ids per party")
    parser.add_argument("--anchor", action="store_true")
    parser.add_argument("--anchor-rows", type=int, default=100_000)
    parser.add_argument("--anchor-profile", action="store_true")
    parser.add_argument("--anchor-noise", nargs="+", choices=("short", "full"),
                        default=["short", "full"])
    parser.add_argument("--credit-paillier", action="store_true")
    parser.add_argument("--epoch-rows", type=int, default=1000)
    parser.add_argument("--split-epochs", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--sftl-iterations", type=int, default=3)
    parser.add_argument("--sftl-bits", type=int, nargs="+", default=[1024, 2048])
    parser.add_argument("--only", choices=("psi", "accuracy", "epochs", "anchor", "split",
                                           "transfer", "taylor", "links", "sftl", "dp"))
    args = parser.parse_args(argv)
    sections = {
        "psi": lambda: bench_psi(args.psi),
        "accuracy": lambda: bench_accuracy(args.credit_paillier),
        "epochs": lambda: bench_epochs(args.epoch_rows, 1),
        "anchor": lambda: (bench_anchor_ss(args.anchor_rows),
                           bench_anchor(args.anchor_rows, args.anchor_profile,
                                        args.anchor_noise)),
        "split": lambda: bench_split(args.split_epochs),
        "transfer": lambda: bench_transfer(args.rounds),
        "taylor": bench_taylor,
        "links": bench_links,
        "sftl": lambda: bench_sftl(args.sftl_iterations, args.sftl_bits),
        "dp": bench_dp,
    }
    for name, run in sections.items():
        if (args.only and name != args.only) or (name == "anchor" and not args.anchor
                                                 and args.only != "anchor"):
            continue
        run()
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
