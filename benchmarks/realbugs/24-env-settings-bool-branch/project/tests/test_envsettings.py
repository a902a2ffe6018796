import pytest

from envsettings import Setting, SettingsError, coerce, load

SCHEMA = [
    Setting("debug", bool, False),
    Setting("workers", int, 2),
    Setting("hosts", list, []),
    Setting("name", str, "app"),
]


def test_defaults_when_unset():
    assert load(SCHEMA, {}) == {"debug": False, "workers": 2, "hosts": [], "name": "app"}


def test_values_from_environment():
    env = {"APP_WORKERS": " 8 ", "APP_HOSTS": "a, b,,c", "APP_NAME": "billing"}
    values = load(SCHEMA, env)
    assert values["workers"] == 8
    assert values["hosts"] == ["a", "b", "c"]
    assert values["name"] == "billing"


def test_debug_flag_turned_off():
    assert load(SCHEMA, {"APP_DEBUG": "false"})["debug"] is False


def test_bad_int_names_the_variable():
    with pytest.raises(SettingsError, match="APP_WORKERS"):
        load(SCHEMA, {"APP_WORKERS": "many"})


def test_coerce_float():
    assert coerce("0.25", float) == 0.25
