"""The language server with a real pretrained model (SmolLM2-135M-Instruct) and the search off:
the model's episode runs in the server, and its outcome reaches the client (the reply to
``frognano.fix``, the status bar, the progress report's end)."""

from __future__ import annotations

import pytest

from frognano.repair.agent import EpisodeStatus

from .lsp import run_command, serve, uri, wait_for, wait_state
from .test_server import failing_calc

pytestmark = [pytest.mark.asyncio, pytest.mark.real_model, pytest.mark.slow]

ENDS = {str(s) for s in EpisodeStatus} - {"model_error", "cancelled"}


async def test_a_real_model_episode_reaches_the_client(smollm2_torch, example):
    root = example("calc")
    # maxCandidates 0: the search cannot fix anything, so the model's one short episode decides.
    options = {"debounceMs": 0, "model": f"torch:{smollm2_torch}", "maxCandidates": 0, "maxPairs": 0,
               "episodes": 1, "maxTurns": 2, "maxNewTokens": 48}
    async with serve(root, options) as client:
        await failing_calc(client, root)
        n = len(client.statuses)
        reply = await run_command(client, "frognano.fix", uri(root / "calc/stats.py"))
        assert reply["status"] in ("fixed", "unfixed"), reply
        await wait_state(client, "fixed", "failing", after=n)
        final = client.statuses[-1]  # sent before the reply: the job's last word
        assert "fixing" in [s["state"] for s in client.statuses[n:]]
        if reply["status"] == "unfixed":
            # The message names the episode and how it ended, in the reply and the status bar.
            ended = reply["message"].rsplit("1 model episode ended ", 1)
            assert len(ended) == 2 and ended[1] in ENDS, reply
            assert final["state"] == "failing" and final["message"] == reply["message"]
            await wait_for(lambda: any(reply["message"] in m.message for m in client.messages),
                           what="the unfixed fix shown to the user")
        else:  # the model's own edit, verified
            assert final["state"] == "fixed" and reply["title"] == final["message"]
