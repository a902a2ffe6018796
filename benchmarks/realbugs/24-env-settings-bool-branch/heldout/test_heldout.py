import pytest

from envsettings import Setting, SettingsError, coerce, load


@pytest.mark.parametrize("text", ["1", "true", "YES", " on "])
def test_true_words(text):
    assert coerce(text, bool) is True


@pytest.mark.parametrize("text", ["0", "False", "no", "off", ""])
def test_false_words(text):
    assert coerce(text, bool) is False


def test_bad_bool_is_an_error():
    with pytest.raises(SettingsError, match="APP_VERBOSE"):
        load([Setting("verbose", bool, False)], {"APP_VERBOSE": "maybe"})


def test_bool_from_environment_with_other_prefix():
    values = load([Setting("debug", bool, False), Setting("port", int, 80)], {"SVC_DEBUG": "yes", "SVC_PORT": "8080"}, prefix="SVC_")
    assert values == {"debug": True, "port": 8080}


def test_strings_pass_through():
    assert coerce(" x ", str) == " x "
