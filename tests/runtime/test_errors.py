"""Bad model specs: a clear, one-line ModelError naming the path, for either backend."""

from __future__ import annotations

import pytest

from frognano.errors import EXIT_USAGE, UsageError
from frognano.runtime.base import ModelError
from frognano.runtime.load import load_model

BACKENDS = [pytest.param("mlx", id="mlx"), pytest.param("torch", id="torch")]


def needs(backend: str) -> None:
    pytest.importorskip("mlx_lm" if backend == "mlx" else "transformers")


def check(exc: pytest.ExceptionInfo, *names: str) -> None:
    message = str(exc.value)
    assert "\n" not in message and len(message) < 400
    for name in names:
        assert name in message
    assert exc.value.exit_code == EXIT_USAGE


@pytest.mark.parametrize("backend", BACKENDS)
def test_missing_path(tmp_path, backend):
    needs(backend)
    missing = tmp_path / "no" / "such-model"
    with pytest.raises(ModelError) as exc:
        load_model(f"{backend}:{missing}")
    check(exc, str(missing), "does not exist")


@pytest.mark.parametrize("backend", BACKENDS)
def test_relative_missing_path_is_not_sent_to_the_hub(tmp_path, backend, monkeypatch):
    needs(backend)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ModelError) as exc:
        load_model(f"{backend}:./models/tiny")
    check(exc, "./models/tiny", "does not exist")
    # Looks like a hub id: only the local Hugging Face cache is asked (offline by default).
    with pytest.raises(ModelError) as exc:
        load_model(f"{backend}:models/tiny")
    check(exc, "models/tiny", "local cache", "hf download")


@pytest.mark.parametrize("backend", BACKENDS)
def test_folder_that_is_not_a_model(tmp_path, backend):
    needs(backend)
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(ModelError) as exc:
        load_model(f"{backend}:{tmp_path}")
    check(exc, str(tmp_path), "config.json")
    with pytest.raises(ModelError) as exc:
        load_model(f"{backend}:{tmp_path / 'notes.txt'}")
    check(exc, "notes.txt", "file")


@pytest.mark.parametrize("backend", BACKENDS)
def test_broken_model_folder(tmp_path, backend, tiny_torch):
    needs(backend)
    (tmp_path / "config.json").write_text('{"model_type": "qwen3", "hidden_size": ')  # cut short
    with pytest.raises(ModelError) as exc:
        load_model(f"{backend}:{tmp_path}")
    check(exc, str(tmp_path), "cannot load")
    # A real config without weights.
    broken = tmp_path / "no-weights"
    broken.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (broken / name).write_bytes((tiny_torch / name).read_bytes())
    with pytest.raises(ModelError) as exc:
        load_model(f"{backend}:{broken}")
    check(exc, str(broken), "cannot load")


@pytest.mark.parametrize("backend", BACKENDS)
def test_unknown_option(tiny_torch, backend):
    needs(backend)
    with pytest.raises(UsageError, match="unknown .* option.*colour"):
        load_model(f"{backend}:{tiny_torch}", colour="green")


def test_torch_options_are_checked(tiny_torch):
    pytest.importorskip("transformers")
    import torch

    with pytest.raises(UsageError, match="dtype"):
        load_model(f"torch:{tiny_torch}", dtype="float8")
    with pytest.raises(UsageError, match="quantize"):
        load_model(f"torch:{tiny_torch}", quantize="3bit")
    if not torch.cuda.is_available():
        with pytest.raises(UsageError, match="CUDA"):
            load_model(f"torch:{tiny_torch}", quantize="4bit")
        with pytest.raises(UsageError, match="CUDA is not available"):
            load_model(f"torch:{tiny_torch}", device="cuda")
