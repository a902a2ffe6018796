"""``frognano train``'s settings: a preset, a --config file laid over it field by field, flags last."""

from __future__ import annotations

import json

import pytest

from frognano.cli.train import settings
from frognano.errors import UsageError
from frognano.training.config import MLP, PRESETS


def test_a_config_file_overrides_only_the_fields_it_names(tmp_path):
    """The file's unnamed fields keep the preset's values (once they were reset to the defaults:
    `--preset tiny --config f` with f naming one field trained 20 steps of the default size)."""
    file = tmp_path / "c.json"
    file.write_text(json.dumps({"steps": 3, "lora_targets": ["lm_head"]}))  # lm_head: valid with the preset's tiny
    config = settings("tiny", file, {"seed": 7, "backend": None})
    assert (config.steps, config.seed) == (3, 7)
    assert config.tasks_per_step == PRESETS["tiny"]["tasks_per_step"] and config.candidates_listed == 2
    assert config.tiny == {"tie_word_embeddings": False}
    toml = tmp_path / "c.toml"
    toml.write_text('device = "cpu"\n[grpo]\nlearning_rate = 1e-4\n')
    small = settings("small", toml, {"steps": 2})
    assert small.device == "cpu" and small.steps == 2
    assert small.grpo == {**PRESETS["small"]["grpo"], "learning_rate": 1e-4}  # a table: merged, rank kept
    assert set(MLP) <= set(small.lora_targets) and small.heldout_repos == PRESETS["small"]["heldout_repos"]
    with pytest.raises(UsageError, match="device must be"):
        settings("small", None, {"device": "gpu"})
    with pytest.raises(UsageError, match="mlx backend runs where mlx does"):
        settings("small", None, {"device": "cuda", "backend": "mlx"})
    older = tmp_path / "older.json"  # the field's former name, laid over the preset's new one
    older.write_text(json.dumps({"max_candidates": 5}))
    assert settings("tiny", older, {}).candidates_listed == 5
