"""A fleet started again at once on the same port finds it free (#48): connections in TIME_WAIT hold no port."""

from __future__ import annotations

import socket

from firefeed.commands.fleet import _port_free


def test_a_port_whose_server_just_closed_its_connections_is_free() -> None:
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    port = server.getsockname()[1]
    server.listen()
    client = socket.create_connection(("127.0.0.1", port))
    accepted, _ = server.accept()
    assert not _port_free("127.0.0.1", port)  # listening: taken
    accepted.close()  # the server closes first: its side of the connection stays in TIME_WAIT
    server.close()
    client.close()
    assert _port_free("127.0.0.1", port)


def test_a_listening_port_is_taken() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        assert not _port_free("127.0.0.1", server.getsockname()[1])
