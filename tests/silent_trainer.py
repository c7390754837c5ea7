"""A trainer entry point that is not ours: it writes no heartbeats and never imports the
launcher's runtime (as AReaL's trainer), for the watchdog of such entries (silence.py). Two
torchrun ranks; SILENT_MODE says how they go wrong:

    ended   rank 0 logs an error and returns 0 (exit 0, the error swallowed); rank 1 waits for
            it forever, saying so every 0.2 s (output: only "a rank ended" can call it hung)
    silent  rank 0 raises, and a non-daemon thread keeps its process alive (the interpreter
            waits for the thread at exit); rank 1 sleeps: no output and no CPU from either

Each prints `<what> at <time.time()>` when it goes wrong, for the tests' clocks.
"""

import os
import sys
import threading
import time

MODE = os.environ.get("SILENT_MODE", "silent")
RANK = int(os.environ["RANK"])


def wait_for_peer() -> None:
    while True:
        print(f"rank {RANK} waits for rank 0", flush=True)
        time.sleep(0.2)


def sleep_for_ever() -> None:
    while True:
        time.sleep(3600)


def main() -> int:
    time.sleep(0.5)
    if RANK != 0:
        wait_for_peer() if MODE == "ended" else sleep_for_ever()
    if MODE == "ended":
        print(f"rank 0: weight update failed; giving up at {time.time()}", flush=True)
        return 0
    threading.Thread(target=sleep_for_ever, name="keeps-the-process-alive").start()
    print(f"rank 0 raises at {time.time()}", flush=True)
    raise RuntimeError("weight update failed")


if __name__ == "__main__":
    sys.exit(main())
