"""A trainer entry for the restart tests: the first start leaves a daemon behind and fails.

Start 0 (AREAL_RESTART=0): forks a grandchild that double-forks, calls setsid (so it leaves
the trainer's process tree and session, keeping its environment), writes its pid to
<run folder>/escapee.pid and sleeps; then exits 1. Start 1: reads that pid, waits up to 3 s for
it to be gone, and writes "gone" or "alive" to <run folder>/escapee.state; exits 0.
"""

import os
import sys
import time
from pathlib import Path

run_dir = Path(os.environ["AREAL_RUN_DIR"])
pid_file = run_dir / "escapee.pid"
if os.environ.get("AREAL_RESTART", "0") == "0":
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            pid_file.write_text(str(os.getpid()))
            time.sleep(3600)
        os._exit(0)
    os.wait()
    while not pid_file.exists():
        time.sleep(0.05)
    sys.exit(1)
pid = int(pid_file.read_text())
deadline = time.monotonic() + 3
while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
    time.sleep(0.05)
(run_dir / "escapee.state").write_text("alive" if Path(f"/proc/{pid}").exists() else "gone")
