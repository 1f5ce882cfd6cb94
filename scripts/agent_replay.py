"""Run `kbv agent run` against a scripted model: a replay that shows the agent's machinery, not a model's skill.

A loopback OpenAI-compatible server (tests/fake_openai.py) answers each request with the next kernel file given,
wrapped in a fenced block; once they are used up it answers without code. Token figures are estimates
(characters / 4 of the prompt and the reply), since no model counted them. The endpoint's model is recorded as
`scripted-replay`.

    PYTHONPATH=src:tests python3 scripts/agent_replay.py --reply A.py --reply B.py -- \
        --problem src/kbv/suites/builtin/level1/5_ReLU.py --backend cuda --max-iters 2 --out runs/replay-relu
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fake_openai import CHAT, FakeOpenAI, chat_reply, usage

from kbv.cli import main as kbv_main


def main(argv: list[str]) -> int:
    if "--" in argv:
        split = argv.index("--")
        own, rest = argv[:split], argv[split + 1:]
    else:
        own, rest = argv, []
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reply", action="append", default=[], type=Path, help="A kernel file, in answer order.")
    args = parser.parse_args(own)
    replies = [p.read_text() for p in args.reply]

    def respond(request):
        text = f"```python\n{replies.pop(0)}```\n" if replies else "The replay has no more kernels."
        return chat_reply(text, usage_=usage(len(request.prompt_text) // 4, len(text) // 4))

    with FakeOpenAI() as server:
        server.respond(CHAT, respond)
        try:
            kbv_main(args=["agent", "run", *rest, "--base-url", server.url, "--model", "scripted-replay"])
        except SystemExit as exc:  # click's standalone mode always exits
            return exc.code if isinstance(exc.code, int) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
