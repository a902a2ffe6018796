"""Small random Qwen3 models, built locally, for tests and smoke runs (never downloaded).

``build_tiny(out)`` writes a Hugging Face style folder (``config.json`` with ``model_type
"qwen3"``, ``tokenizer.json`` + ``tokenizer_config.json`` with a Qwen-style tool-calling chat
template, ``model.safetensors``, ``generation_config.json``) that both ``mlx_lm.load`` and
``transformers.AutoModelForCausalLM`` / ``AutoTokenizer`` load offline.  The weights are random
(seeded), so the model speaks garbage; the tokenizer is a real byte-level BPE trained here on a
small built-in corpus of Python code and tool-call text, so prompts tokenise the way a Qwen
tokenizer would tokenise them.

Only numpy, safetensors and tokenizers are needed (no torch, no mlx): the same folder loads in
both backends, and ``fmt`` only picks the weight dtype (float32 for torch, which computes in
float32 on CPU; float16 for mlx, as converted MLX models usually are).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from ..errors import UsageError

# Qwen2/Qwen3 token ids are laid out with the specials after the learned vocabulary; here the
# specials come first (ids 0-2) so their ids do not depend on how many merges the corpus yields.
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Tool tags are added tokens that are *not* special, exactly as in Qwen2.5/Qwen3: they survive
# ``decode(skip_special_tokens=True)``, so a tool call is never stripped from the text.
TOOL_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]

# The Qwen2 pre-tokenizer split: contractions, letters, single digits, punctuation runs, newlines.
QWEN_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# Qwen2.5's tool-calling template, trimmed: tool schemas in the system prompt, assistant tool
# calls as <tool_call> JSON, tool results as <tool_response> blocks inside one user turn.
CHAT_TEMPLATE = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\n\n' }}
    {%- endif %}
    {{- "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- elif messages and messages[0].role == 'system' %}
    {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}
    {%- if message.role == "user" or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + (message.content or '') + '<|im_end|>\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>assistant' }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' + tool_call.name + '", "arguments": ' }}
            {%- if tool_call.arguments is string %}
                {{- tool_call.arguments }}
            {%- else %}
                {{- tool_call.arguments | tojson }}
            {%- endif %}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or messages[loop.index0 - 1].role != "tool" %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' + (message.content or '') + '\n</tool_response>' }}
        {%- if loop.last or messages[loop.index0 + 1].role != "tool" %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"""

# A small corpus in the shapes the model will see: Python code, pytest output, tool calls.
_CODE = '''
def mean(values: list[float]) -> float:
    """Return the arithmetic mean of values."""
    if not values:
        raise ValueError("mean of empty list")
    return sum(values) / len(values)


class Stack:
    def __init__(self):
        self.items = []

    def push(self, item):
        self.items.append(item)

    def pop(self):
        if len(self.items) == 0:
            return None
        return self.items.pop()


def test_mean():
    assert mean([1, 2, 3]) == 2
    assert mean([0.5, 1.5]) == 1.0


def find(haystack, needle, start=0):
    for i in range(start, len(haystack)):
        if haystack[i] == needle:
            return i
    return -1


import os
import sys
from pathlib import Path

for key, value in sorted(config.items()):
    print(f"{key} = {value!r}")
    while count > 0 and not done:
        count -= 1
'''

_PYTEST = '''
FAILED tests/test_stats.py::test_mean - assert 1.5 == 2
    def test_mean():
>       assert mean([1, 2, 3]) == 2
E       AssertionError: assert 1.5 == 2
src/stats.py:5: in mean
    return sum(values) / (len(values) + 1)
1 failed, 12 passed in 0.31s
'''

# Every harness tool, so each name is spelled by a similar chain of merges: under constrained
# decoding an untrained model picks among the names roughly in proportion to the tokens that can
# start each, so a name missing here (spelled letter by letter) would almost never be chosen.
_TOOLS = [
    ("candidates", {}),
    ("apply", {"n": 2}),
    ("read", {"path": "src/stats.py", "start": 1, "end": 20}),
    ("search", {"pattern": "def mean", "path": "src"}),
    ("edit", {"path": "src/stats.py", "old": "len(values) + 1", "new": "len(values)"}),
    ("run_tests", {"selection": "tests/test_stats.py::test_mean"}),
    ("submit", {}),
]


def corpus() -> list[str]:
    """The training texts for the tiny tokenizer (deterministic, a few kilobytes)."""
    texts = [_CODE, _PYTEST]
    for name, args in _TOOLS:
        call = json.dumps({"name": name, "arguments": args})
        texts.append(f"<|im_start|>assistant\n<tool_call>\n{call}\n</tool_call><|im_end|>\n")
        texts.append(f"<|im_start|>user\n<tool_response>\nok: {name} {json.dumps(args)}\n</tool_response><|im_end|>\n")
        schema = {"type": "function", "function": {"name": name, "description": f"{name} a file",
                  "parameters": {"type": "object", "properties": {k: {"type": "string"} for k in args},
                                 "required": list(args)}}}
        texts.append(json.dumps(schema))
    return texts * 3


@dataclass
class TinyArgs:
    """The shape of a tiny Qwen3 model (field names are Qwen3's config keys)."""

    vocab_size: int = 512
    hidden_size: int = 64
    intermediate_size: int = 128
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 16
    max_position_embeddings: int = 32768
    rope_theta: float = 1_000_000.0
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = True
    initializer_range: float = 0.02  # std of the random weights, as in Qwen3's config

    def __post_init__(self) -> None:
        floor = 256 + len(SPECIAL_TOKENS) + len(TOOL_TOKENS)
        if self.vocab_size < floor:
            raise UsageError(f"vocab_size must be at least {floor} (256 bytes + special tokens), got {self.vocab_size}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise UsageError(
                f"num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                f"num_key_value_heads ({self.num_key_value_heads})"
            )
        for name in ("hidden_size", "intermediate_size", "num_hidden_layers", "head_dim"):
            if getattr(self, name) < 1:
                raise UsageError(f"{name} must be positive, got {getattr(self, name)}")


def build_tokenizer(vocab_size: int):
    """A byte-level BPE with Qwen2's pre-tokenizer, trained on ``corpus()``."""
    from tokenizers import (
        AddedToken,
        Regex,
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        processors,
        trainers,
    )

    tok = Tokenizer(models.BPE(byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(TOOL_TOKENS),
        special_tokens=[AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in TOOL_TOKENS])
    return tok


def _tokenizer_config(tok) -> dict:
    decoder = {}
    for token in SPECIAL_TOKENS + TOOL_TOKENS:
        decoder[str(tok.token_to_id(token))] = {
            "content": token, "lstrip": False, "normalized": False, "rstrip": False,
            "single_word": False, "special": token in SPECIAL_TOKENS,
        }
    return {
        "tokenizer_class": "Qwen2Tokenizer",
        "added_tokens_decoder": decoder,
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "add_bos_token": False,
        "add_prefix_space": False,
        "clean_up_tokenization_spaces": False,
        "errors": "replace",
        "split_special_tokens": False,
        "model_max_length": 32768,
        "chat_template": CHAT_TEMPLATE,
    }


def _weights(args: TinyArgs, seed: int, dtype: str) -> dict:
    """Random Qwen3 weights under Hugging Face's names (which mlx-lm reads unchanged)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    h, hd, std = args.hidden_size, args.head_dim, args.initializer_range

    def normal(*shape):
        return (rng.standard_normal(shape, dtype=np.float32) * std).astype(dtype)

    def ones(n):
        return np.ones(n, dtype=dtype)

    w = {"model.embed_tokens.weight": normal(args.vocab_size, h)}
    for i in range(args.num_hidden_layers):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = ones(h)
        w[p + "post_attention_layernorm.weight"] = ones(h)
        w[p + "self_attn.q_proj.weight"] = normal(args.num_attention_heads * hd, h)
        w[p + "self_attn.k_proj.weight"] = normal(args.num_key_value_heads * hd, h)
        w[p + "self_attn.v_proj.weight"] = normal(args.num_key_value_heads * hd, h)
        w[p + "self_attn.o_proj.weight"] = normal(h, args.num_attention_heads * hd)
        w[p + "self_attn.q_norm.weight"] = ones(hd)
        w[p + "self_attn.k_norm.weight"] = ones(hd)
        w[p + "mlp.gate_proj.weight"] = normal(args.intermediate_size, h)
        w[p + "mlp.up_proj.weight"] = normal(args.intermediate_size, h)
        w[p + "mlp.down_proj.weight"] = normal(h, args.intermediate_size)
    w["model.norm.weight"] = ones(h)
    if not args.tie_word_embeddings:
        w["lm_head.weight"] = normal(args.vocab_size, h)
    return w


def _configs(args: TinyArgs, tok, dtype: str) -> tuple[dict, dict]:
    """``config.json`` and ``generation_config.json`` of a Qwen3 model with ``args`` and ``tok``."""
    ids = {t: tok.token_to_id(t) for t in SPECIAL_TOKENS}
    init_std = args.initializer_range
    config = {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        **{k: v for k, v in asdict(args).items() if k != "initializer_range"},
        "initializer_range": init_std,
        "hidden_act": "silu",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "use_sliding_window": False,
        "sliding_window": None,
        "max_window_layers": args.num_hidden_layers,
        "use_cache": True,
        "bos_token_id": ids["<|endoftext|>"],
        "eos_token_id": ids["<|im_end|>"],
        "pad_token_id": ids["<|endoftext|>"],
        "torch_dtype": dtype,
    }
    generation_config = {
        "bos_token_id": ids["<|endoftext|>"],
        "eos_token_id": [ids["<|im_end|>"], ids["<|endoftext|>"]],
        "pad_token_id": ids["<|endoftext|>"],
        "do_sample": False,
    }
    return config, generation_config


def build_tiny(
    out: Path,
    fmt: Literal["mlx", "torch"] = "torch",
    *,
    seed: int = 0,
    vocab_size: int = 512,
    hidden_size: int = 64,
    intermediate_size: int = 128,
    num_hidden_layers: int = 2,
    num_attention_heads: int = 4,
    num_key_value_heads: int = 2,
    head_dim: int = 16,
    tie_word_embeddings: bool = True,
    dtype: Literal["float16", "float32"] | None = None,
) -> Path:
    """Write a random Qwen3 model with a locally trained tokenizer to ``out`` and return it.

    ``dtype`` overrides the format's weight dtype (float32 for torch, float16 for mlx): a run
    that trains on mlx's CPU build asks for float32 (``training.learner.base_model_path``).

    ``tie_word_embeddings=False`` gives the model its own output layer (``lm_head``), which
    LoRA can then adapt: training uses that (``training.presets``), because the tied random
    embeddings bound every logit to a few tenths of a nat whatever the blocks compute.

    Deterministic: the same arguments give byte-identical files.  ``out`` must not exist or
    be an empty folder; the files are written to a temporary folder beside it first, so a
    failure leaves nothing half-written.
    """
    if fmt not in ("mlx", "torch"):
        raise UsageError(f"unknown model format {fmt!r}: expected 'mlx' or 'torch'")
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"{out} already exists and is not an empty folder")
    args = TinyArgs(
        vocab_size=vocab_size, hidden_size=hidden_size, intermediate_size=intermediate_size,
        num_hidden_layers=num_hidden_layers, num_attention_heads=num_attention_heads,
        num_key_value_heads=num_key_value_heads, head_dim=head_dim, tie_word_embeddings=tie_word_embeddings,
    )
    if dtype is None:
        dtype = "float32" if fmt == "torch" else "float16"
    elif dtype not in ("float16", "float32"):
        raise UsageError(f"unknown weight dtype {dtype!r}: expected 'float16' or 'float32'")

    try:
        import numpy  # noqa: F401
        import tokenizers  # noqa: F401
        from safetensors.numpy import save_file
    except ImportError as exc:
        raise UsageError(
            f"building a tiny model needs numpy, safetensors and tokenizers ({exc}): "
            "pip install 'frognano[torch]' or 'frognano[mlx]'"
        ) from None

    tok = build_tokenizer(args.vocab_size)
    config, generation_config = _configs(args, tok, dtype)

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        (tmp / "generation_config.json").write_text(json.dumps(generation_config, indent=2) + "\n")
        tok.save(str(tmp / "tokenizer.json"))
        (tmp / "tokenizer_config.json").write_text(json.dumps(_tokenizer_config(tok), indent=2) + "\n")
        save_file(_weights(args, seed, dtype), str(tmp / "model.safetensors"), metadata={"format": "pt"})
        # mkdtemp makes a private folder; a model folder is as readable as any other output.
        for item in tmp.iterdir():
            item.chmod(0o644)
        tmp.chmod(0o755)
        if out.exists():
            out.rmdir()  # empty, checked above
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
