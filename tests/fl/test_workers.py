"""The multi-process runtime (``LocalRuntime(workers=k)``): the in-process results under a
seed for every strategy and fault, clients kept in their workers, lost workers named,
clean-up."""

from __future__ import annotations

import gc
import multiprocessing
import os
import signal
import threading
import time

import numpy as np
import pytest

from veil.crypto import threshold
from veil.dp import Ledger
from veil.dp.trust import Trust
from veil.errors import ConfigError, ProtocolError
from veil.fl import Faults, Federation, LocalRuntime
from veil.fl.hybrid.protocol import Agreement, deal_keys
from veil.fl.hybrid.run import HybridAggregator
from veil.fl.runtime.workers import WorkerLost
from veil.fl.strategies import DPFedAvg, FedAvg, Hybrid, SecAgg
from veil.fl.strategies.base import PlainClient
from veil.learn import LogisticRegression
from veil.learn.queries import Query, QueryLearner, QueryShape
from veil.random import Generator

BITS = 256      # test keys (insecure_ok): the runtime does not depend on the size


@pytest.fixture(scope="module")
def primes():
    return threshold.generate_safe_primes(BITS, insecure_ok=True, rng=61)


def _strategies(primes):
    fedavg = dict(local_epochs=2, learning_rate=0.3, batch_size=8)
    return {
        "fedavg": lambda: FedAvg(fraction=0.8, **fedavg),
        # adaptive clipping: the server's clip norm changes every round and reaches the
        # clients in the requests, never through a copy of the strategy
        "dpfedavg": lambda: DPFedAvg(FedAvg(**fedavg), noise_multiplier=1.0, clip_norm=0.5,
                                     adaptive=True, clipped_count_stddev=1.0),
        "secagg": lambda: SecAgg(DPFedAvg(FedAvg(**fedavg), noise_multiplier=1.0,
                                          clip_norm=0.5, noise="distributed"), bits=32),
        "hybrid": lambda: Hybrid(Trust(6, 4), rounds=3, noise_multiplier=1.0, key_bits=BITS,
                                 primes=primes, insecure_ok=True, rng=1),
    }


_FAULTS = {
    # every simulated fault at once: dropouts at any stage, crashes, stragglers past the
    # deadline, duplicates, reordering and replays of earlier rounds' answers
    "fedavg": Faults(dropout=0.2, crash=0.1, straggler=0.2, duplicate=0.3, replay=0.5),
    "dpfedavg": Faults(dropout=0.2, straggler=0.2, duplicate=0.3, replay=0.5),
    "secagg": Faults(dropout=0.15, duplicate=0.3, replay=0.5),
    # t - 1 = 3 parties may drop out before decrypting; 2 do
    "hybrid": Faults(dropout=0.3, dropout_exact=True, dropout_stage="decrypt", duplicate=0.3,
                     replay=0.5),
}


def _run(make, faults, data, workers, seed=7):
    with LocalRuntime(faults, workers=workers) as runtime:
        # the same results need the same noise: a labelled simulation (seeded noise)
        fed = Federation(data, LogisticRegression(), make(), 3, runtime=runtime, rng=seed,
                         ledger=Ledger(1e4, 1e-3, accountant="rdp"), simulate_noise=True)
        return fed.run()


def _comparable(history, kind):
    skip = {"time", "server_cpu", "client_cpu"}
    if kind == "hybrid":  # fresh (hedged) proof nonces: a proof's length varies by a byte
        skip.add("bytes_up")
    return [{k: v for k, v in r.items() if k not in skip} for r in history.rounds]


@pytest.mark.parametrize("kind", ["fedavg", "dpfedavg", "secagg", "hybrid"])
def test_worker_processes_give_the_in_process_results(kind, clients, primes):
    data = clients(6, rows=40)
    make = _strategies(primes)[kind]
    here = _run(make, _FAULTS[kind], data, workers=1)
    there = _run(make, _FAULTS[kind], data, workers=2)
    np.testing.assert_array_equal(here.params, there.params)
    assert _comparable(here, kind) == _comparable(there, kind)  # drops, rejections, bytes...
    assert any(r["status"] == "ok" for r in here.rounds)
    if kind == "fedavg":   # an uneven split (3 workers for 6 clients) changes nothing either
        np.testing.assert_array_equal(_run(make, _FAULTS[kind], data, workers=3).params,
                                      here.params)
        assert sum(r["dropped"] for r in here.rounds) > 0


class Counted(PlainClient):
    """A plain client that counts how often it is pickled (in the parent process)."""

    pickled = 0

    def __getstate__(self):
        type(self).pickled += 1
        return self.__dict__


class CountedFedAvg(FedAvg):
    def client(self, client_id, trainer):
        return Counted(client_id, trainer, self)


def _round(client):
    return client.round


def test_clients_are_shipped_once_and_live_in_their_workers(clients):
    data = clients(5, rows=30)
    Counted.pickled = 0
    with LocalRuntime(workers=2) as runtime:
        fed = Federation(data, LogisticRegression(), CountedFedAvg(), 4, runtime=runtime,
                         rng=3)
        fed.run()
        assert Counted.pickled == 5                     # once each, not once per delivery
        assert runtime.call(fed.clients, _round) == {c: 3 for c in range(5)}
        assert all(c.round == -1 for c in fed.clients.values())  # the shipped state only
        fed.clients[2] = Counted(2, fed.clients[2].trainer, fed.strategy)   # a new object
        assert runtime.call(fed.clients, _round)[2] == -1                   # replaces it
        assert Counted.pickled == 6


class Share(QueryLearner):
    """One query: each party's column sums, bounded by ``bound`` per coordinate."""

    def __init__(self, bound):
        self.shape = QueryShape(3, l1=1.0, l2=1.0, bound=bound, frac_bits=8)

    def plan(self):
        return [self.shape]

    def next_query(self):
        return Query("column sums", self.shape, {})

    def answer(self, query, X, y):
        return X.sum(axis=0), 0

    def update(self, query, aggregate):
        pass

    @property
    def model(self):
        return None


def _pool_size(client):
    return len(client.pool)


def test_hybrid_parties_fill_their_pools_and_clip_where_they_live(primes):
    gen = np.random.default_rng(0)
    data = [(gen.uniform(0, 0.3, size=(5, 3)), np.zeros(5)) for _ in range(4)]
    data[2][0][0, 0] = 50.0                 # party 2's first column sum exceeds the bound
    agreement = Agreement(4, "hybrid", trust=Trust(4, 2), noise="skellam", noise_multiplier=2.0,
                          delta=1e-5)
    keys = deal_keys(Trust(4, 2), bits=BITS, primes=primes, insecure_ok=True, rng=2)
    learner = Share(bound=10.0)
    query = learner.next_query()
    answers = []
    for workers in (1, 2):
        with LocalRuntime(workers=workers) as runtime:
            agg = HybridAggregator(data, agreement, keys=keys, runtime=runtime)
            agg.precompute(5)
            assert runtime.call(agg.clients, _pool_size) == {i: 5 for i in range(4)}
            answers.append(agg.aggregate(query, learner,
                                         party_noise=agreement.mechanism(query.shape),
                                         server_noise=None,
                                         rng=Generator(3, simulate_noise=True)))
            # one ciphertext each was encrypted with a pooled noise value
            assert runtime.call(agg.clients, _pool_size) == {i: 4 for i in range(4)}
    np.testing.assert_array_equal(answers[0].values, answers[1].values)
    assert answers[0].clipped == answers[1].clipped == 1     # counted in party 2's worker


class Explodes(FedAvg):
    def client_update(self, trainer, params, config, rng):
        raise ZeroDivisionError("client code failed")


def test_client_code_errors_come_back_with_the_workers_traceback(clients):
    data = clients(3)
    with pytest.raises(ZeroDivisionError, match="client code failed") as caught:
        with LocalRuntime(workers=2) as runtime:
            Federation(data, LogisticRegression(), Explodes(), 1, runtime=runtime).run()
    assert any("raised in veil fl worker" in note for note in caught.value.__notes__)


class Locked(FedAvg):
    def client(self, client_id, trainer):
        client = super().client(client_id, trainer)
        client.lock = threading.Lock()
        return client


def test_a_client_that_cannot_travel_is_named(clients):
    with LocalRuntime(workers=2) as runtime:
        fed = Federation(clients(2), LogisticRegression(), Locked(), 1, runtime=runtime)
        with pytest.raises(ConfigError, match="client 0 .*cannot be sent to a worker"):
            fed.run()


def _alive(pids):
    return {p.pid for p in multiprocessing.active_children()} & set(pids)


def test_a_killed_worker_is_named_and_everything_stops(clients):
    data = clients(4)
    with LocalRuntime(workers=2) as runtime:
        pids = runtime.pids

        def kill_worker_1(record):
            if record["round"] == 0:
                os.kill(pids[1], signal.SIGKILL)

        fed = Federation(data, LogisticRegression(), FedAvg(), 3, runtime=runtime, rng=1,
                         on_progress=kill_worker_1)
        with pytest.raises(WorkerLost, match=r"holding client\(s\) 1, 3 exited") as caught:
            fed.run()
        assert isinstance(caught.value, ProtocolError) and caught.value.clients == (1, 3)
        assert len(fed.history.rounds) == 1              # round 0 stands, round 1 never ran
        assert not _alive(pids)                          # the other worker was stopped too
        with pytest.raises(ProtocolError, match="worker processes are gone"):
            fed.run(resume=False)


def test_a_hung_worker_is_named_after_the_timeout_not_waited_for(clients):
    data = clients(4)
    with LocalRuntime(workers=2, timeout=1.0) as runtime:
        pids = runtime.pids

        def stop_worker_0(record):
            os.kill(pids[0], signal.SIGSTOP)

        fed = Federation(data, LogisticRegression(), FedAvg(), 3, runtime=runtime, rng=1,
                         on_progress=stop_worker_0)
        began = time.monotonic()
        with pytest.raises(WorkerLost, match=r"client\(s\) 0, 2 did not answer within 1 s"):
            fed.run()
        assert time.monotonic() - began < 30
        assert not _alive(pids)                          # the stopped worker was killed


def test_workers_are_cleaned_up_on_exit_exception_and_garbage_collection():
    with pytest.raises(KeyError):
        with LocalRuntime(workers=2) as runtime:
            pids = runtime.pids
            assert len(_alive(pids)) == 2
            raise KeyError("the caller fails")
    assert not _alive(pids) and runtime.pids == []
    runtime = LocalRuntime(workers=3)
    pids = runtime.pids
    del runtime
    gc.collect()
    assert not _alive(pids)
    with pytest.raises(ConfigError, match="workers"):
        LocalRuntime(workers=0)
    with pytest.raises(ConfigError, match="timeout"):
        LocalRuntime(workers=2, timeout=0)
