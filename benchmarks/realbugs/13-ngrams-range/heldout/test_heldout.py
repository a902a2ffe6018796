from ngrams.grams import ngrams, similarity


def test_whole_string_is_one_gram():
    assert ngrams("abc", 3) == ["abc"]


def test_shorter_than_n():
    assert ngrams("ab", 3) == []


def test_unigrams():
    assert ngrams("xyz", 1) == ["x", "y", "z"]


def test_similarity_values():
    assert similarity("abc", "xyz") == 0.0
    assert similarity("night", "nacht") == 0.2
