"""PURE history behind `watchdogctl timeline` (SPEC §13 "The overnight picture"). No I/O, no clock:
every instant comes in as `wall` (seconds since the epoch), so the shell decides what time it is.

The daemon feeds what it already has: `observe(state, wall)` after every dispatch and tick (time
goes to the state of the PREVIOUS observation, as in goodput.py), `sample(...)` on each sample
tick (tokens/s, step, GPU memory), `goodput(totals, wall)` (the growth of goodput.py's totals is
charged to the bucket it happened in, so the span's goodput reuses that accounting), and
`event(record, wall)` for every event (only the ones the picture marks are kept).

Bounded, like a round-robin database: the newest buckets are `bucket_s` wide; a bucket older than
PER_LEVEL of its widths is merged with its aligned neighbour into one twice as wide, and nothing
older than KEEP_S (a week) is kept. At any age the stored width is between 1/PER_LEVEL and
2/PER_LEVEL of that age, finer than a 100-column screen needs for a span reaching back that far;
a week at 60 s is under 600 buckets. Time while no daemon ran has no bucket: a gap, not "stopped".

`query(since, now, columns)` resamples into `columns` equal buckets (never narrower than
`bucket_s`): additive figures (seconds per state, goodput) by the overlap, means weighted by it,
events by their own instant.

The wall clock only labels. The shell hands `clock(now, wall)` both clocks before each input
(`now`: a steady clock that never steps): the time charged between two observations is the
steady clock's, and a step of the wall clock (NTP's step at boot, a step on a VM's host) moves
the whole history with it, by the step rounded down to whole buckets, so the picture stays one
unbroken axis in the stepped clock's time: no hour of buckets for a minute after a step forward,
and after a step back no newest bucket in a future that no query reaches (docs/troubleshooting.md).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from watchdog.core import names
from watchdog.core.views.timeline_span import (
    Bucket,
    event_time,
    figures_only,
    rfc3339,
    shifted_ts,
    span_goodput,
)

FORMAT_VERSION = 1
BUCKET_S = 60.0
PER_LEVEL = 128
KEEP_S = 7 * 86400.0
COMPACT_EVERY = 16  # base buckets between two merges (each is a pass over all buckets)
# A wall clock that moved this much more (or less) than the steady clock between two looks was
# stepped. A slew is far below it: adjtime's 500 ppm, even chrony's 8 % maximum slew rate over a
# second's look, is well under a second.
STEP_S = 1.0
# Events the picture marks on its time axis and lists (SPEC §13: restarts and incidents), and
# the ones that explain a gap or a change of state.
KEPT_EVENTS = names.TIMELINE_EVENTS
# Fields of a kept event that say what happened (the rest stays in `watchdogctl events`).
KEPT_FIELDS = (
    *("reason", "path", "pid", "exit_code", "signal", "delay_s", "gpu", "action", "xid"),
    "cause",  # SPEC §14: each restart is listed with why the run died
    *("window_s", "phase"),  # SPEC §14: a stall is marked with the window it waited out
    *("run", "steady_tokens_per_s", "previous", "change_pct"),  # SPEC §15: run_settled
    "after_s",  # SPEC §16: false_alarm
    "step",  # SPEC §16: checkpoint_saved
)


class Timeline:
    """The bounded history: buckets oldest first, never overlapping."""

    def __init__(
        self, bucket_s: float = BUCKET_S, per_level: int = PER_LEVEL, keep_s: float = KEEP_S
    ) -> None:
        if bucket_s <= 0 or per_level < 2 or keep_s <= 0:
            raise ValueError("bucket_s and keep_s must be > 0, per_level >= 2")
        self.bucket_s = bucket_s
        self.per_level = per_level
        self.keep_s = keep_s
        self._buckets: list[Bucket] = []
        self._prev: tuple[str, float] | None = None  # the state and instant of the last observe
        self._goodput_seen: dict[str, float] | None = None
        self._changed = False
        self._compact_at = -math.inf
        self._clock: tuple[float, float] | None = None  # (now, wall) at the last clock() call

    # ------------------------------------------------------------------------- clocks

    def clock(self, now: float, wall: float) -> float | None:
        """The steady clock (`now`) and the wall clock at one instant, given before each input.
        The time the next observe() charges is the steady clock's; a step of the wall clock
        (STEP_S or more) moves the history by it: the step (seconds), or None."""
        last, self._clock = self._clock, (now, wall)
        if last is None:
            return None
        step = (wall - last[1]) - (now - last[0])
        if self._prev is not None:  # the state's time since runs on the steady clock
            self._prev = (self._prev[0], self._prev[1] + step)
        if abs(step) < STEP_S:
            return None
        # whole buckets, at most the step (within STEP_S: a step of an hour read a hair short
        # moves an hour, not 59 minutes, leaving no near-empty bucket between)
        self._shift(math.floor((step + STEP_S) / self.bucket_s) * self.bucket_s, step)
        return step

    def _shift(self, by_s: float, step: float) -> None:
        """Relabel the history by `by_s` (whole base buckets, at most STEP_S more than the step,
        so it never reaches past the instant the step moved it to by more than that, which the
        newest bucket takes); each kept event's `ts` by the step itself."""
        for b in self._buckets:
            b.ts += by_s
            b.events = [shifted_ts(e, step) for e in b.events]
        self._compact_at += by_s
        self._changed = True

    # ------------------------------------------------------------------------- inputs

    def observe(self, state: str, wall: float) -> None:
        """The job is in `state` at `wall`; the time since the previous call goes to the state
        seen then, split over the buckets it spans. A clock that went back counts nothing."""
        prev, self._prev = self._prev, (state, wall)
        if prev is None:
            self._at(wall)
            return
        pstate, t = prev
        t = max(t, wall - self.keep_s)  # a daemon frozen for weeks fills a week, no more
        while t < wall:
            b = self._at(t)
            end = min(wall, b.end) if b.end > t else wall
            b.state_s[pstate] = b.state_s.get(pstate, 0.0) + (end - t)
            t = end
        self._at(wall)  # the bucket of `now` exists: a closed one is reported at once

    def sample(
        self,
        wall: float,
        *,
        tokens_per_s: float | None = None,
        step: int | None = None,
        gpus_used_mib: list[float] | None = None,
        gpus_in_use: int | None = None,
    ) -> None:
        """A sample tick's readings: a fresh progress line's tokens/s and step, each GPU's MiB
        (None for a GPU that gave no reading) and how many of them are in use: a bucket of one
        sample, merged into its bucket as buckets merge (Bucket.absorb)."""
        one = Bucket(wall, 0.0)
        if tokens_per_s is not None and math.isfinite(tokens_per_s):
            one.tps_sum, one.tps_n = tokens_per_s, 1.0
        if gpus_used_mib is not None:
            one.gpu_sum, one.gpu_n = [x or 0.0 for x in gpus_used_mib], 1.0
            one.gpus_total = len(gpus_used_mib)
        one.step, one.gpus_in_use = step, gpus_in_use
        self._at(wall).absorb(one)

    def goodput(self, totals: Mapping[str, Any], wall: float) -> None:
        """goodput.Goodput.charged() (or totals()) now: its growth since the last call is
        charged here. The first call only takes the baseline (the totals of earlier daemons are
        not this span's)."""
        flat = {"productive_s": float(totals.get("productive_s") or 0.0)}
        flat["starting_s"] = float(totals.get("starting_s") or 0.0)
        for cause, s in dict(totals.get("lost_s") or {}).items():
            flat[f"lost.{cause}"] = float(s)
        seen, self._goodput_seen = self._goodput_seen, flat
        if seen is None:
            return
        b = None  # after every turn: one pass, no dicts of the growth in between
        for k, v in flat.items():
            if (grown := v - seen.get(k, 0.0)) > 0:
                if b is None:
                    b = self._at(wall)
                b.goodput[k] = b.goodput.get(k, 0.0) + grown

    def event(self, record: Mapping[str, Any], wall: float) -> None:
        """An emitted event; kept (compactly) only if the picture marks or lists it."""
        name = record.get("event")
        stall = name == "detector_fired" and record.get("reason") == "stalled"
        if name not in KEPT_EVENTS and not stall:
            return
        kept: dict[str, Any] = {"ts": record.get("ts") or rfc3339(wall), "event": name}
        kept.update({k: record[k] for k in KEPT_FIELDS if record.get(k) is not None})
        self._at(wall).add_events([kept])
        self._changed = True

    def take_changed(self) -> bool:
        """Whether a bucket closed or a marked event arrived since the last call: the shell
        writes the file then (so a crash loses at most the newest bucket's figures)."""
        changed, self._changed = self._changed, False
        return changed

    # ------------------------------------------------------------------------- buckets

    def _at(self, wall: float) -> Bucket:
        """The bucket holding `wall` (a new newest one when it is past the last); a clock that
        went back lands in the newest bucket, never in the past."""
        last = self._buckets[-1] if self._buckets else None
        if last is not None and wall < last.end:
            return last
        start = float(math.floor(wall / self.bucket_s) * self.bucket_s)
        b = Bucket(start, self.bucket_s)
        self._buckets.append(b)
        self._changed = True
        if start >= self._compact_at:  # merging is O(buckets): every COMPACT_EVERY buckets
            self._compact(wall)
        return b

    def _width_for(self, age_s: float) -> float:
        w = self.bucket_s
        while age_s >= self.per_level * w:
            w *= 2
        return w

    def _compact(self, wall: float) -> None:
        """Drop what is older than keep_s; merge old buckets into aligned wider ones."""
        self._compact_at = wall + COMPACT_EVERY * self.bucket_s
        out: list[Bucket] = []
        for b in self._buckets:
            if b.end <= wall - self.keep_s:
                continue
            w = self._width_for(max(0.0, wall - b.end))
            last = out[-1] if out else None
            if last is not None and b.ts < last.end:
                last.absorb(b)  # it lies inside a wider, older bucket
            elif b.width_s >= w:
                out.append(b)
            else:
                merged = Bucket(float(math.floor(b.ts / w) * w), w)
                if last is not None and merged.ts < last.end:
                    merged = Bucket(last.end, merged.end - last.end)  # never overlap the older
                merged.absorb(b)
                out.append(merged)
        self._buckets = out

    def buckets(self) -> list[Bucket]:
        return list(self._buckets)

    # ------------------------------------------------------------------------- queries

    def query(self, since: float, now: float, columns: int) -> dict[str, Any]:
        """`columns` equal buckets (fewer when the history is shorter: never narrower than
        bucket_s) from `since`, or the history's start if later, to `now`; with the span's
        goodput and its marked events."""
        first = self._buckets[0].ts if self._buckets else now
        start = min(max(since, first), now)
        span = now - start
        n = max(1, min(columns, math.floor(span / self.bucket_s))) if span > 0 else 1
        w = span / n if span > 0 else self.bucket_s
        out = [Bucket(start + i * w, w) for i in range(n)]
        for b in self._buckets:
            if b.end <= start or b.ts >= now:
                continue
            lo = max(0, int((b.ts - start) // w))
            hi = min(n - 1, int((min(b.end, now) - start) // w))
            for i in range(lo, hi + 1):
                o = out[i]
                overlap = min(b.end, o.end) - max(b.ts, o.ts)
                if overlap > 0:
                    o.absorb(figures_only(b), overlap / b.width_s)
            for e in b.events:
                at = event_time(e, b)
                if start <= at <= now:
                    out[min(n - 1, int((at - start) // w))].add_events([e])
        return {
            "since": rfc3339(start),
            "until": rfc3339(now),
            "bucket_s": round(w, 3),
            "history_since": None if not self._buckets else rfc3339(first),
            "buckets": [o.view() for o in out],
            "goodput": span_goodput(out),
        }

    # ------------------------------------------------------------------------- the file

    def to_json(self) -> dict[str, Any]:
        return {
            "version": FORMAT_VERSION,
            "bucket_s": self.bucket_s,
            "buckets": [b.to_json() for b in self._buckets],
        }

    def load(self, data: object, wall: float) -> None:
        """Buckets saved by `to_json()` (of this or another bucket_s), merged as their age now
        says. Raises ValueError, naming what is wrong, and then keeps nothing."""
        if not isinstance(data, Mapping) or data.get("version") != FORMAT_VERSION:
            raise ValueError(f"not a timeline record of version {FORMAT_VERSION}")
        raw = data.get("buckets")
        if not isinstance(raw, list):
            raise ValueError("buckets: expected a list")
        loaded: list[Bucket] = []
        for i, d in enumerate(raw):
            try:
                b = Bucket.from_json(d)
            except (ValueError, TypeError, KeyError, IndexError) as e:
                raise ValueError(f"buckets[{i}]: {e}") from None
            if loaded and b.ts < loaded[-1].end:
                raise ValueError(f"buckets[{i}]: overlaps the one before")
            loaded.append(b)
        self._buckets = loaded + [b for b in self._buckets if not loaded or b.ts >= loaded[-1].end]
        if self._buckets and self._buckets[-1].ts > wall:
            # saved before the wall clock stepped back while no daemon ran: a history in the
            # future would hide all new time (no query reaches it), so it ends by now instead,
            # its events moved with their buckets (the step itself is unknown)
            ahead = self._buckets[-1].end - wall
            back = -math.ceil(ahead / self.bucket_s) * self.bucket_s
            self._shift(back, back)
        self._compact(wall)
