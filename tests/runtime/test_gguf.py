"""GGUF in: ``import_gguf`` on the real SmolLM2 GGUF (torch and MLX folders whose next-token
logits are those of transformers' own GGUF load), ``--model torch:FILE.gguf`` converting once
into the cache, and the one-line errors for files that are no GGUF, truncated, or of an
architecture transformers cannot read.

The real-model tests share the session's imports (``smollm2_torch``, ``smollm2_mlx`` in
tests/conftest.py) and one direct GGUF load (``direct``), each about 20 s on two cores.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from frognano.cli.models import model_group
from frognano.runtime.base import ModelError
from frognano.runtime.export import _safetensors_header
from frognano.runtime.gguf import import_gguf, read_header
from frognano.runtime.local import resolve_model_path

from ..conftest import raises_naming

PROMPT = "def mean(values):\n    return sum(values) /"


def one_line_error(exc: pytest.ExceptionInfo) -> str:
    message = str(exc.value)
    assert "\n" not in message, message
    return message


def tiny_gguf(path: Path, architecture: str) -> Path:
    """A small valid GGUF file (one float32 tensor) naming ``architecture``."""
    gguf = pytest.importorskip("gguf")
    import numpy as np

    writer = gguf.GGUFWriter(str(path), architecture)
    writer.add_name("frog")
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def nothing_left_beside(out: Path) -> None:
    """No output and no staging folder: a failed import leaves its parent as it found it."""
    assert not out.exists()
    assert not [p.name for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.")]


# -- errors and checks (cheap: no conversion runs) -------------------------------------------


def test_a_file_that_is_not_a_gguf_is_one_line_naming_it(tmp_path):
    fake = tmp_path / "weights.gguf"
    fake.write_bytes(b"PK\x03\x04 a zip, not a model")
    out = tmp_path / "out"
    with raises_naming(ModelError, [str(fake), "not a GGUF file"]) as info:
        import_gguf(fake, out)
    one_line_error(info)
    nothing_left_beside(out)
    # The same file given as a model spec: the same message, nothing in the cache.
    with raises_naming(ModelError, [str(fake), "not a GGUF file"]):
        resolve_model_path(str(fake), "torch")
    with raises_naming(ModelError, ["no such file"]):
        resolve_model_path(str(tmp_path / "missing.gguf"), "mlx")


@pytest.mark.real_model  # the real file's header, no conversion: cheap
def test_a_truncated_gguf_is_one_line_saying_how_much_is_missing(smollm2_gguf, tmp_path):
    cut = tmp_path / "cut.gguf"
    with smollm2_gguf.open("rb") as f:
        cut.write_bytes(f.read(30 << 20))  # the header and the first tensors of a 98 MB file
    size = smollm2_gguf.stat().st_size
    out = tmp_path / "out"
    with raises_naming(ModelError, [str(cut), "truncated", f"need {size} bytes", f"has {30 << 20}"]) as info:
        import_gguf(cut, out, to="mlx")
    one_line_error(info)
    nothing_left_beside(out)
    header_only = tmp_path / "header.gguf"
    header_only.write_bytes(cut.read_bytes()[:4096])  # cut inside the vocabulary
    with raises_naming(ModelError, ["truncated", "header"]):
        read_header(header_only)
    assert read_header(smollm2_gguf).data_end == size  # the whole file: every byte accounted for


def test_an_architecture_transformers_cannot_read_names_it_and_the_ones_it_can(tmp_path):
    pytest.importorskip("transformers")
    path = tiny_gguf(tmp_path / "frog.gguf", "frogformer")
    assert read_header(path).architecture == "frogformer"
    with raises_naming(ModelError, [str(path), "'frogformer'", "llama", "qwen2", "qwen3"]) as info:
        import_gguf(path, tmp_path / "out")
    one_line_error(info)
    nothing_left_beside(tmp_path / "out")
    # An Ollama blob has no suffix: its magic bytes make it a GGUF all the same.
    blob = tmp_path / "sha256-0123abcd"
    blob.write_bytes(path.read_bytes())
    with raises_naming(ModelError, ["'frogformer'"]):
        resolve_model_path(str(blob), "torch")


@pytest.mark.real_model  # the real file's header, no conversion: cheap
def test_the_preflight_check_reads_a_gguf_header_and_converts_nothing(smollm2_gguf, tmp_path):
    from frognano.paths import cache_root
    from frognano.runtime.preflight import check_spec

    check_spec(f"torch:{smollm2_gguf}")  # whole and a GGUF: quiet, and cheap
    check_spec(f"mlx:{smollm2_gguf}")
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(smollm2_gguf.read_bytes()[: 1 << 20])
    with raises_naming(ModelError, [str(cut), "truncated"]):
        check_spec(f"torch:{cut}")
    assert not (cache_root() / "models").exists(), "the conversion waits for the load"


def test_model_import_cli_exits_2_with_one_error_line(tmp_path):
    fake = tmp_path / "notes.gguf"
    fake.write_text("just text\n")
    result = CliRunner().invoke(model_group, ["import", str(fake), str(tmp_path / "out")])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: ") and "not a GGUF file" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    result = CliRunner().invoke(model_group, ["import", str(fake), str(tmp_path / "out"), "--to", "onnx"])
    assert result.exit_code == 2 and "onnx" in result.stderr
    shown = CliRunner().invoke(model_group, ["import", "--help"])
    assert shown.exit_code == 0
    for words in ("FILE.gguf", "mlx-4bit", "torch:FILE.gguf", "frognano cache", "ollama"):
        assert words in shown.output, words


# -- the real GGUF ------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def direct(smollm2_gguf):
    """transformers' own de-quantised load of the GGUF: PROMPT's ids and its next-token logits."""
    torch = pytest.importorskip("torch")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(smollm2_gguf.parent), smollm2_gguf.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    ids = tokenizer(PROMPT, add_special_tokens=False).input_ids
    with torch.inference_mode():
        logits = model(torch.tensor([ids])).logits[0, -1].float()
    return ids, logits


def torch_logits(folder: Path, ids: list[int]):
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    with torch.inference_mode():
        return model(torch.tensor([ids])).logits[0, -1].float()


@pytest.mark.real_model
@pytest.mark.slow
def test_import_to_torch_is_the_gguf_as_transformers_reads_it(smollm2_torch, direct):
    import torch
    from transformers import AutoTokenizer

    names = {p.name for p in smollm2_torch.iterdir()}
    assert {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json"} <= names
    config = json.loads((smollm2_torch / "config.json").read_text())
    assert config["model_type"] == "llama" and "quantization_config" not in config
    assert {t["dtype"] for t in _safetensors_header(smollm2_torch / "model.safetensors").values()} == {"F32"}
    assert json.loads((smollm2_torch / "generation_config.json").read_text())["eos_token_id"] == 2
    tokenizer = AutoTokenizer.from_pretrained(str(smollm2_torch))
    chat = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                         add_generation_prompt=True)
    assert chat.endswith("<|im_start|>assistant\n"), chat  # SmolLM2's own template came along

    ids, expected = direct
    assert tokenizer(PROMPT, add_special_tokens=False).input_ids == ids
    got = torch_logits(smollm2_torch, ids)
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)


@pytest.mark.real_model
@pytest.mark.slow
def test_import_to_mlx_has_the_devices_dtype_and_predicts_like_the_gguf(smollm2_mlx, direct):
    """float16 where MLX has a GPU; float32 on mlx's CPU build (this machine's: Linux, mlx[cpu])."""
    import mlx.core as mx
    import mlx_lm
    import numpy as np

    from frognano.runtime.export import mlx_float_dtype

    wanted = mlx_float_dtype()
    assert wanted == ("float16" if mx.metal.is_available() else "float32")
    dtypes = {t["dtype"] for f in smollm2_mlx.glob("*.safetensors") for t in _safetensors_header(f).values()}
    assert dtypes == {{"float16": "F16", "float32": "F32"}[wanted]}
    config = json.loads((smollm2_mlx / "config.json").read_text())
    assert "quantization" not in config
    # The config names the dtype the tensors have (mlx-lm alone keeps the source's float32).
    assert {config[k] for k in ("dtype", "torch_dtype") if k in config} == {wanted}

    model, tokenizer = mlx_lm.load(str(smollm2_mlx))
    ids, expected = direct
    logits = np.array(model(mx.array([ids]))[0, -1].astype(mx.float32)).astype(np.float64)
    expected = expected.numpy().astype(np.float64)
    assert int(logits.argmax()) == int(expected.argmax())
    top5 = set(np.argsort(expected)[-5:])
    assert len(top5 & set(np.argsort(logits)[-5:])) >= 4
    # Close to the reference distribution, not equal (measured on two prompts: logits within
    # 1.1, KL 0.003 nats, as float16 and as float32 alike).
    def log_softmax(x):
        x = x - x.max()
        return x - np.log(np.exp(x).sum())

    p, q = log_softmax(expected), log_softmax(logits)
    kl = float(np.sum(np.exp(p) * (p - q)))
    assert kl < 0.03, kl


@pytest.mark.real_model
@pytest.mark.slow
def test_a_gguf_model_spec_converts_once_into_the_cache_and_loads(smollm2_gguf, tmp_path, caplog):
    pytest.importorskip("transformers")
    from frognano.cache import size_of
    from frognano.paths import cache_root
    from frognano.runtime.base import Sampling
    from frognano.runtime.load import load_model

    # A copy, so the test can also change the file and see it converted again.
    source = tmp_path / "smol.gguf"
    source.write_bytes(smollm2_gguf.read_bytes())
    caplog.set_level(logging.INFO, logger="frognano.runtime.gguf")
    where, local = resolve_model_path(str(source), "torch")
    folder = Path(where)
    assert local and folder.parent == cache_root() / "models" and folder.name.endswith("-torch")
    assert folder.name.startswith("smol-")
    assert sum("importing" in r.message for r in caplog.records) == 1
    record = json.loads((folder / "frognano-import.json").read_text())
    assert record["source"] == os.path.realpath(source) and record["architecture"] == "llama"
    inode = (folder / "model.safetensors").stat().st_ino

    caplog.clear()
    model = load_model(f"torch:{source}")  # the second load: straight from the cache
    assert not [r for r in caplog.records if "importing" in r.message]
    assert (folder / "model.safetensors").stat().st_ino == inode
    assert [p.name for p in folder.parent.iterdir()] == [folder.name], "one folder, no staging left"
    gen = model.generate([{"role": "user", "content": "Say hi."}], None, Sampling(max_tokens=3), constrain=False)
    assert gen.completion_tokens == 3 and gen.text.strip()
    model.close()

    listed = subprocess.run([sys.executable, "-m", "frognano", "cache", "--json"], capture_output=True,
                            text=True, timeout=120, env=os.environ.copy())
    assert listed.returncode == 0, listed.stderr
    [entry] = json.loads(listed.stdout)["models"]
    assert entry["folder"] == str(folder) and entry["source"] == os.path.realpath(source)
    assert entry["kind"] == "torch" and entry["finished"] and entry["size"] == size_of(folder) > 500 << 20
    shown = subprocess.run([sys.executable, "-m", "frognano", "cache"], capture_output=True, text=True,
                           timeout=120, env=os.environ.copy())
    assert f"models/{folder.name}" in shown.stdout and f"torch import of {os.path.realpath(source)}" in shown.stdout

    # The cache is keyed by content: the same bytes under another name reuse the folder.
    other = tmp_path / "renamed.gguf"
    os.link(source, other)
    assert resolve_model_path(str(other), "torch")[0] == str(folder)

    cleaned = subprocess.run([sys.executable, "-m", "frognano", "cache", "clean", str(source)],
                             capture_output=True, text=True, timeout=120, env=os.environ.copy())
    assert cleaned.returncode == 0, cleaned.stderr
    assert f"removed models/{folder.name}" in cleaned.stdout and not folder.exists()


@pytest.mark.real_model
@pytest.mark.slow
def test_model_import_to_mlx_4bit_quantises_the_dequantised_weights(smollm2_gguf, tmp_path):
    pytest.importorskip("mlx_lm")
    from frognano.runtime.base import Sampling
    from frognano.runtime.load import load_model
    from frognano.runtime.export import safetensors_bits_per_weight

    out = tmp_path / "smol-q4"
    result = CliRunner().invoke(model_group, ["import", str(smollm2_gguf), str(out), "--to", "mlx-4bit"])
    assert result.exit_code == 0, result.output + result.stderr
    assert result.output.startswith(f"wrote {out}: llama as mlx-4bit, ") and " s\n" in result.output
    config = json.loads((out / "config.json").read_text())
    assert config["quantization"] == {"group_size": 64, "bits": 4, "mode": "affine"}
    # Quantised once by mlx-lm from float32: float32 scales, as `mlx_lm.convert -q` leaves them.
    header = _safetensors_header(out / "model.safetensors")
    assert header["model.layers.0.mlp.up_proj.scales"]["dtype"] == "F32"
    assert {config[k] for k in ("dtype", "torch_dtype") if k in config} == {"float32"}
    assert 4.9 < safetensors_bits_per_weight(out) < 5.1
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "no staging folder left"
    model = load_model(f"mlx:{out}")
    gen = model.generate([{"role": "user", "content": "Say hi."}], None, Sampling(max_tokens=3), constrain=False)
    assert gen.completion_tokens == 3
