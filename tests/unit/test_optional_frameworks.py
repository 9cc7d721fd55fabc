"""Importing contextledger never imports an agent framework (they are optional extras)."""

from __future__ import annotations

import subprocess
import sys


def test_importing_the_package_imports_neither_framework() -> None:
    code = (
        "import sys, contextledger as cl; cl.Ledger; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('agents', 'langchain_core', 'langchain_openai', 'contextledger.integrations')))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
    assert "integrations" not in result.stdout
