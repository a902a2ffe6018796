from keywords import count_phrase, density


def test_whole_words_only():
    assert count_phrase("cat catalog concat cat.", "cat") == 2
    assert count_phrase("scatter cats", "cat") == 0


def test_non_overlapping():
    assert count_phrase("ha ha ha", "ha ha") == 1
    assert count_phrase("no no no no", "no no") == 2


def test_match_after_partial_match():
    assert count_phrase("cats cat", "cat") == 1
    assert count_phrase("xcat cat", "cat") == 1


def test_match_at_both_ends():
    assert count_phrase("Rust is fast, like rust", "rust") == 2


def test_density():
    assert density("buy shoes here buy shoes now", "buy shoes") == 4 / 6
