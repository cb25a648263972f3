"""Split learning: it learns, label DP is charged and randomizes as stated, embedding
noise is certified only where it can be, bad messages are refused."""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting import dp_event
from sklearn.datasets import load_breast_cancer
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

from veil.dp import Ledger
from veil.errors import BudgetExceededError, ConfigError, DataError, ProtocolError
from veil.fl.messages import decode, encode
from veil.fl.vertical.label_dp import randomize_labels, rr_with_prior
from veil.learn.public import PublicFactWarning
from veil.random import default_rng

torch = pytest.importorskip("torch")

from veil.fl.vertical.split import SplitBottom, SplitNN, SplitTop  # noqa: E402


@pytest.fixture(scope="module")
def data():
    X, y = load_breast_cancer(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    Xa, Xb, ya, yb = train_test_split(X, y, test_size=0.3, random_state=0, stratify=y)
    split = lambda M: [M[:, :10], M[:, 10:20], M[:, 20:]]  # noqa: E731
    return split(Xa), ya, split(Xb), yb


def test_split_learning_matches_a_centralized_mlp(data):
    Xa, ya, Xb, yb = data
    model = SplitNN(epochs=15, batch_size=64, learning_rate=3e-3, classes=2, random_state=0)
    acc = model.fit(Xa, ya).score(Xb, yb)
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(30, 64), torch.nn.ReLU(), torch.nn.Linear(64, 2))
    opt = torch.optim.Adam(mlp.parameters(), lr=3e-3)
    A, B = torch.tensor(np.hstack(Xa), dtype=torch.float32), torch.tensor(np.hstack(Xb),
                                                                         dtype=torch.float32)
    for _ in range(15):
        for i in range(0, len(ya), 64):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(mlp(A[i:i + 64]),
                                              torch.as_tensor(ya[i:i + 64])).backward()
            opt.step()
    central = float((mlp(B).argmax(1).numpy() == yb).mean())
    assert acc >= central - 0.03 and acc > 0.93
    assert model.bytes_["host1"] > 0 and model.top_.history_[-1] < model.top_.history_[0]


def test_label_dp_is_charged_once_and_randomizes_at_the_stated_rate(data):
    Xa, ya, _, _ = data
    ledger = Ledger(epsilon=1.0, delta=1e-5)
    SplitNN(epochs=2, batch_size=128, label_epsilon=1.0, ledger=ledger, classes=2,
            random_state=1).fit(Xa, ya)
    assert len(ledger.history()) == 1 and math.isclose(ledger.spent()[0], 1.0, rel_tol=1e-6)
    with pytest.raises(BudgetExceededError):
        SplitNN(epochs=2, label_epsilon=1.0, ledger=ledger, classes=2).fit(Xa, ya)
    y = np.zeros(40_000, dtype=np.int64)
    out = randomize_labels(y, 4, 1.0, Ledger(epsilon=1.0), rng=2)
    keep = math.e / (math.e + 3)
    assert abs(np.mean(out == 0) - keep) < 5 * math.sqrt(keep * (1 - keep) / y.size)


def test_rr_with_prior_is_epsilon_dp_and_helps_with_a_good_prior():
    eps, n = 1.0, 60_000
    prior = np.tile([0.6, 0.3, 0.05, 0.05], (n, 1))
    rng = default_rng(3)
    outputs = {a: np.bincount(rr_with_prior(np.full(n, a), prior, eps, rng=rng), minlength=4)
               / n for a in range(4)}
    for o in range(4):      # P(o | a) <= e^eps P(o | b), up to sampling error
        probs = [outputs[a][o] for a in range(4)]
        if max(probs) > 0:
            assert max(probs) <= math.exp(eps) * min(probs) + 0.02
    # k* = 2 here: the label survives with probability e/(e+1) > RR's e/(e+3)
    assert outputs[0][0] > math.e / (math.e + 1) - 0.01
    Xs = np.zeros((10, 2))
    with pytest.raises(ConfigError, match="label_epsilon"):
        SplitNN(label_prior=True, classes=2).fit([Xs, Xs], np.arange(10) % 2)


def test_two_stage_rr_with_prior_trains_and_charges_one_event(data):
    Xa, ya, Xb, yb = data
    ledger = Ledger(epsilon=2.0, delta=1e-5)
    model = SplitNN(epochs=6, batch_size=64, learning_rate=3e-3, label_epsilon=2.0,
                    label_prior=True, ledger=ledger, classes=2, random_state=4).fit(Xa, ya)
    assert len(ledger.history()) == 1 and ledger.spent()[0] <= 2.0 + 1e-9
    assert model.score(Xb, yb) > 0.8


def test_label_dp_takes_the_declared_number_of_classes(data):
    """The attack (the hole of issue #28, item 2, in split learning): the top read
    K = y.max() + 1 from its private labels, so under label DP a neighbour with one label
    changed to a new class K trained a K + 1-way randomized response (every other label
    then lands in class K with positive probability, which never happens otherwise) and a
    model with one more output: an unbounded privacy loss whatever epsilon. Now K is
    declared, refused when missing under label DP, and a label outside it is refused
    before anything is charged."""
    Xa, ya, _, _ = data
    widths = []
    for labels in (ya, np.where(np.arange(ya.size) == 0, 2, ya)):   # one label made 2
        model = SplitNN(epochs=1, batch_size=256, label_epsilon=1.0, classes=3,
                        ledger=Ledger(1.0, 1e-5), random_state=5).fit(Xa, labels)
        widths.append(model.predict_proba(Xa).shape[1])
    assert widths == [3, 3]
    ledger = Ledger(1.0, 1e-5)
    with pytest.raises(ConfigError, match="classes=None is not allowed with label_epsilon"):
        SplitNN(epochs=1, label_epsilon=1.0, ledger=ledger).fit(Xa, ya)
    with pytest.raises(DataError, match=r"outside the declared classes=2 \(allowed: 0\.\.1\)"):
        SplitNN(epochs=1, label_epsilon=1.0, ledger=ledger, classes=2).fit(Xa, ya + 1)
    assert ledger.history() == ()
    with pytest.warns(PublicFactWarning, match="read from the labels"):
        SplitNN(epochs=1, batch_size=256, random_state=5).fit(Xa, ya)


def test_embedding_noise_is_certified_only_for_fixed_bottoms(data):
    Xa, ya, _, _ = data
    net = torch.nn.Linear(10, 4)
    with pytest.raises(ConfigError, match="fixed bottom"):
        SplitBottom("h", Xa[1], net, clip=1.0, noise_multiplier=1.0, ledger=Ledger(5.0, 1e-5))
    with pytest.raises(BudgetExceededError, match="nothing was charged"):
        SplitBottom("h", Xa[1], net, train=False, clip=1.0, noise_multiplier=0.5,
                    ledger=Ledger(1.0, 1e-5), passes=10)
    ledger = Ledger(50.0, 1e-5)
    bottom = SplitBottom("h", Xa[1], net, train=False, clip=1.0, noise_multiplier=2.0,
                         ledger=ledger, passes=1, rng=5)
    rows = np.arange(len(ya), dtype=np.int64)
    msg = encode({"stage": "batch", "pass": "train", "epoch": 0, "batch": 0, "rows": rows})
    h = decode(bottom.forward(msg))["h"]
    clean = bottom.embed(Xa[1])
    assert np.all(np.linalg.norm(clean, axis=1) <= 1.0 + 1e-5)
    assert abs(np.std(h - clean) - 2.0) < 0.1          # sigma = noise_multiplier * clip
    assert [c.kind for c in ledger.history()] == ["plan", "step"]  # the passes, then pass 0
    again = encode({"stage": "batch", "pass": "train", "epoch": 1, "batch": 0, "rows": rows})
    with pytest.raises(ProtocolError, match="beyond the 1 passes"):
        bottom.forward(again)


def test_a_top_gets_each_row_once_per_charged_pass(data):
    """The attack (issue #28, item 4): the bottom charged its embedding noise once per pass
    but served any row as often as the top asked within that pass. A top sending 400
    batches of row 7 in one epoch got 400 noisy copies for one charge; their mean has
    noise sigma / 20, twenty times less than the certificate assumes. Now a row served
    once in a pass is refused with a ProtocolError until the next (charged) pass."""
    Xa, ya, _, _ = data
    ledger = Ledger(50.0, 1e-5)
    sigma = 2.0                                          # noise_multiplier * clip
    bottom = SplitBottom("h", Xa[1], torch.nn.Linear(10, 64), train=False, clip=1.0,
                         noise_multiplier=sigma, ledger=ledger, passes=2, rng=9)
    copies = []
    for b in range(400):
        batch = encode({"stage": "batch", "pass": "train", "epoch": 0, "batch": b,
                        "rows": np.array([7], dtype=np.int64)})
        try:
            copies.append(decode(bottom.forward(batch))["h"][0])
        except ProtocolError as exc:
            assert "row" in str(exc) and "once per pass" in str(exc)
            break
    clean = bottom.embed(Xa[1][7:8])[0]
    residual = np.std(np.mean(copies, axis=0) - clean)  # the attacker's noise after averaging
    passes = [c for c in ledger.history() if c.kind == "step"]  # one per charged pass
    assert len(copies) <= len(passes) == 1
    assert residual > sigma / 2
    # the next pass is charged and serves the row again; other rows of a pass are served
    rows = np.array([7, 8], dtype=np.int64)
    nxt = encode({"stage": "batch", "pass": "train", "epoch": 1, "batch": 0, "rows": rows})
    assert decode(bottom.forward(nxt))["h"].shape == (2, 64)
    assert [c.kind for c in ledger.history()] == ["plan", "step", "step"]
    assert bottom.relation.startswith("replace-one")


def test_a_certified_run_of_several_passes_charges_them_as_one_plan(data):
    """Each pass used to be charged alone at all the delta the ledger had left, so the
    second pass of any run with embedding noise and a ledger was refused: the passes
    are now planned at the first one (their composition, Gaussian(z / 2) per pass)."""
    Xa, ya, _, _ = data
    ledgers = [Ledger(20.0, 1e-5) for _ in Xa]
    SplitNN(epochs=3, batch_size=128, clip=1.0, noise_multiplier=4.0, train_bottoms=False,
            bottom_ledgers=ledgers, classes=2, random_state=3).fit(Xa, ya)
    whole = Ledger(20.0, 1e-5)
    whole.charge(dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(2.0), 3))
    for ledger in ledgers:
        assert [c.kind for c in ledger.history()] == ["plan", "step", "step", "step"]
        assert math.isclose(ledger.spent()[0], whole.spent()[0], rel_tol=1e-9)


def test_bad_messages_are_refused_naming_the_party(data):
    Xa, ya, _, _ = data
    top = SplitTop(ya, ["a", "b"], torch.nn.Linear(8, 2), classes=2, epochs=1, rng=6)
    bottoms = [SplitBottom(n, x, torch.nn.Linear(10, 4), rng=7)
               for n, x in zip("ab", Xa[:2])]
    batch = top.next_batch()
    good = {b.name: b.forward(batch) for b in bottoms}
    bad = decode(good["b"])
    bad["h"] = np.full_like(bad["h"], np.nan)
    with pytest.raises(ProtocolError, match="'b'"):
        top.step({"a": good["a"], "b": encode(bad)})
    with pytest.raises(ProtocolError, match="expects one message"):
        top.step({"a": good["a"]})
    grads = top.step(good)
    late = decode(grads["a"])
    late["step"] = ["train", 0, 7]
    with pytest.raises(ProtocolError, match="gradient for"):
        bottoms[0].backward(encode(late))
    wrong = decode(grads["b"])
    wrong["grad"] = wrong["grad"][:, :2]
    with pytest.raises(ProtocolError, match="shape"):
        bottoms[1].backward(encode(wrong))
    bottoms[0].backward(grads["a"])
    out = decode(batch)
    out["rows"] = np.array([0, 10**6], dtype=np.int64)
    with pytest.raises(ProtocolError, match="rows"):
        bottoms[0].forward(encode(out))
    with pytest.raises(ProtocolError, match="not a 'batch'"):
        bottoms[0].forward(good["a"])
