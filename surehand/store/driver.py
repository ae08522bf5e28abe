"""Core statements run on the DBAPI cursor directly, for the session's hot writes.

On the session path SQLAlchemy's per-execution work (a wrapped cursor, result metadata built
from the driver's column descriptions, execution events) costs more CPU than the statement
itself: about 250 us against psycopg's 160 us per statement, measured on this project's CI
machine. A :class:`DriverStatement` is the same Core statement compiled once per dialect; its
parameters and results go through the same type processors Core uses (the statement's bind
parameter types, the returned columns' types), so values are converted exactly as Core
converts them. Driver errors are wrapped as SQLAlchemy wraps them (and a connection the
database dropped is invalidated), so the store's transactions translate them as usual.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import BindParameter, ColumnElement, Connection, bindparam, exc
from sqlalchemy.engine import Dialect
from sqlalchemy.sql.expression import Executable

Processor = Callable[[Any], Any] | None


@dataclass(frozen=True)
class _Compiled:
    sql: str
    names: tuple[str, ...]  # bind names in order: the parameters of a positional paramstyle
    positional: bool
    literals: Mapping[str, Any]  # values of the statement's own literal parameters
    bind: Mapping[str, Processor]
    result: tuple[Processor, ...]


class DriverStatement:
    """One Core statement, compiled once per dialect and executed on the DBAPI cursor."""

    def __init__(self, statement: Executable, returns: Iterable[ColumnElement[Any]] = ()) -> None:
        self.statement = statement
        self.returns = tuple(returns)  # the columns of each result row, in order
        self._row: Any = namedtuple("_Row", [column.key for column in self.returns])  # type: ignore[misc]
        self._compiled: dict[str, _Compiled] = {}

    def rows(self, connection: Connection, params: Mapping[str, Any]) -> list[Any]:
        """Execute and fetch every result row, converted to Python values as Core would; each
        row is a named tuple with the returned columns' keys as its attributes."""
        compiled = self._compile(connection.dialect)
        cursor = self._execute(connection, compiled, params)
        try:
            fetched = cursor.fetchall()
        finally:
            cursor.close()
        return [self._row._make(_convert(row, compiled.result)) for row in fetched]

    def one_or_none(self, connection: Connection, params: Mapping[str, Any]) -> Any:
        """The only result row, or None."""
        rows = self.rows(connection, params)
        if len(rows) > 1:
            raise exc.MultipleResultsFound(f"{len(rows)} rows from a one-row statement")
        return rows[0] if rows else None

    def rowcount(self, connection: Connection, params: Mapping[str, Any]) -> int:
        """Execute a statement that returns no rows; the number of rows it touched."""
        cursor = self._execute(connection, self._compile(connection.dialect), params)
        try:
            return int(cursor.rowcount)
        finally:
            cursor.close()

    def _compile(self, dialect: Dialect) -> _Compiled:
        compiled = self._compiled.get(dialect.name)
        if compiled is None:
            compiled = self._compiled[dialect.name] = _compile(
                self.statement, self.returns, dialect
            )
        return compiled

    def _execute(
        self, connection: Connection, compiled: _Compiled, params: Mapping[str, Any]
    ) -> Any:
        values = _bound(compiled, params)
        dbapi_connection = connection.connection.dbapi_connection
        assert dbapi_connection is not None  # a checked-out connection has one
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(compiled.sql, values)
        except Exception as error:
            cursor.close()
            _reraise(connection, compiled.sql, values, error)
        return cursor


def common_binds(
    names: Mapping[str, str], types: Mapping[str, Any]
) -> dict[str, BindParameter[Any]]:
    """Bind parameters for columns that several rows of one statement take from one common
    parameter: ``names`` maps a column to its parameter, ``types`` a column to its type."""
    return {column: bindparam(name, type_=types[column]) for column, name in names.items()}


def own_params(
    prefix: str, row: Mapping[str, Any], common: Mapping[str, str], params: Mapping[str, Any]
) -> dict[str, Any]:
    """``row``'s values as parameters named ``prefix + column``, except the ``common``
    columns, whose values must equal the common parameter they are taken from (ValueError
    otherwise: the statement would write a value the caller did not ask for)."""
    for name, parameter in common.items():
        if name in row and parameter in params and row[name] != params[parameter]:
            raise ValueError(f"{name}={row[name]!r} differs from {parameter}={params[parameter]!r}")
    return {f"{prefix}{name}": value for name, value in row.items() if name not in common}


def _compile(
    statement: Executable, returns: Sequence[ColumnElement[Any]], dialect: Dialect
) -> _Compiled:
    compiled = statement.compile(dialect=dialect)  # type: ignore[attr-defined]
    # bind_names maps each rendered parameter to its name (anonymous ones resolved).
    binds = {name: bind for bind, name in compiled.bind_names.items()}
    names = tuple(compiled.positiontup or binds)
    return _Compiled(
        sql=compiled.string,
        names=names,
        positional=bool(compiled.positional),
        literals={name: binds[name].value for name in names if not binds[name].required},
        bind={name: _bind_processor(binds[name].type, dialect) for name in names},
        result=tuple(_result_processor(column.type, dialect) for column in returns),
    )


def _bind_processor(type_: Any, dialect: Dialect) -> Processor:
    processor: Processor = type_.dialect_impl(dialect).bind_processor(dialect)
    return processor


def _result_processor(type_: Any, dialect: Dialect) -> Processor:
    processor: Processor = type_.dialect_impl(dialect).result_processor(dialect, None)
    return processor


def _bound(compiled: _Compiled, params: Mapping[str, Any]) -> Sequence[Any] | dict[str, Any]:
    values: dict[str, Any] = {}
    for name in compiled.names:
        value = params[name] if name in params else compiled.literals[name]
        processor = compiled.bind[name]
        values[name] = processor(value) if processor is not None else value
    if compiled.positional:
        return [values[name] for name in compiled.names]
    return values


def _convert(row: Sequence[Any], processors: Sequence[Processor]) -> tuple[Any, ...]:
    return tuple(
        processor(value) if processor is not None else value
        for value, processor in zip(row, processors, strict=True)
    )


def _reraise(connection: Connection, sql: str, params: Any, error: Exception) -> None:
    """Raise ``error`` wrapped as SQLAlchemy wraps driver errors; invalidate a dropped
    connection first so that the pool does not hand it out again."""
    dialect = connection.dialect
    base = dialect.loaded_dbapi.Error
    if not isinstance(error, base):
        raise error
    invalidated = dialect.is_disconnect(error, connection.connection.dbapi_connection, None)
    if invalidated:
        # As Core does on a disconnect: every pooled connection older than this one is
        # presumed dead too (a database restart drops them all), then this one is discarded.
        connection.engine.pool._invalidate(connection.connection, error)
        connection.invalidate(error)
    raise exc.DBAPIError.instance(
        sql, params, error, base, connection_invalidated=invalidated, dialect=dialect
    ) from error
