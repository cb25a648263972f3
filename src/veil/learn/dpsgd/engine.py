"""Per-example gradient norms and clipped gradient sums for a torch model.

:class:`PerExampleGradients` attaches to a model: every layer owning trainable parameters
runs with those parameters detached (autograd then computes input gradients only), and the
gradient ``g`` reaching its output in the backward pass is recorded next to the layer's input
``a``: by a pre-hook on the output's autograd node, or, where no input requires a gradient
(the first layer), by running the layer inside a "tap" function that gives the output a
node. From ``(a, g)`` the rules of :mod:`veil.learn.dpsgd.layers` give, after
``loss.backward()``:

1. the per-example gradient norms ``n_i = sqrt(sum_layers ||G_i||^2)`` (ghost norms where the
   layer allows, materialized per-example gradients where that is cheaper);
2. the clip factors ``c_i = min(1, C / n_i)`` (Abadi et al., CCS 2016);
3. the clipped sum ``sum_i c_i G_i`` of every parameter, as one weighted contraction per layer
   (book-keeping, Bu et al. ICML 2023) added straight into the caller's gradient buffers —
   no per-example gradient of a Linear layer is ever built, and autograd never computes the
   (unclipped) parameter gradients at all.

A parameter used by several layers (tied weights) or a layer called several times in one
forward pass gets its per-example gradients materialized and summed before the norm, so the
norm is that of the example's whole gradient.

Non-finite gradients: an example whose gradient norm is NaN or infinite is dropped from the
sum (``nonfinite="skip"``, counted in ``n_skipped``) — its contribution is then 0, within
the clipping bound, so the privacy guarantee is unchanged — or raises :class:`DataError`
(``nonfinite="raise"``, for debugging: the error itself reveals something about one example,
so do not surface it in a private release). The counts of clipped and skipped examples are
diagnostics computed without noise: they are not differentially private.

:func:`clipped_grad_sum` is the one-call form (model, loss, batch, C) -> flattened clipped
sum, without noise, that other learners (hybrid federated learning) build on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

import numpy as np

from veil import _native
from veil._validation import check_choice, check_positive
from veil.errors import ConfigError, DataError
from veil.learn.dpsgd._torch import nn, torch
from veil.learn.dpsgd.layers import (
    OPAQUE,
    FunctionalRule,
    Record,
    Rule,
    _tensor_leaves,
    check_layer,
    rule_for,
)

log = logging.getLogger(__name__)
Tensor = torch.Tensor

__all__ = ["PerExampleGradients", "ClippedSums", "ClippedGradSum", "clipped_grad_sum"]

_ATTACHED = "_veil_dpsgd_engine"


class ClippedSums(NamedTuple):
    """The clipped per-example gradients of one batch, summed (one tensor per parameter: the
    ``out`` tensors of :meth:`PerExampleGradients.clip` when given, the sums added to them)."""

    sums: list[Tensor]
    n_examples: int
    n_clipped: int
    n_skipped: int


class ClippedGradSum(NamedTuple):
    """:func:`clipped_grad_sum`'s result: the flattened sum and the diagnostic counts."""

    grad: Tensor
    n_clipped: int
    n_skipped: int


class _Tap(torch.autograd.Function):
    """``fn(*inputs)`` as an autograd node whose backward hands the gradients reaching its
    outputs to a layer's record, and passes them on to ``inputs`` if ``passthrough``.

    The ``anchor`` (a scalar that requires grad) makes the node part of the graph even when
    no input requires a gradient. ``fn`` must return new tensors, not views of ``inputs``:
    autograd forbids in-place changes of a view made in a custom function, and the next
    layer may be ``ReLU(inplace=True)``.
    """

    @staticmethod
    def forward(ctx: Any, rec: Record, anchor: Tensor, fn: Callable, passthrough: bool,
                *inputs: Any) -> Any:
        ctx.rec, ctx.passthrough, ctx.inputs = rec, passthrough, len(inputs)
        return fn(*inputs)

    @staticmethod
    def backward(ctx: Any, *grads: Tensor) -> tuple:
        ctx.rec.add_grads(grads)
        return (None,) * 4 + (grads if ctx.passthrough else (None,) * ctx.inputs)


def _detached(arg: Any) -> Any:
    """A layer argument without autograd history (tensors in a tuple too: an LSTM state)."""
    if isinstance(arg, Tensor):
        return arg.detach()
    if isinstance(arg, (tuple, list)):
        return type(arg)(_detached(a) for a in arg)
    return arg


def _copies(*tensors: Tensor) -> tuple[Tensor, ...]:
    return tuple(t.clone() for t in tensors)


class _Layer:
    """A hooked layer: its rule, the names of its trainable parameters, its records."""

    __slots__ = ("module", "rule", "names", "params", "slots", "records", "original",
                 "had_own", "bypass", "exclusive")

    def __init__(self, module: nn.Module, rule: Rule, names: list[str]) -> None:
        self.module = module
        self.rule = rule
        self.names = names
        self.params = [module.get_parameter(n) for n in names]
        self.slots: list[int] = []  # positions of ``params`` in the engine's parameter list
        self.records: list[Record] = []
        self.had_own = "forward" in module.__dict__
        self.original = module.forward
        self.bypass = False
        self.exclusive = True


class PerExampleGradients:
    """Record per-example gradient information of ``model`` and clip it.

    Parameters
    ----------
    model:
        The torch module (batch dimension first in every layer's input).
    params:
        The parameters to differentiate (default: every parameter with ``requires_grad``).
        Only these get per-example gradients; the others are treated as constants.
    loss_reduction:
        ``"mean"`` if the loss that is back-propagated is the mean of the per-example losses
        over the batch (then ``g`` is rescaled by the batch size), ``"sum"`` if it is their sum.

    Use as a context manager, or call :meth:`detach` to restore the model.
    """

    def __init__(self, model: nn.Module, params: Iterable[Tensor] | None = None, *,
                 loss_reduction: str = "mean") -> None:
        check_choice(loss_reduction, "loss_reduction", ("mean", "sum"))
        if not isinstance(model, nn.Module):
            raise ConfigError(f"model={type(model).__name__} is not allowed: expected a "
                              "torch.nn.Module")
        if getattr(model, _ATTACHED, None) is not None:
            raise ConfigError("model is already attached to a DP-SGD engine (make_private was "
                              "called on it); call unwrap() on the private model first")
        trainable = [p for p in model.parameters() if p.requires_grad]
        self.params = list(trainable if params is None else params)
        if not self.params:
            raise ConfigError("the model has no trainable parameter to train privately")
        known = {id(p) for p in trainable}
        for i, p in enumerate(self.params):
            if id(p) not in known:
                raise ConfigError(f"parameter #{i} of the optimizer (shape {tuple(p.shape)}) is "
                                  "not a trainable parameter of the model")
        self.model = model
        self.loss_reduction = loss_reduction
        self.layers = self._plan(model, {id(p) for p in self.params})
        position = {id(p): i for i, p in enumerate(self.params)}
        for layer in self.layers:
            layer.slots = [position[id(p)] for p in layer.params]
        self._anchor = torch.zeros((), requires_grad=True)
        self._recording = True
        for layer in self.layers:
            self._install(layer)
        setattr(model, _ATTACHED, self)

    # -- attaching -------------------------------------------------------------------------
    @staticmethod
    def _plan(model: nn.Module, selected: set[int]) -> list[_Layer]:
        """The layers to hook; raises before anything is modified."""
        for path, module in model.named_modules():
            check_layer(path, module)
        layers: list[_Layer] = []
        inside_opaque: set[int] = set()
        for _, module in model.named_modules():
            if id(module) in inside_opaque:
                continue
            if isinstance(module, OPAQUE):
                inside_opaque.update(id(m) for m in module.modules())
                names = [n for n, p in module.named_parameters() if id(p) in selected]
            else:
                names = [n for n, p in module.named_parameters(recurse=False)
                         if id(p) in selected]
            if names:
                layers.append(_Layer(module, rule_for(module, names), names))
        owners: dict[int, int] = {}
        for layer in layers:
            for p in layer.params:
                owners[id(p)] = owners.get(id(p), 0) + 1
        for layer in layers:
            layer.exclusive = all(owners[id(p)] == 1 for p in layer.params)
        return layers

    def _install(self, layer: _Layer) -> None:
        engine = self

        def forward(*args: Any, **kwargs: Any) -> Any:
            if layer.bypass or not engine._recording or not torch.is_grad_enabled():
                return layer.original(*args, **kwargs)
            return engine._record(layer, args, kwargs)

        layer.module.forward = forward

    def detach(self) -> None:
        """Restore the model's layers and forget every record."""
        for layer in self.layers:
            if layer.had_own:
                layer.module.forward = layer.original
            else:
                del layer.module.forward
            layer.records.clear()
        if getattr(self.model, _ATTACHED, None) is self:
            delattr(self.model, _ATTACHED)

    def __enter__(self) -> PerExampleGradients:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.detach()

    # -- recording -------------------------------------------------------------------------
    def _record(self, layer: _Layer, args: tuple, kwargs: dict) -> Any:
        if not args or not isinstance(args[0], Tensor):
            raise ConfigError(f"layer {type(layer.module).__name__} was called without a "
                              "tensor as first positional argument (the batch)")
        rule, module = layer.rule, layer.module
        stored = tuple(_detached(a) for a in args)
        rec = Record(module, rule, stored, kwargs)
        layer.records.append(rec)
        if isinstance(rule, FunctionalRule):
            layer.bypass = True
            try:
                out = rule.forward(module, args, kwargs)
            finally:
                layer.bypass = False
        elif not any(isinstance(a, Tensor) and a.requires_grad for a in args):
            # no input requires grad (the first layer): the layer runs inside a tap node
            return _Tap.apply(rec, self._anchor, lambda *a: rule.forward(module, a, kwargs),
                              False, *args)
        else:
            out = rule.forward(module, args, kwargs)
        if isinstance(out, Tensor) and out.grad_fn is not None:
            # the layer's own backward node: its pre-hook sees g before the node runs, so a
            # later in-place change of ``out`` (ReLU(inplace=True)) does not affect it
            index = out.output_nr
            out.grad_fn.register_prehook(
                lambda grads: None if grads[index] is None else rec.add_grads((grads[index],)))
            return out
        # several outputs, or one without a node: a tap of copies passes the gradients on
        tapped = list(_Tap.apply(rec, self._anchor, _copies, True, *_tensor_leaves(out)))
        if isinstance(out, Tensor):
            return tapped[0]
        items = list(out)
        for i, item in enumerate(items):
            if isinstance(item, Tensor) and item.is_floating_point():
                items[i] = tapped.pop(0)
        return type(out)(items)

    def discard_gradients(self) -> None:
        """Forget the records a backward pass has reached (``optimizer.zero_grad``)."""
        for layer in self.layers:
            layer.records = [r for r in layer.records if r.grads is None]

    def reset(self) -> None:
        """Forget every record."""
        for layer in self.layers:
            layer.records.clear()

    # -- norms and clipping ----------------------------------------------------------------
    def _backed(self) -> tuple[list[tuple[_Layer, list[Record]]], int | None]:
        used, size = [], None
        for layer in self.layers:
            recs = [r for r in layer.records if r.grads is not None]
            if not recs:
                continue
            for r in recs:
                if size is None:
                    size = r.batch_size
                elif r.batch_size != size:
                    raise DataError(
                        f"layer {type(layer.module).__name__} saw a batch of {r.batch_size} "
                        f"examples where another layer saw {size}: the batch must be in "
                        "dimension 0 of every layer's input")
            used.append((layer, recs))
        return used, size

    def _squared_norms(self, used: list, size: int) -> tuple[np.ndarray, dict]:
        """``sum_p ||G_i^p||^2`` on the host (float64, shape ``(B,)``) and the materialized
        per-example gradients it needed (parameter position -> ``(B, *shape)``: tied
        parameters, layers called several times)."""
        host = np.zeros(size)
        total: Tensor | None = None
        shared: dict[int, Tensor] = {}
        for layer, recs in used:
            if layer.exclusive and len(recs) == 1:
                if layer.rule.add_sq_norm_host(recs[0], layer.names, host):
                    continue
                term = layer.rule.sq_norm(recs[0], layer.names)
                total = term if total is None else total.add_(term)
                continue
            for name, i in zip(layer.names, layer.slots):
                for r in recs:
                    pe = layer.rule.per_example(r, name)
                    shared[i] = pe if i not in shared else shared[i] + pe
        for pe in shared.values():
            term = pe.flatten(1).square().sum(1)
            total = term if total is None else total.add_(term)
        if total is not None:
            host += total.detach().to("cpu", torch.float64).numpy()
        return host, shared

    def norms(self) -> Tensor:
        """The per-example gradient norms of the last backward pass, shape ``(B,)``."""
        used, size = self._backed()
        if size is None:
            raise ConfigError("no gradient recorded: run the forward pass and "
                              "loss.backward() first")
        self._recording = False
        try:
            sq, _ = self._squared_norms(used, size)
        finally:
            self._recording = True
        scale = size if self.loss_reduction == "mean" else 1
        ref = self.params[0]
        return torch.from_numpy(np.sqrt(sq) * scale).to(ref.device, ref.dtype)

    def clip(self, max_grad_norm: float, *, nonfinite: str = "skip",
             expected_batch_size: int | None = None, scale: float = 1.0,
             out: Sequence[Tensor] | None = None) -> ClippedSums:
        """Clip each example's gradient to ``max_grad_norm``, sum, multiply by ``scale``;
        forget the records.

        ``expected_batch_size``, when given, must equal the batch the layers saw (the private
        loader passes the size of the batch it sampled). ``out``, when given (one tensor per
        parameter, in order), receives the sums: they are added to it, in place.
        """
        check_choice(nonfinite, "nonfinite", ("skip", "raise"))
        if out is None:
            out = [torch.zeros_like(p) for p in self.params]
        self._recording = False
        try:
            return self._clip(float(max_grad_norm), nonfinite, expected_batch_size, scale,
                              list(out))
        finally:
            self._recording = True
            self.reset()

    def _clip(self, max_norm: float, nonfinite: str, expected: int | None,
              scale: float, out: list[Tensor]) -> ClippedSums:
        used, size = self._backed()
        if size is None:
            if expected:
                raise ConfigError("step() on a batch without gradients: call loss.backward() "
                                  "before optimizer.step()")
            return ClippedSums(out, 0, 0, 0)
        if expected is not None and size != expected:
            # no sizes in the message: a Poisson batch's size is private
            raise DataError("the model saw a batch of another size than the private loader "
                            "sampled: train on the loader's batches unchanged")
        if size == 0:
            return ClippedSums(out, 0, 0, 0)
        sq, shared = self._squared_norms(used, size)
        reduction = size if self.loss_reduction == "mean" else 1
        coef, n_clipped, n_skipped = clip_factors(sq, reduction, max_norm, reduction * scale)
        if n_skipped:
            if nonfinite == "raise":
                raise DataError("an example of the batch has a NaN or infinite gradient "
                                "(nonfinite='raise')")
            # no count here: the batch's size and content are private (the count is in
            # optimizer.skipped, for the curator)
            log.warning("DP-SGD: dropped examples with a non-finite gradient")
            keep = torch.from_numpy(np.isfinite(np.sqrt(sq) * reduction))
            for _, recs in used:
                for r in recs:
                    r.keep_rows(keep.to(r.grads[0].device))
            shared = {k: torch.where(keep.to(v.device).view(-1, *([1] * (v.dim() - 1))), v, 0)
                      for k, v in shared.items()}
        ref = self.params[0]
        coef = torch.from_numpy(coef).to(ref.device, ref.dtype)
        for i, pe in shared.items():
            out[i].add_(torch.tensordot(coef, pe, dims=1))
        for layer, recs in used:
            if layer.exclusive and len(recs) == 1:
                for name, i in zip(layer.names, layer.slots):
                    layer.rule.add_weighted_sum(recs[0], name, coef, out[i])
        return ClippedSums(out, size, n_clipped, n_skipped)


def clip_factors(sq: np.ndarray, reduction: float, max_norm: float,
                 factor: float) -> tuple[np.ndarray, int, int]:
    """The clip factors ``c_i = min(1, C / (n_i + 1e-6)) * factor`` (Abadi et al., CCS 2016)
    of the norms ``n_i = sqrt(sq_i) * reduction``, 0 for a non-finite ``n_i``; the number of
    finite ``n_i > C`` (clipped) and of non-finite ones (dropped). The 1e-6 keeps
    ``c_i n_i <= C`` where ``n_i`` rounds low. Computed in float64, by one compiled pass
    (:mod:`veil._native`) where it could be built, else numpy: the same values."""
    sq = np.ascontiguousarray(sq, dtype=np.float64)
    coef = np.empty_like(sq)
    fn = _native.kernel("veil_clip_factors")
    if fn is not None:
        counts = np.zeros(2, dtype=np.int64)
        fn(sq.ctypes.data, sq.size, reduction, max_norm, factor, coef.ctypes.data,
           counts.ctypes.data)
        return coef, int(counts[0]), int(counts[1])
    norms = np.sqrt(sq) * reduction
    finite = np.isfinite(norms)
    with np.errstate(invalid="ignore"):
        np.minimum(max_norm / (norms + 1e-6), 1.0, out=coef)
        coef *= factor
        coef[~finite] = 0.0
        n_clipped = int(np.count_nonzero(finite & (norms > max_norm)))
    return coef, n_clipped, int(sq.size - np.count_nonzero(finite))


def clipped_grad_sum(model: nn.Module, loss_fn: Callable[[Any, Any], Tensor],
                     inputs: Tensor | Sequence[Tensor], targets: Any, max_grad_norm: float, *,
                     nonfinite: str = "skip") -> ClippedGradSum:
    """Sum over a batch of the per-example gradients, each clipped to L2 norm ``max_grad_norm``.

    ``sum_i min(1, C / ||g_i||) g_i`` with ``g_i`` the gradient of example i's loss with
    respect to every trainable parameter of ``model`` (in ``model.parameters()`` order,
    flattened and concatenated). No noise is added: the caller adds it (DP-SGD, DP federated
    learning). ``loss_fn(model(*inputs), targets)`` must return the per-example losses, shape
    ``(B,)`` (e.g. ``nn.CrossEntropyLoss(reduction="none")``). The model's ``.grad`` fields
    are left untouched.
    """
    max_grad_norm = check_positive(max_grad_norm, "max_grad_norm")
    check_choice(nonfinite, "nonfinite", ("skip", "raise"))
    args = (inputs,) if isinstance(inputs, Tensor) else tuple(inputs)
    with PerExampleGradients(model, loss_reduction="sum") as engine:
        losses = loss_fn(model(*args), targets)
        batch = args[0].shape[0]
        if not isinstance(losses, Tensor) or tuple(losses.shape) != (batch,):
            shape = tuple(losses.shape) if isinstance(losses, Tensor) else type(losses).__name__
            raise ConfigError(f"loss_fn returned {shape}; expected the per-example losses, "
                              f"shape ({batch},): use reduction='none'")
        losses.sum().backward()
        result = engine.clip(max_grad_norm, nonfinite=nonfinite)
    grad = torch.cat([s.reshape(-1) for s in result.sums])
    return ClippedGradSum(grad, result.n_clipped, result.n_skipped)
