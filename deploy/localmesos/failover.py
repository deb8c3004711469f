"""A Mesos master failover: another master is elected and the agents re-register with it.

What a real failover does, and the stand-in does too (Mesos docs/high-availability.md,
high-availability-framework-guide.md; master.cpp `_reregisterSlave`, `reconcile`):
- the new master has a new id (new frameworks and offers carry it as their prefix; agents keep
  their ids);
- every scheduler subscription ends: the event stream closes, each framework is disconnected
  and must SUBSCRIBE again with its framework id within its failover timeout; calls until then
  get 403;
- every outstanding offer is void (the new master never made it: no RESCIND, an ACCEPT of it
  gets TASK_LOST/TASK_DROPPED "Offer ... is no longer valid"), and no offer filter survives;
- the agents re-register with their tasks: every task still running, and every task whose
  terminal update was not acknowledged; the master forgets completed tasks and frameworks;
- until an agent has re-registered the master does not know its tasks: it makes no offer of it,
  answers no reconciliation of those tasks (implicit or explicit, nor of an unknown task while
  any agent may still bring it) and ignores kills of them; once it re-registers, every status
  update it holds unacknowledged is sent again;
- executors, command tasks and their sandboxes are untouched (the agents did not restart).

What a real failover does that the stand-in does not:
- the master's address changes (the new master is another process; schedulers find it through
  ZooKeeper) and for the election time (seconds) no master answers at all, so pymesos waits
  with its connect back-off (2 s, 4 s, ...); here the same address answers at once and pymesos
  re-subscribes immediately (with `--zk`, the master's node is replaced by a new one);
- agents re-register each on its own, with a random back-off of up to a second or two, and an
  agent that does not re-register within `agent_reregister_timeout` (10 min) is removed; here
  all of them re-register together, after `agent_reregister_delay_s`;
- status updates the old master had received but not yet forwarded, and launches it had
  accepted but not yet sent to an agent, can be lost in the crash (their tasks are then
  unknown to the agent: reconciliation answers TASK_LOST/TASK_GONE); here the failover happens
  between two calls, so none is lost;
- the new master keeps no memory of removed frameworks (Mesos's registry holds agents, not
  frameworks): a torn-down framework id may subscribe again there; here it is still refused;
- a framework recovered from the agents but never re-subscribed is kept by a real master until
  an operator tears it down; here its failover timeout starts at the failover.

Everything here runs under the state lock; `fail_over` returns at once.
"""

from __future__ import annotations

import logging
import time
import uuid
from functools import partial

from .master import Master
from .offers import OfferBook

log = logging.getLogger(__name__)


def fail_over(master: Master, agent_reregister_delay_s: float = 0.0) -> str:
    """Elect a new master in place of `master`'s; returns the new master id.

    The agents re-register `agent_reregister_delay_s` seconds later (0: at once, before any
    framework can subscribe again). Raises ValueError for a negative delay."""
    if agent_reregister_delay_s < 0:
        raise ValueError("agent_reregister_delay_s must be >= 0")
    with master.lock:
        previous = master.id
        master.id = str(uuid.uuid4())
        master.elected_time = time.time()
        master.offers = OfferBook(master.id)  # every outstanding offer void, no filter kept
        for framework in master.frameworks.values():
            stream = framework.stream
            master.disconnect(framework)
            if stream is not None:
                stream.close()
            framework.completed_tasks.clear()
        master.completed_frameworks.clear()
        log.warning(
            "master %s: failed over to master %s; agents re-register in %gs",
            previous,
            master.id,
            agent_reregister_delay_s,
        )
        agent_ids = list(master.agents)
        if agent_reregister_delay_s == 0:
            for agent_id in agent_ids:
                _reregistered(master, agent_id, master.id)
        else:
            master.reregistering.update(agent_ids)
            for agent_id in agent_ids:
                master.clock.call_later(
                    agent_reregister_delay_s, partial(_reregistered, master, agent_id, master.id)
                )
        return master.id


def _reregistered(master: Master, agent_id: str, elected: str) -> None:
    """The agent re-registered with the master `elected` (skipped if another failover or its
    removal came first): its resources are offered and its pending updates sent again."""
    with master.lock:
        agent = master.agents.get(agent_id)
        if agent is None or master.id != elected:
            return
        master.reregistering.discard(agent_id)
        agent.registered_time = time.time()
        log.info("agent %s: re-registered with master %s", agent_id, elected)
        for framework_id in list(agent.frameworks):
            framework = master.frameworks.get(framework_id)
            if framework is not None and framework.connected:
                agent.updates.resend(framework_id)
        master.request_allocation()
