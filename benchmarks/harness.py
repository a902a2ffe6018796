"""The harness benchmark: how much context FrogNano's first turn costs, and what its in-process
backends cost on top of the libraries they wrap.  Every row is a ratio against a baseline
measured in the same run.

Rows
    ``first context, tokens`` / ``first context, characters``
        FrogNano's first prompt against a mini-swe-agent-style bash-tool prompt, for the same
        failing task: a temporary copy of ``examples/calc`` (``is_adult`` says ``age > 18``).
        FrogNano's side is what ``Engine._episodes`` sends a model: ``SYSTEM_PROMPT``, the tool
        schemas (``harness.TOOLS``) and ``first_observation`` of ``Engine.diagnose()``, rendered
        by the chat template.  The baseline is a paraphrase of mini-swe-agent's default config
        (``src/minisweagent/config/default.yaml``, v2.4.6: a system prompt asking for one
        command per reply in a ```bash block, and an instance message "Please solve this
        issue: {{task}}" plus its workflow, rules and command examples; the paraphrase is
        within 1% of the original's length as rendered on Linux, its ```mswea_bash_command
        fences read as ```bash), whose task is the full output of a plain ``python -m
        pytest`` in the same project, rendered by the same chat template.  The note splits
        FrogNano's side into system prompt, tool schemas and observation.
        Tokens are counted with the tiny model's tokenizer: a byte-level BPE of 512 tokens
        trained on a few kilobytes that include tool schemas and tool calls shaped like the
        harness's, so FrogNano's JSON gets far more characters per token than the baseline's
        English prose; the characters row is the tokenizer-free number.  Target: <= 0.5x.
    ``decode, mlx``
        ``MLXModel.generate`` (greedy, ``constrain=False``, prompt cache reset before each
        call) against ``mlx_lm.stream_generate`` on the same model folder and the same prompt
        token ids, generating N tokens; tokens per second of the whole call.  The prompt is
        short (a system line and a one-line failure, ~55 tokens), so the call is nearly all
        decoding.  The script stops if the two disagree on the prompt or on the tokens they
        generate: a fast but different loop would not be a like-for-like number.  Target:
        >= 0.95x.  The note gives the difference as time per token.
    ``decode, torch``
        ``TorchModel.generate`` the same way against ``transformers``' ``model.generate(...,
        do_sample=False)`` on the same folder (float32, CPU unless CUDA/MPS is available).
        Target: >= 0.95x.
    ``2nd-turn prefill, mlx`` / ``2nd-turn prefill, torch``
        The time of a ``generate(..., max_tokens=1)`` on the second turn's prompt (the first
        prompt above, plus the assistant's tool call and the tool's reply, a ``read`` of the
        suspicious file by the real ``ToolBox``): with ``cache_prompt=True`` right after the
        first turn (the cache holds the first prompt and the token sampled after it) against
        the same backend after ``reset_cache()``, which must run the whole prompt through
        the model.  The note says how many prompt tokens the cached call took from the cache
        (``last_prompt_reused``).  Lower is better; target: < 1x.

    The timing rows use a somewhat larger random Qwen3 than the tests' (``--hidden``,
    ``--layers``; the vocabulary stays at 512, so the tokenizer is the tests' tiny one): with
    the default 64-wide, 2-layer model a decode step takes microseconds and the ratio would
    only compare Python bookkeeping.  (mlx's CPU build has slow kernels: a 1.7k-token prefill
    of this model takes seconds there, against a tenth of a second in torch, so the mlx rows
    take most of the run; on Apple silicon they are fast.)  Each timing is the median of
    ``--repeats`` calls after one warm-up call, with FrogNano and the baseline interleaved so
    drift hits both; the script warns when the machine is busy at the start, because torch's
    threads then slow down many times over.  A row whose library is missing says ``skipped
    (... not installed)``; the script exits 1 when a measured row misses its target.

    .venv/bin/python benchmarks/harness.py                # N=256 tokens, 5 repeats (~2 min on 2 CPUs)
    .venv/bin/python benchmarks/harness.py --quick        # smoke run: N=32, 3 repeats
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import _table  # benchmarks/_table.py: this script's own folder is on sys.path

REPO = Path(__file__).resolve().parent.parent
log = logging.getLogger("benchmarks.harness")

# The short prompt of the decode rows (the runtime tests' messages): decoding, not prefill.
SHORT = [
    {"role": "system", "content": "You fix failing tests."},
    {"role": "user", "content": "FAILED tests/test_stats.py::test_mean - assert 1.5 == 2"},
]

# -- the baseline prompt: mini-swe-agent's default config, paraphrased --------------------------
# Paraphrased (not copied) from mini-swe-agent 2.4.6's default.yaml, keeping its structure and
# length: rendered on Linux the original has 545 + 2,270 characters, 531 + 2,200 with the
# ```bash fence of its earlier releases that this one uses (526 + 2,204).  A shorter baseline
# would flatter FrogNano.  The placeholders are mini-swe-agent's Jinja names, filled in by
# plain replacement (the original's macOS-only sed note is left out, as it renders on Linux).

MINI_SYSTEM = """\
You are a helpful assistant that works on a computer through a shell.

Every reply must contain exactly ONE bash code block holding ONE command (several commands may be \
joined with && or ||).
Before the command, include a THOUGHT section that explains your reasoning process.
Lay your reply out like the example in <format_example>.

<format_example>
Your analysis and reasoning go here: say why you want to run this command.

```bash
your_command_here
```
</format_example>

A reply that breaks these rules will be rejected.
"""

MINI_INSTANCE = """\
Please solve this issue: {{task}}

You can execute bash commands and edit files to make the changes that the fix needs.

## Recommended workflow

Go through it step by step, so that you can iterate on your changes and on any problems that come up.

1. Explore the codebase: find and read the files that matter
2. Write a script that reproduces the issue
3. Edit the source code so that the issue is resolved
4. Run your script again to check that the fix works
5. Try edge cases to make sure the fix is robust
6. When you are done, submit your changes and end your work by running this command: \
`echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`.
   Do not combine it with any other command. \
<important>Once you have run it, you cannot continue working on this task.</important>

## Important rules

1. Every reply must contain exactly one action
2. The action must be enclosed in triple backticks
3. Changes of directory or of environment variables do not persist: every action runs in a new subshell.
   You can still prefix an action with `MY_ENV_VAR=MY_VALUE cd /path/to/working/dir && ...` \
or keep variables in a file and load them

<system_information>
{{system}} {{release}} {{version}} {{machine}}
</system_information>

## Formatting your reply

Here is an example of a correct reply:

<example_response>
THOUGHT: First I need to understand how the repository is laid out. Let me list the files in the current \
directory to get a better overview of the codebase.

```bash
ls -la
```
</example_response>

## Useful command examples

### Create a new file:

```bash
cat <<'EOF' > newfile.py
import numpy as np
hello = "world"
print(hello)
EOF
```

### Edit a file with sed:

```bash
# Replace every occurrence
sed -i 's/old_string/new_string/g' filename.py

# Replace the first occurrence only
sed -i 's/old_string/new_string/' filename.py

# Replace the first occurrence on line 1
sed -i '1s/old_string/new_string/' filename.py

# Replace every occurrence in lines 1-10
sed -i '1,10s/old_string/new_string/g' filename.py
```

### Show part of a file:

```bash
# Show lines 10 to 20 with their numbers
nl -ba filename.py | sed -n '10,20p'
```

### Any other command you want to run

```bash
anything
```
"""


def mini_swe_messages(pytest_output: str) -> list[dict]:
    uname = platform.uname()
    instance = MINI_INSTANCE
    for key, value in {"task": pytest_output, "system": uname.system, "release": uname.release,
                       "version": uname.version, "machine": uname.machine}.items():
        instance = instance.replace("{{" + key + "}}", value)
    return [{"role": "system", "content": MINI_SYSTEM}, {"role": "user", "content": instance}]


# -- rows ------------------------------------------------------------------------------------------

@dataclass
class Row:
    measure: str
    frognano: str  # FrogNano's number, as shown (or why the row was skipped)
    baseline: str = "-"
    baseline_value: str = "-"
    ratio: float | None = None
    target: str = "-"
    met: bool | None = None  # None: no target, or skipped
    note: str = ""

    @staticmethod
    def skipped(measure: str, why: str) -> Row:
        return Row(measure, f"skipped ({why})")


def missing(*modules: str) -> str | None:
    """The first of ``modules`` that cannot be imported, as a skip reason; None when all can."""
    for name in modules:
        if importlib.util.find_spec(name) is None:
            return f"{name} not installed"
    return None


def median_interleaved(a: Callable[[], float], b: Callable[[], float], repeats: int) -> tuple[float, float]:
    """Medians of ``repeats`` calls of ``a`` and of ``b``, alternating (one untimed warm-up each),
    so that a slow drift of the machine (another process, thermal limits) hits both sides."""
    a(), b()
    xs, ys = [], []
    for _ in range(repeats):
        xs.append(a())
        ys.append(b())
    return statistics.median(xs), statistics.median(ys)


# -- the failing task ------------------------------------------------------------------------------

@dataclass
class Task:
    observation: str  # first_observation(...) of the diagnosis
    pytest_output: str  # plain `python -m pytest` in a copy of the same project
    reply: str  # a realistic first assistant turn: read the suspicious file
    tool_result: str  # what the real ToolBox answers to it


def failing_task(scratch: Path) -> Task:
    """Diagnose a copy of examples/calc the way ``Engine.fix`` does before its model episodes."""
    from frognano.config import Settings
    from frognano.repair.engine import Engine
    from frognano.repair.harness import ToolBox, ToolCall, first_observation, render_tool_call
    from frognano.sandbox.workspace import Workspace

    ignore = shutil.ignore_patterns("__pycache__", ".pytest_cache")
    served = shutil.copytree(REPO / "examples" / "calc", scratch / "served" / "calc", ignore=ignore)
    plain = shutil.copytree(REPO / "examples" / "calc", scratch / "plain" / "calc", ignore=ignore)
    with Workspace(served) as ws, Engine(ws, Settings()) as engine:
        diagnosis = engine.diagnose()
        if not diagnosis.failing or not diagnosis.locations:
            raise SystemExit("examples/calc: no failing test or no suspicious line; the benchmark is broken")
        # Engine._episodes reads regions through Engine._read (None for unreadable files).
        observation = first_observation(diagnosis.run, diagnosis.locations, engine._read)
        call = ToolCall("read", {"path": diagnosis.locations[0].path})
        tool_result = ToolBox(ws, engine.runner, list(diagnosis.failing)).call(call).text
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.run([sys.executable, "-m", "pytest"], cwd=plain, env=env, capture_output=True, text=True)
    if proc.returncode != 1:  # examples/calc has one known failing test
        raise SystemExit(f"pytest exited {proc.returncode} in {plain}; the benchmark is broken:\n{proc.stdout[-2000:]}")
    return Task(observation, proc.stdout + proc.stderr, render_tool_call(call), tool_result)


def first_messages(task: Task) -> list[dict]:
    from frognano.repair.harness import SYSTEM_PROMPT

    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": task.observation}]


def second_messages(task: Task) -> list[dict]:
    # The agent loop appends the reply as an assistant message and the result as a tool message.
    return [*first_messages(task), {"role": "assistant", "content": task.reply},
            {"role": "tool", "content": task.tool_result}]


# -- row 1: first-context size ---------------------------------------------------------------------

def context_rows(task: Task, model_dir: Path | None) -> list[Row]:
    from frognano.repair.harness import TOOLS

    why = missing("transformers") or (None if model_dir else "tiny model not built")
    if why:
        return [Row.skipped("first context, tokens", why), Row.skipped("first context, characters", why)]
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))

    def rendered(messages: list[dict], tools: list[dict] | None) -> tuple[int, int]:
        text = tok.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)
        return len(tok.encode(text, add_special_tokens=False)), len(text)

    messages = first_messages(task)
    ours = rendered(messages, TOOLS)
    base = rendered(mini_swe_messages(task.pytest_output), None)
    # Where FrogNano's context goes: the system prompt (with the template's own text), the
    # tools block the template adds, the observation; differences of renderings, so they add up.
    without_tools = rendered(messages, None)
    system_only = rendered([messages[0], {"role": "user", "content": ""}], None)
    task_size = (len(tok.encode(task.pytest_output, add_special_tokens=False)), len(task.pytest_output))
    log.debug("FrogNano first observation:\n%s", task.observation)
    rows = []
    for i, (measure, unit) in enumerate([("first context, tokens", "tok"), ("first context, characters", "chars")]):
        ratio = ours[i] / base[i]
        parts = (f"system {system_only[i]:,} + tools {ours[i] - without_tools[i]:,} + observation "
                 f"{without_tools[i] - system_only[i]:,}; baseline's pytest output {task_size[i]:,}")
        rows.append(Row(measure, f"{ours[i]:,} {unit}", "mini-swe-agent bash prompt", f"{base[i]:,} {unit}",
                        ratio, "<= 0.5x", ratio <= 0.5, parts))
    return rows


# -- rows 2 and 3: decode speed --------------------------------------------------------------------

def decode_row(measure: str, baseline: str, ours: Callable[[], tuple[list[int], float]],
               raw: Callable[[], tuple[list[int], float]], n: int, repeats: int) -> Row:
    """``ours`` / ``raw``: one generation each, returning (generated ids, seconds)."""
    ours_ids, _ = ours()
    raw_ids, _ = raw()
    if ours_ids != raw_ids:
        raise SystemExit(f"{measure}: FrogNano and {baseline} generated different tokens "
                         f"({ours_ids[:12]}... vs {raw_ids[:12]}...); the benchmark is broken")
    if len(ours_ids) < n:
        log.warning("%s: the model ended its reply after %d of %d tokens", measure, len(ours_ids), n)
    count = len(ours_ids)
    t_ours, t_raw = median_interleaved(lambda: ours()[1], lambda: raw()[1], repeats)
    ours_tps, raw_tps = count / t_ours, count / t_raw
    ratio = ours_tps / raw_tps
    per_token_us = (t_ours - t_raw) / count * 1e6
    return Row(measure, f"{ours_tps:.1f} tok/s", baseline, f"{raw_tps:.1f} tok/s", ratio, ">= 0.95x",
               ratio >= 0.95, f"{count} tokens; {per_token_us:+.0f} us/token vs baseline")


def mlx_decode(model_dir: Path | None, n: int, repeats: int) -> Row:
    measure = f"decode, mlx (N={n}, greedy)"
    why = missing("mlx", "mlx_lm") or (None if model_dir else "tiny model not built")
    if why:
        return Row.skipped(measure, why)
    import mlx_lm
    from mlx_lm.generate import stream_generate

    from frognano.runtime.base import Sampling
    from frognano.runtime.mlx import MLXModel

    ours_model = MLXModel.load(str(model_dir))
    raw_model, raw_tok = mlx_lm.load(str(model_dir))  # loaded apart: the baseline shares nothing
    prompt = ours_model.encode_prompt(SHORT)
    raw_prompt = raw_tok.apply_chat_template(SHORT, add_generation_prompt=True)
    if list(raw_prompt) != prompt:
        raise SystemExit("decode, mlx: mlx_lm's chat template gives other prompt ids; the benchmark is broken")
    sampling = Sampling(max_tokens=n)

    def ours() -> tuple[list[int], float]:
        ours_model.reset_cache()
        t = time.perf_counter()
        gen = ours_model.generate(SHORT, None, sampling, constrain=False)
        return gen.token_ids, time.perf_counter() - t

    def raw() -> tuple[list[int], float]:
        t = time.perf_counter()
        ids = [r.token for r in stream_generate(raw_model, raw_tok, prompt, max_tokens=n)]
        return ids, time.perf_counter() - t

    try:
        return decode_row(measure, "mlx_lm.stream_generate", ours, raw, n, repeats)
    finally:
        ours_model.close()


def torch_decode(model_dir: Path | None, n: int, repeats: int) -> Row:
    measure = f"decode, torch (N={n}, greedy)"
    why = missing("torch", "transformers") or (None if model_dir else "tiny model not built")
    if why:
        return Row.skipped(measure, why)
    import torch
    from transformers import AutoModelForCausalLM

    from frognano.runtime.base import Sampling
    from frognano.runtime.torch import TorchModel

    ours_model = TorchModel.load(str(model_dir))
    device = ours_model.device
    raw_model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=next(ours_model.model.parameters()).dtype)
    raw_model = raw_model.to(device).eval()
    prompt = ours_model.encode_prompt(SHORT)
    ids = torch.tensor([prompt], device=device)
    mask = torch.ones_like(ids)
    sampling = Sampling(max_tokens=n)

    def sync() -> None:  # a GPU runs asynchronously: time what it did, not what was queued
        if device.type == "cuda":
            torch.cuda.synchronize()

    def ours() -> tuple[list[int], float]:
        ours_model.reset_cache()
        sync()
        t = time.perf_counter()
        gen = ours_model.generate(SHORT, None, sampling, constrain=False)
        sync()
        return gen.token_ids, time.perf_counter() - t

    def raw() -> tuple[list[int], float]:
        sync()
        t = time.perf_counter()
        # min_new_tokens stays unset: like FrogNano, generate stops at an end-of-turn token.
        out = raw_model.generate(ids, attention_mask=mask, max_new_tokens=n, do_sample=False)
        sync()
        return out[0, len(prompt):].tolist(), time.perf_counter() - t

    try:
        return decode_row(measure, "transformers generate", ours, raw, n, repeats)
    finally:
        ours_model.close()


# -- row 4: second-turn prefill with the prompt cache ------------------------------------------

def prefill_row(kind: str, model_dir: Path | None, task: Task, repeats: int) -> Row:
    measure = f"2nd-turn prefill, {kind}"
    needs = ("mlx", "mlx_lm") if kind == "mlx" else ("torch", "transformers")
    why = missing(*needs) or (None if model_dir else "tiny model not built")
    if why:
        return Row.skipped(measure, why)
    from frognano.repair.harness import TOOLS
    from frognano.runtime.base import Sampling

    if kind == "mlx":
        from frognano.runtime.mlx import MLXModel as Backend
    else:
        from frognano.runtime.torch import TorchModel as Backend
    model = Backend.load(str(model_dir), cache_prompt=True)
    first, second = first_messages(task), second_messages(task)
    one = Sampling(max_tokens=1)  # the reply's first token: what the prompt's logits start
    stats: dict[str, int] = {}

    def timed_second() -> float:
        t = time.perf_counter()
        model.generate(second, TOOLS, one, constrain=False)
        return time.perf_counter() - t

    def cached() -> float:
        # Turn 1.  Not after a reset: the cache holds the second prompt (from the warm-up or the
        # last uncached call), so this trims it back to the first prompt and feeds one token,
        # instead of prefilling the whole first prompt again (seconds on mlx's CPU build).
        model.generate(first, TOOLS, one, constrain=False)
        seconds = timed_second()
        stats.update(reused=model.last_prompt_reused, processed=model.last_prompt_processed)
        return seconds

    def uncached() -> float:
        model.reset_cache()
        return timed_second()

    try:
        t_cached, t_full = median_interleaved(cached, uncached, repeats)
    finally:
        model.close()
    total = stats["reused"] + stats["processed"]
    if stats["reused"] == 0:
        log.warning("%s: the second prompt took nothing from the cache", measure)
    ratio = t_cached / t_full
    return Row(measure, f"{t_cached * 1000:.1f} ms", "same backend, cache reset", f"{t_full * 1000:.1f} ms",
               ratio, "< 1x", ratio < 1, f"last_prompt_reused {stats['reused']:,} of {total:,} prompt tokens")


# -- main --------------------------------------------------------------------------------------------

def build_models(scratch: Path, hidden: int, layers: int) -> tuple[Path | None, Path | None]:
    """The timing rows' model in mlx (float16) and torch (float32) format; None where it cannot be built."""
    why = missing("numpy", "safetensors", "tokenizers")
    if why:
        log.warning("no tiny model: %s", why)
        return None, None
    from frognano.runtime.tiny import build_tiny

    heads = max(1, hidden // 32)
    shape = dict(hidden_size=hidden, intermediate_size=3 * hidden, num_hidden_layers=layers,
                 num_attention_heads=heads, num_key_value_heads=heads // 2 if heads % 2 == 0 else heads,
                 head_dim=32)  # grouped-query attention, two query heads per key/value head, as in Qwen3
    log.info("building the tiny Qwen3 (%s)", ", ".join(f"{k}={v}" for k, v in shape.items()))
    return build_tiny(scratch / "model-mlx", "mlx", **shape), build_tiny(scratch / "model-torch", "torch", **shape)


def quiet_libraries() -> None:
    """Progress bars and load-time warnings of transformers would interleave with the table."""
    if missing("transformers") is None:
        import transformers

        transformers.utils.logging.set_verbosity_error()
        transformers.utils.logging.disable_progress_bar()


def print_rows(rows: list[Row], title: str, elapsed: float) -> None:
    headers = ["measure", "FrogNano", "baseline", "baseline value", "ratio", "target", "met", "note"]
    body = [[r.measure, r.frognano, r.baseline, r.baseline_value,
             "-" if r.ratio is None else f"{r.ratio:.2f}x", r.target,
             "-" if r.met is None else ("yes" if r.met else "NO"), r.note] for r in rows]
    _table.print_table(title, headers, body, left={0, 1, 2, 3, 5, 6, 7}, width=190)
    print(f"total wall time {elapsed:.1f} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="FrogNano's first-context size against a mini-swe-agent bash prompt, its mlx and torch "
                    "backends' decode speed against raw mlx_lm and transformers, and second-turn prefill with "
                    "the prompt cache against without (see the module docstring for each row).")
    parser.add_argument("--tokens", type=int, default=256, help="tokens generated per decode call (default 256)")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per side; the median counts (default 5)")
    parser.add_argument("--hidden", type=int, default=256, help="hidden size of the timing model (default 256)")
    parser.add_argument("--layers", type=int, default=4, help="layers of the timing model (default 4)")
    parser.add_argument("--quick", action="store_true", help="smoke run: 32 tokens, 3 repeats")
    parser.add_argument("-v", "--verbose", action="store_true", help="also log the first observation")
    args = parser.parse_args(argv)
    if args.tokens < 2 or args.repeats < 1 or args.hidden < 32 or args.layers < 1:
        parser.error("--tokens must be at least 2, --repeats and --layers at least 1, --hidden at least 32")
    n, repeats = (32, 3) if args.quick else (args.tokens, args.repeats)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, format="%(message)s",
                        stream=sys.stderr)
    if not args.verbose:
        logging.getLogger("frognano").setLevel(logging.WARNING)
    quiet_libraries()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    if load > 0.5 * (os.cpu_count() or 1):
        # Torch's worker threads slow down many times over when a core is taken; the ratios
        # stay paired, but single calls vary so much that even medians wander.
        log.warning("the machine is busy (load %.1f on %d CPUs): the timing rows will be noisy",
                    load, os.cpu_count() or 1)
    wall = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="frognano-harness-bench-") as tmp:
        scratch = Path(tmp)
        os.environ["FROGNANO_CACHE_DIR"] = str(scratch / "cache")  # never the user's cache
        log.info("diagnosing a copy of examples/calc")
        task = failing_task(scratch)
        mlx_dir, torch_dir = build_models(scratch, args.hidden, args.layers)
        rows = context_rows(task, torch_dir)
        log.info("decode: mlx")
        rows.append(mlx_decode(mlx_dir, n, repeats))
        log.info("decode: torch")
        rows.append(torch_decode(torch_dir, n, repeats))
        for kind, folder in (("mlx", mlx_dir), ("torch", torch_dir)):
            log.info("second-turn prefill: %s", kind)
            rows.append(prefill_row(kind, folder, task, repeats))
    device = ""
    if missing("mlx") is None:
        import mlx.core as mx

        device += f", mlx on {mx.default_device()}"
    if missing("torch") is None:
        from frognano.runtime.torch import pick_device

        device += f", torch on {pick_device()}"
    title = (f"Harness: first context and backends (python {sys.version.split()[0]}, {os.cpu_count()} CPUs"
             f"{device}; model hidden={args.hidden}, layers={args.layers}; median of {repeats})")
    print_rows(rows, title, time.perf_counter() - wall)
    failed = [r for r in rows if r.met is False]
    for r in failed:
        print(f"target missed: {r.measure}: {r.ratio:.2f}x (target {r.target})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
