"""The demo's script: a long, realistic support conversation, synthesized.

``synthesize_conversation(seed, messages)`` builds, deterministically, a multi-topic
customer-support session between a user and an assistant that calls tools (account
lookups, invoices, log searches, metrics, DNS checks, knowledge-base searches...),
with tool results of very different sizes. It needs no data files, so the demo runs
from a clean clone.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from contextledger.domain.values.policy import ReductionPolicy

__all__ = ["DEMO_POLICY", "DEMO_SYSTEM_PROMPT", "synthesize_conversation"]

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
