"""The grid's main job, as a user runs it: one session doing real work."""

from __future__ import annotations

from sandgrid.client import Client

with Client() as client, client.session(type="python") as session:
    session.write_file("numbers.txt", "\n".join(str(n) for n in range(1, 101)))
    result = session.exec(
        python="import pathlib\n"
        "nums = [int(x) for x in pathlib.Path('numbers.txt').read_text().split()]\n"
        "print(f'sum of {len(nums)} numbers = {sum(nums)}')\n"
    )
    print(f"session {session.id} on node {result.node}: {result.stdout.strip()}")
    print(f"exit code {result.exit_code}, {result.duration_ms:.1f} ms in the sandbox")
