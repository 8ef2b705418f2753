"""The one way the command line prints: rich's console with every interpretation of the
text turned off. Node names, file paths and error messages are the user's words, printed
as they are: no markup (``[bold]``), no highlighting, and no emoji codes (rich turns
``:x:`` into a cross, so ``--fetch z:x:`` once printed as ``--fetch z❌``)."""

from __future__ import annotations

import sys

from rich.console import Console

__all__ = ["plain_console"]


def plain_console(*, stderr: bool = False, table_width: bool = False) -> Console:
    """A console for stdout (or stderr). ``table_width``: outside a terminal (CI logs,
    pipes) lay tables out 200 columns wide instead of rich's assumed 80, which would wrap
    every cell; otherwise long lines are written whole (``soft_wrap``)."""
    if table_width:
        stream = sys.stderr if stderr else sys.stdout
        width = None if stream.isatty() else 200
        return Console(file=stream, width=width, highlight=False, markup=False, emoji=False)
    return Console(stderr=stderr, soft_wrap=True, highlight=False, markup=False, emoji=False)
