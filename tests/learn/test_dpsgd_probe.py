"""DP-SGD refuses models that mix the examples of a batch; recurrent layers are refused
clearly, recurrent cells run through the functional fallback (issue 18, item 7)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from veil.dp import Ledger  # noqa: E402
from veil.errors import ConfigError  # noqa: E402
from veil.learn.dpsgd import make_private  # noqa: E402
from veil.learn.dpsgd.engine import PerExampleGradients  # noqa: E402


class Centered(nn.Module):
    """A parameter-free ``x - x.mean(0)`` between two layers: mixes the batch."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(3, 4), nn.Linear(4, 2)

    def forward(self, x):
        h = self.a(x)
        return self.b(h - h.mean(0))


class Recurrent(nn.Module):
    def __init__(self, cell) -> None:
        super().__init__()
        self.kind = cell
        self.cell = cell(3, 4) if "Cell" in cell.__name__ else cell(3, 4, batch_first=True)
        self.out = nn.Linear(4, 2)

    def forward(self, x):
        if "Cell" not in self.kind.__name__:
            return self.out(self.cell(x)[0][:, -1])
        h = torch.zeros(x.shape[0], 4)
        state = (h, torch.zeros_like(h)) if self.kind is nn.LSTMCell else h
        for t in range(x.shape[1]):
            state = self.cell(x[:, t], state)
            h = state[0] if self.kind is nn.LSTMCell else state
        return self.out(h)


def _private(model, x, y, ledger):
    return make_private(model, torch.optim.SGD(model.parameters(), lr=0.1), (x, y),
                        noise_multiplier=1.0, delta=1e-5, max_grad_norm=1.0, epochs=1,
                        batch_size=4, ledger=ledger, rng=0, dataset_size="public")


def _data(shape, n=12):
    g = torch.Generator().manual_seed(0)
    return torch.randn((n, *shape), generator=g), torch.randint(0, 2, (n,), generator=g)


def test_a_model_that_mixes_the_batch_is_refused_before_any_charge():
    ledger = Ledger(10.0, 1e-5)
    with pytest.raises(ConfigError, match="mixes the examples of a batch"):
        _private(Centered(), *_data((3,)), ledger)
    assert ledger.history() == ()
    # dropout is random but per example: no false alarm
    dropout = nn.Sequential(nn.Linear(3, 8), nn.Dropout(0.5), nn.Linear(8, 2))
    _private(dropout, *_data((3,)), ledger)
    assert len(ledger.history()) == 1


@pytest.mark.parametrize("cell", [nn.GRU, nn.LSTM, nn.RNN])
def test_fused_recurrent_layers_are_refused_clearly(cell):
    ledger = Ledger(10.0, 1e-5)
    with pytest.raises(ConfigError, match=rf"\({cell.__name__}\) is not supported.*GRUCell"):
        _private(Recurrent(cell), *_data((5, 3)), ledger)
    assert ledger.history() == ()


@pytest.mark.parametrize("cell", [nn.GRUCell, nn.LSTMCell, nn.RNNCell])
def test_recurrent_cells_get_exact_per_example_gradients(cell):
    torch.manual_seed(0)
    model = Recurrent(cell)
    x, y = _data((5, 3), n=6)
    engine = PerExampleGradients(model, list(model.parameters()), loss_reduction="sum")
    nn.functional.cross_entropy(model(x), y, reduction="sum").backward()
    norms = engine.norms()
    engine.detach()
    brute = []
    for i in range(len(x)):
        model.zero_grad()
        nn.functional.cross_entropy(model(x[i:i + 1]), y[i:i + 1], reduction="sum").backward()
        brute.append(torch.sqrt(sum((p.grad ** 2).sum() for p in model.parameters())))
    torch.testing.assert_close(norms.detach(), torch.stack(brute), rtol=1e-5, atol=1e-6)
    model, opt, loader = _private(model, x, y, Ledger(10.0, 1e-5))
    for xb, yb in loader:
        opt.zero_grad()
        nn.functional.cross_entropy(model(xb), yb).backward()
        opt.step()
