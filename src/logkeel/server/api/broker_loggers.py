"""Log levels as Kafka's BROKER_LOGGER config resource: every logger with its level in log4j's
names, changed at run time by IncrementalAlterConfigs (SET a level, DELETE to inherit again)."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from kio.schema.errors import ErrorCode

from logkeel.server.api.config_changes import OP_APPEND, OP_DELETE, OP_SET, OP_SUBTRACT
from logkeel.server.api.responses import EntryError

__all__ = [
    "LOG_LEVELS",
    "ROOT_LOGGER",
    "SOURCE_DYNAMIC_BROKER_LOGGER_CONFIG",
    "apply_logger_changes",
    "broker_loggers",
    "validate_logger_changes",
]

log = logging.getLogger(__name__)

SOURCE_DYNAMIC_BROKER_LOGGER_CONFIG = 6
ROOT_LOGGER = "root"
# Kafka's log4j level names and the Python levels that stand for them.
LOG_LEVELS: dict[str, int] = {
    "FATAL": logging.CRITICAL,
    "ERROR": logging.ERROR,
    "WARN": logging.WARNING,
    "INFO": logging.INFO,
    "DEBUG": logging.DEBUG,
    "TRACE": 5,
}


def _level_name(level: int) -> str:
    """The Kafka name of the most verbose Kafka level that ``level`` still lets through."""
    for name, value in sorted(LOG_LEVELS.items(), key=lambda item: -item[1]):
        if level >= value:
            return name
    return "TRACE"


def broker_loggers() -> dict[str, str]:
    """Every logger that exists, with its effective level in Kafka's names; ``root`` first."""
    out = {ROOT_LOGGER: _level_name(logging.getLogger().getEffectiveLevel())}
    for name, logger in sorted(logging.root.manager.loggerDict.items()):
        if isinstance(logger, logging.Logger):
            out[name] = _level_name(logger.getEffectiveLevel())
    return out


def _logger(name: str) -> logging.Logger | None:
    if name == ROOT_LOGGER:
        return logging.getLogger()
    found = logging.root.manager.loggerDict.get(name)
    return found if isinstance(found, logging.Logger) else None


def validate_logger_changes(changes: Iterable[tuple[str, int, str | None]]) -> None:
    """Kafka's rules for changing log levels at run time (RuntimeLoggerManager)."""
    for name, op, value in changes:
        if op in (OP_APPEND, OP_SUBTRACT):
            verb = "APPEND" if op == OP_APPEND else "SUBTRACT"
            raise EntryError(
                ErrorCode.invalid_request,
                f"{verb} operation is not allowed for the BROKER_LOGGER resource",
            )
        if _logger(name) is None:
            raise EntryError(ErrorCode.invalid_config, f"Logger {name} does not exist!")
        if op == OP_SET and value not in LOG_LEVELS:
            raise EntryError(
                ErrorCode.invalid_config,
                f"Cannot set the log level of {name} to {value} as it is not a supported log "
                f"level. Valid log levels are {', '.join(LOG_LEVELS)}",
            )
        if op == OP_DELETE and name == ROOT_LOGGER:
            raise EntryError(
                ErrorCode.invalid_request,
                f"Removing the log level of the {ROOT_LOGGER} logger is not allowed",
            )


def apply_logger_changes(changes: Iterable[tuple[str, int, str | None]]) -> None:
    for name, op, value in changes:
        logger = _logger(name)
        assert logger is not None, "validated first"
        if op == OP_SET:
            assert value is not None
            logger.setLevel(LOG_LEVELS[value])
            log.warning("Updated the log level of %s to %s", name, value)
        else:  # DELETE: inherit from the parent again
            logger.setLevel(logging.NOTSET)
            log.warning("Unset the log level of %s", name)
