import pytest

from envconfig import ConfigError, Settings


def test_get_int():
    assert Settings({"APP_PORT": " 8080 "}).get_int("port") == 8080


def test_get_int_default():
    assert Settings({}).get_int("workers", 4) == 4


def test_get_int_malformed():
    with pytest.raises(ConfigError, match="APP_PORT must be an integer"):
        Settings({"APP_PORT": "eighty"}).get_int("port")


def test_get_bool():
    settings = Settings({"APP_DEBUG": "Yes"})
    assert settings.get_bool("debug") is True
