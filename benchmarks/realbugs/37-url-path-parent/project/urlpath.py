"""URL path helpers for a static-site generator: breadcrumbs, parents and relative links."""

from __future__ import annotations


def segments(path: str) -> list[str]:
    """``"/docs/api/"`` -> ``["docs", "api"]``; empty segments from doubled slashes are dropped."""
    return [part for part in path.split("/") if part]


def join(parts: list[str], trailing_slash: bool = True) -> str:
    if not parts:
        return "/"
    return "/" + "/".join(parts) + ("/" if trailing_slash else "")


def parent(path: str) -> str:
    """The section that contains ``path``; the root is its own parent."""
    parts = segments(path)
    return join(parts[1:])


def breadcrumbs(path: str) -> list[tuple[str, str]]:
    """(title, link) for each section from the root down to ``path``."""
    parts = segments(path)
    crumbs = [("Home", "/")]
    for depth in range(1, len(parts) + 1):
        title = parts[depth - 1].replace("-", " ").capitalize()
        crumbs.append((title, join(parts[:depth])))
    return crumbs


def relative(from_path: str, to_path: str) -> str:
    """A relative link from page ``from_path`` (a directory-style URL) to ``to_path``."""
    source, target = segments(from_path), segments(to_path)
    common = 0
    while common < min(len(source), len(target)) and source[common] == target[common]:
        common += 1
    ups = [".."] * (len(source) - common)
    rest = target[common:]
    return "/".join(ups + rest) + "/" if ups or rest else "./"
