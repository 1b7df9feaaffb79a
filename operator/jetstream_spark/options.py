"""Typed, validated views of the string options Spark hands to the data source.

Everything here is a frozen, picklable dataclass: Spark ships readers and writers to other
processes, so they carry settings, never live connections or SSL contexts (those are built
inside the task that uses them).
"""

from __future__ import annotations

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
_SUBJECT_TOKEN = re.compile(r"^[^\s.*>]+$")


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


def _stream_name(options: Mapping[str, str]) -> str:
    stream = _get(options, "stream")
    if stream is None:
        raise JetStreamOptionError("option 'stream' (the JetStream stream name) is required")
    if not _SUBJECT_TOKEN.match(stream):
        raise JetStreamOptionError(f"option 'stream' is not a valid stream name: {stream!r}")
    return stream


@dataclass(frozen=True)
class ReadOptions:
    """What to read and how: range, partitioning, streaming limits and fetch tuning."""

    connection: ConnectionOptions
    stream: str
    subject_filter: str | None = None
    start: Bound = Bound(Position.EARLIEST)
    end: Bound = Bound(Position.LATEST)
    min_partitions: int = 1
    max_messages_per_partition: int = DEFAULT_MAX_MESSAGES_PER_PARTITION
    max_messages_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    read_method: ReadMethod = ReadMethod.AUTO
    fetch_batch: int = DEFAULT_FETCH_BATCH

    @classmethod
    def from_options(cls, raw: Mapping[str, str], *, streaming: bool = False) -> ReadOptions:
        options = _lower(raw)
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
        method_text = (_get(options, "readMethod") or "auto").lower()
        try:
            method = ReadMethod(method_text)
        except ValueError:
            raise JetStreamOptionError(
                f"option 'readMethod' must be auto, direct or consumer, got {method_text!r}"
            ) from None
        return cls(
            connection=ConnectionOptions.from_options(options),
            stream=_stream_name(options),
            subject_filter=_get(options, "subjectFilter"),
            start=start,
            end=end,
            min_partitions=_int(options, "minPartitions", 1, 1) or 1,
            max_messages_per_partition=_int(
                options, "maxMessagesPerPartition", DEFAULT_MAX_MESSAGES_PER_PARTITION, 1
            )
            or DEFAULT_MAX_MESSAGES_PER_PARTITION,
            max_messages_per_trigger=_int(options, "maxMessagesPerTrigger", None, 1),
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
        options = _lower(raw)
        stream = _get(options, "stream")
        if stream is not None:
            stream = _stream_name(options)
        write_id = _get(options, "writeId")
        if write_id is not None and any(char.isspace() for char in write_id):
            raise JetStreamOptionError(f"option 'writeId' must not contain spaces: {write_id!r}")
        connection = ConnectionOptions.from_options(options)
        return cls(
            connection=connection,
            subject=_get(options, "subject"),
            stream=stream,
            write_id=write_id,
            message_id_column=_get(options, "messageIdColumn"),
            max_in_flight=_int(options, "maxInFlight", DEFAULT_MAX_IN_FLIGHT, 1)
            or DEFAULT_MAX_IN_FLIGHT,
            ack_timeout=_seconds(options, "ackTimeout", connection.request_timeout),
        )
