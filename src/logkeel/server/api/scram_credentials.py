"""DescribeUserScramCredentials and AlterUserScramCredentials (KIP-554): which SCRAM users
exist, with which mechanisms and iteration counts, and adding or removing their credentials.

The client sends the salted password (never the password); the store keeps only the derived
StoredKey and ServerKey (``cluster.scram``). Each user's changes are checked first, then
written in one metadata write, off the event loop.
"""

from __future__ import annotations

import asyncio
import collections
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i32

from logkeel.cluster.metadata import MetadataError, MetadataStore
from logkeel.cluster.scram import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    ScramCredential,
    mechanism_name,
    mechanism_type,
)
from logkeel.server.api.messages import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
)
from logkeel.server.api.responses import EntryError, nested, response
from logkeel.server.authorization import ALTER_CLUSTER, DESCRIBE_CLUSTER, gated
from logkeel.server.handlers import HandlerRegistry, RequestContext
from logkeel.server.protocol import ApiKey

__all__ = ["ScramCredentialsApi", "register"]


class ScramCredentialsApi:
    def __init__(self, metadata: MetadataStore) -> None:
        self._metadata = metadata

    async def describe(
        self, ctx: RequestContext, request: DescribeUserScramCredentialsRequest
    ) -> DescribeUserScramCredentialsResponse:
        Result, Info = (
            nested(ctx, "DescribeUserScramCredentialsResult"),
            nested(ctx, "CredentialInfo"),
        )
        stored = self._metadata.scram_credentials()
        names = [u.name for u in request.users or ()] or sorted(stored)
        counts = collections.Counter(names)
        results = []
        for name in dict.fromkeys(names):
            code, message, infos = ErrorCode.none, None, ()
            if counts[name] > 1:
                code, message = (
                    ErrorCode.duplicate_resource,
                    "Cannot describe SCRAM credentials for the same user twice in a single request",
                )
            elif name not in stored:
                code, message = (
                    ErrorCode.resource_not_found,
                    "Attempt to describe a user credential that does not exist",
                )
            else:
                infos = tuple(
                    Info(mechanism=i8(mechanism_type(mech)), iterations=i32(doc["iterations"]))
                    for mech, doc in sorted(stored[name].items())
                )
            results.append(
                Result(user=name, error_code=code, error_message=message, credential_infos=infos)
            )
        return response(ctx, error_code=ErrorCode.none, error_message=None, results=tuple(results))

    async def alter(
        self, ctx: RequestContext, request: AlterUserScramCredentialsRequest
    ) -> AlterUserScramCredentialsResponse:
        Result = nested(ctx, "AlterUserScramCredentialsResult")
        named = [(c.name, int(c.mechanism)) for c in request.deletions] + [
            (c.name, int(c.mechanism)) for c in request.upsertions
        ]
        pairs = collections.Counter(named)
        users = list(dict.fromkeys(name for name, _ in named))
        results = []
        for user in users:
            try:
                if any(n > 1 for (name, _), n in pairs.items() if name == user):
                    raise EntryError(
                        ErrorCode.duplicate_resource,
                        "A user credential cannot be altered twice in the same request",
                    )
                deletions = [d for d in request.deletions if d.name == user]
                upsertions = [u for u in request.upsertions if u.name == user]
                await asyncio.to_thread(self._apply, user, deletions, upsertions)
                code, message = ErrorCode.none, None
            except EntryError as exc:
                code, message = exc.code, exc.message
            except MetadataError as exc:
                code, message = ErrorCode.unknown_server_error, str(exc)
            results.append(Result(user=user, error_code=code, error_message=message))
        return response(ctx, results=tuple(results))

    def describe_error(
        self, ctx: RequestContext, request: DescribeUserScramCredentialsRequest, code: ErrorCode
    ) -> DescribeUserScramCredentialsResponse:
        """Kafka's getErrorResponse: the error at the top and for every user named."""
        Result = nested(ctx, "DescribeUserScramCredentialsResult")
        names = dict.fromkeys(u.name for u in request.users or ())
        return response(
            ctx,
            error_code=code,
            error_message=None,
            results=tuple(
                Result(user=n, error_code=code, error_message=None, credential_infos=())
                for n in names
            ),
        )

    def alter_error(
        self, ctx: RequestContext, request: AlterUserScramCredentialsRequest, code: ErrorCode
    ) -> AlterUserScramCredentialsResponse:
        Result = nested(ctx, "AlterUserScramCredentialsResult")
        users = dict.fromkeys(
            [c.name for c in request.deletions] + [c.name for c in request.upsertions]
        )
        return response(
            ctx,
            results=tuple(Result(user=u, error_code=code, error_message=None) for u in users),
        )

    def _apply(self, user: str, deletions: list[Any], upsertions: list[Any]) -> None:
        if not user:
            raise EntryError(ErrorCode.unacceptable_credential, "Username must not be empty")
        current = dict(self._metadata.scram_credentials().get(user, {}))
        for d in deletions:
            mech = _mechanism(d.mechanism)
            if mech not in current:
                raise EntryError(
                    ErrorCode.resource_not_found,
                    "Attempt to delete a user credential that does not exist",
                )
            del current[mech]
        for u in upsertions:
            mech = _mechanism(u.mechanism)
            if not MIN_ITERATIONS <= u.iterations <= MAX_ITERATIONS:
                raise EntryError(
                    ErrorCode.unacceptable_credential,
                    f"Iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}",
                )
            if not u.salt or not u.salted_password:
                raise EntryError(ErrorCode.unacceptable_credential, "Salt and password are needed")
            current[mech] = ScramCredential.from_salted_password(
                mech, u.salt, int(u.iterations), u.salted_password
            ).to_json()
        self._metadata.set_scram_credentials(user, current)


def _mechanism(type_byte: int) -> str:
    name = mechanism_name(int(type_byte))
    if name is None:
        raise EntryError(ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism")
    return name


def register(registry: HandlerRegistry, metadata: MetadataStore) -> None:
    api = ScramCredentialsApi(metadata)
    registry.register(
        ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, 0, api.describe,
        rule=gated(DESCRIBE_CLUSTER), error_response=api.describe_error,
    )  # fmt: skip
    registry.register(
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, 0, api.alter,
        rule=gated(ALTER_CLUSTER), error_response=api.alter_error,
    )  # fmt: skip
