"""make_private: the noisy step, the samplers, the accounting, and the errors."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from veil.dp import Ledger, PrivacyBudget  # noqa: E402
from veil.dp.accounting import calibrate_noise, epsilon_for  # noqa: E402
from veil.errors import BudgetExceededError, ConfigError  # noqa: E402
from veil.learn.dpsgd import make_private  # noqa: E402
from veil.learn.dpsgd.draws import BLOCK_VALUES  # noqa: E402
from veil.random import Generator  # noqa: E402


def small_model(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))


def toy_data(n=40, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 3, generator=g), torch.randint(0, 2, (n,), generator=g)


def per_example_grads(model, x, y):
    rows = []
    for i in range(len(x)):
        loss = nn.functional.cross_entropy(model(x[i:i + 1]), y[i:i + 1])
        grads = torch.autograd.grad(loss, list(model.parameters()))
        rows.append(torch.cat([g.reshape(-1) for g in grads]))
    return torch.stack(rows)


def calibrated(epsilon, delta=1e-5):
    """make_private's arguments for sigma calibrated to (epsilon, delta), given once."""
    return dict(budget=PrivacyBudget(epsilon, delta), noise_multiplier=None, delta=None)


def private(model=None, data=None, **kw):
    model = model or small_model()
    args = dict(noise_multiplier=1.3, delta=1e-5, max_grad_norm=0.5, epochs=1, batch_size=8,
                rng=Generator(7))
    args.update(kw)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    return make_private(model, opt, data or toy_data(), **args)


@pytest.mark.parametrize("chunk", [None, 3])
def test_noisy_step_equals_the_formula_with_a_seeded_generator(chunk):
    x, y = toy_data()
    model, opt, loader = private(max_physical_batch_size=chunk)
    before = torch.cat([p.detach().reshape(-1).clone() for p in model.parameters()])
    # replay the generator: make_private spawns a sampling and a noise stream, and each
    # draws the rows of all 5 planned steps in one call (5 rows fit in a block)
    sampling, noise_stream = Generator(7).spawn(2)
    q, d, steps = 8 / 40, before.numel(), 5
    assert steps <= BLOCK_VALUES // 40 and steps <= BLOCK_VALUES // d
    idx = np.flatnonzero(sampling.bernoulli(q, steps * 40)[:40])
    noise = torch.from_numpy(noise_stream.standard_normal(steps * d)[:d]).float()
    ref = per_example_grads(small_model(), x[idx], y[idx])  # same seed: same weights
    clipped = ref * (0.5 / (ref.norm(dim=1) + 1e-6)).clamp(max=1)[:, None]
    expected = before - 0.1 * (clipped.sum(0) + 1.3 * 0.5 * noise) / (q * 40)

    seen = 0
    for xb, yb in loader:
        opt.zero_grad()
        nn.functional.cross_entropy(model(xb), yb).backward()
        opt.step()
        seen += len(xb)
        if opt.steps == 1:
            break
    assert seen == len(idx)
    after = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    torch.testing.assert_close(after, expected, rtol=1e-5, atol=1e-6)
    assert opt.examples == len(idx)
    assert opt.clipped == int((ref.norm(dim=1) > 0.5).sum())
    assert all(p.grad is None for p in model.parameters())


def test_poisson_loader_rate_and_variable_batch_sizes():
    n, q, steps = 1000, 0.05, 400
    x = torch.arange(n)
    model = nn.Linear(1, 1)
    _, _, loader = make_private(model, torch.optim.SGD(model.parameters(), lr=0.1), x,
                                noise_multiplier=1.0, delta=1e-5, max_grad_norm=1.0,
                                epochs=steps // 20, sample_rate=q, rng=Generator(3))
    sizes, counts = [], np.zeros(n)
    for _ in range(steps // len(loader)):
        for batch in loader:
            loader.counter.consume()  # no training step needed to test the sampler
            sizes.append(len(batch))
            counts[batch.numpy()] += 1
            assert len(set(batch.tolist())) == len(batch)
    sizes = np.array(sizes)
    # total ~ Binomial(n * steps, q): 5 standard deviations
    assert abs(sizes.sum() - n * steps * q) < 5 * math.sqrt(n * steps * q * (1 - q))
    # batch sizes vary as Binomial(n, q): sample variance within 35% (5 x its relative
    # standard error sqrt(2 / (steps - 1)) = 7%)
    assert abs(sizes.var(ddof=1) / (n * q * (1 - q)) - 1) < 0.35
    # every example is sampled at rate q: the per-example counts are Binomial(steps, q)
    assert abs(counts.mean() - steps * q) < 5 * math.sqrt(steps * q * (1 - q) / n)
    with pytest.raises(BudgetExceededError, match="planned"):
        next(iter(loader))


def test_fixed_size_sampler_gives_exact_batches_and_is_accounted_without_replacement():
    x = torch.arange(50)
    model = nn.Linear(1, 1)
    _, opt, loader = make_private(model, torch.optim.SGD(model.parameters(), lr=0.1), x,
                                  noise_multiplier=1.0, delta=1e-5, max_grad_norm=1.0,
                                  epochs=2, batch_size=10, sampling="fixed", rng=Generator(4))
    for batch in loader:
        loader.counter.consume()
        assert len(batch) == 10 and len(set(batch.tolist())) == 10
    plan = opt.plan
    assert "SampledWithoutReplacement" in repr(plan.event)
    poisson = epsilon_for(1.0, 1e-5, 0.2, plan.steps, "pld")
    assert plan.epsilon > poisson  # never accounted as a Poisson batch of the same noise
    assert plan.epsilon == pytest.approx(opt.ledger.spent()[0])


def test_accounting_equals_the_ledgers_calibration():
    x, y = toy_data(200)
    ledger = Ledger(2.0, 1e-5)
    _, opt, loader = private(data=(x, y), **calibrated(2.0), epochs=3, batch_size=20,
                             ledger=ledger)
    plan = opt.plan
    assert plan.steps == 3 * 10 and plan.sample_rate == 0.1
    assert plan.noise_multiplier == calibrate_noise(2.0, 1e-5, 0.1, 30, "pld")
    assert plan.epsilon <= 2.0
    assert ledger.spent()[0] == pytest.approx(plan.epsilon, rel=1e-9)
    (charge,) = ledger.history()
    assert charge.event == plan.event and "30 steps" in charge.label


def test_schedule_that_does_not_fit_the_ledger_names_the_sigma_needed():
    x, y = toy_data(200)
    ledger = Ledger(1.0, 1e-5)
    model = small_model()
    forward = model[0].forward
    with pytest.raises(BudgetExceededError, match=r"noise_multiplier >= (\d|\.)+") as info:
        private(model=model, data=(x, y), noise_multiplier=0.6, epochs=5, batch_size=20,
                ledger=ledger)
    assert ledger.history() == ()
    assert model[0].forward == forward  # the model was restored
    needed = float(info.value.args[0].split("noise_multiplier >= ")[1].split(",")[0])
    assert epsilon_for(needed, 1e-5, 0.1, 50, "pld") <= 1.0
    assert epsilon_for(needed / 1.02, 1e-5, 0.1, 50, "pld") > 1.0


def test_a_second_run_on_a_ledger_without_delta_left_names_the_delta():
    # each run is priced at its own delta and the deltas add up: a ledger of delta 1e-5
    # holds one run at 1e-5, whatever epsilon is left (it said "noise_multiplier >= inf,
    # or with fewer epochs" before: neither helps)
    x, y = toy_data(200)

    def run(ledger, name):
        private(data=(x, y), **calibrated(2.0), batch_size=20, dataset_size="public",
                ledger=ledger.child(name, 2.0, 1e-5))   # this run's slice of the ledger

    ledger = Ledger(6.0, 1e-5)
    run(ledger, "first")
    with pytest.raises(BudgetExceededError) as info:
        run(ledger, "second")
    message = str(info.value)
    assert "inf" not in message and "fewer epochs" not in message
    assert "no noise multiplier fits" in message and "less than delta=1e-05" in message
    assert "sum of its runs' deltas" in message and len(ledger.history()) == 1
    roomy = Ledger(6.0, 2e-5)  # the remedy it names
    run(roomy, "first")
    run(roomy, "second")
    assert len(roomy.history()) == 2


@pytest.mark.parametrize("kw, match", [
    (dict(batch_size=41), "batch_size=41 is not allowed: larger than the data"),
    (dict(batch_size=None), "exactly one of batch_size"),
    (dict(budget=PrivacyBudget(1.0, 1e-5)), "noise_multiplier is not allowed with budget="),
    (dict(delta=0.0), "delta=0"),
    (dict(max_grad_norm=-1.0), "max_grad_norm"),
    (dict(sampling="shuffle"), "sampling"),
    (dict(**calibrated(1e-4, 1e-12), epochs=50, batch_size=40), "not reachable"),
])
def test_bad_parameters_are_clear_errors(kw, match):
    with pytest.raises(ConfigError, match=match):
        private(**kw)


def test_steps_need_the_private_loaders_batches():
    x, y = toy_data()
    model, opt, _ = private()
    nn.functional.cross_entropy(model(x[:8]), y[:8]).backward()
    with pytest.raises(ConfigError, match="private loader"):
        opt.step()


def test_a_weight_used_outside_its_layer_is_refused():
    class Leaky(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 2)

        def forward(self, x):
            return nn.functional.linear(x, self.fc.weight, self.fc.bias)

    model, opt, loader = private(model=Leaky())
    xb, yb = next(iter(loader))
    nn.functional.cross_entropy(model(xb), yb).backward()
    with pytest.raises(ConfigError, match="unclipped gradient"):
        opt.step()


def test_batchnorm_is_refused_before_anything_is_charged():
    ledger = Ledger(10.0, 1e-5)
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2))
    with pytest.raises(ConfigError, match="GroupNorm"):
        private(model=model, ledger=ledger)
    assert ledger.history() == ()


def test_cnn_with_groupnorm_trains_and_learning_rate_schedulers_work():
    g = torch.Generator().manual_seed(5)
    x = torch.randn(24, 1, 8, 8, generator=g)
    y = (x.mean((1, 2, 3)) > 0).long()
    torch.manual_seed(5)
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.GroupNorm(2, 4), nn.ReLU(),
                          nn.Conv2d(4, 4, 3, stride=2), nn.Flatten(), nn.Linear(36, 2))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    model, opt, loader = make_private(model, opt, (x, y), noise_multiplier=0.8, delta=1e-5,
                                      max_grad_norm=1.0, epochs=2, batch_size=8,
                                      max_physical_batch_size=4, rng=Generator(6))
    scheduler = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    start = [p.detach().clone() for p in model.parameters()]
    for _ in range(2):
        for xb, yb in loader:
            opt.zero_grad()
            nn.functional.cross_entropy(model(xb), yb).backward()
            opt.step()
        scheduler.step()
    assert opt.steps == 2 * 3
    assert opt.param_groups[0]["lr"] == pytest.approx(0.0025)
    assert all(not torch.equal(a, b) for a, b in zip(start, model.parameters()))
    plain = model.unwrap()
    assert "forward" not in plain[0].__dict__


def test_dpsgd_learns_digits_at_epsilon_3():
    from sklearn.datasets import load_digits

    data, target = load_digits(return_X_y=True)
    x = torch.tensor(data / 16, dtype=torch.float32)
    y = torch.tensor(target)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    model, opt, loader = make_private(model, opt, (x[:1400], y[:1400]),
                                      budget=PrivacyBudget(3.0, 1e-5), max_grad_norm=1.0, epochs=20,
                                      batch_size=256,
                                      rng=Generator(0))
    for _ in range(20):
        for xb, yb in loader:
            opt.zero_grad()
            nn.functional.cross_entropy(model(xb), yb).backward()
            opt.step()
    with torch.no_grad():
        accuracy = (model(x[1400:]).argmax(1) == y[1400:]).float().mean().item()
    assert opt.ledger.spent()[0] <= 3.0
    assert accuracy > 0.8  # chance is 0.1; non-private training reaches ~0.95


def test_import_without_torch_raises_missing_dependency():
    code = ("import sys\n"
            "class Block:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name.split('.')[0] == 'torch':\n"
            "            raise ImportError('torch is blocked')\n"
            "sys.meta_path.insert(0, Block())\n"
            "import veil.learn, veil.learn.dpsgd\n"
            "from veil.errors import MissingDependencyError\n"
            "try:\n    veil.learn.dpsgd.make_private\n"
            "except MissingDependencyError as e:\n    print('ok', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.startswith("ok") and "pip install 'veil[torch]'" in out


def test_an_empty_poisson_batch_is_a_noise_only_step():
    x, y = toy_data(40)
    model = nn.Sequential(nn.Conv1d(1, 2, 2), nn.Flatten(), nn.Linear(4, 2))
    x3 = x.unsqueeze(1)
    model, opt, loader = make_private(model, torch.optim.SGD(model.parameters(), lr=0.1),
                                      (x3, y), noise_multiplier=1.0, delta=1e-5,
                                      max_grad_norm=1.0, epochs=1, sample_rate=1e-3,
                                      loss_reduction="sum", rng=Generator(9))
    before = [p.detach().clone() for p in model.parameters()]
    xb, yb = next(iter(loader))
    assert len(xb) == 0 and xb.shape[1:] == (1, 3)
    opt.zero_grad()
    nn.functional.cross_entropy(model(xb), yb, reduction="sum").backward()
    opt.step()
    assert opt.steps == 1 and opt.examples == 0
    assert all(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_a_dataloader_over_a_map_style_dataset_is_resampled_privately():
    class Pairs(torch.utils.data.Dataset):
        def __init__(self, x, y):
            self.x, self.y = x, y

        def __len__(self):
            return len(self.x)

        def __getitem__(self, i):
            return {"x": self.x[i], "y": self.y[i]}

    x, y = toy_data(30)
    data = torch.utils.data.DataLoader(Pairs(x, y), batch_size=6, shuffle=True)
    model = small_model()
    model, opt, loader = make_private(model, torch.optim.SGD(model.parameters(), lr=0.1),
                                      data, noise_multiplier=1.0, delta=1e-5,
                                      max_grad_norm=1.0, epochs=1, rng=Generator(11))
    assert opt.plan.batch_size == 6 and len(loader) == 5
    for batch in loader:
        assert set(batch) == {"x", "y"} and batch["x"].shape[1:] == (3,)
        opt.zero_grad()
        nn.functional.cross_entropy(model(batch["x"]), batch["y"]).backward()
        opt.step()
    assert opt.steps == 5


def test_rows_are_handed_out_once_in_order_and_never_drawn_beyond_the_count():
    from veil.learn.dpsgd.draws import Rows

    calls = []

    def draw(m):
        calls.append(m)
        return Generator(12 + len(calls)).standard_normal(m)

    width = BLOCK_VALUES // 3 + 1  # two rows per block
    rows = Rows(draw, width, count=5)
    got = [rows.next() for _ in range(7)]
    assert calls == [2 * width, 2 * width, width, width, width]  # 2 + 2 + 1, then one by one
    expected = np.concatenate([Generator(12 + k).standard_normal(m)
                               for k, m in enumerate(calls, start=1)]).reshape(7, width)
    assert all(np.array_equal(r, e) for r, e in zip(got, expected))


def test_each_step_adds_the_next_fresh_noise_row():
    # zero inputs: every clipped gradient is 0, so step k moves the weights by exactly
    # -lr sigma C z_k / b, with z_k the k-th row of the noise stream (never one used twice)
    model = nn.Linear(3, 2, bias=False)
    x, y = torch.zeros(40, 3), torch.randint(0, 2, (40,))
    model, opt, loader = private(model=model, data=(x, y), epochs=2, rng=Generator(13))
    _, noise_stream = Generator(13).spawn(2)
    steps, d = opt.plan.steps, 6
    rows = noise_stream.standard_normal(steps * d, dtype=np.float32).reshape(steps, d)
    moves = []
    for _ in range(2):
        for xb, yb in loader:
            before = model.module.weight.detach().clone()
            opt.zero_grad()
            nn.functional.cross_entropy(model(xb), yb).backward()
            opt.step()
            moves.append((model.module.weight.detach() - before).reshape(-1))
    scale = -0.1 * 1.3 * 0.5 / opt.plan.batch_size  # -lr sigma C / b
    torch.testing.assert_close(torch.stack(moves), scale * torch.from_numpy(rows),
                               rtol=1e-4, atol=1e-7)


def test_a_declared_dataset_size_sets_the_plan_not_len_data():
    from veil.learn.public import PublicFactWarning

    def plan(n, **kw):
        return private(data=toy_data(n), **calibrated(2.0), batch_size=10, **kw)[1].plan

    # add/remove one record: with a declared size the plan (q, steps, sigma) cannot move
    a, b = plan(40, dataset_size=100), plan(41, dataset_size=100)
    assert (a.sample_rate, a.steps, a.noise_multiplier) == (
        b.sample_rate, b.steps, b.noise_multiplier) and a.sample_rate == 0.1
    with pytest.warns(PublicFactWarning, match="dataset size is treated as public"):
        plan(40)
    assert plan(40, dataset_size="public").sample_rate == 0.25
    with pytest.raises(ConfigError, match="dataset_size=100 is not allowed with sampling"):
        plan(40, dataset_size=100, sampling="fixed")


def test_a_private_estimate_of_the_dataset_size_is_charged_and_conservative():
    from veil.dp import Ledger
    from veil.learn.dpsgd import EstimatedSize

    ledger = Ledger(2.0, 1e-5)
    _, opt, _ = private(data=toy_data(400), **calibrated(2.0), batch_size=10,
                        dataset_size=EstimatedSize(0.2), ledger=ledger)
    count, run = ledger.history()
    assert count.label == "make_private: dataset size estimate" and run.delta == 1e-5
    # the count's 0.2 and DP-SGD's 1.8 fill the budget; N is a lower confidence bound
    assert ledger.spent()[0] == pytest.approx(2.0, rel=2e-3) and ledger.spent()[0] <= 2.0
    assert 400 - 40 < opt.plan.dataset_size <= 400
    with pytest.raises(ConfigError, match="slice comes out of the budget's epsilon"):
        private(data=toy_data(400), **calibrated(0.1), dataset_size=EstimatedSize(0.2))
    with pytest.raises(BudgetExceededError, match="nothing was charged"):
        private(data=toy_data(400), **calibrated(2.0), dataset_size=EstimatedSize(0.2),
                ledger=ledger)
    assert len(ledger.history()) == 2


def test_one_budget_calibrates_and_caps_and_is_given_once():
    """make_private(epsilon=..., ledger=Ledger(epsilon', ...)) took epsilon twice, and a
    ledger of another accountant than the calibration's was only caught for the name.
    With budget= the noise is calibrated for it, a new ledger holds exactly it, a given
    ledger must hold exactly it, and epsilon/delta/accountant beside it are refused."""
    budget = PrivacyBudget(2.0, 1e-5)
    _, opt, _ = private(noise_multiplier=None, delta=None, budget=budget)
    assert opt.ledger.budget == budget
    assert opt.plan.epsilon <= 2.0 * (1 + 1e-9) and opt.plan.delta == 1e-5
    with pytest.raises(ConfigError, match="calibrated for epsilon=2"):
        private(noise_multiplier=None, delta=None, budget=budget, ledger=Ledger(4.0, 1e-5))
    with pytest.raises(ConfigError, match="delta is not allowed with budget="):
        private(noise_multiplier=None, budget=budget)
    with pytest.raises(TypeError, match="epsilon"):    # epsilon only inside the budget
        private(noise_multiplier=None, delta=None, budget=budget, epsilon=2.0)
    with pytest.raises(ConfigError, match="give budget= .* or noise_multiplier="):
        private(noise_multiplier=None)
    with pytest.raises(ConfigError, match="delta=None is not allowed"):
        private(delta=None)
