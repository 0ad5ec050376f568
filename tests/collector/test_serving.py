"""Signal handling of the long-running commands."""

from __future__ import annotations

import signal
import threading

from streamscope_collector.serving import stop_on_signals, wait_until_set


def test_sigterm_delivered_to_another_thread_still_stops_the_main_threads_wait():
    """The kernel may hand a process's SIGTERM to any of its threads (the embedded engine runs many); the
    main thread's wait must still see it."""
    fallback = threading.Event()

    def signal_from_another_thread(stop: threading.Event) -> None:
        signal.pthread_kill(threading.get_ident(), signal.SIGTERM)
        if not stop.wait(10):  # the wait did not notice: end it anyway, so the test fails instead of hanging
            fallback.set()
            stop.set()

    with stop_on_signals(threading.Event()) as stop:
        sender = threading.Thread(target=signal_from_another_thread, args=(stop,))
        sender.start()
        wait_until_set(stop)
        sender.join()
    assert not fallback.is_set(), "SIGTERM on another thread did not end the wait"
