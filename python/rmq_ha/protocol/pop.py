"""Pop-consumption conventions shared by broker and client: the pop retry topic name and the
"extraInfo" string (RocketMQ's ExtraInfoUtil) a popped message carries in its POP_CK property
and sends back with ACK_MESSAGE and CHANGE_MESSAGE_INVISIBLETIME:

    ckQueueOffset popTime invisibleTime reviveQid retry(0|1) brokerName queueId queueOffset

ckQueueOffset is the first offset of the pop's checkpoint on that queue; retry is 1 when the
message was popped from the group's pop retry topic."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

RETRY_GROUP_TOPIC_PREFIX: Final = "%RETRY%"


def pop_retry_topic(topic: str, group: str) -> str:
    """KeyBuilder.buildPopRetryTopic (V1 naming: `%RETRY%<group>_<topic>`)."""
    return f"{RETRY_GROUP_TOPIC_PREFIX}{group}_{topic}"


def retry_flag(topic: str) -> str:
    return "1" if topic.startswith(RETRY_GROUP_TOPIC_PREFIX) else "0"


def build_extra_info(
    ck_offset: int,
    pop_time: int,
    invisible_time: int,
    revive_qid: int,
    topic: str,
    broker_name: str,
    queue_id: int,
    queue_offset: int,
) -> str:
    """ExtraInfoUtil.buildExtraInfo (with the message's queue offset); `topic` is the topic
    the message was popped from."""
    return (
        f"{ck_offset} {pop_time} {invisible_time} {revive_qid} {retry_flag(topic)} "
        f"{broker_name} {queue_id} {queue_offset}"
    )


@dataclass(frozen=True, slots=True)
class ExtraInfo:
    ck_offset: int
    pop_time: int
    invisible_time: int
    revive_qid: int
    retry: bool
    broker_name: str
    queue_id: int
    queue_offset: int | None = None

    @classmethod
    def parse(cls, s: str) -> ExtraInfo:
        """Raises ValueError for a string that is not an extraInfo."""
        parts = s.split(" ")
        if len(parts) < 7:
            raise ValueError(f"extraInfo {s!r} has {len(parts)} fields, expected 7 or 8")
        return cls(
            int(parts[0]),
            int(parts[1]),
            int(parts[2]),
            int(parts[3]),
            parts[4] == "1",
            parts[5],
            int(parts[6]),
            int(parts[7]) if len(parts) > 7 else None,
        )

    def real_topic(self, topic: str, group: str) -> str:
        """ExtraInfoUtil.getRealTopic: the topic to ack on."""
        return pop_retry_topic(topic, group) if self.retry else topic


def parse_offset_info(info: str | None) -> dict[str, str]:
    """startOffsetInfo / msgOffsetInfo ("retry qid value;...") as {"retry@qid": value}."""
    out: dict[str, str] = {}
    for item in (info or "").split(";"):
        parts = item.split(" ")
        if len(parts) == 3:
            out[f"{parts[0]}@{parts[1]}"] = parts[2]
    return out
