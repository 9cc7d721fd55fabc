"""Benchmark of prompt caching: the share of input tokens a cache-aware client reads
from Anthropic's prompt cache on a long tool-using workload that is summarized.

    .venv/bin/python benchmarks/provider_cache.py [--trajectories 20]

The workload chains the first ``--trajectories`` airline agent trajectories of
``../shared/corpora/tools/taubench_airline_gpt4o.jsonl`` (gpt-4o agent, tool calls and
results) into one conversation (the first system prompt kept, the others left out)
on a Claude model, through a ledger (SQLite file) whose policy summarizes as the
conversation grows (``OfflineSummarizer`` counting with the Claude estimate, layered
mode). Before each assistant
message, the context is rendered as a request (``render_anthropic`` over
``context_entries``), three ways:

- ``cache=True``: breakpoints on the stable prefix (system prompt and summaries) and on
  the newest turn (``render_anthropic``'s own);
- a naive client: one breakpoint on the last block of the last message;
- no breakpoints.

A request reads from the cache the longest prefix that ends at one of the previous
request's breakpoints (where the previous request wrote the cache) and is byte
identical to it (blocks compared as JSON, ``cache_control`` marks aside, each with its
message's role), if it is at least 1,024 tokens (Anthropic's minimum cacheable
prompt for most models); the cache is taken as live between requests (its lifetime is
5 minutes). Tokens are the Claude estimate (``ClaudeCounter``) of each block's JSON;
tool definitions are not sent (the corpus does not carry them). Writes its section of
docs/benchmarks.md (between ``<!-- provider_cache:begin -->`` and
``<!-- provider_cache:end -->``).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sections import write_section

import contextledger as cl
from contextledger.application.formats.anthropic_render import render_anthropic
from contextledger.application.formats.originals import context_entries
from contextledger.infrastructure.counting.estimates import ClaudeCounter

CORPORA = Path(__file__).resolve().parents[1].parent / "shared" / "corpora"
CORPUS = CORPORA / "tools" / "taubench_airline_gpt4o.jsonl"
MODEL = "claude-sonnet-4-5"
MIN_CACHEABLE = 1024
COUNTER = ClaudeCounter(MODEL)

Block = tuple[str, str]  # (role, the block's JSON without cache_control)


def workload(trajectories: int) -> tuple[str, list[dict[str, Any]]]:
    """The first system prompt, and the chained messages without system prompts."""
    system: str | None = None
    messages: list[dict[str, Any]] = []
    with CORPUS.open(encoding="utf-8") as lines:
        for index, line in enumerate(lines):
            if index >= trajectories:
                break
            for message in json.loads(line)["messages"]:
                if message["role"] == "system":
                    system = system or message["content"]
                else:
                    messages.append(message)
    assert system is not None
    return system, messages


def flatten(request: dict[str, Any]) -> tuple[list[Block], list[int]]:
    """The request's blocks in cache order (system, then messages), and the prefix
    lengths that end at a breakpoint."""
    blocks: list[Block] = []
    breakpoints: list[int] = []
    turns = [("system", request["system"])] + [(m["role"], m["content"]) for m in request["messages"]]
    for role, content in turns:
        for block in content if isinstance(content, list) else [{"type": "text", "text": content}]:
            plain = {k: v for k, v in block.items() if k != "cache_control"}
            blocks.append((role, json.dumps(plain, sort_keys=True)))
            if "cache_control" in block:
                breakpoints.append(len(blocks))
    return blocks, breakpoints


def naive(request: dict[str, Any]) -> dict[str, Any]:
    """The request with one breakpoint, on the last block of its last message."""
    request = copy.deepcopy(request)
    last = request["messages"][-1]
    if isinstance(last["content"], str):
        last["content"] = [{"type": "text", "text": last["content"]}]
    last["content"][-1]["cache_control"] = {"type": "ephemeral"}
    return request


def no_breakpoints(request: dict[str, Any]) -> dict[str, Any]:
    """The request without any breakpoint."""
    request = copy.deepcopy(request)
    for turn in [{"content": request["system"]}, *request["messages"]]:
        if isinstance(turn["content"], list):
            for block in turn["content"]:
                block.pop("cache_control", None)
    return request


class Cache:
    """What one client's requests read from the cache, request after request."""

    def __init__(self) -> None:
        self.previous: tuple[list[Block], list[int]] | None = None
        self.tokens: dict[Block, int] = {}
        self.input = 0
        self.read = 0
        self.hits = 0
        self.requests = 0

    def cost(self, block: Block) -> int:
        tokens = self.tokens.get(block)
        if tokens is None:
            tokens = self.tokens[block] = COUNTER.count_text(block[1]) + 3
        return tokens

    def send(self, request: dict[str, Any]) -> None:
        blocks, breakpoints = flatten(request)
        total = sum(self.cost(b) for b in blocks)
        read = 0
        if self.previous is not None:
            before, written = self.previous
            for length in sorted(written, reverse=True):
                if length <= len(blocks) and blocks[:length] == before[:length]:
                    prefix = sum(self.cost(b) for b in blocks[:length])
                    if prefix >= MIN_CACHEABLE:
                        read = prefix
                        break
        self.previous = (blocks, breakpoints)
        self.requests += 1
        self.input += total
        self.read += read
        self.hits += read > 0


def run(trajectories: int) -> tuple[dict[str, Cache], dict[str, int]]:
    system, messages = workload(trajectories)
    clients = {
        "cache=True (system/summary + newest turn)": Cache(),
        "naive: last message only": Cache(),
        "no breakpoints": Cache(),
    }
    policy = cl.ReductionPolicy(trigger_tokens=16000, keep_tokens=6000, summary_mode="layered")
    with (
        tempfile.TemporaryDirectory() as folder,
        cl.Ledger.open(
            f"sqlite:///{folder}/cache.db", summarizer=cl.OfflineSummarizer(token_counter=COUNTER)
        ) as ledger,
    ):
        cid = ledger.start(system, model=MODEL, policy=policy)
        for message in messages:
            if message["role"] == "assistant":
                ledger.wait_idle()
                entries = context_entries(ledger, cid).entries
                ours = render_anthropic(entries, cache=True)
                plain = render_anthropic(entries, cache=False)
                clients["cache=True (system/summary + newest turn)"].send(ours)
                clients["naive: last message only"].send(naive(plain))
                clients["no breakpoints"].send(no_breakpoints(plain))
            ledger.append(cid, message)
        ledger.wait_idle()
        totals = ledger.totals(cid)
        facts = {
            "messages": len(messages),
            "summaries": totals.summaries,
            "full_history_tokens": totals.full_history_tokens,
            "context_tokens": totals.context_tokens,
        }
    return clients, facts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trajectories", type=int, default=20)
    args = parser.parse_args()
    clients, facts = run(args.trajectories)
    load = os.getloadavg()[0]
    lines = [
        "## Prompt caching: what a cache-aware client reads from Anthropic's cache "
        "(benchmarks/provider_cache.py)",
        "",
        f"Written by `benchmarks/provider_cache.py` on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC. Command:",
        "",
        f"    .venv/bin/python benchmarks/provider_cache.py --trajectories {args.trajectories}",
        "",
        f"- machine: {platform.platform()}, {os.cpu_count()} cores, shared: "
        f"load average {load:.1f} at the end of the run",
        f"- workload: the first {args.trajectories} tau-bench airline trajectories chained into one "
        f"conversation of {facts['messages']} messages on `{MODEL}`, policy `trigger_tokens=16000, "
        f'keep_tokens=6000, summary_mode="layered"`, `OfflineSummarizer`: {facts["summaries"]} summaries; '
        f"the whole history is {facts['full_history_tokens']} tokens, "
        f"the final context {facts['context_tokens']}",
        "",
        "One request before each assistant message of the workload. A request reads from the cache "
        "the longest prefix ending at one of the previous request's breakpoints that is byte-identical "
        f"to it (at least {MIN_CACHEABLE} tokens); tokens are the Claude estimate (`ClaudeCounter`, "
        "within 20%) of each block. *Share read* is cache-read input tokens over all input tokens.",
        "",
        "Between summaries, both kinds of breakpoint read everything but the newest turn. A new summary "
        "changes the system part, and with it every later byte: the naive client then reads nothing, while "
        "`cache=True` still reads the system prompt and the earlier summary layers up to its prefix "
        "breakpoint when that prefix is long enough. Without breakpoints nothing is read.",
        "",
        "| breakpoints | requests | input tokens | read from cache | share read | requests with a hit |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, cache in clients.items():
        share = cache.read / cache.input if cache.input else 0.0
        figures = [cache.requests, cache.input, cache.read, f"{share:.1%}", cache.hits]
        lines.append(f"| {name} | " + " | ".join(map(str, figures)) + " |")
    lines.append("")
    print("\n".join(lines))
    write_section("provider_cache", lines)


if __name__ == "__main__":
    main()
