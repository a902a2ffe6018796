"""Where the command line's log goes: ``setup_logging(verbose)``, called by each subcommand.

Its own module so that subcommands (``eval.py``, ``train.py``) and ``main.py``, which imports
them, can all call it without importing each other.
"""

from __future__ import annotations

import logging
import sys


def setup_logging(verbose: int) -> None:
    """-v: what FrogNano does (its loggers at INFO), -vv: debug detail; on stderr, which is a
    rich log on a terminal and plain lines anywhere else.  Other libraries stay at WARNING:
    their INFO chatter is not what the user asked to see."""
    from .render import stderr_console

    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    console = stderr_console()
    handler: logging.Handler
    if console.is_terminal:
        from rich.logging import RichHandler

        handler = RichHandler(console=console, show_time=False, show_path=verbose > 1, markup=False)
        handler.setFormatter(logging.Formatter("%(message)s"))
    else:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(_PlainFormatter(with_names=verbose > 1))
    logging.basicConfig(level=logging.WARNING, handlers=[handler], force=True)
    logging.getLogger("frognano").setLevel(level)


class _PlainFormatter(logging.Formatter):
    """``frognano: what happens`` for INFO, ``frognano: warning: ...`` above it: a log read in
    a pipe or CI needs no level column to say that all is well."""

    def __init__(self, *, with_names: bool) -> None:
        super().__init__()
        self.with_names = with_names

    def format(self, record: logging.LogRecord) -> str:
        level = "" if record.levelno == logging.INFO else f"{record.levelname.lower()}: "
        name = f"{record.name}: " if self.with_names else ""
        text = f"frognano: {level}{name}{record.getMessage()}"
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text
