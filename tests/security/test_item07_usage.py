"""#28.7 attacked again: an answer whose usage is partly missing.

The fix estimates an answer that reports no usage at all. A provider (or a proxy)
may report only some counts — Ollama leaves out ``prompt_eval_count`` for a cached
prompt, a stream may lose its final usage chunk, a hostile endpoint says
``total_tokens: 1`` — and a 4,000-character answer would then count a token or
two, so ``--max-tokens`` never triggers. A real ``lich`` against the scripted
model on loopback: each missing count is estimated (and said to be), and the
budget stops the run.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from cli.conftest import run_lich, scripted, work, write_config

from lich.testing import Reply
from lich.types import ToolCall, Usage

__all__ = ["scripted", "work"]

# Only total_tokens; no completion count; no prompt count (the answer is long).
PARTIAL = [Usage(0, 0, 1), Usage(5, 0, 5), Usage(0, 7, 7)]


@pytest.mark.parametrize("usage", PARTIAL, ids=repr)
@pytest.mark.parametrize("stream", [True, False])
def test_a_partly_reported_usage_is_estimated_and_the_budget_holds(
    work: Path, scripted: Any, usage: Usage, stream: bool
) -> None:
    calls = [Reply(tool_calls=(ToolCall(f"c{n}", "list_dir", {"path": "."}),),
                   text="y" * 4000, usage=usage) for n in range(5)]
    server = scripted([*calls, Reply("z" * 4000, usage=usage)])
    write_config(work, server.base_url, extra=f"stream = {'true' if stream else 'false'}")
    proc = run_lich("--max-tokens", "2000", "list it", cwd=work)
    # The first answer alone is over 1,000 tokens by chars / 4: the budget stops the
    # run before all six answers are asked for.
    assert len(server.requests) < 6, proc.stderr
    assert re.search(r"estimated", proc.stderr), proc.stderr
