"""The agenda state machine; docs/design.md §4 is the contract.

This package is the only code that writes `AgendaProgress.state` or `OperationProgress.state`
(tests/test_architecture.py enforces it). Queue membership (`ReadyAgenda`/`QueuedAgenda`) and
the callback outbox (`CallbackDelivery`) change here too, so they can never disagree with the
state.

- `machine`: the transition table, transitions and what entering a state writes, execution
  outcomes and the retry policy;
- `operations`: operation states, what a worker's report sets on them, the percent roll-up;
- `claim`: the pull's claim of queued agendas;
- `bulk`: set-based forms of those writes for the hot paths (fill, promote, batch report);
- `callback_outbox`: the callback outbox row a state change writes;
- `lanes`: the customer lanes kept in step with the ready set, and fair share's charges;
- `reap`: the reaper's one-statement delete of a batch of expired agendas;
- `waits`: agendas that wait for other agendas (`after`): their submit and their release when
  the agendas they wait for finish.

Callers import from `agendas.states`; fill nudges are `agendas.fill_nudge`.
"""

from agendas.fill_nudge import fill_nudge, fill_nudges_cancel
from agendas.states.bulk import (
    execution_close,
    executions_report_many,
    operations_apply_reports,
    progress_promote_due,
    progress_queue_many,
    progresses_leave_waiting,
)
from agendas.states.claim import (
    ClaimOutcome,
    executions_start,
    queue_claim,
    queue_claim_outcome,
)
from agendas.states.lanes import (
    DEFAULT_COST_SECONDS,
    lanes_charge,
    lanes_sleep,
    lanes_wake,
    usage_inflation,
)
from agendas.states.machine import (
    ALLOWED,
    COUNTED_OUTCOMES,
    NOTIFY,
    TERMINAL,
    WAITING,
    Outcome,
    S,
    callback_enqueue,
    check_transition,
    diagnostic,
    execution_end,
    processing_state,
    progress_create,
    progress_create_many,
    retry_delay,
    transition,
)
from agendas.states.operations import (
    OPERATION_TERMINAL,
    OpState,
    operation_set_state,
    operations_abort_unfinished,
    operations_append,
    operations_apply_report,
    operations_fail_running,
    operations_reset,
    percent_rollup,
)
from agendas.states.reap import agendas_reap_batch
from agendas.states.waits import After, after_resolve, progresses_create_after
from core.errors import InvalidTransition

__all__ = [
    "ALLOWED",
    "After",
    "ClaimOutcome",
    "COUNTED_OUTCOMES",
    "DEFAULT_COST_SECONDS",
    "InvalidTransition",
    "NOTIFY",
    "OPERATION_TERMINAL",
    "OpState",
    "Outcome",
    "S",
    "TERMINAL",
    "WAITING",
    "after_resolve",
    "agendas_reap_batch",
    "callback_enqueue",
    "check_transition",
    "diagnostic",
    "execution_close",
    "execution_end",
    "executions_report_many",
    "executions_start",
    "fill_nudge",
    "fill_nudges_cancel",
    "lanes_charge",
    "lanes_sleep",
    "lanes_wake",
    "operation_set_state",
    "operations_abort_unfinished",
    "operations_append",
    "operations_apply_report",
    "operations_apply_reports",
    "operations_fail_running",
    "operations_reset",
    "percent_rollup",
    "processing_state",
    "progress_create",
    "progress_create_many",
    "progress_promote_due",
    "progress_queue_many",
    "progresses_create_after",
    "progresses_leave_waiting",
    "queue_claim",
    "queue_claim_outcome",
    "retry_delay",
    "transition",
    "usage_inflation",
]
