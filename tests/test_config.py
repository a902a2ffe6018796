"""``frognano.config.coerce``: one coercion for pyproject, FROGNANO_*, flags and the editor."""

from __future__ import annotations

import math

import pytest

from frognano.config import coerce, load_settings
from frognano.errors import UsageError
from frognano.server.settings import parse_client


@pytest.mark.parametrize("name, value, want", [
    ("max_candidates", 10.0, 10),        # JSON has one number type: an integral number is exact
    ("max_candidates", "10", 10),        # a number written as text
    ("timeout", 5, 5.0),
    ("timeout", "2.5", 2.5),
    ("warm", "Off", False),
    ("constrain", True, True),
    ("model", "  ", None),               # an empty optional string: unset
    ("model", " mlx:m ", "mlx:m"),
    ("test_args", ("-x", "-q"), ["-x", "-q"]),
])
def test_the_lenient_cases_lose_no_meaning(name, value, want):
    got = coerce(name, value)
    assert got == want and type(got) is type(want)


@pytest.mark.parametrize("name, value, words", [
    ("max_candidates", 10.5, "max_candidates must be a whole number"),
    ("max_candidates", True, "max_candidates must be a whole number"),
    ("timeout", "soon", "timeout must be a number"),
    ("timeout", math.nan, "timeout must be a finite number"),
    ("timeout", 10**400, "timeout must be a number"),
    ("search_seconds", -1, "search_seconds must be greater than 0"),
    ("warm", "maybe", "warm must be true or false"),
    ("test_args", "-k 'not slow'", 'test_args must be a list of strings, e.g. test_args = ["-k", "not slow"]'),
    ("sandbox", "sometimes", "sandbox must be one of auto, required, off"),
    ("sandbox_writable", ["rel"], "is not an absolute path"),
    ("no_such_setting", 1, "unknown setting no_such_setting"),
])
def test_refusals_name_the_key(name, value, words):
    with pytest.raises(UsageError) as exc:
        coerce(name, value)
    assert words in str(exc.value) and name in str(exc.value)


def test_every_source_applies_the_same_rules(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.frognano]\nmax_candidates = 10.0\nmodel = ""\n')
    settings = load_settings(tmp_path, environ={"FROGNANO_TEST_ARGS": "-k 'not slow'"})
    assert (settings.max_candidates, settings.model, settings.test_args) == (10, None, ["-k", "not slow"])
    with pytest.raises(UsageError, match="max_pairs must be a whole number"):
        load_settings(tmp_path, {"max_pairs": 1.5}, environ={})  # flags too
    (tmp_path / "pyproject.toml").write_text('[tool.frognano]\ntest_args = "-x"\n')
    with pytest.raises(UsageError, match=r"pyproject.toml \[tool.frognano\]: test_args must be a list"):
        load_settings(tmp_path, environ={})
    opts, problems, _ = parse_client({"maxCandidates": 10.0, "model": "", "testArgs": "-x"})
    assert opts.engine == {"max_candidates": 10, "model": None}
    assert problems == ["frognano setting testArgs = '-x' is invalid (testArgs must be a list of strings, "
                        'e.g. testArgs = ["-x"], got \'-x\'); using the default']
