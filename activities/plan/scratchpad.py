"""The `write_scratchpad` activity: a plan's scratchpad files (seed 004's layout) on the worker.

Whoever can start a plan names its scratchpad directory; the worker alone decides where that
lands (`worker.scratchpad_root` in its agents file, none by default). So a write is refused
unless the worker has a root, and every path is checked again here, after resolving symlinks,
to stay under it. Files are replaced atomically (a reader never sees half a report) and bounded
in size."""

import asyncio
import os
import tempfile
from pathlib import Path

from temporalio import activity

from coord.models import calls as refs
from coord.models.mesh.config import WorkerSettings
from coord.models.plan.report import ScratchpadWrite
from coord.models.wire.contract import FailureType, failure

MAX_FILE_BYTES = 1024 * 1024
"""The most one scratchpad file may hold (UTF-8)."""
NO_ROOT = (
    "this worker keeps no scratchpads; allow plans to write them with "
    "`worker: {scratchpad_root: /some/dir}` in its agents file (`coord worker --agents FILE`)"
)


def refused(message: str) -> Exception:
    return failure(FailureType.SCRATCHPAD_REFUSED, message, non_retryable=True)


def target_path(root: Path, write: ScratchpadWrite, name: str) -> Path:
    """Where `name` goes: under `<root>/<directory>/<plan_id>/`, or refused when it would land
    anywhere else (an absolute path, `..`, or a symlink leading out)."""
    target = (root / write.directory / write.plan_id / name).resolve()
    if not target.is_relative_to(root) or target == root:
        raise refused(f"scratchpad path {write.directory}/{write.plan_id}/{name} leaves {root}")
    return target


def write_atomically(target: Path, text: str) -> None:
    """Write beside the target, then rename over it: the file is whole or absent."""
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(
        dir=target.parent, prefix=f".{target.name}.", suffix=".tmp"
    )
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def write_files(root: Path, write: ScratchpadWrite) -> list[str]:
    """Check every file first, so a refused write writes nothing."""
    targets = {}
    for name, text in write.files.items():
        size = len(text.encode())
        if size > MAX_FILE_BYTES:
            raise refused(f"scratchpad file {name} is {size} bytes; at most {MAX_FILE_BYTES}")
        targets[target_path(root, write, name)] = text
    for target, text in targets.items():
        write_atomically(target, text)
    return [str(target.relative_to(root)) for target in targets]


class ScratchpadWriter:
    def __init__(self, settings: WorkerSettings) -> None:
        self._root = settings.scratchpad_root

    @activity.defn(name=refs.WRITE_SCRATCHPAD.name)
    async def write_scratchpad(self, write: ScratchpadWrite) -> list[str]:
        """The paths written, relative to the worker's scratchpad root."""
        if self._root is None:
            raise refused(NO_ROOT)
        root = Path(self._root).expanduser().resolve()
        return await asyncio.to_thread(write_files, root, write)
