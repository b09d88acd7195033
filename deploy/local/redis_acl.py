"""Print the Redis ACL file of the grid's roles from ``secrets.env`` (23.19).

    python redis_acl.py SECRETS_ENV > users.acl

One user per role, each with its own password, stored as its SHA-256 (the
file never holds a password): ``sg-admin`` (operators, the bring-up scripts,
the tests: everything), ``sg-api``, ``sg-worker`` and ``sg-flower`` (every
command but the dangerous ones: no CONFIG, FLUSHDB, KEYS, MONITOR, ACL,
SHUTDOWN, DEBUG; INFO allowed), ``sg-metrics`` (read-only, for an exporter).
The ``default`` user is off: no connection without a password.
Used by deploy/local/credentials.sh (make up, compose) and deploy/k8s/secrets.sh.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

__all__ = ["ROLES", "acl_file", "main", "read_env"]

_SERVICE = "~* &* +@all -@dangerous +info"
#: Redis user -> (the secrets.env key of its password, its rules).
ROLES = {
    "sg-admin": ("SG_REDIS_PW_ADMIN", "~* &* +@all"),
    "sg-api": ("SG_REDIS_PW_API", _SERVICE),
    "sg-worker": ("SG_REDIS_PW_WORKER", _SERVICE),
    "sg-flower": ("SG_REDIS_PW_FLOWER", _SERVICE),
    "sg-metrics": ("SG_REDIS_PW_METRICS", "~* resetchannels -@all +@read +@connection +info -keys"),
}


def read_env(path: Path) -> dict[str, str]:
    """``KEY=VALUE`` lines of an env file."""
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
    return {k.strip(): v.strip() for k, v in pairs if not k.lstrip().startswith("#")}


def acl_file(secrets: dict[str, str]) -> str:
    """The ACL file's text: ``default`` off, then one line per role."""
    lines = ["user default off resetpass nocommands"]
    for user, (key, rules) in ROLES.items():
        digest = hashlib.sha256(secrets[key].encode()).hexdigest()
        lines.append(f"user {user} on #{digest} {rules}")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> None:
    sys.stdout.write(acl_file(read_env(Path(argv[1]))))


if __name__ == "__main__":
    main(sys.argv)
