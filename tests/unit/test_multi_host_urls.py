"""libpq multi-host URLs (``postgresql://u@h1:p1,h2:p2/db?target_session_attrs=read-write``):
parsed into every server in order, handed to libpq as its comma-separated lists (the
event store's connections) and to SQLAlchemy as repeated ``host`` options (the read
models'), and kept through a round trip of the URL (the command line renders it)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contextledger.domain.values.errors import ConfigurationError
from contextledger.infrastructure.persistence.database import Database

URL = "postgresql://app:secret@db1:5432,db2:6432/ledger?target_session_attrs=read-write&schema=s1"


def test_a_multi_host_url_names_every_server_in_order() -> None:
    db = Database.parse(URL)
    assert db.servers == [("db1", 5432), ("db2", 6432)]
    assert db.libpq_hosts == ("db1,db2", "5432,6432")
    assert db.schema == "s1" and db.url.database == "ledger"
    env = db.persistence_env()
    assert (env["POSTGRES_HOST"], env["POSTGRES_PORT"]) == ("db1,db2", "5432,6432")
    assert env["CL_PG_TARGET_SESSION_ATTRS"] == "read-write"
    # A read-only ledger's sessions are read-only: libpq's read-write check would
    # refuse every server, so it asks for the primary instead.
    assert db.persistence_env(read_only=True)["CL_PG_TARGET_SESSION_ATTRS"] == "primary"
    engine_url = db.sqlalchemy_url()
    assert engine_url.query["host"] == ("db1:5432", "db2:6432")
    assert engine_url.query["target_session_attrs"] == "read-write"
    assert "secret" not in db.masked and "db2" in db.masked


def test_a_single_host_url_is_as_before() -> None:
    db = Database.parse("postgresql://postgres@127.0.0.1:5432/test")
    assert db.servers == [("127.0.0.1", 5432)]
    assert "CL_PG_TARGET_SESSION_ATTRS" not in db.persistence_env()
    assert db.sqlalchemy_url().render_as_string() == "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def test_a_port_that_is_not_a_number_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="port of a multi-host URL"):
        Database.parse("postgresql://u:pw@db1:5432,db2:x/ledger")


@given(
    ports=st.lists(st.integers(1, 65535), min_size=2, max_size=4),
    hosts=st.lists(st.from_regex(r"[a-z][a-z0-9-]{0,10}", fullmatch=True), min_size=4, max_size=4),
)
def test_the_servers_survive_a_rendering_of_the_url(ports: list[int], hosts: list[str]) -> None:
    given_servers = list(zip(hosts, ports, strict=False))
    url = "postgresql://u@" + ",".join(f"{h}:{p}" for h, p in given_servers) + "/ledger"
    db = Database.parse(url)
    assert db.servers == given_servers
    again = Database.parse(db.url.render_as_string(hide_password=False))
    assert again.servers == given_servers and again.url.database == "ledger"
