"""veil: privacy-preserving machine learning.

Differential privacy (:mod:`veil.dp`), homomorphic encryption and secret sharing
(:mod:`veil.crypto`), secure multi-party computation (:mod:`veil.mpc`), federated learning
(:mod:`veil.fl`), anonymization (:mod:`veil.anon`) and privacy audits (:mod:`veil.audit`).
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("veil")
except PackageNotFoundError:  # running from a source tree without installation
    __version__ = "0.0.0+src"

__all__ = ["__version__"]
