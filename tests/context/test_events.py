"""The session's event bus (ocw/context/events.py): listeners run in order with a copy
of the payload; one that raises is logged by the event's name and the others still run."""
from __future__ import annotations

import logging

from ocw.context.events import EventBus


def test_a_listener_that_raises_is_logged_by_event_and_the_rest_still_run(caplog):
    bus, seen = EventBus(), []

    def broken(name, payload):
        raise RuntimeError("widget gone")

    bus.subscribe(broken)
    bus.subscribe(lambda name, payload: seen.append((name, payload)))
    with caplog.at_level(logging.ERROR, logger="ocw"):
        bus.emit("turn_finished", {"tokens": 5})
    assert seen == [("turn_finished", {"tokens": 5})]
    (record,) = caplog.records
    assert record.getMessage() == "ocw event listener failed for turn_finished"
    assert record.exc_info and "widget gone" in str(record.exc_info[1])


def test_payloads_are_copies_and_unsubscribing_stops_delivery():
    bus, seen = EventBus(), []
    stop = bus.subscribe(lambda name, payload: seen.append(payload) or payload.update(touched=True))
    sent = {"n": 1}
    bus.emit("occupancy_changed", sent)
    bus.emit("head_moved")
    assert sent == {"n": 1} and seen == [{"n": 1, "touched": True}, {"touched": True}]
    stop()
    stop()  # twice: no error
    bus.emit("head_moved")
    assert len(seen) == 2 and not bus.has_listeners()
