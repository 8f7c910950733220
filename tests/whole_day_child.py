"""A child process for tests/test_whole_day.py: a real whole-day commit of TABLES that SIGKILLs itself at a
chosen moment. `python tests/whole_day_child.py <warehouse> <value> after-rename:<n> | before-journal`."""

from __future__ import annotations

import os
import signal
import sys
from datetime import date
from pathlib import Path

import pyarrow as pa

from gpumeter.storage import day_commit
from gpumeter.storage.paths import MARTS
from gpumeter.storage.warehouse import Warehouse

DAY = date(2026, 11, 1)
CLUSTER = "c1"
TABLES = ("t_one", "t_two", "t_three", "t_four")


def day_rows(table: str, value: str) -> pa.Table:
    return pa.table({"cluster": [CLUSTER], "day": [DAY], "table_name": [table], "value": [value]})


def main(root: str, value: str, moment: str) -> None:
    real_move, real_journal = day_commit.move, day_commit.atomic_write_text
    renamed = 0

    def move(source: Path, target: Path) -> None:
        nonlocal renamed
        real_move(source, target)
        renamed += 1
        if moment == f"after-rename:{renamed}":
            os.kill(os.getpid(), signal.SIGKILL)

    def write_journal(path: Path, text: str) -> Path:
        if moment == "before-journal":
            os.kill(os.getpid(), signal.SIGKILL)  # every table staged, the journal not yet written
        return real_journal(path, text)

    # The child's own commit only: its renames and its journal write, to die between two of them.
    day_commit.move, day_commit.atomic_write_text = move, write_journal  # type: ignore[assignment]
    warehouse = Warehouse.at(root)
    with warehouse.day_lock(DAY, cluster=CLUSTER), warehouse.day_commit(CLUSTER, DAY) as commit:
        for table in TABLES:
            commit.stage_table(warehouse.day_path(MARTS, table, CLUSTER, DAY), day_rows(table, value))
    sys.exit("the commit ended without being killed")


if __name__ == "__main__":
    main(*sys.argv[1:4])
