"""A claim held by another live process, for the tests of stores that several processes share
(``experiments.groundtruth.store``)."""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def held_by_another_process(claim: Path, result: Path, kept: Path, asked: list) -> Iterator[None]:
    """While the block runs, ``claim`` is held by a live process of this host (a sleeper) that
    has not saved ``result`` yet (it waits at ``kept``).  Once the code under test asks for the
    claim (its path appears in ``asked``), that process saves the result and releases."""
    from updatescope.experiments.groundtruth import store as st

    shutil.move(result, kept)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    holder = {"host": socket.gethostname(), "pid": other.pid, "start": st._process_start(other.pid)}
    claim.write_text(json.dumps({**holder, "time": time.time()}))

    def saves_it() -> None:
        while claim not in asked:
            time.sleep(0.02)
        shutil.move(kept, result)
        claim.unlink()

    helper = threading.Thread(target=saves_it, daemon=True)
    helper.start()
    try:
        yield
    finally:
        other.kill()
        other.wait()
        helper.join(5)
