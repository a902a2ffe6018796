import pytest

from keywords import count_phrase, density, top_words, words

PAGE = """Fresh coffee beans, roasted weekly. Our coffee is roasted in small
batches; order coffee beans online or visit the roastery."""


def test_words():
    assert words("Don't stop, BELIEVING!") == ["don't", "stop", "believing"]


def test_phrase_not_on_page():
    assert count_phrase(PAGE, "green tea") == 0


def test_count_phrase_case_insensitive():
    assert count_phrase(PAGE, "Coffee Beans") == 2


def test_empty_phrase():
    with pytest.raises(ValueError):
        count_phrase(PAGE, "  ")


def test_density_of_empty_page():
    assert density("", "coffee") == 0.0


def test_top_words_skip_stopwords():
    assert top_words(PAGE, 2) == [("coffee", 3), ("beans", 2)]
