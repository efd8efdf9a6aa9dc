"""``lifecycle-harness merge``: its options and what it prints; the merge is
:mod:`harness.campaigns.merge`.
"""

from __future__ import annotations

import argparse
from typing import Any

from harness.campaigns.merge import DEFAULT_MERGE_DIR, merge_dirs


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "merge", help="combine the report dirs of --shard runs into one report set",
        description="Combine the report dirs written by `run --shard I/N` (or `sweep --shard "
        "I/N`) on several machines into one report set, the same as one unsharded run. Exit "
        "0 = the merged run passed, 1 = it failed, 2 = the dirs are not the complete shards "
        "of one command.",
    )
    parser.add_argument("dirs", nargs="+", metavar="DIR", help="the shards' report dirs")
    parser.add_argument("--report-dir", default=DEFAULT_MERGE_DIR, metavar="DIR",
                        help=f"where the merged reports go (default: {DEFAULT_MERGE_DIR})")
    parser.set_defaults(handler=cmd_merge)


def cmd_merge(args: argparse.Namespace, ctx: Any) -> int:
    code, lines = merge_dirs(args.dirs, args.report_dir)
    for line in lines:
        ctx.out(line)
    return code
