"""A child for tests/cli/test_child.py: prints "ready", then echoes each line it is sent; on "last words" it
waits for SIGTERM and prints "bye" on its way out. With --silent it prints nothing and waits."""

from __future__ import annotations

import signal
import sys
import time


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: (print("bye", flush=True), sys.exit(0)))
    if "--silent" in sys.argv:
        time.sleep(60)
        return
    print("ready", flush=True)
    for line in sys.stdin:
        if line.strip() == "last words":
            time.sleep(60)
        print(line.strip(), flush=True)


if __name__ == "__main__":
    main()
