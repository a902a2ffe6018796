"""What the in-process backends share: streamed text with stop strings, the reusable cache prefix, a turn's end."""

from __future__ import annotations

import threading

from frognano.runtime.local import TextStream, Turn, reusable_prefix


# -- TextStream: incremental text with stop strings ---------------------------------------------


def chars(ids: list[int]) -> str:
    """A toy decoder: ids are code points; 0xD800 stands for half a character."""
    out = "".join(chr(i) for i in ids if i != 0xD800)
    return out + "\ufffd" if ids and ids[-1] == 0xD800 else out


def feed(stream: TextStream, text: str) -> list[str]:
    return [stream.feed(ord(c)) for c in text]


def test_stream_holds_back_a_possible_stop_string():
    s = TextStream(chars, ["</end>"])
    assert feed(s, "ab</e") == ["a", "b", "", "", ""]
    assert feed(s, "x") == ["</ex"]  # not a stop after all: released
    assert feed(s, "c</end>tail") == ["c"] + [""] * 10
    assert s.stopped and s.text == "ab</exc"
    assert s.finish() == ""


def test_stream_releases_the_held_tail_at_the_end():
    s = TextStream(chars, ["STOP"])
    out = feed(s, "go ST")
    assert "".join(out) == "go " and not s.stopped
    assert s.finish() == "ST" and s.text == "go ST"


def test_stream_waits_for_a_whole_character():
    s = TextStream(chars)
    assert s.feed(0xD800) == ""  # half a character: nothing yet
    assert s.feed(ord("é")) == "é"
    assert s.text == "é"


def test_stream_first_of_several_stops_wins():
    s = TextStream(chars, ["cd", "b"])
    assert "".join(feed(s, "abcd")) == "a" and s.text == "a"


# -- reusable_prefix: how much of the prompt cache a new prompt keeps -----------------------------


def test_a_grown_prompt_keeps_the_whole_cache_but_refeeds_its_last_token():
    trims: list[int] = []
    assert reusable_prefix([1, 2, 3], [1, 2, 3, 4, 5], trims.append) == 3 and trims == []
    assert reusable_prefix([1, 2, 3], [1, 2, 3], lambda n: trims.append(n) or True) == 2 and trims == [1]


def test_a_diverging_prompt_trims_the_cache_or_starts_anew():
    assert reusable_prefix([1, 2, 3, 4], [1, 2, 9, 9], lambda n: n == 2) == 2
    assert reusable_prefix([1, 2, 3, 4], [1, 2, 9, 9], lambda n: False) == 0  # cannot trim
    assert reusable_prefix([7, 8], [1, 2], lambda n: True) == 0
    assert reusable_prefix([], [1], lambda n: True) == 0


# -- Turn: one reply's ending -------------------------------------------------------------------


def test_turn_ends_at_end_of_turn_stop_string_or_cancel():
    pieces: list[str] = []
    turn = Turn(chars, ["!"], {0}, pieces.append)
    assert not turn.take(ord("h")) and not turn.take(ord("i"))
    assert turn.take(0)  # end of turn: in the ids, not in the text
    gen = turn.end(prompt_tokens=5)
    assert (gen.text, gen.token_ids, gen.finish_reason) == ("hi", [ord("h"), ord("i"), 0], "stop")
    assert "".join(pieces) == "hi" and (gen.prompt_tokens, gen.completion_tokens) == (5, 3)

    assert Turn(chars, ["!"], {0}).take(ord("!"))  # a stop string
    cancel = threading.Event()
    turn = Turn(chars, [], {0}, cancel=cancel)
    assert not turn.take(ord("a"))
    cancel.set()
    assert turn.take(ord("b")) and turn.end(0).finish_reason == "cancelled"
    assert Turn(chars, [], {0}).end(0).finish_reason == "length"
