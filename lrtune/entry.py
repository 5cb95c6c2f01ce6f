"""The ``lrtune`` command's entry point (``lrtune`` script and ``python -m lrtune``): Ctrl-C is
handled from the first moment (:mod:`lrtune.interrupts`), before the CLI's modules import."""

from __future__ import annotations

from lrtune.interrupts import INTERRUPTED, exit_interrupted, install


def main() -> int:
    install()
    try:
        from lrtune.cli import main as cli_main

        code = cli_main()
    except KeyboardInterrupt:
        exit_interrupted()
    if code == INTERRUPTED:  # the CLI reported an interrupt raised inside a cleanup block: leave now
        exit_interrupted(say=False)
    return code
