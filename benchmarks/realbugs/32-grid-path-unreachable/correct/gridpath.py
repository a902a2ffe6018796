"""Shortest walks on a text grid map (warehouse floor plans, game levels).

A map is a list of equal-length strings: ``#`` is a wall, anything else is floor.
"""

from __future__ import annotations

from collections import deque

Cell = tuple[int, int]  # (row, column)
STEPS = ((1, 0), (-1, 0), (0, 1), (0, -1))


def find(grid: list[str], mark: str) -> Cell:
    for row, line in enumerate(grid):
        column = line.find(mark)
        if column != -1:
            return row, column
    raise ValueError(f"no {mark!r} on the map")


def neighbours(grid: list[str], cell: Cell) -> list[Cell]:
    row, column = cell
    result = []
    for d_row, d_column in STEPS:
        r, c = row + d_row, column + d_column
        if 0 <= r < len(grid) and 0 <= c < len(grid[r]) and grid[r][c] != "#":
            result.append((r, c))
    return result


def shortest_path(grid: list[str], start: Cell, goal: Cell) -> list[Cell] | None:
    """The cells of a shortest walk from ``start`` to ``goal`` (both included); None when walled off."""
    previous: dict[Cell, Cell | None] = {start: None}
    queue = deque([start])
    while queue:
        cell = queue.popleft()
        if cell == goal:
            path = []
            while cell is not None:
                path.append(cell)
                cell = previous[cell]
            return path[::-1]
        for nxt in neighbours(grid, cell):
            if nxt not in previous:
                previous[nxt] = cell
                queue.append(nxt)
    return None


def distance(grid: list[str], start: Cell, goal: Cell) -> int | None:
    path = shortest_path(grid, start, goal)
    return None if path is None else len(path) - 1
