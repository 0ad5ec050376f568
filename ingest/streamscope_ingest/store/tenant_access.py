"""ClickHouse users that confine a tenant, for the server's ``users.d``: the way tenants get SQL.

Each tenant's user may SELECT the tables and views of the streamscope database that have a ``tenant`` column,
and nothing else (no files, URLs, remote servers or other databases: a new user has no such grant). A row
filter on each of those tables keeps it to its tenant's rows, and views read through their tables' filters.
Its settings profile keeps it read-only (``readonly=1``: it cannot change a setting either) and bounds each
query's time, memory and answer. The server enforces all of it, whatever the query says.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import xml.etree.ElementTree as ET
from dataclasses import dataclass

from clickhouse_connect.driver.client import Client

from streamscope_ingest.store import sql

PROFILE = "streamscope_tenant"
PROFILE_SETTINGS = {name: value for name, value in sql.READ_ONLY.items() if name.startswith(("max_", "readonly"))}
_NOT_IN_A_NAME = re.compile(r"[^A-Za-z0-9_]")


@dataclass(frozen=True)
class Readable:
    """A table or view a tenant may read: rows filtered by tenant where it holds them (a table)."""

    name: str
    filtered: bool


def tenant_readables(client: Client) -> list[Readable]:
    """The tables and views of ``client``'s database with a ``tenant`` column."""
    rows = client.query(
        "SELECT name, engine != 'View' FROM system.tables WHERE database = currentDatabase() AND name IN "
        "(SELECT table FROM system.columns WHERE database = currentDatabase() AND name = 'tenant') ORDER BY name"
    ).result_rows
    return [Readable(name, bool(filtered)) for name, filtered in rows]


def user_name(tenant: str) -> str:
    """The ClickHouse user of ``tenant``: a checked tenant name, with ``.`` and ``-`` as ``_``."""
    return "tenant_" + _NOT_IN_A_NAME.sub("_", tenant)


@dataclass(frozen=True)
class TenantUser:
    tenant: str
    user: str
    password: str


def new_users(tenants: list[str]) -> list[TenantUser]:
    """A user with a fresh random password per tenant; raises ValueError if two tenants share a user name."""
    users = [TenantUser(tenant, user_name(tenant), secrets.token_urlsafe(24)) for tenant in sorted(set(tenants))]
    names = [user.user for user in users]
    if len(set(names)) != len(names):
        raise ValueError(f"tenant names that differ only in '.', '-' and '_' share a ClickHouse user: {names}")
    return users


def users_config(database: str, readables: list[Readable], users: list[TenantUser]) -> str:
    """The ``users.d`` XML of the tenants' users (their passwords as SHA-256, never in clear)."""
    root = ET.Element("clickhouse")
    profile = ET.SubElement(ET.SubElement(root, "profiles"), PROFILE)
    for name, value in PROFILE_SETTINGS.items():
        ET.SubElement(profile, name).text = str(value)
    defined = ET.SubElement(root, "users")
    for user in users:
        element = ET.SubElement(defined, user.user)
        ET.SubElement(element, "password_sha256_hex").text = hashlib.sha256(user.password.encode()).hexdigest()
        ET.SubElement(ET.SubElement(element, "networks"), "ip").text = "::/0"
        ET.SubElement(element, "profile").text = PROFILE
        ET.SubElement(element, "quota").text = "default"
        grants = ET.SubElement(element, "grants")
        for readable in readables:
            ET.SubElement(grants, "query").text = f"GRANT SELECT ON {database}.{readable.name}"
        filters = ET.SubElement(ET.SubElement(element, "databases"), database)
        for readable in readables:
            if readable.filtered:
                ET.SubElement(
                    ET.SubElement(filters, readable.name), "filter"
                ).text = f"tenant = {sql.string_literal(user.tenant)}"
    ET.indent(root)
    return ET.tostring(root, encoding="unicode") + "\n"
