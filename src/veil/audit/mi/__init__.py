"""Mutual-information estimators, each with a documented bias and an interval.

=========== ========================== ============================================
method      data                        reference
=========== ========================== ============================================
``ksg``     continuous x and y          Kraskov, Stögbauer & Grassberger 2004
``ross``    discrete x, continuous y    Ross 2014
``plugin``  discrete x and y            maximum likelihood (+ Miller–Madow option)
``kde``     continuous x and y          Moon, Rajagopalan & Lall 1995
``mine``    continuous x and y (torch)  Belghazi et al. 2018 (Donsker–Varadhan)
``infonce`` continuous x and y (torch)  van den Oord et al. 2018 (ceiling log N)
=========== ========================== ============================================

``mutual_information(x, y)`` picks by data type when ``method="auto"``: integer, boolean or
non-numeric arrays count as discrete.
"""

from __future__ import annotations

import numpy as np

from veil._validation import check_choice
from veil.audit.mi.estimate import MIEstimate
from veil.audit.mi.kde import kde
from veil.audit.mi.knn import ksg, ross
from veil.audit.mi.neural import infonce, mine
from veil.audit.mi.plugin import plugin

METHODS = {"ksg": ksg, "ross": ross, "plugin": plugin, "kde": kde, "mine": mine,
           "infonce": infonce}


def _discrete(values) -> bool:
    return np.asarray(values).dtype.kind in "biuUSOb"


def mutual_information(x, y, *, method: str = "auto", **options) -> MIEstimate:
    """Estimate I(X; Y) in nats from paired samples ``x`` (n,) / (n, dx) and ``y``.

    ``method`` is one of ``auto``, ``ksg``, ``ross``, ``plugin``, ``kde``, ``mine``,
    ``infonce``; ``options`` go to that estimator (``k``, ``bootstrap``, ``confidence``,
    ``rng``, ...). With ``auto``: both discrete -> plugin, one discrete -> ross (the
    discrete side first), else ksg.
    """
    check_choice(method, "method", ["auto", *METHODS])
    if method == "auto":
        dx, dy = _discrete(x), _discrete(y)
        if dx and dy:
            method = "plugin"
        elif dx or dy:
            return ross(x, y, **options) if dx else ross(y, x, **options)
        else:
            method = "ksg"
    return METHODS[method](x, y, **options)


__all__ = ["MIEstimate", "mutual_information", "ksg", "ross", "plugin", "kde", "mine",
           "infonce"]
