"""The graph-optimizer flags that ``kernloom run`` and ``kernloom optimize`` share, defined
once so that both commands spell, document and check them the same way.

``--disable PASS`` (repeatable) is ``SessionConfig.disabled_passes``; ``--no-optimizer``
(``kernloom run`` only: turning the optimizer off is all ``kernloom optimize`` could not
mean) is ``SessionConfig(graph_optimizer=False)``. A pass name is checked against the
built-in passes and the installed plugins' before any file is read, with the session's
own check, so an unknown name gets the same message, listing the passes, from both.
"""

from __future__ import annotations

import argparse
from typing import Any

from kernloom.optimizer import BUILTIN_PASS_NAMES, check_pass_names
from kernloom.registry import Registry

__all__ = ["add_pass_flags", "disabled_passes"]


def add_pass_flags(parser: Any, *, off_switch: bool) -> None:
    """Add ``--disable PASS`` (and, with ``off_switch``, ``--no-optimizer``) to ``parser``."""
    parser.add_argument(
        "--disable",
        action="append",
        default=[],
        metavar="PASS",
        help="skip this graph-optimizer pass (repeatable): "
        f"{', '.join(BUILTIN_PASS_NAMES)}, or a plugin's pass",
    )
    if off_switch:
        parser.add_argument(
            "--no-optimizer",
            action="store_true",
            help="run the graph exactly as built, without the graph optimizer",
        )


def disabled_passes(registry: Registry, args: argparse.Namespace) -> tuple[str, ...]:
    """The ``--disable`` names, each once, in order; an unknown name is an
    ``InvalidArgumentError`` listing the passes (with a did-you-mean)."""
    names = tuple(dict.fromkeys(args.disable))
    check_pass_names(names, registry.graph_passes)
    return names
