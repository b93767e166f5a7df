"""Trio remoting: connections, server, client (framing is done by the native codec)."""

from rmq_ha.net.client import RemotingClient
from rmq_ha.net.connection import Connection
from rmq_ha.net.server import RemotingServer

__all__ = ["Connection", "RemotingClient", "RemotingServer"]
