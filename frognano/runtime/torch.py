"""The torch backend: a chat model run in-process with transformers (CUDA, MPS or CPU).

A plain decoding loop rather than ``model.generate``: one forward pass per token over a
``DynamicCache``, so that streaming, stop strings, cancellation between tokens and the
tool-call constraint are all a few lines here, and so the prompt cache can be kept across the
turns of an episode exactly as the MLX backend keeps it (longest common prefix of the cached
tokens and the new prompt; ``last_prompt_processed`` / ``last_prompt_reused`` report it).
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable
from typing import Any

import torch

from ..errors import UsageError
from .base import Generation, Message, ModelError, Sampling, ToolSchema
from .constrain import TextStream, ToolCallGrammar, end_of_turn_ids, one_line, resolve_model_path, reusable_prefix


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


class TorchModel:
    """``base.Model`` on transformers.  Build with ``TorchModel.load("path/or/hub-id")``.

    Options: ``device`` ("cuda", "cuda:1", "mps", "cpu"; default: the best available),
    ``quantize="4bit"`` (bitsandbytes NF4, CUDA only), ``dtype`` ("float32", "float16",
    "bfloat16"; default: bfloat16 on CUDA where supported, float16 on MPS, float32 on CPU),
    ``cache_prompt`` (keep the prompt cache between calls; default True), ``download`` (fetch a
    Hugging Face Hub id that is not in the local cache; default False: offline).
    """

    OPTIONS = {"device", "quantize", "dtype", "cache_prompt", "download"}

    def __init__(
        self, name: str, model: Any, tokenizer: Any, *, path: str | None = None, cache_prompt: bool = True
    ) -> None:
        self.name = name
        self.model = model
        self.tokenizer = tokenizer
        self.device = next(model.parameters()).device
        self.vocab_size = int(model.config.vocab_size)
        self.eos_token_ids = end_of_turn_ids(path, tokenizer, self._configured_eos(model))
        self.cache_prompt = cache_prompt
        params = inspect.signature(model.forward).parameters
        self._cache_arg = "cache" if "cache" in params else "past_key_values"
        self._grammar: ToolCallGrammar | None = None
        self._lock = threading.Lock()
        self._cache: Any = None  # a transformers Cache, or None
        self._cached: list[int] = []
        self.last_prompt_processed = 0
        self.last_prompt_reused = 0

    @staticmethod
    def _configured_eos(model: Any) -> set[int]:
        ids: set[int] = set()
        for cfg in (model.config, getattr(model, "generation_config", None)):
            eos = getattr(cfg, "eos_token_id", None)
            ids.update([eos] if isinstance(eos, int) else [i for i in (eos or []) if isinstance(i, int)])
        return ids

    @classmethod
    def load(cls, path_or_id: str, **options: Any) -> TorchModel:
        unknown = set(options) - cls.OPTIONS
        if unknown:
            known = ", ".join(sorted(cls.OPTIONS))
            raise UsageError(f"unknown torch model option(s): {', '.join(sorted(unknown))} (known: {known})")
        source, local = resolve_model_path(path_or_id, "torch", download=bool(options.pop("download", False)))
        device = pick_device(options.get("device"))
        quantize = options.get("quantize")
        dtype_name = options.get("dtype")
        if dtype_name is not None and dtype_name not in _DTYPES:
            raise UsageError(f"dtype {dtype_name!r}: expected one of {', '.join(_DTYPES)}")
        dtype = _DTYPES[dtype_name] if dtype_name else default_dtype(device)

        import transformers
        from transformers import AutoModelForCausalLM, AutoTokenizer

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

        bars = transformers.utils.logging.is_progress_bar_enabled()
        transformers.utils.logging.disable_progress_bar()
        try:
            tokenizer = AutoTokenizer.from_pretrained(source)
            model = AutoModelForCausalLM.from_pretrained(source, **kwargs)
        except Exception as exc:
            where = "" if local else " (not a local folder, and the Hugging Face Hub could not provide it)"
            raise ModelError(f"torch:{path_or_id}: cannot load the model{where}: {one_line(exc)}") from None
        finally:
            if bars:
                transformers.utils.logging.enable_progress_bar()
        if quantize is None:
            model = model.to(device)
        model.eval()
        return cls(f"torch:{path_or_id}", model, tokenizer, path=source if local else None,
                   cache_prompt=options.get("cache_prompt", True))

    # -- prompts --------------------------------------------------------------------------

    def render(self, messages: list[Message], tools: list[ToolSchema] | None = None) -> str:
        try:
            return self.tokenizer.apply_chat_template(
                messages, tools=tools or None, add_generation_prompt=True, tokenize=False
            )
        except Exception as exc:
            raise UsageError(f"{self.name}: cannot render the chat template: {one_line(exc)}") from None

    def encode_prompt(self, messages: list[Message], tools: list[ToolSchema] | None = None) -> list[int]:
        return list(self.tokenizer.encode(self.render(messages, tools), add_special_tokens=False))

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def reset_cache(self) -> None:
        with self._lock:
            self._cache, self._cached = None, []

    def _new_cache(self) -> Any:
        from transformers import DynamicCache

        try:
            return DynamicCache(config=self.model.config)
        except TypeError:  # transformers < 4.56
            return DynamicCache()

    def _prepare_cache(self, prompt: list[int]) -> list[int]:
        def trim(n: int) -> bool:
            if not hasattr(self._cache, "crop"):
                return False
            self._cache.crop(-n)  # negative: drop that many (4.x and 5.x agree)
            return True

        usable = self.cache_prompt and self._cache is not None
        keep = reusable_prefix(self._cached, prompt, trim) if usable else 0
        if keep <= 0:
            self._cache, keep = self._new_cache(), 0
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
        with self._lock, torch.inference_mode():
            try:
                return self._generate(prompt, tools, sampling, on_text, cancel, constrain)
            except BaseException:
                self._cache, self._cached = None, []  # the cache's state is unknown now
                raise

    def _sampler(self, sampling: Sampling) -> Callable[[torch.Tensor], int]:
        if sampling.temperature == 0:
            return lambda logits: int(torch.argmax(logits))
        # Sample where a seeded generator can live: multinomial on MPS takes no generator.
        where = self.device if self.device.type in ("cuda", "cpu") else torch.device("cpu")
        gen = torch.Generator(device=where)
        if sampling.seed is not None:
            gen.manual_seed(sampling.seed)
        else:
            gen.seed()

        def sample(logits: torch.Tensor) -> int:
            probs = torch.softmax(logits.to(where) / sampling.temperature, dim=-1)
            if sampling.top_p < 1:
                sorted_probs, order = torch.sort(probs, descending=True)
                drop = torch.cumsum(sorted_probs, dim=-1) - sorted_probs > sampling.top_p
                sorted_probs = sorted_probs.masked_fill(drop, 0.0)
                return int(order[torch.multinomial(sorted_probs, 1, generator=gen)])
            return int(torch.multinomial(probs, 1, generator=gen))

        return sample

    def _generate(self, prompt, tools, sampling, on_text, cancel, constrain) -> Generation:
        if cancel is not None and cancel.is_set():
            return Generation("", finish_reason="cancelled", prompt_tokens=len(prompt))
        matcher = None
        if constrain and tools:
            if self._grammar is None:
                self._grammar = ToolCallGrammar(self.tokenizer, self.vocab_size, sorted(self.eos_token_ids))
            matcher = self._grammar.matcher(tools)
        sample = self._sampler(sampling)
        stream = TextStream(self.decode, sampling.stop)
        suffix = self._prepare_cache(prompt)
        fed = list(prompt[: len(prompt) - len(suffix)])  # what the cache holds
        inputs = suffix
        ids: list[int] = []
        finish = "length"
        while len(ids) < sampling.max_tokens:
            # The cache is updated in place; transformers 5 calls the argument `cache`.
            out = self.model(input_ids=torch.tensor([inputs], device=self.device), use_cache=True,
                             **{self._cache_arg: self._cache})
            fed.extend(inputs)
            logits = out.logits[0, -1, :].float()
            if matcher is not None:
                mask = matcher.allowed()
                if mask is not None:
                    logits = logits.masked_fill(~torch.from_numpy(mask).to(logits.device), float("-inf"))
            token = sample(logits)
            ids.append(token)
            if matcher is not None:
                matcher.accept(token)
            if token in self.eos_token_ids:
                finish = "stop"
                break
            piece = stream.feed(token)
            if piece and on_text is not None:
                on_text(piece)
            if stream.stopped:
                finish = "stop"
                break
            if cancel is not None and cancel.is_set():
                finish = "cancelled"
                break
            inputs = [token]
        rest = stream.finish()
        if rest and on_text is not None:
            on_text(rest)
        self._cached = fed  # the last sampled token was never fed: the next prompt re-feeds it
        return Generation(stream.text, token_ids=ids, finish_reason=finish,
                          prompt_tokens=len(prompt), completion_tokens=len(ids))

    def close(self) -> None:
        with self._lock:
            self._cache, self._cached = None, []
            self._grammar = None
