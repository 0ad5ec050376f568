"""`streamscope dashboards push`: provision a running Grafana from the same files the compose stack mounts."""

from __future__ import annotations

from pathlib import Path

import click

from streamscope import env
from streamscope_cli.options import fail_plainly


@click.group()
def dashboards() -> None:
    """Grafana dashboards and alert rules."""


@dashboards.command("push")
@click.option("--grafana-url", envvar=env.GRAFANA_URL, show_envvar=True, required=True, metavar="URL")
@click.option(
    "--token",
    envvar=env.GRAFANA_TOKEN,
    show_envvar=True,
    default=None,
    metavar="TOKEN",
    help="A service account token with the Admin role (or put user:password in the URL).",
)
@click.option(
    "--clickhouse-url",
    default=None,
    metavar="URL",
    help="How Grafana reaches ClickHouse: http://host:8123 or https://host:8443. Unset connection options "
    "keep the provisioning file's values.",
)
@click.option("--clickhouse-user", default=None, metavar="USER", help="The read-only user Grafana queries as.")
@click.option(
    "--clickhouse-password",
    envvar=env.GRAFANA_CLICKHOUSE_PASSWORD,
    show_envvar=True,
    required=True,
    metavar="PASSWORD",
)
@click.option("--clickhouse-database", default=None, metavar="NAME")
@click.option(
    "--folder",
    default=None,
    metavar="TITLE",
    help="Put the dashboards and alert rules in this folder [default: the folders the provisioning files name].",
)
@click.option(
    "--provisioning",
    "provisioning_dir",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="Read datasources/, dashboards/ and alerting/ from this directory [default: the shipped files].",
)
@fail_plainly
def dashboards_push(
    grafana_url: str,
    token: str | None,
    clickhouse_url: str | None,
    clickhouse_user: str | None,
    clickhouse_password: str,
    clickhouse_database: str | None,
    folder: str | None,
    provisioning_dir: Path | None,
) -> None:
    """Provision the ClickHouse data source, a folder, the dashboards and the alert rules, contact points and
    notification policy into a running Grafana.

    Reads the same provisioning files the compose stack mounts. Running it again updates everything in
    place. The notification policy tree is replaced whole, as file provisioning does. The shipped contact point
    sends the collector's alert webhook token from STREAMSCOPE_ALERT_WEBHOOK_TOKEN, which must be set.

    \b
    Example:
      GRAFANA_TOKEN=glsa_... GRAFANA_CLICKHOUSE_PASSWORD=... streamscope dashboards push \\
        --grafana-url https://grafana.example.com --clickhouse-url http://clickhouse.internal:8123
    """
    try:
        from streamscope_dashboards.push import PROVISIONING_DIR, ClickHouseTarget, PushConfig, push
    except ImportError:
        from streamscope.install import install_command

        hint = f"dashboards push needs the grafana extra: {install_command('grafana')}"
        raise click.ClickException(hint) from None

    clickhouse = ClickHouseTarget(clickhouse_password, clickhouse_url, clickhouse_user, clickhouse_database)
    config = PushConfig(grafana_url, token, clickhouse, folder, provisioning_dir or PROVISIONING_DIR)
    push(config, announce=click.echo)
