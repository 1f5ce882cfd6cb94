"""Code extraction from a model's response: reasoning blocks stripped, then the first (KernelBench's rule) or the
last fenced code block. A response cut off by the token limit is `truncated`, one without a code block `no_code`:
both are recorded failures, never a silently missing file."""
from __future__ import annotations

import re
from dataclasses import dataclass

EXTRACT_MODES = ("first", "last")

_THINK = re.compile(r"<(think|thinking|reasoning)>.*?</\1>", re.DOTALL | re.IGNORECASE)
_THINK_OPEN = re.compile(r"<(think|thinking|reasoning)>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</(think|thinking|reasoning)>", re.IGNORECASE)
_FENCE_OPEN = re.compile(r"^[ \t]{0,3}(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`\n]*)$")


@dataclass(frozen=True)
class Extraction:
    status: str          # ok | no_code | truncated
    code: str | None     # the code as written to the candidate file (ends with a newline), when status is ok
    language: str | None  # the fence's info string ("python", "cpp", ...), "" when none
    blocks: int          # fenced blocks found after stripping reasoning


def strip_reasoning(text: str) -> str:
    """Remove ``<think>…</think>`` blocks (and ``<thinking>``, ``<reasoning>``). An unclosed opening tag hides
    the rest of the response; a closing tag without an opening one (the template opened it) hides what precedes."""
    text = _THINK.sub("", text)
    opened = _THINK_OPEN.search(text)
    if opened:
        text = text[:opened.start()]
    closes = list(_THINK_CLOSE.finditer(text))
    if closes:
        text = text[closes[-1].end():]
    return text


def code_blocks(text: str) -> list[tuple[str, str, bool]]:
    """Fenced blocks as (info string, body, closed), in order. A fence opens with ``` or ~~~ (three or more) and
    closes with a line of the same character, at least as long, alone on its line; an unclosed block runs to the
    end."""
    lines = text.split("\n")
    blocks: list[tuple[str, str, bool]] = []
    i = 0
    while i < len(lines):
        m = _FENCE_OPEN.match(lines[i])
        if not m:
            i += 1
            continue
        fence, info = m.group("fence"), m.group("info").strip()
        close = re.compile(r"^[ \t]{0,3}" + re.escape(fence[0]) + "{" + str(len(fence)) + r",}[ \t]*$")
        body: list[str] = []
        i += 1
        closed = False
        while i < len(lines):
            if close.match(lines[i]):
                closed = True
                i += 1
                break
            body.append(lines[i])
            i += 1
        blocks.append((info.split()[0] if info else "", "\n".join(body), closed))
    return blocks


def extract(text: str, finish_reason: str | None, mode: str = "first") -> Extraction:
    """The candidate code of one response. `finish_reason == "length"` (cut off by the token limit) is
    `truncated` whatever was written; no fenced block (or only an unclosed one) is `no_code`."""
    if mode not in EXTRACT_MODES:
        raise ValueError(f"unknown extraction mode {mode!r}")
    text = (text or "").replace("\r\n", "\n")  # CRLF answers extract like LF ones
    blocks = [b for b in code_blocks(strip_reasoning(text)) if b[1].strip()]
    if finish_reason == "length":
        return Extraction("truncated", None, None, len(blocks))
    closed = [b for b in blocks if b[2]]
    if not closed:
        return Extraction("no_code", None, None, len(blocks))
    info, body, _ = closed[0] if mode == "first" else closed[-1]
    code = body.strip("\n")
    return Extraction("ok", code.rstrip() + "\n", info, len(blocks))
