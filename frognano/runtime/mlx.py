"""The MLX backend: a chat model run in-process with mlx-lm (Apple Silicon, or mlx's CPU build).

The chat template, the prompt cache kept between calls and ``generate`` itself are
``local.LocalModel``'s; this file loads the model and runs mlx-lm's ``generate_step`` over the
part of the prompt the cache does not hold.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from .mlx_cpu import use_fast_blas

use_fast_blas()  # before mlx's first import: its Linux CPU build's matmuls 40x faster (mlx_cpu.py)

import mlx.core as mx  # noqa: E402
from mlx_lm.generate import generate_step  # noqa: E402
from mlx_lm.models.cache import can_trim_prompt_cache, make_prompt_cache, trim_prompt_cache  # noqa: E402
from mlx_lm.sample_utils import apply_top_p, categorical_sampling, make_sampler  # noqa: E402

from .base import Generation, Sampling  # noqa: E402
from .grammar import CLOSE_MARGIN, ToolCallMatcher  # noqa: E402
from .local import LocalModel, Turn, end_of_turn_ids  # noqa: E402


class MLXModel(LocalModel):
    """``base.Model`` on mlx-lm.  Build with ``MLXModel.load("path/or/hub-id")``.

    Options: ``max_kv_size`` (a rotating KV cache of that many tokens), ``prefill_step_size``
    (prompt tokens per forward pass; default 2048), ``cache_prompt`` (keep the prompt cache
    between calls; default True), ``download`` (fetch a Hugging Face Hub id that is not in the
    local cache; default False: offline).
    """

    KIND = "mlx"
    OPTIONS = {"max_kv_size", "prefill_step_size", "cache_prompt", "download"}

    def __init__(self, name: str, model: Any, tokenizer: Any, *, path: str | None = None,
                 max_kv_size: int | None = None, prefill_step_size: int = 2048, cache_prompt: bool = True) -> None:
        hf_tokenizer = getattr(tokenizer, "_tokenizer", tokenizer)
        configured = set(getattr(tokenizer, "eos_token_ids", ()) or ())
        super().__init__(
            name, hf_tokenizer, cache_prompt=cache_prompt,
            vocab_size=int(model.args.vocab_size) if hasattr(model, "args") else len(hf_tokenizer),
            eos_token_ids=end_of_turn_ids(path, hf_tokenizer, configured),
        )
        self.model = model
        self.tokenizer = tokenizer  # mlx_lm TokenizerWrapper around a Hugging Face tokenizer
        self.max_kv_size = max_kv_size
        self.prefill_step_size = prefill_step_size

    @classmethod
    def load(cls, path_or_id: str, **options: Any) -> MLXModel:
        source, local = cls._resolve(path_or_id, options)
        import mlx_lm

        try:
            model, tokenizer = mlx_lm.load(source)
        except Exception as exc:
            raise cls._load_failed(path_or_id, local, exc) from None
        return cls(f"mlx:{path_or_id}", model, tokenizer, path=source if local else None, **options)

    # -- the prompt cache -----------------------------------------------------------------

    def _new_cache(self) -> list[Any]:
        return make_prompt_cache(self.model, max_kv_size=self.max_kv_size)

    def _trim_cache(self, n: int) -> bool:
        if not can_trim_prompt_cache(self._cache):
            return False
        trim_prompt_cache(self._cache, n)
        return True

    def _remember(self, tokens: list[int]) -> None:
        """Record what the cache holds: every prompt token and every sampled one.

        mlx-lm's generate_step feeds each token it yields to the model before yielding it
        (to overlap the next step), so the cache holds the sampled tokens too; checked against
        the cache's own length, and the cache dropped if they ever disagree.
        """
        offset = getattr(self._cache[0], "offset", None) if self._cache else None
        if offset == len(tokens):
            self._cached = tokens
        elif isinstance(offset, int) and offset > len(tokens) and can_trim_prompt_cache(self._cache):
            trim_prompt_cache(self._cache, offset - len(tokens))
            self._cached = tokens
        else:
            self._cache, self._cached = None, []

    # -- generation -----------------------------------------------------------------------

    def _generate(self, prompt: list[int], sampling: Sampling, matcher: ToolCallMatcher | None,
                  turn: Turn) -> Generation:
        # Recording, each step's grammar mask goes with the token (``Generation.allowed``), so
        # a trainer renormalises over the set the token was drawn from, as torch.py records it.
        masks: deque[Any] | None = deque() if sampling.logprobs and matcher is not None else None
        processors = None if matcher is None else [_constrain_logits(matcher, masks, sampling.max_tokens)]
        if sampling.seed is not None:
            mx.random.seed(sampling.seed)
        recorded: deque[mx.array] | None = None
        if sampling.logprobs:
            # Sample from float32 logits, so that the recorded log-probabilities are those of
            # the distribution drawn from, at float32 precision (mlx-lm would otherwise take
            # the log-softmax in the model's float16 / bfloat16).
            processors = [*(processors or []), _to_float32]
            recorded = deque()
            sampler = _recording_sampler(sampling, recorded)
        else:
            sampler = make_sampler(temp=sampling.temperature, top_p=sampling.top_p if sampling.top_p < 1 else 0.0)
        suffix = self._prepare_cache(prompt)
        steps = generate_step(
            mx.array(suffix), self.model, max_tokens=sampling.max_tokens, sampler=sampler,
            logits_processors=processors, prompt_cache=self._cache, prefill_step_size=self.prefill_step_size,
        )
        try:
            for token, _ in steps:
                # The sampler runs once per token, in order (one step ahead of what is yielded).
                logprob = None if recorded is None else recorded.popleft().item()
                allowed = None if masks is None else masks.popleft()
                if turn.take(int(token), logprob, allowed):
                    break
        finally:
            steps.close()
        generation = turn.end(len(prompt))
        self._remember(prompt + generation.token_ids)
        return generation


def _to_float32(tokens: mx.array, logits: mx.array) -> mx.array:
    """A logits processor: float32 logits, so generate_step's log-softmax is taken in float32."""
    return logits.astype(mx.float32)


def _recording_sampler(sampling: Sampling, recorded: deque[mx.array]) -> Any:
    """make_sampler's sampler for ``temperature`` and ``top_p`` (the same functions in the same
    order, so the same random draws), which also appends each sampled token's log-probability
    under the distribution it was drawn from to ``recorded`` (see ``base.Generation``).

    generate_step hands the sampler the log-softmax of the (masked) logits at temperature 1:
    greedy records it at the argmax; sampling applies top-p to it, scales by 1/temperature and
    records one more log-softmax of that.  The value is scheduled with the token, so reading it
    when the token is yielded does not wait for the step generate_step has run ahead.
    """
    temp, top_p = sampling.temperature, sampling.top_p

    def sample(logprobs: mx.array) -> mx.array:
        if temp == 0:
            token = mx.argmax(logprobs, axis=-1)
        else:
            if top_p < 1:
                logprobs = apply_top_p(logprobs, top_p)
            token = categorical_sampling(logprobs, temp)
            scaled = logprobs * (1.0 / temp)
            logprobs = scaled - mx.logsumexp(scaled, axis=-1, keepdims=True)
        chosen = mx.take_along_axis(logprobs, token[..., None], axis=-1).squeeze()
        mx.async_eval(token, chosen)
        recorded.append(chosen)
        return token

    return sample


def _constrain_logits(matcher: ToolCallMatcher, masks: deque[Any] | None = None, max_tokens: int = 0) -> Any:
    """An mlx-lm logits processor that masks what the tool-call grammar does not allow next
    (steering the reply to close in its last ``CLOSE_MARGIN`` tokens of ``max_tokens``); with
    ``masks``, it also appends each step's mask (None: unconstrained) there.  Like the recording
    sampler it runs once per token, in order, one step ahead of what is yielded."""
    state = {"first": True, "step": 0}

    def constrain_logits(tokens: mx.array, logits: mx.array) -> mx.array:
        # Called once per step; from the second call on, tokens[-1] is the last sample.
        if not state["first"]:
            matcher.accept(tokens[-1].item())
        state["first"] = False
        matcher.closing = max_tokens - state["step"] <= CLOSE_MARGIN
        state["step"] += 1
        mask = matcher.allowed()  # a fresh array each step: safe to keep
        if masks is not None:
            masks.append(mask)
        if mask is None:
            return logits
        return mx.where(mx.array(mask), logits, mx.array(float("-inf"), dtype=logits.dtype))

    return constrain_logits
