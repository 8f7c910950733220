"""A (cluster, day)'s tables written part by part, so that a day larger than memory can be stored."""

from __future__ import annotations

import shutil
from contextlib import suppress
from datetime import date
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from gpumeter.storage.day_commit import DayCommit
from gpumeter.storage.files import (
    _temp_beside,
    _write_error,
    parquet_write_options,
)


class DayInParts:
    """A (cluster, day)'s tables written part by part into temp files, so that a day larger than memory can be
    stored (a 10,000-GPU raw day). Nothing stored changes until `commit`, which replaces every table's file
    at once (gpumeter.storage.day_commit: all staged beside their targets, journaled, then renamed);
    `discard` (or a failure before the journal) leaves the stored day as it was."""

    def __init__(
        self,
        targets: dict[str, Path],
        schemas: dict[str, pa.Schema],
        scratch: Path,
        commit: DayCommit | None = None,
    ) -> None:
        """`targets`: each table's stored file; `scratch`: a local folder of this writer's own (an object
        store's parts are staged there before their upload); `commit`: the day's (Warehouse.day_commit),
        else one without a journal."""
        self._commit = commit or DayCommit(None, "", date.min)
        self.targets = targets
        self.schemas = schemas
        self.rows = dict.fromkeys(schemas, 0)
        self._scratch = scratch
        self._temps: dict[str, Path] = {}
        self._writers: dict[str, pq.ParquetWriter] = {}
        self._files: dict[str, tuple[Path, bytes]] = {}

    def _temp_for(self, table: str) -> Path:
        target = self.targets[table]
        if isinstance(target, Path):  # beside the target: the rename is atomic; a dead writer's is swept
            return _temp_beside(target)
        # An object store: a local file, uploaded whole at commit.
        return _temp_beside(self._scratch / f"{table}.parquet")

    def write(self, table: str, rows: pa.Table) -> None:
        """Rows of `table` in its schema, or with some string columns dictionary-encoded (as the first part
        of the table came: they are written as they are, and read back as the schema's strings)."""
        if table not in self._writers:
            self._temps[table] = self._temp_for(table)
            schema = _writer_schema(self.schemas[table], rows.schema)
            self._writers[table] = pq.ParquetWriter(
                self._temps[table],
                schema,
                **parquet_write_options(schema),
                # Row groups are skipped by time, never by a string: min/max of strings are not worth their cost.
                write_statistics=[f.name for f in schema if not _is_string(f.type)],
                # The file's Arrow schema would name the dictionaries: without it, readers see the strings.
                store_schema=schema == self.schemas[table],
            )
        try:
            self._writers[table].write_table(rows.cast(self._writers[table].schema))
        except OSError as exc:
            self.discard()
            raise _write_error(self.targets[table], exc) from None
        self.rows[table] += rows.num_rows

    def add_file(self, target: Path, data: bytes) -> None:
        """A whole file of the day besides its tables (a DRA snapshot), installed with them at commit."""
        self._files[str(target)] = (target, data)

    def commit(self) -> dict[str, int]:
        """Replace every table's stored file together (a table no part had is stored empty); rows per table.
        The caller holds the day lock."""
        try:
            with self._commit as day:
                for table, target in self.targets.items():
                    if table not in self._writers:
                        self.write(table, self.schemas[table].empty_table())
                    temp = self._temps.pop(table)
                    try:
                        self._writers.pop(table).close()
                    except OSError as exc:
                        temp.unlink(missing_ok=True)
                        raise _write_error(target, exc) from None
                    day.stage_file(target, temp)
                for target, data in self._files.values():
                    temp = _temp_beside(target if isinstance(target, Path) else self._scratch / target.name)
                    try:
                        temp.write_bytes(data)
                    except OSError as exc:
                        temp.unlink(missing_ok=True)
                        raise _write_error(target, exc) from None
                    day.stage_file(target, temp)
        finally:
            self._files.clear()
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


def _is_string(kind: pa.DataType) -> bool:
    return pa.types.is_string(kind) or (pa.types.is_dictionary(kind) and pa.types.is_string(kind.value_type))


def _writer_schema(schema: pa.Schema, first: pa.Schema) -> pa.Schema:
    """`schema`, with the string columns that the first part brings dictionary-encoded kept so."""
    fields = []
    for f in schema:
        came = first.field(f.name) if f.name in first.names else None
        dictionary = came is not None and pa.types.is_dictionary(came.type) and pa.types.is_string(f.type)
        fields.append(f.with_type(pa.dictionary(pa.int32(), pa.string())) if dictionary else f)
    return pa.schema(fields, metadata=schema.metadata)
