"""Links between parties on different hosts: hosts files, certificates, framed TLS links.

* :mod:`veil.net.hosts` — the hosts file (session, CA, each party's index, name, address);
* :mod:`veil.net.certs` — a CA and one certificate per party (tests, private deployments);
* :mod:`veil.net.links` — length-prefixed, bounded frames over non-blocking sockets (plain
  TCP or TLS), multiplexed by one selector; :class:`PartyTimeout` names a silent party;
* :mod:`veil.net.mesh` — mutually authenticated TLS 1.3 between the parties, and a loop
  that drives any sans-I/O protocol over the links.

The protocols (MPC, PSI, key generation) stay sans-I/O; this package only moves bytes.
"""

from veil.net.hosts import Host, Hosts, load_hosts
from veil.net.links import PartyError, PartyTimeout
from veil.net.mesh import Identity, connect, pump

__all__ = ["Host", "Hosts", "Identity", "PartyError", "PartyTimeout", "connect", "load_hosts",
           "pump"]
