"""The definition table: every broker setting, and the topic settings derived from it.

Names, types, defaults and valid ranges are Apache Kafka's (4.0 where versions differ, e.g.
``num.recovery.threads.per.data.dir=2`` and ``log.message.timestamp.after.max.ms=3600000`` from
KIP-1030). Deliberate differences are said in the key's doc and start with "logkeel:". Settings
that Kafka does not have are logkeel's own and also say so.

A broker row with ``topic=...`` is the server default of that topic-level config. Several rows may
feed one topic config; the first row given is the highest-priority synonym (``log.roll.ms`` before
``log.roll.hours``), which is how Kafka resolves ``segment.ms``, ``retention.ms`` and ``flush.ms``.
"""

from __future__ import annotations

from logkeel.config.throttled_replicas import ThrottledReplicasFormat
from logkeel.config.types import (
    INT32_MAX,
    LONG_MAX,
    AnyOf,
    ConfigDef,
    ConfigKey,
    ConfigType,
    EachOneOf,
    OneOf,
    Range,
)

BOOLEAN, STRING, INT, SHORT, LONG, DOUBLE, LIST, PASSWORD = (
    ConfigType.BOOLEAN,
    ConfigType.STRING,
    ConfigType.INT,
    ConfigType.SHORT,
    ConfigType.LONG,
    ConfigType.DOUBLE,
    ConfigType.LIST,
    ConfigType.PASSWORD,
)

HOUR_MS = 60 * 60 * 1000
MINUTE_MS = 60 * 1000
DEFAULT_LISTENERS = "PLAINTEXT://127.0.0.1:9092"
DEFAULT_LOG_DIR = "./logkeel-data"
# Kafka 3.x lower bound (LegacyRecord.RECORD_OVERHEAD_V0); see the log.segment.bytes doc.
MIN_SEGMENT_BYTES = 14
COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
CLEANUP_POLICIES = ("compact", "delete")
STARTUP_VALIDATION_MODES = ("lazy", "eager")

# Why a Kafka setting is refused unless left at its default (``ConfigKey.unsupported``).
NOT_ENFORCED = "logkeel does not enforce this network setting"
CLEANER_ALWAYS_ON = "the log cleaner always runs for compacted topics"

# authorizer.class.name values that turn ACLs on: Kafka's two and logkeel's own.
# replica.selector.class values: unset, or Kafka's rack-aware selector (KIP-392), the one built.
RACK_AWARE_REPLICA_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"

AUTHORIZER_CLASS_NAMES = (
    "kafka.security.authorizer.AclAuthorizer",
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "logkeel.authorizer.AclAuthorizer",
)

_K = ConfigKey

# fmt: off
# A table reads better one row per key than one argument per line.
BROKER_KEYS: tuple[ConfigKey, ...] = (
    # ---- identity and cluster -------------------------------------------------------------
    _K("node.id", INT, 0,
       "Id of this broker in the cluster; a synonym of broker.id (setting either sets both, and "
       "setting both to different values is an error). logkeel: defaults to 0 so that a "
       "single-node broker starts with no config; Kafka requires it (-1 = unset).",
       Range(0)),
    _K("broker.id", INT, 0,
       "Older name of node.id, kept for server.properties files written for ZooKeeper-mode "
       "Kafka. logkeel: defaults to 0 (Kafka: -1, meaning generate one); no id generation.",
       Range(0)),
    _K("broker.rack", STRING, None,
       "Rack of this broker: rack-aware replica placement, and the rack a consumer's client.rack "
       "is matched against by replica.selector.class (KIP-392)."),
    _K("zookeeper.connect", STRING, None,
       "ZooKeeper connection string (host:port[,host:port][/chroot]) for cluster metadata. "
       "Unset means a single-node broker with embedded metadata."),
    # ---- cluster membership and controller (read by server/cluster_node.py) ----------------
    _K("zookeeper.session.timeout.ms", INT, 18000,
       "ZooKeeper session timeout: how long a broker that stopped answering stays registered "
       "(and leads its partitions) before the controller elects other leaders.", Range(1)),
    _K("zookeeper.connection.timeout.ms", INT, None,
       "How long to wait for a ZooKeeper connection; unset means zookeeper.session.timeout.ms.",
       Range(1)),
    _K("controlled.shutdown.enable", BOOLEAN, True,
       "On SIGTERM, ask the controller to move this broker's leaderships to other in-sync "
       "replicas before stopping (waits at most zookeeper.session.timeout.ms)."),
    _K("auto.leader.rebalance.enable", BOOLEAN, True,
       "The controller moves leadership back to preferred replicas in the background."),
    _K("leader.imbalance.check.interval.seconds", LONG, 300,
       "How often the controller checks the preferred-leader balance.", Range(1)),
    _K("leader.imbalance.per.broker.percentage", INT, 10,
       "Share of a broker's preferred partitions led elsewhere that triggers a rebalance.",
       Range(0, 100)),
    # ---- network --------------------------------------------------------------------------
    _K("listeners", STRING, DEFAULT_LISTENERS,
       "Comma-separated NAME://host:port endpoints to bind; an empty host binds all interfaces. "
       "logkeel: defaults to loopback PLAINTEXT://127.0.0.1:9092 (Kafka: PLAINTEXT://:9092)."),
    _K("advertised.listeners", STRING, None,
       "Endpoints published to clients in metadata, if different from listeners. Unset means "
       "the listeners themselves. 0.0.0.0 cannot be advertised."),
    _K("listener.security.protocol.map", STRING,
       "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
       "Maps each listener name to its security protocol (NAME:PROTOCOL,...)."),
    _K("inter.broker.listener.name", STRING, None,
       "Listener that brokers use to reach each other (follower fetches, transaction markers): "
       "they connect to each other's endpoint of that name with its security protocol. Set "
       "this or security.inter.broker.protocol, not both. logkeel: with neither set, the "
       "listener named PLAINTEXT, or the first listener if none is (Kafka requires one)."),
    _K("security.inter.broker.protocol", STRING, "PLAINTEXT",
       "Security protocol between brokers: the inter-broker listener is the one named after "
       "it. Set this or inter.broker.listener.name, not both.",
       OneOf(("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"))),
    _K("sasl.mechanism.inter.broker.protocol", STRING, "PLAIN",
       "SASL mechanism of a broker's connections to other brokers; its username and password "
       "are the username= and password= options of the inter-broker listener's "
       "listener.name.<listener>.<mechanism>.sasl.jaas.config. logkeel: PLAIN by default "
       "(Kafka's default is GSSAPI, which logkeel does not have).",
       OneOf(("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"))),
    # ---- TLS (applies to SSL and SASL_SSL listeners; listener.name.<name>.ssl.* overrides) --
    _K("ssl.keystore.type", STRING, "PEM",
       "Format of the key store. logkeel: only PEM (Kafka's default is JKS).", OneOf(("PEM",))),
    _K("ssl.keystore.location", STRING, None,
       "PEM file holding the broker's private key and certificate chain."),
    _K("ssl.keystore.password", PASSWORD, None,
       "Password of the key store file; for PEM files the key password is ssl.key.password."),
    _K("ssl.key.password", PASSWORD, None, "Password of the (encrypted) PEM private key."),
    _K("ssl.keystore.certificate.chain", PASSWORD, None,
       "The broker's certificate chain as a PEM string (instead of ssl.keystore.location)."),
    _K("ssl.keystore.key", PASSWORD, None,
       "The broker's private key as a PEM string (instead of ssl.keystore.location)."),
    _K("ssl.truststore.type", STRING, "PEM",
       "Format of the trust store. logkeel: only PEM (Kafka's default is JKS).",
       OneOf(("PEM",))),
    _K("ssl.truststore.location", STRING, None,
       "PEM file of the CA certificates that client certificates are checked against."),
    _K("ssl.truststore.certificates", PASSWORD, None,
       "Trusted CA certificates as a PEM string (instead of ssl.truststore.location)."),
    _K("ssl.client.auth", STRING, "none",
       "Client certificates: none, requested (checked if sent) or required.",
       OneOf(("none", "requested", "required"))),
    _K("ssl.enabled.protocols", LIST, ["TLSv1.2", "TLSv1.3"],
       "TLS versions accepted. logkeel: TLSv1.2 and TLSv1.3 only.",
       EachOneOf(("TLSv1.2", "TLSv1.3"))),
    _K("ssl.endpoint.identification.algorithm", STRING, "https",
       "How a broker connecting to another broker over TLS checks the peer's certificate: "
       "https checks that it names the host connected to; empty skips that check (the "
       "certificate must still be signed by the trust store).", OneOf(("https", ""))),
    _K("ssl.principal.mapping.rules", STRING, "DEFAULT",
       "How a client certificate's distinguished name becomes the principal: DEFAULT (the "
       "whole DN) or RULE:pattern/replacement/[LU] entries, as in Kafka."),
    # ---- SASL (SASL_PLAINTEXT and SASL_SSL listeners) -----------------------------------------
    _K("sasl.enabled.mechanisms", LIST, ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"],
       "SASL mechanisms offered. PLAIN users come from "
       "listener.name.<listener>.plain.sasl.jaas.config (user_<name>=\"password\"); SCRAM "
       "credentials from the metadata store; OAUTHBEARER tokens are JWTs checked against "
       "sasl.oauthbearer.jwks.endpoint.url. logkeel: no GSSAPI (Kafka's default).",
       EachOneOf(("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"))),
    _K("sasl.oauthbearer.jwks.endpoint.url", STRING, None,
       "Where the keys that sign OAUTHBEARER tokens are (KIP-768): a JWKS file (file://) or "
       "the identity provider's JWKS endpoint (http:// or https://). Required for "
       "OAUTHBEARER: logkeel has no unsecured-token validator."),
    _K("sasl.oauthbearer.expected.audience", LIST, [],
       "Audiences a token's aud claim must name one of; empty: not checked."),
    _K("sasl.oauthbearer.expected.issuer", STRING, None,
       "The iss claim a token must have; unset: not checked."),
    _K("sasl.oauthbearer.clock.skew.seconds", INT, 30,
       "Seconds of clock difference allowed when checking a token's exp, nbf and iat.", Range(0)),
    _K("sasl.oauthbearer.sub.claim.name", STRING, "sub",
       "The claim whose value is the principal's name (User:<value>)."),
    _K("sasl.oauthbearer.scope.claim.name", STRING, "scope",
       "The claim holding the token's scope (a space-separated string or a list of strings; "
       "a token whose claim is neither is refused)."),
    _K("sasl.oauthbearer.jwks.endpoint.refresh.ms", LONG, 3_600_000,
       "How often the JWKS is fetched again; a token naming an unknown key id makes it sooner.",
       Range(1)),
    _K("connections.max.reauth.ms", LONG, 0,
       "Longest a SASL session lasts before the client must re-authenticate (KIP-368); a "
       "connection that goes on after that without re-authenticating is closed on its next "
       "request. 0: sessions do not expire.", Range(0)),
    _K("connection.failed.authentication.delay.ms", INT, 100,
       "How long the answer to a failed SASL authentication is held back, slowing down a "
       "client that keeps guessing.", Range(0)),
    # ---- authorization (ACLs) -------------------------------------------------------------
    _K("authorizer.class.name", STRING, "",
       "Set to enforce ACLs (kept in the metadata store, so alike on every broker). Kafka's "
       "AclAuthorizer and StandardAuthorizer names are accepted and mean logkeel's authorizer; "
       "empty: no authorization.",
       OneOf(("", *AUTHORIZER_CLASS_NAMES))),
    _K("super.users", STRING, "",
       "Principals allowed everything, separated by semicolons (User:admin;User:broker). In a "
       "cluster with an authorizer, include the brokers' inter-broker principal."),
    _K("allow.everyone.if.no.acl.found", BOOLEAN, False,
       "With an authorizer, allow every principal on a resource that no ACL names."),
    _K("num.io.threads", INT, 8, "Threads for request work that may block on disk.", Range(1)),
    _K("socket.send.buffer.bytes", INT, 102400, "SO_SNDBUF of server sockets; -1 = OS default.",
       unsupported=NOT_ENFORCED),
    _K("socket.receive.buffer.bytes", INT, 102400,
       "SO_RCVBUF of server sockets; -1 = OS default.",
       unsupported=NOT_ENFORCED),
    _K("socket.request.max.bytes", INT, 104857600,
       "Largest request accepted on a socket; guards memory against bogus size prefixes.",
       Range(1)),
    _K("socket.listen.backlog.size", INT, 50, "Listen backlog of server sockets.", Range(1)),
    _K("queued.max.requests", INT, 500,
       "Requests that may wait for processing before the network stops reading.", Range(1),
       unsupported=NOT_ENFORCED),
    _K("queued.max.request.bytes", LONG, 536870912,
       "The number of queued bytes allowed before no more requests are read: the bytes of "
       "requests being received, queued or handled, on all listeners together; a connection "
       "stops reading while they are spent. -1 or 0: unbounded. Must be at least "
       "socket.request.max.bytes when bounded. logkeel: 512 MiB by default (Kafka's default "
       "is -1) so that request memory is bounded out of the box, or socket.request.max.bytes "
       "if that is larger; receive buffers grow with the bytes that arrive, so this bounds "
       "what clients send, not what they declare.",
       Range(-1)),
    _K("sasl.server.max.receive.size", INT, 524288,
       "Largest frame read on a SASL listener before a successful login; a larger one closes "
       "the connection.", Range(1)),
    _K("max.connections", INT, INT32_MAX,
       "Most connections the broker accepts at once, over all listeners but the inter-broker "
       "one; listener.name.<listener>.max.connections limits one listener. A new connection "
       "beyond a limit waits, unserved, until one closes (Kafka's acceptor blocks), up to "
       "socket.listen.backlog.size waiting per listener; more are closed. logkeel: a full "
       "broker does not close the least recently used connection of another listener to make "
       "room for an inter-broker one (it needs none: that listener is exempt).", Range(0)),
    _K("max.connections.per.ip", INT, INT32_MAX,
       "Most connections from one IP address; more are closed at once. 0 is allowed with "
       "overrides in max.connections.per.ip.overrides.", Range(0)),
    _K("max.connections.per.ip.overrides", STRING, "",
       "Per-IP or host name exceptions to max.connections.per.ip, as host:count,ip:count "
       "(hostName:100,127.0.0.1:200)."),
    _K("max.connection.creation.rate", INT, INT32_MAX,
       "Most new connections per second over all listeners but the inter-broker one (KIP-612); "
       "listener.name.<listener>.max.connection.creation.rate limits one listener (the "
       "inter-broker one too). Connections beyond the rate wait before they are served.",
       Range(0)),
    _K("connections.max.idle.ms", LONG, 600000, "Idle connections are closed after this long."),
    _K("quota.window.num", INT, 11,
       "The number of samples a client quota's rate is measured over (KIP-13).", Range(1)),
    _K("quota.window.size.seconds", INT, 1,
       "The time span of each sample of a client quota's rate.", Range(1)),
    # ---- requests and topics --------------------------------------------------------------
    _K("message.max.bytes", INT, 1048588,
       "Largest record batch the broker accepts (after compression).", Range(0),
       topic="max.message.bytes",
       topic_doc="Largest record batch this topic accepts (after compression)."),
    _K("fetch.max.bytes", INT, 57671680, "Most bytes one Fetch response returns.", Range(1024)),
    _K("max.incremental.fetch.session.cache.slots", INT, 1000,
       "Most incremental fetch sessions (KIP-227) the broker keeps; 0 declines every session "
       "(fetchers then send every partition in every Fetch).", Range(0)),
    _K("num.partitions", INT, 1, "Partitions of an auto-created topic.", Range(1)),
    _K("default.replication.factor", INT, 1,
       "Replication factor of an auto-created topic.", Range(1)),
    _K("auto.create.topics.enable", BOOLEAN, True,
       "Create a topic when a client asks for metadata of one that does not exist."),
    _K("max.request.partition.size.limit", INT, 2000,
       "Most partitions one DescribeTopicPartitions answer holds; a client asking for more "
       "gets a cursor to the next page.", Range(1)),
    _K("delete.topic.enable", BOOLEAN, True, "Allow DeleteTopics; when false it is refused."),
    _K("compression.type", STRING, "producer",
       "Final compression of stored batches: producer keeps the producer's codec, uncompressed "
       "stores none, or one of gzip, snappy, lz4, zstd.", OneOf(COMPRESSION_TYPES),
       topic="compression.type",
       topic_doc="Final compression of this topic's batches: producer keeps the producer's "
       "codec; any other value recompresses batches written with another codec on append "
       "(offsets, timestamps, producer ids and sequences kept)."),
    _K("compression.gzip.level", INT, -1,
       "gzip level of batches the broker recompresses (KIP-390); -1: zlib's default (6).",
       AnyOf((Range(1, 9), OneOf((-1,)))), topic="compression.gzip.level"),
    _K("compression.lz4.level", INT, 9,
       "lz4 level of batches the broker recompresses (KIP-390); as in Kafka, the default uses "
       "lz4's fast compressor and any other level its high-compression mode.", Range(1, 17),
       topic="compression.lz4.level"),
    _K("compression.zstd.level", INT, 3,
       "zstd level of batches the broker recompresses (KIP-390).", Range(-131072, 22),
       topic="compression.zstd.level"),
    _K("min.insync.replicas", INT, 1,
       "With acks=all, the fewest in-sync replicas that must have a write for it to succeed; "
       "fewer gives NOT_ENOUGH_REPLICAS.", Range(1), topic="min.insync.replicas"),
    _K("unclean.leader.election.enable", BOOLEAN, False,
       "Allow a replica outside the ISR to become leader as a last resort, accepting data loss.",
       topic="unclean.leader.election.enable"),
    _K("replica.alter.log.dirs.io.max.bytes.per.second", LONG, 9223372036854775807,
       "The most bytes a second a replica move between this broker's log dirs copies "
       "(AlterReplicaLogDirs, KIP-113). Kafka shares it among all moves; logkeel gives it to "
       "each move. Read at start-up.", Range(1)),
    _K("log.dir.recovery.check.interval.ms", LONG, 10000,
       "logkeel's own (beyond KIP-18): how often an offline log dir is probed (write, sync, "
       "read back); one that answers again with the same directory id in its meta.properties is "
       "loaded through unclean recovery and serves again without a restart. 0: off (a restart "
       "brings it back).", Range(0)),
    _K("unclean.leader.election.wait.ms", LONG, 5000,
       "logkeel's own (as KIP-966's unclean recovery): before an unclean election the controller "
       "waits this long for every replica to report its log, ending early once all have, so "
       "that the longest log wins even when its broker starts a little later. 0: no wait.",
       Range(0)),
    # ---- log layout -----------------------------------------------------------------------
    _K("log.dir", STRING, DEFAULT_LOG_DIR,
       "Directory of the log data, used when log.dirs is unset. logkeel: defaults to "
       "./logkeel-data (Kafka: /tmp/kafka-logs, which many systems wipe at boot)."),
    _K("log.dirs", STRING, None,
       "Comma-separated log directories (JBOD); unset means log.dir. Each fails independently."),
    _K("log.segment.bytes", INT, 1073741824, "Size at which the active segment is rolled. "
       "logkeel: the lower bound stays at Kafka 3.x's 14 bytes (Kafka 4.0 requires 1 MiB) so "
       "that tests and benchmarks can force many segments.", Range(MIN_SEGMENT_BYTES),
       topic="segment.bytes", topic_doc="Size at which this topic's active segment is rolled."),
    _K("log.roll.ms", LONG, None,
       "Age at which the active segment is rolled even if not full; unset means log.roll.hours.",
       topic="segment.ms", topic_validator=Range(1),
       topic_doc="Age at which this topic's active segment is rolled even if not full."),
    _K("log.roll.hours", INT, 168, "Segment roll age in hours, used when log.roll.ms is unset.",
       Range(1), topic="segment.ms", topic_scale=HOUR_MS),
    _K("log.index.size.max.bytes", INT, 10485760,
       "Size of the preallocated offset index (and time index) of a segment; a full index rolls "
       "the segment.", Range(4), topic="segment.index.bytes"),
    _K("log.index.interval.bytes", INT, 4096,
       "Bytes of log between offset-index entries; smaller means denser indexes.", Range(0),
       topic="index.interval.bytes"),
    # ---- retention --------------------------------------------------------------------------
    _K("log.retention.ms", LONG, None,
       "Age after which a segment is deleted; -1 = no limit. Takes precedence over "
       "log.retention.minutes and log.retention.hours; any negative value means no limit.",
       topic="retention.ms", topic_validator=Range(-1),
       topic_doc="Age after which this topic's segments are deleted (delete policy); -1 = none."),
    _K("log.retention.minutes", INT, None,
       "Retention in minutes, used when log.retention.ms is unset.",
       topic="retention.ms", topic_scale=MINUTE_MS),
    _K("log.retention.hours", INT, 168,
       "Retention in hours, used when log.retention.ms and log.retention.minutes are unset.",
       topic="retention.ms", topic_scale=HOUR_MS),
    _K("log.retention.bytes", LONG, -1,
       "Partition size beyond which the oldest segments are deleted; -1 = no limit.",
       topic="retention.bytes"),
    _K("log.retention.check.interval.ms", LONG, 300000,
       "How often retention looks for segments to delete.", Range(1)),
    _K("log.cleanup.policy", LIST, ["delete"],
       "What happens to old segments: delete, compact, or both (comma-separated).",
       EachOneOf(CLEANUP_POLICIES), topic="cleanup.policy"),
    _K("log.segment.delete.delay.ms", LONG, 60000,
       "Delay between marking a segment deleted (.deleted suffix) and removing its files, so "
       "in-flight reads finish.", Range(0), topic="file.delete.delay.ms"),
    _K("log.cleaner.enable", BOOLEAN, True, "Run the log cleaner for compacted topics.",
       unsupported=CLEANER_ALWAYS_ON),
    _K("log.cleaner.delete.retention.ms", LONG, 86400000,
       "How long tombstones are kept in compacted topics.", Range(0),
       topic="delete.retention.ms"),
    _K("log.cleaner.min.compaction.lag.ms", LONG, 0,
       "Least time a record stays uncompacted.", Range(0), topic="min.compaction.lag.ms"),
    _K("log.cleaner.min.cleanable.ratio", DOUBLE, 0.5,
       "Dirty fraction of a log at which the cleaner compacts it.", Range(0, 1),
       topic="min.cleanable.dirty.ratio"),
    # ---- flushing and checkpoints ---------------------------------------------------------
    _K("log.flush.interval.messages", LONG, LONG_MAX,
       "Records appended to a partition before it is fsynced; the default leaves durability "
       "to replication and the OS.", Range(1), topic="flush.messages"),
    _K("log.flush.interval.ms", LONG, None,
       "Most time appended data stays unsynced; unset means log.flush.scheduler.interval.ms.",
       topic="flush.ms", topic_validator=Range(0),
       topic_doc="Most time appended data of this topic stays unsynced before an fsync."),
    _K("log.flush.scheduler.interval.ms", LONG, LONG_MAX,
       "How often the flusher checks whether a log is due for a flush.", topic="flush.ms"),
    _K("log.flush.offset.checkpoint.interval.ms", INT, 60000,
       "How often the recovery point (last flushed offset) of every partition is checkpointed.",
       Range(0)),
    _K("num.recovery.threads.per.data.dir", INT, 2,
       "Threads per log dir that load and recover logs at start-up and flush them at shutdown "
       "(Kafka 4.0 default; 1 before).", Range(1)),
    # ---- timestamps ----------------------------------------------------------------------
    _K("log.message.timestamp.type", STRING, "CreateTime",
       "Which timestamp batches keep: the producer's CreateTime or the broker's LogAppendTime.",
       OneOf(TIMESTAMP_TYPES), topic="message.timestamp.type"),
    _K("log.message.timestamp.before.max.ms", LONG, LONG_MAX,
       "With CreateTime, reject batches whose timestamp is more than this far in the past.",
       Range(0), topic="message.timestamp.before.max.ms"),
    _K("log.message.timestamp.after.max.ms", LONG, 3600000,
       "With CreateTime, reject batches whose timestamp is more than this far in the future "
       "(Kafka 4.0 default, one hour; unbounded before).", Range(0),
       topic="message.timestamp.after.max.ms"),
    # ---- replication ------------------------------------------------------------------------
    _K("replica.lag.time.max.ms", LONG, 30000,
       "A follower that has not caught up to the leader's end within this time leaves the ISR."),
    _K("replica.fetch.max.bytes", INT, 1048576,
       "Bytes a follower asks for per partition (a larger first batch is still returned).",
       Range(0)),
    _K("replica.fetch.response.max.bytes", INT, 10485760,
       "Bytes a follower asks for per fetch response.", Range(0)),
    _K("replica.socket.timeout.ms", INT, 30000, "Socket timeout of follower fetches.", Range(1)),
    _K("replica.fetch.wait.max.ms", INT, 500,
       "Longest a follower fetch waits on the leader; must not exceed replica.lag.time.max.ms.",
       Range(0)),
    _K("replica.fetch.min.bytes", INT, 1, "Bytes a follower fetch waits for.", Range(1)),
    _K("replica.fetch.backoff.ms", INT, 1000, "Pause after a failed follower fetch.", Range(0)),
    _K("num.replica.fetchers", INT, 1, "Fetchers per source broker.", Range(1)),
    _K("follower.fetch.pending.reads.insync.enable", BOOLEAN, True,
       "logkeel (from KIP-501): a follower with a fetch pending at or beyond the leader's log "
       "end stays in the ISR while the leader is slow to serve it. The KIP proposes false as "
       "its default; logkeel enables it because a slow leader must not shrink the ISR."),
    _K("replica.read.time.insync.factor", DOUBLE, 0.5,
       "logkeel (from KIP-501): a fetch whose processing took at least this fraction of "
       "replica.lag.time.max.ms counts as caught up at its completion time, not its start.",
       Range(0, 1, min_exclusive=True)),
    _K("follower.fetch.process.time.max.ms", LONG, 500,
       "logkeel (beyond KIP-501): a leader that takes longer than this to serve every in-sync "
       "follower's fetches (from reading the records to sending the last byte; a read timed "
       "partition by partition on its log dir's thread, so a busy CPU does not count), for longer "
       "than replica.lag.time.max.ms, asks the controller to hand leadership to one of them; "
       "it gets it back through a preferred election (auto.leader.rebalance.enable).",
       Range(1)),
    _K("replica.selector.class", STRING, None,
       "KIP-392: how a leader picks the replica a consumer should fetch from. Unset: the leader "
       "sends no consumer elsewhere (Kafka's default). "
       "org.apache.kafka.common.replica.RackAwareReplicaSelector: a consumer whose client.rack "
       "matches the broker.rack of an in-sync follower is told to fetch from it. Either way, "
       "as in Kafka, a follower serves a consumer's Fetch v11+ up to its high watermark. No "
       "other selector exists in logkeel.",
       OneOf(("", RACK_AWARE_REPLICA_SELECTOR))),
    # ---- groups and offsets ---------------------------------------------------------------
    _K("offsets.topic.num.partitions", INT, 50, "Partitions of __consumer_offsets.", Range(1)),
    _K("offsets.topic.replication.factor", SHORT, 1,
       "Replication factor of __consumer_offsets. logkeel: defaults to 1 so a single node can "
       "create it (Kafka: 3; its sample server.properties sets 1).", Range(1)),
    _K("offsets.topic.segment.bytes", INT, 104857600,
       "Segment size of __consumer_offsets.", Range(1)),
    _K("offsets.retention.minutes", INT, 10080,
       "Committed offsets of an empty group are dropped after this long.", Range(1)),
    _K("offsets.retention.check.interval.ms", LONG, 600000,
       "How often expired offsets are looked for.", Range(1)),
    _K("offset.metadata.max.bytes", INT, 4096, "Largest metadata string of an offset commit."),
    _K("group.initial.rebalance.delay.ms", INT, 3000,
       "Wait for more members before the first rebalance of a new group."),
    _K("group.min.session.timeout.ms", INT, 6000, "Smallest session timeout a member may use."),
    _K("group.max.session.timeout.ms", INT, 1800000, "Largest session timeout a member may use."),
    _K("group.max.size", INT, INT32_MAX, "Most members of one group.", Range(1)),
    # KIP-848 consumer-protocol groups: the broker decides session and heartbeat timing.
    _K("group.consumer.session.timeout.ms", INT, 45000,
       "A consumer-protocol member not heard from this long is removed.", Range(1)),
    _K("group.consumer.min.session.timeout.ms", INT, 45000,
       "Smallest allowed group.consumer.session.timeout.ms.", Range(1)),
    _K("group.consumer.max.session.timeout.ms", INT, 60000,
       "Largest allowed group.consumer.session.timeout.ms.", Range(1)),
    _K("group.consumer.heartbeat.interval.ms", INT, 5000,
       "How often consumer-protocol members heartbeat.", Range(1)),
    _K("group.consumer.min.heartbeat.interval.ms", INT, 5000,
       "Smallest allowed group.consumer.heartbeat.interval.ms.", Range(1)),
    _K("group.consumer.max.heartbeat.interval.ms", INT, 15000,
       "Largest allowed group.consumer.heartbeat.interval.ms.", Range(1)),
    _K("group.consumer.max.size", INT, INT32_MAX,
       "Most members of one consumer-protocol group.", Range(1)),
    _K("group.consumer.migration.policy", STRING, "bidirectional",
       "Which online conversions between a classic and a consumer group are allowed: "
       "disabled, upgrade, downgrade, bidirectional.",
       OneOf(("disabled", "upgrade", "downgrade", "bidirectional"))),
    _K("group.consumer.assignors", LIST, ["uniform", "range"],
       "Server-side assignors of consumer-protocol groups, the first being the default: "
       "uniform, range (or Kafka's class names of them).",
       EachOneOf(("uniform", "range",
                  "org.apache.kafka.coordinator.group.assignor.UniformAssignor",
                  "org.apache.kafka.coordinator.group.assignor.RangeAssignor"))),
    # ---- transactions and producers -------------------------------------------------------
    _K("transaction.state.log.num.partitions", INT, 50,
       "Partitions of __transaction_state.", Range(1)),
    _K("transaction.state.log.replication.factor", SHORT, 1,
       "Replication factor of __transaction_state. logkeel: defaults to 1 for a single node "
       "(Kafka: 3).", Range(1)),
    _K("transaction.state.log.min.isr", INT, 1,
       "min.insync.replicas of __transaction_state. logkeel: defaults to 1 (Kafka: 2).",
       Range(1)),
    _K("transaction.state.log.segment.bytes", INT, 104857600,
       "Segment size of __transaction_state.", Range(1)),
    _K("transaction.max.timeout.ms", INT, 900000, "Largest transaction timeout allowed.",
       Range(1)),
    _K("transaction.abort.timed.out.transaction.cleanup.interval.ms", INT, 10000,
       "How often transactions open past their timeout are looked for and aborted.", Range(1)),
    _K("transactional.id.expiration.ms", INT, 604800000,
       "A transactional id idle this long is expired.", Range(1)),
    _K("transaction.remove.expired.transaction.cleanup.interval.ms", INT, 3600000,
       "How often transactional ids idle past transactional.id.expiration.ms are removed.",
       Range(1)),
    _K("producer.id.expiration.ms", INT, 86400000,
       "Idempotent producer state idle this long is dropped.", Range(1)),
    # ---- logkeel start-up and recovery ----------------------------------------------------
    _K("producer.state.snapshot.interval.ms", LONG, 30000,
       "logkeel (from AutoMQ's AKIP-2): how often producer-state snapshots are written for each "
       "partition, besides the ones Kafka writes at segment roll and clean shutdown, so that "
       "recovery after a crash replays at most about this much of the log. 0 = only at roll "
       "and shutdown.", Range(0)),
    _K("log.recovery.checkpoint.interval.ms", LONG, 30000,
       "logkeel (from AutoMQ's AKIP-2): how often each partition's recovery checkpoints (the "
       "offsets up to which its transaction index and time index are known complete) are "
       "persisted, bounding what unclean recovery must replay.", Range(1)),
    _K("log.recovery.sync.method", STRING, "syncfs",
       "logkeel: how an unclean start-up makes what it recovered durable before checkpointing "
       "it. syncfs (as PostgreSQL's recovery_init_sync_method): one syncfs of each log dir's "
       "filesystem, one device flush for all partitions (it also writes back other dirty files "
       "of that filesystem; where syncfs does not exist, fsync is used). fsync: every recovered "
       "partition's files, 16 at a time.", OneOf(("syncfs", "fsync"))),
    _K("log.startup.validation", STRING, "lazy",
       "logkeel (KIP-263): lazy validates only each partition's active segment at a clean "
       "start-up and the others on first access or in the background; eager validates every "
       "segment before serving (Kafka's behaviour).", OneOf(STARTUP_VALIDATION_MODES)),
    _K("log.startup.validation.rate.bytes.per.sec", LONG, 50 * 1024 * 1024,
       "logkeel (KIP-263): read rate limit of the background validator of inactive segments in "
       "lazy mode, in bytes per second across all log dirs. 0 turns the background validator "
       "off; segments are then validated only when first read.", Range(0)),
)
# fmt: on


def derive_topic_keys(broker_keys: tuple[ConfigKey, ...]) -> tuple[ConfigKey, ...]:
    """Topic configs from the broker rows that feed them: type, rule and doc of the primary
    synonym, the static default resolved through the synonyms in priority order."""
    groups: dict[str, list[ConfigKey]] = {}
    for key in broker_keys:
        if key.topic is not None:
            groups.setdefault(key.topic, []).append(key)
    topic_keys = []
    for topic, synonyms in groups.items():
        primary = synonyms[0]
        if primary.topic_scale != 1:
            raise ValueError(f"primary synonym of {topic} must be in the topic's unit")
        default = next((s.default * s.topic_scale for s in synonyms if s.default is not None), None)
        topic_keys.append(
            ConfigKey(
                name=topic,
                type=primary.type,
                default=default,
                doc=primary.topic_doc or primary.doc,
                validator=primary.topic_validator or primary.validator,
                synonyms=tuple((s.name, s.topic_scale) for s in synonyms),
                unsupported=primary.unsupported,
            )
        )
    return tuple(topic_keys)


BROKER_CONFIG_DEF = ConfigDef(BROKER_KEYS)
# Topic configs no broker setting defaults (Kafka's topic-only configs).
TOPIC_ONLY_KEYS: tuple[ConfigKey, ...] = tuple(
    _K(f"{side}.replication.throttled.replicas", LIST, [],
       f"Replicas throttled on the {side} side while they are not in sync (a reassignment's "
       f"moves): partitionId:brokerId entries, or * for every replica of the topic; the rate "
       f"is the broker's dynamic {side}.replication.throttled.rate.",
       ThrottledReplicasFormat())
    for side in ("leader", "follower")
)  # fmt: skip
TOPIC_CONFIG_DEF = ConfigDef(derive_topic_keys(BROKER_KEYS) + TOPIC_ONLY_KEYS)


# Kafka's topic-level configs that logkeel does not define: a CreateTopics or AlterConfigs that
# sets one is refused as "not supported yet" rather than as an unknown name.
KAFKA_TOPIC_CONFIGS_NOT_SUPPORTED = frozenset({
    "local.retention.bytes", "local.retention.ms", "max.compaction.lag.ms",
    "message.downconversion.enable", "message.format.version",
    "message.timestamp.difference.max.ms", "preallocate", "remote.log.copy.disable",
    "remote.log.delete.on.disable", "remote.storage.enable", "segment.jitter.ms",
})  # fmt: skip


def broker_synonyms(topic_name: str) -> tuple[str, ...]:
    """Broker settings that default a topic config, highest priority first (DescribeConfigs
    synonyms)."""
    return tuple(name for name, _ in TOPIC_CONFIG_DEF[topic_name].synonyms)
