"""Install order for packages with dependencies: every package comes after what it needs."""

from __future__ import annotations

from collections.abc import Iterable, Mapping


class UnknownPackage(KeyError):
    pass


def install_order(requires: Mapping[str, Iterable[str]], targets: Iterable[str]) -> list[str]:
    """Packages to install for ``targets``, dependencies first, each exactly once.

    ``requires`` maps a package to the packages it needs directly.  Packages that appear only as
    dependencies need nothing.  A cycle is broken where it is first revisited, the way pip does.
    """
    order: list[str] = []
    seen: set[str] = set()

    def visit(name: str) -> None:
        if name in seen:
            return
        for dependency in sorted(requires.get(name, ())):
            visit(dependency)
        order.append(name)

    for target in targets:
        if target not in requires:
            raise UnknownPackage(target)
        visit(target)
    return order


def dependents(requires: Mapping[str, Iterable[str]], package: str) -> set[str]:
    """Packages that need ``package`` directly."""
    return {name for name, needs in requires.items() if package in needs}
