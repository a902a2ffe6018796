"""Settings: ``[tool.frognano]`` in the project's pyproject.toml, then the environment, then flags.

Every field has a default and a help string; unknown keys and wrong types are errors that name
the key (exit code 2), so a typo in pyproject.toml is never silently ignored.  ``coerce`` is the
one place a value becomes a setting, whatever its source (pyproject, FROGNANO_*, a flag, the
editor's settings through ``frognano.server.settings``): the same types, ranges and sandbox
checks everywhere; only what a source does with a refusal differs (exit 2 here, a warning in
the editor).
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from .errors import UsageError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

_DAY = 86_400.0
_TIB_MB = 1024 * 1024
# Numeric settings and their sane ranges: (low, high, low excluded, unit).  NaN and infinities
# are refused for every one, so a typo or a 2**70 never reaches the runner as a limit that
# makes every test "time out" at once or an rlimit the kernel cannot hold.
_BOUNDS: dict[str, tuple[float, float, bool, str]] = {
    "timeout": (0, _DAY, True, "seconds"),
    "collect_timeout": (0, _DAY, True, "seconds"),
    "memory_mb": (64, _TIB_MB, False, "MiB"),
    "fsize_mb": (1, _TIB_MB, False, "MiB"),
    "max_locations": (1, 10_000, False, ""),
    "max_candidates": (0, 1_000_000, False, ""),
    "max_pairs": (0, 1_000_000, False, ""),
    "search_seconds": (0, 7 * _DAY, True, "seconds"),
    "fix_seconds": (0, 7 * _DAY, False, "seconds"),
    "candidate_timeout_factor": (0, 1_000, True, ""),
    "stall_timeout": (0, _DAY, False, "seconds"),
    "episodes": (0, 1_000, False, ""),
    "max_turns": (1, 1_000, False, ""),
    "max_episode_tokens": (1, 10_000_000, False, "tokens"),
    "temperature": (0, 10, False, ""),
    "max_new_tokens": (1, 1_000_000, False, "tokens"),
    "lanes": (1, 8, False, ""),
}


def check_value(name: str, value: Any, key: str | None = None) -> str | None:
    """What is wrong with ``value`` for the setting ``name`` (None: nothing, or nothing checked
    beyond its type); the message names ``key`` (default ``name``: the editor's camelCase)."""
    key = key or name
    if name == "sandbox":  # not numeric, but checked per key all the same
        return _check_mode(value, key)
    if name == "sandbox_writable":
        return _check_writable(value, key)
    if name == "test_env":
        return _check_env_names(value, key)
    if name not in _BOUNDS:
        return None
    low, high, low_open, unit = _BOUNDS[name]
    span = (f"{'greater than' if low_open else 'at least'} {_num(low)} and at most {_num(high)}"
            + (f" {unit}" if unit else ""))
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"{key} must be a number {span}, got {value!r}"
    if isinstance(value, float) and not math.isfinite(value):
        return f"{key} must be a finite number {span}, got {value!r}"
    if value < low or (low_open and value == low) or value > high:
        return f"{key} must be {span}, got {value!r}"
    return None


SANDBOX_MODES = ("auto", "required", "off")


def check_sandbox(mode: Any, writable: Any) -> str | None:
    """What is wrong with the ``sandbox`` and ``sandbox_writable`` settings, or None."""
    return _check_mode(mode, "sandbox") or _check_writable(writable, "sandbox_writable")


def _check_mode(mode: Any, key: str) -> str | None:
    if mode not in SANDBOX_MODES:
        return f"{key} must be one of {', '.join(SANDBOX_MODES)}, got {mode!r}"
    return None


def _check_writable(writable: Any, key: str) -> str | None:
    if not isinstance(writable, (list, tuple)) or not all(isinstance(p, str) for p in writable):
        return f"{key} must be a list of paths, got {writable!r}"
    for path in writable:
        if not os.path.isabs(os.path.expanduser(path)):
            return f"{key}: {path!r} is not an absolute path (or one starting with ~)"
    return None


def _check_env_names(names: Any, key: str) -> str | None:
    """``test_env``: names of variables (or ``PREFIX_*``), never ``NAME=value``."""
    if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names):
        return f"{key} must be a list of variable names, got {names!r}"
    for name in names:
        if not name or "=" in name or "\0" in name or "*" in name[:-1]:
            return f"{key}: {name!r} is not a variable name (or a PREFIX_* pattern)"
    return None


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


@dataclass
class Settings:
    test_args: list[str] = field(default_factory=list, metadata={"help": "extra pytest arguments"})
    timeout: float = field(default=30.0, metadata={"help": "seconds a test may run before it counts as hanging"})
    collect_timeout: float = field(default=120.0, metadata={"help": "seconds pytest may spend collecting"})
    memory_mb: int = field(default=4096, metadata={"help": "memory a test run may allocate, MiB"})
    fsize_mb: int = field(default=256, metadata={"help": "largest file a test may write, MiB"})
    python: str | None = field(default=None, metadata={"help": "interpreter for the tests (default: the project's .venv, else FrogNano's)"})
    warm: bool = field(default=True, metadata={"help": "reuse a warm fork server for test runs"})
    swap: bool = field(default=True, metadata={"help": "with warm: import and collect once per source state, and run an edit of function bodies by swapping their code (anything else re-imports)"})
    max_locations: int = field(default=10, metadata={"help": "suspicious statements the search tries"})
    max_candidates: int = field(default=400, metadata={"help": "single-edit candidates validated at most"})
    max_pairs: int = field(default=150, metadata={"help": "two-edit candidates validated at most"})
    lanes: int = field(default=2, metadata={"help": "candidates validated at once (each lane a shadow copy and a warm session of its own; 1: one at a time)"})
    search_seconds: float = field(default=300.0, metadata={"help": "wall-clock budget of the search"})
    fix_seconds: float = field(default=110.0, metadata={"help": "wall-clock budget of a whole fix: the test runs, the search, model episodes and confirming a fix; the search gets what the runs before it left, less the time a confirmation takes (with a model, half of that: the episodes get the rest, and one still going at the limit is cancelled) (0: no limit but search_seconds)"})
    candidate_timeout_factor: float = field(default=10.0, metadata={"help": "a candidate's test may take this many times its baseline duration plus 0.25 s (at least 0.5 s, 2 s when a fix is confirmed; at most timeout); a test that hung in the baseline, this many times the slowest passing test + 0.25 s (at least 0.5 s)"})
    stall_timeout: float = field(default=5.0, metadata={"help": "in the diagnosis run, a test that keeps the CPU busy this long (or candidate_timeout_factor x the slowest test passed before it, at most half the test's timeout, or x how late its last new line came, if longer) without reaching a project line it had not run before counts as hanging before timeout (an endless loop); 0: off, wait for timeout"})
    model: str | None = field(default=None, metadata={"help": "model SPEC for repair episodes after the operator search (mlx:, torch:, openai:, replay:)"})
    episodes: int = field(default=2, metadata={"help": "model episodes tried after the operator search"})
    max_turns: int = field(default=16, metadata={"help": "assistant turns per episode"})
    max_episode_tokens: int = field(default=16384, metadata={"help": "prompt + completion tokens per episode"})
    temperature: float = field(default=0.0, metadata={"help": "sampling temperature of the model (0: greedy)"})
    max_new_tokens: int = field(default=512, metadata={"help": "tokens the model may generate per turn"})
    constrain: bool = field(default=True, metadata={"help": "constrain in-process models to well-formed tool calls"})
    allow_test_edits: bool = field(default=False, metadata={"help": "let fixes change test modules and conftest.py (the offer then says it edits tests); pytest's configuration and [tool.frognano] are never changed"})
    allow_data_edits: bool = field(default=False, metadata={"help": "let fixes change files the tests read (expected.json beside a test); by default such data is part of the specification"})
    sandbox: str = field(default="auto", metadata={"help": "confine test processes by the OS (Landlock, Seatbelt): writes only in the shadow copy and the run's temp dir, no TCP; auto (where the kernel allows; says once when it cannot) | required (refuse to run unconfined) | off"})
    sandbox_writable: list[str] = field(default_factory=list, metadata={"help": "more paths confined tests may write (absolute or ~/...), e.g. a cache the tests fill"})
    test_env: list[str] = field(default_factory=list, metadata={"help": "environment variables the tests get besides the allow-list (PATH, locale, TERM, ...; HOME is a folder of the run), by name or PREFIX_*, e.g. [\"DATABASE_URL\"]"})

    def __post_init__(self) -> None:
        for name in _BOUNDS:  # one place for every numeric range (see _BOUNDS)
            problem = check_value(name, getattr(self, name))
            if problem:
                raise UsageError(problem)
        problem = check_sandbox(self.sandbox, self.sandbox_writable)
        if problem:
            raise UsageError(problem)

    # The runner's part of these settings is ``sandbox.runconfig.RunnerConfig.from_settings``:
    # the sandbox reads the settings, the settings know nothing of the sandbox (the layers).


_TYPES = {f.name: str(f.type) for f in fields(Settings)}  # "float", "list[str]", "str | None", ...
_KINDS = {"bool": "true or false", "int": "a whole number", "float": "a number",
          "list[str]": "a list of strings", "str": "a string", "str | None": "a string"}
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def coerce(name: str, value: Any, *, key: str | None = None, from_env: bool = False) -> Any:
    """``value`` as the setting ``name`` holds it, checked; UsageError naming ``key`` otherwise.

    The one coercion of every source.  Its leniency is where no meaning can be lost: a number
    or a boolean written as text (``"5"``, ``"true"``; the environment has only text), an
    integral number for a whole-number field (JSON has one number type: ``10.0`` is 10), an
    empty optional string as unset.  A string where a list belongs is refused with the list
    it probably meant, except from the environment (``from_env``), where it is split like a
    shell would.  Then the ranges of ``_BOUNDS`` and the sandbox checks (``check_value``).
    """
    key = key or name
    if name not in _TYPES:
        raise UsageError(f"unknown setting {key} (known: {', '.join(sorted(_TYPES))})")
    value = _coerce_type(key, _TYPES[name], value, from_env)
    problem = check_value(name, value, key)
    if problem:
        raise UsageError(problem)
    return value


def _coerce_type(key: str, kind: str, value: Any, from_env: bool) -> Any:
    text = isinstance(value, str)
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    try:
        if kind == "bool":
            if isinstance(value, bool):
                return value
            if text and value.strip().lower() in _TRUE + _FALSE:
                return value.strip().lower() in _TRUE
        elif kind == "int":
            if isinstance(value, float) and value.is_integer():
                return int(value)
            if number and not isinstance(value, float):
                return value
            if text:
                return int(value)
        elif kind == "float":
            if number or text:
                return float(value)
        elif kind.startswith("list"):
            if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
                return list(value)
            if text and from_env:
                import shlex

                return shlex.split(value)
            if text:
                # A bare string is a mistake (test_args = "-x -q" could be read some way the
                # user did not mean); say which list was probably meant.
                import json
                import shlex

                try:
                    example = json.dumps(shlex.split(value))
                except ValueError:
                    example = json.dumps([value])
                return _refuse(key, f"a list of strings, e.g. {key} = {example}", value)
        elif kind == "str | None":
            if value is None or text:
                return (value or "").strip() or None
        elif kind == "str":
            if text:
                return value
    except (ValueError, OverflowError):
        pass
    return _refuse(key, _KINDS.get(kind, kind), value)


def _refuse(key: str, what: str, value: Any) -> Any:
    raise UsageError(f"{key} must be {what}, got {value!r}")


def load_settings(root: Path, overrides: Mapping[str, Any] | None = None,
                  environ: Mapping[str, str] | None = None, *,
                  problems: list[str] | None = None) -> Settings:
    """Settings for the project at ``root``; later sources win: pyproject, FROGNANO_*, overrides.

    A bad pyproject or environment value raises ``UsageError`` naming its key; with a
    ``problems`` list (the language server) it is appended there instead and that key keeps
    its default, so one typo does not throw away the rest of ``[tool.frognano]``.
    """
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = {}

    def refuse(exc: UsageError) -> None:
        if problems is None:
            raise exc
        problems.append(str(exc))

    pyproject = root / "pyproject.toml"
    table: Any = {}
    if pyproject.is_file():
        try:
            data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            refuse(UsageError(f"{pyproject}: not valid TOML ({exc})"))
            data = {}
        tool = data.get("tool", {})
        table = tool.get("frognano", {}) if isinstance(tool, dict) else {}
        if not isinstance(tool, dict):
            refuse(UsageError(f"{pyproject}: tool = {tool!r} must be a table ([tool.frognano] settings "
                              "are read from it)"))
        elif not isinstance(table, dict):
            refuse(UsageError(f"{pyproject}: tool.frognano = {table!r} must be a table: write the "
                              "settings under [tool.frognano]"))
            table = {}
    for key, value in table.items():
        name = key.replace("-", "_")
        if name not in _TYPES:
            refuse(UsageError(f"{pyproject}: unknown setting [tool.frognano] {key} "
                              f"(known: {', '.join(sorted(_TYPES))})"))
            continue
        try:
            values[name] = coerce(name, value)
        except UsageError as exc:
            refuse(UsageError(f"{pyproject} [tool.frognano]: {exc}"))
    for name in _TYPES:
        env = f"FROGNANO_{name.upper()}"
        if env in environ:
            try:
                values[name] = coerce(name, environ[env], from_env=True)
            except UsageError as exc:
                refuse(UsageError(f"{env}: {exc}"))
    for name, value in (overrides or {}).items():
        if value is not None:  # flags: a bad one raises even with ``problems`` (never dropped unseen)
            values[name] = coerce(name, value) if name in _TYPES else value
    return Settings(**values)


def describe_settings() -> str:
    """One line per setting, for --help epilogs and the README."""
    defaults = Settings()
    return "\n".join(f"{f.name} = {getattr(defaults, f.name)!r}  # {f.metadata.get('help', '')}"
                     for f in fields(Settings))


def from_fields(cls: Any, data: Mapping[str, Any], what: str) -> Any:
    """``cls(**data)`` for a dataclass, naming every key of ``data`` that is not one of its
    fields (``what``: how the message calls them, e.g. "train setting")."""
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise UsageError(f"unknown {what}(s): {', '.join(unknown)} (known: {', '.join(sorted(known))})")
    return cls(**data)

