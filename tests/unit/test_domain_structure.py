"""The events are folded by the aggregate without importing it: the aggregate's module
hands its fold over when it is loaded, and an event folded before that is refused with
a ``UsageError`` that says where the fold lives; a process that loads the events loads
the domain's values with them and none of the rooms above (the aggregate's
``folding``, its ``commands``). (That no import of the domain goes up its order of
rooms, that the domain has no import circle and no module over 500 lines, is checked
with the whole package in ``test_structure.py``.)"""

from __future__ import annotations

import json
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


def test_the_events_load_the_values_and_no_room_above_them() -> None:
    code = (
        "import json, sys\n"
        "import contextledger.domain.events\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('contextledger.domain'))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    beside = {"contextledger.domain", "contextledger.domain.events", "contextledger.domain.moved"}
    others = [
        name for name in loaded if name not in beside and not name.startswith("contextledger.domain.values")
    ]
    assert others == [], "the events load only the values below them"
    assert "contextledger.domain.values.messages" in loaded  # the events are made of messages
