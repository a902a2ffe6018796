"""``frognano cache`` and ``frognano cache clean``: what FrogNano keeps on disk, and removing it.

Registered on the main group by ``main.py``; the listing and removal live in ``frognano/cache.py``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import click

from ..errors import FrogNanoError, UsageError
from .models import fail, human_size


def _where_from() -> str:
    """Why the cache is where it is, so a newcomer learns how to move it."""
    if os.environ.get("FROGNANO_CACHE_DIR"):
        return "set by FROGNANO_CACHE_DIR"
    if os.environ.get("XDG_CACHE_HOME"):
        return "under XDG_CACHE_HOME; FROGNANO_CACHE_DIR moves it"
    return "the default; FROGNANO_CACHE_DIR moves it"


def _short(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


@click.group("cache", invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of the listing.")
@click.pass_context
def cache_group(ctx: click.Context, as_json: bool) -> None:
    """Show FrogNano's cache folder and what each project keeps there.

    The cache is $FROGNANO_CACHE_DIR, else $XDG_CACHE_HOME/frognano, else ~/.cache/frognano.
    Per project (projects/NAME-HASH; the path is shown when a record in it names the project):

    \b
      shadow copies  the copies of the project the tests run in (one per parallel lane)
      run logs       each test run's log and the warm runner's log
      episodes       recorded model episodes (replay them with --model replay:FILE)
      stored runs    whole-suite runs with coverage, reused by later commands
      undo copies    what `frognano undo` restores after `fix --apply`

    trees/ holds repositories exported at a task's git commit by `frognano eval` and `frognano
    train`.  models/ holds GGUF files converted once for --model torch:FILE.gguf or
    mlx:FILE.gguf (NAME-SHA256-KIND, keyed by the file's content; a changed file is converted
    again).  Sizes add up file sizes.  `frognano cache clean` removes entries.
    """
    if ctx.invoked_subcommand is not None:
        return
    from ..cache import inventory
    from ..paths import project_cache

    inv = inventory()
    here = project_cache(Path.cwd()).name
    if as_json:
        click.echo(json.dumps({
            "root": str(inv.root), "total": inv.total,
            "projects": [{"folder": str(p.folder), "project": str(p.project) if p.project else None,
                          "in_use": p.in_use, "total": p.total, "sizes": p.sizes} for p in inv.projects],
            "trees": [{"folder": str(t.folder), "source": str(t.source) if t.source else None,
                       "commit": t.commit, "size": t.size} for t in inv.trees],
            "models": [{"folder": str(m.folder), "source": str(m.source) if m.source else None,
                        "kind": m.kind, "architecture": m.architecture, "size": m.size,
                        "finished": m.finished, "in_use": m.in_use} for m in inv.models],
            "leftovers": [{"folder": str(p), "size": n} for p, n in inv.leftovers],
            "other": [{"path": str(p), "size": n} for p, n in inv.other],
        }, indent=2))
        return
    click.echo(f"FrogNano cache: {inv.root} ({_where_from()}), {human_size(inv.total)} in all")
    if not (inv.projects or inv.trees or inv.models or inv.leftovers or inv.other):
        click.echo("  empty")
        return
    for p in sorted(inv.projects, key=lambda p: -p.total):
        label = str(p.project) if p.project else "project path not recorded"
        if p.folder.name == here:
            label += " (this folder)"
        click.echo(f"\n{_short(p.folder, inv.root)}  {human_size(p.total)}  {label}"
                   + ("  [in use]" if p.in_use else ""))
        parts = sorted(p.sizes.items(), key=lambda kv: -kv[1])
        click.echo("    " + ", ".join(f"{kind} {human_size(n)}" for kind, n in parts))
    for t in inv.trees:
        origin = f"{t.source} at {t.commit[:12]}" if t.source and t.commit else "an export that never finished"
        click.echo(f"\n{_short(t.folder, inv.root)}  {human_size(t.size)}  {origin}")
    for m in inv.models:
        if m.finished:
            what = f"{m.kind or 'an'} import of {m.source}" if m.source else "an import (its record is missing)"
            if m.architecture:
                what += f" ({m.architecture})"
        else:
            what = "an import under way" if m.in_use else "an import that never finished"
        click.echo(f"\n{_short(m.folder, inv.root)}  {human_size(m.size)}  {what}" + ("  [in use]" if m.in_use else ""))
    for path, size in inv.leftovers:
        click.echo(f"\n{_short(path, inv.root)}  {human_size(size)}  left by an interrupted clean")
    if inv.other:
        click.echo("\nnot FrogNano's, never removed: "
                   + ", ".join(f"{_short(path, inv.root)} {human_size(size)}" for path, size in inv.other))


@cache_group.command("clean", short_help="Remove a project's entries (default: the current folder's), or all.")
@click.argument("path", required=False, type=click.Path(path_type=Path))
@click.option("--all", "all_", is_flag=True,
              help="Remove every project's entries, every exported tree and every imported model.")
def clean(path: Path | None, all_: bool) -> None:
    """Remove the cache entries of the project at PATH (default: the current folder).

    PATH may also be a folder that `frognano cache` lists (projects/NAME-HASH, models/...), e.g.
    that of a project you deleted, or a GGUF file, whose imports under models/ are removed.
    Removed are the project's shadow copies, run logs, episodes, stored runs and undo copies
    (`frognano undo` cannot restore an earlier --apply afterwards), and the trees exported from
    it.  With --all: every project, tree and imported model; files in the cache folder that
    FrogNano did not make are kept, and so is an import under way.

    A project whose shadow copy a running `frognano fix`, `watch` or `serve` holds (their lock
    files say so) is kept, and the command exits 2 naming it.  Exported trees have no lock: do
    not clean them while `frognano eval` or `frognano train` run.  Exits 2 when nothing matches.
    """
    from ..cache import inventory, remove, select
    from ..paths import project_cache

    if all_ and path is not None:
        fail(UsageError("give PATH or --all, not both"))
    inv = inventory()
    target = None if all_ else (path if path is not None else Path("."))
    selection = select(inv, target)
    if not selection:
        if target is None:
            fail(UsageError(f"nothing to remove: the cache {inv.root} holds no FrogNano entries"))
        fail(UsageError(f"nothing in the cache for {target} (its entries would be "
                        f"{inv.root / 'projects' / project_cache(target).name}); "
                        "`frognano cache` lists what is there"))
    try:
        done = remove(inv, selection)
    except FrogNanoError as exc:
        fail(exc)
    for removed in done.removed:
        click.echo(f"removed {_short(removed, inv.root)}")
    if done.removed:
        click.echo(f"freed {human_size(done.freed)} in {inv.root}")
    kept = []
    if done.in_use:
        names = ", ".join(f"{_short(p.folder, inv.root)} ({p.project or 'project path not recorded'})"
                          for p in done.in_use)
        kept.append(f"kept {names}: a running frognano fix, watch or serve holds it; stop it and clean again")
    if done.importing:
        names = ", ".join(_short(m.folder, inv.root) for m in done.importing)
        kept.append(f"kept {names}: an import is writing it; clean again when it has finished")
    if kept:
        fail(UsageError("; ".join(kept)))
