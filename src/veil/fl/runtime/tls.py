"""TLS certificates for a Flower deployment: a self-signed CA and a server certificate.

:func:`self_signed` writes ``ca.crt`` (a CA, ECDSA P-256, self-signed) and ``server.crt``
/ ``server.key`` (the SuperLink's certificate, signed by that CA, valid for the given host
names and IP addresses) into a directory. The SuperLink serves with ``--ssl-ca-certfile
ca.crt --ssl-certfile server.crt --ssl-keyfile server.key``; every SuperNode and ``flwr``
trusts ``--root-certificates ca.crt``. For tests and private deployments: an organisation
with its own PKI uses its own certificates. The CA's private key is not kept (nothing else
can be signed with it later); the server key is written readable by its owner only. The
certificates come from :func:`veil.net.certs.issue`, which also makes the per-party
certificates of MPC, PSI and key generation across hosts.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from veil.errors import ConfigError
from veil.net.certs import issue

__all__ = ["self_signed"]


def self_signed(directory: str | os.PathLike,
                hosts: Sequence[str] = ("localhost", "127.0.0.1"),
                days: int = 30, force: bool = False) -> dict[str, Path]:
    """Write ``ca.crt``, ``server.crt`` and ``server.key`` into ``directory``; their paths
    by name (``"ca"``, ``"cert"``, ``"key"``). ``hosts``: DNS names and IP addresses the
    server certificate is valid for (the first is its common name). An existing key is
    replaced only with ``force``."""
    if not hosts:
        raise ConfigError("hosts=() is not allowed: name at least one host of the server")
    paths = issue(directory, {"server": tuple(hosts)}, ca_name="veil federation CA",
                  days=days, force=force)
    return {"ca": paths["ca"], "cert": paths["server.crt"], "key": paths["server.key"]}
