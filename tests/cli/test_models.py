"""`frognano model tiny` and `frognano export`, driven through click as the CLI will run them."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from frognano.cli.models import export_command, model_group
from frognano.errors import UsageError
from frognano.runtime.base import Sampling, load_model
from frognano.runtime.export import _safetensors_header, export, find_gguf_converter

from .conftest import MESSAGES


@pytest.mark.usefixtures("tiny_dir")  # skips where the libraries that build it are missing
@pytest.mark.parametrize("fmt, dtype", [("mlx", "F16"), ("torch", "F32")])
def test_model_tiny_writes_a_loadable_folder(tmp_path, fmt, dtype):
    out = tmp_path / f"tiny-{fmt}"
    result = CliRunner().invoke(model_group, ["tiny", str(out), "--format", fmt, "--seed", "3"])
    assert result.exit_code == 0, result.output
    assert str(out) in result.output and "qwen3" in result.output
    assert json.loads((out / "config.json").read_text())["model_type"] == "qwen3"
    assert {t["dtype"] for t in _safetensors_header(out / "model.safetensors").values()} == {dtype}
    backend = "mlx" if fmt == "mlx" else "torch"
    pytest.importorskip("mlx_lm" if backend == "mlx" else "transformers")
    model = load_model(f"{backend}:{out}")
    assert model.generate(MESSAGES, None, Sampling(max_tokens=3), constrain=False).completion_tokens == 3


def test_model_tiny_into_a_busy_folder_is_a_usage_error(tmp_path):
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    result = CliRunner().invoke(model_group, ["tiny", str(tmp_path / "busy")])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: ") and "not an empty folder" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert (tmp_path / "busy" / "notes.txt").read_text() == "mine"


def test_model_tiny_rejects_an_unknown_format(tmp_path):
    result = CliRunner().invoke(model_group, ["tiny", str(tmp_path / "x"), "--format", "gguf"])
    assert result.exit_code == 2 and "gguf" in result.output + result.stderr


def test_export_mlx_4bit_loads_and_generates(tmp_path, tiny_torch):
    pytest.importorskip("mlx_lm")
    out = tmp_path / "q4"
    result = CliRunner().invoke(export_command, [str(tiny_torch), "--to", "mlx-4bit", str(out)])
    assert result.exit_code == 0, result.output + result.stderr
    match = re.search(r"\((\d+) bytes\), ([\d.]+) bits per weight", result.output)
    assert match, result.output
    size, bpw = int(match[1]), float(match[2])
    assert size == sum(p.stat().st_size for p in out.iterdir())
    assert size < sum(p.stat().st_size for p in tiny_torch.iterdir())
    assert 4.4 < bpw < 4.7  # 4 bits + a 16-bit scale and bias per 64 weights, + the unquantised norms
    config = json.loads((out / "config.json").read_text())
    assert config["quantization"]["bits"] == 4
    model = load_model(f"mlx:{out}")
    gen = model.generate(MESSAGES, None, Sampling(max_tokens=5), constrain=False)
    assert gen.completion_tokens == 5 and gen.finish_reason == "length"
    # The API reports the same numbers the command printed.
    again = export(tiny_torch, "mlx-4bit", tmp_path / "q4-again")
    assert again.bits_per_weight == pytest.approx(bpw, abs=0.01)


def test_export_refuses_a_busy_target_and_a_bad_checkpoint(tmp_path, tiny_torch):
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "x").write_text("x")
    result = CliRunner().invoke(export_command, [str(tiny_torch), "--to", "mlx-4bit", str(tmp_path / "busy")])
    assert result.exit_code == 2 and "not an empty folder" in result.stderr
    result = CliRunner().invoke(export_command, [str(tmp_path / "nope"), "--to", "mlx-4bit", str(tmp_path / "o")])
    assert result.exit_code == 2 and str(tmp_path / "nope") in result.stderr and "does not exist" in result.stderr
    with pytest.raises(UsageError, match="unknown export target"):
        export(tiny_torch, "onnx", tmp_path / "o")
    assert not (tmp_path / "o").exists()


def test_export_gguf_without_llama_cpp_says_what_to_install(tmp_path, tiny_torch, monkeypatch):
    monkeypatch.delenv("LLAMA_CPP_DIR", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    if find_gguf_converter() is not None:
        pytest.skip("llama.cpp's converter is importable here")
    result = CliRunner().invoke(export_command, [str(tiny_torch), "--to", "gguf", str(tmp_path / "m.gguf")])
    assert result.exit_code == 2
    message = result.stderr.strip()
    assert message.startswith("error: exporting to gguf needs llama.cpp's converter, convert_hf_to_gguf.py")
    assert "LLAMA_CPP_DIR" in message and len(message.splitlines()) == 1
    assert not (tmp_path / "m.gguf").exists()


@pytest.mark.skipif(find_gguf_converter() is None, reason="llama.cpp's convert_hf_to_gguf.py is not installed")
def test_export_gguf_with_llama_cpp(tmp_path, tiny_torch):
    pytest.importorskip("gguf")
    result = export(tiny_torch, "gguf", tmp_path / "tiny.gguf")
    assert result.path == tmp_path / "tiny.gguf" and result.path.stat().st_size == result.size_bytes
    assert 8 <= result.bits_per_weight < 9.5  # q8_0: 8 bits + a 16-bit scale per 32 weights
