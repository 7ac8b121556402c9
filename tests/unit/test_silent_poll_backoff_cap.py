"""The wait before a silent agent's next Status poll (SILENT_POLL_S doubled per unanswered poll, up to
SILENT_POLL_MAX_S) must stay computable however long the agent stays silent: an agent whose heartbeats get through
while its polls do not (the one-way partition the wait is for) is never declared lost, and after 1,025 unanswered
polls (about 68 min at 4 s each) ``SILENT_POLL_S * 2 ** 1024`` raised OverflowError in every poll round, so the engine
loop failed every turn and no job's end was seen again."""

from __future__ import annotations

from tests.unit.scripted_agent import TableAgent, backend_on


def test_a_long_silent_agent_does_not_break_the_poll_round() -> None:
    quiet, fine = TableAgent("quiet", ("q-h0",)), TableAgent("fine", ("f-h0",))
    with backend_on(quiet, fine) as backend:
        backend.poll()
        quiet.mute = True  # its Status unanswered (UNAVAILABLE)
        handle = backend.agents["quiet"]
        handle.misses, handle.next_poll = 1024, 0.0  # (as after 1,024 unanswered polls in a row)
        handle.idle_until = 0.0  # (it runs nothing: asked now, not a second after its last answer)
        backend.poll()  # raised OverflowError: int too large to convert to float
        assert handle.silent and handle.misses == 1025
        assert handle.next_poll > 0.0
        handle.next_poll = 0.0
        backend.poll()  # and at every round after
        assert not backend.agents["fine"].silent
