"""Keys and noise pools across processes: pickled keys carry their numbers, not their locks
or tables; a pickled noise pool carries no noise value and no generator state."""

from __future__ import annotations

import multiprocessing
import pickle

import numpy as np
import pytest

from veil.crypto import paillier, threshold
from veil.crypto.paillier import NoisePool

BITS = 256      # test keys (insecure_ok)


@pytest.fixture(scope="module")
def keys():
    return paillier.keygen(BITS, insecure_ok=True, rng=71)


@pytest.fixture(scope="module")
def tkeys():
    primes = threshold.generate_safe_primes(BITS, insecure_ok=True, rng=72)
    return threshold.keygen(BITS, parties=4, threshold=2, insecure_ok=True, primes=primes,
                            rng=73)


def test_keys_round_trip_without_their_tables(keys):
    pk, sk = keys
    pk.encrypt(np.arange(3), rng=1)                      # builds the fixed-base noise table
    assert pk._table is not None
    blob = pickle.dumps((pk, sk))
    # the table has ceil((BITS + 128) / 6) rows of 64 residues of 2 * BITS bits: ~200 kB;
    # the key's numbers are well under 2 kB
    assert len(blob) < 2_000
    pk2, sk2 = pickle.loads(blob)
    assert pk2 == pk and pk2.noise_base == pk.noise_base and sk2.public_key is pk2
    assert pk2._table is None and pk2._lock.acquire(blocking=False)   # a fresh, free lock
    pk2._lock.release()
    values = np.array([5, -7, 2 ** 40])
    assert list(sk.decrypt(pk2.encrypt(values, rng=2))) == values.tolist()
    assert list(sk2.decrypt(pk.encrypt(values, rng=3))) == values.tolist()
    assert pk2._table is not None                        # rebuilt on first use


def test_threshold_keys_and_shares_round_trip(tkeys):
    pk, shares = tkeys
    c = pk.encrypt(np.array([3, -4]), rng=4)
    shares[0].partial_decrypt(c)                  # builds the verification table
    assert pk._v_table is not None
    copies = pickle.loads(pickle.dumps(shares))
    assert copies[0].public_key is copies[3].public_key  # one key per pickle, as before
    copy_pk = copies[0].public_key
    assert copy_pk == pk and copy_pk._v_table is None and copy_pk._table is None
    for share in copies:
        share.check()                                    # still matches its verification key
    partials = [copies[1].partial_decrypt(c), shares[2].partial_decrypt(c)]
    assert list(pk.combine(partials)) == [3, -4]         # copies and originals work together
    assert list(copy_pk.combine(partials)) == [3, -4]


def test_a_pickled_pool_is_empty_and_never_repeats_the_original(keys):
    pk, _ = keys
    pool = NoisePool(pk, capacity=8, rng=74)             # seeded: its values are predictable
    pool.fill()
    copy = pickle.loads(pickle.dumps(pool))
    assert len(pool) == 8 and len(copy) == 0             # the unused values stayed here
    assert copy.public_key == pk and copy.capacity == 8
    assert not copy._rng.seeded                          # its own OS-seeded generator
    copy.fill()
    ours, theirs = pool.take(8), copy.take(8)
    assert not set(map(int, ours)) & set(map(int, theirs))
    # and what the original draws next is not what the copy drew either
    assert not set(map(int, pool.take(8))) & set(map(int, theirs))


def test_a_running_pool_pickles_to_an_idle_one(keys):
    pk, _ = keys
    with NoisePool(pk, capacity=4) as pool:
        copy = pickle.loads(pickle.dumps(pool))
    assert copy._thread is None and "idle" in repr(copy)


def test_a_pickled_crt_pool_leaves_its_private_key_behind(keys):
    """A pickled CRT pool carried the private key to wherever the pool went."""
    pk, sk = keys
    bare = paillier.PublicKey(pk.n)
    owner = paillier.PrivateKey(sk.p, sk.q, bare)
    pool = NoisePool(bare, capacity=3, private_key=owner)
    blob = pickle.dumps(pool)
    assert int(sk.p).to_bytes((int(sk.p).bit_length() + 7) // 8, "little") not in blob
    copy = pickle.loads(blob)
    assert copy._private_key is None
    copy.fill()
    c = bare.encrypt(np.array([11, -12]), pool=copy)
    assert list(owner.decrypt(c)) == [11, -12]


def test_a_forked_child_never_reuses_the_parents_filled_pool(keys):
    """A filled pool was reused by parent and child after fork()."""
    import os

    pk, _ = keys
    pool = NoisePool(pk, capacity=4, rng=76)              # seeded, and filled before fork
    pool.fill()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:                                          # the child: report and leave
        try:
            size = len(pool)
            drawn = pool.take(1)[0]
            os.write(write, f"{size} {int(drawn)}".encode())
        finally:
            os._exit(0)
    os.close(write)
    size, drawn = os.read(read, 100_000).decode().split()
    os.waitpid(pid, 0)
    assert int(size) == 0
    assert int(drawn) not in {int(x) for x in pool.take(4)}


def _pool_draws(pool):
    pool.fill()
    return [int(x) for x in pool.take(4)]


def test_a_pool_sent_to_another_process_draws_other_values(keys):
    pk, _ = keys
    pool = NoisePool(pk, capacity=4, rng=75)
    pool.fill()
    with multiprocessing.get_context("fork").Pool(1) as workers:
        theirs = workers.apply(_pool_draws, (pool,))
    ours = [int(x) for x in pool.take(4)]
    assert len(theirs) == 4 and not set(ours) & set(theirs)
