"""The MLX backend: a chat model run in-process with mlx-lm (Apple Silicon, or mlx's CPU build).

The prompt cache is kept between calls.  An episode's prompts grow turn by turn (the previous
prompt, the reply, the tool result, ...), so each ``generate`` finds the longest common prefix
of the new prompt and the tokens the cache holds, trims the cache to it and feeds only the
rest; a prompt that shares nothing (a new episode with another system prompt) starts afresh.
``last_prompt_processed`` / ``last_prompt_reused`` say how many prompt tokens the last call ran
through the model and took from the cache.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import mlx.core as mx
from mlx_lm.generate import generate_step
from mlx_lm.models.cache import can_trim_prompt_cache, make_prompt_cache, trim_prompt_cache
from mlx_lm.sample_utils import make_sampler

from ..errors import UsageError
from .base import Generation, Message, ModelError, Sampling, ToolSchema
from .constrain import TextStream, ToolCallGrammar, end_of_turn_ids, one_line, resolve_model_path, reusable_prefix


class MLXModel:
    """``base.Model`` on mlx-lm.  Build with ``MLXModel.load("path/or/hub-id")``.

    Options: ``max_kv_size`` (a rotating KV cache of that many tokens), ``prefill_step_size``
    (prompt tokens per forward pass; default 2048), ``cache_prompt`` (keep the prompt cache
    between calls; default True), ``download`` (fetch a Hugging Face Hub id that is not in the
    local cache; default False: offline).
    """

    OPTIONS = {"max_kv_size", "prefill_step_size", "cache_prompt", "download"}

    def __init__(self, name: str, model: Any, tokenizer: Any, *, path: str | None = None,
                 max_kv_size: int | None = None, prefill_step_size: int = 2048, cache_prompt: bool = True) -> None:
        self.name = name
        self.model = model
        self.tokenizer = tokenizer  # mlx_lm TokenizerWrapper around a Hugging Face tokenizer
        self.hf_tokenizer = getattr(tokenizer, "_tokenizer", tokenizer)
        self.vocab_size = int(model.args.vocab_size) if hasattr(model, "args") else len(self.hf_tokenizer)
        configured = set(getattr(tokenizer, "eos_token_ids", ()) or ())
        self.eos_token_ids = end_of_turn_ids(path, self.hf_tokenizer, configured)
        self.max_kv_size = max_kv_size
        self.prefill_step_size = prefill_step_size
        self.cache_prompt = cache_prompt
        self._grammar: ToolCallGrammar | None = None
        self._lock = threading.Lock()
        self._cache: list[Any] | None = None
        self._cached: list[int] = []  # the tokens whose keys and values the cache holds
        self.last_prompt_processed = 0  # prompt tokens run through the model by the last call
        self.last_prompt_reused = 0  # prompt tokens the last call took from the cache

    @classmethod
    def load(cls, path_or_id: str, **options: Any) -> MLXModel:
        unknown = set(options) - cls.OPTIONS
        if unknown:
            known = ", ".join(sorted(cls.OPTIONS))
            raise UsageError(f"unknown mlx model option(s): {', '.join(sorted(unknown))} (known: {known})")
        source, local = resolve_model_path(path_or_id, "mlx", download=bool(options.pop("download", False)))
        import mlx_lm

        try:
            model, tokenizer = mlx_lm.load(source)
        except Exception as exc:
            where = "" if local else " (not a local folder, and the Hugging Face Hub could not provide it)"
            raise ModelError(f"mlx:{path_or_id}: cannot load the model{where}: {one_line(exc)}") from None
        return cls(f"mlx:{path_or_id}", model, tokenizer, path=source if local else None, **options)

    # -- prompts --------------------------------------------------------------------------

    def render(self, messages: list[Message], tools: list[ToolSchema] | None = None) -> str:
        """The chat template applied to ``messages`` (and ``tools``), ready for the reply."""
        try:
            return self.hf_tokenizer.apply_chat_template(
                messages, tools=tools or None, add_generation_prompt=True, tokenize=False
            )
        except Exception as exc:
            raise UsageError(f"{self.name}: cannot render the chat template: {one_line(exc)}") from None

    def encode_prompt(self, messages: list[Message], tools: list[ToolSchema] | None = None) -> list[int]:
        return list(self.hf_tokenizer.encode(self.render(messages, tools), add_special_tokens=False))

    def decode(self, ids: list[int]) -> str:
        return self.hf_tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def reset_cache(self) -> None:
        with self._lock:
            self._cache, self._cached = None, []

    def _prepare_cache(self, prompt: list[int]) -> list[int]:
        """Make the cache hold a prefix of ``prompt``; return the tokens still to feed."""
        def trim(n: int) -> bool:
            if not can_trim_prompt_cache(self._cache):
                return False
            trim_prompt_cache(self._cache, n)
            return True

        usable = self.cache_prompt and self._cache is not None
        keep = reusable_prefix(self._cached, prompt, trim) if usable else 0
        if keep <= 0:
            self._cache = make_prompt_cache(self.model, max_kv_size=self.max_kv_size)
            keep = 0
        self._cached = list(prompt[:keep])
        self.last_prompt_reused = keep
        self.last_prompt_processed = len(prompt) - keep
        return prompt[keep:]

    # -- generation -----------------------------------------------------------------------

    def generate(
        self,
        messages: list[Message],
        tools: list[ToolSchema] | None = None,
        sampling: Sampling | None = None,
        *,
        on_text: Callable[[str], None] | None = None,
        cancel: threading.Event | None = None,
        constrain: bool = True,
    ) -> Generation:
        sampling = sampling or Sampling()
        prompt = self.encode_prompt(messages, tools)
        if not prompt:
            raise UsageError(f"{self.name}: the rendered prompt is empty")
        with self._lock:
            return self._generate(prompt, tools, sampling, on_text, cancel, constrain)

    def _generate(self, prompt, tools, sampling, on_text, cancel, constrain) -> Generation:
        if cancel is not None and cancel.is_set():
            return Generation("", finish_reason="cancelled", prompt_tokens=len(prompt))
        processors = []
        if constrain and tools:
            if self._grammar is None:
                self._grammar = ToolCallGrammar(self.hf_tokenizer, self.vocab_size, sorted(self.eos_token_ids))
            matcher = self._grammar.matcher(tools)
            state = {"first": True}

            def constrain_logits(tokens: mx.array, logits: mx.array) -> mx.array:
                # Called once per step; from the second call on, tokens[-1] is the last sample.
                if not state["first"]:
                    matcher.accept(tokens[-1].item())
                state["first"] = False
                mask = matcher.allowed()
                if mask is None:
                    return logits
                return mx.where(mx.array(mask), logits, mx.array(float("-inf"), dtype=logits.dtype))

            processors.append(constrain_logits)
        if sampling.seed is not None:
            mx.random.seed(sampling.seed)
        sampler = make_sampler(temp=sampling.temperature, top_p=sampling.top_p if sampling.top_p < 1 else 0.0)

        suffix = self._prepare_cache(prompt)
        stream = TextStream(self.decode, sampling.stop)
        ids: list[int] = []
        finish = "length"
        steps = generate_step(
            mx.array(suffix), self.model, max_tokens=sampling.max_tokens, sampler=sampler,
            logits_processors=processors or None, prompt_cache=self._cache,
            prefill_step_size=self.prefill_step_size,
        )
        try:
            for token, _ in steps:
                ids.append(int(token))
                if token in self.eos_token_ids:
                    finish = "stop"
                    break
                piece = stream.feed(int(token))
                if piece and on_text is not None:
                    on_text(piece)
                if stream.stopped:
                    finish = "stop"
                    break
                if cancel is not None and cancel.is_set():
                    finish = "cancelled"
                    break
        except BaseException:
            self._cache, self._cached = None, []  # the cache's state is unknown now
            raise
        finally:
            steps.close()
        rest = stream.finish()
        if rest and on_text is not None:
            on_text(rest)
        self._remember(prompt + ids)
        return Generation(stream.text, token_ids=ids, finish_reason=finish,
                          prompt_tokens=len(prompt), completion_tokens=len(ids))

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

    def close(self) -> None:
        with self._lock:
            self._cache, self._cached = None, []
            self._grammar = None
