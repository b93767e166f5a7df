"""Special messages (RIP-32's "二级消息"): delayed and timer messages, transactions and pop
consumption. Each background scanner is a `SpecialService` that the broker starts when it is
the master (later: the acting master) and can stop at any time; everything they re-inject goes
through one `Escape` (services.py), never straight into the store."""
