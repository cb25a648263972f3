"""Reproductions of published comparisons, as runnable sweeps (``veil experiment ...``).

* :mod:`~veil.experiments.truex` -- Truex et al., "A hybrid approach to privacy-preserving
  federated learning" (AISec 2019): accuracy against epsilon for no privacy, central DP,
  local DP and the hybrid at each trust level t, on the tasks of
  :mod:`~veil.experiments.tasks`.
"""

from veil.experiments.tasks import DATASETS, MODELS, Task, load_task, make_learner
from veil.experiments.truex import TruexConfig, parse_trust, plot, run_truex, summarize, write_csv

__all__ = ["DATASETS", "MODELS", "Task", "TruexConfig", "load_task", "make_learner",
           "parse_trust", "plot", "run_truex", "summarize", "write_csv"]
