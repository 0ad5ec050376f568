"""A child for tests/cli/test_child.py: prints "ready", then echoes each line it is sent; on "last words" it
waits for SIGTERM and prints "bye" on its way out. With --silent it prints nothing and waits."""

from __future__ import annotations

import signal
import sys
import time


def main() -> None:
    if "--silent" in sys.argv:
        time.sleep(60)
        return
    # SIGTERM stays pending until waited for: a handler could run too late, when the signal landed just before
    # a sleep began, and the sleep would outlast the parent's patience.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    print("ready", flush=True)
    for line in sys.stdin:
        if line.strip() == "last words":
            signal.sigtimedwait({signal.SIGTERM}, 60)
            print("bye", flush=True)
            return
        print(line.strip(), flush=True)


if __name__ == "__main__":
    main()
