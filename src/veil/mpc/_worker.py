"""Entry point of a party process of :class:`veil.mpc.runtime.ProcessRuntime`."""

import sys

from veil.mpc.runtime import _party_main

if __name__ == "__main__":
    # the party's authentication key arrives on standard input, never on the command line
    _party_main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.stdin.buffer.read(32))
