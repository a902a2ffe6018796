"""The torch backend: a chat model run in-process with transformers (CUDA, MPS or CPU).

A plain decoding loop rather than ``model.generate``: one forward pass per token over a
``DynamicCache``, so that streaming, stop strings, cancellation between tokens and the
tool-call constraint are all a few lines here, and so the prompt cache can be kept across the
turns of an episode exactly as the MLX backend keeps it (``local.LocalModel`` holds the chat
template, the prompt cache bookkeeping and ``generate``; this file loads the model and decodes).
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable
from typing import Any

import numpy
import torch

from ..errors import UsageError
from .base import Generation, Sampling, one_line
from .grammar import CLOSE_MARGIN, ToolCallMatcher
from .local import LocalModel, Turn, end_of_turn_ids, int_ids


def pick_device(device: str | None = None) -> torch.device:
    """``device`` if given (and usable), else cuda, then mps, then cpu."""
    if device is None:
        if torch.cuda.is_available():
            return torch.device("cuda")
        mps = getattr(torch.backends, "mps", None)
        if mps is not None and mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise UsageError(f"device {device!r}: {one_line(exc)}") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"device {device!r}: CUDA is not available to this torch ({torch.__version__})")
    if dev.type == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise UsageError(f"device {device!r}: MPS is not available on this machine")
    return dev


def default_dtype(device: torch.device) -> torch.dtype:
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if device.type == "mps":
        return torch.float16
    return torch.float32


_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


class TorchModel(LocalModel):
    """``base.Model`` on transformers.  Build with ``TorchModel.load("path/or/hub-id")``.

    Options: ``device`` ("cuda", "cuda:1", "mps", "cpu"; default: the best available),
    ``quantize="4bit"`` (bitsandbytes NF4, CUDA only), ``dtype`` ("float32", "float16",
    "bfloat16"; default: bfloat16 on CUDA where supported, float16 on MPS, float32 on CPU),
    ``cache_prompt`` (keep the prompt cache between calls; default True), ``download`` (fetch a
    Hugging Face Hub id that is not in the local cache; default False: offline), ``threads``
    (torch's CPU threads, for the whole process; default: torch's own, one per core; the faces
    pass ``lazy.decode_threads`` of their test lanes).
    """

    KIND = "torch"
    OPTIONS = {"device", "quantize", "dtype", "cache_prompt", "download", "threads"}

    def __init__(
        self, name: str, model: Any, tokenizer: Any, *, path: str | None = None, cache_prompt: bool = True
    ) -> None:
        super().__init__(
            name, tokenizer, cache_prompt=cache_prompt, vocab_size=int(model.config.vocab_size),
            eos_token_ids=end_of_turn_ids(path, tokenizer, self._configured_eos(model)),
        )
        self.model = model
        self.tokenizer = tokenizer
        self.device = next(model.parameters()).device
        # A peft wrapper (a policy being trained) forwards **kwargs: ask the model underneath.
        inner = model.get_base_model() if hasattr(model, "get_base_model") else model
        params = inspect.signature(inner.forward).parameters
        self._cache_arg = "cache" if "cache" in params else "past_key_values"
        # Only the last position's logits are used.  Without this a prefill runs the lm_head over
        # the whole prompt (prompt x vocabulary logits: gigabytes for a 150k vocabulary), which
        # transformers' own generate avoids the same way (with a 32k vocabulary and a 1.6k-token
        # prompt, prefill took twice as long as generate's without it).
        keep = next((k for k in ("logits_to_keep", "num_logits_to_keep") if k in params), None)
        self._keep_last = {keep: 1} if keep else {}

    @staticmethod
    def _configured_eos(model: Any) -> set[int]:
        ids: set[int] = set()
        for cfg in (model.config, getattr(model, "generation_config", None)):
            ids.update(int_ids(getattr(cfg, "eos_token_id", None)))
        return ids

    @classmethod
    def load(cls, path_or_id: str, **options: Any) -> TorchModel:
        source, local = cls._resolve(path_or_id, options)
        threads = options.get("threads")
        if threads is not None:
            if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
                raise UsageError(f"threads must be a positive integer, got {threads!r}")
            torch.set_num_threads(threads)
        device = pick_device(options.get("device"))
        quantize = options.get("quantize")
        dtype_name = options.get("dtype")
        if dtype_name is not None and dtype_name not in _DTYPES:
            raise UsageError(f"dtype {dtype_name!r}: expected one of {', '.join(_DTYPES)}")
        dtype = _DTYPES[dtype_name] if dtype_name else default_dtype(device)

        import transformers
        from transformers import AutoModelForCausalLM, AutoTokenizer

        kwargs = _load_kwargs(transformers, device, dtype, quantize)
        bars = transformers.utils.logging.is_progress_bar_enabled()
        transformers.utils.logging.disable_progress_bar()
        try:
            tokenizer = AutoTokenizer.from_pretrained(source)
            model = AutoModelForCausalLM.from_pretrained(source, **kwargs)
        except Exception as exc:
            raise cls._load_failed(path_or_id, local, exc) from None
        finally:
            if bars:
                transformers.utils.logging.enable_progress_bar()
        if quantize is None:
            model = model.to(device)
        model.eval()
        return cls(f"torch:{path_or_id}", model, tokenizer, path=source if local else None,
                   cache_prompt=options.get("cache_prompt", True))

    # -- the prompt cache -----------------------------------------------------------------

    def _new_cache(self) -> Any:
        from transformers import DynamicCache

        try:
            return DynamicCache(config=self.model.config)
        except TypeError:  # transformers < 4.56
            return DynamicCache()

    def _trim_cache(self, n: int) -> bool:
        if not hasattr(self._cache, "crop"):
            return False
        self._cache.crop(-n)  # negative: drop that many (4.x and 5.x agree)
        return True

    # -- generation -----------------------------------------------------------------------

    def _decoding(self) -> contextlib.AbstractContextManager[Any]:
        return torch.inference_mode()

    def _sampler(self, sampling: Sampling) -> Callable[[torch.Tensor], tuple[int, float | None]]:
        """``sample(logits) -> (token, logprob)``; ``logprob`` is None unless ``sampling.logprobs``.

        ``logits`` are float32 and already masked by the grammar (-inf where not allowed).  The
        log-probability is the one of the distribution the token was drawn from (see
        ``base.Generation``): one log-softmax of the tensor the sampler already computed.
        """
        record = sampling.logprobs
        if sampling.temperature == 0:
            def greedy(logits: torch.Tensor) -> tuple[int, float | None]:
                token = int(torch.argmax(logits))
                # No sampling distribution: the temperature-1 log-probability (base.Generation).
                return token, float(torch.log_softmax(logits, dim=-1)[token]) if record else None

            return greedy
        # Sample where a seeded generator can live: multinomial on MPS takes no generator.
        where = self.device if self.device.type in ("cuda", "cpu") else torch.device("cpu")
        gen = torch.Generator(device=where)
        if sampling.seed is not None:
            gen.manual_seed(sampling.seed)
        else:
            gen.seed()

        def sample(logits: torch.Tensor) -> tuple[int, float | None]:
            scaled = logits.to(where) / sampling.temperature
            probs = torch.softmax(scaled, dim=-1)
            if sampling.top_p < 1:
                sorted_probs, order = torch.sort(probs, descending=True)
                drop = torch.cumsum(sorted_probs, dim=-1) - sorted_probs > sampling.top_p
                sorted_probs = sorted_probs.masked_fill(drop, 0.0)
                token = int(order[torch.multinomial(sorted_probs, 1, generator=gen)])
                if not record:
                    return token, None
                # Renormalised over the nucleus: minus the log of the mass it keeps.
                return token, float(torch.log_softmax(scaled, dim=-1)[token] - torch.log(sorted_probs.sum()))
            token = int(torch.multinomial(probs, 1, generator=gen))
            return token, float(torch.log_softmax(scaled, dim=-1)[token]) if record else None

        return sample

    def _generate(self, prompt: list[int], sampling: Sampling, matcher: ToolCallMatcher | None,
                  turn: Turn) -> Generation:
        sample = self._sampler(sampling)
        suffix = self._prepare_cache(prompt)
        fed = list(prompt[: len(prompt) - len(suffix)])  # what the cache holds
        inputs = list(suffix)  # tokens not yet fed: the prompt's suffix, then forced tokens
        while len(turn.ids) < sampling.max_tokens:
            if matcher is not None:
                matcher.closing = sampling.max_tokens - len(turn.ids) <= CLOSE_MARGIN
            mask = matcher.allowed() if matcher is not None else None
            only = _only_token(mask)
            if only is not None:
                # Jump-forward: where the grammar allows one token (most of a tool call's
                # scaffolding, 73% of SmolLM2's tokens in training episodes) there is nothing
                # to choose, so no forward pass now; the forced tokens are fed together with
                # the next choice.  Its log-probability under the renormalised distribution
                # it was drawn from is log 1 = 0, what the trainer computes for it too.
                token, logprob = only, (0.0 if sampling.logprobs else None)
            else:
                # The cache is updated in place; transformers 5 calls the argument `cache`.
                out = self.model(input_ids=torch.tensor([inputs], device=self.device), use_cache=True,
                                 **{self._cache_arg: self._cache}, **self._keep_last)
                fed.extend(inputs)
                inputs = []
                logits = out.logits[0, -1, :].float()
                if mask is not None:
                    logits = logits.masked_fill(~torch.from_numpy(mask).to(logits.device), float("-inf"))
                token, logprob = sample(logits)
            if matcher is not None:
                matcher.accept(token)
            if turn.take(token, logprob, mask):
                inputs.append(token)
                break
            inputs.append(token)
        # Forced tokens at the end of the reply are fed now, so the cache holds the whole turn
        # but its last token, as it would without jump-forward (the next turn reuses all of it).
        if len(inputs) > 1:
            self.model(input_ids=torch.tensor([inputs[:-1]], device=self.device), use_cache=True,
                       **{self._cache_arg: self._cache}, **self._keep_last)
            fed.extend(inputs[:-1])
        generation = turn.end(len(prompt))
        self._cached = fed  # the last token was never fed: the next prompt re-feeds it
        return generation


def _only_token(mask: Any) -> int | None:
    """The one token a grammar mask allows, or None (no mask, or a choice to make)."""
    if mask is None:
        return None
    allowed = numpy.flatnonzero(mask)
    return int(allowed[0]) if len(allowed) == 1 else None


def _load_kwargs(transformers: Any, device: torch.device, dtype: torch.dtype, quantize: str | None) -> dict[str, Any]:
    """``from_pretrained``'s keyword arguments: the dtype, and a 4-bit quantisation config."""
    kwargs: dict[str, Any] = {}
    if quantize is not None:
        if quantize != "4bit":
            raise UsageError(f"quantize {quantize!r}: only '4bit' is supported")
        if device.type != "cuda":
            raise UsageError(f"quantize='4bit' needs a CUDA device (bitsandbytes), not {device.type}")
        try:
            import bitsandbytes  # noqa: F401
        except ImportError:
            raise UsageError("quantize='4bit' needs bitsandbytes: pip install bitsandbytes") from None
        kwargs["quantization_config"] = transformers.BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=dtype,
            bnb_4bit_use_double_quant=True,
        )
        kwargs["device_map"] = {"": device.index or 0}
    # transformers 5 renamed torch_dtype to dtype (accepted since 4.56).
    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    kwargs["dtype" if (major, minor) >= (4, 56) else "torch_dtype"] = dtype
    return kwargs
