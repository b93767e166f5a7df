"""Authentication, authorization and TLS (docs/security.md).

* `signing`: RocketMQ's request signature (AclClientRPCHook) and credentials;
* `addresses`: IP allow-list patterns; `rules`: request code -> resource and action;
* `acl`: plain_acl.yml (ACL 1.0) and the pure decision for one request;
* `guard`: the per-role check at the dispatcher, with file reloading.
"""

from rmq_ha.security.signing import Credentials

__all__ = ["Credentials"]
