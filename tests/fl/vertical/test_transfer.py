"""Federated transfer learning: the distilled source model helps the targets; PATE-style
soft labels are charged before noise; bad messages and plans are refused."""

from __future__ import annotations

import numpy as np
import pytest

from veil.dp import Ledger
from veil.errors import BudgetExceededError, DataError, ProtocolError
from veil.fl.messages import decode, encode
from veil.random import default_rng

torch = pytest.importorskip("torch")

from veil.experiments.vertical_run import transfer_learn  # noqa: E402
from veil.fl.strategies import FedAvg  # noqa: E402
from veil.fl.vertical.transfer import SourceParty, distill  # noqa: E402


def _domain(n, shift, rng):
    """Two classes split by a tilted hyperplane; ``shift`` moves the inputs (domain)."""
    X = rng.normal(size=(n, 6)) + shift
    y = (X[:, 0] + 0.5 * X[:, 1] - X[:, 2] > shift * 0.5).astype(np.int64)
    return X, y


def _mlp(d, k):
    return torch.nn.Sequential(torch.nn.Linear(d, 16), torch.nn.ReLU(), torch.nn.Linear(16, k))


def test_the_transferred_source_model_helps_the_target_parties():
    rng = default_rng(0)
    Xs, ys = _domain(3000, 0.0, rng)
    Xt, yt = _domain(2400, 0.7, rng)
    torch.manual_seed(0)
    source = SourceParty(Xs, ys, _mlp, classes=2, epochs=8, rng=1)
    clients = [(Xt[i * 20:(i + 1) * 20], yt[i * 20:(i + 1) * 20]) for i in range(3)]
    test = (Xt[1400:], yt[1400:])
    strategy = FedAvg(local_epochs=1, learning_rate=0.05, batch_size=10)
    torch.manual_seed(1)
    student = _mlp(6, 2)
    base, _ = transfer_learn(None, None, clients, student, strategy, 5, test=test, rng=2)
    moved, _ = transfer_learn(source, Xt[400:1400], clients, student, strategy, 5,
                              test=test, rng=2)
    assert moved.rounds[-1]["accuracy"] > base.rounds[-1]["accuracy"] + 0.05


def test_noisy_soft_labels_are_charged_and_limited():
    rng = default_rng(3)
    X, y = _domain(600, 0.0, rng)
    ledger = Ledger(epsilon=8.0, delta=1e-5)
    source = SourceParty(X, y, _mlp, classes=2, teachers=20, epochs=2, noise_multiplier=8.0,
                         ledger=ledger, max_queries=50, rng=4)
    query = encode({"stage": "query", "X": X[:30].astype(np.float32)})
    answer = source.answer(query)
    assert len(ledger.history()) == 1 and 0 < ledger.spent()[0] < 8.0
    student = distill(_mlp(6, 2), X[:30], answer, epochs=1, rng=5)
    assert isinstance(student, torch.nn.Module)
    with pytest.raises(ProtocolError, match="max_queries"):
        source.answer(query)
    with pytest.raises(BudgetExceededError, match="nothing was charged"):
        SourceParty(X, y, _mlp, classes=2, teachers=20, epochs=1, noise_multiplier=1.0,
                    ledger=Ledger(epsilon=1.0, delta=1e-5), max_queries=1000, rng=6)


def test_bad_transfer_messages_are_refused():
    rng = default_rng(7)
    X, y = _domain(200, 0.0, rng)
    source = SourceParty(X, y, _mlp, classes=2, epochs=1, rng=8)
    with pytest.raises(ProtocolError, match="target"):
        source.answer(encode({"stage": "query", "X": X[:5, :3].astype(np.float32)}))
    with pytest.raises(ProtocolError, match="target"):
        source.answer(b"nonsense")
    bad = encode({"stage": "soft_labels", "q": np.full((5, 2), 0.9, dtype=np.float32)})
    with pytest.raises(ProtocolError, match="source"):
        distill(_mlp(6, 2), X[:5], bad)


def test_the_soft_labels_width_is_the_declared_classes_not_read_from_the_labels():
    """The attack (issue #28, item 2): the source read K = y.max() + 1 from its private
    labels, so a neighbour with one extra record labelled 2 answered with 3 soft-label
    columns instead of 2: its presence is visible in the width of every answer, whatever
    the noise. With ``classes`` declared, both neighbours answer with K columns, and a
    label outside 0..K-1 is refused by name before anything trains or is charged."""
    rng = default_rng(11)
    X, y = _domain(200, 0.0, rng)
    X_plus, y_plus = np.vstack([X, X[:1]]), np.append(y, 2)  # one extreme label added
    query = encode({"stage": "query", "X": X[:4].astype(np.float32)})
    widths = []
    for data in ((X, y), (X_plus, y_plus)):
        ledger = Ledger(epsilon=8.0, delta=1e-5)
        source = SourceParty(*data, _mlp, classes=3, teachers=5, epochs=1,
                             noise_multiplier=8.0, ledger=ledger, max_queries=4, rng=12)
        widths.append(decode(source.answer(query))["q"].shape[1])
    assert widths == [3, 3]
    ledger = Ledger(epsilon=8.0, delta=1e-5)
    with pytest.raises(DataError, match=r"classes=2 \(allowed: 0\.\.1\)"):
        SourceParty(X_plus, y_plus, _mlp, classes=2, teachers=5, epochs=1,
                    noise_multiplier=8.0, ledger=ledger, max_queries=4, rng=12)
    assert ledger.history() == () and ledger.spent()[0] == 0.0


def test_adding_a_record_changes_one_teachers_part_only():
    """The attack (issue #28, item 2): the teachers' parts were a permutation of the n
    records cut into equal slices, so adding one record (add/remove, the relation PATE's
    certificate needs) moved every slice boundary: records changed teachers and many
    teachers' votes could change, where sensitivity sqrt(2) assumes one. Each record now
    goes to the teacher of its keyed hash: under the same key, the neighbour with one more
    record (inserted anywhere) trains every teacher but one on exactly the same rows."""
    rng = default_rng(13)
    X, y = _domain(300, 0.0, rng)
    X_plus, y_plus = np.insert(X, 150, rng.normal(size=6), axis=0), np.insert(y, 150, 1)
    weights = []
    for data in ((X, y), (X_plus, y_plus)):
        torch.manual_seed(0)
        source = SourceParty(*data, _mlp, classes=2, teachers=10, epochs=1, rng=14)
        weights.append([torch.cat([p.flatten() for p in m.parameters()]) for m in source.models])
    changed = sum(not torch.equal(a, b) for a, b in zip(*weights))
    assert changed == 1
    assert source.relation == "add/remove one source record"
