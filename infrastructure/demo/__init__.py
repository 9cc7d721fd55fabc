"""The demo: a long, realistic support conversation played through a ledger.

``synthesize_conversation`` (``scenario``) writes the script, ``run_demo`` (``run``)
plays and measures it, ``write_chart`` (``chart``) draws the savings. The
``contextledger demo`` command (``contextledger.infrastructure.cli.commands.demo``) puts them
together with a report.

May import: readmodels, persistence, keys, summarizers, counting, the layer's loose
modules, the application layer and the domain.
"""

from contextledger.infrastructure.demo.chart import write_chart
from contextledger.infrastructure.demo.run import (
    DEMO_SUBJECT,
    DemoResult,
    ModelCall,
    minimum_summarizer_calls,
    run_demo,
)
from contextledger.infrastructure.demo.scenario import (
    DEMO_POLICY,
    DEMO_SYSTEM_PROMPT,
    synthesize_conversation,
)

__all__ = [
    "DEMO_POLICY",
    "DEMO_SUBJECT",
    "DEMO_SYSTEM_PROMPT",
    "DemoResult",
    "ModelCall",
    "minimum_summarizer_calls",
    "run_demo",
    "synthesize_conversation",
    "write_chart",
]
