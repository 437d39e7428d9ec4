"""`coord.run`: a script ends as `asyncio.run` would end it (docs/api.md), only without the
interpreter's teardown. Each case is a script of its own, since it ends its process."""

import sys

import pytest

from tests.workers import run

SCRIPT = """\
import coord

async def main():
    {body}

coord.run(main())
"""


@pytest.mark.parametrize(
    ("body", "code", "err"),
    [
        ("return None", 0, ""),
        ("return 42", 0, ""),
        ("return True", 0, ""),
        ("raise SystemExit(3)", 3, ""),
        ("raise SystemExit(None)", 0, ""),
        ("raise SystemExit('bye')", 1, "bye\n"),
    ],
)
async def test_a_script_exits_as_python_would(body: str, code: int, err: str) -> None:
    exited, out, printed = await run(sys.executable, "-c", SCRIPT.format(body=body))
    assert (exited, out, printed) == (code, "", err)
