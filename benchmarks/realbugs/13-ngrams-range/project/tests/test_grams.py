import pytest

from ngrams.grams import best_match, ngrams, similarity


def test_bigrams():
    assert ngrams("abcd", 2) == ["ab", "bc", "cd"]


def test_invalid_n():
    with pytest.raises(ValueError):
        ngrams("abc", 0)


def test_similarity_of_equal_strings():
    assert similarity("Berlin", "berlin") == 1.0


def test_best_match():
    assert best_match("Hamburg", ["Homburg", "Bamberg", "Hamm"]) == "Homburg"
