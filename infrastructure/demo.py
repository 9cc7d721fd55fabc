"""The demo: a long, realistic support conversation played through a ledger.

``synthesize_conversation(seed, messages)`` builds, deterministically, a multi-topic
customer-support session between a user and an assistant that calls tools (account
lookups, invoices, log searches, metrics, DNS checks, knowledge-base searches...),
with tool results of very different sizes. It needs no data files, so the demo runs
from a clean clone.

``run_demo(ledger, ...)`` feeds it through the ledger one message at a time. Each time
the model would be called (after a user message, and after the last result of a
tool-call group) it notes what the prompt costs with contextledger
(``totals().context_tokens``) and what sending the full history would cost. A summary
the policy asks for is let land before the next model call, as a real model call's
latency would allow; so the figures are the same on every run.
``write_chart(result, path)`` draws the two curves as a self-contained HTML page
(inline SVG, no scripts).
"""

from __future__ import annotations

import html
import json
import math
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from uuid import UUID

from contextledger.application.ledger import Ledger
from contextledger.domain.policy import ReductionPolicy

__all__ = [
    "DEMO_POLICY",
    "DEMO_SYSTEM_PROMPT",
    "DemoResult",
    "ModelCall",
    "minimum_summarizer_calls",
    "run_demo",
    "synthesize_conversation",
    "write_chart",
]

DEMO_POLICY = ReductionPolicy(
    trigger_messages=100,
    keep_messages=10,
    keep_tool_results=4,
    max_context_tokens=16_000,
    max_summary_tokens=1200,
    layered_max_tokens=2400,
)

DEMO_SYSTEM_PROMPT = (
    "You are Nimbus, the support assistant of Northwind Cloud, a hosting platform for web "
    "applications, managed PostgreSQL databases and object storage. Be precise and brief. "
    "Use the tools to look things up instead of guessing; quote invoice numbers, deploy ids "
    "and timestamps exactly. Never reveal internal hostnames or other customers' data. When "
    "a problem needs engineering, open a ticket and tell the user its number."
)

Message = dict[str, Any]

# --------------------------------------------------------------------- the script

_FIRST = ["Dana", "Priya", "Marco", "Lena", "Tomas", "Aiko", "Sam", "Ines", "Omar", "Grace"]
_COMPANY = ["Lumen Analytics", "Bluefin Labs", "Kestrel Health", "Orchard Retail", "Paper Crane"]
_SERVICES = ["api-gateway", "checkout", "web-frontend", "billing-worker", "search", "auth"]
_REGIONS = ["eu-west-1", "us-east-2", "ap-south-1"]
_PLANS = ["Starter", "Team", "Business", "Enterprise"]
_DOMAINS = ["app", "www", "api", "status", "docs"]
_LEVELS = ["INFO", "INFO", "INFO", "WARN", "ERROR"]
_KB_KINDS = ["troubleshooting", "how it works", "limits", "best practices", "FAQ"]
_LOG_EVENTS = [
    "GET /v1/orders 200 {ms}ms",
    "POST /v1/checkout 502 {ms}ms upstream=payments",
    "upstream connect error or disconnect/reset before headers, retry {n}/3",
    "pool exhausted: 20/20 connections busy, waited {ms}ms",
    "GET /healthz 200 {ms}ms",
    "slow query ({ms}ms): SELECT * FROM line_items WHERE order_id = $1",
    "worker heartbeat ok, queue depth {n}",
    "TLS handshake failed: certificate has expired (notAfter 2024-03-02)",
    "cache miss for key session:{n}, fetched in {ms}ms",
    "rate limit exceeded for token tk_{n} (600 req/min)",
]


@dataclass
class _World:
    """What the session is about; choices stay consistent within one run."""

    rng: random.Random
    user: str
    company: str
    account: str
    plan: str
    region: str
    domain: str
    tickets: list[str] = field(default_factory=list)
    call_no: int = 0

    def call_id(self) -> str:
        self.call_no += 1
        return f"call_{self.call_no:04d}_{self.rng.randrange(16**6):06x}"


def _json(value: Any) -> str:
    return json.dumps(value, indent=1)


class _Tools:
    """Tool results of realistic shapes and very different sizes."""

    def __init__(self, world: _World) -> None:
        self.w = world

    def lookup_account(self) -> str:
        w = self.w
        return _json(
            {
                "account_id": w.account,
                "company": w.company,
                "plan": w.plan,
                "region": w.region,
                "status": "active",
                "seats": w.rng.randint(5, 80),
                "created": f"20{w.rng.randint(19, 23)}-0{w.rng.randint(1, 9)}-1{w.rng.randint(0, 9)}",
                "owner": f"{w.user.lower()}@{w.company.split()[0].lower()}.example",
            }
        )

    def get_invoice(self, invoice: str) -> str:
        rng = self.w.rng
        items: list[dict[str, Any]] = []
        total = 0.0
        for _ in range(rng.randint(4, 12)):
            kind = rng.choice(["compute", "database", "storage", "egress", "support"])
            qty = rng.randint(1, 900)
            unit = round(rng.uniform(0.01, 3.5), 3)
            amount = round(qty * unit, 2)
            total += amount
            items.append({"item": kind, "description": f"{kind} usage, {rng.choice(_REGIONS)}",
                          "quantity": qty, "unit_price": unit, "amount": amount})
        total = round(total, 2)
        return _json({"invoice": invoice, "currency": "EUR", "status": rng.choice(["open", "paid"]),
                      "period": "2024-05", "lines": items, "total": total})

    def search_logs(self, service: str, lines: int) -> str:
        rng = self.w.rng
        out = []
        for i in range(lines):
            template = rng.choice(_LOG_EVENTS)
            out.append(
                f"2024-06-0{rng.randint(1, 9)}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:"
                f"{rng.randint(0, 59):02d}.{i:03d}Z {rng.choice(_LEVELS):5} {service} "
                f"pod={service}-{rng.randrange(16**5):05x} "
                + template.format(ms=rng.randint(3, 9000), n=rng.randint(1, 99999))
            )
        return "\n".join(out)

    def get_metrics(self, service: str, metric: str) -> str:
        rng = self.w.rng
        base = rng.uniform(50, 400)
        points = [
            {"t": f"2024-06-04T{h:02d}:00Z", "value": round(base * rng.uniform(0.6, 2.4), 1)}
            for h in range(rng.randint(12, 24))
        ]
        return _json({"service": service, "metric": metric, "unit": "ms" if "latency" in metric else "count",
                      "window": "24h", "points": points})

    def search_kb(self, topic: str) -> str:
        rng = self.w.rng
        articles = []
        for n in range(rng.randint(2, 5)):
            articles.append(
                {
                    "id": f"KB-{rng.randint(1000, 9999)}",
                    "title": f"{topic.capitalize()}: {rng.choice(_KB_KINDS)}",
                    "snippet": (
                        f"When {topic} misbehaves, first check the service's recent deploys and the "
                        f"status page. Step {n + 1}: compare the configuration with the defaults in "
                        "the dashboard, then retry with verbose logging enabled."
                    ),
                }
            )
        return _json({"query": topic, "results": articles})

    def check_dns(self, host: str) -> str:
        rng = self.w.rng
        return _json(
            {
                "host": host,
                "records": [
                    {"type": "CNAME", "value": f"{self.w.account}.edge.northwind.example", "ttl": 300},
                    {"type": "TXT", "value": f"nw-verify={rng.randrange(16**12):012x}", "ttl": 3600},
                ],
                "tls": {"issuer": "R3", "expires_in_days": rng.choice([-3, 12, 61, 88])},
                "propagation": f"{rng.randint(60, 100)}%",
            }
        )

    def run_diagnostic(self, service: str) -> str:
        rng = self.w.rng
        checks = ["dns", "tls", "health endpoint", "database pool", "memory", "restarts", "egress"]
        return "\n".join(
            f"[{rng.choice(['PASS', 'PASS', 'PASS', 'WARN', 'FAIL'])}] {service}: {c} "
            f"({rng.randint(1, 900)} ms)"
            for c in checks
        )

    def get_deployment(self, service: str, deploy: str) -> str:
        rng = self.w.rng
        steps = ["checkout", "install", "build", "test", "image push", "migrate", "rollout"]
        return _json(
            {
                "deploy_id": deploy,
                "service": service,
                "commit": f"{rng.randrange(16**10):010x}",
                "status": rng.choice(["failed", "succeeded", "rolled back"]),
                "steps": [
                    {"step": s, "seconds": rng.randint(2, 240), "result": "ok"} for s in steps
                ],
                "log_tail": [f"{s}: done" for s in steps[-3:]],
            }
        )

    def create_ticket(self, summary: str, priority: str) -> str:
        ticket = f"NW-{self.w.rng.randint(10000, 99999)}"
        self.w.tickets.append(ticket)
        return _json({"ticket": ticket, "summary": summary, "priority": priority, "status": "open"})


def _call(world: _World, name: str, **arguments: Any) -> dict[str, Any]:
    return {
        "id": world.call_id(),
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


def _tool_round(
    world: _World, calls: list[tuple[str, dict[str, Any], str]], note: str | None
) -> list[Message]:
    """An assistant tool-call message and one result per call."""
    tool_calls = [_call(world, name, **args) for name, args, _ in calls]
    messages: list[Message] = [{"role": "assistant", "content": note, "tool_calls": tool_calls}]
    for call, (_, _, result) in zip(tool_calls, calls, strict=True):
        messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
    return messages


# An episode is one topic of the session: a few exchanges, each a user message, some
# tool rounds, and the assistant's answer.
_Episode = Callable[[_World, _Tools], Iterator[list[Message]]]


def _billing(w: _World, t: _Tools) -> Iterator[list[Message]]:
    rng = w.rng
    invoice = f"INV-2024-{rng.randint(1000, 9999)}"
    yield [
        {"role": "user", "content": f"Hi, {w.user} from {w.company} here. Our invoice {invoice} is much "
         "higher than last month and I can't tell why. Can you break it down?"},
        *_tool_round(w, [("lookup_account", {"account_id": w.account}, t.lookup_account()),
                         ("get_invoice", {"invoice_id": invoice}, t.get_invoice(invoice))],
                     "Let me pull up your account and that invoice."),
        {"role": "assistant", "content": f"Invoice {invoice} is for May. Most of the increase comes from "
         "egress and database usage in two regions; compute is flat. The egress line alone is about "
         "a third of the total. Would you like me to check what drove the egress?"},
    ]
    yield [
        {"role": "user", "content": "Yes please. We didn't ship anything big in May as far as I know."},
        *_tool_round(w, [("get_metrics", {"service": "web-frontend", "metric": "egress_bytes"},
                          t.get_metrics("web-frontend", "egress_bytes"))], None),
        {"role": "assistant", "content": "Egress from web-frontend doubled from the 14th on, mostly "
         "uncached image responses. A CDN cache rule was disabled that day. Re-enabling it should bring "
         "egress back to April's level."},
    ]
    if rng.random() < 0.6:
        yield [
            {"role": "user", "content": "Can we get a credit for the part caused by the "
             "disabled cache rule?"},
            *_tool_round(w, [("create_ticket", {"summary": f"Billing credit request for {invoice}",
                                                "priority": "normal"},
                              t.create_ticket(f"Billing credit request for {invoice}", "normal"))],
                         "I'll open a ticket with billing."),
            {"role": "assistant", "content": f"I opened ticket {w.tickets[-1]} for the billing team with the "
             "egress figures attached. They usually answer within two business days."},
        ]


def _outage(w: _World, t: _Tools) -> Iterator[list[Message]]:
    rng = w.rng
    service = rng.choice(_SERVICES)
    yield [
        {"role": "user", "content": f"Our {service} service is returning 502s since about an hour ago. "
         "Customers are complaining. What is going on?"},
        *_tool_round(w, [("search_logs", {"service": service, "query": "status>=500", "since": "1h"},
                          t.search_logs(service, rng.randint(25, 70))),
                         ("get_metrics", {"service": service, "metric": "p95_latency"},
                          t.get_metrics(service, "p95_latency"))],
                     "Checking the logs and latency for that service."),
        {"role": "assistant", "content": f"The {service} logs show the database pool exhausted (20 of 20 "
         "connections busy) and upstream resets right after. p95 latency went from about 180 ms to over "
         "4 s at the same time. It looks like slow queries are holding connections."},
    ]
    yield [
        {"role": "user", "content": "Which queries? We didn't change anything in the database."},
        *_tool_round(w, [("search_logs", {"service": service, "query": "slow query", "since": "6h"},
                          t.search_logs(service, rng.randint(15, 40)))], None),
        {"role": "assistant", "content": "The slow one is the SELECT on line_items by order_id, taking "
         "several seconds. It has no index on order_id; the table grew past the point where a sequential "
         "scan is cheap. Adding an index on line_items(order_id) should fix it."},
    ]
    yield [
        {"role": "user", "content": "We added the index. Can you check whether it's better now?"},
        *_tool_round(w, [("run_diagnostic", {"service": service}, t.run_diagnostic(service))], None),
        {"role": "assistant", "content": f"The diagnostic for {service} passes the health and database "
         "pool checks now, and the 502s stopped a few minutes ago. I'll leave the rest of the checks "
         "to you; the warnings are unrelated."},
    ]


def _dns(w: _World, t: _Tools) -> Iterator[list[Message]]:
    host = f"{w.rng.choice(_DOMAINS)}.{w.domain}"
    yield [
        {"role": "user", "content": f"Browsers say the certificate for {host} is invalid. "
         "Did something expire?"},
        *_tool_round(w, [("check_dns", {"host": host}, t.check_dns(host))], None),
        {"role": "assistant", "content": f"{host} points at your edge endpoint correctly. The certificate "
         "is managed by us and renews 30 days before expiry; if it shows as expired, the renewal "
         "validation failed, usually because of a CAA record or a stale TXT record."},
    ]
    yield [
        {"role": "user", "content": "We do have a CAA record. What should it say?"},
        *_tool_round(w, [("search_kb", {"query": "CAA records and certificate renewal"},
                          t.search_kb("certificate renewal"))], None),
        {"role": "assistant", "content": "Add a CAA record allowing letsencrypt.org for the domain (or "
         "remove the CAA record entirely). Renewal retries every hour, so the certificate should be "
         "valid within an hour of the change."},
    ]


def _deploy(w: _World, t: _Tools) -> Iterator[list[Message]]:
    rng = w.rng
    service = rng.choice(_SERVICES)
    deploy = f"dep_{rng.randrange(16**8):08x}"
    yield [
        {"role": "user", "content": f"Deploy {deploy} of {service} failed and I don't understand the error."},
        *_tool_round(w, [("get_deployment", {"service": service, "deploy_id": deploy},
                          t.get_deployment(service, deploy))], None),
        {"role": "assistant", "content": f"Deploy {deploy} got through build and tests; it failed in the "
         "migrate step. The migration timed out waiting for a lock on the orders table, most likely "
         "because a long transaction was running at the time."},
    ]
    yield [
        {"role": "user", "content": "Can I just retry it?"},
        {"role": "assistant", "content": "Yes. Retrying is safe: the migration ran in a transaction and "
         "was rolled back. If it fails again, set a lock_timeout in the migration and run it outside "
         "peak hours."},
    ]


def _limits(w: _World, t: _Tools) -> Iterator[list[Message]]:
    token = f"tk_{w.rng.randint(1000, 99999)}"
    yield [
        {"role": "user", "content": f"Our integration keeps getting 429s with API token {token}. "
         "What are the limits on our plan?"},
        *_tool_round(w, [("lookup_account", {"account_id": w.account}, t.lookup_account()),
                         ("search_kb", {"query": "API rate limits"}, t.search_kb("API rate limits")),
                         ("search_logs", {"service": "api-gateway", "query": token, "since": "24h"},
                          t.search_logs("api-gateway", w.rng.randint(8, 20)))],
                     "Looking at your plan, the documented limits and the gateway logs."),
        {"role": "assistant", "content": f"On the {w.plan} plan each token may send 600 requests per "
         f"minute. {token} peaks at about 900 per minute at the top of each hour, when your sync job "
         "starts. Spreading the job over a few minutes, or using two tokens, keeps you under the limit."},
    ]


def _smalltalk(w: _World, t: _Tools) -> Iterator[list[Message]]:
    rng = w.rng
    questions = [
        ("Do you support PostgreSQL 16 yet?", "Yes, PostgreSQL 16 is available for new managed "
         "databases in every region; existing ones can be upgraded from the dashboard."),
        ("Where can I download the audit log?", "Under Settings, Security, Audit log: it exports the "
         "last 90 days as CSV; older entries are available on request."),
        ("Is there a way to get alerts in Slack?", "Yes: Settings, Integrations, Slack. Alerts for "
         "deploys, incidents and billing thresholds can each go to their own channel."),
        ("How do I add a teammate without giving them billing access?", "Invite them with the "
         "Developer role; only Owners and Billing admins see invoices and payment methods."),
        ("Thanks, that helped.", "Glad it did. Anything else I can look at?"),
    ]
    question, answer = rng.choice(questions)
    yield [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]


_EPISODES: list[_Episode] = [_billing, _outage, _dns, _deploy, _limits, _smalltalk, _smalltalk]


def synthesize_conversation(*, seed: int = 7, messages: int = 600) -> list[Message]:
    """A deterministic support session of at least ``messages`` messages (OpenAI format),
    ending on an assistant answer."""
    rng = random.Random(seed)
    world = _World(
        rng=rng,
        user=rng.choice(_FIRST),
        company=rng.choice(_COMPANY),
        account=f"acc_{rng.randrange(16**8):08x}",
        plan=rng.choice(_PLANS),
        region=rng.choice(_REGIONS),
        domain=f"{rng.choice(['lumen', 'bluefin', 'kestrel', 'orchard', 'papercrane'])}.example",
    )
    tools = _Tools(world)
    out: list[Message] = []
    while len(out) < messages:
        episode = rng.choice(_EPISODES)
        for exchange in episode(world, tools):
            out.extend(exchange)
            if len(out) >= messages:
                break
    return out


# ----------------------------------------------------------------------- the run


@dataclass(frozen=True)
class ModelCall:
    """One point where the model would be called."""

    index: int
    #: Position of the last message the model would see.
    position: int
    sent_tokens: int
    full_history_tokens: int
    summaries: int


@dataclass(frozen=True)
class DemoResult:
    """What ``run_demo`` measured."""

    conversation_id: UUID
    messages: int
    tool_messages: int
    calls: tuple[ModelCall, ...]
    appended_tokens: int
    summaries: int
    summarizer_calls: int
    summarizer_failures: int
    summarizer_input_tokens: int
    summarizer_output_tokens: int
    trigger_messages: int
    keep_messages: int
    final_context_tokens: int
    verified: bool
    verify_problem: str | None
    seconds: float

    @property
    def sent_tokens(self) -> int:
        return sum(c.sent_tokens for c in self.calls)

    @property
    def full_history_sent_tokens(self) -> int:
        return sum(c.full_history_tokens for c in self.calls)

    @property
    def savings(self) -> float:
        full = self.full_history_sent_tokens
        return 0.0 if full == 0 else 1.0 - self.sent_tokens / full

    @property
    def minimum_summarizer_calls(self) -> int:
        return minimum_summarizer_calls(self.messages, self.trigger_messages, self.keep_messages)


def minimum_summarizer_calls(messages: int, trigger: int, keep: int) -> int:
    """The fewest summaries a message trigger allows: ceil((N - trigger) / (trigger - keep))."""
    if messages <= trigger:
        return 0
    return math.ceil((messages - trigger) / (trigger - keep))


def run_demo(
    ledger: Ledger,
    *,
    seed: int = 7,
    messages: int = 600,
    policy: ReductionPolicy = DEMO_POLICY,
    model: str = "gpt-4o-mini",
    progress: Callable[[int, int], None] | None = None,
    idle_timeout: float = 120.0,
) -> DemoResult:
    """Play the synthesized conversation through ``ledger`` and measure it."""
    script = synthesize_conversation(seed=seed, messages=messages)
    began = time.perf_counter()
    cid = ledger.start(DEMO_SYSTEM_PROMPT, model=model, policy=policy)
    calls: list[ModelCall] = []
    open_calls = 0
    for index, message in enumerate(script):
        position = ledger.append(cid, message)
        if message.get("tool_calls"):
            open_calls = len(message["tool_calls"])
        elif message["role"] == "tool":
            open_calls -= 1
        model_called = message["role"] == "user" or (message["role"] == "tool" and open_calls == 0)
        if ledger.pending_summary(cid) is not None:
            # A model call takes seconds: the summary lands before the next one.
            ledger.wait_idle(idle_timeout)
        if model_called:
            totals = ledger.totals(cid)
            calls.append(
                ModelCall(
                    index=len(calls),
                    position=position,
                    sent_tokens=totals.context_tokens,
                    full_history_tokens=totals.full_history_tokens,
                    summaries=totals.summaries,
                )
            )
        if progress is not None:
            progress(index + 1, len(script))
    ledger.wait_idle(idle_timeout)
    totals = ledger.totals(cid)
    report = ledger.verify(cid)
    first = report.problems[0] if report.problems else None
    return DemoResult(
        conversation_id=cid,
        messages=totals.messages,
        tool_messages=sum(1 for m in script if m["role"] == "tool"),
        calls=tuple(calls),
        appended_tokens=totals.appended_tokens,
        summaries=totals.summaries,
        summarizer_calls=totals.summarizer_calls,
        summarizer_failures=totals.summarizer_failures,
        summarizer_input_tokens=totals.summarizer_input_tokens,
        summarizer_output_tokens=totals.summarizer_output_tokens,
        trigger_messages=policy.trigger_messages or 0,
        keep_messages=policy.keep_messages or 0,
        final_context_tokens=totals.context_tokens,
        verified=report.ok,
        verify_problem=None if first is None else f"version {first.version}: {first.problem}",
        seconds=time.perf_counter() - began,
    )


# ----------------------------------------------------------------------- the chart

_W, _H = 960, 460
_LEFT, _RIGHT, _TOP, _BOTTOM = 80, 24, 56, 64


def write_chart(result: DemoResult, path: Path, *, cap: int | None = None) -> Path:
    """Write tokens per model call (full history vs sent) as a self-contained HTML page."""
    calls = result.calls
    n = max(1, len(calls) - 1)
    top = max([c.full_history_tokens for c in calls] + [cap or 0, 1])
    step = _nice_step(top)
    y_max = step * math.ceil(top / step)
    plot_w, plot_h = _W - _LEFT - _RIGHT, _H - _TOP - _BOTTOM

    def x(i: int) -> float:
        return _LEFT + plot_w * i / n

    def y(v: float) -> float:
        return _TOP + plot_h * (1 - v / y_max)

    def line(values: list[int]) -> str:
        return " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(values))

    parts: list[str] = []
    for k in range(0, int(y_max / step) + 1):
        v = k * step
        parts.append(f'<line x1="{_LEFT}" x2="{_W - _RIGHT}" y1="{y(v):.1f}" y2="{y(v):.1f}" class="grid"/>')
        parts.append(f'<text x="{_LEFT - 8}" y="{y(v) + 4:.1f}" text-anchor="end">{v:,}</text>')
    x_step = _nice_step(n, ticks=10)
    for i in range(0, n + 1, x_step):
        parts.append(f'<text x="{x(i):.1f}" y="{_H - _BOTTOM + 18}" text-anchor="middle">{i}</text>')
    previous = 0
    for c in calls:
        if c.summaries > previous:
            parts.append(
                f'<line x1="{x(c.index):.1f}" x2="{x(c.index):.1f}" y1="{_TOP}" y2="{_H - _BOTTOM}" '
                f'class="summary"><title>summary {c.summaries} landed before call {c.index} '
                f"(message {c.position})</title></line>"
            )
            previous = c.summaries
    if cap is not None:
        parts.append(
            f'<line x1="{_LEFT}" x2="{_W - _RIGHT}" y1="{y(cap):.1f}" y2="{y(cap):.1f}" class="cap"/>'
        )
        parts.append(f'<text x="{_W - _RIGHT}" y="{y(cap) - 6:.1f}" text-anchor="end" class="caplabel">'
                     f"max_context_tokens {cap:,}</text>")
    parts.append(f'<polyline points="{line([c.full_history_tokens for c in calls])}" class="full"/>')
    parts.append(f'<polyline points="{line([c.sent_tokens for c in calls])}" class="sent"/>')
    parts.append(f'<line x1="{_LEFT}" x2="{_LEFT}" y1="{_TOP}" y2="{_H - _BOTTOM}" class="axis"/>')
    parts.append(
        f'<line x1="{_LEFT}" x2="{_W - _RIGHT}" y1="{_H - _BOTTOM}" y2="{_H - _BOTTOM}" class="axis"/>'
    )
    parts.append(f'<text x="{_LEFT + plot_w / 2}" y="{_H - 16}" text-anchor="middle">model call</text>')
    parts.append(f'<text x="18" y="{_TOP + plot_h / 2}" text-anchor="middle" '
                 f'transform="rotate(-90 18 {_TOP + plot_h / 2})">prompt tokens</text>')
    legend = [("full", "full history (every message, every call)"),
              ("sent", "sent with contextledger (context())"),
              ("summary", "a summary landed")]
    for k, (cls, label) in enumerate(legend):
        lx = _LEFT + 10 + k * 290
        parts.append(f'<line x1="{lx}" x2="{lx + 28}" y1="30" y2="30" class="{cls}"/>')
        parts.append(f'<text x="{lx + 36}" y="34">{html.escape(label)}</text>')
    svg = (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {_W} {_H}" width="{_W}" height="{_H}" '
        f'role="img" aria-label="prompt tokens per model call">{"".join(parts)}</svg>'
    )
    stats = [
        ("messages", f"{result.messages:,} ({result.tool_messages:,} tool results)"),
        ("model calls", f"{len(calls):,}"),
        ("summaries", f"{result.summaries} (summarizer calls {result.summarizer_calls}, "
                      f"minimum {result.minimum_summarizer_calls})"),
        ("tokens appended", f"{result.appended_tokens:,}"),
        ("tokens sent, full history", f"{result.full_history_sent_tokens:,}"),
        ("tokens sent, contextledger", f"{result.sent_tokens:,}"),
        ("savings", f"{result.savings:.1%}"),
        ("verify", "OK" if result.verified else f"FAILED ({result.verify_problem})"),
    ]
    rows = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in stats)
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>contextledger demo: tokens per model call</title>
<style>
body {{ font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #222; }}
svg text {{ font: 12px system-ui, sans-serif; fill: #444; }}
.grid {{ stroke: #eee; }} .axis {{ stroke: #888; }}
.full {{ fill: none; stroke: #c0392b; stroke-width: 2; }}
.sent {{ fill: none; stroke: #2471a3; stroke-width: 2; }}
.summary {{ stroke: #27ae60; stroke-dasharray: 4 3; stroke-width: 1.5; }}
.cap {{ stroke: #999; stroke-dasharray: 8 4; }} .caplabel {{ fill: #777; }}
table {{ border-collapse: collapse; margin-top: 16px; }}
th, td {{ text-align: left; padding: 2px 12px 2px 0; }} th {{ font-weight: 600; }}
</style></head><body>
<h1>contextledger demo</h1>
<p>Conversation <code>{result.conversation_id}</code>: prompt tokens each time the model would be
called, sending the full history vs sending <code>context()</code>.</p>
{svg}
<table>{rows}</table>
</body></html>
"""
    path.write_text(page, encoding="utf-8")
    return path


def _nice_step(span: float, *, ticks: int = 6) -> int:
    raw = max(1.0, span / ticks)
    magnitude = 10 ** math.floor(math.log10(raw))
    for factor in (1, 2, 2.5, 5, 10):
        if factor * magnitude >= raw:
            return max(1, int(factor * magnitude))
    return int(10 * magnitude)
