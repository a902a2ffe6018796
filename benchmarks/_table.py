"""The one table printer the benchmark scripts share (rich when importable, plain text if not)."""

from __future__ import annotations

import shutil


def print_table(title: str, headers: list[str], body: list[list[str]], *, left: set[int],
                width: int = 120) -> None:
    """``left``: indices of the left-aligned columns (the others are numbers, right-aligned);
    ``width``: at least this many columns, so each row stays on one line when piped (rich
    assumes 80 columns then)."""
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:  # rich is a dependency of frognano, but keep the scripts standalone
        Console = None
    if Console is not None:
        table = Table(title=title)
        for i, h in enumerate(headers):
            table.add_column(h, justify="left" if i in left else "right")
        for line in body:
            table.add_row(*line)
        Console(width=max(width, shutil.get_terminal_size((width, 24)).columns)).print(table)
        return
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(headers)]
    print(title)
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths)))
    for line in body:
        print("  ".join(c.ljust(w) for c, w in zip(line, widths)))
