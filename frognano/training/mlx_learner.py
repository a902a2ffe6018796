"""The MLX learner: an mlx-lm causal LM with mlx-lm's LoRA layers, trained by
``mlx_grpo.grpo_step`` (the same variant as torch's, named in ``grpo.py``):
retraining on a Mac.

A checkpoint holds the adapter in mlx-lm's own format (``adapter/adapters.safetensors`` and
``adapter/adapter_config.json``, so ``mlx_lm.generate --model BASE --adapter-path
CHECKPOINT/adapter`` runs it), AdamW's state (``optimizer.safetensors``: the flattened state tree,
step and learning rate included) and MLX's global RNG key (``rng.json``).  The final model is
the adapters fused into the base weights (mlx-lm's ``fuse``, dequantised first when the base is
quantised, so a small update is not rounded away), an MLX model folder with its tokenizer that
``frognano fix --model mlx:RUN/final`` and the editor load.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path

from ..runtime.mlx_cpu import use_fast_blas

use_fast_blas()  # before mlx's first import (runtime/mlx_cpu.py)

import mlx.core as mx  # noqa: E402
from mlx.utils import tree_flatten, tree_unflatten  # noqa: E402

from ..errors import FrogNanoError, UsageError  # noqa: E402
from .config import TrainConfig  # noqa: E402
from .grpo import GRPOConfig, Sample  # noqa: E402
from .learner import base_model_path, export_final, publish  # noqa: E402

__all__ = ["MLXLearner"]


class MLXLearner:
    """``learner.Learner`` on MLX (see the module docstring)."""

    def __init__(self, config: TrainConfig, run: Path) -> None:
        from ..runtime.local import resolve_model_path
        from ..runtime.mlx import MLXModel
        from .mlx_grpo import lora_model, make_optimizer

        mx.random.seed(config.seed)  # the adapters' initial weights
        path = base_model_path(config, run)
        try:
            self.source = resolve_model_path(path, "mlx")[0]
            policy = MLXModel.load(path, cache_prompt=True)
        except FrogNanoError as exc:
            raise UsageError(f"cannot load the base model {config.base_model}: {exc}") from None
        grpo = config.grpo_config()
        lora_model(policy.model, grpo)  # in place: the policy's decode loop runs the adapted model
        policy.model.eval()
        policy.name = f"policy:{Path(path).name}"
        self.policy = policy
        self.optimizer = make_optimizer(policy.model, grpo)
        self._adapter_config = {
            "fine_tune_type": "lora", "num_layers": len(policy.model.layers),
            "lora_parameters": {"rank": grpo.lora_rank, "scale": grpo.lora_alpha / grpo.lora_rank, "dropout": 0.0,
                                "keys": _adapted_keys(policy.model)},
            # mlx-lm's LoRA training records its base model here too.
            "model": str(Path(self.source).resolve()) if Path(self.source).exists() else self.source,
        }

    def step(self, samples: list[Sample], grpo: GRPOConfig) -> dict[str, float]:
        from .mlx_grpo import grpo_step

        model = self.policy.model
        model.train()
        try:
            return grpo_step(model, self.optimizer, samples, grpo)
        finally:
            model.eval()
            self.policy.reset_cache()  # its keys and values came from the weights before the step

    def save(self, folder: Path) -> None:
        adapter = folder / "adapter"
        adapter.mkdir(parents=True, exist_ok=True)
        mx.save_safetensors(str(adapter / "adapters.safetensors"),
                            dict(tree_flatten(self.policy.model.trainable_parameters())))
        (adapter / "adapter_config.json").write_text(json.dumps(self._adapter_config, indent=1))
        mx.save_safetensors(str(folder / "optimizer.safetensors"), dict(tree_flatten(self.optimizer.state)))
        hi, lo = (int(x) for x in mx.random.state[0].tolist())
        (folder / "rng.json").write_text(json.dumps({"mlx": [hi, lo]}))

    def restore(self, folder: Path) -> None:
        self.load_adapter(folder)
        # Setting the state marks the optimiser uninitialised; its first update then adds entries
        # only for parameters the state lacks (none, after the first step), keeping these.
        self.optimizer.state = tree_unflatten(list(mx.load(str(folder / "optimizer.safetensors")).items()))
        hi, lo = json.loads((folder / "rng.json").read_text())["mlx"]
        mx.random.seed((hi << 32) | lo)  # the key seed(n) makes is n's two 32-bit halves: exactly the saved key

    def load_adapter(self, folder: Path) -> None:
        file = Path(folder) / "adapter" / "adapters.safetensors"
        try:
            weights = mx.load(str(file))
        except (OSError, RuntimeError, ValueError) as exc:
            raise FrogNanoError(f"{file}: cannot read the checkpoint's adapter ({exc})") from None
        model = self.policy.model
        want = {k: v.shape for k, v in tree_flatten(model.trainable_parameters())}
        got = {k: v.shape for k, v in weights.items()}
        if got != want:
            diff = sorted(set(want) ^ set(got)) or sorted(k for k in want if want[k] != got[k])
            raise FrogNanoError(f"{file}: the adapter does not fit this model (differs in: {', '.join(diff[:4])})")
        model.load_weights(list(weights.items()), strict=False)
        mx.eval(model.parameters())
        self.policy.reset_cache()

    def finish(self, run: Path, export: str) -> tuple[Path, Path | None]:
        from mlx_lm.utils import dequantize_model, hf_repo_to_path, load_config, save

        model = self.policy.model
        fused = [(name, m.fuse(dequantize=True)) for name, m in model.named_modules() if hasattr(m, "fuse")]
        if fused:
            model.update_modules(tree_unflatten(fused))
        source = Path(self.source) if Path(self.source).exists() else hf_repo_to_path(self.source)
        config = load_config(source)
        if "quantization" in config or "quantization_config" in config:
            model = dequantize_model(model)  # the rest of the base, so the final folder is one dtype
            config.pop("quantization", None)
            config.pop("quantization_config", None)
        tmp = run / ".final.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        with contextlib.redirect_stdout(io.StringIO()):  # mlx-lm prints its own summary
            save(tmp, str(source), model, self.policy.tokenizer, config, donate_model=False)
        final = publish(tmp, run / "final")
        return final, export_final(final, run, export)


def _adapted_keys(model) -> list[str]:
    """The paths inside a block of the modules ``lora_model`` adapted (mlx-lm's ``keys``)."""
    from .mlx_grpo import lora_adapters

    adapted = {id(m) for m in lora_adapters(model)}
    return sorted({path for block in model.layers for path, m in block.named_modules() if id(m) in adapted})
