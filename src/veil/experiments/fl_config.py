"""Federated runs described in a TOML file (``veil fl run CONFIG.toml``).

Sections and keys (every key optional unless marked; unknown sections or keys are a
:class:`~veil.errors.ConfigError` naming them)::

    [data]      dataset* (adult | nursery | digits | breast_cancer | wine),
                partition (iid | dirichlet | quantity), clients, alpha, min_size,
                test_fraction (bundled sets; Adult uses UCI's own test split), path,
                bounds (each party scales its features into [-1, 1] from declared public
                bounds, veil.datasets.bounds: "dataset" (default) the data set's documented
                ranges, "none" features as loaded, or one [low, high] pair per feature)
    [model]     type (logistic_regression | softmax_regression | linear_svm), alpha
    [training]  rounds, strategy (fedavg | fedprox | hybrid), local_epochs, batch_size (0: full
                batch), learning_rate (default 0.1; 1.0 for hybrid), server_learning_rate,
                fraction, min_clients, weighted, mu
    [privacy]   epsilon*, delta, noise (central | local | distributed), clip_norm, adaptive,
                target_quantile, clip_learning_rate, accountant (rdp | pld)
    [secagg]    bits, clip_range, neighbours, threshold, min_survivors, prg, consistency,
                identities (a deployment's identity table, veil.crypto.identity; relative
                to the config file), min_cohort (fewest clients a round may have; default:
                what the sampling implies for the identity table, veil.fl.strategies.SecAgg)
    [hybrid]    honest*, noise (skellam | gaussian | laplace), key_bits, keygen (dealer |
                distributed: the parties generate the key, veil.crypto.dkg), insecure_ok,
                count_weight, max_records, packed, min_answers (n only: an encrypted sum
                needs every party's answer)
    [faults]    dropout, dropout_stage, dropout_exact, crash, straggler, latency, slowdown,
                deadline, duplicate, reorder, replay (see veil.fl.runtime.Faults)
    [audit]     canaries, norm, kind (dirac | gaussian), confidence
    [vertical]  a vertical run (same people, different columns), or
    [transfer]  a federated transfer-learning run: every setting of either is in that
                section (:mod:`veil.experiments.vertical_config`); beside it only [run] seed, out
    [run]       seed, out, workers (processes for the clients, veil.fl.runtime.workers), timeout,
                simulate_noise (draw the DP noise from the seed: a labelled simulation whose
                epsilon is not certified; results.json says so)
                (seconds a worker may take to answer a stage)

A ``[privacy]`` section makes the run differentially private: the noise multiplier is
calibrated (:func:`veil.dp.accounting.calibrate_noise`) so that all rounds together are
(epsilon, delta)-DP at the client level, and every round is charged to a ledger persisted
in the output directory. A ``[secagg]`` section turns on secure aggregation.

``strategy = "hybrid"`` trains with the hybrid approach (Truex et al. 2019,
:class:`veil.fl.strategies.Hybrid`): every round is one full-batch gradient query whose
answers are encrypted under a threshold Paillier key dealt at start (``key_bits``; a key
under 2048 bits only with ``insecure_ok = true``, for tests and demos), each of the
``clients`` parties adding the noise share for ``honest`` = t honest parties (decryption
``threshold`` = clients - t + 1: :class:`veil.dp.trust.Trust`). It needs
``[privacy]`` (epsilon, delta, clip_norm: the per-example gradient clip, accountant) and
``[hybrid]``; keys that do not apply to it --
local training ([training] local_epochs, batch_size, server_learning_rate, fraction,
min_clients, weighted, mu; [privacy] noise, adaptive, target_quantile, clip_learning_rate),
``[secagg]`` (the answers are already encrypted) and ``[audit]`` canaries (the parties are
fixed by the key) -- are refused rather than ignored.

An ``[audit]`` section adds ``canaries`` canary clients
(:mod:`veil.experiments.canary_audit`): each is in or out by a fair coin drawn before
training, an included one sends an update of L2 norm ``norm`` (default: the clip norm of
``[privacy]``, else 1) along its own direction (``kind``), and after the run the one-run
audit (Steinke, Nasr & Jagielski 2023) bounds epsilon from below at ``confidence``. A config
asking for fewer canaries than any bound at that confidence needs is refused here, before
anything runs. Canaries are clients: they count in the per-round client numbers, and the
average divides by the client count (DP-FedAvg) or the total weight (FedAvg; a canary weighs
like a mean client), so with N real clients and m canaries a ``server_learning_rate`` (N +
m) / N times larger gives the real clients the step they would have without canaries.
"""

from __future__ import annotations

import math
import os
import tomllib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from veil._validation import check_choice, check_delta, check_positive, check_probability
from veil.dp.accounting import DEFAULT_ACCOUNTANT
from veil.dp.privacy_budget import PrivacyBudget
from veil.dp.trust import Trust
from veil.errors import ConfigError, DataError
from veil.random import Generator, RngLike

__all__ = ["FLConfig", "load_config", "SCHEMA"]

_NUM = (int, float)
#: section -> key -> (allowed types, default)
SCHEMA: dict[str, dict[str, tuple[Any, Any]]] = {
    "data": {"dataset": (str, None), "partition": (str, "iid"), "clients": (int, 10),
             "alpha": (_NUM, 0.5), "min_size": (int, 1), "test_fraction": (_NUM, 0.2),
             "path": (str, None), "bounds": ((str, list), "dataset")},
    "model": {"type": (str, "logistic_regression"), "alpha": (_NUM, 1e-4)},
    "training": {"rounds": (int, 10), "strategy": (str, "fedavg"), "local_epochs": (int, 1),
                 "batch_size": (int, 32), "learning_rate": (_NUM, 0.1),
                 "server_learning_rate": (_NUM, 1.0), "fraction": (_NUM, 1.0),
                 "min_clients": (int, 1), "weighted": (bool, True), "mu": (_NUM, 0.01)},
    "privacy": {"epsilon": (_NUM, None), "delta": (_NUM, 1e-5), "noise": (str, "central"),
                "clip_norm": (_NUM, 1.0), "adaptive": (bool, False),
                "target_quantile": (_NUM, 0.5), "clip_learning_rate": (_NUM, 0.2),
                "accountant": (str, DEFAULT_ACCOUNTANT)},
    "secagg": {"bits": (int, 32), "clip_range": (_NUM, 1.0), "neighbours": (int, None),
               "threshold": (_NUM, 0.5), "min_survivors": (_NUM, None), "prg": (str, "aes-ctr"),
               "consistency": (bool, True), "identities": (str, None),
               "min_cohort": (int, None)},
    "hybrid": {"honest": (int, None), "noise": (str, "skellam"), "key_bits": (int, 2048),
               "keygen": (str, "dealer"),
               "insecure_ok": (bool, False), "count_weight": (_NUM, 0.25),
               "max_records": (int, 2 ** 16), "packed": (bool, True), "min_answers": (int, None)},
    "faults": {"dropout": (_NUM, 0.0), "dropout_stage": (str, None),
               "dropout_exact": (bool, False), "crash": (_NUM, 0.0),
               "straggler": (_NUM, 0.0), "latency": (_NUM, 0.01), "slowdown": (_NUM, 1000.0),
               "deadline": (_NUM, 1.0), "duplicate": (_NUM, 0.0), "reorder": (bool, True),
               "replay": (_NUM, 0.0)},
    "audit": {"canaries": (int, 100), "norm": (_NUM, None), "kind": (str, "dirac"),
              "confidence": (_NUM, 0.95)},
    "run": {"seed": (int, None), "out": (str, None), "workers": (int, 1),
            "timeout": (_NUM, 600.0), "simulate_noise": (bool, False)},
}
#: sections of a vertical or transfer-learning run (veil.experiments.vertical_config), each the only
#: one of its file beside [run] (seed, out)
VERTICAL_SECTIONS = frozenset({"vertical", "transfer"})
_VERTICAL_RUN_KEYS = frozenset({"seed", "out"})
_REQUIRED = {("data", "dataset"), ("privacy", "epsilon"), ("hybrid", "honest")}
#: counts that must be in [1, most], checked here so the error names the key the file spells
_COUNTS = {("data", "clients"): 100_000, ("training", "rounds"): 1_000_000,
           ("training", "local_epochs"): 10_000, ("data", "min_size"): 10**9,
           ("training", "min_clients"): 100_000}
_MODELS = ("logistic_regression", "softmax_regression", "linear_svm")
_STRATEGIES = ("fedavg", "fedprox", "hybrid")
#: what the hybrid strategy does not use (module docstring)
_NOT_HYBRID = {"training": ("local_epochs", "batch_size", "server_learning_rate", "fraction",
                            "min_clients", "weighted", "mu"),
               "privacy": ("noise", "adaptive", "target_quantile", "clip_learning_rate")}


@dataclass(frozen=True)
class FLConfig:
    """A parsed configuration: ``sections[name][key]`` with defaults filled in; a section
    absent from the file is absent here (``privacy``, ``secagg``, ``faults`` are optional)."""

    path: str
    sections: dict[str, dict[str, Any]]
    given: dict[str, frozenset[str]] = field(default_factory=dict)   # keys in the file

    def __getitem__(self, section: str) -> dict[str, Any]:
        return self.sections[section]

    def has(self, section: str) -> bool:
        return section in self.sections

    # -- building the run -------------------------------------------------------------------
    def bounds(self) -> Any:
        """The ``[data] bounds`` (:class:`veil.datasets.FeatureBounds`; None: features as
        loaded): declared, never read from the records."""
        from veil.datasets import FeatureBounds, load_xy, public_bounds

        bounds, name = self["data"]["bounds"], self["data"]["dataset"]
        if isinstance(bounds, list):
            return FeatureBounds(bounds, names=load_xy(name, path=self["data"]["path"])
                                 .feature_names, where=f"{self.path}: [data] bounds")
        check_choice(bounds, "[data] bounds", ("dataset", "none"))
        return public_bounds(name) if bounds == "dataset" else None

    def scale(self, X: np.ndarray, name: str = "X") -> np.ndarray:
        """A party's records scaled by :meth:`bounds` (each party scales its own)."""
        bounds = self.bounds()
        return X if bounds is None else bounds.scale(X, name)

    def data(self, seed: int, *, scaled: bool = True) -> tuple[
            list[tuple[np.ndarray, np.ndarray]], tuple[np.ndarray, np.ndarray], np.ndarray]:
        """The clients' (X, y), the test set, partitioned with ``seed``, and the label set
        declared by the dataset's schema (``Dataset.classes``: codes ``0..k-1``), never
        read from the clients' labels. ``scaled``: features scaled by :meth:`bounds`
        (False: the raw records each party would bring)."""
        from veil.datasets import load_xy, partition

        d = self["data"]
        name = check_choice(d["dataset"], "data.dataset",
                            ("adult", "nursery", "digits", "breast_cancer", "wine"))
        if name == "adult":
            train = load_xy("adult", split="train", path=d["path"])
            test = load_xy("adult", split="test", path=d["path"])
            X, y, X_test, y_test = train.X, train.y, test.X, test.y
            schema = train.classes
        else:
            full = load_xy(name, path=d["path"])
            X, y = full.X, full.y
            schema = full.classes
            order = Generator(seed).permutation(len(y))
            cut = int(round(len(y) * (1.0 - float(d["test_fraction"]))))
            X_test, y_test = X[order[cut:]], y[order[cut:]]
            X, y = X[order[:cut]], y[order[:cut]]
        if scaled:
            X, X_test = self.scale(X, "the training set"), self.scale(X_test, "the test set")
        kind = check_choice(d["partition"], "data.partition", ("iid", "dirichlet", "quantity"))
        rng = seed + 1
        if kind == "iid":
            parts = partition.iid(len(y), d["clients"], rng=rng)
        elif kind == "dirichlet":
            parts = partition.dirichlet(y, d["clients"], alpha=d["alpha"],
                                        min_size=d["min_size"], rng=rng)
        else:
            parts = partition.quantity_skew(len(y), d["clients"], alpha=d["alpha"],
                                            min_size=d["min_size"], rng=rng)
        return [(X[p], y[p]) for p in parts], (X_test, y_test), np.arange(len(schema))

    def model(self) -> Any:
        from veil.learn import LinearSVC, LogisticRegression, SoftmaxRegression

        m = self["model"]
        kind = check_choice(m["type"], "model.type", _MODELS)
        cls = {"logistic_regression": LogisticRegression, "softmax_regression":
               SoftmaxRegression, "linear_svm": LinearSVC}[kind]
        return cls(alpha=m["alpha"])

    def budget(self) -> PrivacyBudget | None:
        """``[privacy]`` epsilon, delta and accountant as the one
        :class:`~veil.dp.PrivacyBudget` that calibrates the strategy's noise and caps the
        run's ledger (None without ``[privacy]``)."""
        if not self.has("privacy"):
            return None
        p = self["privacy"]
        return PrivacyBudget(p["epsilon"], p["delta"], p["accountant"])

    def trust(self) -> Trust:
        """The hybrid run's :class:`~veil.dp.trust.Trust`: ``[data] clients`` parties,
        ``[hybrid] honest`` of them honest; what the dealer, the strategy, the agreement and
        the noise mechanism all use."""
        try:
            return Trust(self["data"]["clients"], self["hybrid"]["honest"])
        except ConfigError as exc:
            raise ConfigError(f"{self.path}: [hybrid] {exc}") from None

    def strategy(self, clients: list[tuple[np.ndarray, np.ndarray]], setup: Any = None) -> Any:
        """The run's strategy for ``clients``. ``setup``: for the hybrid approach, the
        public set-up of parties that hold their own key shares
        (:class:`veil.fl.hybrid.setup.PublicSetup`; default: a dealer makes the key now)."""
        from veil.fl.strategies import DPFedAvg, FedAvg, FedProx, SecAgg

        t = self["training"]
        kind = check_choice(t["strategy"], "training.strategy", _STRATEGIES)
        if kind == "hybrid":
            return self._hybrid(setup)
        weighted = t["weighted"] and not self.has("privacy")
        max_weight = max(len(y) for _, y in clients) if self.has("secagg") and weighted \
            else None
        common = dict(fraction=t["fraction"], min_clients=t["min_clients"],
                      local_epochs=t["local_epochs"], learning_rate=t["learning_rate"],
                      batch_size=t["batch_size"] or None,
                      server_learning_rate=t["server_learning_rate"], weighted=weighted,
                      max_weight=max_weight)
        strategy = FedProx(mu=t["mu"], **common) if kind == "fedprox" else FedAvg(**common)
        if self.has("privacy"):
            p = self["privacy"]
            noise = check_choice(p["noise"], "privacy.noise", ("central", "local",
                                                               "distributed"))
            if noise == "distributed" and not self.has("secagg"):
                raise ConfigError(f"{self.path}: privacy.noise='distributed' needs a [secagg] "
                                  "section (the noise shares only protect a secure sum)")
            strategy = DPFedAvg.from_budget(
                strategy, self.budget(), rounds=t["rounds"], clip_norm=p["clip_norm"],
                noise=noise,
                sample_rate=float(t["fraction"]), adaptive=p["adaptive"],
                target_quantile=p["target_quantile"],
                clip_learning_rate=p["clip_learning_rate"],
                server_learning_rate=t["server_learning_rate"])
        if self.has("secagg"):
            s = self["secagg"]
            table = s["identities"] and os.path.join(os.path.dirname(self.path),
                                                     s["identities"])
            strategy = SecAgg(strategy, bits=s["bits"], clip_range=s["clip_range"],
                              neighbours=s["neighbours"], threshold=s["threshold"],
                              min_survivors=s["min_survivors"], prg=s["prg"],
                              consistency=s["consistency"], identities=table,
                              min_cohort=s["min_cohort"])
        return strategy

    def _hybrid(self, setup: Any = None) -> Any:
        """The Hybrid strategy; without ``setup`` the dealer generates the threshold key now
        (secure randomness, whatever the run's seed)."""
        from veil.fl.hybrid.protocol import HybridKeys
        from veil.fl.strategies import Hybrid

        t, p, h = self["training"], self["privacy"], self["hybrid"]
        keys = identities = None
        if setup is not None:
            if setup.public_key.bits != h["key_bits"]:
                raise ConfigError(f"{self.path}: [hybrid] key_bits={h['key_bits']} but the "
                                  f"set-up's key has {setup.public_key.bits} bits")
            keys, identities = HybridKeys(setup.public_key, ()), setup.identities
        given = self.given.get("training", frozenset())
        learning_rate = t["learning_rate"] if "learning_rate" in given else 1.0
        return Hybrid(self.trust(), rounds=t["rounds"], budget=self.budget(),
                      noise=h["noise"], learning_rate=learning_rate,
                      clip_norm=p["clip_norm"], count_weight=h["count_weight"],
                      max_records=h["max_records"], key_bits=h["key_bits"],
                      insecure_ok=h["insecure_ok"], keygen=h["keygen"], packed=h["packed"],
                      min_answers=h["min_answers"], keys=keys, identities=identities)

    @property
    def kind(self) -> str:
        """What the run is: vertical, transfer, hybrid, dpfedavg or fedavg."""
        for name in sorted(VERTICAL_SECTIONS):
            if self.has(name):
                return name
        if self["training"]["strategy"] == "hybrid":
            return "hybrid"
        return "dpfedavg" if self.has("privacy") else "fedavg"

    def canaries(self, federation: Any, rng: RngLike = None) -> Any:
        """Add the ``[audit]`` section's canary clients to ``federation`` (before its first
        round); returns their :class:`~veil.experiments.canary_audit.CanaryClients` (None
        without one)."""
        from veil.experiments.canary_audit import add_canary_clients

        if not self.has("audit"):
            return None
        a = self["audit"]
        norm = a["norm"]
        if norm is None:
            norm = self["privacy"]["clip_norm"] if self.has("privacy") else 1.0
        return add_canary_clients(federation, a["canaries"], norm=norm, kind=a["kind"],
                                  rng=rng)

    def faults(self) -> Any:
        from veil.fl.runtime import Faults

        return Faults(**self.sections.get("faults", {}))


def load_config(path: str | os.PathLike) -> FLConfig:
    """Read and check a TOML run description (see the module docstring)."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as fh:
            raw = tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"config file {path!r} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise DataError(f"{path} is not valid TOML: {exc}") from None
    if VERTICAL_SECTIONS & set(raw):
        return _load_vertical(path, raw)
    sections: dict[str, dict[str, Any]] = {}
    for name, table in raw.items():
        if name not in SCHEMA:
            allowed = (*SCHEMA, *sorted(VERTICAL_SECTIONS))
            raise ConfigError(f"{path}: unknown section [{name}]; allowed: "
                              f"{', '.join(f'[{s}]' for s in allowed)}")
        sections[name] = _section(path, name, table)
    for name in ("data", "model", "training", "run"):
        sections.setdefault(name, {k: default for k, (_, default) in SCHEMA[name].items()})
    for section, key in _REQUIRED:
        if section in sections and sections[section][key] is None:
            raise ConfigError(f"{path}: [{section}] needs {key} = ...")
    for (section, key), most in _COUNTS.items():
        if not 1 <= sections[section][key] <= most:
            raise ConfigError(f"{path}: [{section}] {key}={sections[section][key]!r} is not "
                              f"allowed: must be an integer in [1, {most}]")
    if not 0 < sections["data"]["test_fraction"] < 1:
        raise ConfigError(f"{path}: [data] test_fraction={sections['data']['test_fraction']!r} "
                          "is not allowed: must be in (0, 1) (the share of records held out "
                          "for testing)")
    given = {name: frozenset(raw.get(name, {})) for name in sections}
    if sections["training"]["strategy"] == "hybrid" or "hybrid" in sections:
        _check_hybrid(path, sections, given)
    if "audit" in sections:
        _check_audit(path, sections["audit"], sections.get("privacy"))
    config = FLConfig(path, sections, given)
    if config.kind == "hybrid":
        config.trust()   # refused here, before anything runs
    return config


def _section(path: str, name: str, table: Any) -> dict[str, Any]:
    """One section of SCHEMA, its keys and types checked, defaults filled in."""
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: {name} must be a [{name}] table")
    schema = SCHEMA[name]
    for key, value in table.items():
        if key not in schema:
            raise ConfigError(f"{path}: unknown key {key!r} in [{name}]; allowed: "
                              f"{', '.join(schema)}")
        kinds = schema[key][0]
        kinds = kinds if isinstance(kinds, tuple) else (kinds,)
        if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
            expected = " or ".join(k.__name__ for k in kinds)
            raise ConfigError(f"{path}: [{name}] {key}={value!r} is not allowed: "
                              f"expected {expected}")
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{path}: [{name}] {key}={value!r} is not allowed: must be a "
                              "finite number")
    return {key: table.get(key, default) for key, (_, default) in schema.items()}


def _load_vertical(path: str, raw: dict[str, Any]) -> FLConfig:
    """A ``[vertical]`` or ``[transfer]`` run (module docstring): that section, checked by
    :func:`veil.experiments.vertical_config.check_section`, and ``[run]`` (seed, out) beside it."""
    from veil.experiments.vertical_config import check_section

    kinds = sorted(VERTICAL_SECTIONS & set(raw))
    if len(kinds) > 1:
        raise ConfigError(f"{path}: [vertical] and [transfer] are two runs; a file holds one")
    kind = kinds[0]
    other = sorted(set(raw) - {kind, "run"})
    if other:
        raise ConfigError(f"{path}: {', '.join(f'[{o}]' for o in other)} do(es) not apply to "
                          f"a [{kind}] run (its settings are all in [{kind}]; [run] gives "
                          "seed and out)")
    run = _section(path, "run", raw.get("run", {}))
    extra = sorted(set(raw.get("run", {})) - _VERTICAL_RUN_KEYS)
    if extra:
        raise ConfigError(f"{path}: [run] {', '.join(extra)} do(es) not apply to a [{kind}] "
                          f"run; allowed: {', '.join(sorted(_VERTICAL_RUN_KEYS))}")
    try:
        section = dict(check_section(raw[kind], kind))
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    if run["seed"] is not None:
        if "seed" in section:
            raise ConfigError(f"{path}: seed is given in both [run] and [{kind}]; keep one")
        section["seed"] = run["seed"]
    return FLConfig(path, {kind: section, "run": run},
                    {kind: frozenset(raw[kind]), "run": frozenset(raw.get("run", {}))})


def _check_hybrid(path: str, sections: dict[str, dict[str, Any]],
                  given: dict[str, frozenset[str]]) -> None:
    """A hybrid run: the sections it needs, nothing it would ignore, a secure key unless
    insecure keys are explicitly allowed (module docstring)."""
    from veil.crypto.paillier import MIN_SECURE_BITS
    from veil.dp.distributed import NOISES

    strategy = sections["training"]["strategy"]
    if strategy != "hybrid":
        raise ConfigError(f"{path}: a [hybrid] section needs [training] strategy = \"hybrid\" "
                          f"(it is {strategy!r})")
    for name in ("privacy", "hybrid"):
        if name not in sections:
            raise ConfigError(f"{path}: strategy 'hybrid' needs a [{name}] section")
    for name, why in (("secagg", "its answers are already threshold-encrypted"),
                      ("audit", "its parties are fixed by the dealt key: no canary clients")):
        if name in sections:
            raise ConfigError(f"{path}: [{name}] does not apply to strategy 'hybrid' ({why})")
    for name, keys in _NOT_HYBRID.items():
        extra = [k for k in keys if k in given[name]]
        if extra:
            raise ConfigError(f"{path}: [{name}] {', '.join(extra)} do(es) not apply to "
                              "strategy 'hybrid' (one full-batch gradient query per round, "
                              "noise shares from [hybrid])")
    h = sections["hybrid"]
    check_choice(h["noise"], "[hybrid] noise", tuple(NOISES))
    check_choice(h["keygen"], "[hybrid] keygen", ("dealer", "distributed"))
    bits = h["key_bits"]
    if bits < MIN_SECURE_BITS and not h["insecure_ok"]:
        raise ConfigError(f"{path}: [hybrid] key_bits={bits} is not allowed: keys under "
                          f"{MIN_SECURE_BITS} bits are insecure; set insecure_ok = true in "
                          "[hybrid] to use one anyway (tests and demos only)")


def _check_audit(path: str, audit: dict[str, Any], privacy: dict[str, Any] | None) -> None:
    """The [audit] values, and enough canaries for a bound at the requested confidence."""
    from veil.audit import canaries_needed

    check_choice(audit["kind"], "[audit] kind", ("dirac", "gaussian"))
    confidence = check_probability(audit["confidence"], "[audit] confidence", low_open=True,
                                   high_open=True)
    if audit["norm"] is not None:
        check_positive(audit["norm"], "[audit] norm")
    delta = check_delta(privacy["delta"]) if privacy else 0.0
    need = canaries_needed(delta=delta, confidence=confidence)
    if audit["canaries"] < need:
        raise ConfigError(f"{path}: [audit] canaries={audit['canaries']!r} is not allowed: the "
                          f"one-run audit at confidence {confidence:g} (delta={delta:g}) needs "
                          f"at least {need} canaries to bound epsilon above 0")
