"""`frognano model tiny` and `frognano export`, driven through click as the CLI will run them.

(`frognano model import`, GGUF in, is tested in tests/runtime/test_gguf.py.)"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from frognano.cli.models import export_command, model_group
from frognano.errors import UsageError
from frognano.runtime.base import Sampling
from frognano.runtime.load import load_model
from frognano.runtime.export import GGUF_HELP, _safetensors_header, export, find_gguf_converter

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
    # 4 bits + a 32-bit scale and bias per 64 weights (the checkpoint is float32), + the norms
    assert 4.9 < bpw < 5.2
    config = json.loads((out / "config.json").read_text())
    assert config["quantization"]["bits"] == 4
    assert named_dtypes(config) == {"float32"}  # what the tensors are, in every field that says
    model = load_model(f"mlx:{out}")
    gen = model.generate(MESSAGES, None, Sampling(max_tokens=5), constrain=False)
    assert gen.completion_tokens == 5 and gen.finish_reason == "length"
    # The API reports the same numbers the command printed.
    again = export(tiny_torch, "mlx-4bit", tmp_path / "q4-again")
    assert again.bits_per_weight == pytest.approx(bpw, abs=0.01)


def named_dtypes(config: dict) -> set[str]:
    return {config[key] for key in ("dtype", "torch_dtype") if key in config}


def tensors(folder):
    from safetensors.numpy import load_file

    out = {}
    for file in sorted(folder.glob("*.safetensors")):
        out.update(load_file(str(file)))
    return out


def test_export_mlx_4bit_is_what_mlx_lm_convert_q_writes(tmp_path, tiny_torch):
    """The same tensors, bit for bit and dtype for dtype, as `mlx_lm.convert -q` of the same
    folder: a bfloat16 cast before quantising made SmolLM2 decode 10x slower on mlx's CPU build."""
    pytest.importorskip("mlx_lm")
    import numpy as np
    from mlx_lm.convert import convert

    ours = export(tiny_torch, "mlx-4bit", tmp_path / "ours").path
    with contextlib.redirect_stdout(io.StringIO()):
        convert(str(tiny_torch), str(tmp_path / "theirs"), quantize=True)
    a, b = tensors(ours), tensors(tmp_path / "theirs")
    assert a.keys() == b.keys()
    for name in a:
        assert a[name].dtype == b[name].dtype and np.array_equal(a[name], b[name]), name


def test_export_mlx_4bit_casts_first_when_asked_and_the_config_says_so(tmp_path, tiny_torch):
    pytest.importorskip("mlx_lm")
    out = tmp_path / "q4-f16"
    result = CliRunner().invoke(export_command, [str(tiny_torch), "--to", "mlx-4bit", str(out), "--dtype", "float16"])
    assert result.exit_code == 0, result.output + result.stderr
    bpw = float(re.search(r"([\d.]+) bits per weight", result.output)[1])
    assert 4.4 < bpw < 4.7  # 4 bits + a 16-bit scale and bias per 64 weights, + the unquantised norms
    header = _safetensors_header(out / "model.safetensors")
    assert {t["dtype"] for t in header.values()} == {"U32", "F16"}
    config = json.loads((out / "config.json").read_text())
    assert named_dtypes(config) == {"float16"}
    model = load_model(f"mlx:{out}")
    assert model.generate(MESSAGES, None, Sampling(max_tokens=2), constrain=False).completion_tokens == 2
    refused = CliRunner().invoke(export_command, [str(tiny_torch), "--to", "gguf", str(tmp_path / "m.gguf"),
                                                  "--dtype", "float16"])
    assert refused.exit_code == 2 and "mlx-4bit" in refused.stderr


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
    assert message == f"error: {GGUF_HELP}"
    assert "pip download --no-deps --no-binary :all: llama-cpp-python==" in message
    assert not (tmp_path / "m.gguf").exists()


def test_llama_cpp_dir_may_be_a_checkout_or_an_unpacked_llama_cpp_python_sdist(tmp_path, monkeypatch):
    checkout = tmp_path / "llama.cpp"
    sdist = tmp_path / "llama_cpp_python-0.3.36" / "vendor" / "llama.cpp"
    for root in (checkout, sdist):
        root.mkdir(parents=True)
        (root / "convert_hf_to_gguf.py").write_text("# llama.cpp's converter\n")
    monkeypatch.setenv("LLAMA_CPP_DIR", str(checkout))
    assert find_gguf_converter() == [sys.executable, str(checkout / "convert_hf_to_gguf.py")]
    monkeypatch.setenv("LLAMA_CPP_DIR", str(tmp_path / "llama_cpp_python-0.3.36"))
    assert find_gguf_converter() == [sys.executable, str(sdist / "convert_hf_to_gguf.py")]


# -- the GGUF round trip on the real model ------------------------------------------------------

LLAMA_CPP_PYTHON = "0.3.36"
# Where .ci/run unpacks llama-cpp-python's sdist (its vendored llama.cpp holds the converter).
SDIST = Path(__file__).resolve().parents[2] / ".venv" / "sdist" / f"llama_cpp_python-{LLAMA_CPP_PYTHON}"
GET_SDIST = (f"mkdir -p .venv/sdist && .venv/bin/pip download --no-deps --no-binary :all: -d .venv/sdist "
             f"llama-cpp-python=={LLAMA_CPP_PYTHON} && tar xzf .venv/sdist/llama_cpp_python-{LLAMA_CPP_PYTHON}.tar.gz "
             f"-C .venv/sdist (or set LLAMA_CPP_DIR to an unpacked sdist or a llama.cpp checkout)")


@pytest.fixture
def llama_cpp_dir(monkeypatch):
    """LLAMA_CPP_DIR as set, else the sdist unpacked where GET_SDIST puts it; skips without one."""
    where = os.environ.get("LLAMA_CPP_DIR") or (str(SDIST) if SDIST.is_dir() else None)
    if where is None:
        pytest.skip(f"no llama.cpp converter: {GET_SDIST}")
    monkeypatch.setenv("LLAMA_CPP_DIR", where)
    if find_gguf_converter() is None:
        pytest.skip(f"LLAMA_CPP_DIR={where} holds no convert_hf_to_gguf.py: {GET_SDIST}")
    return Path(where)


def test_export_gguf_of_a_tokenizer_llama_cpp_does_not_know_is_one_line(tmp_path, tiny_torch, llama_cpp_dir):
    """The tiny model's locally trained BPE is in no llama.cpp table: the converter refuses it,
    and the command says why in one line, leaving no file (the real model's round trip is below)."""
    result = CliRunner().invoke(export_command, [str(tiny_torch), "--to", "gguf", str(tmp_path / "tiny.gguf")])
    assert result.exit_code == 2
    message = result.stderr.strip()
    assert message.startswith(f"error: convert_hf_to_gguf failed on {tiny_torch} (exit 1): ")
    assert "pre-tokenizer was not recognized" in message and len(message.splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


@pytest.mark.real_model
@pytest.mark.slow
def test_gguf_round_trip_predicts_like_the_source_folder(tmp_path, smollm2_torch, llama_cpp_dir):
    """Export the imported SmolLM2 to GGUF (q8_0), read it back as ``--model torch:FILE.gguf``
    does (transformers' GGUF reader, through FrogNano's import), and compare the next-token
    logits on a fixed prompt with the source folder's."""
    torch = pytest.importorskip("torch")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from frognano.runtime.gguf import import_gguf

    before = {p for p in llama_cpp_dir.rglob("*")}
    result = CliRunner().invoke(export_command, [str(smollm2_torch), "--to", "gguf", str(tmp_path / "smol.gguf")])
    assert result.exit_code == 0, result.output + result.stderr
    assert 8 <= float(re.search(r"([\d.]+) bits per weight", result.output)[1]) < 9.5
    assert {p for p in llama_cpp_dir.rglob("*")} == before, "nothing written into the llama.cpp folder"

    tokenizer = AutoTokenizer.from_pretrained(str(smollm2_torch))
    ids = torch.tensor([tokenizer("def mean(values):\n    return sum(values) /", add_special_tokens=False).input_ids])
    with torch.inference_mode():
        source = AutoModelForCausalLM.from_pretrained(str(smollm2_torch), dtype=torch.float32)
        expected = source(ids).logits[0, -1].float()
        del source
        back = AutoModelForCausalLM.from_pretrained(
            str(import_gguf(tmp_path / "smol.gguf", tmp_path / "back", to="torch").path), dtype=torch.float32)
        got = back(ids).logits[0, -1].float()
    assert int(got.argmax()) == int(expected.argmax())
    assert set(got.topk(5).indices.tolist()) == set(expected.topk(5).indices.tolist())
    # q8_0 moves every logit by about the same amount (measured: 0.2 on average, 0.7 at most),
    # which the softmax ignores: compare log-probabilities (measured: the top 20 within 0.16,
    # KL 0.0003 nats).
    got, expected = torch.log_softmax(got, -1), torch.log_softmax(expected, -1)
    top = expected.topk(10).indices
    assert float((got[top] - expected[top]).abs().max()) < 0.3
    assert float(torch.sum(expected.exp() * (expected - got))) < 0.01  # KL(source || round trip)
