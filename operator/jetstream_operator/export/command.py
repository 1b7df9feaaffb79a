"""`jetstream-operator export`: manifests on stdout or in a directory, notes on stderr."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path
from typing import Any

import yaml

from .manifests import export_account, to_yaml, write_files
from .nack import convert_documents, read_documents


def _emit(manifests: list[dict[str, Any]], output_dir: str | None) -> None:
    if output_dir:
        for path in write_files(manifests, Path(output_dir)):
            print(path)
    else:
        sys.stdout.write(to_yaml(manifests))


def _note(lines: list[str]) -> None:
    for line in lines:
        print(f"# {line}", file=sys.stderr)


def _from_account(args: argparse.Namespace) -> int:
    from .account import read_target, target_from_resource, target_from_settings

    # The pool logs each failed connect attempt; the one-line failure below says it better.
    logging.getLogger("jetstream_operator.nats.pool").setLevel(logging.ERROR)
    connection_ref: str | None = None
    namespace = args.namespace
    if args.connection:
        conn_namespace, _, connection_ref = args.connection.partition("/")
        if not connection_ref:
            print("--connection takes NAMESPACE/NAME", file=sys.stderr)
            return 2
        if namespace and namespace != conn_namespace:
            # connectionRef names a NatsConnection of the resource's own namespace.
            print("--namespace must be the NatsConnection's namespace", file=sys.stderr)
            return 2
        namespace = conn_namespace
        target = asyncio.run(target_from_resource(conn_namespace, connection_ref))
    else:
        target = target_from_settings(args.server)
    streams = asyncio.run(read_target(target, args.match))
    result = export_account(streams, namespace, connection_ref)
    _note(result.notes)
    _emit(result.manifests, args.output_dir)
    return 0


def _from_nack(args: argparse.Namespace) -> int:
    conversion = convert_documents(read_documents(args.from_nack))
    _note(conversion.notes)
    _note([f"not converted: {line}" for line in conversion.refused])
    _emit(conversion.manifests, args.output_dir)
    return 1 if args.strict and conversion.refused else 0


def run_export(args: argparse.Namespace) -> int:
    from ..k8s.client import ApiError
    from ..k8s.secrets import SecretProblem
    from ..nats.jsapi import JetStreamError, JetStreamUnavailable

    try:
        if args.from_nack:
            return _from_nack(args)
        return _from_account(args)
    except (JetStreamUnavailable, JetStreamError, SecretProblem, OSError, yaml.YAMLError) as error:
        print(f"export failed: {error}", file=sys.stderr)
    except ApiError as error:
        print(
            f"export failed: the Kubernetes API answered {error.status} {error.reason}",
            file=sys.stderr,
        )
    return 1
