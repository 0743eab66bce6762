"""Client security settings made to work on every executor.

Spark's Kafka connector takes the Java client's settings; the tasks here run librdkafka, which
has no JAAS and reads key and certificate files itself. Two translations, done once on the
driver when the options are parsed:

- ``sasl.jaas.config`` (how Spark jobs give SASL credentials) becomes librdkafka's
  ``sasl.username`` / ``sasl.password`` for the PLAIN and SCRAM login modules; other modules
  are refused with a message.
- ``ssl.ca.location``, ``ssl.certificate.location`` and ``ssl.key.location`` name files on the
  driver's machine, which an executor on another machine does not have: their content is read
  here and passed on as ``ssl.ca.pem`` / ``ssl.certificate.pem`` / ``ssl.key.pem``, so tasks
  never open those paths.

The settings end up in the pickled reader and writer; they are never part of a message or repr.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from logkeel.spark.options import OptionError

_JAAS = re.compile(r"^\s*(?P<module>[\w.$]+)\s+(?P<flag>required|requisite|sufficient|optional)"
                   r"(?P<body>.*?);?\s*$", re.S)  # fmt: skip
_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|(\S+))')
_LOGIN_MODULES = {
    "org.apache.kafka.common.security.plain.PlainLoginModule": ("PLAIN",),
    "org.apache.kafka.common.security.scram.ScramLoginModule": ("SCRAM-SHA-256", "SCRAM-SHA-512"),
}
_FILES = {
    "ssl.ca.location": "ssl.ca.pem",
    "ssl.certificate.location": "ssl.certificate.pem",
    "ssl.key.location": "ssl.key.pem",
}


def from_jaas(params: Mapping[str, str]) -> dict[str, str]:
    """``params`` with ``sasl.jaas.config`` turned into ``sasl.username`` / ``sasl.password``."""
    out = dict(params)
    config = out.pop("sasl.jaas.config", None)
    if config is None:
        return out
    match = _JAAS.match(config)
    # The messages never quote the value: it holds a password.
    if match is None:
        raise OptionError(
            "Kafka option 'sasl.jaas.config' must look like '<LoginModule> required "
            'username="..." password="...";\''
        )
    module = match["module"]
    if module not in _LOGIN_MODULES:
        raise OptionError(
            f"Kafka option 'sasl.jaas.config': login module {module} is not supported (only "
            f"{', '.join(sorted(_LOGIN_MODULES))}, i.e. SASL PLAIN and SCRAM)"
        )
    values = {
        m[1]: re.sub(r"\\(.)", r"\1", m[2]) if m[2] is not None else m[3]
        for m in _JAAS_OPTION.finditer(match["body"])
    }
    if "username" not in values or "password" not in values:
        raise OptionError("Kafka option 'sasl.jaas.config' must give a username and a password")
    mechanisms = _LOGIN_MODULES[module]
    mechanism = out.setdefault("sasl.mechanism", mechanisms[0]).upper()
    if mechanism not in mechanisms:
        raise OptionError(
            f"Kafka option 'sasl.mechanism' {mechanism} does not go with the login module "
            f"{module} in 'sasl.jaas.config' (it takes {', '.join(mechanisms)})"
        )
    for name in ("sasl.username", "sasl.password"):
        if name in out:
            raise OptionError(f"set either Kafka option 'sasl.jaas.config' or '{name}', not both")
    out["sasl.username"] = values["username"]
    out["sasl.password"] = values["password"]
    return out


def embed_files(params: Mapping[str, str]) -> dict[str, str]:
    """``params`` with the driver's key and certificate files replaced by their content."""
    out = dict(params)
    for location, pem in _FILES.items():
        path = out.pop(location, None)
        if path is None:
            continue
        if pem in out:
            raise OptionError(f"set either Kafka option '{location}' or '{pem}', not both")
        try:
            out[pem] = Path(path).read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise OptionError(
                f"Kafka option '{location}': cannot read {path} on the driver: {exc}"
            ) from None
    return out


def portable(params: Mapping[str, str]) -> dict[str, str]:
    """Settings any executor can use as they are."""
    return embed_files(from_jaas(params))
