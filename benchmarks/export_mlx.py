"""``frognano export --to mlx-4bit`` against ``mlx_lm.convert -q`` of the same weights.

Both are made from one transformers folder in this run, then each decodes N greedy tokens with
``mlx_lm.stream_generate`` from the same chat prompt, in alternating rounds (best of the rounds
counts, so a noisy neighbour on a shared machine hurts both alike).  Rows: decode tokens per
second, size on disk and bits per weight (every byte of every tensor over the weights they
stand for, ``export.safetensors_bits_per_weight``).  Target: decode >= 0.95x.

    python benchmarks/export_mlx.py CHECKPOINT [--tokens 64] [--rounds 3]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _table import print_table  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", type=Path, help="a transformers model folder (e.g. an imported GGUF)")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    import mlx_lm
    from mlx_lm.convert import convert
    from mlx_lm.sample_utils import make_sampler

    from frognano.runtime.export import disk_size, export, safetensors_bits_per_weight

    with tempfile.TemporaryDirectory() as tmp:
        ours = export(args.checkpoint, "mlx-4bit", Path(tmp) / "frognano").path
        theirs = Path(tmp) / "mlx_lm"
        with contextlib.redirect_stdout(io.StringIO()):
            convert(str(args.checkpoint), str(theirs), quantize=True)  # what `mlx_lm.convert -q` runs
        folders = {"frognano export": ours, "mlx_lm.convert -q": theirs}
        loaded = {name: mlx_lm.load(str(path)) for name, path in folders.items()}
        prompt = [{"role": "user", "content": "Write a Python function that returns the mean of a list."}]
        speed: dict[str, float] = {}
        texts: dict[str, list[int]] = {}
        for _ in range(args.rounds):
            for name, (model, tokenizer) in loaded.items():
                ids = tokenizer.apply_chat_template(prompt, add_generation_prompt=True)
                tokens, last = [], None
                for last in mlx_lm.stream_generate(model, tokenizer, ids, max_tokens=args.tokens,
                                                   sampler=make_sampler(0.0)):
                    tokens.append(last.token)
                speed[name] = max(speed.get(name, 0.0), last.generation_tps)
                texts[name] = tokens
        same = texts["frognano export"] == texts["mlx_lm.convert -q"]
        ref = "mlx_lm.convert -q"
        body = [[f"decode tok/s, {args.tokens} greedy", f"{speed['frognano export']:.2f}", f"{speed[ref]:.2f}",
                 f"{speed['frognano export'] / speed[ref]:.2f}x", "same tokens" if same else "tokens differ"]]
        sizes = {name: disk_size(path) for name, path in folders.items()}
        body.append(["size on disk, MiB", f"{sizes['frognano export'] / 2**20:.1f}", f"{sizes[ref] / 2**20:.1f}",
                     f"{sizes['frognano export'] / sizes[ref]:.2f}x", ""])
        bpw = {name: safetensors_bits_per_weight(path) for name, path in folders.items()}
        body.append(["bits per weight", f"{bpw['frognano export']:.3f}", f"{bpw[ref]:.3f}",
                     f"{bpw['frognano export'] / bpw[ref]:.2f}x", ""])
    print_table(f"mlx-4bit export of {args.checkpoint} (best of {args.rounds} rounds)",
                ["row", "frognano", "mlx_lm", "ratio", "note"], body, left={0, 4})


if __name__ == "__main__":
    main()
