"""A step of the wall clock, noticed by the replica's watchdog (thread `sched-zk-watchdog`)."""

from __future__ import annotations

import logging
import time

# The replica's own logger: these lines are the replica's (operators and tests follow that name).
log = logging.getLogger("scheduler.replica.replica")

# A step of the wall clock against the monotonic one at least this large between two watchdog
# passes is logged (an NTP step, `date -s`; NTP's slewing stays far below it). Fires are
# accounted by the wall clock, so a step changes which fires are due: say so where it happens.
_CLOCK_STEP_S = 1.0


class ClockStepWatch:
    """Logs a step of the wall clock since the last check.

    The producer accounts cron fires by the wall clock and the fire ledger keeps each job's last
    accounted fire, so a step never runs a fire twice; but a step ahead accounts the fires up to
    the new time at once and a step back accounts none until the clock passes the last recorded
    fire again. The producer's own lines would name the wrong cause ("missed while no leader
    acted"): this one names the step.
    """

    def __init__(self) -> None:
        self._wall_offset = time.time() - time.monotonic()

    def check(self, identity: str, acting: bool) -> None:
        """One watchdog pass for the replica `identity` (`acting`: the acting leader)."""
        offset = time.time() - time.monotonic()
        step, self._wall_offset = offset - self._wall_offset, offset
        if abs(step) < _CLOCK_STEP_S:
            return
        if step > 0:
            effect = (
                "the cron fires up to the new time are due at once: a misfire job runs each of "
                "them now, a misfire-off job skips them"
            )
        else:
            effect = (
                "no cron fire is due until the clock passes the last recorded fire again: fires "
                f"come up to {-step:.0f} s late, none runs twice"
            )
        log.warning(
            "replica %s (%s): the wall clock stepped %+.1f s; %s. Keep the replicas' clocks in "
            "sync (NTP)",
            identity,
            "acting leader" if acting else "not leading",
            step,
            effect,
        )
