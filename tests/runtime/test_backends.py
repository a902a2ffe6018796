"""Both in-process backends on the tiny model: limits, stop strings, streaming, cancel, seeds, caching."""

from __future__ import annotations

import threading

import pytest

from frognano.errors import UsageError
from frognano.runtime.base import Generation, Model, Sampling

from .conftest import MESSAGES, TOOLS

HOT = dict(temperature=1.0)  # the random model's greedy output is one token repeated; sample instead


def free(model, *, tools=None, messages=MESSAGES, **sampling) -> Generation:
    sampling = {"max_tokens": 40, **sampling}
    return model.generate(messages, tools, Sampling(**sampling), constrain=False)


def test_is_a_model(model):
    assert isinstance(model, Model)
    assert model.name.startswith(("mlx:", "torch:"))


def test_max_tokens_and_token_counts(model):
    gen = free(model, tools=TOOLS, max_tokens=12, seed=0, **HOT)
    assert gen.finish_reason == "length"
    assert gen.completion_tokens == len(gen.token_ids) == 12
    assert gen.prompt_tokens == len(model.encode_prompt(MESSAGES, TOOLS))
    assert gen.prompt_tokens > len(model.encode_prompt(MESSAGES))  # the tool schemas are in the prompt
    assert gen.text == model.decode(gen.token_ids)


def test_same_seed_same_tokens_other_seed_other_tokens(model):
    a = free(model, seed=7, **HOT)
    model.reset_cache()
    b = free(model, seed=7, **HOT)
    model.reset_cache()
    c = free(model, seed=8, **HOT)
    assert a.token_ids == b.token_ids and a.text == b.text
    assert a.token_ids != c.token_ids


def test_stop_string_ends_the_text_before_it(model):
    full = free(model, seed=3, **HOT)
    stop = next(full.text[i:i + 2] for i in range(8, len(full.text)) if full.text[i:i + 2].isprintable())
    cut = full.text.index(stop)
    model.reset_cache()
    pieces: list[str] = []
    gen = model.generate(MESSAGES, None, Sampling(max_tokens=40, seed=3, stop=["never here", stop], **HOT),
                         on_text=pieces.append, constrain=False)
    assert gen.finish_reason == "stop"
    assert gen.text == full.text[:cut]
    assert "".join(pieces) == gen.text  # the stop string never reaches the stream
    assert gen.completion_tokens == len(gen.token_ids) < full.completion_tokens
    assert gen.token_ids == full.token_ids[: len(gen.token_ids)]


def test_streaming_pieces_add_up_to_the_text(model):
    pieces: list[str] = []
    gen = model.generate(MESSAGES, None, Sampling(max_tokens=30, seed=1, **HOT), on_text=pieces.append, constrain=False)
    assert len(pieces) > 1
    assert "".join(pieces) == gen.text


def test_cancel_from_the_stream_callback(model):
    cancel = threading.Event()
    seen: list[str] = []

    def on_text(piece: str) -> None:
        seen.append(piece)
        cancel.set()

    gen = model.generate(MESSAGES, None, Sampling(max_tokens=200, seed=2, **HOT),
                         on_text=on_text, cancel=cancel, constrain=False)
    assert gen.finish_reason == "cancelled"
    assert len(seen) == 1 and gen.text.startswith(seen[0])
    assert gen.completion_tokens == len(gen.token_ids) < 10


def test_cancel_set_before_the_call(model):
    cancel = threading.Event()
    cancel.set()
    gen = model.generate(MESSAGES, None, Sampling(max_tokens=20), cancel=cancel, constrain=False)
    assert gen.finish_reason == "cancelled" and gen.token_ids == [] and gen.text == ""
    assert gen.prompt_tokens == len(model.encode_prompt(MESSAGES))


def test_prompt_cache_is_reused_across_turns(model):
    first = free(model, tools=TOOLS, max_tokens=8)  # greedy
    assert model.last_prompt_reused == 0 and model.last_prompt_processed == first.prompt_tokens
    turn2 = MESSAGES + [{"role": "assistant", "content": first.text}, {"role": "user", "content": "go on"}]
    second = free(model, tools=TOOLS, messages=turn2, max_tokens=8)
    # The first prompt (and whatever of the reply re-tokenises the same) came from the cache; only
    # its last token may differ, when the reply starts with newlines that merge with its "\n".
    assert model.last_prompt_reused >= first.prompt_tokens - 1
    assert model.last_prompt_processed == second.prompt_tokens - model.last_prompt_reused
    assert model.last_prompt_processed <= second.prompt_tokens - first.prompt_tokens + 1
    # A new episode with another system prompt shares only a few tokens: the cache is trimmed.
    other = [{"role": "system", "content": "Something else entirely."}, MESSAGES[1]]
    free(model, messages=other, max_tokens=2)
    assert model.last_prompt_reused < 10
    # Reuse changes no result: the same turn from an empty cache gives the same greedy tokens.
    free(model, tools=TOOLS, max_tokens=8)
    again = free(model, tools=TOOLS, messages=turn2, max_tokens=8)
    model.reset_cache()
    fresh = free(model, tools=TOOLS, messages=turn2, max_tokens=8)
    assert model.last_prompt_reused == 0
    assert again.token_ids == fresh.token_ids == second.token_ids


def test_top_p_and_bad_sampling(model):
    gen = free(model, max_tokens=5, top_p=0.5, seed=0, **HOT)
    assert gen.completion_tokens == 5
    with pytest.raises(UsageError):
        Sampling(top_p=0)
