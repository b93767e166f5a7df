"""RocketMQ's remoting protocol, in Python: codes, custom headers, JSON bodies.

* `codes`      request/response/language codes, each with a doc line (the one registry)
* `perm`       topic/broker permission bits
* `command`    RemotingCommand (one decoded frame)
* `headers`    typed custom headers <-> extFields (mechanism in `headerbase`)
* `models`     JSON body models (routes, cluster info, heartbeat, locks, offsets, ...)
* `register_body`  REGISTER_BROKER body, JSON or compressed
* `json_compat`    lenient parsing of fastjson output, standard JSON output
* `gen_docs`   writes docs/protocol.md from the above
"""

from __future__ import annotations

from rmq_ha.protocol.codes import LanguageCode, RequestCode, ResponseCode
from rmq_ha.protocol.command import RemotingCommand
from rmq_ha.protocol.headerbase import (
    CommandHeader,
    HeaderError,
    MalformedHeaderField,
    MissingHeaderField,
)
from rmq_ha.protocol.json_compat import BodyDecodeError
from rmq_ha.protocol.jsonmodel import JsonModel

__all__ = [
    "BodyDecodeError",
    "CommandHeader",
    "HeaderError",
    "JsonModel",
    "LanguageCode",
    "MalformedHeaderField",
    "MissingHeaderField",
    "RemotingCommand",
    "RequestCode",
    "ResponseCode",
]
