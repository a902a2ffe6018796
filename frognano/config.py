"""Settings: ``[tool.frognano]`` in the project's pyproject.toml, then the environment, then flags.

Every field has a default and a help string; unknown keys and wrong types are errors that name
the key (exit code 2), so a typo in pyproject.toml is never silently ignored.
"""

from __future__ import annotations

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


@dataclass
class Settings:
    test_args: list[str] = field(default_factory=list, metadata={"help": "extra pytest arguments"})
    timeout: float = field(default=30.0, metadata={"help": "seconds a test may run before it counts as hanging"})
    collect_timeout: float = field(default=120.0, metadata={"help": "seconds pytest may spend collecting"})
    memory_mb: int = field(default=4096, metadata={"help": "memory a test run may allocate, MiB"})
    fsize_mb: int = field(default=256, metadata={"help": "largest file a test may write, MiB"})
    python: str | None = field(default=None, metadata={"help": "interpreter for the tests (default: the project's .venv, else FrogNano's)"})
    warm: bool = field(default=True, metadata={"help": "reuse a warm fork server for test runs"})
    max_locations: int = field(default=10, metadata={"help": "suspicious statements the search tries"})
    max_candidates: int = field(default=400, metadata={"help": "single-edit candidates validated at most"})
    max_pairs: int = field(default=150, metadata={"help": "two-edit candidates validated at most"})
    search_seconds: float = field(default=300.0, metadata={"help": "wall-clock budget of the search"})
    candidate_timeout_factor: float = field(default=10.0, metadata={"help": "a candidate's test may take this many times its baseline duration (at least 2 s, at most timeout)"})
    model: str | None = field(default=None, metadata={"help": "model SPEC for repair episodes after the operator search (mlx:, torch:, openai:, replay:)"})
    episodes: int = field(default=2, metadata={"help": "model episodes tried after the operator search"})
    max_turns: int = field(default=16, metadata={"help": "assistant turns per episode"})
    max_episode_tokens: int = field(default=16384, metadata={"help": "prompt + completion tokens per episode"})
    temperature: float = field(default=0.0, metadata={"help": "sampling temperature of the model (0: greedy)"})
    max_new_tokens: int = field(default=512, metadata={"help": "tokens the model may generate per turn"})
    constrain: bool = field(default=True, metadata={"help": "constrain in-process models to well-formed tool calls"})

    def __post_init__(self) -> None:
        for name in ("timeout", "collect_timeout", "search_seconds", "candidate_timeout_factor"):
            if getattr(self, name) <= 0:
                raise UsageError(f"{name} must be positive, got {getattr(self, name)}")
        for name in ("fsize_mb", "max_locations", "max_turns", "max_episode_tokens", "max_new_tokens"):
            if getattr(self, name) < 1:
                raise UsageError(f"{name} must be at least 1, got {getattr(self, name)}")
        for name in ("max_candidates", "max_pairs", "episodes", "temperature"):
            if getattr(self, name) < 0:
                raise UsageError(f"{name} must not be negative, got {getattr(self, name)}")
        if self.memory_mb < 64:
            raise UsageError(f"memory_mb must be at least 64, got {self.memory_mb}")

    def runner_config(self):  # -> RunnerConfig; imported lazily to keep config import-light
        from .sandbox.runner import RunnerConfig

        return RunnerConfig(
            python=self.python, test_args=list(self.test_args), timeout=self.timeout,
            collect_timeout=self.collect_timeout, memory_mb=self.memory_mb,
            fsize_mb=self.fsize_mb, warm=self.warm,
        )


def _coerce(name: str, kind: Any, value: Any, source: str) -> Any:
    """Check (from TOML) or parse (from the environment) one value against its field type."""
    text = isinstance(value, str)
    kind = str(kind)
    try:
        if kind == "bool":
            if text:
                if value.lower() not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
                    raise ValueError
                return value.lower() in ("1", "true", "yes", "on")
            if isinstance(value, bool):
                return value
        elif kind == "int":
            if text:
                return int(value)
            if isinstance(value, int) and not isinstance(value, bool):
                return value
        elif kind == "float":
            if text:
                return float(value)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return float(value)
        elif kind.startswith("list"):
            if text:
                import shlex

                return shlex.split(value)
            if isinstance(value, list) and all(isinstance(v, str) for v in value):
                return value
        elif kind.startswith("str"):
            if isinstance(value, str):
                return value
    except ValueError:
        pass
    raise UsageError(f"{source}: {name} = {value!r} is not a valid {kind}")


def load_settings(root: Path, overrides: Mapping[str, Any] | None = None,
                  environ: Mapping[str, str] | None = None) -> Settings:
    """Settings for the project at ``root``; later sources win: pyproject, FROGNANO_*, overrides."""
    environ = os.environ if environ is None else environ
    types = {f.name: f.type for f in fields(Settings)}
    values: dict[str, Any] = {}
    pyproject = root / "pyproject.toml"
    if pyproject.is_file():
        try:
            data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise UsageError(f"{pyproject}: not valid TOML ({exc})") from exc
        table = data.get("tool", {}).get("frognano", {})
        for key, value in table.items():
            name = key.replace("-", "_")
            if name not in types:
                raise UsageError(f"{pyproject}: unknown setting [tool.frognano] {key} "
                                 f"(known: {', '.join(sorted(types))})")
            values[name] = _coerce(name, types[name], value, f"{pyproject} [tool.frognano]")
    for name, kind in types.items():
        env = f"FROGNANO_{name.upper()}"
        if env in environ:
            values[name] = _coerce(name, kind, environ[env], env)
    for name, value in (overrides or {}).items():
        if value is not None:
            values[name] = value
    return Settings(**values)


def describe_settings() -> str:
    """One line per setting, for --help epilogs and the README."""
    defaults = Settings()
    return "\n".join(f"{f.name} = {getattr(defaults, f.name)!r}  # {f.metadata.get('help', '')}"
                     for f in fields(Settings))

