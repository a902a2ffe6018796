"""Constrained decoding: with tools and constrain=True, a random model can only emit one valid call."""

from __future__ import annotations

import pytest

from frognano.errors import UsageError
from frognano.runtime.base import Sampling
from frognano.runtime.constrain import TextStream, tool_call_schema

from .conftest import MESSAGES, TOOLS, parse_call


def test_five_constrained_replies_are_five_valid_calls(constrained):
    model = constrained
    names = set()
    for seed in range(5):
        gen = model.generate(MESSAGES, TOOLS, Sampling(temperature=1.0, seed=seed, max_tokens=1024), constrain=True)
        call = parse_call(gen.text)
        assert call is not None, gen.text
        names.add(call[0])
        # ... and then the end of the turn, nothing else.
        assert gen.finish_reason == "stop"
        assert gen.token_ids[-1] in model.eos_token_ids
        assert gen.completion_tokens == len(gen.token_ids)
    assert len(names) > 1  # the model picks among the tools, not always the same one


def test_greedy_constrained_reply_is_a_valid_call(constrained):
    model = constrained
    gen = model.generate(MESSAGES, TOOLS[-1:] + TOOLS[:1], Sampling(max_tokens=1024), constrain=True)
    assert parse_call(gen.text) is not None, gen.text


def test_the_tags_are_single_tokens(constrained):
    """The grammar lets the model spell "<tool_call>" piece by piece; it gets the one token instead."""
    model = constrained
    gen = model.generate(MESSAGES, TOOLS[-1:], Sampling(temperature=1.0, seed=0, max_tokens=64), constrain=True)
    assert gen.text == '<tool_call>\n{"name": "submit", "arguments": {}}\n</tool_call>'
    ids = model.tokenizer.convert_tokens_to_ids(["<tool_call>", "</tool_call>"])
    assert gen.token_ids[0] == ids[0] and gen.token_ids[-2] == ids[1]


def test_unconstrained_random_model_does_not_call_tools(model):
    for seed in range(3):
        gen = model.generate(MESSAGES, TOOLS, Sampling(temperature=1.0, seed=seed, max_tokens=60), constrain=False)
        assert parse_call(gen.text) is None


def test_constrain_without_tools_is_free(model):
    gen = model.generate(MESSAGES, None, Sampling(temperature=1.0, seed=0, max_tokens=20), constrain=True)
    assert gen.finish_reason == "length" and parse_call(gen.text) is None


def test_bad_tool_schemas_are_usage_errors():
    with pytest.raises(UsageError, match="function name"):
        tool_call_schema([{"type": "function", "function": {"description": "no name"}}])
    with pytest.raises(UsageError, match="at least one tool"):
        tool_call_schema([])


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
