"""The events are folded by the aggregate without importing it: the aggregate's module
hands its fold over when it is loaded, and an event folded before that is refused with
a ``UsageError`` that says where the fold lives. (That the events never import the
aggregate, and that the domain has no import circle and no module over 500 lines, is
checked with the whole package in ``test_structure.py``.)"""

from __future__ import annotations

import subprocess
import sys


def test_the_events_fold_into_the_aggregate_once_its_module_is_loaded() -> None:
    code = (
        "from datetime import UTC, datetime\n"
        "from uuid import uuid4\n"
        "from contextledger.domain.values.errors import UsageError\n"
        "from contextledger.domain.events import Started\n"
        "from contextledger.domain.values.policy import ReductionPolicy\n"
        "import sys\n"
        "event = Started(originator_id=uuid4(), originator_version=1, timestamp=datetime.now(UTC),\n"
        "                system_prompt=None, system_tokens=0, model='m', policy=ReductionPolicy(),\n"
        "                digest='d')\n"
        "assert 'contextledger.domain.conversation' not in sys.modules\n"
        "try:\n"
        "    event.mutate(None)\n"
        "except UsageError as error:\n"
        "    print('refused:', error)\n"
        "from contextledger.domain.conversation import Conversation\n"
        "conversation = event.mutate(None)\n"
        "assert type(conversation) is Conversation and conversation.version == 1, conversation\n"
        "print('folded')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("refused: conversation events are folded by contextledger.domain.conversation")
    assert lines[1:] == ["folded"]
