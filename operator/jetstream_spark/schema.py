"""The message schema (modelled on Spark's Kafka source) and its Arrow form.

Readers hand Spark `pyarrow.RecordBatch`es, which Spark accepts only if their Arrow schema is
exactly the one it derives from the Spark schema, so both come from here.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from .options import JetStreamOptionError

HEADER_TYPE = StructType(
    [StructField("key", StringType(), True), StructField("value", BinaryType(), True)]
)
HEADERS_TYPE = ArrayType(HEADER_TYPE, True)

_FIELDS: dict[str, DataType] = {
    "stream": StringType(),
    "subject": StringType(),
    "sequence": LongType(),
    "timestamp": TimestampType(),
    "data": BinaryType(),
    "headers": HEADERS_TYPE,
}

# Headers the server adds to direct-get replies; they describe the reply, not the message.
DIRECT_GET_HEADERS = frozenset(
    {
        "Nats-Stream",
        "Nats-Subject",
        "Nats-Sequence",
        "Nats-Time-Stamp",
        "Nats-Num-Pending",
        "Nats-Last-Sequence",
    }
)


def message_schema(include_headers: bool = False) -> StructType:
    """stream, subject, sequence, timestamp, data [, headers]."""
    names = [name for name in _FIELDS if include_headers or name != "headers"]
    return StructType([StructField(name, _FIELDS[name], True) for name in names])


def check_read_schema(schema: StructType) -> tuple[str, ...]:
    """Accept a user-given schema made of known columns with their own types, in any order."""
    names: list[str] = []
    for field in schema.fields:
        expected = _FIELDS.get(field.name)
        if expected is None:
            raise JetStreamOptionError(
                f"unknown column '{field.name}' in the read schema; "
                f"the jetstream source has {', '.join(_FIELDS)}"
            )
        if field.dataType != expected:
            raise JetStreamOptionError(
                f"column '{field.name}' must be {expected.simpleString()}, "
                f"got {field.dataType.simpleString()}"
            )
        names.append(field.name)
    return tuple(names)


def arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema Spark expects for batches of `schema` (UTC microsecond timestamps)."""
    return to_arrow_schema(schema, timezone="UTC")


def parse_header_block(block: bytes) -> list[tuple[str, bytes]]:
    """`NATS/1.0[ status]\\r\\nKey: value\\r\\n...` to ordered pairs, keeping repeated keys."""
    pairs: list[tuple[str, bytes]] = []
    for line in block.split(b"\r\n")[1:]:
        key, sep, value = line.partition(b":")
        if sep and key:
            pairs.append((key.strip().decode("utf-8", "replace"), value.strip()))
    return pairs


class ColumnBuffer:
    """One fetch's messages, column by column, turned into a single Arrow record batch."""

    __slots__ = ("datas", "headers", "iso_times", "seqs", "subjects", "times_ns")

    def __init__(self, with_headers: bool) -> None:
        self.subjects: list[bytes] = []
        self.seqs: list[int] = []
        self.iso_times: list[bytes] = []  # RFC 3339 strings from direct get
        self.times_ns: list[int] = []  # epoch nanoseconds from consumer ack subjects
        self.datas: list[bytes] = []
        self.headers: list[list[tuple[str, bytes]]] | None = [] if with_headers else None

    def __len__(self) -> int:
        return len(self.seqs)

    def _timestamps(self) -> pa.Array:
        if self.iso_times:
            # Arrow's ISO-8601 cast is vectorised; nanoseconds are truncated to Spark's micros.
            nanos = pa.array(self.iso_times, pa.string()).cast(pa.timestamp("ns", tz="UTC"))
        else:
            nanos = pa.array(self.times_ns, pa.int64()).cast(pa.timestamp("ns", tz="UTC"))
        return nanos.cast(pa.timestamp("us", tz="UTC"), safe=False)

    def to_batch(self, stream: str, schema: pa.Schema) -> pa.RecordBatch:
        size = len(self.seqs)
        columns: list[pa.Array] = []
        for field in schema:
            name = field.name
            if name == "stream":
                column = pa.array([stream] * size, field.type)
            elif name == "subject":
                column = pa.array(self.subjects, field.type)
            elif name == "sequence":
                column = pa.array(self.seqs, field.type)
            elif name == "timestamp":
                column = self._timestamps()
            elif name == "data":
                column = pa.array(self.datas, field.type)
            elif name == "headers":
                column = pa.array(self.headers or [[]] * size, field.type)
            else:  # pragma: no cover - check_read_schema rejects unknown columns
                raise JetStreamOptionError(f"unknown column {name}")
            columns.append(column)
        return pa.RecordBatch.from_arrays(columns, schema=schema)


def write_schema_columns(schema: StructType) -> dict[str, DataType]:
    return {field.name: field.dataType for field in schema.fields}


def check_write_schema(
    schema: StructType, default_subject: str | None, message_id_column: str | None
) -> None:
    """Fail on the driver, before any task runs, if rows cannot become messages."""
    columns = write_schema_columns(schema)
    data = columns.get("data")
    if data is None:
        raise JetStreamOptionError("the DataFrame to write needs a 'data' column")
    if not isinstance(data, BinaryType | StringType):
        raise JetStreamOptionError(
            f"column 'data' must be binary or string, got {data.simpleString()}"
        )
    subject = columns.get("subject")
    if subject is None and default_subject is None:
        raise JetStreamOptionError("give a 'subject' column or the 'subject' option")
    if subject is not None and not isinstance(subject, StringType):
        raise JetStreamOptionError(f"column 'subject' must be string, got {subject.simpleString()}")
    headers = columns.get("headers")
    if headers is not None and not _is_headers_type(headers):
        raise JetStreamOptionError(
            "column 'headers' must be array<struct<key:string,value:binary|string>> "
            f"or map<string,binary|string>, got {headers.simpleString()}"
        )
    if message_id_column is not None and message_id_column not in columns:
        raise JetStreamOptionError(
            f"option 'messageIdColumn' names '{message_id_column}', which is not a column"
        )


def _is_headers_type(data_type: DataType) -> bool:
    text_or_bytes = (BinaryType, StringType)
    if isinstance(data_type, MapType):
        return isinstance(data_type.keyType, StringType) and isinstance(
            data_type.valueType, text_or_bytes
        )
    if isinstance(data_type, ArrayType) and isinstance(data_type.elementType, StructType):
        fields: Sequence[StructField] = data_type.elementType.fields
        names = [field.name for field in fields]
        return (
            names == ["key", "value"]
            and isinstance(fields[0].dataType, StringType)
            and isinstance(fields[1].dataType, text_or_bytes)
        )
    return False
