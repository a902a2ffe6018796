"""The timing rows of ``harness.py`` that run an in-process backend (``TorchModel``, ``MLXModel``)
beside the raw library it wraps: decode, torch's thread count, the grammar's cost, the prompt
cache over an episode's turns, prefill, peak RSS.  Also ``Row`` and the interleaved median that
every row of the harness benchmark uses.

Run as a script it is the child process of a peak-RSS row: ``_speed.py rss SIDE KIND TARGET N
THREADS`` loads one side (``ours``: FrogNano's backend; ``raw``: the library alone), generates N
greedy tokens and prints ``{"maxrss_kb": ...}``.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger("benchmarks.harness")

HERE = Path(__file__).resolve().parent

# The short prompt of the decode rows (the runtime tests' messages): decoding, not prefill.
SHORT = [
    {"role": "system", "content": "You fix failing tests."},
    {"role": "user", "content": "FAILED tests/test_stats.py::test_mean - assert 1.5 == 2"},
]


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


def median_interleaved(a: Callable[[], float], b: Callable[[], float], repeats: int,
                       warm: bool = True) -> tuple[float, float]:
    """Medians of ``repeats`` calls of ``a`` and of ``b``, alternating (one untimed warm-up each
    unless ``warm`` is False), so that a slow drift of the machine (another process, thermal
    limits) hits both sides."""
    if warm:
        a(), b()
    xs, ys = [], []
    for _ in range(repeats):
        xs.append(a())
        ys.append(b())
    return statistics.median(xs), statistics.median(ys)


def ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f} ms" if seconds >= 1 else f"{seconds * 1000:.1f} ms"


# -- a backend beside its raw library ----------------------------------------------------------

@dataclass
class Pair:
    """FrogNano's backend (``ours``) and the raw library on the same folder, loaded apart: the
    baseline shares nothing with FrogNano."""

    kind: str  # "torch" | "mlx"
    ours: Any  # TorchModel | MLXModel, with the prompt cache on
    raw_decode: Callable[[list[int], int], list[int]]  # greedy ids after the prompt ids
    raw_prompt: Callable[[list[dict]], list[int]]  # the raw library's own chat-template ids
    device: str
    sync: Callable[[], None] = lambda: None  # a GPU runs asynchronously: time what it did

    def close(self) -> None:
        self.ours.close()


def open_pair(kind: str, folder: str) -> Pair:
    if kind == "mlx":
        import mlx.core as mx
        import mlx_lm
        from mlx_lm.generate import stream_generate

        from frognano.runtime.mlx import MLXModel

        ours = MLXModel.load(folder)
        model, tok = mlx_lm.load(folder)

        def mlx_decode(prompt: list[int], n: int) -> list[int]:
            return [r.token for r in stream_generate(model, tok, prompt, max_tokens=n)]

        return Pair("mlx", ours, mlx_decode, lambda m: list(tok.apply_chat_template(m, add_generation_prompt=True)),
                    str(mx.default_device()))
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from frognano.runtime.torch import TorchModel

    ours = TorchModel.load(folder)
    device = ours.device
    raw = AutoModelForCausalLM.from_pretrained(folder, dtype=next(ours.model.parameters()).dtype).to(device).eval()
    raw_tok = AutoTokenizer.from_pretrained(folder)

    def torch_decode(prompt: list[int], n: int) -> list[int]:
        ids = torch.tensor([prompt], device=device)
        # min_new_tokens stays unset: like FrogNano, generate stops at an end-of-turn token.
        out = raw.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, do_sample=False)
        return out[0, len(prompt):].tolist()

    def torch_prompt(messages: list[dict]) -> list[int]:
        text = raw_tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return raw_tok.encode(text, add_special_tokens=False)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize()

    return Pair("torch", ours, torch_decode, torch_prompt, str(device), sync)


def timed(pair: Pair, call: Callable[[], Any]) -> tuple[Any, float]:
    pair.sync()
    t = time.perf_counter()
    out = call()
    pair.sync()
    return out, time.perf_counter() - t


# -- decode ------------------------------------------------------------------------------------

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
               ratio >= 0.95, f"{count} tokens; {per_token_us:+,.0f} us/token vs baseline")


def pair_decode(pair: Pair, n: int, repeats: int, label: str = "") -> Row:
    """``generate`` (greedy, unconstrained, prompt cache reset before each call) against the raw
    library's greedy decode of the same prompt ids."""
    from frognano.runtime.base import Sampling

    measure = f"decode, {pair.kind}{label} (N={n}, greedy)"
    prompt = pair.ours.encode_prompt(SHORT)
    if pair.raw_prompt(SHORT) != prompt:
        raise SystemExit(f"{measure}: the raw library's chat template gives other prompt ids; the benchmark is broken")
    sampling = Sampling(max_tokens=n)

    def ours() -> tuple[list[int], float]:
        pair.ours.reset_cache()
        gen, seconds = timed(pair, lambda: pair.ours.generate(SHORT, None, sampling, constrain=False))
        return gen.token_ids, seconds

    def raw() -> tuple[list[int], float]:
        return timed(pair, lambda: pair.raw_decode(prompt, n))

    baseline = "mlx_lm.stream_generate" if pair.kind == "mlx" else "transformers generate"
    return decode_row(measure, baseline, ours, raw, n, repeats)


def threads_row(pair: Pair, default_threads: int, n: int, repeats: int) -> Row:
    """FrogNano's torch decode at torch's own thread count against one thread (no target: what
    a busy machine does to torch's worker threads)."""
    import torch

    from frognano.runtime.base import Sampling

    measure = f"decode, torch, {default_threads} threads vs 1 (N={n})"
    if pair.device != "cpu":
        return Row.skipped(measure, f"torch runs on {pair.device}")
    if default_threads < 2:
        return Row.skipped(measure, "torch uses 1 thread here by default")
    used = torch.get_num_threads()
    sampling = Sampling(max_tokens=n)
    count = 0

    def at(threads: int) -> float:
        nonlocal count
        torch.set_num_threads(threads)
        pair.ours.reset_cache()
        gen, seconds = timed(pair, lambda: pair.ours.generate(SHORT, None, sampling, constrain=False))
        count = len(gen.token_ids)
        return seconds

    try:
        t_many, t_one = median_interleaved(lambda: at(default_threads), lambda: at(1), repeats)
    finally:
        torch.set_num_threads(used)
    ratio = t_one / t_many
    return Row(measure, f"{count / t_many:.1f} tok/s", "same, 1 thread", f"{count / t_one:.1f} tok/s", ratio,
               "-", None, f"torch's default here is {default_threads} threads; the other rows use {used}")


def constrained_row(pair: Pair, messages: list[dict], tools: list[dict], offered: list[str], n: int,
                    repeats: int, label: str) -> Row:
    """The grammar's cost per token: a constrained reply (``offered`` tools) against an
    unconstrained one on the same prompt (the episode's first), both with the prompt in the
    cache, so each call is decoding."""
    from frognano.runtime.base import Sampling

    measure = f"constrained vs unconstrained, {pair.kind}, {label}"
    sampling = Sampling(max_tokens=n)
    seen: dict[bool, Any] = {}

    def per_token(constrain: bool) -> float:
        gen, seconds = timed(pair, lambda: pair.ours.generate(messages, tools, sampling, constrain=constrain,
                                                              offered=offered if constrain else None))
        seen[constrain] = gen
        return seconds / max(1, len(gen.token_ids))

    t_con, t_free = median_interleaved(lambda: per_token(True), lambda: per_token(False), repeats)
    ratio = t_free / t_con
    con, free = seen[True], seen[False]
    log.info("  constrained reply: %r; unconstrained: %r", con.text, free.text[:120])
    return Row(measure, f"{1 / t_con:.1f} tok/s", "same backend, constrain=False", f"{1 / t_free:.1f} tok/s",
               ratio, ">= 0.95x", ratio >= 0.95,
               f"{(t_con - t_free) * 1e6:+,.0f} us/token for the grammar; replies of {len(con.token_ids)} "
               f"({one_line(con.text)}) and {len(free.token_ids)} tokens")


def one_line(text: str, limit: int = 48) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# -- the prompt cache over an episode ------------------------------------------------------------

@dataclass
class EpisodeTurn:
    """One turn of a recorded episode, as the engine's episode loop asked the model for it."""

    messages: list[dict]
    tools: list[dict] | None
    offered: list[str] | None
    sampling: Any  # base.Sampling
    gen: Any  # base.Generation: the reply
    reused: int  # prompt tokens taken from the cache as the previous turn left it
    cached_s: float | None  # a 1-token generate of this prompt with that cache (None on turn 1)


def prefill(pair: Pair, messages: list[dict], tools: list[dict] | None) -> tuple[float, int]:
    """The seconds of a 1-token ``generate`` of the prompt (what its logits take) and the prompt
    tokens it took from the cache."""
    from frognano.runtime.base import Sampling

    _, seconds = timed(pair, lambda: pair.ours.generate(messages, tools, Sampling(max_tokens=1), constrain=False))
    return seconds, pair.ours.last_prompt_reused


@dataclass
class PrefillTimes:
    cached: dict[int, list[float]] = field(default_factory=dict)  # turn index -> seconds
    reset: dict[int, list[float]] = field(default_factory=dict)
    raw: list[float] = field(default_factory=list)  # the raw library on the last turn's prompt


def replay_prefill(pair: Pair, turns: list[EpisodeTurn], repeats: int, reset_turns: list[int]) -> PrefillTimes:
    """Per repeat: the episode again with the cache kept (each turn's prompt timed right after the
    previous reply, which is generated again, as the episode generated it), then each turn of
    ``reset_turns`` after ``reset_cache()``, and the raw library on the last turn's prompt ids.
    The recording pass was the first repeat of the cached side."""
    times = PrefillTimes({i: [t.cached_s] for i, t in enumerate(turns) if t.cached_s is not None})
    last = turns[-1]
    last_ids = pair.ours.encode_prompt(last.messages, last.tools)
    for r in range(repeats):
        if r:  # the cached side; its first repeat is the recording pass
            for i, turn in enumerate(turns):
                if i:
                    times.cached[i].append(prefill(pair, turn.messages, turn.tools)[0])
                if i < len(turns) - 1:
                    gen = pair.ours.generate(turn.messages, turn.tools, turn.sampling, offered=turn.offered)
                    if gen.token_ids != turn.gen.token_ids:
                        log.warning("turn %d: the reply came out differently on a replay", i + 1)
        for i in reset_turns:
            pair.ours.reset_cache()
            times.reset.setdefault(i, []).append(prefill(pair, turns[i].messages, turns[i].tools)[0])
        times.raw.append(timed(pair, lambda: pair.raw_decode(last_ids, 1))[1])
    return times


def turn_label(turns: list[EpisodeTurn], i: int) -> str:
    call = turns[i - 1].offered[0] if turns[i - 1].offered else "?"
    return f"turn {i + 1} (after {call})"


def reuse_rows(kind: str, turns: list[EpisodeTurn]) -> list[Row]:
    """Per turn, what the prompt cache kept of the previous turn (its prompt and its reply)."""
    rows = []
    for i in range(1, len(turns)):
        before = turns[i - 1].gen
        previous = before.prompt_tokens + len(before.token_ids)
        reused, prompt = turns[i].reused, turns[i].gen.prompt_tokens
        # Torch's loop never feeds a reply's last token (the end of turn): the next prompt does.
        met = reused >= previous - 1
        rows.append(Row(f"cache reuse, {kind}, {turn_label(turns, i)}", f"{reused:,} tok",
                        "previous turn (prompt + reply)", f"{previous:,} tok", reused / previous,
                        "= previous turn", met,
                        f"prompt {prompt:,} tok: {prompt - reused:,} fed; reply {len(before.token_ids)} tok "
                        f"({one_line(before.text, 40)})"))
    return rows


def prefill_rows(kind: str, turns: list[EpisodeTurn], times: PrefillTimes) -> list[Row]:
    rows = []
    for i in sorted(times.reset):
        cached, full = statistics.median(times.cached[i]), statistics.median(times.reset[i])
        ratio = cached / full
        rows.append(Row(f"prefill, {kind}, {turn_label(turns, i)}", ms(cached), "same backend, cache reset",
                        ms(full), ratio, "< 1x", ratio < 1,
                        f"{turns[i].gen.prompt_tokens:,}-token prompt, {turns[i].reused:,} from the cache"))
    last = len(turns) - 1
    if last in times.reset:
        ours, raw = statistics.median(times.reset[last]), statistics.median(times.raw)
        baseline = "mlx_lm.stream_generate" if kind == "mlx" else "transformers generate"
        ratio = raw / ours
        rows.append(Row(f"prefill, {kind}, turn {last + 1}, cache reset", ms(ours), f"{baseline} (1 token)", ms(raw),
                        ratio, ">= 0.95x", ratio >= 0.95,
                        f"{turns[last].gen.prompt_tokens:,} tokens; speed ratio; {len(times.raw)} repeats"))
    return rows


# -- peak RSS ----------------------------------------------------------------------------------------

def rss_row(kind: str, target: str, n: int, threads: int) -> Row:
    """Peak RSS of a process that loads the model and generates N tokens: FrogNano's backend
    against the raw library, each in a fresh process of its own."""
    measure = f"peak RSS, http client ({n} tokens)" if kind == "openai" else f"peak RSS, {kind} (load + {n} tokens)"
    peaks = {}
    for side in ("ours", "raw"):
        proc = subprocess.run([sys.executable, str(HERE / "_speed.py"), "rss", side, kind, target, str(n),
                               str(threads)], capture_output=True, text=True)
        if proc.returncode != 0:
            tail = one_line(proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "", 160)
            return Row.skipped(measure, f"the {side} process failed: {tail}")
        peaks[side] = json.loads(proc.stdout.strip().splitlines()[-1])["maxrss_kb"]
    ratio = peaks["ours"] / peaks["raw"]
    baseline = {"torch": "transformers", "mlx": "mlx_lm", "openai": "http.client POST"}[kind]
    return Row(measure, f"{peaks['ours'] / 1024:,.0f} MiB", baseline, f"{peaks['raw'] / 1024:,.0f} MiB", ratio,
               "<= 1.05x", ratio <= 1.05,
               f"{(peaks['ours'] - peaks['raw']) / 1024:+,.0f} MiB; VmHWM of each process")


def _rss_child(side: str, kind: str, target: str, n: int, threads: int) -> None:
    """One side of ``rss_row``: load, generate, print the peak resident set size."""
    logging.disable(logging.WARNING)
    if kind == "openai":
        import _served

        if side == "ours":
            from frognano.runtime.base import Sampling
            from frognano.runtime.load import load_model

            model = load_model(target)
            model.generate(SHORT, None, Sampling(max_tokens=n))
        else:
            model_name, _, url = target.removeprefix("openai:").partition("@")
            _served.plain_post(url, _served.body(model_name, SHORT, n, stream=False), stream=False)
    elif kind == "torch":
        import torch

        torch.set_num_threads(threads)
        if side == "ours":
            from frognano.runtime.base import Sampling
            from frognano.runtime.torch import TorchModel

            TorchModel.load(target).generate(SHORT, None, Sampling(max_tokens=n), constrain=False)
        else:
            import transformers
            from transformers import AutoModelForCausalLM, AutoTokenizer

            transformers.utils.logging.set_verbosity_error()
            transformers.utils.logging.disable_progress_bar()
            # The device and dtype TorchModel picks by default (torch.py's pick_device, default_dtype).
            if torch.cuda.is_available():
                device = torch.device("cuda")
                dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
            elif torch.backends.mps.is_available():
                device, dtype = torch.device("mps"), torch.float16
            else:
                device, dtype = torch.device("cpu"), torch.float32
            tok = AutoTokenizer.from_pretrained(target)
            model = AutoModelForCausalLM.from_pretrained(target, dtype=dtype).to(device).eval()
            text = tok.apply_chat_template(SHORT, add_generation_prompt=True, tokenize=False)
            ids = torch.tensor([tok.encode(text, add_special_tokens=False)], device=device)
            with torch.inference_mode():
                model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, do_sample=False)
    else:
        if side == "ours":
            from frognano.runtime.base import Sampling
            from frognano.runtime.mlx import MLXModel

            MLXModel.load(target).generate(SHORT, None, Sampling(max_tokens=n), constrain=False)
        else:
            import mlx_lm
            from mlx_lm.generate import stream_generate

            model, tok = mlx_lm.load(target)
            for _ in stream_generate(model, tok, tok.apply_chat_template(SHORT, add_generation_prompt=True),
                                     max_tokens=n):
                pass
    print(json.dumps({"maxrss_kb": peak_rss_kb()}))


def peak_rss_kb() -> int:
    """This process's peak resident set size.  Linux: VmHWM, which belongs to the program (the
    rusage figure survives exec, so a child forked from a big parent would report the parent's)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak // 1024 if sys.platform == "darwin" else peak  # bytes on macOS, KiB elsewhere


if __name__ == "__main__":
    if len(sys.argv) != 7 or sys.argv[1] != "rss":
        sys.exit("usage: _speed.py rss ours|raw torch|mlx|openai TARGET N THREADS")
    _rss_child(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6]))
    os._exit(0)  # skip the interpreter's teardown of torch / mlx: the number is printed
