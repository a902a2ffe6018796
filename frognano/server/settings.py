"""The language server's settings: what the client sends, typed, defaulted and checked.

Clients send one object (``initializationOptions``, and the ``frognano`` section of
``workspace/configuration``) with camelCase keys.  Two keys belong to the server alone
(``autoFix``, ``debounceMs``); every other key names a field of ``frognano.config.Settings``
(``testArgs`` -> ``test_args``) and overrides ``[tool.frognano]`` of the project's
pyproject.toml.  Values are coerced and checked by ``frognano.config.coerce``, exactly as
pyproject's are; but a bad value never stops the server: it is dropped with a warning that names
the camelCase key, and the default (or pyproject's value) is used instead.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal, get_args

from ..config import Settings, coerce, load_settings
from ..errors import FrogNanoError, UsageError

AutoFix = Literal["off", "suggest", "apply"]
AUTO_FIX_MODES: tuple[AutoFix, ...] = get_args(AutoFix)

# Keys a client may send for itself (how to start the server, tracing): never warned about.
CLIENT_ONLY_KEYS = frozenset({"trace", "server", "serverPath", "path", "command", "args", "enable",
                              "enabled", "executable", "cmd", "env", "interpreter"})

_ENGINE_FIELDS = frozenset(f.name for f in fields(Settings))


def camel(name: str) -> str:
    """``test_args`` -> ``testArgs``."""
    head, *rest = name.split("_")
    return head + "".join(p.title() for p in rest)


def snake(key: str) -> str:
    """``testArgs`` -> ``test_args`` (snake_case keys pass through)."""
    return re.sub(r"(?<!^)([A-Z])", r"_\1", key).lower()


@dataclass
class ServerSettings:
    """Everything the server reads from the client; every field has a default."""

    # suggest by default: a fix searched in the background and offered, never applied, is the
    # product.  Measured (benchmarks/autofix_cost.py): one search per failing save when idle
    # (+1.2 CPU s on calc, +4.9 on shapes), and at most +0.24 s in 8 s of typing, because a
    # keystroke cancels the search (its fix would be for text that no longer exists).
    auto_fix: AutoFix = field(default="suggest", metadata={"help": "after a failing run: off | suggest (compute "
                                                              "a fix, offer it as a code action; the default) | "
                                                              "apply (send it to the editor as a versioned edit)"})
    debounce_ms: int = field(default=300, metadata={"help": "wait this long after the last save before "
                                                            "running the tests"})
    engine: dict[str, Any] = field(default_factory=dict, metadata={
        "help": "overrides of frognano.config.Settings fields (snake_case names), over pyproject.toml"})

    def __post_init__(self) -> None:
        if self.auto_fix not in AUTO_FIX_MODES:
            raise ValueError(f"autoFix must be one of {', '.join(AUTO_FIX_MODES)}, got {self.auto_fix!r}")
        if self.debounce_ms < 0:
            raise ValueError(f"debounceMs must not be negative, got {self.debounce_ms}")


def next_mode(mode: str) -> AutoFix:
    """off -> suggest -> apply -> off."""
    return AUTO_FIX_MODES[(AUTO_FIX_MODES.index(mode) + 1) % len(AUTO_FIX_MODES)] \
        if mode in AUTO_FIX_MODES else "off"


def plain(value: Any) -> Any:
    """JSON-ish data as plain dicts and lists (pygls hands unknown objects over as namedtuples)."""
    if hasattr(value, "_asdict"):
        value = value._asdict()
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def section(raw: Any) -> dict[str, Any]:
    """The ``frognano`` object, whether the client wrapped it in ``{"frognano": ...}`` or not."""
    raw = plain(raw)
    if not isinstance(raw, dict):
        return {}  # nothing, or an empty Lua table that Neovim's JSON encoder wrote as []
    inner = raw.get("frognano")
    if isinstance(inner, list) and not inner:
        return {}  # {"frognano": []}: the same empty table, one level down
    return dict(inner) if isinstance(inner, dict) else raw


def parse_client(raw: Any) -> tuple[ServerSettings, list[str], list[str]]:
    """Parse the client's object: (settings, problems to show the user, unknown keys to log)."""
    data = section(raw)
    problems: list[str] = []
    unknown: list[str] = []
    auto_fix, debounce = ServerSettings.auto_fix, 300
    engine: dict[str, Any] = {}
    for key, value in data.items():
        if value is None:
            continue  # an unset setting in VS Code arrives as null: the default applies
        if key == "autoFix":
            if isinstance(value, str) and value in AUTO_FIX_MODES:
                auto_fix = value
            elif isinstance(value, bool):  # a checkbox-style client: true means "suggest"
                auto_fix = "suggest" if value else "off"
            else:
                problems.append(f"frognano setting autoFix = {value!r} is not one of "
                                f"{' | '.join(AUTO_FIX_MODES)}; using \"{ServerSettings.auto_fix}\"")
            continue
        if key == "debounceMs":
            if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= 60_000:
                debounce = int(value)
            else:
                problems.append(f"frognano setting debounceMs = {value!r} is not a number of "
                                "milliseconds between 0 and 60000; using 300")
            continue
        name = snake(key)
        if name not in _ENGINE_FIELDS:
            if key not in CLIENT_ONLY_KEYS:
                unknown.append(key)
            continue
        try:
            engine[name] = coerce(name, value, key=key)
        except UsageError as exc:
            problems.append(_invalid(key, value, exc))
    return ServerSettings(auto_fix, debounce, engine), problems, unknown


def _invalid(key: str, value: Any, why: Exception) -> str:
    return f"frognano setting {key} = {value!r} is invalid ({why}); using the default"


def engine_settings(root: Path, overrides: Mapping[str, Any],
                    environ: Mapping[str, str] | None = None) -> tuple[Settings, list[str]]:
    """``Settings`` for the project at ``root``: pyproject, then FROGNANO_*, then the client.

    Each override that ``coerce`` refuses (a negative timeout, a string for a list) or that is
    checked here (an interpreter that does not exist, a malformed model SPEC) is dropped with a
    problem naming its camelCase key.  A bad value in ``[tool.frognano]`` or a FROGNANO_*
    variable (NaN, out of range, a string for a list) is dropped the same way, naming its key,
    and the rest of the table still applies; a table whose keys are valid alone but not
    together falls back to the defaults plus the valid client overrides.
    """
    problems: list[str] = []
    dropped: list[str] = []
    try:
        base = load_settings(root, {}, environ, problems=dropped)
        base_ok = True
    except FrogNanoError as exc:
        problems.append(f"{exc}; using the defaults")
        base, base_ok = Settings(), False
    problems += [f"{p}; using the default" for p in dropped]
    valid: dict[str, Any] = {}
    for name, value in overrides.items():
        try:
            value = coerce(name, value, key=camel(name))
            _check_value(root, name, value)
        except (FrogNanoError, TypeError, ValueError) as exc:
            problems.append(_invalid(camel(name), value, exc))
            continue
        valid[name] = value
    try:
        settings = load_settings(root, valid, environ, problems=[]) if base_ok else Settings(**valid)
    except (FrogNanoError, TypeError, ValueError) as exc:  # fields valid alone, not together
        problems.append(f"frognano settings {', '.join(camel(n) for n in valid)} do not go together "
                        f"({exc}); using the defaults")
        settings = base
    return settings, problems


def _check_value(root: Path, name: str, value: Any) -> None:
    """Checks Settings itself does not do until much later (when a run or a fix starts)."""
    if name == "python" and value:
        from ..sandbox.runner import find_python

        find_python(root, value)
    elif name == "model" and value:
        from ..runtime.base import parse_spec

        parse_spec(value)
