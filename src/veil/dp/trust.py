"""The trust assumption of a multi-party protocol, given once: ``Trust(parties, honest)``.

veil's glossary: ``honest`` = t, the parties whose noise must suffice and who never
collude; ``threshold`` = n - t + 1, the partial decryptions a threshold key needs. A
strategy, a TOML run or a command builds one and passes it to key generation, the
agreement and the noise mechanism (Truex et al., AISec 2019). Light on purpose (no
accounting library): run configurations import it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from veil._validation import check_int
from veil.errors import ConfigError

__all__ = ["Trust", "check_trust"]


@dataclass(frozen=True)
class Trust:
    """The trust assumption of n parties: at least ``honest`` (t) of the ``parties`` (n)
    are honest and do not collude (veil's glossary: ``honest`` = t).

    Validated once, here: ``1 <= honest <= parties``. ``colluding = n - t`` parties may
    pool what they know; the noise of the t honest parties must suffice for DP, and a
    threshold key needs ``threshold = n - t + 1`` partial decryptions, so the colluders can
    never decrypt alone (Truex et al. 2019). Built once (a strategy, a TOML run, a
    command) and passed to key generation, the agreement and the noise mechanism.
    """

    parties: int
    honest: int

    def __post_init__(self) -> None:
        n = check_int(self.parties, "parties", low=1)
        object.__setattr__(self, "parties", n)
        object.__setattr__(self, "honest", check_int(self.honest, "honest (t)", low=1, high=n))

    @property
    def threshold(self) -> int:
        """n - t + 1: the partial decryptions a threshold key needs."""
        return self.parties - self.honest + 1

    @property
    def colluding(self) -> int:
        """n - t: the parties that may collude."""
        return self.parties - self.honest

    def __str__(self) -> str:
        return (f"{self.parties} parties, honest={self.honest} (threshold="
                f"{self.threshold}: any {self.threshold} of them decrypt)")


def check_trust(trust: Any, parties: int | None = None) -> Trust:
    """``trust`` if it is a :class:`Trust` (of ``parties`` parties, when given), else
    ConfigError naming it and what is allowed."""
    if isinstance(trust, Trust) and (parties is None or trust.parties == parties):
        return trust
    n = "parties" if parties is None else parties
    raise ConfigError(f"trust={trust!r} is not allowed: expected "
                      f"veil.dp.trust.Trust({n}, honest)")
