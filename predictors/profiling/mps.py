"""Start and stop an NVIDIA MPS control daemon for the duration of a co-located run."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

from dltsched.engine.domain.errors import DltschedError

MPS_CONTROL = "nvidia-cuda-mps-control"


def mps_control_binary() -> str:
    """Path of ``nvidia-cuda-mps-control``; a clear error when it is not on PATH."""
    path = shutil.which(MPS_CONTROL)
    if path is None:
        raise DltschedError(f"profile --sharing mps: '{MPS_CONTROL}' not found on PATH; install the NVIDIA "
                            "driver utilities or use --sharing timeslice")
    return path


@contextmanager
def mps_daemon() -> Iterator[str]:
    """Run an MPS daemon with its pipe and log folders in a temporary folder (yielded).

    The ``CUDA_MPS_*`` variables are set in ``os.environ`` while it runs, so that spawned workers
    become MPS clients; they are restored afterwards and the daemon is told to quit.
    """
    binary = mps_control_binary()
    saved = {k: os.environ.get(k) for k in ("CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY")}
    with tempfile.TemporaryDirectory(prefix="dltsched-mps-") as tmp:
        os.environ["CUDA_MPS_PIPE_DIRECTORY"] = os.path.join(tmp, "pipe")
        os.environ["CUDA_MPS_LOG_DIRECTORY"] = os.path.join(tmp, "log")
        for key in saved:
            os.makedirs(os.environ[key])
        try:
            started = subprocess.run([binary, "-d"], capture_output=True, text=True, check=False)
            if started.returncode != 0:
                raise DltschedError(f"profile --sharing mps: '{binary} -d' failed ({started.returncode}): "
                                    f"{started.stderr.strip() or started.stdout.strip()}")
            yield tmp
        finally:
            subprocess.run([binary], input="quit\n", capture_output=True, text=True, check=False)
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
