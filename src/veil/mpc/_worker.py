"""Entry point of a party process of :class:`veil.mpc.runtime.ProcessRuntime`."""

import sys

from veil.mpc.runtime import _party_main

if __name__ == "__main__":
    _party_main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
