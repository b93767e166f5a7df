"""Consumer offsets and message lookups: QUERY_CONSUMER_OFFSET, UPDATE_CONSUMER_OFFSET,
GET_ALL_CONSUMER_OFFSET, GET_MAX_OFFSET, GET_MIN_OFFSET, SEARCH_OFFSET_BY_TIMESTAMP,
GET_EARLIEST_MSG_STORETIME, VIEW_MESSAGE_BY_ID."""

from __future__ import annotations

import os

import trio

from rmq_ha._native import client_record
from rmq_ha.broker.ports import Ports
from rmq_ha.net.connection import Connection
from rmq_ha.net.dispatch import Dispatcher
from rmq_ha.protocol.codes import RequestCode as RC
from rmq_ha.protocol.codes import ResponseCode as Resp
from rmq_ha.protocol.command import RemotingCommand
from rmq_ha.protocol.headers import (
    GetEarliestMsgStoretimeRequestHeader,
    GetEarliestMsgStoretimeResponseHeader,
    GetMaxOffsetRequestHeader,
    GetMaxOffsetResponseHeader,
    GetMinOffsetRequestHeader,
    GetMinOffsetResponseHeader,
    QueryConsumerOffsetRequestHeader,
    QueryConsumerOffsetResponseHeader,
    SearchOffsetRequestHeader,
    SearchOffsetResponseHeader,
    UpdateConsumerOffsetRequestHeader,
    ViewMessageRequestHeader,
)

#: The machine's physical memory (RocketMQ's StoreUtil.TOTAL_PHYSICAL_MEMORY_SIZE).
PHYSICAL_MEMORY_BYTES = (
    os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if hasattr(os, "sysconf") and "SC_PHYS_PAGES" in os.sysconf_names
    else 1 << 34
)


def in_memory(phys_offset: int, max_phys_offset: int, ratio_percent: int) -> bool:
    """Whether the record at `phys_offset` counts as in memory: within ratio percent of the
    machine's memory of the commitlog's end (RocketMQ's estimateInMemByCommitOffset; RocketMQ 5
    asks the page cache with mincore instead, which for a log read once and written since
    comes to about the same)."""
    return max_phys_offset - phys_offset <= PHYSICAL_MEMORY_BYTES * ratio_percent // 100


def register(d: Dispatcher, p: Ports) -> None:
    native = p.store.native

    def young(topic: str, queue_id: int) -> bool:
        """Whether a new group starts the queue at 0: it never held a message (RocketMQ 4's
        answer; RocketMQ 5 leaves that to the client, which then starts at the max offset it
        asks for next and skips what came in between), or message 0 is still there and in
        memory (checkInMemByConsumeOffset of offset 0)."""
        if native.queue_min_offset(topic, queue_id) != 0:
            return False
        if native.queue_max_offset(topic, queue_id) == 0:
            return True
        try:
            phys, _size, _tag = native.queue_unit(topic, queue_id, 0)
        except Exception:  # not readable (not dispatched yet): no message 0 to go by
            return False
        return in_memory(phys, native.max_offset, p.cfg.access_message_in_memory_max_ratio)

    async def query_consumer_offset(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = QueryConsumerOffsetRequestHeader.from_ext(cmd.ext_fields)
        off = p.offsets.query(h.consumer_group, h.topic, h.queue_id)
        if off is None:
            # RocketMQ's rule: a group new to a queue whose messages all still exist, and whose
            # first is still in memory (a young queue), starts at 0; otherwise the client
            # decides (consumeFromWhere): a new group on a large old backlog does not replay it.
            if h.set_zero_if_not_found is not False and young(h.topic, h.queue_id):
                off = 0
            else:
                return cmd.response(
                    Resp.QUERY_NOT_FOUND, "Not found, maybe this group consumer boot first"
                )
        return cmd.response(
            Resp.SUCCESS, None, QueryConsumerOffsetResponseHeader(offset=off).to_ext()
        )

    async def update_consumer_offset(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = UpdateConsumerOffsetRequestHeader.from_ext(cmd.ext_fields)
        p.offsets.commit(h.consumer_group, h.topic, h.queue_id, h.commit_offset)
        return cmd.response(Resp.SUCCESS)

    async def all_consumer_offsets(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(Resp.SUCCESS, None, None, p.offsets.to_json())

    async def get_max_offset(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = GetMaxOffsetRequestHeader.from_ext(cmd.ext_fields)
        off = native.queue_max_offset(h.topic, h.queue_id)
        return cmd.response(Resp.SUCCESS, None, GetMaxOffsetResponseHeader(offset=off).to_ext())

    async def get_min_offset(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = GetMinOffsetRequestHeader.from_ext(cmd.ext_fields)
        off = native.queue_min_offset(h.topic, h.queue_id)
        return cmd.response(Resp.SUCCESS, None, GetMinOffsetResponseHeader(offset=off).to_ext())

    async def search_offset(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = SearchOffsetRequestHeader.from_ext(cmd.ext_fields)
        off = await trio.to_thread.run_sync(
            native.search_offset_by_timestamp, h.topic, h.queue_id, h.timestamp
        )
        return cmd.response(Resp.SUCCESS, None, SearchOffsetResponseHeader(offset=off).to_ext())

    async def earliest_store_time(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = GetEarliestMsgStoretimeRequestHeader.from_ext(cmd.ext_fields)
        ts = native.earliest_store_time(h.topic, h.queue_id)
        if ts is None:
            ts = -1  # an empty queue: RocketMQ's getEarliestMessageTime answers -1
        return cmd.response(
            Resp.SUCCESS, None, GetEarliestMsgStoretimeResponseHeader(timestamp=ts).to_ext()
        )

    async def view_message(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = ViewMessageRequestHeader.from_ext(cmd.ext_fields)
        try:
            buf = native.read_record(h.offset)
        except Exception as e:  # offset out of range, or not a record
            return cmd.response(Resp.SYSTEM_ERROR, f"no message at offset {h.offset}: {e}")
        # as clients are served records: without the store's whole-record CRC trailer
        return cmd.response(Resp.SUCCESS, None, None, client_record(buf.tobytes()))

    d.register(RC.QUERY_CONSUMER_OFFSET, query_consumer_offset)
    d.register(RC.UPDATE_CONSUMER_OFFSET, update_consumer_offset)
    d.register(RC.GET_ALL_CONSUMER_OFFSET, all_consumer_offsets)
    d.register(RC.GET_MAX_OFFSET, get_max_offset)
    d.register(RC.GET_MIN_OFFSET, get_min_offset)
    d.register(RC.SEARCH_OFFSET_BY_TIMESTAMP, search_offset)
    d.register(RC.GET_EARLIEST_MSG_STORETIME, earliest_store_time)
    d.register(RC.VIEW_MESSAGE_BY_ID, view_message)
