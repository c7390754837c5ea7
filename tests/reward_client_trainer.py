"""A trainer entry for tests of node groups: asks every reward worker's /health (from
AREAL_REWARD_ADDRS, where the launcher says they answer) and exits 0 when all answer 200."""

import os
import sys
import urllib.request

addrs = [a for a in os.environ.get("AREAL_REWARD_ADDRS", "").split(",") if a]
for addr in addrs:
    with urllib.request.urlopen(f"http://{addr}/health", timeout=10) as reply:
        assert reply.status == 200, (addr, reply.status)
print(f"trainer reached {len(addrs)} reward worker(s): {','.join(addrs)}", flush=True)
sys.exit(0 if addrs else 1)
