"""Pure DLedger-style Raft: a `RaftNode` takes inputs with the time and returns `Ready` batches.

See `rmq_ha.raft.core` for the algorithm and `rmq_ha.raft.outputs` for the driver contract.
"""

from rmq_ha.raft.config import RaftConfig as RaftConfig
from rmq_ha.raft.core import NodeStatus as NodeStatus
from rmq_ha.raft.core import RaftNode as RaftNode
from rmq_ha.raft.core import StateMachine as StateMachine
from rmq_ha.raft.core import TestHooks as TestHooks
from rmq_ha.raft.messages import Code as Code
from rmq_ha.raft.messages import ElectionOutcome as ElectionOutcome
from rmq_ha.raft.messages import Entry as Entry
from rmq_ha.raft.messages import EntryKind as EntryKind
from rmq_ha.raft.messages import Message as Message
from rmq_ha.raft.messages import ParseResult as ParseResult
from rmq_ha.raft.messages import Role as Role
from rmq_ha.raft.messages import Snapshot as Snapshot
from rmq_ha.raft.messages import VoteResult as VoteResult
from rmq_ha.raft.messages import failure_response as failure_response
from rmq_ha.raft.outputs import AppendLog as AppendLog
from rmq_ha.raft.outputs import Applied as Applied
from rmq_ha.raft.outputs import CompactLog as CompactLog
from rmq_ha.raft.outputs import HardState as HardState
from rmq_ha.raft.outputs import PersistedState as PersistedState
from rmq_ha.raft.outputs import PersistOp as PersistOp
from rmq_ha.raft.outputs import ProposalReply as ProposalReply
from rmq_ha.raft.outputs import ProposalStatus as ProposalStatus
from rmq_ha.raft.outputs import Ready as Ready
from rmq_ha.raft.outputs import RoleState as RoleState
from rmq_ha.raft.outputs import SaveHardState as SaveHardState
from rmq_ha.raft.outputs import SaveSnapshot as SaveSnapshot
from rmq_ha.raft.outputs import TruncateLog as TruncateLog
