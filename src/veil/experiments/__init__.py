"""Reproductions of published comparisons, as runnable sweeps (``veil experiment ...``).

* :mod:`~veil.experiments.truex` -- Truex et al., "A hybrid approach to privacy-preserving
  federated learning" (AISec 2019): accuracy against epsilon for no privacy, central DP,
  local DP and the hybrid at each trust level t, on the tasks of
  :mod:`~veil.experiments.tasks`.
* :mod:`~veil.experiments.demo` -- ``veil demo``: the hybrid approach with the real
  threshold-Paillier protocol beside its baselines, every model audited.
* :mod:`~veil.experiments.membership` -- audit records decided by fair coins before
  training, scored by the loss attack; :mod:`~veil.experiments.runs` -- persisted ledgers,
  so that an experiment's output is a run directory ``veil audit`` reads.
"""

from typing import TYPE_CHECKING

from veil._lazy import lazy_exports

if TYPE_CHECKING:  # exported lazily (veil._lazy)
    from veil.experiments.tasks import DATASETS, MODELS, Task, load_task, make_learner
    from veil.experiments.truex import (
        TruexConfig,
        parse_honest,
        plot,
        run_truex,
        summarize,
        truex_run,
        write_csv,
    )

__all__ = ["DATASETS", "MODELS", "Task", "TruexConfig", "load_task", "make_learner",
           "parse_honest", "plot", "run_truex", "summarize", "truex_run", "write_csv"]

__getattr__, __dir__ = lazy_exports(__name__, __all__)
