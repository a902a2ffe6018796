"""Naming an OpenAI-compatible endpoint and the model it serves.

The SPEC after ``openai:`` (``MODEL@BASE_URL#options``) taken apart (``split_spec``,
``spec_options``, ``check_url``), and the model found among those ``GET /models`` lists
(``match_model``, ``window_of``).  Apart from ``http.py``, which holds the model itself: its
requests, retries and replies.
"""

from __future__ import annotations

import re
import urllib.parse
from typing import Any

from .base import ModelError

DEFAULT_BASE_URL = "http://127.0.0.1:8080/v1"


def split_spec(rest: str) -> tuple[str, str]:
    """``"MODEL@URL"`` -> ``(MODEL, URL)``; ``"MODEL"`` -> ``(MODEL, DEFAULT_BASE_URL)``.

    URLs may contain ``@`` (``http://user@host``), so the split is at the first ``@`` that starts
    an ``http(s)://`` URL; failing that, at the last ``@`` (``model@localhost:11434/v1``).
    """
    match = re.match(r"^(.*?)@(https?://.*)$", rest, re.S)
    if match:
        model, url = match.groups()
    elif "@" in rest:
        model, _, url = rest.rpartition("@")
        if "://" not in url:
            url = "http://" + url  # "model@localhost:11434/v1"
    else:
        model, url = rest, DEFAULT_BASE_URL
    model, url = model.strip(), url.strip().rstrip("/")
    if not model:
        raise ModelError(f"openai:{rest}: no model name; expected openai:MODEL@BASE_URL")
    check_url(url, f"openai:{rest}: ")
    return model, url


_SPEC_OPTIONS = {"context": "the context window in tokens", "tokenizer": "a tokenizer folder or GGUF file",
                 "tools": "server (send tools= to the server's template) or prompt (list them in the system prompt)"}


def spec_options(fragment: str, spec: str) -> dict[str, Any]:
    """``"context=2048,tokenizer=PATH"`` (a spec's part after ``#``) as keyword options."""
    options: dict[str, Any] = {}
    for item in filter(None, (part.strip() for part in fragment.split(","))):
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if key not in _SPEC_OPTIONS or not sep or not value:
            known = ", ".join(f"{k}= ({v})" for k, v in _SPEC_OPTIONS.items())
            raise ModelError(f"{spec}: {item!r} is not an option (known: {known})")
        if key == "tools" and value not in ("server", "prompt"):
            raise ModelError(f"{spec}: tools must be server or prompt, got {value!r}")
        if key == "context":
            try:
                options[key] = int(value)
            except ValueError:
                raise ModelError(f"{spec}: context must be a whole number of tokens, got {value!r}") from None
        else:
            options[key] = value
    return options


def check_url(url: str, context: str = "") -> urllib.parse.SplitResult:
    """``url`` split, or a ModelError (prefixed by ``context``) when it is no http(s) URL."""
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ModelError(f"{context}{url!r} is not an http(s) URL; expected openai:MODEL@BASE_URL")
    try:
        parsed.port  # noqa: B018 - raises on a malformed port
    except ValueError:
        raise ModelError(f"{context}{url!r} has a malformed port") from None
    return parsed


def match_model(served: list[str], model: str) -> str | None:
    """The id among ``served`` that ``model`` names, or None.

    Exactly (Ollama lists ``name:latest`` for ``name``; paths may differ by a trailing slash),
    else by file name, for servers that list a model by the path they were started with
    (llama-cpp-python, mlx_lm.server): ``x.Q4_1.gguf``, its stem ``x.Q4_1`` or another spelling
    of the path name the listed ``/models/x.Q4_1.gguf``.  Several files of that name: none is
    guessed (ModelError).
    """
    wanted = {model, model.rstrip("/"), f"{model}:latest"}
    for s in served:
        if s in wanted or s.rstrip("/") in wanted:
            return s
    key = _file_key(model)
    hits = [s for s in served if _file_key(s) == key]
    if len(hits) > 1:
        raise ModelError(f"model {model} names several served models ({', '.join(hits)}); give the whole id")
    return hits[0] if hits else None


def _file_key(name: str) -> str:
    base = name.replace("\\", "/").rstrip("/").rpartition("/")[2]
    return (base[: -len(".gguf")] if base.lower().endswith(".gguf") else base).casefold()


def not_served(model: str, base_url: str, served: list[str]) -> str:
    shown = ", ".join(served[:10]) + (", ..." if len(served) > 10 else "")
    message = f"model {model} is not served by {base_url} (it serves: {shown})"
    if any(".gguf" in s.lower() for s in served):  # llama.cpp names a model by its file unless told otherwise
        message += (f"; name it by its file name, or start llama-cpp-python's server with --model_alias {model}"
                    f" (llama-server: --alias {model})")
    return message


def window_of(entry: dict[str, Any]) -> int | None:
    """The context window a ``/models`` entry states: vLLM's ``max_model_len``, others' names for it.
    llama-server's ``meta.n_ctx_train`` is the training length, not the server's window: not read."""
    meta = entry.get("meta") if isinstance(entry.get("meta"), dict) else {}
    for value in (entry.get("max_model_len"), entry.get("context_length"), entry.get("context_window"),
                  entry.get("n_ctx"), meta.get("n_ctx")):
        if as_tokens(value):
            return as_tokens(value)
    return None


def as_tokens(value: Any) -> int | None:
    """``value`` when it is a count of tokens (a positive int, not a bool), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
