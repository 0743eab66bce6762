"""Admin requests shared by the CLI and `logkeel console`: no click, no process exits;
refusals are ``AdminError``, unreachable brokers ``BrokerConnectionError``."""
