"""DP-SGD on the digits data set: an MLP and a small CNN, both charged to one ledger.

Each model is trained with make_private: sigma is calibrated to the target epsilon before
training, the whole schedule is charged to the ledger up front, batches are Poisson
samples, per-example gradients are clipped to C = 1 and Gaussian noise from veil's CSPRNG
is added at every step.

    python examples/dpsgd_digits.py [--epsilon 3] [--epochs 30]
"""

from __future__ import annotations

import argparse
import time

import torch
from sklearn.datasets import load_digits
from torch import nn

from veil.dp import Ledger, PrivacyBudget
from veil.learn.dpsgd import make_private

DELTA = 1e-5  # each training's; the ledger holds both (the policy adds the deltas up)


def train(model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, epsilon: float,
          epochs: int, lr: float, ledger: Ledger) -> nn.Module:
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    model, optimizer, loader = make_private(
        model, optimizer, (x, y), budget=PrivacyBudget(epsilon, DELTA), max_grad_norm=1.0,
        epochs=epochs, batch_size=256, max_physical_batch_size=128,
        ledger=ledger.child(type(model[0]).__name__, epsilon, DELTA),  # this model's slice
        dataset_size="public")  # the digits benchmark's size is published
    loss_fn = nn.CrossEntropyLoss()
    start = time.perf_counter()
    for epoch in range(epochs):
        total, seen = 0.0, 0
        for xb, yb in loader:
            optimizer.zero_grad()
            loss = loss_fn(model(xb), yb)
            loss.backward()
            optimizer.step()
            total, seen = total + loss.item() * len(yb), seen + len(yb)
        if epoch == 0 or (epoch + 1) % 5 == 0 or epoch + 1 == epochs:  # progress
            print(f"  epoch {epoch + 1}/{epochs}: training loss {total / max(seen, 1):.3f} "
                  f"({time.perf_counter() - start:.0f} s)", flush=True)
    plan = optimizer.plan
    print(f"  {plan.steps} steps, sample rate {plan.sample_rate:.3f}, noise multiplier "
          f"{plan.noise_multiplier:.3f}, epsilon {plan.epsilon:.3f} at delta {plan.delta:g}; "
          f"{optimizer.clipped / max(optimizer.examples, 1):.0%} of gradients clipped")
    return model.unwrap()


def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    with torch.no_grad():
        return float((model(x).argmax(1) == y).float().mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epsilon", type=float, default=3.0, help="per model")
    parser.add_argument("--epochs", type=int, default=30)
    args = parser.parse_args()

    data, target = load_digits(return_X_y=True)
    x = torch.tensor(data / 16.0, dtype=torch.float32)
    y = torch.tensor(target)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
    train_idx, test_idx = order[:1437], order[1437:]
    ledger = Ledger(epsilon=2 * args.epsilon, delta=2 * DELTA)  # two slices of (epsilon, DELTA)

    print(f"MLP 64-128-10, epsilon {args.epsilon}")
    mlp = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    mlp = train(mlp, x[train_idx], y[train_idx], epsilon=args.epsilon, epochs=args.epochs,
                lr=1.0, ledger=ledger)
    print(f"  test accuracy {accuracy(mlp, x[test_idx], y[test_idx]):.3f}")

    print(f"CNN on 1x8x8 images (GroupNorm, not BatchNorm), epsilon {args.epsilon}")
    images = x.view(-1, 1, 8, 8)
    cnn = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.GroupNorm(4, 16), nn.ReLU(),
                        nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
                        nn.Flatten(), nn.Linear(32 * 4 * 4, 10))
    cnn = train(cnn, images[train_idx], y[train_idx], epsilon=args.epsilon,
                epochs=args.epochs, lr=1.0, ledger=ledger)
    print(f"  test accuracy {accuracy(cnn, images[test_idx], y[test_idx]):.3f}")

    spent, at_delta = ledger.spent()
    print(f"ledger: epsilon {spent:.3f} spent of {ledger.epsilon:g} at delta {at_delta:g} "
          f"(two trainings of delta {DELTA:g} each)")


if __name__ == "__main__":
    main()
