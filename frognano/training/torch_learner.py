"""The torch learner: a transformers causal LM with peft LoRA adapters, trained by
``torch_grpo.grpo_step`` (the exact variant is named in ``grpo.py``).

A checkpoint holds the peft adapter (``adapter/``, what ``PeftModel.from_pretrained`` loads),
AdamW's state (``optimizer.pt``) and torch's global RNG (``rng.json``).  The final model is the
adapter merged into the base weights, a transformers folder ``frognano fix --model
torch:RUN/final`` loads.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ..errors import FrogNanoError, UsageError
from .config import TrainConfig
from .grpo import GRPOConfig, Sample
from .learner import base_model_path, export_final, publish

__all__ = ["TorchLearner"]


class TorchLearner:
    """``learner.Learner`` on torch (see the module docstring)."""

    def __init__(self, config: TrainConfig, run: Path) -> None:
        from ..runtime.lazy import decode_threads
        from ..runtime.torch import TorchModel, pick_device
        from . import distributed
        from .torch_grpo import lora_model, make_optimizer

        torch.manual_seed(config.seed)  # the adapters' initial weights
        path = base_model_path(config, run)
        # One GPU per process of a launch (its LOCAL_RANK); else the runtime's choice.
        device = f"cuda:{distributed.local_rank()}" if distributed.active() and torch.cuda.is_available() \
            else (None if config.device == "auto" else config.device)
        options = {}
        if pick_device(device).type == "cpu":
            # torch's default, a thread per core, waits at every kernel on the test processes
            # that run beside the rollouts (rewards, background synthesis): the cores the loop's
            # one test lane leaves (rollout.Environments), as `fix` sizes them.  SmolLM2 on 2 loaded
            # cores: one tiny-ci-sized step took 195 s on 2 threads, 34 s on 1.
            options["threads"] = decode_threads(1)
        try:
            loaded = TorchModel.load(path, cache_prompt=True, device=device, **options)
        except FrogNanoError as exc:
            raise UsageError(f"cannot load the base model {config.base_model}: {exc}") from None
        grpo = config.grpo_config()
        model = lora_model(loaded.model, grpo)
        model.eval()
        # Rank 0's initial adapters on every rank, whatever each device's generator drew.
        distributed.broadcast_tensors([p.data for p in model.parameters() if p.requires_grad])
        # The serving decode loop over the adapted model: rollouts sample exactly the policy.
        self.policy = TorchModel(f"policy:{Path(path).name}", model, loaded.tokenizer, path=path)
        self.optimizer = make_optimizer(model, grpo)

    def step(self, samples: list[Sample], grpo: GRPOConfig) -> dict[str, float]:
        from . import distributed
        from .torch_grpo import grpo_step

        model = self.policy.model
        model.train()
        try:
            if distributed.active():  # this rank's share of the loss, the gradients summed over the ranks
                return grpo_step(model, self.optimizer, samples, grpo, shard=(distributed.rank(), distributed.world()),
                                 all_reduce=distributed.all_reduce)
            return grpo_step(model, self.optimizer, samples, grpo)
        finally:
            model.eval()
            self.policy.reset_cache()  # its keys and values came from the weights before the step

    def digest(self) -> str:
        """sha256 of the adapter weights (names, dtypes and bytes): equal on every rank of a
        distributed run that stepped the same gradients (``loop._record_ranks``)."""
        import hashlib

        h = hashlib.sha256()
        for name, p in sorted(self.policy.model.named_parameters()):
            if p.requires_grad:
                t = p.detach().to("cpu").contiguous()
                h.update(f"{name}:{t.dtype}:{tuple(t.shape)}".encode())
                h.update(t.view(torch.uint8).numpy().tobytes())
        return h.hexdigest()

    def save(self, folder: Path) -> None:
        # An adapted lm_head counts as an embedding layer to peft, which would then save the
        # whole (frozen, unchanged) output matrix in every checkpoint: the adapter suffices.
        self.policy.model.save_pretrained(folder / "adapter", save_embedding_layers=False)
        torch.save(self.optimizer.state_dict(), folder / "optimizer.pt")
        (folder / "rng.json").write_text(json.dumps({"torch": torch.get_rng_state().tolist()}))

    def restore(self, folder: Path) -> None:
        """``resume.read_state`` has checked the files are there and whole; what only torch can
        tell (a pickle that does not load, a state for other parameters) is a UsageError here."""
        import pickle

        self.load_adapter(folder)
        path = folder / "optimizer.pt"
        try:
            saved = torch.load(path, weights_only=True)
        except (OSError, EOFError, RuntimeError, ValueError, pickle.UnpicklingError) as exc:
            raise UsageError(f"{path}: cannot load the optimiser state ({_first_line(exc)})") from None
        try:
            self.optimizer.load_state_dict(saved)
        except (KeyError, TypeError, ValueError, RuntimeError, IndexError) as exc:
            raise UsageError(f"{path}: the optimiser state does not fit this model ({_first_line(exc)})") from None
        rng = folder / "rng.json"
        # Checkpoints written before the learners kept torch's RNG in state.json.
        source = rng if rng.exists() else folder / "state.json"
        try:
            state = json.loads(rng.read_text())["torch"] if rng.exists() else \
                json.loads((folder / "state.json").read_text())["torch_rng"]
            torch.set_rng_state(torch.tensor(state, dtype=torch.uint8))
        except (OSError, KeyError, TypeError, ValueError, RuntimeError, OverflowError) as exc:
            raise UsageError(f"{source}: not torch's random state ({_first_line(exc)})") from None

    def load_adapter(self, folder: Path) -> None:
        from peft import get_peft_model_state_dict, set_peft_model_state_dict
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        file = Path(folder) / "adapter" / "adapter_model.safetensors"
        try:
            weights = load_file(str(file))
        except (OSError, RuntimeError, SafetensorError) as exc:
            raise FrogNanoError(f"{file}: cannot read the checkpoint's adapter ({_first_line(exc)})") from None
        # An adapter of another model (another base, other targets or rank): peft skips a missing
        # tensor without a word and fails on another shape with a bare RuntimeError.
        want = {k: tuple(v.shape)
                for k, v in get_peft_model_state_dict(self.policy.model, save_embedding_layers=False).items()}
        got = {k: tuple(v.shape) for k, v in weights.items()}
        wrong = sorted(k for k in want if got.get(k) != want[k])  # missing, or another shape
        if wrong:
            diff = [f"{k} {got.get(k, 'missing')} vs {want[k]}" for k in wrong[:3]]
            raise FrogNanoError(f"{file}: the adapter does not fit this model (differs in: {', '.join(diff)})")
        set_peft_model_state_dict(self.policy.model, weights)
        self.policy.reset_cache()

    def finish(self, run: Path, export: str) -> tuple[Path, Path | None]:
        import shutil

        tmp = run / ".final.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        merged = self.policy.model.merge_and_unload()
        merged.save_pretrained(tmp, safe_serialization=True)
        self.policy.tokenizer.save_pretrained(tmp)
        final = publish(tmp, run / "final")
        return final, export_final(final, run, export)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:200]
