"""Subscription-group configs (RocketMQ's SubscriptionGroupManager): created or updated by
UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (mqadmin updateSubGroup), removed by
DELETE_SUBSCRIPTIONGROUP, listed by GET_ALL_SUBSCRIPTIONGROUP_CONFIG; persisted atomically as
`config/subscriptionGroup.json` (RocketMQ's file name and shape: subscriptionGroupTable and
dataVersion).

rmq_ha's broker does not require a group to exist before it consumes; with
autoCreateSubscriptionGroup=true (the default, as RocketMQ) a consumer's heartbeat creates a
default config for its group (`ensure`). A group whose config says consumeEnable=false is
refused pulls and pops with NO_PERMISSION, as RocketMQ answers (`consume_refusal`);
retryMaxTimes bounds its retries when the client does not name a maximum
(`retry_max_times`); the other settings (retryQueueNums, ...) are kept, persisted and shown but
not enforced (docs/operations.md).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from rmq_ha.clock import wall_ms
from rmq_ha.durable import ConfigFileWriter, read_with_backup, require_keys
from rmq_ha.protocol import json_compat
from rmq_ha.protocol.admin import SubscriptionGroupConfig, SubscriptionGroupWrapper
from rmq_ha.protocol.models import DataVersion

FILE_NAME = "subscriptionGroup.json"


#: SubscriptionGroupConfig.retryMaxTimes' default.
DEFAULT_RETRY_MAX_TIMES = 16


def _parse_file(raw: bytes) -> SubscriptionGroupWrapper:
    """subscriptionGroup.json: a file without its table is damaged, not a broker without
    group configs."""
    require_keys(json_compat.loads(raw), "subscriptionGroupTable")
    return SubscriptionGroupWrapper.from_json(raw)


class SubscriptionGroupManager:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.table: dict[str, SubscriptionGroupConfig] = {}
        self.data_version = DataVersion.initial(wall_ms())
        self._writer = ConfigFileWriter(path)
        #: Changed since the last write (a heartbeat's auto-created group: written by the
        #: broker's housekeeping off the event loop, not by the heartbeat).
        self.dirty = False
        self._load()

    def _load(self) -> None:
        w = read_with_backup(self.path, _parse_file, "subscription groups")
        if w is None:
            return
        self.table.update(w.subscription_group_table)
        self.data_version = w.data_version

    def wrapper(self) -> SubscriptionGroupWrapper:
        return SubscriptionGroupWrapper(dict(self.table), self.data_version)

    def persist_job(self) -> Callable[[], None] | None:
        """The write of the table as it is now (None when unchanged since the last one), to
        run here or in a worker thread."""
        if not self.dirty:
            return None
        return self._writer.dirty_job(self, self.wrapper().to_json)

    def persist(self) -> None:
        self.dirty = True
        job = self.persist_job()
        assert job is not None
        job()

    def get(self, group: str) -> SubscriptionGroupConfig | None:
        return self.table.get(group)

    def consume_refusal(self, group: str) -> str | None:
        """Why `group` may not consume here (RocketMQ's remark), or None."""
        cfg = self.table.get(group)
        if cfg is not None and not cfg.consume_enable:
            return f"subscription group no permission, {group}"
        return None

    def ensure(self, group: str, *, persist_now: bool = True) -> bool:
        """A default config for a group that has none (RocketMQ's findSubscriptionGroupConfig
        with autoCreateSubscriptionGroup=true, at a consumer's heartbeat): admin tools list
        the group and show its settings. True when it was created. Without `persist_now`
        the file is written later (`persist_job`): a lost default is made again at the next
        heartbeat."""
        if group in self.table:
            return False
        self.update(SubscriptionGroupConfig(group_name=group), persist_now=persist_now)
        return True

    def retry_max_times(self, group: str) -> int:
        """How often the group's messages are retried before the dead-letter queue: its
        config's retryMaxTimes (RocketMQ's default, 16, for a group without one)."""
        cfg = self.table.get(group)
        return cfg.retry_max_times if cfg is not None else DEFAULT_RETRY_MAX_TIMES

    def update(self, cfg: SubscriptionGroupConfig, *, persist_now: bool = True) -> None:
        self.table[cfg.group_name] = cfg
        self.data_version = self.data_version.next_version(wall_ms())
        if persist_now:
            self.persist()
        else:
            self.dirty = True

    def adopt(self, raw: bytes) -> bool:
        """A slave's copy of its master's table (GET_ALL_SUBSCRIPTIONGROUP_CONFIG's body;
        RocketMQ's SlaveSynchronize.syncSubscriptionGroupConfig), taken whole when it differs
        from this one; True when it changed. A group only this replica knew (a consumer's
        heartbeat here made its default config) goes too: the next heartbeat makes it again."""
        w = _parse_file(raw)
        if w.subscription_group_table == self.table:
            return False
        self.table = dict(w.subscription_group_table)
        self.data_version = w.data_version
        self.persist()
        return True

    def delete(self, group: str) -> bool:
        """True when the group had a config."""
        if self.table.pop(group, None) is None:
            return False
        self.data_version = self.data_version.next_version(wall_ms())
        self.persist()
        return True
