"""The model leg on real weights: SmolLM2-135M-Instruct (a byte-level BPE of 49,152 tokens, a chat
template that ignores ``tools=``) beside the tests' tiny Qwen-style model (a template that
renders tools).  Cheapest first: what the prompt shows, what the grammar lets through, what the
prompt cache keeps, then one bounded episode on each in-process backend.
"""

from __future__ import annotations

import json

import pytest

from frognano.config import Settings
from frognano.repair.agent import EpisodeStatus
from frognano.repair.engine import Engine
from frognano.repair.harness import SYSTEM_PROMPT, TOOLS
from frognano.runtime.base import Sampling
from frognano.runtime.load import load_model
from frognano.runtime.grammar import ToolCallGrammar, tool_call_text
from frognano.sandbox.workspace import Workspace

from ..conftest import SMOLLM2_BACKENDS, snapshot

pytestmark = pytest.mark.real_model

CALLS = [
    ("run_tests", {"selection": ["tests/test_stats.py::test_is_adult[18-True]"]}),
    ("run_tests", {}),
    ("read", {"path": "calc/stats.py", "start": 10, "end": 20}),
    ("search", {"pattern": "def is_adult", "path": "calc/stats.py"}),
    ("edit", {"path": "calc/stats.py", "old": "    return age > 18\n", "new": "    return age >= 18\n"}),
    ("candidates", {}),
    ("apply", {"n": 12}),
    ("submit", {}),
]


@pytest.fixture(scope="module")
def smollm2(smollm2_torch):
    model = load_model(f"torch:{smollm2_torch}", device="cpu")
    yield model
    model.close()


@pytest.fixture(scope="module")
def smollm2_mlx_model(smollm2_mlx):
    model = load_model(f"mlx:{smollm2_mlx}")
    yield model
    model.close()


@pytest.fixture(params=[pytest.param("smollm2", marks=pytest.mark.xdist_group("smollm2_torch")), "tiny"])
def chat_model(request):
    """SmolLM2 (tools ignored by its template) and the tiny Qwen-style model (tools rendered)."""
    return request.getfixturevalue("smollm2" if request.param == "smollm2" else "torch_model")


def test_the_prompt_lists_every_tool_and_its_arguments(chat_model):
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": "1 failing test"}]
    text = chat_model.render(messages, TOOLS)
    for tool in TOOLS:
        fn = tool["function"]
        assert f'"name": "{fn["name"]}"' in text, fn["name"]
        for arg in fn["parameters"]["properties"]:
            assert f'"{arg}"' in text, (fn["name"], arg)
    assert "<tool_call>" in text and text.count(SYSTEM_PROMPT) == 1
    # Listed once, whoever lists them: the template, or FrogNano in the system prompt.
    assert text.count('"name": "candidates"') == 1


def test_smollm2s_template_ignores_tools_so_frognano_lists_them(smollm2, torch_model):
    assert smollm2.template_shows_tools is False and torch_model.template_shows_tools is True
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": "obs"}]
    bare = len(smollm2.encode_prompt(messages))
    listed = len(smollm2.encode_prompt(messages, TOOLS))
    assert listed > bare + 300  # the schemas are there (about 600 tokens)


def test_tool_results_render_as_the_http_backend_sends_them(chat_model):
    """One rendering of a tool result, in process and over HTTP: a user turn in <tool_response>."""
    from frognano.runtime.wire import wire_messages

    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
                {"role": "assistant", "content": tool_call_text("candidates", {})},
                {"role": "tool", "content": "1. calc/stats.py:15 `>` -> `>=`"}]
    assert chat_model.render(messages) == chat_model.render(wire_messages(messages))
    assert "<tool_response>\n1. calc/stats.py:15" in chat_model.render(messages)


def _grammar(model) -> ToolCallGrammar:
    model._matcher(TOOLS)  # builds the model's own grammar (with its end-of-turn token)
    return model._grammar


@pytest.mark.parametrize("name,arguments", CALLS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CALLS)])
def test_the_matcher_accepts_the_tokenizers_own_encoding_of_a_call(chat_model, name, arguments):
    """Token by token, the tokenizer's encoding of a whole call is what the grammar allows; and
    where the text is forced, it is the only thing allowed."""
    grammar = _grammar(chat_model)
    tok = chat_model.hf_tokenizer
    ids = tok.encode(tool_call_text(name, arguments), add_special_tokens=False) + [tok.get_vocab()["<|im_end|>"]]
    matcher = grammar.matcher(TOOLS)
    choices = []
    for i, token in enumerate(ids):
        mask = matcher.allowed()
        assert mask is not None and mask[token], (i, tok.convert_ids_to_tokens(ids[: i + 1]))
        choices.append(int(mask.sum()))
        assert matcher.accept(token)
    assert matcher.done and matcher.allowed() is None
    # The opening (tag, key) and the closing tag are forced; the name is one token per tool.
    shown = list(zip(tok.convert_ids_to_tokens(ids), choices))
    head = len(tok.encode('<tool_call>\n{"name": "', add_special_tokens=False))
    tail = len(tok.encode("</tool_call>", add_special_tokens=False)) + 1
    assert choices[:head] == [1] * head and choices[-tail:] == [1] * tail, shown
    assert choices[head] == len(TOOLS), shown


def test_a_constrained_reply_always_closes(chat_model):
    """Sampled at temperature 1 with a small budget, a random or weak model still ends its call:
    arrays and strings are bounded, and the last tokens of the budget close what is open."""
    tools = [t for t in TOOLS if t["function"]["name"] in ("run_tests", "search", "edit")]
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": "1 failing test"}]
    for seed in range(3):  # the prompt cache keeps the shared prompt: only the replies differ
        gen = chat_model.generate(messages, tools, Sampling(temperature=1.5, seed=seed, max_tokens=40))
        head, tail = "<tool_call>\n", "\n</tool_call>"
        assert gen.finish_reason == "stop" and gen.text.startswith(head) and gen.text.endswith(tail), gen.text
        call = json.loads(gen.text[len(head):-len(tail)])
        assert call["name"] in ("run_tests", "search", "edit")
        assert len(call["arguments"].get("selection", [])) <= 16


@pytest.mark.slow
@pytest.mark.parametrize("backend", SMOLLM2_BACKENDS)
def test_the_prompt_cache_reuses_every_token_of_the_previous_turn(request, backend):
    """A constrained reply is tokenised as the template re-tokenises it next turn, so the second
    prompt takes the whole first prompt and the whole reply from the cache."""
    # Whatever an earlier test left in the cache: the first call reuses what it can of it.
    model = request.getfixturevalue("smollm2" if backend == "torch" else "smollm2_mlx_model")
    messages = [{"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": "1 failing test (of 7):\n- tests/test_stats.py::test_is_adult[18-True]"}]
    first = model.generate(messages, TOOLS, Sampling(max_tokens=48))
    first_prompt = model.last_prompt_processed + model.last_prompt_reused
    assert first.finish_reason == "stop", first.text
    second = [*messages, {"role": "assistant", "content": first.text}, {"role": "tool", "content": "2 passed, 1 failed"}]
    model.generate(second, TOOLS, Sampling(max_tokens=1))
    # torch never feeds the reply's last token (end of turn) before the next call; mlx-lm does.
    assert model.last_prompt_reused >= first_prompt + len(first.token_ids) - 1, (
        model.last_prompt_reused, first_prompt, len(first.token_ids))


@pytest.mark.slow
@pytest.mark.parametrize("backend", SMOLLM2_BACKENDS)
def test_a_bounded_episode_on_the_real_model(example, request, backend):
    """2 turns of at most 48 tokens: SmolLM2 drives the harness, every reply a valid call, and
    the episode ends with a named status and a record; the project is untouched."""
    # The module's model: its prompt cache may hold the system prompt and the tools from an
    # earlier test, as it would from an earlier episode (on mlx's CPU build a 777-token prompt
    # takes 100 s to process; the episode's own turns are what this test is about).
    model = request.getfixturevalue("smollm2" if backend == "torch" else "smollm2_mlx_model")
    project = example("calc")
    before = snapshot(project)
    settings = Settings(max_candidates=0, max_pairs=0, episodes=1, max_turns=2, max_new_tokens=48)
    with Workspace(project) as ws, Engine(ws, settings, model=model) as engine:
        report = engine.fix()
    (episode,) = report.episodes
    assert episode.status in set(EpisodeStatus) - {EpisodeStatus.MODEL_ERROR}, episode.error
    assert 1 <= len(episode.turns) <= 2 and episode.malformed == 0, [t.reply for t in episode.turns]
    assert all(t.completion_tokens <= 48 for t in episode.turns)
    record = json.loads(episode.record.read_text())
    assert record["status"] == episode.status and record["model"].startswith(backend)
    assert snapshot(project) == before
