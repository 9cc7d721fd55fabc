"""One password masker for Settings' repr, URL errors and logs: user-info passwords
(also those holding ``@``) and secret query parameters become ``***``."""

from __future__ import annotations

import pytest

from contextledger.application import Settings
from contextledger.application.shared.settings import masked_url
from contextledger.domain import ConfigurationError
from contextledger.infrastructure.persistence.database import Database, mask_url

SECRET = "pa55-w0rd"


@pytest.mark.parametrize(("url", "shown"), [
    (f"postgresql://ada:{SECRET}@db:5432/test?schema=s", "postgresql://ada:***@db:5432/test?schema=s"),
    (f"postgresql://ada:{SECRET}@x@db/test", "postgresql://ada:***@db/test"),
    (f"postgresql://db/test?password={SECRET}&schema=s", "postgresql://db/test?password=***&schema=s"),
    (f"postgresql://db/test?schema=s&sslpassword={SECRET}", "postgresql://db/test?schema=s&sslpassword=***"),
    ("postgresql://ada@db/test", "postgresql://ada@db/test"),
    ("sqlite:///data/a@b.db", "sqlite:///data/a@b.db"),
])
def test_both_names_mask_the_same_way(url: str, shown: str) -> None:
    assert masked_url(url) == mask_url(url) == shown


def test_settings_repr_and_url_errors_never_show_the_password() -> None:
    settings = Settings(database_url=f"postgresql://ada:{SECRET}@db/test", cipher_key="a2V5",
                        openai_api_key="sk-abc-123")
    shown = repr(settings) + str(settings)
    assert SECRET not in shown and "sk-abc-123" not in shown and "a2V5" not in shown
    with pytest.raises(ConfigurationError) as caught:
        Database.parse(f"mysql://ada:{SECRET}@db/test")
    assert SECRET not in str(caught.value) and SECRET not in repr(caught.value)
