import pytest

from envconfig import ConfigError, Settings


def test_missing_without_default():
    with pytest.raises(ConfigError, match="APP_PORT is not set"):
        Settings({}).get_int("port")


def test_float_is_not_an_integer():
    with pytest.raises(ConfigError):
        Settings({"APP_TIMEOUT": "2.5"}).get_int("timeout")


def test_empty_is_not_an_integer():
    with pytest.raises(ConfigError):
        Settings({"X_N": ""}, prefix="X_").get_int("n")


def test_negative_integer():
    assert Settings({"APP_OFFSET": "-3"}).get_int("offset") == -3


def test_bool_malformed():
    with pytest.raises(ConfigError):
        Settings({"APP_DEBUG": "maybe"}).get_bool("debug")
