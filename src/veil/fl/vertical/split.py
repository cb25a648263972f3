"""Split learning for vertically partitioned data (vertical neural networks, PyTorch).

Each feature holder k has a *bottom* network f_k; the label holder has the *top* network
g (and usually a bottom of its own for its own features). One mini-batch B:

1. top -> bottoms: epoch, batch number, row indices of B (aligned rows, see
   :mod:`veil.fl.vertical.align`);
2. bottom k -> top: the cut-layer embeddings ``h_k = f_k(X_k[B])`` (optionally clipped
   and noised, below);
3. top: ``loss = CE(g([h_1, ..., h_K]), y_B)``, back-propagates, steps g and sends each
   bottom ``dloss / dh_k``;
4. bottom k: back-propagates that gradient through f_k and steps (Vepakomma, Gupta,
   Swedish & Raskar, "Split learning for health", 2018; the vertical "U-shape-free"
   variant with labels at the top).

Threat model: semi-honest parties. The top sees embeddings, not features; bottoms see
gradients of the loss, which leak labels (Li et al., "Label leakage and protection in
two-party split learning", ICLR 2022) - hence the options:

* **Label DP** (``label_epsilon``, the top's :class:`~veil.dp.Ledger`): every label is
  randomized once before training (:mod:`veil.fl.vertical.label_dp`: K-ary randomized
  response, or with ``label_prior=True`` Ghazi et al.'s two-stage RRWithPrior: the first
  half of the epochs trains on a random half of the rows with RR labels, the model's
  predictions on the other half are the priors of their RRWithPrior). Each label is
  randomized exactly once by an epsilon-DP mechanism, so the whole run - gradients sent
  to the bottoms and the trained model - is epsilon-label-DP (post-processing); the
  ledger is charged one event before any label is drawn.
* **Embedding noise** (``clip``, ``noise_multiplier`` at a bottom): each embedding row is
  clipped to L2 norm ``clip`` and released with Gaussian noise of standard deviation
  ``noise_multiplier * clip`` on a grid (:func:`veil.dp.samplers.rounded_gaussian`).
  Neighbour relation: **replace-one row** of the bottom's features (the aligned rows, whose
  number is known to both sides). One pass over the rows (an epoch, or the prior pass)
  releases each row at most once - the bottom enforces it: a row the top asks for a
  second time in a pass is refused (a ProtocolError), since k noisy copies of one row
  average to noise sigma / sqrt(k) for one charge. Replacing one row moves its embedding
  by at most ``2 clip`` and no other row's, so each pass is a Gaussian mechanism with
  noise multiplier ``noise_multiplier / 2`` (Dwork & Roth 2014, Thm. A.1): the bottom's
  ledger is charged its ``passes`` such events as one plan when the first pass begins,
  and each pass (the top's ``(pass, epoch)``; each new one counts towards ``passes``) is
  recorded as a step of that plan before its noise is drawn. That certificate holds for a
  *fixed* bottom network (``train=False``: a pretrained or public feature extractor):
  when f_k is trained on the same rows, later embeddings depend on other rows through
  the weights, which the per-pass accounting does not cover, so a trained bottom accepts
  noise only without a ledger, as an uncertified defence against feature reconstruction.
"""

from __future__ import annotations

import copy
import logging
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from dp_accounting import dp_event as de

from veil._optional import require
from veil._validation import check_array, check_fitted, check_int, check_positive
from veil.dp import Ledger
from veil.errors import (
    BudgetExceededError,
    ConfigError,
    DataError,
    ProtocolError,
)
from veil.fl.messages import encode
from veil.fl.vertical._noise import grid_gaussian
from veil.fl.vertical._wire import read_message
from veil.fl.vertical.label_dp import label_event, randomize_labels, rr_with_prior
from veil.learn.public import PublicFactWarning
from veil.random import check_rng

__all__ = ["SplitBottom", "SplitTop", "SplitNN", "mlp", "seed_networks", "split_classes",
           "train_split"]

log = logging.getLogger(__name__)


def _torch() -> Any:
    return require("torch", "torch", "split learning")


def _array(msg: dict, name: str, shape: tuple, party: str) -> np.ndarray:
    value = msg.get(name)
    if not (isinstance(value, np.ndarray) and value.dtype == np.float32
            and value.shape == shape and np.all(np.isfinite(value))):
        got = getattr(value, "shape", type(value).__name__)
        raise ProtocolError(f"message from {party!r}: field {name!r} is {got}; expected a "
                            f"finite float32 array of shape {shape}")
    return value


def split_classes(classes: int | None, y: np.ndarray, label_epsilon: float | None,
                  owner: str) -> int:
    """K, the number of classes (labels 0..K-1) of the top network and of label DP's
    randomized response: ``classes`` as declared (public schema knowledge; a label outside
    0..K-1 is a DataError, before anything is charged). ``None`` reads it from the labels,
    with a warning, and is refused under label DP: one relabelled record could widen the
    randomized response's domain and the model's output."""
    if classes is not None:
        k = check_int(classes, "classes", low=2)
        if y.size and (y.min() < 0 or y.max() >= k):    # names no label of the data
            raise DataError(f"{owner}: y holds labels outside the declared classes={k} "
                            f"(allowed: 0..{k - 1})")
        return k
    if label_epsilon is not None:
        raise ConfigError(f"{owner}: classes=None is not allowed with label_epsilon: declare "
                          "classes=K (labels 0..K-1, public), never read from the labels")
    warnings.warn(f"{owner}: the number of classes is read from the labels (classes=None); "
                  "declare classes=K to keep it out of the model", PublicFactWarning,
                  stacklevel=3)
    return int(max(2, y.max() + 1))


class SplitBottom:
    """A feature holder's bottom network (sans-I/O): rows in, embeddings out, gradient in.

    ``module``: a torch module mapping (n, d_k) float32 features to (n, m_k) embeddings
    (copied). ``passes``: how many passes over the rows this party agreed to release
    (its own plan: epochs, plus one for the prior pass of RRWithPrior); each row is
    served at most once per pass. ``rng``: the embedding noise (None: the CSPRNG; a seed
    only in tests).
    """

    #: the neighbour relation of the embedding noise's certificate (module docstring)
    relation = "replace-one row of this party's features"

    def __init__(self, name: str, X: Any, module: Any, *, learning_rate: float = 1e-3,
                 train: bool = True, clip: float | None = None, noise_multiplier: float = 0.0,
                 ledger: Ledger | None = None, passes: int = 10, rng: Any = None) -> None:
        torch = _torch()
        self.name = str(name)
        # astype copies: a read-only array (a pandas view) would make torch warn
        self._X = torch.as_tensor(check_array(X, f"X of {self.name!r}", ndim=2)
                                  .astype(np.float32))
        self.module = copy.deepcopy(module)
        self.train = bool(train)
        self.passes = check_int(passes, "passes", low=1)
        self.noise_multiplier = check_positive(noise_multiplier, "noise_multiplier",
                                               allow_zero=True)
        self.clip = None if clip is None else check_positive(clip, "clip")
        if self.noise_multiplier and self.clip is None:
            raise ConfigError("noise_multiplier needs clip= (the L2 bound of an embedding)")
        if ledger is not None and not self.noise_multiplier:
            raise ConfigError("ledger= charges embedding noise: set noise_multiplier > 0")
        if ledger is not None and self.train:
            raise ConfigError("embedding noise is certified for a fixed bottom network only "
                              "(train=False); a trained bottom may add noise without a ledger "
                              "(uncertified), see veil.fl.vertical.split")
        self._event = de.GaussianDpEvent(self.noise_multiplier / 2.0)  # one pass
        if ledger is not None and not ledger.fits(de.SelfComposedDpEvent(self._event,
                                                                         self.passes)):
            raise BudgetExceededError(f"{self.passes} passes of embedding noise with "
                                      f"noise_multiplier={noise_multiplier} do not fit the "
                                      f"ledger of {self.name!r}; nothing was charged")
        self._ledger = ledger
        self._plan: Any = None   # the passes, planned on the ledger at the first one
        self._rng = check_rng(rng)
        self._opt = torch.optim.Adam(self.module.parameters(),
                                     lr=check_positive(learning_rate, "learning_rate")) \
            if self.train else None
        self._pass: tuple | None = None
        self._passes_seen = 0
        self._served = np.zeros(self.n_samples, dtype=bool)  # rows released in this pass
        self._pending: tuple | None = None   # (step, output tensor, rows)

    @property
    def n_samples(self) -> int:
        return int(self._X.shape[0])

    def _clipped(self, h: Any) -> Any:
        """Each row scaled to L2 norm at most ``clip`` (differentiable)."""
        if self.clip is None:
            return h
        norms = h.detach().norm(dim=1, keepdim=True).clamp_min(1e-12)
        return h * _torch().clamp(self.clip / norms, max=1.0)

    def _noisy(self, h: Any) -> np.ndarray:
        """The released embeddings (with noise of standard deviation noise_multiplier *
        clip, see :func:`~veil.fl.vertical._noise.grid_gaussian`)."""
        out = h.detach().numpy().astype(np.float64)
        if self.noise_multiplier:
            out = grid_gaussian(out, self.noise_multiplier * self.clip, self._rng)
        return np.asarray(out, dtype=np.float32)

    def forward(self, message: bytes) -> bytes:
        """The top's batch message -> this party's embeddings of those rows."""
        msg = read_message(message, "batch", "top")
        step = (msg.get("pass"), msg.get("epoch"), msg.get("batch"))
        if not (isinstance(step[0], str) and all(isinstance(s, int) and
                                                  not isinstance(s, bool) for s in step[1:])):
            raise ProtocolError("message from 'top': the pass, epoch and batch are malformed")
        rows = msg.get("rows")
        if not (isinstance(rows, np.ndarray) and rows.dtype == np.int64 and rows.ndim == 1
                and rows.size and rows.min() >= 0 and rows.max() < self.n_samples
                and np.unique(rows).size == rows.size):
            raise ProtocolError(f"message from 'top': rows are not distinct int64 indices in "
                                f"[0, {self.n_samples})")
        if step[:2] != self._pass:               # a new pass over the rows
            if self._passes_seen >= self.passes:
                raise ProtocolError(f"message from 'top': pass {step[:2]} is beyond the "
                                    f"{self.passes} passes {self.name!r} agreed to")
            if self._ledger is not None:
                if self._plan is None:
                    self._plan = self._ledger.plan(
                        self._event, steps=self.passes,
                        label=f"split embeddings of {self.name!r}, {self.passes} passes "
                              f"({self.relation})")
                self._plan.charge(self._event, label=f"split embeddings of {self.name!r}, "
                                                     f"pass {self._passes_seen}")
            self._pass = step[:2]
            self._passes_seen += 1
            self._served[:] = False
        elif self._served[rows].any():
            raise ProtocolError(f"message from 'top': {int(self._served[rows].sum())} of the "
                                f"rows were already served in pass {step[:2]}; "
                                f"{self.name!r} releases each row once per pass")
        self._served[rows] = True
        training = step[0] == "train" and self.train
        h = self._cut(rows, training)
        released = self._noisy(h)
        self._pending = (step, h, rows) if training else None
        return encode({"stage": "embeddings", "party": self.name, "step": list(step),
                       "h": released})

    def backward(self, message: bytes) -> None:
        """The top's gradient with respect to this party's embeddings -> one step."""
        msg = read_message(message, "gradient", "top")
        if not self.train:
            return  # a fixed bottom learns nothing
        if self._pending is None:
            raise ProtocolError(f"message from 'top': {self.name!r} expects no gradient now")
        step, h, rows = self._pending
        if h is None:       # pickled since forward (__getstate__): the same weights and rows
            h = self._cut(rows, True)
        if msg.get("step") != list(step):
            raise ProtocolError(f"message from 'top': gradient for {msg.get('step')!r}; "
                                f"{self.name!r} is at {list(step)}")
        grad = _array(msg, "grad", tuple(h.shape), "top")
        torch = _torch()
        self._opt.zero_grad()
        h.backward(torch.as_tensor(grad))
        self._opt.step()
        self._pending = None

    def _cut(self, rows: np.ndarray, training: bool) -> Any:
        """The clipped cut-layer output of ``rows`` (with its autograd graph if training)."""
        torch = _torch()
        self.module.train(training)
        with torch.set_grad_enabled(training):
            return self._clipped(self.module(self._X[torch.as_tensor(rows)]))

    def __getstate__(self) -> dict[str, Any]:
        """A bottom moving to another process (a Flower node keeps its party pickled
        between messages): the cut layer's autograd graph does not survive a pickle, so a
        pending step keeps its rows and :meth:`backward` recomputes the output (the
        forward pass is deterministic: the same weights and rows give the same output)."""
        state = self.__dict__.copy()
        if self._pending is not None:
            state["_pending"] = (self._pending[0], None, self._pending[2])
        return state

    def embed(self, X: Any) -> np.ndarray:
        """Embeddings of new rows for inference (clipped, without noise: not a release)."""
        torch = _torch()
        X = torch.as_tensor(check_array(X, f"X of {self.name!r}", ndim=2).astype(np.float32))
        self.module.eval()
        with torch.no_grad():
            return self._clipped(self.module(X)).numpy().astype(np.float32)


class SplitTop:
    """The label holder's top network (sans-I/O): drives batches, computes the loss.

    ``y``: integer labels 0..classes-1. ``label_epsilon`` with ``ledger``: label DP (module
    docstring); ``label_prior=True``: two-stage RRWithPrior instead of plain RR. ``rng``:
    batch order (simulation); ``noise_rng``: label randomization (None: the CSPRNG).
    """

    #: the neighbour relation of label DP's certificate (the features are not protected)
    relation = "replace-one label"

    def __init__(self, y: Any, bottoms: Sequence[str], module: Any, *, classes: int,
                 epochs: int = 10, batch_size: int = 256, learning_rate: float = 1e-3,
                 label_epsilon: float | None = None, label_prior: bool = False,
                 ledger: Ledger | None = None, rng: Any = None, noise_rng: Any = None
                 ) -> None:
        torch = _torch()
        self.classes = check_int(classes, "classes", low=2)
        y = check_array(y, "y", ndim=1, dtype=np.int64)
        if y.min() < 0 or y.max() >= self.classes:
            raise DataError(f"y holds labels outside 0..{self.classes - 1}")
        self.bottoms = [str(b) for b in bottoms]
        if not self.bottoms or len(set(self.bottoms)) != len(self.bottoms):
            raise ConfigError(f"bottoms={list(bottoms)!r}: need distinct names, at least one")
        self.epochs = check_int(epochs, "epochs", low=1)
        self.batch_size = check_int(batch_size, "batch_size", low=1)
        self.module = copy.deepcopy(module)
        self._opt = torch.optim.Adam(self.module.parameters(),
                                     lr=check_positive(learning_rate, "learning_rate"))
        self._rng = check_rng(rng)              # batch order, the stages' split
        self._noise_rng = check_rng(noise_rng)  # label randomization: the CSPRNG unless tests
        self.label_epsilon = label_epsilon
        self.label_prior = bool(label_prior)
        n = y.size
        self._rows_of_stage = [np.arange(n, dtype=np.int64)]
        self._y = y
        if label_epsilon is not None:
            if not isinstance(ledger, Ledger):
                raise ConfigError("label_epsilon needs ledger= (the label holder's Ledger)")
            if self.label_prior:
                if self.epochs < 2:
                    raise ConfigError("label_prior=True needs epochs >= 2 (two stages)")
                ledger.charge(label_event(label_epsilon), label="split labels (RRWithPrior)")
                perm = self._rng.permutation(n).astype(np.int64)
                first, self._later = np.sort(perm[: n // 2]), np.sort(perm[n // 2:])
                self._y = y.copy()
                uniform = np.full((first.size, self.classes), 1.0 / self.classes)
                self._y[first] = rr_with_prior(y[first], uniform, label_epsilon,
                                               rng=self._noise_rng)
                self._true_later = y[self._later]
                self._rows_of_stage = [first, np.arange(n, dtype=np.int64)]
            else:
                self._y = randomize_labels(y, self.classes, label_epsilon, ledger,
                                           rng=self._noise_rng)
        elif label_prior:
            raise ConfigError("label_prior=True needs label_epsilon")
        self._queue: list[tuple] = []
        self._epoch = -1
        self._step: tuple | None = None
        self._dims: dict[str, int] = {}
        self.history_: list[float] = []
        self._losses: list[float] = []

    @property
    def passes(self) -> int:
        """Passes over the rows the bottoms release (epochs, + the prior pass)."""
        return self.epochs + (1 if self.label_prior and self.label_epsilon is not None else 0)

    def _plan_epoch(self) -> None:
        self._epoch += 1
        stage = 0 if len(self._rows_of_stage) == 1 or self._epoch < self.epochs // 2 else 1
        if stage == 1 and self._epoch == self.epochs // 2:
            self._queue.append(("prior", self._epoch, 0, self._later))
        rows = self._rows_of_stage[stage]
        perm = rows[self._rng.permutation(rows.size)]
        for b, i in enumerate(range(0, perm.size, self.batch_size)):
            self._queue.append(("train", self._epoch, b, perm[i:i + self.batch_size]))

    def next_batch(self) -> bytes | None:
        """The next batch message for every bottom, or None when training is done."""
        if not self._queue:
            if self._losses:
                self.history_.append(float(np.mean(self._losses)))
                self._losses = []
            if self._epoch + 1 >= self.epochs:
                return None
            self._plan_epoch()
        kind, epoch, batch, rows = self._queue.pop(0)
        self._step = (kind, epoch, batch, rows)
        return encode({"stage": "batch", "pass": kind, "epoch": epoch, "batch": batch,
                       "rows": rows})

    def step(self, embeddings: dict[str, bytes]) -> dict[str, bytes] | None:
        """All bottoms' embeddings -> one gradient message per bottom, or None after the
        prior pass (nothing to learn from it)."""
        torch = _torch()
        if self._step is None or set(embeddings) != set(self.bottoms):
            raise ProtocolError(f"embeddings from {sorted(embeddings)}; the top expects one "
                                f"message from each of {self.bottoms}")
        kind, epoch, batch, rows = self._step
        parts = []
        for name in self.bottoms:
            msg = read_message(embeddings[name], "embeddings", name)
            if msg.get("party") != name or msg.get("step") != [kind, epoch, batch]:
                raise ProtocolError(f"message from {name!r}: embeddings for "
                                    f"{msg.get('step')!r}, expected {[kind, epoch, batch]}")
            h = msg.get("h")
            dim = self._dims.setdefault(name, getattr(h, "shape", (0, 0))[-1] or -1)
            parts.append(torch.tensor(_array(msg, "h", (rows.size, dim), name),
                                      requires_grad=kind == "train"))
        z = torch.cat(parts, dim=1)
        if kind == "prior":
            self.module.eval()
            with torch.no_grad():
                prior = torch.softmax(self.module(z), dim=1).numpy().astype(np.float64)
            self._y[rows] = rr_with_prior(self._true_later, prior, self.label_epsilon,
                                          rng=self._noise_rng)
            return None
        self.module.train()
        loss = torch.nn.functional.cross_entropy(self.module(z),
                                                 torch.as_tensor(self._y[rows]))
        self._opt.zero_grad()
        loss.backward()
        self._opt.step()
        self._losses.append(float(loss.detach()))
        return {name: encode({"stage": "gradient", "step": [kind, epoch, batch],
                              "grad": p.grad.numpy().astype(np.float32)})
                for name, p in zip(self.bottoms, parts)}

    def logits(self, embeddings: Sequence[np.ndarray]) -> np.ndarray:
        """Top-network logits for the bottoms' inference embeddings (in bottom order)."""
        torch = _torch()
        self.module.eval()
        with torch.no_grad():
            z = torch.cat([torch.as_tensor(h) for h in embeddings], dim=1)
            return self.module(z).numpy()


def train_split(top: SplitTop, bottoms: Sequence[SplitBottom]) -> dict[str, int]:
    """Run split learning in this process; returns the bytes each party sent."""
    sent = {"top": 0, **{b.name: 0 for b in bottoms}}
    while (batch := top.next_batch()) is not None:
        sent["top"] += len(batch) * len(bottoms)
        embeddings = {b.name: b.forward(batch) for b in bottoms}
        for name, m in embeddings.items():
            sent[name] += len(m)
        gradients = top.step(embeddings) or {}
        for b in bottoms if gradients else ():
            sent["top"] += len(gradients[b.name])
            b.backward(gradients[b.name])
    return sent


def seed_networks(rng: Any) -> None:
    """Seed torch's generator from ``rng`` before networks are initialised (simulation
    randomness: a seeded run builds the same networks wherever its parties live)."""
    _torch().manual_seed(int(check_rng(rng).integers(0, 2**31)))


def mlp(sizes: Sequence[int]) -> Any:
    """The network ``sizes[0] -> ... -> sizes[-1]``: linear layers, ReLU between them."""
    nn = _torch().nn
    layers: list[Any] = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class SplitNN:
    """A split-learning classifier with scikit-learn's API.

    ``X`` is the list of the parties' aligned feature blocks; block 0 belongs to the label
    holder (it runs that bottom itself). Each bottom is an MLP ``d_k -> hidden ->
    embedding``, the top ``sum of embeddings -> hidden -> classes`` (or pass ``bottom`` /
    ``top``: callables building modules from the input width). Noise options as in
    :class:`SplitBottom` (``clip``, ``noise_multiplier``, ``bottom_ledgers``, ``train_bottoms``)
    and :class:`SplitTop` (``label_epsilon``, ``label_prior``, ``ledger``). ``classes``: K,
    the declared number of classes (labels 0..K-1; required with ``label_epsilon``,
    :func:`split_classes`).
    """

    def __init__(self, *, hidden: int = 64, embedding: int = 16, epochs: int = 10,
                 batch_size: int = 256, learning_rate: float = 1e-3,
                 bottom: Callable[[int], Any] | None = None,
                 top: Callable[[int, int], Any] | None = None,
                 label_epsilon: float | None = None, label_prior: bool = False,
                 ledger: Ledger | None = None, clip: float | None = None,
                 noise_multiplier: float = 0.0, bottom_ledgers: Sequence[Ledger] | None = None,
                 train_bottoms: bool = True, classes: int | None = None,
                 random_state: Any = None) -> None:
        self.hidden = hidden
        self.embedding = embedding
        self.epochs = epochs
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.bottom = bottom
        self.top = top
        self.label_epsilon = label_epsilon
        self.label_prior = label_prior
        self.ledger = ledger
        self.clip = clip
        self.noise_multiplier = noise_multiplier
        self.bottom_ledgers = bottom_ledgers
        self.train_bottoms = train_bottoms
        self.classes = classes
        self.random_state = random_state

    def _blocks(self, X: Any) -> list[np.ndarray]:
        if isinstance(X, np.ndarray) or not isinstance(X, Sequence) or len(X) < 2:
            raise DataError("X must be a list of the parties' feature blocks (label holder "
                            "first), at least two")
        blocks = [check_array(x, f"X[{k}]", ndim=2) for k, x in enumerate(X)]
        if len({b.shape[0] for b in blocks}) != 1:
            raise DataError(f"X: blocks have {[b.shape[0] for b in blocks]} rows; aligned "
                            "blocks have the same rows")
        return blocks

    def fit(self, X: Sequence[Any], y: Any) -> SplitNN:
        torch = _torch()
        blocks = self._blocks(X)
        y = check_array(y, "y", ndim=1, dtype=np.int64)
        if y.size != blocks[0].shape[0]:
            raise DataError(f"y has {y.size} labels for {blocks[0].shape[0]} rows")
        classes = split_classes(self.classes, y, self.label_epsilon, "SplitNN")
        rng = check_rng(self.random_state)
        seed_networks(rng)
        make_bottom = self.bottom or (lambda d: mlp([d, self.hidden, self.embedding]))
        make_top = self.top or (lambda m, k: mlp([m, self.hidden, k]))
        names = ["guest", *(f"host{k}" for k in range(1, len(blocks)))]
        ledgers = list(self.bottom_ledgers) if self.bottom_ledgers is not None else \
            [None] * len(blocks)
        if len(ledgers) != len(blocks):
            raise ConfigError(f"bottom_ledgers has {len(ledgers)} entries for "
                              f"{len(blocks)} parties")
        modules = [make_bottom(b.shape[1]) for b in blocks]
        width = sum(int(m(torch.zeros(1, b.shape[1])).shape[1]) for m, b in zip(modules, blocks))
        top = SplitTop(y, names, make_top(width, classes), classes=classes,
                       epochs=self.epochs, batch_size=self.batch_size,
                       learning_rate=self.learning_rate, label_epsilon=self.label_epsilon,
                       label_prior=self.label_prior, ledger=self.ledger, rng=rng.spawn(1)[0])
        bottoms = [SplitBottom(name, b, m, learning_rate=self.learning_rate,
                               train=self.train_bottoms, clip=self.clip,
                               noise_multiplier=self.noise_multiplier, ledger=led,
                               passes=top.passes)            # noise: the CSPRNG
                   for name, b, m, led in zip(names, blocks, modules, ledgers)]
        self.bytes_ = train_split(top, bottoms)
        self.top_, self.bottoms_ = top, bottoms
        self.classes_ = np.arange(classes)
        return self

    def predict_proba(self, X: Sequence[Any]) -> np.ndarray:
        check_fitted(self, "top_")
        blocks = self._blocks(X)
        if len(blocks) != len(self.bottoms_):
            raise DataError(f"X has {len(blocks)} blocks; the model has "
                            f"{len(self.bottoms_)} parties")
        logits = self.top_.logits([b.embed(x) for b, x in zip(self.bottoms_, blocks)])
        e = np.exp(logits - logits.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    def predict(self, X: Sequence[Any]) -> np.ndarray:
        return self.classes_[np.argmax(self.predict_proba(X), axis=1)]

    def score(self, X: Sequence[Any], y: Any) -> float:
        return float(np.mean(self.predict(X) == np.asarray(y)))
