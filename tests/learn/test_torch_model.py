"""The torch adapter: same interface as the numpy models."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from veil.errors import ConfigError, DataError, MissingDependencyError


@pytest.fixture(autouse=True)
def _one_torch_thread(one_torch_thread):
    """Every test here with one torch thread (tests/conftest.py)."""


def test_missing_torch_is_a_clear_error(monkeypatch):
    from veil.learn import TorchModel

    monkeypatch.setitem(sys.modules, "torch", None)  # makes `import torch` fail
    with pytest.raises(MissingDependencyError, match=r"pip install 'veil\[torch\]'"):
        TorchModel(object()).initialize(3, [0, 1])


def _net(torch, d=6, k=3):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(d, 8), torch.nn.Tanh(), torch.nn.Linear(8, k))


def _data(n=60, d=6, k=3):
    gen = np.random.default_rng(0)
    X = gen.normal(size=(n, d))
    y = np.argmax(X[:, :k], axis=1)
    return X, y


def test_per_example_gradients_match_autograd_one_by_one():
    torch = pytest.importorskip("torch")
    from veil.learn import TorchModel

    model = TorchModel(_net(torch).double()).initialize(6, [0, 1, 2])
    X, y = _data()
    G = model.per_example_gradients(X[:10], y[:10])
    assert G.shape == (10, model.n_params_)
    for i in range(10):
        np.testing.assert_allclose(G[i], model.gradient(X[i:i + 1], y[i:i + 1]), atol=1e-10)
    np.testing.assert_allclose(G.mean(axis=0), model.gradient(X[:10], y[:10]), atol=1e-10)


def test_fit_params_vector_and_input_module_untouched():
    torch = pytest.importorskip("torch")
    from veil.learn import TorchModel

    net = _net(torch)
    before = [p.detach().clone() for p in net.parameters()]
    X, y = _data(200)
    model = TorchModel(net, max_iter=30, batch_size=32, learning_rate=0.2, rng=0).fit(X, y)
    assert model.score(X, y) > 0.9
    for p, q in zip(before, net.parameters()):
        assert torch.equal(p, q)
    w = model.get_params_vector()
    other = TorchModel(_net(torch)).initialize(6, [0, 1, 2]).set_params_vector(w)
    np.testing.assert_allclose(other.predict_proba(X), model.predict_proba(X), atol=1e-6)
    with pytest.raises(DataError, match="parameters"):
        model.set_params_vector(w[1:])


def test_module_output_must_match_the_classes():
    torch = pytest.importorskip("torch")
    from veil.learn import TorchModel

    with pytest.raises(ConfigError, match="logits"):
        TorchModel(_net(torch, k=2)).initialize(6, [0, 1, 2])
    with pytest.raises(ConfigError, match="torch.nn.Module"):
        TorchModel("not a module").initialize(6, [0, 1, 2])


def test_a_torch_model_trains_federatedly():
    torch = pytest.importorskip("torch")
    from veil.fl import Federation
    from veil.fl.strategies import FedAvg
    from veil.learn import TorchModel

    X, y = _data(300)
    clients = [(X[i::3], y[i::3]) for i in range(3)]
    fed = Federation(clients, TorchModel(_net(torch)), FedAvg(local_epochs=3,
                     learning_rate=0.3, batch_size=16), 4, test=(X, y), rng=0)
    history = fed.run()
    assert history.rounds[-1]["accuracy"] > 0.85
    assert history.params.size == fed.model.n_params_
