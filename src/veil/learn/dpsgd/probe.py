"""An independence probe: does the model mix the examples of a batch?

Per-example clipping bounds one example's contribution to the summed gradient only if
example ``i``'s gradient depends on example ``i`` alone (Abadi et al., CCS 2016). A module
that mixes the batch (``x - x.mean(0)``, batch statistics, attention across dimension 0)
breaks this silently: removing one example moves *every* other example's gradient, and the
clipped sum's sensitivity is no longer ``C``. The per-example gradient of example ``j`` is
a function of its output ``f(x)_j`` and the layers it went through, so a model whose output
``f(x)_j`` does not depend on ``x_i`` (``i != j``) gives independent per-example gradients.

:func:`check_independent` builds a batch of three synthetic examples shaped like the data
(floating inputs drawn from a fixed-seed normal, integer inputs zero: no record's values
are used, so the probe reveals nothing about the data), runs the model twice with the same
torch randomness (dropout masks identical), the second time with example 0 perturbed, and
raises :class:`ConfigError` when another example's output moved (a model that does not run
on such a batch is not probed: a warning says so). It is a test on one input,
not a proof; the loss is not probed (``make_private`` does not see it): a loss that mixes
the examples (contrastive losses, batch-normalized targets) must not be used.
"""

from __future__ import annotations

import logging
from typing import Any

from veil.errors import ConfigError
from veil.learn.dpsgd._torch import nn, torch

__all__ = ["check_independent"]

log = logging.getLogger(__name__)

_PROBE_ROWS = 3


def check_independent(model: nn.Module, batch: Any) -> None:
    """ConfigError if ``model``'s outputs for examples 1.. move when example 0 changes.

    ``batch`` is one batch of the data (its first tensor, dimension 0 the examples, is the
    model's input); only its shapes and dtypes are used.
    """
    x = batch[0] if isinstance(batch, (tuple, list)) else batch
    if not isinstance(x, torch.Tensor) or x.dim() == 0:
        return  # not a tensor batch the probe can build: nothing checked
    param = next((p for p in model.parameters()), None)
    device = param.device if param is not None else x.device
    shape = (_PROBE_ROWS,) + tuple(x.shape[1:])
    seed = torch.Generator().manual_seed(0)
    if x.is_floating_point():
        dtype = param.dtype if param is not None and param.is_floating_point() else x.dtype
        probe = torch.randn(shape, generator=seed, dtype=torch.float64).to(device, dtype)
        moved = probe.clone()
        moved[0] = moved[0] + 1.0 + torch.randn(shape[1:], generator=seed,
                                                dtype=torch.float64).to(device, dtype)
    else:
        probe = torch.zeros(shape, dtype=x.dtype, device=device)
        moved = probe.clone()
        moved[0] = 1
    try:
        before, after = _outputs(model, probe), _outputs(model, moved)
    except Exception as exc:  # noqa: BLE001 - the model's own error on a synthetic input
        log.warning("DP-SGD independence probe skipped: the model does not run on a batch "
                    "shaped like the data's first array (%s: %s); make sure it does not mix "
                    "the examples of a batch", type(exc).__name__, exc)
        return
    for a, b in zip(before, after):
        if a.dim() == 0 or a.shape[0] != _PROBE_ROWS or not a.is_floating_point():
            continue
        a, b = a[1:].double(), b[1:].double()
        if not torch.allclose(a, b, rtol=1e-4, atol=1e-6, equal_nan=True):
            shift = float((a - b).abs().nan_to_num().max())
            raise ConfigError(
                f"the model mixes the examples of a batch: changing one example moved another "
                f"example's output by {shift:.3g} (independence probe at make_private), so "
                "per-example clipping cannot bound one example's influence; remove the "
                "operation across the batch dimension (batch statistics such as "
                "x - x.mean(0), BatchNorm, attention over dimension 0) or make it per example")


def _outputs(model: nn.Module, x: Any) -> list[Any]:
    """The model's output tensors on ``x``, with torch's randomness fixed (same dropout)."""
    devices = [x.device] if x.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices), torch.no_grad():
        torch.manual_seed(0)
        out = model(x)
    leaves, stack = [], [out]
    while stack:
        item = stack.pop()
        if isinstance(item, torch.Tensor):
            leaves.append(item)
        elif isinstance(item, (tuple, list)):
            stack.extend(reversed(item))
        elif isinstance(item, dict):
            stack.extend(item.values())
    return leaves
