from survey.results import shares, winner


def test_unchosen_option_is_zero():
    assert shares(["a", "a", "b"], ["a", "b", "c"]) == {"a": 66.7, "b": 33.3, "c": 0.0}


def test_winner():
    assert winner(["b", "a", "b", "c", "b"], ["a", "b", "c"]) == "b"
    assert winner(["a", "b"], ["a", "b"]) is None
    assert winner(["c"], ["a", "b", "c"]) == "c"
