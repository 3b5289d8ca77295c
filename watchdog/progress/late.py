"""What a poll of the progress log that hung read, once it returned, joined to the next poll's
result (daemon/sampling.py): its lines were consumed, so they count when they come back."""

from __future__ import annotations

import dataclasses

from watchdog.progress.follower import FollowResult


def with_late(late: FollowResult, found: FollowResult) -> FollowResult:
    """A poll's result with what a stuck poll before it read once it returned: its
    lines were consumed, and a job that wrote them while our read hung did not stall."""
    activity = late.activity + found.activity
    phase = found.phase or late.phase  # SPEC §14
    losses = late.losses + found.losses  # SPEC §16: each loss judged, in the job's order
    if found.readings:
        return dataclasses.replace(found, activity=activity, phase=phase, losses=losses)
    return dataclasses.replace(
        found,
        readings=late.readings,
        latest_mtime=late.latest_mtime,
        source=late.source or found.source,
        activity=activity,
        phase=phase,
        activity_last=found.activity_last or (late.activity_last and not found.activity),
        losses=losses,
    )
