"""Per-example gradient norms and clipped sums against explicit per-example gradients.

The reference computes every example's gradient with a separate backward pass on the
unmodified model; the engine must give the same norms and the same clipped sum for every
supported layer type (random shapes), for the torch.func fallback, for tied weights and for
a layer called twice. Tolerance: float32 arithmetic on sums of a few thousand products,
relative 1e-4 (float32 epsilon 1.2e-7 times the reduction length, with margin).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from veil.errors import ConfigError, DataError  # noqa: E402
from veil.learn.dpsgd import PerExampleGradients, clipped_grad_sum  # noqa: E402

RTOL, ATOL = 1e-4, 1e-5


@pytest.fixture(params=["compiled", "numpy"])
def kernels(request, monkeypatch):
    """Run a test with veil's compiled kernels (ghost norms, clip factors) and without."""
    from veil import _native

    if request.param == "numpy":
        monkeypatch.setattr(_native, "kernel", lambda name: None)
    elif _native.kernel("veil_clip_factors") is None:
        pytest.skip("no C compiler: the compiled kernels cannot be built")
    return request.param


def reference(model, loss_fn, x, y):
    """Per-example gradients by one backward pass per example, flattened: (B, D)."""
    params = [p for p in model.parameters() if p.requires_grad]
    rows = []
    for i in range(x.shape[0]):
        loss = loss_fn(model(x[i:i + 1]), y[i:i + 1]).sum()
        grads = torch.autograd.grad(loss, params, allow_unused=True)
        rows.append(torch.cat([(torch.zeros_like(p) if g is None else g).reshape(-1)
                               for g, p in zip(grads, params)]))
    return torch.stack(rows)


def engine_norms(model, loss_fn, x, y, reduction="sum"):
    with PerExampleGradients(model, loss_reduction=reduction) as engine:
        loss = loss_fn(model(x), y)
        (loss.sum() if reduction == "sum" else loss.mean()).backward()
        return engine.norms()


def mse(out, y):
    return ((out.flatten(1) - y.flatten(1)) ** 2).sum(1)


class Shared(nn.Module):
    """A layer called twice and an embedding tied to the output layer."""

    def __init__(self, vocab=11, dim=6):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.mid = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, vocab, bias=False)
        self.out.weight = self.emb.weight

    def forward(self, ids):
        h = torch.tanh(self.mid(torch.tanh(self.mid(self.emb(ids)))))
        return self.out(h).mean(1)


class Scale(nn.Module):
    """A custom layer with its own parameter: handled by the torch.func fallback."""

    def __init__(self, dim):
        super().__init__()
        self.gain = nn.Parameter(torch.randn(dim))

    def forward(self, x):
        return x * self.gain + torch.sin(x) * self.gain ** 2


def cases():
    g = torch.Generator().manual_seed(0)

    def randn(*shape):
        return torch.randn(*shape, generator=g)

    def ids(*shape, high=9):
        return torch.randint(0, high, shape, generator=g)

    yield "linear-2d", nn.Sequential(nn.Linear(7, 5), nn.Tanh(), nn.Linear(5, 3)), \
        randn(6, 7), randn(6, 3)
    yield "linear-3d-ghost", nn.Sequential(nn.Linear(40, 30), nn.Tanh(), nn.Linear(30, 2)), \
        randn(5, 3, 40), randn(5, 3, 2)
    yield "linear-3d-materialized", nn.Linear(3, 2), randn(5, 9, 3), randn(5, 9, 2)
    yield "conv1d", nn.Sequential(
        nn.Conv1d(4, 6, 3, stride=2, padding=1, dilation=1, groups=2), nn.Tanh(),
        nn.Conv1d(6, 2, 2, padding="same", padding_mode="reflect")), randn(5, 4, 11), \
        randn(5, 2, 6)
    yield "conv2d", nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(),
        nn.Conv2d(4, 4, (2, 3), stride=(2, 1), dilation=(1, 2), groups=4,
                  padding_mode="circular", padding=(1, 2)), nn.Tanh(),
        nn.Conv2d(4, 2, 3, padding="same", bias=False)), randn(4, 3, 8, 7), randn(4, 2, 5, 7)
    yield "conv2d-ghost", nn.Conv2d(16, 24, 3), randn(3, 16, 5, 5), randn(3, 24, 3, 3)
    yield "embedding", nn.Sequential(nn.Embedding(9, 4, padding_idx=0), nn.Tanh()), \
        ids(6, 7), randn(6, 7, 4)
    yield "embedding-1", nn.Embedding(9, 4), ids(6, 1), randn(6, 1, 4)
    yield "layernorm", nn.Sequential(nn.Linear(5, 6), nn.LayerNorm(6), nn.Linear(6, 2)), \
        randn(4, 3, 5), randn(4, 3, 2)
    yield "layernorm-2d-shape", nn.LayerNorm((3, 4)), randn(5, 2, 3, 4), randn(5, 2, 3, 4)
    yield "groupnorm", nn.Sequential(nn.Conv2d(2, 6, 3), nn.GroupNorm(3, 6), nn.Tanh()), \
        randn(4, 2, 6, 6), randn(4, 6, 4, 4)
    yield "rmsnorm", nn.Sequential(nn.Linear(4, 6), nn.RMSNorm(6)), randn(5, 4), randn(5, 6)
    yield "fallback-custom", nn.Sequential(nn.Linear(4, 5), Scale(5), nn.PReLU(5)), \
        randn(6, 4), randn(6, 5)
    yield "conv3d", nn.Conv3d(2, 4, 2, stride=(1, 2, 1), groups=2), randn(3, 2, 3, 4, 3), \
        randn(3, 4, 2, 2, 2)
    yield "fallback-conv-transpose", nn.ConvTranspose2d(2, 3, 2), randn(3, 2, 3, 3), \
        randn(3, 3, 4, 4)
    yield "shared-and-tied", Shared(), ids(5, 4, high=11), randn(5, 11)
    # in-place activations on the outputs of a tapped (first) and a pre-hooked layer
    yield "inplace-activations", nn.Sequential(
        nn.Linear(5, 6), nn.ReLU(inplace=True), nn.Linear(6, 4), nn.LeakyReLU(0.1, inplace=True),
        nn.Linear(4, 2)), randn(7, 5), randn(7, 2)
    yield "conv-inplace", nn.Sequential(
        nn.Conv2d(2, 3, 3, padding=1), nn.ReLU(inplace=True), nn.Conv2d(3, 2, 3),
        nn.ReLU(inplace=True)), randn(4, 2, 5, 5), randn(4, 2, 3, 3)


@pytest.mark.parametrize("name, model, x, y", list(cases()), ids=lambda v: v
                         if isinstance(v, str) else "")
def test_norms_and_clipped_sum_match_explicit_per_example_gradients(name, model, x, y):
    ref = reference(model, mse, x, y)
    ref_norms = ref.norm(dim=1)
    got = engine_norms(model, mse, x, y)
    torch.testing.assert_close(got, ref_norms, rtol=RTOL, atol=ATOL)
    # a threshold between the two middle norms clips half of the examples
    ordered = ref_norms.sort().values
    k = len(ordered) // 2
    c = float(ordered[k - 1] + ordered[k]) / 2
    expected = (ref * (c / (ref_norms + 1e-6)).clamp(max=1)[:, None]).sum(0)
    result = clipped_grad_sum(model, mse, x, y, c)
    torch.testing.assert_close(result.grad, expected, rtol=RTOL, atol=ATOL)
    assert result.n_clipped == int((ref_norms > c).sum())
    assert all(p.grad is None for p in model.parameters())


def test_mean_reduction_rescales_by_the_batch_size():
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 3))
    x, y = torch.randn(8, 5), torch.randn(8, 3)
    torch.testing.assert_close(engine_norms(model, mse, x, y, "mean"),
                               reference(model, mse, x, y).norm(dim=1), rtol=RTOL, atol=ATOL)


@pytest.mark.filterwarnings("ignore:There is a performance drop")
def test_multihead_attention_is_one_fallback_unit():
    torch.manual_seed(2)
    attn = nn.MultiheadAttention(8, 2, batch_first=True)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = attn

        def forward(self, x):
            return self.attn(x, x, x, need_weights=False)[0]

    model = Net()
    x, y = torch.randn(4, 3, 8), torch.randn(4, 3, 8)
    torch.testing.assert_close(engine_norms(model, mse, x, y),
                               reference(model, mse, x, y).norm(dim=1), rtol=RTOL, atol=ATOL)


def test_frozen_parameters_are_constants():
    torch.manual_seed(3)
    model = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 2))
    model[0].weight.requires_grad_(False)
    x, y = torch.randn(5, 4), torch.randn(5, 2)
    torch.testing.assert_close(engine_norms(model, mse, x, y),
                               reference(model, mse, x, y).norm(dim=1), rtol=RTOL, atol=ATOL)
    assert model[0].weight.grad is None


@pytest.mark.parametrize("layer, replacement", [
    (nn.BatchNorm1d(4), "GroupNorm"),
    (nn.BatchNorm2d(4), "GroupNorm"),
    (nn.InstanceNorm1d(4, track_running_stats=True), "track_running_stats=False"),
    (nn.Embedding(5, 4, scale_grad_by_freq=True), "scale_grad_by_freq=False"),
])
def test_unsupported_layers_are_named_with_their_replacement(layer, replacement):
    model = nn.Sequential(nn.Linear(4, 4), layer)
    forward_before = model[0].forward
    with pytest.raises(ConfigError, match=rf"'1'.*{type(layer).__name__}.*{replacement}"):
        PerExampleGradients(model)
    assert model[0].forward == forward_before  # nothing was modified


def test_dropout_inside_a_fallback_layer_is_a_clear_error():
    attn = nn.MultiheadAttention(4, 1, dropout=0.5, batch_first=True)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = attn

        def forward(self, x):
            return self.attn(x, x, x, need_weights=False)[0]

    model = Net().train()
    x = torch.randn(3, 2, 4)
    with pytest.raises(ConfigError, match="dropout"):
        clipped_grad_sum(model, mse, x, x, 1.0)


def test_nonfinite_examples_are_skipped_and_counted_or_raise(kernels):
    torch.manual_seed(4)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    x, y = torch.randn(6, 3), torch.randn(6, 2)
    x[2, 1] = float("nan")
    finite = torch.tensor([i != 2 for i in range(6)])
    ref = reference(model, mse, x[finite], y[finite])
    expected = (ref * (1.0 / (ref.norm(dim=1) + 1e-6)).clamp(max=1)[:, None]).sum(0)
    got = clipped_grad_sum(model, mse, x, y, 1.0)
    assert got.n_skipped == 1
    torch.testing.assert_close(got.grad, expected, rtol=RTOL, atol=ATOL)
    with pytest.raises(DataError, match="an example of the batch has a NaN"):
        clipped_grad_sum(model, mse, x, y, 1.0, nonfinite="raise")


def test_loss_must_be_per_example():
    model = nn.Linear(3, 1)
    x = torch.randn(4, 3)
    with pytest.raises(ConfigError, match="reduction='none'"):
        clipped_grad_sum(model, lambda out, y: mse(out, y).mean(), x, torch.zeros(4, 1), 1.0)


class FunctionalLinear(nn.Linear):
    """nn.Linear with its own forward: the engine takes the general torch.func path."""

    def forward(self, x):
        return super().forward(x)


class FunctionalConv2d(nn.Conv2d):
    def forward(self, x):
        return super().forward(x)


@pytest.mark.parametrize("fast, general, x, y", [
    (nn.Sequential(nn.Linear(9, 7), nn.Tanh(), nn.Linear(7, 3)),
     nn.Sequential(FunctionalLinear(9, 7), nn.Tanh(), FunctionalLinear(7, 3)),
     (30, 9), (30, 3)),
    (nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 2)),
     nn.Sequential(FunctionalLinear(6, 5), nn.Tanh(), FunctionalLinear(5, 2)),
     (12, 4, 6), (12, 4, 2)),
    (nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 3, 2, stride=2)),
     nn.Sequential(FunctionalConv2d(2, 4, 3, padding=1), nn.ReLU(),
                   FunctionalConv2d(4, 3, 2, stride=2)),
     (10, 2, 6, 6), (10, 3, 3, 3)),
], ids=["linear-2d", "linear-3d", "conv2d"])
def test_fast_and_general_paths_give_the_same_norms_and_clipped_sums(fast, general, x, y,
                                                                    kernels):
    """The layer rules (ghost norms, book-keeping sums into the gradient buffer) against the
    torch.func fallback (materialized per-example gradients) on the same weights."""
    general.load_state_dict(fast.state_dict())
    g = torch.Generator().manual_seed(5)
    x, y = torch.randn(*x, generator=g), torch.randn(*y, generator=g)
    norms = engine_norms(fast, mse, x, y)
    torch.testing.assert_close(norms, engine_norms(general, mse, x, y), rtol=1e-5, atol=1e-6)
    ordered = norms.sort().values  # a threshold between the middle norms clips half
    c = float(ordered[len(ordered) // 2 - 1] + ordered[len(ordered) // 2]) / 2
    a, b = clipped_grad_sum(fast, mse, x, y, c), clipped_grad_sum(general, mse, x, y, c)
    torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-6)
    assert a.n_clipped == b.n_clipped > 0


def test_clip_adds_into_the_given_buffers():
    torch.manual_seed(6)
    model = nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 2))
    x, y = torch.randn(8, 4), torch.randn(8, 2)
    start = [torch.full_like(p, 0.5) for p in model.parameters()]
    with PerExampleGradients(model, loss_reduction="sum") as engine:
        mse(model(x), y).sum().backward()
        result = engine.clip(0.3, out=[t.clone() for t in start])
    expected = clipped_grad_sum(model, mse, x, y, 0.3).grad
    got = torch.cat([(s - t).reshape(-1) for s, t in zip(result.sums, start)])
    torch.testing.assert_close(got, expected, rtol=RTOL, atol=ATOL)


def clip_reference(per_example, c):
    """``sum_i min(1, C / (||g_i|| + 1e-6)) g_i`` from explicit per-example gradients."""
    norms = per_example.norm(dim=1)
    return (per_example * (c / (norms + 1e-6)).clamp(max=1)[:, None]).sum(0)


@pytest.mark.parametrize("build, shape", [
    # the benchmark's MLP (the smaller operand of the first layer is the input, of the
    # last the output gradient), and its reverse
    (lambda: nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)), (32, 64)),
    (lambda: nn.Sequential(nn.Linear(40, 6), nn.ReLU(inplace=True), nn.Linear(6, 30)), (32, 40)),
    (lambda: nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                           nn.Conv2d(4, 6, 3, padding=1), nn.ReLU(), nn.Flatten(),
                           nn.Linear(6 * 4 * 4, 10)), (16, 1, 8, 8)),
], ids=["mlp", "mlp-reversed", "cnn"])
def test_fast_clipping_equals_the_reference_per_example_clip(build, shape, kernels):
    """The engine's clipped sum (ghost norms, book-keeping sums, the optimizer's scale and
    mean-loss rescaling) against per-example gradients clipped one by one, in float64:
    equal to 1e-6 on random data with about half of the examples clipped."""
    g = torch.Generator().manual_seed(11)
    torch.manual_seed(11)
    model = build().double()
    x = torch.randn(*shape, generator=g, dtype=torch.float64) * 3
    y = torch.randint(0, 10 if shape[-1] != 40 else 30, (shape[0],), generator=g)
    ce = nn.CrossEntropyLoss(reduction="none")
    ref = reference(model, ce, x, y)
    c = float(ref.norm(dim=1).median())
    scale = 1 / 7
    outs = [torch.full_like(p, 0.25) for p in model.parameters()]  # sums add to the buffer
    with PerExampleGradients(model, loss_reduction="mean") as engine:
        ce(model(x), y).mean().backward()
        result = engine.clip(c, scale=scale, out=outs)
    got = torch.cat([s.reshape(-1) for s in result.sums]) - 0.25
    torch.testing.assert_close(got, clip_reference(ref, c) * scale, rtol=1e-6, atol=1e-6)
    assert 0 < result.n_clipped < shape[0]


def test_compiled_clip_factors_equal_numpys_bit_for_bit(monkeypatch):
    """``c_i = min(1, C / (n_i + 1e-6)) * factor``, 0 for non-finite norms, and the counts:
    the compiled kernel and the numpy code give the same float64 values."""
    import numpy as np

    from veil import _native
    from veil.learn.dpsgd.engine import clip_factors

    if _native.kernel("veil_clip_factors") is None:
        pytest.skip("no C compiler: the compiled kernels cannot be built")
    rng = np.random.default_rng(3)
    sq = rng.exponential(2.0, 1000) ** 2
    sq[[3, 50, 999]] = [np.inf, np.nan, 0.0]
    compiled = clip_factors(sq, 7, 9.0, 1 / 3)
    monkeypatch.setattr(_native, "kernel", lambda name: None)
    fallback = clip_factors(sq, 7, 9.0, 1 / 3)
    assert np.array_equal(compiled[0], fallback[0]) and compiled[1:] == fallback[1:]
    norms = np.sqrt(sq) * 7
    assert compiled[1:] == (int(np.sum(norms[np.isfinite(norms)] > 9.0)), 2)
    assert compiled[0][3] == compiled[0][50] == 0 and compiled[0][999] == pytest.approx(1 / 3)
    finite = np.isfinite(norms)
    assert np.all(compiled[0][finite] * norms[finite] <= 9.0 / 3 * (1 + 1e-12))
