"""Typed, validated views of the string options Spark hands to the data source.

Everything here is a frozen, picklable dataclass: Spark ships readers and writers to other
processes, so they carry settings, never live connections or SSL contexts (those are built
inside the task that uses them).
"""

from __future__ import annotations

import difflib
import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum
from typing import Any

DEFAULT_SERVERS = ("nats://127.0.0.1:4222",)
DEFAULT_MAX_MESSAGES_PER_PARTITION = 100_000
DEFAULT_FETCH_BATCH = 10_000
DEFAULT_MAX_IN_FLIGHT = 1_000
DEFAULT_MAX_TRIGGER_DELAY = 15 * 60.0
_SUBJECT_TOKEN = re.compile(r"^[^\s.*>]+$")

CONNECTION_OPTIONS = (
    "servers",
    "user",
    "password",
    "token",
    "nkeySeed",
    "nkeySeedFile",
    "credsFile",
    "tlsCaFile",
    "tlsCertFile",
    "tlsKeyFile",
    "tlsHostname",
    "tlsHandshakeFirst",
    "domain",
    "connectionName",
    "connectTimeout",
    "requestTimeout",
)
READ_OPTIONS = (
    "stream",
    "subjectFilter",
    "startingOffsets",
    "startingTimestamp",
    "endingOffsets",
    "endingTimestamp",
    "minPartitions",
    "maxMessagesPerPartition",
    "maxMessagesPerTrigger",
    "minMessagesPerTrigger",
    "maxTriggerDelay",
    "failOnDataLoss",
    "includeHeaders",
    "readMethod",
    "fetchBatchSize",
)
WRITE_OPTIONS = (
    "subject",
    "stream",
    "writeId",
    "messageIdColumn",
    "maxInFlight",
    "ackTimeout",
)
# Spark's Kafka source and sink names whose meaning is the same here.
CONNECTION_ALIASES = {"kafka.bootstrap.servers": "servers", "url": "servers"}
READ_ALIASES = {
    "subscribe": "stream",
    "maxOffsetsPerTrigger": "maxMessagesPerTrigger",
    "minOffsetsPerTrigger": "minMessagesPerTrigger",
    "maxRecordsPerPartition": "maxMessagesPerPartition",
}
WRITE_ALIASES = {"topic": "subject"}
# Set by Spark itself for some plans, not by the user.
_SPARK_OPTIONS = ("path", "checkpointLocation", "queryName")


class JetStreamOptionError(ValueError):
    """An option is missing, unknown in value, or inconsistent with another option."""


class Position(Enum):
    """How a start or end option was given; `SEQUENCE` and `TIME` carry a value."""

    EARLIEST = "earliest"
    LATEST = "latest"
    SEQUENCE = "sequence"
    TIME = "time"


@dataclass(frozen=True)
class Bound:
    """A start or end of the range to read: a named position, a sequence or a time."""

    position: Position
    sequence: int = 0
    time: datetime | None = None

    def describe(self) -> str:
        if self.position is Position.SEQUENCE:
            return f"sequence {self.sequence}"
        if self.position is Position.TIME and self.time is not None:
            return f"time {rfc3339(self.time)}"
        return str(self.position.value)


class ReadMethod(Enum):
    """`auto` uses batched direct get when the stream allows it, else a pull consumer."""

    AUTO = "auto"
    DIRECT = "direct"
    CONSUMER = "consumer"


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    # Spark passes a case-insensitive dict already; plain dicts (tests, helpers) may not be.
    return {str(key).lower(): str(value) for key, value in options.items() if value is not None}


def normalise(
    options: Mapping[str, str], known: tuple[str, ...], aliases: Mapping[str, str], what: str
) -> dict[str, str]:
    """Lower-case keys, aliases renamed, and any unknown option refused.

    A misspelt option would otherwise be ignored silently (a read limit that never applies);
    the error names the closest known option.
    """
    names = {name.lower(): name for name in known + CONNECTION_OPTIONS}
    renames = {
        alias.lower(): target.lower() for alias, target in {**CONNECTION_ALIASES, **aliases}.items()
    }
    ignored = {name.lower() for name in _SPARK_OPTIONS}
    result: dict[str, str] = {}
    given: dict[str, str] = {}
    for key, value in _lower(options).items():
        if key in ignored:
            continue
        canonical = renames.get(key, key)
        original = _original(options, key)
        if canonical not in names:
            choices = list(names.values()) + list(aliases)
            close = difflib.get_close_matches(
                key, [choice.lower() for choice in choices], n=1, cutoff=0.6
            )
            hint = ""
            if close:
                hint = f"; did you mean '{next(c for c in choices if c.lower() == close[0])}'?"
            raise JetStreamOptionError(f"unknown option '{original}' for a jetstream {what}{hint}")
        if canonical in result:
            raise JetStreamOptionError(
                f"options '{given[canonical]}' and '{original}' mean the same; set only one"
            )
        result[canonical] = value
        given[canonical] = original
    return result


def _original(options: Mapping[str, str], lowered: str) -> str:
    for key in options:
        if str(key).lower() == lowered:
            return str(key)
    return lowered


def parse_duration(value: str, name: str) -> float:
    """Seconds from '15m', '30s', '500ms', '1h' or a plain number of seconds."""
    found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|min|h)?\s*", value.lower())
    if found is None:
        raise JetStreamOptionError(
            f"option '{name}' must be a duration such as 30s, 15m or 500ms, got {value!r}"
        )
    scale = {"ms": 0.001, "s": 1.0, None: 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
    return float(found.group(1)) * scale[found.group(2)]


def _get(options: Mapping[str, str], name: str) -> str | None:
    value = options.get(name.lower())
    if value is None:
        return None
    text = str(value).strip()
    return text or None


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    value = _get(options, name)
    if value is None:
        return default
    lowered = value.lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise JetStreamOptionError(f"option '{name}' must be true or false, got {value!r}")


def _int(options: Mapping[str, str], name: str, default: int | None, minimum: int) -> int | None:
    value = _get(options, name)
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        raise JetStreamOptionError(f"option '{name}' must be an integer, got {value!r}") from None
    if number < minimum:
        raise JetStreamOptionError(f"option '{name}' must be >= {minimum}, got {number}")
    return number


def _seconds(options: Mapping[str, str], name: str, default: float) -> float:
    value = _get(options, name)
    if value is None:
        return default
    try:
        number = float(value)
    except ValueError:
        raise JetStreamOptionError(f"option '{name}' must be seconds, got {value!r}") from None
    if number <= 0:
        raise JetStreamOptionError(f"option '{name}' must be positive, got {number}")
    return number


def parse_time(value: str, name: str = "timestamp") -> datetime:
    """Epoch milliseconds (as Kafka's startingTimestamp) or ISO-8601; naive means UTC."""
    text = value.strip()
    if re.fullmatch(r"-?\d+", text):
        return datetime.fromtimestamp(int(text) / 1000, tz=UTC)
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise JetStreamOptionError(
            f"option '{name}' must be epoch milliseconds or ISO-8601, got {value!r}"
        ) from None
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


def rfc3339(moment: datetime) -> str:
    """The form nats-server's JSON decoder accepts for `start_time`."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _bound(options: Mapping[str, str], offsets: str, timestamp: str, default: Position) -> Bound:
    offset_value = _get(options, offsets)
    time_value = _get(options, timestamp)
    if offset_value is not None and time_value is not None:
        raise JetStreamOptionError(f"set only one of '{offsets}' and '{timestamp}'")
    if time_value is not None:
        return Bound(Position.TIME, time=parse_time(time_value, timestamp))
    if offset_value is None:
        return Bound(default)
    lowered = offset_value.lower()
    if lowered in (Position.EARLIEST.value, Position.LATEST.value):
        return Bound(Position(lowered))
    try:
        sequence = int(offset_value)
    except ValueError:
        raise JetStreamOptionError(
            f"option '{offsets}' must be earliest, latest or a stream sequence, "
            f"got {offset_value!r}"
        ) from None
    if sequence < 1:
        raise JetStreamOptionError(f"option '{offsets}' must be a sequence >= 1, got {sequence}")
    return Bound(Position.SEQUENCE, sequence=sequence)


@dataclass(frozen=True)
class ConnectionOptions:
    """Where and how to connect; mapped onto `nats.connect` keyword arguments."""

    servers: tuple[str, ...] = DEFAULT_SERVERS
    user: str | None = None
    password: str | None = None
    token: str | None = None
    nkey_seed: str | None = None
    nkey_seed_file: str | None = None
    creds_file: str | None = None
    tls_ca_file: str | None = None
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    tls_hostname: str | None = None
    tls_handshake_first: bool = False
    connection_name: str = "jetstream-spark"
    domain: str | None = None
    api_prefix: str = "$JS.API"
    connect_timeout: float = 5.0
    request_timeout: float = 10.0

    @classmethod
    def from_options(cls, raw: Mapping[str, str]) -> ConnectionOptions:
        options = _lower(raw)
        servers_text = _get(options, "servers") or _get(options, "url")
        servers = (
            tuple(part.strip() for part in servers_text.split(",") if part.strip())
            if servers_text
            else DEFAULT_SERVERS
        )
        if (_get(options, "password") is not None) != (_get(options, "user") is not None):
            raise JetStreamOptionError("options 'user' and 'password' go together")
        methods = [
            name
            for name in ("user", "token", "nkeySeed", "nkeySeedFile", "credsFile")
            if _get(options, name) is not None
        ]
        if len(methods) > 1:
            raise JetStreamOptionError(f"choose one authentication method, got {methods}")
        if (_get(options, "tlsCertFile") is None) != (_get(options, "tlsKeyFile") is None):
            raise JetStreamOptionError("options 'tlsCertFile' and 'tlsKeyFile' go together")
        domain = _get(options, "domain")
        return cls(
            servers=servers,
            user=_get(options, "user"),
            password=_get(options, "password"),
            token=_get(options, "token"),
            nkey_seed=_get(options, "nkeySeed"),
            nkey_seed_file=_get(options, "nkeySeedFile"),
            creds_file=_get(options, "credsFile"),
            tls_ca_file=_get(options, "tlsCaFile"),
            tls_cert_file=_get(options, "tlsCertFile"),
            tls_key_file=_get(options, "tlsKeyFile"),
            tls_hostname=_get(options, "tlsHostname"),
            tls_handshake_first=_bool(options, "tlsHandshakeFirst", False),
            connection_name=_get(options, "connectionName") or "jetstream-spark",
            domain=domain,
            api_prefix=f"$JS.{domain}.API" if domain else "$JS.API",
            connect_timeout=_seconds(options, "connectTimeout", 5.0),
            request_timeout=_seconds(options, "requestTimeout", 10.0),
        )

    @property
    def uses_tls(self) -> bool:
        return (
            any(server.startswith("tls://") for server in self.servers)
            or self.tls_ca_file is not None
            or self.tls_cert_file is not None
        )

    def ssl_context(self) -> ssl.SSLContext | None:
        """Built per connection: SSL contexts do not pickle."""
        if not self.uses_tls:
            return None
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=self.tls_ca_file)
        if self.tls_cert_file and self.tls_key_file:
            context.load_cert_chain(self.tls_cert_file, self.tls_key_file)
        return context

    def connect_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for `nats.connect` / `Client.connect`."""
        kwargs: dict[str, Any] = {
            "servers": list(self.servers),
            "name": self.connection_name,
            "connect_timeout": self.connect_timeout,
            "max_reconnect_attempts": 3,
            "reconnect_time_wait": 1,
        }
        if self.user is not None:
            kwargs["user"] = self.user
            kwargs["password"] = self.password
        if self.token is not None:
            kwargs["token"] = self.token
        if self.nkey_seed is not None:
            kwargs["nkeys_seed_str"] = self.nkey_seed
        if self.nkey_seed_file is not None:
            kwargs["nkeys_seed"] = self.nkey_seed_file
        if self.creds_file is not None:
            kwargs["user_credentials"] = self.creds_file
        context = self.ssl_context()
        if context is not None:
            kwargs["tls"] = context
            if self.tls_hostname is not None:
                kwargs["tls_hostname"] = self.tls_hostname
            if self.tls_handshake_first:
                kwargs["tls_handshake_first"] = True
        return kwargs


def subject_problem(subject: str, *, wildcards: bool) -> str | None:
    """Why `subject` cannot be used (None when it can).

    Checked here rather than left to nats-py, whose checks differ between versions: a line
    break would end the protocol line, and a wildcard is only meaningful in a filter.
    """
    if not subject:
        return "it is empty"
    if any(char.isspace() for char in subject):
        return "it contains whitespace or a line break"
    tokens = subject.split(".")
    if any(not token for token in tokens):
        return "it has an empty token (a leading, trailing or doubled '.')"
    for index, token in enumerate(tokens):
        if token in ("*", ">"):
            if not wildcards:
                return f"it contains the wildcard '{token}', which only filters may use"
            if token == ">" and index != len(tokens) - 1:
                return "'>' may only be the last token"
    return None


def _stream_names(options: Mapping[str, str]) -> tuple[str, ...]:
    text = _get(options, "stream")
    if text is None:
        raise JetStreamOptionError("option 'stream' (the JetStream stream name) is required")
    names = tuple(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    for name in names:
        if not _SUBJECT_TOKEN.match(name):
            raise JetStreamOptionError(f"option 'stream' is not a valid stream name: {name!r}")
    if not names:
        raise JetStreamOptionError("option 'stream' names no stream")
    return names


def _subject_filters(options: Mapping[str, str]) -> tuple[str, ...]:
    text = _get(options, "subjectFilter")
    if text is None:
        return ()
    filters = tuple(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    for subject in filters:
        problem = subject_problem(subject, wildcards=True)
        if problem is not None:
            raise JetStreamOptionError(
                f"option 'subjectFilter' has an invalid filter {subject!r}: {problem}"
            )
    return filters


def _check_order(start: Bound, end: Bound) -> None:
    """Refuse a batch range whose start is after its end (Kafka's source refuses it too)."""
    inverted = (
        start.position is Position.SEQUENCE
        and end.position is Position.SEQUENCE
        and start.sequence > end.sequence
    ) or (
        start.position is Position.TIME
        and end.position is Position.TIME
        and start.time is not None
        and end.time is not None
        and start.time > end.time
    )
    if start.position is Position.LATEST and end.position is not Position.LATEST:
        inverted = True
    if inverted:
        raise JetStreamOptionError(
            f"the start of the range ({start.describe()}) is after its end ({end.describe()})"
        )


@dataclass(frozen=True)
class ReadOptions:
    """What to read and how: range, partitioning, streaming limits and fetch tuning."""

    connection: ConnectionOptions
    streams: tuple[str, ...]
    subject_filters: tuple[str, ...] = ()
    start: Bound = Bound(Position.EARLIEST)
    end: Bound = Bound(Position.LATEST)
    min_partitions: int | None = None  # None: the cluster's parallelism, when known
    max_messages_per_partition: int = DEFAULT_MAX_MESSAGES_PER_PARTITION
    max_messages_per_trigger: int | None = None
    min_messages_per_trigger: int | None = None
    max_trigger_delay: float = DEFAULT_MAX_TRIGGER_DELAY
    fail_on_data_loss: bool = True
    include_headers: bool = False
    read_method: ReadMethod = ReadMethod.AUTO
    fetch_batch: int = DEFAULT_FETCH_BATCH

    @property
    def stream(self) -> str:
        """The first (usually the only) stream, for messages about one-stream reads."""
        return self.streams[0]

    @classmethod
    def from_options(cls, raw: Mapping[str, str], *, streaming: bool = False) -> ReadOptions:
        options = normalise(
            raw,
            READ_OPTIONS,
            READ_ALIASES,
            "streaming read" if streaming else "batch read",
        )
        if streaming and (
            _get(options, "endingOffsets") is not None
            or _get(options, "endingTimestamp") is not None
        ):
            raise JetStreamOptionError(
                "options 'endingOffsets'/'endingTimestamp' are for batch reads only"
            )
        # Like Spark's Kafka source: a new streaming query starts at the end, a batch at the start.
        default_start = Position.LATEST if streaming else Position.EARLIEST
        start = _bound(options, "startingOffsets", "startingTimestamp", default_start)
        end = _bound(options, "endingOffsets", "endingTimestamp", Position.LATEST)
        if end.position is Position.EARLIEST:
            raise JetStreamOptionError("option 'endingOffsets' must be latest or a sequence")
        if not streaming:
            _check_order(start, end)
        method_text = (_get(options, "readMethod") or "auto").lower()
        try:
            method = ReadMethod(method_text)
        except ValueError:
            raise JetStreamOptionError(
                f"option 'readMethod' must be auto, direct or consumer, got {method_text!r}"
            ) from None
        filters = _subject_filters(options)
        if method is ReadMethod.DIRECT and len(filters) > 1:
            raise JetStreamOptionError(
                "readMethod=direct takes one subjectFilter; several need readMethod=consumer"
            )
        max_rows = _int(options, "maxMessagesPerTrigger", None, 1)
        min_rows = _int(options, "minMessagesPerTrigger", None, 1)
        if max_rows is not None and min_rows is not None and min_rows > max_rows:
            raise JetStreamOptionError(
                f"option 'minMessagesPerTrigger' ({min_rows}) is above "
                f"'maxMessagesPerTrigger' ({max_rows})"
            )
        delay_text = _get(options, "maxTriggerDelay")
        return cls(
            connection=ConnectionOptions.from_options(options),
            streams=_stream_names(options),
            subject_filters=filters,
            start=start,
            end=end,
            min_partitions=_int(options, "minPartitions", None, 1),
            max_messages_per_partition=_int(
                options, "maxMessagesPerPartition", DEFAULT_MAX_MESSAGES_PER_PARTITION, 1
            )
            or DEFAULT_MAX_MESSAGES_PER_PARTITION,
            max_messages_per_trigger=max_rows,
            min_messages_per_trigger=min_rows,
            max_trigger_delay=(
                parse_duration(delay_text, "maxTriggerDelay")
                if delay_text is not None
                else DEFAULT_MAX_TRIGGER_DELAY
            ),
            fail_on_data_loss=_bool(options, "failOnDataLoss", True),
            include_headers=_bool(options, "includeHeaders", False),
            read_method=method,
            fetch_batch=_int(options, "fetchBatchSize", DEFAULT_FETCH_BATCH, 1)
            or DEFAULT_FETCH_BATCH,
        )


@dataclass(frozen=True)
class WriteOptions:
    """Where rows go and how their `Nats-Msg-Id` is formed."""

    connection: ConnectionOptions
    subject: str | None = None
    stream: str | None = None
    write_id: str | None = None
    message_id_column: str | None = None
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT
    ack_timeout: float = 10.0

    @classmethod
    def from_options(cls, raw: Mapping[str, str]) -> WriteOptions:
        options = normalise(raw, WRITE_OPTIONS, WRITE_ALIASES, "write")
        stream = None
        if _get(options, "stream") is not None:
            streams = _stream_names(options)
            if len(streams) > 1:
                raise JetStreamOptionError("option 'stream' of a write names one stream")
            stream = streams[0]
        write_id = _get(options, "writeId")
        if write_id is not None and any(char.isspace() for char in write_id):
            raise JetStreamOptionError(f"option 'writeId' must not contain spaces: {write_id!r}")
        subject = _get(options, "subject")
        if subject is not None:
            problem = subject_problem(subject, wildcards=False)
            if problem is not None:
                raise JetStreamOptionError(
                    f"option 'subject' {subject!r} cannot be published to: {problem}"
                )
        connection = ConnectionOptions.from_options(options)
        return cls(
            connection=connection,
            subject=subject,
            stream=stream,
            write_id=write_id,
            message_id_column=_get(options, "messageIdColumn"),
            max_in_flight=_int(options, "maxInFlight", DEFAULT_MAX_IN_FLIGHT, 1)
            or DEFAULT_MAX_IN_FLIGHT,
            ack_timeout=_seconds(options, "ackTimeout", connection.request_timeout),
        )
