import pytest

from leaderboard.board import Leaderboard


def test_submit_keeps_best():
    board = Leaderboard()
    assert board.submit("ann", 10)
    assert not board.submit("ann", 7)
    assert board.scores == {"ann": 10}


def test_negative_score_rejected():
    with pytest.raises(ValueError):
        Leaderboard().submit("bob", -1)


def test_top_three():
    board = Leaderboard()
    for player, score in [("ann", 30), ("bob", 50), ("cid", 20), ("dee", 40)]:
        board.submit(player, score)
    assert board.top() == ["bob", "dee", "ann"]


def test_rank_of_unknown_player():
    with pytest.raises(KeyError):
        Leaderboard().rank_of("nobody")
