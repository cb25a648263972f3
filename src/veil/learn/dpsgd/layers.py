"""Per-example gradients of one layer from its input ``a`` and output gradient ``g``.

For a layer used once in a forward pass, example i's gradient is a function of that
example's input ``a_i`` and of the gradient ``g_i = dL_i/dy_i`` that reaches the layer's
output. Each rule below knows, for its layer type, three things:

* ``sq_norm``: ``||G_i||^2`` for every example, without building ``G_i`` when the layer
  allows it ("ghost" norms, Goodfellow 2015; Li, Tramer, Liang & Hashimoto 2022);
* ``per_example``: the gradients ``G_i`` themselves, shape ``(B, *param.shape)``;
* ``add_weighted_sum``: ``out += sum_i c_i G_i`` for clip factors ``c``, as one contraction,
  which is the "book-keeping" step of Bu, Wang, Zha & Karypis (ICML 2023): the clipped sum
  costs one ordinary weight-gradient product, with no second backward pass, accumulated
  straight into the caller's gradient buffer.

Formulas (``B`` examples, ``T`` positions per example, bias gradient = ``sum_t g_it``):

* Linear, ``y_t = W a_t + b``: ``G_i = sum_t g_it a_it^T``. With ``T = 1``,
  ``||G_i||^2 = ||g_i||^2 ||a_i||^2``; otherwise ``||G_i||^2 = <a_i a_i^T, g_i g_i^T>_F``
  (cost ``T^2 (d_in + d_out)``) or the materialized ``G_i`` (cost ``T d_in d_out``),
  whichever is cheaper.
* Conv1d/2d/3d: the same as Linear on the unfolded input (im2col): positions are the
  ``L`` output locations, ``d_in = C_in/groups * prod(kernel)``, per group; materialized
  ``G_i`` come from one grouped convolution backward (see :class:`ConvRule`).
* Embedding: ``G_i = sum_t e_{x_it} g_it^T`` and
  ``||G_i||^2 = sum_{t,s} [x_it = x_is] <g_it, g_is>``; rows of ``padding_idx`` get none.
* LayerNorm, GroupNorm, RMSNorm (``y = x_hat * w + b``): ``G_i^w = sum g_i * x_hat_i`` over
  the positions the weight is broadcast over, materialized (it is small).
* Any other layer (:class:`FunctionalRule`): ``G_i`` by ``torch.func.vmap`` over a
  vector-Jacobian product of the layer run on example i alone.

Layers mixing the examples of a batch (batch normalization) have no per-example gradient;
:func:`rule_for` rejects them with the replacement to use.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from veil import _native
from veil.errors import ConfigError
from veil.learn.dpsgd._torch import F, nn, torch

Tensor = torch.Tensor
_SQ_NORM_KERNELS = {torch.float32: "veil_linear_sq_norms_f32",
                    torch.float64: "veil_linear_sq_norms_f64"}


def _detached(p: Tensor | None) -> Tensor | None:
    return None if p is None else p.detach()


class Record:
    """One call of a layer in a forward pass: its inputs and, after backward, ``g``."""

    __slots__ = ("module", "rule", "inputs", "kwargs", "grads", "cache")

    def __init__(self, module: nn.Module, rule: Rule, inputs: tuple, kwargs: dict) -> None:
        self.module = module
        self.rule = rule
        self.inputs = inputs
        self.kwargs = kwargs
        self.grads: tuple[Tensor, ...] | None = None
        self.cache: dict[str, Any] = {}

    @property
    def batch_size(self) -> int:
        return int(self.inputs[0].shape[0])

    def add_grads(self, grads: Sequence[Tensor]) -> None:
        """Gradients reaching the outputs (summed over repeated backward passes)."""
        grads = tuple(g.detach() for g in grads)
        if self.grads is None:
            self.grads = grads
        else:
            self.grads = tuple(a + b for a, b in zip(self.grads, grads))
        self.cache.clear()

    def keep_rows(self, keep: Tensor) -> None:
        """Zero the inputs and gradients of the examples not in ``keep`` (non-finite ones)."""
        def mask(t: Any) -> Any:
            if isinstance(t, Tensor) and t.is_floating_point() and t.dim() >= 1 \
                    and t.shape[0] == keep.shape[0]:
                return torch.where(keep.view(-1, *([1] * (t.dim() - 1))), t, 0)
            return t
        self.inputs = tuple(mask(t) for t in self.inputs)
        self.grads = tuple(mask(g) for g in self.grads)
        self.cache.clear()


class Rule:
    """How one layer type runs with detached parameters and yields per-example gradients.

    ``forward`` computes the layer with its parameters detached, so autograd computes the
    gradient for the layer's input only; parameter gradients come from this rule.
    """

    def forward(self, module: nn.Module, args: tuple, kwargs: dict) -> Any:
        raise NotImplementedError

    def per_example(self, rec: Record, name: str) -> Tensor:
        raise NotImplementedError

    def sq_norm(self, rec: Record, names: Sequence[str]) -> Tensor:
        """``sum_{p in names} ||G_i^p||^2`` per example: a new ``(B,)`` tensor."""
        return _sum(self.per_example(rec, n).flatten(1).square().sum(1) for n in names)

    def add_weighted_sum(self, rec: Record, name: str, coef: Tensor, out: Tensor) -> None:
        """``out += sum_i coef_i G_i``."""
        out.add_(torch.tensordot(coef, self.per_example(rec, name), dims=1))

    def add_sq_norm_host(self, rec: Record, names: Sequence[str], acc: np.ndarray) -> bool:
        """``acc += sq_norm(rec, names)`` by a compiled kernel on the host (``acc``: float64,
        shape ``(B,)``), if this rule has one for these tensors; False if not (the caller then
        uses :meth:`sq_norm`)."""
        return False


def _sum(terms: Iterable[Tensor]) -> Tensor:
    """The sum of new tensors, accumulated in place into the first."""
    total = None
    for t in terms:
        total = t if total is None else total.add_(t)
    return total


def _single_input(module: nn.Module, args: tuple, kwargs: dict) -> Tensor:
    if len(args) != 1 or kwargs or not isinstance(args[0], Tensor):
        raise ConfigError(f"{type(module).__name__} called with {len(args)} positional and "
                          f"{len(kwargs)} keyword arguments; DP-SGD supports the single tensor "
                          "input of its forward")
    return args[0]


def _ghost_cheaper(positions: int, d_in: int, d_out: int) -> bool:
    """Ghost norm cost ``T^2 (d_in + d_out)`` against materializing ``T d_in d_out``."""
    return positions * (d_in + d_out) < d_in * d_out


def _ghost_sq_norms(a: Tensor, g: Tensor) -> Tensor:
    """``||sum_t g_t a_t^T||_F^2 = <A A^T, G G^T>_F`` per example (summed over any groups)
    for ``a``: (B, ..., T, d_in) and ``g``: (B, ..., T, d_out), without building the sum."""
    aa = torch.matmul(a, a.transpose(-1, -2))
    gg = torch.matmul(g, g.transpose(-1, -2))
    return (aa * gg).flatten(1).sum(1)


class LinearRule(Rule):
    """``nn.Linear`` on inputs ``(B, ..., d_in)`` (positions are the middle dimensions)."""

    def forward(self, module: nn.Module, args: tuple, kwargs: dict) -> Tensor:
        x = _single_input(module, args, kwargs)
        return F.linear(x, module.weight.detach(), _detached(module.bias))

    @staticmethod
    def _ag(rec: Record) -> tuple[Tensor, Tensor]:
        """``a``, ``g`` as (B, d) for one position, else (B, T, d)."""
        ag = rec.cache.get("ag")
        if ag is None:
            x, g = rec.inputs[0], rec.grads[0]
            if x.dim() > 3:
                x = x.reshape(x.shape[0], -1, x.shape[-1])
                g = g.reshape(g.shape[0], -1, g.shape[-1])
            ag = rec.cache["ag"] = (x, g)
        return ag

    def per_example(self, rec: Record, name: str) -> Tensor:
        key = "pe_" + name
        out = rec.cache.get(key)
        if out is None:
            a, g = self._ag(rec)
            if name == "bias":
                out = g if g.dim() == 2 else g.sum(1)
            elif a.dim() == 2:
                out = g[:, :, None] * a[:, None, :]
            else:
                out = torch.matmul(g.transpose(1, 2), a)
            out = rec.cache[key] = out
        return out

    def sq_norm(self, rec: Record, names: Sequence[str]) -> Tensor:
        a, g = self._ag(rec)
        if a.dim() == 2:  # ||g a^T||^2 + ||g||^2 = ||g||^2 (||a||^2 + 1)
            g2 = torch.linalg.vector_norm(g, dim=1).square_()
            if "weight" not in names:
                return g2
            a2 = torch.linalg.vector_norm(a, dim=1).square_()
            return torch.addcmul(g2, g2, a2) if "bias" in names else a2.mul_(g2)
        return _sum(g.sum(1).square().sum(1) if name == "bias"
                    else _ghost_sq_norms(a, g)
                    if _ghost_cheaper(a.shape[1], a.shape[2], g.shape[2])
                    else self.per_example(rec, name).flatten(1).square().sum(1)
                    for name in names)

    def add_sq_norm_host(self, rec: Record, names: Sequence[str], acc: np.ndarray) -> bool:
        """One position on the CPU: ``acc_i += ||g_i||^2 (||a_i||^2 + [bias])`` (without the
        ``||a_i||^2`` term if the weight is not differentiated) in one compiled pass."""
        a, g = self._ag(rec)
        kind = _SQ_NORM_KERNELS.get(g.dtype)
        if a.dim() != 2 or kind is None or a.dtype != g.dtype or a.device.type != "cpu" \
                or g.device.type != "cpu" or a.stride(1) != 1 or g.stride(1) != 1:
            return False
        fn = _native.kernel(kind)
        if fn is None:
            return False
        if "weight" in names:  # the a-term, and +1 for the bias's ||g_i||^2
            din, bias = a.shape[1], float("bias" in names)
        else:  # the bias alone: ||g_i||^2 = ||g_i||^2 (0 + 1)
            din, bias = 0, 1.0
        fn(a.data_ptr(), g.data_ptr(), g.shape[0], din, g.shape[1], a.stride(0), g.stride(0),
           bias, acc.ctypes.data)
        return True

    def add_weighted_sum(self, rec: Record, name: str, coef: Tensor, out: Tensor) -> None:
        if "pe_" + name in rec.cache:
            return super().add_weighted_sum(rec, name, coef, out)
        a, g = self._ag(rec)
        if name == "bias":  # sum_i c_i sum_t g_it
            out.addmv_((g if g.dim() == 2 else g.sum(1)).t(), coef)
            return None
        if g.dim() == 2:  # sum_i c_i g_i a_i^T: the smaller of g, a scaled
            col = coef.unsqueeze(1)
            if a.shape[1] < g.shape[1]:
                out.addmm_(g.t(), a * col)
            else:
                out.addmm_((g * col).t(), a)
        else:
            gc = g * coef[:, None, None]
            out.addmm_(gc.reshape(-1, gc.shape[-1]).t(), a.reshape(-1, a.shape[-1]))
        return None


class ConvRule(Rule):
    """``nn.Conv1d`` / ``nn.Conv2d`` / ``nn.Conv3d`` (any padding mode, stride, dilation,
    groups).

    Per-example weight gradients come from one grouped convolution backward with the batch
    folded into the groups (Rochette, Manoel & Tramel 2019), ghost norms from the unfolded
    input (1-d and 2-d) when cheaper, and the clipped sum from the convolution's own weight
    backward applied to the scaled ``g`` — the same kernel as a non-private step.
    """

    def forward(self, module: nn.Module, args: tuple, kwargs: dict) -> Tensor:
        x = _single_input(module, args, kwargs)
        return module._conv_forward(x, module.weight.detach(), _detached(module.bias))

    @staticmethod
    def _padded(rec: Record) -> tuple[Tensor, tuple[int, ...]]:
        """The input with non-zero or string padding applied, and the remaining padding."""
        m, x = rec.module, rec.inputs[0]
        if isinstance(m.padding, str) or m.padding_mode != "zeros":
            mode = "constant" if m.padding_mode == "zeros" else m.padding_mode
            x = F.pad(x, m._reversed_padding_repeated_twice, mode=mode)
            return x, (0,) * len(m.kernel_size)
        return x, tuple(m.padding)

    @staticmethod
    def _weight_grad(m: nn.Module, x: Tensor, g: Tensor, padding: tuple[int, ...],
                     groups: int, shape: tuple[int, ...]) -> Tensor:
        nd = len(m.kernel_size)
        return torch.ops.aten.convolution_backward(
            g, x, x.new_empty(shape), None, m.stride, padding, m.dilation, False, (0,) * nd,
            groups, (False, True, False))[1]

    def per_example(self, rec: Record, name: str) -> Tensor:
        key = "pe_" + name
        out = rec.cache.get(key)
        if out is not None:
            return out
        m, g = rec.module, rec.grads[0]
        b = g.shape[0]
        if name == "bias":
            out = g.flatten(2).sum(2)
        elif b == 0:
            out = g.new_zeros((0, *m.weight.shape))
        else:
            x, padding = self._padded(rec)
            folded = self._weight_grad(
                m, x.reshape(1, -1, *x.shape[2:]), g.reshape(1, -1, *g.shape[2:]), padding,
                b * m.groups, (b * m.weight.shape[0], *m.weight.shape[1:]))
            out = folded.view(b, *m.weight.shape)
        rec.cache[key] = out
        return out

    def _unfolded(self, rec: Record) -> tuple[Tensor, Tensor]:
        """``a``: (B, G, d_in, L) unfolded input, ``g``: (B, G, d_out, L)."""
        m = rec.module
        x, padding = self._padded(rec)
        g = rec.grads[0]
        kernel, stride, dilation = m.kernel_size, m.stride, m.dilation
        if len(kernel) == 1:
            x, g = x.unsqueeze(2), g.unsqueeze(2)
            kernel, stride = (1, *kernel), (1, *stride)
            dilation, padding = (1, *dilation), (0, *padding)
        b = x.shape[0]
        a = F.unfold(x, kernel, dilation=dilation, padding=padding, stride=stride)
        a = a.reshape(b, m.groups, -1, a.shape[-1])
        return a, g.reshape(b, m.groups, -1, a.shape[-1])

    def sq_norm(self, rec: Record, names: Sequence[str]) -> Tensor:
        return _sum(self._ghost_sq_norm(rec) if self._ghost(rec, name)
                    else self.per_example(rec, name).flatten(1).square().sum(1)
                    for name in names)

    @staticmethod
    def _ghost(rec: Record, name: str) -> bool:
        m, g = rec.module, rec.grads[0]
        positions = g[0].numel() // g.shape[1] if g.shape[0] else 0
        return name == "weight" and len(m.kernel_size) <= 2 and \
            _ghost_cheaper(positions, m.weight[0].numel(), m.weight.shape[0] // m.groups)

    def _ghost_sq_norm(self, rec: Record) -> Tensor:
        a, g = self._unfolded(rec)
        return _ghost_sq_norms(a.transpose(-1, -2), g.transpose(-1, -2))

    def add_weighted_sum(self, rec: Record, name: str, coef: Tensor, out: Tensor) -> None:
        if "pe_" + name in rec.cache:
            return super().add_weighted_sum(rec, name, coef, out)
        m, g = rec.module, rec.grads[0]
        if name == "bias":
            out.addmv_(g.flatten(2).sum(2).t(), coef)
            return None
        x, padding = self._padded(rec)
        scaled = g * coef.view(-1, *([1] * (g.dim() - 1)))
        out.add_(self._weight_grad(m, x, scaled, padding, m.groups, tuple(m.weight.shape)))
        return None


class EmbeddingRule(Rule):
    """``nn.Embedding``: scatter-added rows; padding rows receive no gradient."""

    def forward(self, module: nn.Module, args: tuple, kwargs: dict) -> Tensor:
        ids = _single_input(module, args, kwargs)
        m = module
        return F.embedding(ids, m.weight.detach(), m.padding_idx, m.max_norm, m.norm_type,
                           False, m.sparse)

    def _ids_g(self, rec: Record) -> tuple[Tensor, Tensor]:
        out = rec.cache.get("ids_g")
        if out is None:
            ids, g = rec.inputs[0], rec.grads[0]
            b, dim = ids.shape[0], g.shape[-1]
            ids, g = ids.reshape(b, -1), g.reshape(b, -1, dim)
            if rec.module.padding_idx is not None:
                g = g * (ids != rec.module.padding_idx).unsqueeze(-1)
            out = rec.cache["ids_g"] = (ids, g)
        return out

    def sq_norm(self, rec: Record, names: Sequence[str]) -> Tensor:
        ids, g = self._ids_g(rec)
        if ids.shape[1] == 1:
            return g.square().sum((1, 2))
        same = ids.unsqueeze(2) == ids.unsqueeze(1)
        return (torch.matmul(g, g.transpose(1, 2)) * same).sum((1, 2))

    def per_example(self, rec: Record, name: str) -> Tensor:
        ids, g = self._ids_g(rec)
        b, dim = g.shape[0], g.shape[-1]
        out = g.new_zeros(b, rec.module.num_embeddings, dim)
        return out.scatter_add_(1, ids.unsqueeze(-1).expand(-1, -1, dim), g)

    def add_weighted_sum(self, rec: Record, name: str, coef: Tensor, out: Tensor) -> None:
        ids, g = self._ids_g(rec)
        out.index_add_(0, ids.reshape(-1), (g * coef[:, None, None]).reshape(-1, g.shape[-1]))


class NormRule(Rule):
    """LayerNorm, GroupNorm, RMSNorm: ``y = x_hat * weight + bias`` per element."""

    def forward(self, module: nn.Module, args: tuple, kwargs: dict) -> Tensor:
        x = _single_input(module, args, kwargs)
        m = module
        w, b = _detached(m.weight), _detached(getattr(m, "bias", None))
        if isinstance(m, nn.GroupNorm):
            return F.group_norm(x, m.num_groups, w, b, m.eps)
        if isinstance(m, nn.LayerNorm):
            return F.layer_norm(x, m.normalized_shape, w, b, m.eps)
        return F.rms_norm(x, m.normalized_shape, w, m.eps)

    def per_example(self, rec: Record, name: str) -> Tensor:
        key = "pe_" + name
        out = rec.cache.get(key)
        if out is not None:
            return out
        m, x, g = rec.module, rec.inputs[0], rec.grads[0]
        if isinstance(m, nn.GroupNorm):
            reduce = tuple(range(2, x.dim()))
        else:
            reduce = tuple(range(1, x.dim() - len(m.normalized_shape)))
        if name == "weight":
            if isinstance(m, nn.GroupNorm):
                x_hat = F.group_norm(x, m.num_groups, None, None, m.eps)
            elif isinstance(m, nn.LayerNorm):
                x_hat = F.layer_norm(x, m.normalized_shape, None, None, m.eps)
            else:
                x_hat = F.rms_norm(x, m.normalized_shape, None, m.eps)
            g = g * x_hat
        out = g.sum(reduce) if reduce else g
        out = rec.cache[key] = out.reshape(x.shape[0], *getattr(m, name).shape)
        return out


class FunctionalRule(Rule):
    """Any other layer: ``G_i`` by ``vmap`` of the vector-Jacobian product on example i.

    Positional tensor arguments carry the batch in dimension 0; keyword arguments are
    shared by all examples. The layer is re-run once per example (as a batch of one), so
    its forward must be deterministic: dropout inside it is an error.
    """

    def __init__(self, names: Sequence[str]) -> None:
        self.names = tuple(names)

    def forward(self, module: nn.Module, args: tuple, kwargs: dict) -> Any:
        params = {n: module.get_parameter(n).detach() for n in self.names}
        return torch.func.functional_call(module, params, args, kwargs)

    def per_example(self, rec: Record, name: str) -> Tensor:
        grads = rec.cache.get("pe")
        if grads is None:
            grads = rec.cache["pe"] = self._compute(rec)
        return grads[name]

    def _compute(self, rec: Record) -> dict[str, Tensor]:
        module, kwargs = rec.module, rec.kwargs
        # the batched tensors: positional tensors, and the tensors of positional tuples
        # (an LSTMCell's state (h, c)), each with the examples in dimension 0
        batched = [(i, None) for i, a in enumerate(rec.inputs) if isinstance(a, Tensor)]
        batched += [(i, j) for i, a in enumerate(rec.inputs) if isinstance(a, (tuple, list))
                    for j, t in enumerate(a) if isinstance(t, Tensor)]
        params = {n: module.get_parameter(n).detach() for n in self.names}

        def one(params: dict, xs: tuple, gs: tuple) -> dict:
            args = [list(a) if isinstance(a, (tuple, list)) else a for a in rec.inputs]
            for (i, j), x in zip(batched, xs):
                if j is None:
                    args[i] = x.unsqueeze(0)
                else:
                    args[i][j] = x.unsqueeze(0)
            args = [type(rec.inputs[i])(a) if isinstance(a, list) else a
                    for i, a in enumerate(args)]

            def run(p: dict) -> tuple:
                out = torch.func.functional_call(module, p, tuple(args), kwargs)
                return tuple(_tensor_leaves(out))

            _, vjp = torch.func.vjp(run, params)
            return vjp(tuple(g.unsqueeze(0) for g in gs))[0]

        xs = tuple(rec.inputs[i] if j is None else rec.inputs[i][j] for i, j in batched)
        try:
            return torch.func.vmap(one, in_dims=(None, 0, 0), randomness="error")(
                params, xs, rec.grads)
        except RuntimeError as exc:
            raise ConfigError(
                f"layer {type(module).__name__} has no per-example gradient through the "
                f"torch.func fallback ({exc}); if it uses dropout, set its dropout to 0, and if "
                "it mixes the examples of a batch, replace it") from exc


def _tensor_leaves(out: Any) -> list[Tensor]:
    """The floating-point tensors of a layer's output (a tensor or a tuple/list of them)."""
    items = out if isinstance(out, (tuple, list)) else (out,)
    return [t for t in items if isinstance(t, Tensor) and t.is_floating_point()]


_BATCH_NORMS = (nn.modules.batchnorm._BatchNorm,)
_INSTANCE_NORMS = (nn.modules.instancenorm._InstanceNorm,)
#: layers whose forward uses the parameters of their children directly: one fallback unit
OPAQUE = (nn.MultiheadAttention,)

_RULES: list[tuple[type, Any, Rule]] = [
    (nn.Linear, nn.Linear.forward, LinearRule()),
    (nn.Conv1d, nn.Conv1d.forward, ConvRule()),
    (nn.Conv2d, nn.Conv2d.forward, ConvRule()),
    (nn.Conv3d, nn.Conv3d.forward, ConvRule()),
    (nn.Embedding, nn.Embedding.forward, EmbeddingRule()),
    (nn.LayerNorm, nn.LayerNorm.forward, NormRule()),
    (nn.GroupNorm, nn.GroupNorm.forward, NormRule()),
    (nn.RMSNorm, nn.RMSNorm.forward, NormRule()),
]


def check_layer(path: str, module: nn.Module) -> None:
    """Raise :class:`ConfigError` for a layer that DP-SGD cannot train privately."""
    name = f"layer {path or '<root>'!r} ({type(module).__name__})"
    if isinstance(module, _BATCH_NORMS):
        raise ConfigError(
            f"{name} is not supported: batch normalization mixes the examples of a batch, so "
            "no example has a gradient of its own to clip, and its running statistics are "
            "not private; replace it with nn.GroupNorm(num_groups, num_channels) "
            "(or nn.LayerNorm)")
    if isinstance(module, _INSTANCE_NORMS) and module.track_running_stats:
        raise ConfigError(
            f"{name} with track_running_stats=True is not supported: its running statistics "
            "are computed from the data without noise; use track_running_stats=False or "
            "nn.GroupNorm")
    if isinstance(module, nn.RNNBase):
        raise ConfigError(
            f"{name} is not supported: its fused kernel runs the whole sequence for the whole "
            "batch at once (its hidden state carries the batch in dimension 1), which the "
            "per-example gradient rules cannot split; write the recurrence as a loop over "
            "time steps of nn.GRUCell / nn.LSTMCell / nn.RNNCell (per-example gradients "
            "through the functional fallback)")
    if isinstance(module, nn.Embedding) and module.scale_grad_by_freq:
        raise ConfigError(
            f"{name} with scale_grad_by_freq=True is not supported: it scales gradients by "
            "word counts over the whole batch; use scale_grad_by_freq=False")


def rule_for(module: nn.Module, names: Sequence[str]) -> Rule:
    """The rule computing the per-example gradients of ``module``'s parameters ``names``."""
    for cls, forward, rule in _RULES:
        if isinstance(module, cls) and type(module).forward is forward:
            return rule
    return FunctionalRule(names)
