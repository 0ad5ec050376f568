"""Every server streamscope binds itself (collector, gateway, engines, proxy) sends each write at once.

asyncio turns Nagle's algorithm off (TCP_NODELAY) only on sockets whose protocol is TCP by number: a socket made as
``socket(AF_INET, SOCK_STREAM)`` says protocol 0, so connections accepted on it kept Nagle, and an event-stream's
first chunk, written right after its headers, waited for the client's delayed acknowledgement (40 ms on Linux)."""

from __future__ import annotations

import asyncio
import socket

from streamscope_collector.serving import bound_socket


def test_connections_accepted_on_a_bound_socket_send_without_delay():
    async def accepted_no_delay() -> int:
        sock = bound_socket("127.0.0.1", 0, "the test")
        sock.listen()
        seen: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        class Record(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                accepted = transport.get_extra_info("socket")
                seen.set_result(accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
                transport.close()

        server = await asyncio.get_running_loop().create_server(Record, sock=sock)
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", sock.getsockname()[1])
            value = await asyncio.wait_for(seen, 10)
            writer.close()
            return value
        finally:
            server.close()

    assert asyncio.run(accepted_no_delay()) != 0
