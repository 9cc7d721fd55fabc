"""Code that hands ``ledger.context(cid)`` to the openai SDK type-checks under
``mypy --strict``, against the installed package (the editable install's static .pth
is what lets mypy find it), for the Ledger, the AsyncLedger and the quickstart."""

from __future__ import annotations

from tests.support.typecheck import files, lines_about, summary

# The snippets (tests/support/typecheck.py) are checked in the suite's one mypy run,
# against the installed package: the editable install's static .pth lets mypy find it.


def test_sending_the_context_to_the_sdk_type_checks_strictly(strict_mypy_output: str) -> None:
    summary(strict_mypy_output)  # mypy finished its run
    assert lines_about(strict_mypy_output, "sdk_service.py") == [], strict_mypy_output


def test_the_context_is_typed_not_any(strict_mypy_output: str) -> None:
    errors = lines_about(strict_mypy_output, "sdk_wrong.py")
    assert len(errors) == 1 and "ChatCompletionUserMessageParam" in errors[0], strict_mypy_output


def test_the_quickstart_sdk_example_type_checks_strictly(strict_mypy_output: str) -> None:
    assert "sdk_quickstart.py" in files(), "the quickstart needs contextledger.testing"
    summary(strict_mypy_output)  # mypy finished its run
    assert lines_about(strict_mypy_output, "sdk_quickstart.py") == [], strict_mypy_output
