"""``Sampling(logprobs=True)``: each sampled token's log-probability under the distribution it was
drawn from (temperature, grammar mask renormalised, top-p), as RL training needs it.

The check is an independent recomputation: the model run once, teacher-forced, over prompt +
sampled tokens (no KV cache, no decode loop), a fresh grammar matcher walked over the same
tokens for each step's allowed set, and the log-softmax taken in float64 here.  The exact
comparisons use float32 weights on both backends (the MLX one loads the torch tiny folder);
the float16 MLX model is checked for shape and sign.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from frognano.runtime.base import Generation, Sampling
from frognano.runtime.replay import ReplayModel

from .conftest import MESSAGES, TOOLS

TOL = 1e-3


@pytest.fixture(scope="module")
def mlx32_model(tiny_torch):
    """The MLX backend on float32 weights (the torch tiny folder), for exact comparisons."""
    pytest.importorskip("mlx_lm")
    from frognano.runtime.load import load_model

    model = load_model(f"mlx:{tiny_torch}")
    yield model
    model.close()


@pytest.fixture(params=["mlx", "torch"])
def model32(request):
    """Each in-process backend on float32 weights, its prompt cache emptied."""
    m = request.getfixturevalue("mlx32_model" if request.param == "mlx" else "torch_model")
    m.reset_cache()
    return m


def forward_logits(model, ids: list[int]) -> np.ndarray:
    """Teacher-forced logits (positions x vocabulary, float64) of one full forward pass."""
    if model.name.startswith("torch:"):
        import torch

        with torch.inference_mode():
            out = model.model(input_ids=torch.tensor([ids], device=model.device), use_cache=False)
        return out.logits[0].float().cpu().numpy().astype(np.float64)
    import mlx.core as mx

    logits = model.model(mx.array([ids]))[0].astype(mx.float32)
    return np.array(logits).astype(np.float64)


def allowed_masks(model, tools, token_ids: list[int], max_tokens: int = 48) -> list[np.ndarray | None]:
    """Each step's allowed tokens, from a fresh matcher walked over ``token_ids`` (None: free),
    steered to close in the last ``CLOSE_MARGIN`` steps of ``max_tokens`` as the decode loops do."""
    from frognano.runtime.grammar import CLOSE_MARGIN

    if not tools:
        return [None] * len(token_ids)
    matcher = model._matcher(tools)  # a new walk through the model's own grammar
    masks = []
    for step, token in enumerate(token_ids):
        matcher.closing = max_tokens - step <= CLOSE_MARGIN
        mask = matcher.allowed()
        masks.append(None if mask is None else mask.copy())
        assert mask is None or mask[token], "a sampled token the grammar did not allow"
        matcher.accept(token)
    return masks


def reference(model, messages, tools, gen: Generation, temperature: float, *, masked: bool) -> list[float]:
    """log p(token) under softmax(logits / T) (T = 1 for greedy), restricted to the tokens the
    grammar for ``tools`` allowed when ``masked``."""
    prompt = model.encode_prompt(messages, tools)
    assert gen.prompt_tokens == len(prompt)
    ids = prompt + gen.token_ids
    logits = forward_logits(model, ids)[len(prompt) - 1 : len(ids) - 1]
    masks = allowed_masks(model, tools, gen.token_ids) if masked else [None] * len(gen.token_ids)
    out = []
    for row, mask, token in zip(logits, masks, gen.token_ids):
        scaled = row / (temperature or 1.0)
        if mask is not None:
            scaled = np.where(mask, scaled, -np.inf)
        top = scaled.max()
        out.append(float(scaled[token] - top - math.log(np.exp(scaled - top).sum())))
    return out


def check_shape(gen: Generation) -> None:
    assert len(gen.logprobs) == len(gen.token_ids) == gen.completion_tokens > 0
    assert all(isinstance(x, float) and math.isfinite(x) and x <= 0 for x in gen.logprobs)


CASES = {
    "free-sampled": dict(tools=None, temperature=0.7),
    "free-hot": dict(tools=None, temperature=1.5),
    "free-greedy": dict(tools=None, temperature=0.0),
    "constrained-sampled": dict(tools=TOOLS, temperature=1.0),
    "constrained-cool": dict(tools=TOOLS, temperature=0.6),
    "constrained-greedy": dict(tools=TOOLS, temperature=0.0),
}


@pytest.mark.parametrize("case", CASES)
def test_logprobs_are_the_sampled_distributions(model32, case):
    tools, temperature = CASES[case]["tools"], CASES[case]["temperature"]
    if tools:
        pytest.importorskip("xgrammar")
    sampling = Sampling(temperature=temperature, seed=3, max_tokens=48, logprobs=True)
    gen = model32.generate(MESSAGES, tools, sampling, constrain=True)
    check_shape(gen)
    want = reference(model32, MESSAGES, tools, gen, temperature, masked=True)
    assert np.allclose(gen.logprobs, want, atol=TOL, rtol=0), list(zip(gen.logprobs, want))
    if tools:
        # The grammar mattered: forced tokens have log-probability 0, which the raw softmax
        # does not give them; a loss on unmasked log-probabilities would be off by this much.
        assert any(abs(x) < 1e-6 for x in gen.logprobs) and any(x < -1e-3 for x in gen.logprobs)
        raw = reference(model32, MESSAGES, tools, gen, temperature, masked=False)
        assert max(abs(a - b) for a, b in zip(gen.logprobs, raw)) > 0.1
    if temperature not in (0.0, 1.0):
        # ... and so did the temperature (by little where the grammar leaves few choices: the
        # random model's logits are nearly flat).
        plain = reference(model32, MESSAGES, tools, gen, 1.0, masked=True)
        assert max(abs(a - b) for a, b in zip(gen.logprobs, plain)) > 2 * TOL


def test_each_token_records_the_grammar_mask_it_was_drawn_under(model32):
    """``Generation.allowed``, in every in-process backend: per sampled token, exactly the set a
    fresh matcher allows at that step (None once the grammar is done), so the trainer can
    renormalise over it; nothing without recording or without a grammar."""
    pytest.importorskip("xgrammar")
    sampling = Sampling(temperature=1.0, seed=3, max_tokens=48, logprobs=True)
    gen = model32.generate(MESSAGES, TOOLS, sampling, constrain=True)
    check_shape(gen)
    assert len(gen.allowed) == len(gen.token_ids)
    want = allowed_masks(model32, TOOLS, gen.token_ids)
    for packed, mask, token in zip(gen.allowed, want, gen.token_ids):
        if mask is None:
            assert packed is None
            continue
        bits = np.unpackbits(np.frombuffer(packed, dtype=np.uint8), bitorder="little")[: len(mask)].astype(bool)
        assert np.array_equal(bits, mask) and bits[token]
    assert any(m is not None and m.sum() == 1 for m in want)  # forced steps were recorded as such
    assert model32.generate(MESSAGES, TOOLS, Sampling(temperature=1.0, seed=3, max_tokens=48),
                            constrain=True).allowed == []
    assert model32.generate(MESSAGES, None, sampling, constrain=True).allowed == []


def test_logprobs_after_the_prompt_cache_is_reused(model32):
    first = model32.generate(MESSAGES, TOOLS, Sampling(max_tokens=8), constrain=False)
    turn2 = MESSAGES + [{"role": "assistant", "content": first.text}, {"role": "user", "content": "go on"}]
    gen = model32.generate(turn2, TOOLS, Sampling(temperature=1.0, seed=1, max_tokens=24, logprobs=True),
                           constrain=False)
    assert model32.last_prompt_reused > 0
    check_shape(gen)
    assert np.allclose(gen.logprobs, reference(model32, turn2, TOOLS, gen, 1.0, masked=False), atol=TOL, rtol=0)


def test_top_p_renormalises_over_the_nucleus(model32):
    """After top-p truncation the log-probability rises by -log(kept mass), at most -log(top_p)."""
    top_p = 0.5
    gen = model32.generate(MESSAGES, None, Sampling(temperature=1.0, top_p=top_p, seed=0, max_tokens=32,
                                                    logprobs=True), constrain=False)
    check_shape(gen)
    full = reference(model32, MESSAGES, None, gen, 1.0, masked=False)
    rise = [a - b for a, b in zip(gen.logprobs, full)]
    assert all(-TOL <= r <= -math.log(top_p) + TOL for r in rise), rise
    assert sum(rise) / len(rise) > 0.1  # truncated, not the full distribution's values


def test_recording_draws_the_same_tokens(model32):
    for tools in (None, TOOLS):
        if tools:
            pytest.importorskip("xgrammar")
        sampling = dict(temperature=1.0, seed=5, max_tokens=32)
        off = model32.generate(MESSAGES, tools, Sampling(**sampling), constrain=True)
        on = model32.generate(MESSAGES, tools, Sampling(**sampling, logprobs=True), constrain=True)
        assert on.token_ids == off.token_ids and on.text == off.text
        assert off.logprobs == []


def test_off_by_default_and_on_in_every_backend(model):
    """``model`` includes the float16 MLX model: its values are recorded in float32."""
    gen = model.generate(MESSAGES, None, Sampling(temperature=1.0, seed=0, max_tokens=16), constrain=False)
    # Off by default; the random model may end its turn before the 16 tokens.
    assert gen.logprobs == [] and 0 < len(gen.token_ids) <= 16
    for sampling in (Sampling(temperature=1.0, seed=0, max_tokens=16, logprobs=True),
                     Sampling(max_tokens=16, logprobs=True),
                     Sampling(temperature=0.8, top_p=0.9, seed=0, max_tokens=16, logprobs=True)):
        gen = model.generate(MESSAGES, None, sampling, constrain=False)
        check_shape(gen)
        if sampling.top_p == 1:
            # Loosely: a float16 forward pass over the whole sequence need not round exactly as
            # the cached decode loop does.
            want = reference(model, MESSAGES, None, gen, sampling.temperature, masked=False)
            assert np.allclose(gen.logprobs, want, atol=5e-2, rtol=0)


def test_stop_string_and_cancel_keep_one_logprob_per_token(model32):
    full = model32.generate(MESSAGES, None, Sampling(temperature=1.0, seed=3, max_tokens=40, logprobs=True),
                            constrain=False)
    stop = next(full.text[i:i + 2] for i in range(8, len(full.text)) if full.text[i:i + 2].isprintable())
    cut = model32.generate(MESSAGES, None, Sampling(temperature=1.0, seed=3, max_tokens=40, stop=[stop],
                                                    logprobs=True), constrain=False)
    assert cut.finish_reason == "stop"
    check_shape(cut)
    assert cut.token_ids == full.token_ids[: len(cut.token_ids)]
    assert np.allclose(cut.logprobs, full.logprobs[: len(cut.logprobs)], atol=TOL, rtol=0)


def test_replay_records_none():
    gen = ReplayModel(["<tool_call>\n{}\n</tool_call>"]).generate(MESSAGES, TOOLS, Sampling(logprobs=True))
    assert gen.logprobs == [] and gen.token_ids == []


def test_http_records_none():
    from .test_http import Stub, completion

    from frognano.runtime.http import OpenAIModel

    with Stub(lambda r, n: completion("hello")) as stub:
        gen = OpenAIModel("m", stub.url, model_check=False).generate(
            MESSAGES, None, Sampling(temperature=1.0, logprobs=True))
    assert gen.text == "hello" and gen.logprobs == []


def test_forced_tokens_cost_no_forward_pass_and_greedy_stays_greedy(torch_model):
    """Jump-forward decoding (torch): where the grammar allows one token it is taken without a
    forward pass and fed with the next choice, so a constrained reply runs fewer forward passes
    than it has tokens; every free token is still the masked argmax of the teacher-forced
    logits (the batched feed changes nothing the choice depends on)."""
    pytest.importorskip("xgrammar")
    torch_model.reset_cache()
    calls = []
    hook = torch_model.model.register_forward_hook(lambda *_: calls.append(1))
    try:
        gen = torch_model.generate(MESSAGES, TOOLS, Sampling(temperature=0.0, max_tokens=48, logprobs=True),
                                   constrain=True)
    finally:
        hook.remove()
    masks = allowed_masks(torch_model, TOOLS, gen.token_ids)
    forced = sum(1 for m in masks if m is not None and m.sum() == 1)
    # One pass per free choice, and one at the end that feeds the reply's closing forced tokens
    # (so the next turn reuses the whole reply from the cache).
    free = len(gen.token_ids) - forced
    assert forced > 0 and len(calls) in (free, free + 1) and len(calls) < len(gen.token_ids)
    prompt = torch_model.encode_prompt(MESSAGES, TOOLS)
    logits = forward_logits(torch_model, prompt + gen.token_ids)[len(prompt) - 1: len(prompt) + len(gen.token_ids) - 1]
    for row, mask, token in zip(logits, masks, gen.token_ids):
        assert token == int(np.argmax(np.where(mask, row, -np.inf) if mask is not None else row))
