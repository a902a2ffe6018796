"""The tiny model folder: deterministic, loadable by mlx-lm and transformers, Qwen-style tool template."""

from __future__ import annotations

import json

import pytest

from frognano.errors import UsageError
from frognano.runtime.export import _safetensors_header
from frognano.runtime.tiny import SPECIAL_TOKENS, TOOL_TOKENS, build_tiny

from .conftest import MESSAGES, TOOLS


def test_same_seed_same_bytes_other_seed_other_weights(tmp_path, tiny_torch):
    again = build_tiny(tmp_path / "again", "torch", seed=0)
    other = build_tiny(tmp_path / "other", "torch", seed=1)
    names = ("config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json", "model.safetensors")
    for name in names:
        assert (again / name).read_bytes() == (tiny_torch / name).read_bytes(), name
    assert (other / "model.safetensors").read_bytes() != (tiny_torch / "model.safetensors").read_bytes()
    assert (other / "tokenizer.json").read_bytes() == (tiny_torch / "tokenizer.json").read_bytes()


def test_folder_layout_and_dtypes(tiny_torch, tiny_mlx):
    for folder, dtype in ((tiny_torch, "F32"), (tiny_mlx, "F16")):
        config = json.loads((folder / "config.json").read_text())
        assert config["model_type"] == "qwen3" and config["architectures"] == ["Qwen3ForCausalLM"]
        header = _safetensors_header(folder / "model.safetensors")
        assert {t["dtype"] for t in header.values()} == {dtype}
        assert "model.layers.0.self_attn.q_norm.weight" in header  # Qwen3, not Qwen2
        assert json.loads((folder / "generation_config.json").read_text())["eos_token_id"]
        assert "chat_template" in json.loads((folder / "tokenizer_config.json").read_text())


def test_refuses_a_non_empty_folder_and_bad_shapes(tmp_path):
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "x").write_text("keep me")
    with pytest.raises(UsageError, match="not an empty folder"):
        build_tiny(tmp_path / "busy")
    assert (tmp_path / "busy" / "x").read_text() == "keep me"
    with pytest.raises(UsageError, match="num_key_value_heads"):
        build_tiny(tmp_path / "bad", num_attention_heads=4, num_key_value_heads=3)
    with pytest.raises(UsageError, match="format"):
        build_tiny(tmp_path / "bad", "gguf")  # type: ignore[arg-type]
    assert not (tmp_path / "bad").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["busy"]  # no staging folder left behind


def test_transformers_loads_it_and_the_template_speaks_qwen_tools(tiny_torch):
    transformers = pytest.importorskip("transformers")
    tok = transformers.AutoTokenizer.from_pretrained(tiny_torch)
    model = transformers.AutoModelForCausalLM.from_pretrained(tiny_torch)
    assert type(model).__name__ == "Qwen3ForCausalLM"
    assert model.config.vocab_size == 512 and len(tok) <= 512
    for token in SPECIAL_TOKENS + TOOL_TOKENS:
        assert len(tok.encode(token, add_special_tokens=False)) == 1, token
    assert tok.eos_token == "<|im_end|>"
    # The tool tags are added but not special (as in Qwen): decoding for display keeps them.
    call = '<tool_call>\n{"name": "submit", "arguments": {}}\n</tool_call>'
    assert tok.decode(tok.encode(call + "<|im_end|>", add_special_tokens=False), skip_special_tokens=True) == call

    messages = MESSAGES + [
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "read", "arguments": {"path": "src/stats.py", "start": 1}}}]},
        {"role": "tool", "content": "1: def mean(values):"},
        {"role": "tool", "content": "2:     return 0"},
    ]
    text = tok.apply_chat_template(messages, tools=TOOLS, add_generation_prompt=True, tokenize=False)
    assert text.startswith("<|im_start|>system\nYou fix failing tests.\n\n# Tools\n")
    assert json.dumps(TOOLS[0]) in text  # schemas rendered in the system prompt
    assert ('<|im_start|>assistant\n<tool_call>\n{"name": "read", "arguments": '
            '{"path": "src/stats.py", "start": 1}}\n</tool_call><|im_end|>\n') in text
    assert ("<|im_start|>user\n<tool_response>\n1: def mean(values):\n</tool_response>\n"
            "<tool_response>\n2:     return 0\n</tool_response><|im_end|>\n") in text
    assert text.endswith("<|im_start|>assistant\n")
    no_prompt = tok.apply_chat_template(MESSAGES, add_generation_prompt=False, tokenize=False)
    assert no_prompt.endswith("<|im_end|>\n") and "# Tools" not in no_prompt


def test_mlx_lm_loads_both_formats(tiny_torch, tiny_mlx):
    mlx_lm = pytest.importorskip("mlx_lm")
    for folder in (tiny_mlx, tiny_torch):
        model, tok = mlx_lm.load(str(folder))
        assert type(model).__module__ == "mlx_lm.models.qwen3"
        prompt = tok.apply_chat_template(MESSAGES, tools=TOOLS, add_generation_prompt=True, tokenize=False)
        out = mlx_lm.generate(model, tok, prompt, max_tokens=5)
        assert isinstance(out, str)
