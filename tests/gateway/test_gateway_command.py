"""`streamscope gateway`'s mistakes end in one line, before anything is served."""

from __future__ import annotations

import socket

from click.testing import CliRunner

from streamscope_cli.commands.gateway import gateway


def test_an_upstream_that_is_not_an_http_url_is_refused() -> None:
    result = CliRunner().invoke(gateway, ["--upstream", "ftp://engine:21"])

    assert result.exit_code == 1
    assert "is not an http:// or https:// URL" in result.output
    assert "Traceback" not in result.output


def test_a_port_in_use_is_named() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(gateway, ["--upstream", "http://127.0.0.1:1", "--port", str(port)])

    assert result.exit_code == 1
    assert f"the gateway cannot listen on 127.0.0.1:{port}" in result.output
