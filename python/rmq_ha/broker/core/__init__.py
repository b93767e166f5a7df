"""The broker's role core: pure decisions (`role.RoleCore`), its inputs (`events`) and outputs
(`actions`). No Trio, no clock, no I/O: see role.py."""

from rmq_ha.broker.core.role import Role, RoleConfig, RoleCore, RoleState

__all__ = ["Role", "RoleConfig", "RoleCore", "RoleState"]
