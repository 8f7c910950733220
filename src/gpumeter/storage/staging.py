"""A (cluster, day)'s tables written part by part, so that a day larger than memory can be stored."""

from __future__ import annotations

import shutil
from contextlib import suppress
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from gpumeter.storage.files import _install, _sweep_stale_temps, _temp_beside, _write_error


class StagedDay:
    """A (cluster, day)'s tables written part by part into temp files, so that a day larger than memory can be
    stored (a 10,000-GPU raw day). Nothing stored changes until `commit`, which replaces each table's file
    the way `write_day` does (atomic rename locally, one upload on an object store); `discard` (or a failure
    before commit) leaves the stored day as it was."""

    def __init__(self, targets: dict[str, Path], schemas: dict[str, pa.Schema], scratch: Path) -> None:
        """`targets`: each table's stored file; `scratch`: a local folder of this writer's own (an object
        store's parts are staged there before their upload)."""
        self.targets = targets
        self.schemas = schemas
        self.rows = dict.fromkeys(schemas, 0)
        self._scratch = scratch
        self._temps: dict[str, Path] = {}
        self._writers: dict[str, pq.ParquetWriter] = {}

    def _temp_for(self, table: str) -> Path:
        target = self.targets[table]
        if isinstance(target, Path):  # beside the target: the rename is atomic; a dead writer's is swept
            return _temp_beside(target)
        # An object store: a local file, uploaded whole at commit.
        return _temp_beside(self._scratch / f"{table}.parquet")

    def write(self, table: str, rows: pa.Table) -> None:
        if table not in self._writers:
            self._temps[table] = self._temp_for(table)
            self._writers[table] = pq.ParquetWriter(
                self._temps[table], self.schemas[table], compression="zstd"
            )
        try:
            self._writers[table].write_table(rows.cast(self.schemas[table]))
        except OSError as exc:
            self.discard()
            raise _write_error(self.targets[table], exc) from None
        self.rows[table] += rows.num_rows

    def commit(self) -> dict[str, int]:
        """Replace every table's stored file (a table no part had is stored empty); rows per table."""
        try:
            for table, target in self.targets.items():
                if table not in self._writers:
                    self.write(table, self.schemas[table].empty_table())
                temp = self._temps.pop(table)
                try:
                    self._writers.pop(table).close()
                    if isinstance(target, Path):
                        _sweep_stale_temps(target)
                        _install(temp, target)
                    else:
                        target.fs.put_file(str(temp), target.path)
                except OSError as exc:
                    temp.unlink(missing_ok=True)
                    raise _write_error(target, exc) from None
                temp.unlink(missing_ok=True)
        finally:
            self.discard()
        return dict(self.rows)

    def discard(self) -> None:
        for writer in self._writers.values():
            with suppress(OSError):
                writer.close()
        self._writers.clear()
        for temp in self._temps.values():
            temp.unlink(missing_ok=True)
        self._temps.clear()
        shutil.rmtree(self._scratch, ignore_errors=True)
