"""Differentially private synthetic data: marginal-based synthesizers and their evaluation.

* :class:`Schema` / :func:`load_schema`: the declared (public) columns, :mod:`~veil.synth.schema`;
* :class:`MST`, :class:`AIM`, :class:`Independent`: synthesizers that fit a graphical model
  to noisy marginals under zCDP and charge a :class:`~veil.dp.Ledger` once
  (:mod:`~veil.synth.base`, neighbours: add/remove one row);
* :func:`evaluate`: workload error, ML efficacy and a membership-inference audit
  (:mod:`~veil.synth.evaluation`).

::

    from veil.synth import AIM, Schema
    synth = AIM(schema, epsilon=1.0, delta=1e-9).fit(df, ledger=ledger)
    table = synth.sample()
"""

from veil.synth import conformance  # noqa: F401 (registers the fits in the conformance suite)
from veil.synth.aim import AIM
from veil.synth.base import Synthesizer
from veil.synth.evaluation import SynthEvaluation, coin_split, evaluate
from veil.synth.independent import Independent
from veil.synth.mst import MST
from veil.synth.schema import Column, Schema, load_schema

__all__ = ["AIM", "MST", "Independent", "Synthesizer", "Column", "Schema", "load_schema",
           "METHODS", "evaluate", "coin_split", "SynthEvaluation"]

#: the synthesizers by name (the CLI's --method)
METHODS = {"aim": AIM, "mst": MST, "independent": Independent}
