"""Kafka error codes for the broker's API handlers.

The codes themselves are kio's ``ErrorCode`` enum (generated from Kafka's ``Errors``), so a
number is never typed by hand here. This module adds what kio does not have: Kafka's
upper-case names (``UNKNOWN_TOPIC_OR_PARTITION``) and the mapping from logkeel's storage
exceptions to the code a client must see.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from logkeel.storage import errors as storage_errors

__all__ = [
    "ApiError",
    "CloseConnection",
    "ErrorCode",
    "error_code_for",
    "error_code_named",
    "error_name",
]


class ApiError(Exception):
    """Raised by a handler to answer with a Kafka error code (Kafka's ``ApiException``).

    The dispatcher turns it into the handler's registered error response; a handler that
    can report errors per partition should put the code in its response instead.
    """

    def __init__(self, code: ErrorCode, message: str = "") -> None:
        self.code = code
        super().__init__(message or error_name(code))


class CloseConnection(Exception):
    """Raised by a handler to close the client's connection without answering.

    Kafka does this for a failed ``acks=0`` produce: the client has no response to read an
    error from, so a closed connection is the only signal that makes it refresh metadata.
    Responses to earlier requests on the connection are still sent first.
    """


# Most specific class first: error_code_for walks the exception's MRO against this table.
_STORAGE_ERROR_CODES: dict[type[BaseException], ErrorCode] = {
    storage_errors.KafkaStorageError: ErrorCode.kafka_storage_error,
    storage_errors.CorruptRecordError: ErrorCode.corrupt_message,
    storage_errors.InvalidRecordError: ErrorCode.invalid_record,
    storage_errors.RecordTooLargeError: ErrorCode.message_too_large,
    storage_errors.OffsetOutOfRangeError: ErrorCode.offset_out_of_range,
    storage_errors.OutOfOrderSequenceError: ErrorCode.out_of_order_sequence_number,
    storage_errors.InvalidProducerEpochError: ErrorCode.invalid_producer_epoch,
    storage_errors.UnknownProducerIdError: ErrorCode.unknown_producer_id,
    # Like Kafka's Errors.forException: a timeout the broker gave up on is REQUEST_TIMED_OUT.
    TimeoutError: ErrorCode.request_timed_out,
}


def error_code_for(exc: BaseException) -> ErrorCode:
    """The code Kafka would send for ``exc``; UNKNOWN_SERVER_ERROR for anything unexpected."""
    if isinstance(exc, ApiError):
        return exc.code
    for cls in type(exc).__mro__:
        code = _STORAGE_ERROR_CODES.get(cls)
        if code is not None:
            return code
    return ErrorCode.unknown_server_error


def error_code_named(name: str) -> ErrorCode:
    """Looks a code up by Kafka's name, e.g. ``"NOT_LEADER_OR_FOLLOWER"`` (case-insensitive)."""
    try:
        return ErrorCode[name.lower()]
    except KeyError:
        raise ValueError(f"no Kafka error code is named {name!r}") from None


def error_name(code: int) -> str:
    """Kafka's name for ``code``, e.g. ``error_name(3) == "UNKNOWN_TOPIC_OR_PARTITION"``."""
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return f"UNKNOWN_ERROR_CODE_{code}"
