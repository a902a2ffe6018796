"""The harness benchmark: how much context FrogNano's first turn costs, and what its backends cost
on top of the libraries they wrap, in speed and in memory.  Every row is a ratio against a
baseline measured in the same run.

Without ``--model`` the timing rows run on a tiny random Qwen3 built here, both in-process
backends; with ``--model SPEC`` (``torch:FOLDER``, ``mlx:FOLDER``, ``openai:MODEL@URL``; for
``torch:`` and ``mlx:`` also a GGUF file, imported first by ``frognano.runtime.gguf.import_gguf``
into a folder that both sides then load) or ``--llama-server GGUF`` they measure that real model.

The task (every mode)
    A temporary copy of ``examples/calc`` (``is_adult`` says ``age > 18``), diagnosed the way
    ``Engine.fix`` does before its model episodes.

Rows
    ``first context, tokens`` / ``first context, characters``
        FrogNano's first prompt against a mini-swe-agent-style bash-tool prompt for the same
        task.  FrogNano's side is what ``Engine.model_episode`` sends a model: ``SYSTEM_PROMPT``,
        the tool schemas (``harness.TOOLS``) and ``first_observation`` of the diagnosis, rendered
        by the backend's own ``LocalModel.render``: where the chat template ignores ``tools=``
        (SmolLM2's does), the schemas and the call format go into the system prompt
        (``runtime/prompt.py``), and they are counted there.  The baseline is a paraphrase of
        mini-swe-agent's default config (``src/minisweagent/config/default.yaml``, v2.4.6: a
        system prompt asking for one command per reply in a ```bash block, and an instance
        message "Please solve this issue: {{task}}" plus its workflow, rules and command
        examples; the paraphrase is within 1% of the original's length as rendered on Linux, its
        ```mswea_bash_command fences read as ```bash), whose task is the full output of a plain
        ``python -m pytest`` in the same project, rendered the same way.  The note splits
        FrogNano's side into system prompt, tools block (wherever it sits) and observation:
        differences of renderings, so they add up.  Over HTTP the tokens are the server's own
        ``usage.prompt_tokens`` for the request ``OpenAIModel`` sends (messages and ``tools``),
        and there is no characters row (the server's text is not seen).  With the tiny model,
        tokens are counted with its tokenizer: a byte-level BPE of 512 tokens trained on a few
        kilobytes that include tool schemas and tool calls shaped like the harness's, so
        FrogNano's JSON gets far more characters per token than the baseline's English prose;
        the characters row is the tokenizer-free number.  Target: <= 0.5x.
    ``decode, mlx`` / ``decode, torch``
        ``MLXModel.generate`` (greedy, ``constrain=False``, prompt cache reset before each call)
        against ``mlx_lm.stream_generate``, and ``TorchModel.generate`` against
        ``transformers``' ``model.generate(..., do_sample=False)`` (float32 on CPU), on the same
        folder and the same prompt token ids, generating N tokens; tokens per second of the
        whole call.  The prompt is short (a system line and a one-line failure), so the call is
        nearly all decoding.  The script stops if the two disagree on the prompt or on the
        tokens they generate: a fast but different loop would not be a like-for-like number.
        Target: >= 0.95x.  The note gives the difference as time per token.
    ``decode, torch, T threads vs 1`` (real torch model, CPU)
        The same FrogNano decode (8 tokens) at torch's own default thread count T
        (``torch.get_num_threads()`` at start) against one thread; no target.  Every torch row
        runs with ``--threads`` (default 1, stated in the title): on a machine whose cores are
        taken by other work, torch's worker threads wait on each other at every small operation.
    ``constrained vs unconstrained, torch|mlx, turn 1`` / ``..., read`` (real model)
        The grammar's cost per token: ``generate`` with the tool-call grammar against
        ``constrain=False``, on the episode's first prompt, which stays in the prompt cache, so
        each call is decoding; tokens per second of each reply (they differ in length: the call
        closes, the free text runs to N).  ``turn 1`` offers every tool but ``submit``, as an
        episode's first turn does; ``read`` offers only ``read``, so the model spells a path:
        inside a string argument the grammar's mask is at its costliest.  Target: >= 0.95x.
    ``cache reuse, turn k`` / ``prefill, turn k`` / ``prefill, turn K, cache reset`` (real model)
        A real episode replayed through the engine's own loop (``Engine.model_episode`` after
        its search, with the real ``ToolBox`` answering): ``candidates`` -> ``apply`` ->
        ``run_tests`` -> ``submit``, the model offered only that turn's tool (the grammar
        leaves it the arguments), up to 64 tokens a reply.  ``cache reuse``: the prompt tokens
        turn k took from the cache (``last_prompt_reused``) against the previous turn's prompt
        plus its reply; target: all of it (torch's loop never feeds a reply's last token, the
        end of turn, so one less there).  ``prefill, turn k``: a 1-token ``generate`` of turn
        k's prompt right after the previous reply (cache kept) against the same after
        ``reset_cache()``; lower is better, target < 1x.  The last turn's prompt after a reset
        is also timed against the raw library prefilling the same ids (``generate`` /
        ``stream_generate`` of one token); target >= 0.95x.  mlx's CPU build prefills about 7
        tokens a second (minutes for a turn's 1.2k tokens), so with mlx on CPU only the last
        turn is timed after a reset, once.
    ``peak RSS, torch|mlx|openai`` (real model)
        The peak resident set (``VmHWM``; ``ru_maxrss`` where there is no /proc) of a fresh
        process that loads the model and generates 16 greedy tokens: FrogNano's backend against
        the raw library (for HTTP: the client process, ``OpenAIModel`` against a plain POST; the
        server is the same).  Target: <= 1.05x.
    ``decode, http`` / ``decode, http, streamed`` (``openai:`` or ``--llama-server``)
        ``OpenAIModel.generate`` (``frognano/runtime/http.py``; greedy, N tokens, whole and
        streamed) against ``http.client`` POSTing the same body to the same server; the texts
        must agree.  ``--llama-server GGUF`` starts llama-cpp-python's server on a free port
        of 127.0.0.1 (``--model_alias smollm2 --n_ctx 4096``) and stops it at the end.
        Target: >= 0.95x.

    The tiny model is a somewhat larger random Qwen3 than the tests' (``--hidden``,
    ``--layers``; the vocabulary stays at 512, so the tokenizer is the tests' tiny one): with
    the default 64-wide, 2-layer model a decode step takes microseconds and the ratio would
    only compare Python bookkeeping.  Its rows are the first-context rows, the two decode rows
    and ``2nd-turn prefill``: the second turn's prompt (the first, plus a ``read`` of the
    suspicious file by the real ``ToolBox``) with the cache the first turn left, against the
    same after ``reset_cache()``.  Each timing is the median of ``--repeats`` calls after one
    warm-up call, with FrogNano and the baseline interleaved so drift hits both; the script
    warns when the machine is busy at the start.  A row whose library is missing says
    ``skipped (... not installed)``; the script exits 1 when a measured row misses its target.

    Wall times measured on 2 busy CPUs:

    .venv/bin/python benchmarks/harness.py                # tiny model, N=256, 5 repeats (~2 min)
    .venv/bin/python benchmarks/harness.py --quick        # smoke run: N=32, 3 repeats
    .venv/bin/python benchmarks/harness.py --model torch:FOLDER_OR.gguf   # N=64, 3 repeats (~4 min on SmolLM2)
    .venv/bin/python benchmarks/harness.py --model mlx:FOLDER_OR.gguf     # N=16, 3 repeats (~11 min: mlx on CPU)
    .venv/bin/python benchmarks/harness.py --llama-server SmolLM2-135M-Instruct.Q4_1.gguf   # (~1.5 min)
"""

from __future__ import annotations

import argparse
import copy
import logging
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import _table  # benchmarks/_table.py: this script's own folder is on sys.path
from _speed import (
    EpisodeTurn,
    Pair,
    Row,
    constrained_row,
    median_interleaved,
    missing,
    open_pair,
    pair_decode,
    prefill,
    prefill_rows,
    replay_prefill,
    reuse_rows,
    rss_row,
    threads_row,
)

REPO = Path(__file__).resolve().parent.parent
log = logging.getLogger("benchmarks.harness")

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


# -- the failing task ------------------------------------------------------------------------------

@dataclass
class Task:
    observation: str  # first_observation(...) of the diagnosis
    pytest_output: str  # plain `python -m pytest` in a copy of the same project
    reply: str  # a realistic first assistant turn: read the suspicious file
    tool_result: str  # what the real ToolBox answers to it


def copy_example(dest: Path) -> Path:
    ignore = shutil.ignore_patterns("__pycache__", ".pytest_cache")
    return Path(shutil.copytree(REPO / "examples" / "calc", dest / "calc", ignore=ignore))


def failing_task(scratch: Path) -> Task:
    """Diagnose a copy of examples/calc the way ``Engine.fix`` does before its model episodes."""
    from frognano.config import Settings
    from frognano.repair.engine import Engine
    from frognano.repair.harness import ToolBox, ToolCall, first_observation, render_tool_call
    from frognano.sandbox.workspace import Workspace

    served = copy_example(scratch / "served")
    plain = copy_example(scratch / "plain")
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


# -- a real episode, for the prompt cache rows ----------------------------------------------------

# The calls the recorded episode makes, one a turn: the model is offered only that tool (the
# grammar then leaves it the arguments), so the episode goes the way a repair goes.
SCRIPT = ("candidates", "apply", "run_tests", "submit")


class ScriptedModel:
    """The model under test inside the engine's own episode loop, offered ``script``'s tool at
    each turn.  Before each turn after the first, the turn's prompt is timed (a 1-token
    ``generate``) with the cache as the previous turn left it; every turn is kept."""

    def __init__(self, pair: Pair, script: tuple[str, ...]) -> None:
        self.pair, self.script = pair, script
        self.name = pair.ours.name
        self.turns: list[EpisodeTurn] = []

    def generate(self, messages: list[dict], tools: list[dict] | None = None, sampling: Any = None, *,
                 on_text: Callable[[str], None] | None = None, cancel: Any = None, constrain: bool = True,
                 offered: Any = None) -> Any:
        k = len(self.turns)
        offered = [self.script[k]] if k < len(self.script) else offered
        asked = copy.deepcopy(messages)
        cached_s = None
        if k:
            cached_s, reused = prefill(self.pair, asked, tools)
        gen = self.pair.ours.generate(messages, tools, sampling, on_text=on_text, cancel=cancel,
                                      constrain=constrain, offered=offered)
        if not k:
            reused = self.pair.ours.last_prompt_reused
        self.turns.append(EpisodeTurn(asked, tools, offered, sampling, gen, reused, cached_s))
        return gen

    def close(self) -> None:
        """The pair's owner closes the model."""


def record_episode(scratch: Path, pair: Pair, reply_tokens: int) -> list[EpisodeTurn]:
    """One model episode on a fresh copy of examples/calc, as ``Engine.fix`` runs it after its
    search (the real ToolBox answers every call), with the model offered ``SCRIPT``'s tools."""
    from frognano.config import Settings
    from frognano.repair.engine import Engine
    from frognano.sandbox.workspace import Workspace

    model = ScriptedModel(pair, SCRIPT)
    settings = Settings(lanes=1, episodes=1, max_turns=len(SCRIPT), max_new_tokens=reply_tokens)
    with Workspace(copy_example(scratch / f"episode-{pair.kind}")) as ws, \
            Engine(ws, settings, model=model) as engine:
        diagnosis = engine.diagnose()
        verifier = engine.verifier(diagnosis)
        search = engine.search(diagnosis, verifier)
        episode, _ = engine.model_episode(diagnosis, verifier, search, 0, record=False)
    for turn in episode.turns:
        log.info("  %s -> %s", turn.reply.replace("\n", " "), turn.result.replace("\n", " | ")[:100])
    log.info("  episode: %s, %d turns, %.1f s", episode.status, len(episode.turns), episode.seconds)
    if len(model.turns) < 2:
        raise SystemExit(f"the recorded episode ended after {len(model.turns)} turn ({episode.status}); "
                         "the benchmark is broken")
    return model.turns


# -- the first-context rows ------------------------------------------------------------------------

Counter = Callable[[list[dict], list[dict] | None], tuple[int, int | None]]


def local_counter(model: Any) -> Counter:
    """``count(messages, tools)`` -> (tokens, characters) of the prompt an in-process backend
    renders (``LocalModel.render``: the tools in the system prompt where the template ignores them)."""
    def count(messages: list[dict], tools: list[dict] | None) -> tuple[int, int | None]:
        text = model.render(messages, tools)
        return len(model.hf_tokenizer.encode(text, add_special_tokens=False)), len(text)

    return count


def context_rows(task: Task, count: Counter, where: str) -> list[Row]:
    """FrogNano's first prompt against the mini-swe-agent prompt, as ``count`` measures them;
    ``where`` says where the tools block sits (for the note)."""
    from frognano.repair.harness import TOOLS

    messages = first_messages(task)
    ours = count(messages, TOOLS)
    base = count(mini_swe_messages(task.pytest_output), None)
    # Where FrogNano's context goes: the system prompt (with the template's own text), the
    # tools block (wherever it sits), the observation; differences of renderings, so they add up.
    without_tools = count(messages, None)
    system_only = count([messages[0], {"role": "user", "content": ""}], None)
    pytest_output = count([{"role": "user", "content": task.pytest_output}], None)
    log.debug("FrogNano first observation:\n%s", task.observation)
    rows = []
    for i, (measure, unit) in enumerate([("first context, tokens", "tok"), ("first context, characters", "chars")]):
        if ours[i] is None:
            rows.append(Row.skipped(measure, "the server renders the prompt; only its token count is seen"))
            continue
        ratio = ours[i] / base[i]
        parts = (f"system {system_only[i]:,} + tools {ours[i] - without_tools[i]:,} ({where}) + observation "
                 f"{without_tools[i] - system_only[i]:,}; baseline's pytest output {pytest_output[i]:,} "
                 "(rendered alone)")
        rows.append(Row(measure, f"{ours[i]:,} {unit}", "mini-swe-agent bash prompt", f"{base[i]:,} {unit}",
                        ratio, "<= 0.5x", ratio <= 0.5, parts))
    return rows


# -- the tiny model's second-turn prefill ----------------------------------------------------------

def second_turn_row(pair: Pair, task: Task, repeats: int) -> Row:
    """The second turn's prompt with the cache the first left, against the same after a reset."""
    from frognano.repair.harness import TOOLS
    from frognano.runtime.base import Sampling

    model = pair.ours
    first, second = first_messages(task), second_messages(task)
    one = Sampling(max_tokens=1)  # the reply's first token: what the prompt's logits start
    stats: dict[str, int] = {}

    def cached() -> float:
        # Turn 1.  Not after a reset: the cache holds the second prompt (from the warm-up or the
        # last uncached call), so this trims it back to the first prompt and feeds one token,
        # instead of prefilling the whole first prompt again (seconds on mlx's CPU build).
        model.generate(first, TOOLS, one, constrain=False)
        seconds, _ = prefill(pair, second, TOOLS)
        stats.update(reused=model.last_prompt_reused, processed=model.last_prompt_processed)
        return seconds

    def uncached() -> float:
        model.reset_cache()
        return prefill(pair, second, TOOLS)[0]

    t_cached, t_full = median_interleaved(cached, uncached, repeats)
    total = stats["reused"] + stats["processed"]
    if stats["reused"] == 0:
        log.warning("2nd-turn prefill, %s: the second prompt took nothing from the cache", pair.kind)
    ratio = t_cached / t_full
    return Row(f"2nd-turn prefill, {pair.kind}", f"{t_cached * 1000:.1f} ms", "same backend, cache reset",
               f"{t_full * 1000:.1f} ms", ratio, "< 1x", ratio < 1,
               f"last_prompt_reused {stats['reused']:,} of {total:,} prompt tokens")


def tiny_rows(scratch: Path, task: Task, args: argparse.Namespace, n: int, repeats: int, threads: int) -> list[Row]:
    """The rows without --model, on a random Qwen3 built here (both backends)."""
    mlx_dir, torch_dir = build_models(scratch, args.hidden, args.layers)
    rows: list[Row] = []
    for kind, folder, needs in (("torch", torch_dir, ("torch", "transformers")), ("mlx", mlx_dir, ("mlx", "mlx_lm"))):
        why = missing(*needs) or (None if folder else "tiny model not built")
        if kind == "torch" and why:
            rows += [Row.skipped("first context, tokens", why), Row.skipped("first context, characters", why)]
        if why:
            rows += [Row.skipped(f"decode, {kind} (N={n}, greedy)", why), Row.skipped(f"2nd-turn prefill, {kind}", why)]
            continue
        pair = open_pair(kind, str(folder))
        try:
            if kind == "torch":
                import torch

                torch.set_num_threads(threads)
                rows += context_rows(task, local_counter(pair.ours), tools_where(pair.ours))
            log.info("decode: %s", kind)
            rows.append(pair_decode(pair, n, repeats))
            log.info("second-turn prefill: %s", kind)
            rows.append(second_turn_row(pair, task, repeats))
        finally:
            pair.close()
    return rows


def tools_where(model: Any) -> str:
    return "by the chat template" if model.template_shows_tools else "in the system prompt"


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


# -- a real model (--model) ------------------------------------------------------------------------

def model_folder(kind: str, path: str, scratch: Path) -> str:
    """The folder both sides load: ``path`` itself, or a GGUF file imported once into ``scratch``."""
    from frognano.errors import UsageError
    from frognano.runtime.local import resolve_model_path

    file = Path(path).expanduser()
    if not (file.is_file() and file.name.lower().endswith(".gguf")):
        return resolve_model_path(path, kind)[0]  # a one-line ModelError for what is not a model folder

    try:
        from frognano.runtime.gguf import import_gguf
    except ImportError:
        raise UsageError(f"--model {kind}:{path}: this checkout cannot import a GGUF "
                         "(no frognano/runtime/gguf.py); give a model folder") from None
    log.info("importing %s into a %s folder", file.name, kind)
    try:
        return str(import_gguf(file, scratch / f"gguf-{kind}", to=kind).path)
    except UsageError as exc:  # not a GGUF, truncated, an architecture it does not know: one line
        raise UsageError(f"--model {kind}:{path}: {exc}") from None


def local_rows(kind: str, folder: str, scratch: Path, task: Task, n: int, repeats: int,
               threads: int, default_threads: int) -> list[Row]:
    """Every row of one in-process backend on a real model (see the module docstring)."""
    from frognano.repair.harness import TOOLS

    rows: list[Row] = []
    log.info("loading %s twice (FrogNano's backend and the raw library)", folder)
    pair = open_pair(kind, folder)
    if kind == "torch":
        import torch

        torch.set_num_threads(threads)
    try:
        rows += context_rows(task, local_counter(pair.ours), tools_where(pair.ours))
        log.info("decode")
        rows.append(pair_decode(pair, n, repeats))
        if kind == "torch":
            log.info("decode: %d threads vs 1", default_threads)
            rows.append(threads_row(pair, default_threads, min(n, 8), 1))
        log.info("constrained vs unconstrained decode (the first prefill of the episode's prompt comes first)")
        offered = [t["function"]["name"] for t in TOOLS if t["function"]["name"] != "submit"]
        rows.append(constrained_row(pair, first_messages(task), TOOLS, offered, n, repeats, "turn 1"))
        # A call whose argument is a string the model spells (a path): the grammar's costliest part.
        rows.append(constrained_row(pair, first_messages(task), TOOLS, ["read"], n, repeats, "read"))
        log.info("recording an episode: %s", " -> ".join(SCRIPT))
        turns = record_episode(scratch, pair, REPLY_TOKENS)
        rows += reuse_rows(kind, turns)
        # mlx's CPU build prefills a 1k-token prompt in minutes: there, only the last turn is
        # timed after a reset, once.
        slow = kind == "mlx" and pair.device.startswith("Device(cpu")
        reset_turns = [len(turns) - 1] if slow else list(range(1, len(turns)))
        prefill_repeats = 1 if slow else repeats
        log.info("prefill over the episode's turns, %d repeat(s)%s", prefill_repeats,
                 " (mlx on CPU: the last turn only)" if slow else "")
        rows += prefill_rows(kind, turns, replay_prefill(pair, turns, prefill_repeats, reset_turns))
    finally:
        pair.close()
        del pair  # both models' memory, before the RSS rows' processes start
    log.info("peak RSS (a process of each side)")
    rows.append(rss_row(kind, folder, min(n, 16), threads))
    return rows


REPLY_TOKENS = 64  # max_new_tokens of the recorded episode's turns (a constrained call closes sooner)


def http_rows(spec: str, task: Task, n: int, repeats: int) -> list[Row]:
    import _served

    rows = context_rows(task, _served.server_counter(spec), "as the server renders it")
    log.info("decode over HTTP")
    rows += _served.decode_rows(spec, n, repeats)
    rows.append(Row.skipped("constrained vs unconstrained, http", "the server owns decoding"))
    rows.append(Row.skipped("prefill, http", "the server keeps its own prompt cache"))
    log.info("peak RSS (a client process of each side)")
    rows.append(rss_row("openai", spec, min(n, 16), 1))
    return rows


# -- main --------------------------------------------------------------------------------------------

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
        description="FrogNano's first-context size against a mini-swe-agent bash prompt, and its backends' speed "
                    "and memory against the raw libraries they wrap (see the module docstring for each row).")
    parser.add_argument("--model", metavar="SPEC",
                        help="a real model: torch:FOLDER, mlx:FOLDER or openai:MODEL@URL (default: a tiny random "
                             "Qwen3 built here, both in-process backends)")
    parser.add_argument("--llama-server", metavar="GGUF", type=Path,
                        help="start a llama.cpp server (llama-cpp-python) on this GGUF and add the HTTP rows")
    parser.add_argument("--tokens", type=int, help="tokens generated per decode call (default 256; 64 with a real "
                                                   "torch or HTTP model, 16 with a real mlx model)")
    parser.add_argument("--repeats", type=int, help="timed calls per side; the median counts (default 5; 3 with a "
                                                    "real model)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads of the timing rows (default 1; 0: torch's own default)")
    parser.add_argument("--hidden", type=int, default=256, help="hidden size of the tiny timing model (default 256)")
    parser.add_argument("--layers", type=int, default=4, help="layers of the tiny timing model (default 4)")
    parser.add_argument("--quick", action="store_true", help="smoke run: 32 tokens (16 real, 8 real mlx), 3 repeats "
                                                             "(1 real)")
    parser.add_argument("-v", "--verbose", action="store_true", help="also log the first observation")
    args = parser.parse_args(argv)
    kind, rest = None, None
    from frognano.errors import UsageError

    if args.model:
        from frognano.runtime.base import parse_spec

        try:
            kind, rest = parse_spec(args.model)
        except UsageError as exc:
            parser.error(str(exc))
        if kind == "replay":
            parser.error("--model replay:... replays recorded text; there is nothing to time")
        if kind == "openai" and args.llama_server:
            parser.error("give --model openai:... for a server already running, or --llama-server GGUF, not both")
    if args.llama_server and not args.llama_server.is_file():
        parser.error(f"--llama-server {args.llama_server}: no such file")
    real = bool(kind or args.llama_server)
    if real:
        quick_n, default_n = (8, 16) if kind == "mlx" else (16, 64)
        n = args.tokens or (quick_n if args.quick else default_n)
        repeats = args.repeats or (1 if args.quick else 3)
    else:
        n = args.tokens or (32 if args.quick else 256)
        repeats = args.repeats or (3 if args.quick else 5)
    if n < 2 or repeats < 1 or args.hidden < 32 or args.layers < 1 or args.threads < 0:
        parser.error("--tokens must be at least 2, --repeats and --layers at least 1, --hidden at least 32, "
                     "--threads not negative")
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
    default_threads = threads = 1
    if kind in (None, "torch") and missing("torch") is None:
        import torch

        default_threads = torch.get_num_threads()
        threads = args.threads or default_threads
    wall = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="frognano-harness-bench-") as tmp:
        scratch = Path(tmp)
        os.environ["FROGNANO_CACHE_DIR"] = str(scratch / "cache")  # never the user's cache
        why = folder = None
        if kind in ("torch", "mlx"):
            why = missing(*(("mlx", "mlx_lm") if kind == "mlx" else ("torch", "transformers")))
            try:  # a GGUF is imported (or refused) before any other work
                folder = None if why else model_folder(kind, rest, scratch)
            except UsageError as exc:
                parser.error(str(exc))
        log.info("diagnosing a copy of examples/calc")
        task = failing_task(scratch)
        try:
            rows = measure(args, kind, folder, why, scratch, task, n, repeats, threads, default_threads)
        except UsageError as exc:  # a model that cannot be loaded or reached: one line, as frognano says it
            print(f"harness.py: {exc}", file=sys.stderr)
            return 2
    title = title_of(args, kind, rest, n, repeats, threads)
    print_rows(rows, title, time.perf_counter() - wall)
    failed = [r for r in rows if r.met is False]
    for r in failed:
        print(f"target missed: {r.measure}: {r.ratio:.2f}x (target {r.target})")
    return 1 if failed else 0


def measure(args: argparse.Namespace, kind: str | None, folder: str | None, why: str | None, scratch: Path,
            task: Task, n: int, repeats: int, threads: int, default_threads: int) -> list[Row]:
    """Every row this run measures: the tiny model's, a real in-process model's (``why`` it is
    skipped, if it is), the HTTP rows."""
    real = bool(kind or args.llama_server)
    rows: list[Row] = []
    if not real:
        rows = tiny_rows(scratch, task, args, n, repeats, threads)
    elif kind in ("torch", "mlx"):
        rows = [Row.skipped(f"{kind} rows", why)] if why else local_rows(
            kind, folder, scratch, task, n, repeats, threads, default_threads)
    if kind == "openai":
        rows += http_rows(args.model, task, n, repeats)
    elif args.llama_server:
        import _served

        if missing("llama_cpp") is not None:
            rows.append(Row.skipped("http rows", "llama_cpp not installed (pip install 'llama-cpp-python[server]')"))
        else:
            with _served.llama_server(args.llama_server) as url:
                rows += http_rows(f"openai:{_served.ALIAS}@{url}", task, n, repeats)
    return rows


def title_of(args: argparse.Namespace, kind: str | None, rest: str | None, n: int, repeats: int, threads: int) -> str:
    device = ""
    tiny = kind is None and not args.llama_server
    if (tiny or kind == "mlx") and missing("mlx") is None:
        import mlx.core as mx

        device += f", mlx on {mx.default_device()}"
    if (tiny or kind == "torch") and missing("torch") is None:
        from frognano.runtime.torch import pick_device

        device += f", torch on {pick_device()}"
        device += f" with {threads} thread{'s' * (threads != 1)}"
    if tiny:
        what = f"tiny random Qwen3 hidden={args.hidden}, layers={args.layers}"
    else:
        what = ", ".join(filter(None, [args.model, args.llama_server and f"llama.cpp server on {args.llama_server.name}"]))
    return (f"Harness: first context and backends ({what}; python {sys.version.split()[0]}, {os.cpu_count()} CPUs"
            f"{device}; N={n}; median of {repeats})")


if __name__ == "__main__":
    sys.exit(main())
