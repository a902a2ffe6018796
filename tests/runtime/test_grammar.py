"""The tool-call grammar: with tools and constrain=True, a random model can only emit one valid call."""

from __future__ import annotations

import json

import pytest

from frognano.errors import UsageError
from frognano.runtime.base import Sampling
from frognano.runtime.grammar import tool_call_schema, tool_call_text

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


@pytest.mark.slow
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


def _choices(gen) -> list[int]:
    """How many tokens the grammar allowed at each step of ``gen`` (sampled with logprobs)."""
    import numpy as np

    return [int(np.unpackbits(np.frombuffer(a, np.uint8), bitorder="little").sum()) for a in gen.allowed]


def test_forced_text_is_one_split_and_choices_are_left_where_the_call_differs(constrained):
    """Where the grammar forces the characters (keys, punctuation, the rest of a tool's name),
    one split of them is forced too: every sample spells a call with the same tokens, and only
    the steps where calls can differ offer the model a choice."""
    model = constrained
    tails: set[tuple[int, ...]] = set()
    bare = {t["function"]["name"] for t in TOOLS if not t["function"].get("parameters", {}).get("properties")}
    for seed in range(12):
        gen = model.generate(MESSAGES, TOOLS, Sampling(temperature=1.0, seed=seed, max_tokens=1024, logprobs=True),
                             constrain=True)
        call = parse_call(gen.text)
        assert call is not None, gen.text
        counts = _choices(gen)
        assert len(counts) == len(gen.token_ids)
        # Choosing the tool is one step (or a few, where a name's first piece is shared); the
        # keys and punctuation around it are never a choice.
        head = gen.token_ids.index(model.tokenizer.convert_tokens_to_ids("<tool_call>"))
        assert counts[head] == 1 and counts[head + 1] == 1  # the tag, then the newline
        free = sum(c > 1 for c in counts)
        assert free <= 3 + 2 * len(json.dumps(call[1])), (gen.text, counts)
        # The tool is one choice, one token per tool (no tool's name is the start of another
        # here): the reply's first choice offers exactly one token per tool.
        assert next(c for c in counts if c > 1) == len(TOOLS), counts
        if call[0] in bare:
            keyed = next(p for p in range(len(gen.token_ids)) if '"arguments"' in model.decode(gen.token_ids[:p]))
            tails.add(tuple(gen.token_ids[keyed:]))
    # Calls of tools that take no arguments end with the same tokens, whichever tool and seed.
    assert len(tails) == 1, tails


def test_the_grammar_calls_only_the_offered_tools_while_the_prompt_shows_them_all(constrained):
    """``offered`` narrows what the reply may call, not what the prompt says: the same prompt
    tokens, and the tool choice offers one token per offered tool."""
    model = constrained
    offered = [t["function"]["name"] for t in TOOLS if t["function"]["name"] != "submit"][:3]
    names = set()
    for seed in range(8):
        gen = model.generate(MESSAGES, TOOLS, Sampling(temperature=1.0, seed=seed, max_tokens=1024, logprobs=True),
                             constrain=True, offered=offered)
        call = parse_call(gen.text)
        assert call is not None and call[0] in offered, gen.text
        names.add(call[0])
        assert next(c for c in _choices(gen) if c > 1) == len(offered)
    assert len(names) > 1
    full = model.generate(MESSAGES, TOOLS, Sampling(temperature=1.0, seed=0, max_tokens=1024), constrain=True)
    assert full.prompt_tokens == gen.prompt_tokens  # the prompt shows every tool either way
    with pytest.raises(UsageError, match="none of the tools"):
        model.generate(MESSAGES, TOOLS, Sampling(max_tokens=8), constrain=True, offered=["nope"])


def test_a_schema_in_offered_narrows_that_tools_arguments_in_the_grammar_alone(constrained):
    """An ``offered`` entry may be a tool's schema: the harness offers ``apply`` with only the
    candidates not yet tried (an ``enum``), and the reply can call no other number, while the
    prompt still shows the full schema."""
    from frognano.repair.harness import TOOLS as HARNESS

    model = constrained
    apply = next(t for t in HARNESS if t["function"]["name"] == "apply")
    fn = apply["function"]
    narrowed = {**apply, "function": {**fn, "parameters": {**fn["parameters"],
                                                           "properties": {"n": {"type": "integer", "enum": [2, 5]}}}}}
    seen = set()
    for seed in range(12):
        gen = model.generate(MESSAGES, HARNESS, Sampling(temperature=1.0, seed=seed, max_tokens=256),
                             constrain=True, offered=[narrowed])
        call = parse_call(gen.text)
        assert call is not None and call[0] == "apply", gen.text
        seen.add(call[1]["n"])
    assert seen <= {2, 5} and seen
    full = model.generate(MESSAGES, HARNESS, Sampling(max_tokens=256), constrain=True, offered=["apply"])
    assert full.prompt_tokens == gen.prompt_tokens  # the prompt is the same


def test_unconstrained_random_model_does_not_call_tools(model):
    for seed in range(3):
        gen = model.generate(MESSAGES, TOOLS, Sampling(temperature=1.0, seed=seed, max_tokens=60), constrain=False)
        assert parse_call(gen.text) is None


def test_constrain_without_tools_is_free(model):
    gen = model.generate(MESSAGES, None, Sampling(temperature=1.0, seed=0, max_tokens=20), constrain=True)
    # Free text (the random model may end its turn before the 20 tokens), never a forced call.
    assert gen.token_ids and gen.finish_reason in ("length", "stop") and parse_call(gen.text) is None


def test_bad_tool_schemas_are_usage_errors():
    with pytest.raises(UsageError, match="function name"):
        tool_call_schema([{"type": "function", "function": {"description": "no name"}}])
    with pytest.raises(UsageError, match="at least one tool"):
        tool_call_schema([])


def test_tool_call_text_is_what_the_grammar_allows():
    text = tool_call_text("read", {"path": "é.py"})
    assert text == '<tool_call>\n{"name": "read", "arguments": {"path": "é.py"}}\n</tool_call>'
    assert parse_call(text) is not None
