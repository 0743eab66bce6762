"""The request and response types of each API the broker serves: the union of kio's
generated classes over the versions its handler is registered for (tests/server/
test_messages.py holds the two together). A handler names these instead of ``Any``, so
mypy checks every field it reads against every version it serves."""

from __future__ import annotations

from typing import TypeAlias

# A table, one line per name (formatted, each union member would take a line of its own).
# fmt: off
from kio.schema.add_offsets_to_txn import v0 as add_offsets_to_txn_v0
from kio.schema.add_offsets_to_txn import v1 as add_offsets_to_txn_v1
from kio.schema.add_offsets_to_txn import v2 as add_offsets_to_txn_v2
from kio.schema.add_offsets_to_txn import v3 as add_offsets_to_txn_v3
from kio.schema.add_partitions_to_txn import v0 as add_partitions_to_txn_v0
from kio.schema.add_partitions_to_txn import v1 as add_partitions_to_txn_v1
from kio.schema.add_partitions_to_txn import v2 as add_partitions_to_txn_v2
from kio.schema.add_partitions_to_txn import v3 as add_partitions_to_txn_v3
from kio.schema.alter_client_quotas import v0 as alter_client_quotas_v0
from kio.schema.alter_client_quotas import v1 as alter_client_quotas_v1
from kio.schema.alter_configs import v0 as alter_configs_v0
from kio.schema.alter_configs import v1 as alter_configs_v1
from kio.schema.alter_configs import v2 as alter_configs_v2
from kio.schema.alter_partition_reassignments import v0 as alter_partition_reassignments_v0
from kio.schema.alter_replica_log_dirs import v1 as alter_replica_log_dirs_v1
from kio.schema.alter_replica_log_dirs import v2 as alter_replica_log_dirs_v2
from kio.schema.alter_user_scram_credentials import v0 as alter_user_scram_credentials_v0
from kio.schema.api_versions import v0 as api_versions_v0
from kio.schema.api_versions import v1 as api_versions_v1
from kio.schema.api_versions import v2 as api_versions_v2
from kio.schema.api_versions import v3 as api_versions_v3
from kio.schema.api_versions import v4 as api_versions_v4
from kio.schema.consumer_group_describe import v0 as consumer_group_describe_v0
from kio.schema.consumer_group_describe import v1 as consumer_group_describe_v1
from kio.schema.consumer_group_heartbeat import v0 as consumer_group_heartbeat_v0
from kio.schema.consumer_group_heartbeat import v1 as consumer_group_heartbeat_v1
from kio.schema.create_acls import v1 as create_acls_v1
from kio.schema.create_acls import v2 as create_acls_v2
from kio.schema.create_acls import v3 as create_acls_v3
from kio.schema.create_partitions import v0 as create_partitions_v0
from kio.schema.create_partitions import v1 as create_partitions_v1
from kio.schema.create_partitions import v2 as create_partitions_v2
from kio.schema.create_partitions import v3 as create_partitions_v3
from kio.schema.create_topics import v2 as create_topics_v2
from kio.schema.create_topics import v3 as create_topics_v3
from kio.schema.create_topics import v4 as create_topics_v4
from kio.schema.create_topics import v5 as create_topics_v5
from kio.schema.create_topics import v6 as create_topics_v6
from kio.schema.create_topics import v7 as create_topics_v7
from kio.schema.delete_acls import v1 as delete_acls_v1
from kio.schema.delete_acls import v2 as delete_acls_v2
from kio.schema.delete_acls import v3 as delete_acls_v3
from kio.schema.delete_groups import v0 as delete_groups_v0
from kio.schema.delete_groups import v1 as delete_groups_v1
from kio.schema.delete_groups import v2 as delete_groups_v2
from kio.schema.delete_records import v0 as delete_records_v0
from kio.schema.delete_records import v1 as delete_records_v1
from kio.schema.delete_records import v2 as delete_records_v2
from kio.schema.delete_topics import v1 as delete_topics_v1
from kio.schema.delete_topics import v2 as delete_topics_v2
from kio.schema.delete_topics import v3 as delete_topics_v3
from kio.schema.delete_topics import v4 as delete_topics_v4
from kio.schema.delete_topics import v5 as delete_topics_v5
from kio.schema.delete_topics import v6 as delete_topics_v6
from kio.schema.describe_acls import v1 as describe_acls_v1
from kio.schema.describe_acls import v2 as describe_acls_v2
from kio.schema.describe_acls import v3 as describe_acls_v3
from kio.schema.describe_client_quotas import v0 as describe_client_quotas_v0
from kio.schema.describe_client_quotas import v1 as describe_client_quotas_v1
from kio.schema.describe_cluster import v0 as describe_cluster_v0
from kio.schema.describe_cluster import v1 as describe_cluster_v1
from kio.schema.describe_cluster import v2 as describe_cluster_v2
from kio.schema.describe_configs import v1 as describe_configs_v1
from kio.schema.describe_configs import v2 as describe_configs_v2
from kio.schema.describe_configs import v3 as describe_configs_v3
from kio.schema.describe_configs import v4 as describe_configs_v4
from kio.schema.describe_groups import v0 as describe_groups_v0
from kio.schema.describe_groups import v1 as describe_groups_v1
from kio.schema.describe_groups import v2 as describe_groups_v2
from kio.schema.describe_groups import v3 as describe_groups_v3
from kio.schema.describe_groups import v4 as describe_groups_v4
from kio.schema.describe_groups import v5 as describe_groups_v5
from kio.schema.describe_groups import v6 as describe_groups_v6
from kio.schema.describe_log_dirs import v1 as describe_log_dirs_v1
from kio.schema.describe_log_dirs import v2 as describe_log_dirs_v2
from kio.schema.describe_log_dirs import v3 as describe_log_dirs_v3
from kio.schema.describe_log_dirs import v4 as describe_log_dirs_v4
from kio.schema.describe_log_dirs import v5 as describe_log_dirs_v5
from kio.schema.describe_producers import v0 as describe_producers_v0
from kio.schema.describe_topic_partitions import v0 as describe_topic_partitions_v0
from kio.schema.describe_transactions import v0 as describe_transactions_v0
from kio.schema.describe_user_scram_credentials import v0 as describe_user_scram_credentials_v0
from kio.schema.elect_leaders import v0 as elect_leaders_v0
from kio.schema.elect_leaders import v1 as elect_leaders_v1
from kio.schema.elect_leaders import v2 as elect_leaders_v2
from kio.schema.end_txn import v0 as end_txn_v0
from kio.schema.end_txn import v1 as end_txn_v1
from kio.schema.end_txn import v2 as end_txn_v2
from kio.schema.end_txn import v3 as end_txn_v3
from kio.schema.fetch import v4 as fetch_v4
from kio.schema.fetch import v5 as fetch_v5
from kio.schema.fetch import v6 as fetch_v6
from kio.schema.fetch import v7 as fetch_v7
from kio.schema.fetch import v8 as fetch_v8
from kio.schema.fetch import v9 as fetch_v9
from kio.schema.fetch import v10 as fetch_v10
from kio.schema.fetch import v11 as fetch_v11
from kio.schema.fetch import v12 as fetch_v12
from kio.schema.fetch import v13 as fetch_v13
from kio.schema.fetch import v14 as fetch_v14
from kio.schema.fetch import v15 as fetch_v15
from kio.schema.fetch import v16 as fetch_v16
from kio.schema.fetch import v17 as fetch_v17
from kio.schema.fetch import v18 as fetch_v18
from kio.schema.find_coordinator import v0 as find_coordinator_v0
from kio.schema.find_coordinator import v1 as find_coordinator_v1
from kio.schema.find_coordinator import v2 as find_coordinator_v2
from kio.schema.find_coordinator import v3 as find_coordinator_v3
from kio.schema.find_coordinator import v4 as find_coordinator_v4
from kio.schema.find_coordinator import v5 as find_coordinator_v5
from kio.schema.find_coordinator import v6 as find_coordinator_v6
from kio.schema.heartbeat import v0 as heartbeat_v0
from kio.schema.heartbeat import v1 as heartbeat_v1
from kio.schema.heartbeat import v2 as heartbeat_v2
from kio.schema.heartbeat import v3 as heartbeat_v3
from kio.schema.heartbeat import v4 as heartbeat_v4
from kio.schema.incremental_alter_configs import v0 as incremental_alter_configs_v0
from kio.schema.incremental_alter_configs import v1 as incremental_alter_configs_v1
from kio.schema.init_producer_id import v0 as init_producer_id_v0
from kio.schema.init_producer_id import v1 as init_producer_id_v1
from kio.schema.init_producer_id import v2 as init_producer_id_v2
from kio.schema.init_producer_id import v3 as init_producer_id_v3
from kio.schema.init_producer_id import v4 as init_producer_id_v4
from kio.schema.init_producer_id import v5 as init_producer_id_v5
from kio.schema.join_group import v0 as join_group_v0
from kio.schema.join_group import v1 as join_group_v1
from kio.schema.join_group import v2 as join_group_v2
from kio.schema.join_group import v3 as join_group_v3
from kio.schema.join_group import v4 as join_group_v4
from kio.schema.join_group import v5 as join_group_v5
from kio.schema.join_group import v6 as join_group_v6
from kio.schema.join_group import v7 as join_group_v7
from kio.schema.join_group import v8 as join_group_v8
from kio.schema.join_group import v9 as join_group_v9
from kio.schema.leave_group import v0 as leave_group_v0
from kio.schema.leave_group import v1 as leave_group_v1
from kio.schema.leave_group import v2 as leave_group_v2
from kio.schema.leave_group import v3 as leave_group_v3
from kio.schema.leave_group import v4 as leave_group_v4
from kio.schema.leave_group import v5 as leave_group_v5
from kio.schema.list_groups import v0 as list_groups_v0
from kio.schema.list_groups import v1 as list_groups_v1
from kio.schema.list_groups import v2 as list_groups_v2
from kio.schema.list_groups import v3 as list_groups_v3
from kio.schema.list_groups import v4 as list_groups_v4
from kio.schema.list_groups import v5 as list_groups_v5
from kio.schema.list_offsets import v1 as list_offsets_v1
from kio.schema.list_offsets import v2 as list_offsets_v2
from kio.schema.list_offsets import v3 as list_offsets_v3
from kio.schema.list_offsets import v4 as list_offsets_v4
from kio.schema.list_offsets import v5 as list_offsets_v5
from kio.schema.list_offsets import v6 as list_offsets_v6
from kio.schema.list_offsets import v7 as list_offsets_v7
from kio.schema.list_offsets import v8 as list_offsets_v8
from kio.schema.list_offsets import v9 as list_offsets_v9
from kio.schema.list_offsets import v10 as list_offsets_v10
from kio.schema.list_offsets import v11 as list_offsets_v11
from kio.schema.list_partition_reassignments import v0 as list_partition_reassignments_v0
from kio.schema.list_transactions import v0 as list_transactions_v0
from kio.schema.list_transactions import v1 as list_transactions_v1
from kio.schema.list_transactions import v2 as list_transactions_v2
from kio.schema.metadata import v0 as metadata_v0
from kio.schema.metadata import v1 as metadata_v1
from kio.schema.metadata import v2 as metadata_v2
from kio.schema.metadata import v3 as metadata_v3
from kio.schema.metadata import v4 as metadata_v4
from kio.schema.metadata import v5 as metadata_v5
from kio.schema.metadata import v6 as metadata_v6
from kio.schema.metadata import v7 as metadata_v7
from kio.schema.metadata import v8 as metadata_v8
from kio.schema.metadata import v9 as metadata_v9
from kio.schema.metadata import v10 as metadata_v10
from kio.schema.metadata import v11 as metadata_v11
from kio.schema.metadata import v12 as metadata_v12
from kio.schema.metadata import v13 as metadata_v13
from kio.schema.offset_commit import v2 as offset_commit_v2
from kio.schema.offset_commit import v3 as offset_commit_v3
from kio.schema.offset_commit import v4 as offset_commit_v4
from kio.schema.offset_commit import v5 as offset_commit_v5
from kio.schema.offset_commit import v6 as offset_commit_v6
from kio.schema.offset_commit import v7 as offset_commit_v7
from kio.schema.offset_commit import v8 as offset_commit_v8
from kio.schema.offset_commit import v9 as offset_commit_v9
from kio.schema.offset_delete import v0 as offset_delete_v0
from kio.schema.offset_fetch import v1 as offset_fetch_v1
from kio.schema.offset_fetch import v2 as offset_fetch_v2
from kio.schema.offset_fetch import v3 as offset_fetch_v3
from kio.schema.offset_fetch import v4 as offset_fetch_v4
from kio.schema.offset_fetch import v5 as offset_fetch_v5
from kio.schema.offset_fetch import v6 as offset_fetch_v6
from kio.schema.offset_fetch import v7 as offset_fetch_v7
from kio.schema.offset_fetch import v8 as offset_fetch_v8
from kio.schema.offset_fetch import v9 as offset_fetch_v9
from kio.schema.offset_for_leader_epoch import v2 as offset_for_leader_epoch_v2
from kio.schema.offset_for_leader_epoch import v3 as offset_for_leader_epoch_v3
from kio.schema.offset_for_leader_epoch import v4 as offset_for_leader_epoch_v4
from kio.schema.produce import v3 as produce_v3
from kio.schema.produce import v4 as produce_v4
from kio.schema.produce import v5 as produce_v5
from kio.schema.produce import v6 as produce_v6
from kio.schema.produce import v7 as produce_v7
from kio.schema.produce import v8 as produce_v8
from kio.schema.produce import v9 as produce_v9
from kio.schema.produce import v10 as produce_v10
from kio.schema.produce import v11 as produce_v11
from kio.schema.produce import v12 as produce_v12
from kio.schema.produce import v13 as produce_v13
from kio.schema.sasl_authenticate import v0 as sasl_authenticate_v0
from kio.schema.sasl_authenticate import v1 as sasl_authenticate_v1
from kio.schema.sasl_authenticate import v2 as sasl_authenticate_v2
from kio.schema.sasl_handshake import v0 as sasl_handshake_v0
from kio.schema.sasl_handshake import v1 as sasl_handshake_v1
from kio.schema.sync_group import v0 as sync_group_v0
from kio.schema.sync_group import v1 as sync_group_v1
from kio.schema.sync_group import v2 as sync_group_v2
from kio.schema.sync_group import v3 as sync_group_v3
from kio.schema.sync_group import v4 as sync_group_v4
from kio.schema.sync_group import v5 as sync_group_v5
from kio.schema.txn_offset_commit import v0 as txn_offset_commit_v0
from kio.schema.txn_offset_commit import v1 as txn_offset_commit_v1
from kio.schema.txn_offset_commit import v2 as txn_offset_commit_v2
from kio.schema.txn_offset_commit import v3 as txn_offset_commit_v3
from kio.schema.write_txn_markers import v1 as write_txn_markers_v1

ProduceRequest: TypeAlias = produce_v3.ProduceRequest | produce_v4.ProduceRequest | produce_v5.ProduceRequest | produce_v6.ProduceRequest | produce_v7.ProduceRequest | produce_v8.ProduceRequest | produce_v9.ProduceRequest | produce_v10.ProduceRequest | produce_v11.ProduceRequest | produce_v12.ProduceRequest | produce_v13.ProduceRequest
ProduceResponse: TypeAlias = produce_v3.ProduceResponse | produce_v4.ProduceResponse | produce_v5.ProduceResponse | produce_v6.ProduceResponse | produce_v7.ProduceResponse | produce_v8.ProduceResponse | produce_v9.ProduceResponse | produce_v10.ProduceResponse | produce_v11.ProduceResponse | produce_v12.ProduceResponse | produce_v13.ProduceResponse
FetchRequest: TypeAlias = fetch_v4.FetchRequest | fetch_v5.FetchRequest | fetch_v6.FetchRequest | fetch_v7.FetchRequest | fetch_v8.FetchRequest | fetch_v9.FetchRequest | fetch_v10.FetchRequest | fetch_v11.FetchRequest | fetch_v12.FetchRequest | fetch_v13.FetchRequest | fetch_v14.FetchRequest | fetch_v15.FetchRequest | fetch_v16.FetchRequest | fetch_v17.FetchRequest | fetch_v18.FetchRequest
FetchResponse: TypeAlias = fetch_v4.FetchResponse | fetch_v5.FetchResponse | fetch_v6.FetchResponse | fetch_v7.FetchResponse | fetch_v8.FetchResponse | fetch_v9.FetchResponse | fetch_v10.FetchResponse | fetch_v11.FetchResponse | fetch_v12.FetchResponse | fetch_v13.FetchResponse | fetch_v14.FetchResponse | fetch_v15.FetchResponse | fetch_v16.FetchResponse | fetch_v17.FetchResponse | fetch_v18.FetchResponse
ListOffsetsRequest: TypeAlias = list_offsets_v1.ListOffsetsRequest | list_offsets_v2.ListOffsetsRequest | list_offsets_v3.ListOffsetsRequest | list_offsets_v4.ListOffsetsRequest | list_offsets_v5.ListOffsetsRequest | list_offsets_v6.ListOffsetsRequest | list_offsets_v7.ListOffsetsRequest | list_offsets_v8.ListOffsetsRequest | list_offsets_v9.ListOffsetsRequest | list_offsets_v10.ListOffsetsRequest | list_offsets_v11.ListOffsetsRequest
ListOffsetsResponse: TypeAlias = list_offsets_v1.ListOffsetsResponse | list_offsets_v2.ListOffsetsResponse | list_offsets_v3.ListOffsetsResponse | list_offsets_v4.ListOffsetsResponse | list_offsets_v5.ListOffsetsResponse | list_offsets_v6.ListOffsetsResponse | list_offsets_v7.ListOffsetsResponse | list_offsets_v8.ListOffsetsResponse | list_offsets_v9.ListOffsetsResponse | list_offsets_v10.ListOffsetsResponse | list_offsets_v11.ListOffsetsResponse
MetadataRequest: TypeAlias = metadata_v0.MetadataRequest | metadata_v1.MetadataRequest | metadata_v2.MetadataRequest | metadata_v3.MetadataRequest | metadata_v4.MetadataRequest | metadata_v5.MetadataRequest | metadata_v6.MetadataRequest | metadata_v7.MetadataRequest | metadata_v8.MetadataRequest | metadata_v9.MetadataRequest | metadata_v10.MetadataRequest | metadata_v11.MetadataRequest | metadata_v12.MetadataRequest | metadata_v13.MetadataRequest
MetadataResponse: TypeAlias = metadata_v0.MetadataResponse | metadata_v1.MetadataResponse | metadata_v2.MetadataResponse | metadata_v3.MetadataResponse | metadata_v4.MetadataResponse | metadata_v5.MetadataResponse | metadata_v6.MetadataResponse | metadata_v7.MetadataResponse | metadata_v8.MetadataResponse | metadata_v9.MetadataResponse | metadata_v10.MetadataResponse | metadata_v11.MetadataResponse | metadata_v12.MetadataResponse | metadata_v13.MetadataResponse
OffsetCommitRequest: TypeAlias = offset_commit_v2.OffsetCommitRequest | offset_commit_v3.OffsetCommitRequest | offset_commit_v4.OffsetCommitRequest | offset_commit_v5.OffsetCommitRequest | offset_commit_v6.OffsetCommitRequest | offset_commit_v7.OffsetCommitRequest | offset_commit_v8.OffsetCommitRequest | offset_commit_v9.OffsetCommitRequest
OffsetCommitResponse: TypeAlias = offset_commit_v2.OffsetCommitResponse | offset_commit_v3.OffsetCommitResponse | offset_commit_v4.OffsetCommitResponse | offset_commit_v5.OffsetCommitResponse | offset_commit_v6.OffsetCommitResponse | offset_commit_v7.OffsetCommitResponse | offset_commit_v8.OffsetCommitResponse | offset_commit_v9.OffsetCommitResponse
OffsetFetchRequest: TypeAlias = offset_fetch_v1.OffsetFetchRequest | offset_fetch_v2.OffsetFetchRequest | offset_fetch_v3.OffsetFetchRequest | offset_fetch_v4.OffsetFetchRequest | offset_fetch_v5.OffsetFetchRequest | offset_fetch_v6.OffsetFetchRequest | offset_fetch_v7.OffsetFetchRequest | offset_fetch_v8.OffsetFetchRequest | offset_fetch_v9.OffsetFetchRequest
OffsetFetchResponse: TypeAlias = offset_fetch_v1.OffsetFetchResponse | offset_fetch_v2.OffsetFetchResponse | offset_fetch_v3.OffsetFetchResponse | offset_fetch_v4.OffsetFetchResponse | offset_fetch_v5.OffsetFetchResponse | offset_fetch_v6.OffsetFetchResponse | offset_fetch_v7.OffsetFetchResponse | offset_fetch_v8.OffsetFetchResponse | offset_fetch_v9.OffsetFetchResponse
FindCoordinatorRequest: TypeAlias = find_coordinator_v0.FindCoordinatorRequest | find_coordinator_v1.FindCoordinatorRequest | find_coordinator_v2.FindCoordinatorRequest | find_coordinator_v3.FindCoordinatorRequest | find_coordinator_v4.FindCoordinatorRequest | find_coordinator_v5.FindCoordinatorRequest | find_coordinator_v6.FindCoordinatorRequest
FindCoordinatorResponse: TypeAlias = find_coordinator_v0.FindCoordinatorResponse | find_coordinator_v1.FindCoordinatorResponse | find_coordinator_v2.FindCoordinatorResponse | find_coordinator_v3.FindCoordinatorResponse | find_coordinator_v4.FindCoordinatorResponse | find_coordinator_v5.FindCoordinatorResponse | find_coordinator_v6.FindCoordinatorResponse
JoinGroupRequest: TypeAlias = join_group_v0.JoinGroupRequest | join_group_v1.JoinGroupRequest | join_group_v2.JoinGroupRequest | join_group_v3.JoinGroupRequest | join_group_v4.JoinGroupRequest | join_group_v5.JoinGroupRequest | join_group_v6.JoinGroupRequest | join_group_v7.JoinGroupRequest | join_group_v8.JoinGroupRequest | join_group_v9.JoinGroupRequest
JoinGroupResponse: TypeAlias = join_group_v0.JoinGroupResponse | join_group_v1.JoinGroupResponse | join_group_v2.JoinGroupResponse | join_group_v3.JoinGroupResponse | join_group_v4.JoinGroupResponse | join_group_v5.JoinGroupResponse | join_group_v6.JoinGroupResponse | join_group_v7.JoinGroupResponse | join_group_v8.JoinGroupResponse | join_group_v9.JoinGroupResponse
HeartbeatRequest: TypeAlias = heartbeat_v0.HeartbeatRequest | heartbeat_v1.HeartbeatRequest | heartbeat_v2.HeartbeatRequest | heartbeat_v3.HeartbeatRequest | heartbeat_v4.HeartbeatRequest
HeartbeatResponse: TypeAlias = heartbeat_v0.HeartbeatResponse | heartbeat_v1.HeartbeatResponse | heartbeat_v2.HeartbeatResponse | heartbeat_v3.HeartbeatResponse | heartbeat_v4.HeartbeatResponse
LeaveGroupRequest: TypeAlias = leave_group_v0.LeaveGroupRequest | leave_group_v1.LeaveGroupRequest | leave_group_v2.LeaveGroupRequest | leave_group_v3.LeaveGroupRequest | leave_group_v4.LeaveGroupRequest | leave_group_v5.LeaveGroupRequest
LeaveGroupResponse: TypeAlias = leave_group_v0.LeaveGroupResponse | leave_group_v1.LeaveGroupResponse | leave_group_v2.LeaveGroupResponse | leave_group_v3.LeaveGroupResponse | leave_group_v4.LeaveGroupResponse | leave_group_v5.LeaveGroupResponse
SyncGroupRequest: TypeAlias = sync_group_v0.SyncGroupRequest | sync_group_v1.SyncGroupRequest | sync_group_v2.SyncGroupRequest | sync_group_v3.SyncGroupRequest | sync_group_v4.SyncGroupRequest | sync_group_v5.SyncGroupRequest
SyncGroupResponse: TypeAlias = sync_group_v0.SyncGroupResponse | sync_group_v1.SyncGroupResponse | sync_group_v2.SyncGroupResponse | sync_group_v3.SyncGroupResponse | sync_group_v4.SyncGroupResponse | sync_group_v5.SyncGroupResponse
DescribeGroupsRequest: TypeAlias = describe_groups_v0.DescribeGroupsRequest | describe_groups_v1.DescribeGroupsRequest | describe_groups_v2.DescribeGroupsRequest | describe_groups_v3.DescribeGroupsRequest | describe_groups_v4.DescribeGroupsRequest | describe_groups_v5.DescribeGroupsRequest | describe_groups_v6.DescribeGroupsRequest
DescribeGroupsResponse: TypeAlias = describe_groups_v0.DescribeGroupsResponse | describe_groups_v1.DescribeGroupsResponse | describe_groups_v2.DescribeGroupsResponse | describe_groups_v3.DescribeGroupsResponse | describe_groups_v4.DescribeGroupsResponse | describe_groups_v5.DescribeGroupsResponse | describe_groups_v6.DescribeGroupsResponse
ListGroupsRequest: TypeAlias = list_groups_v0.ListGroupsRequest | list_groups_v1.ListGroupsRequest | list_groups_v2.ListGroupsRequest | list_groups_v3.ListGroupsRequest | list_groups_v4.ListGroupsRequest | list_groups_v5.ListGroupsRequest
ListGroupsResponse: TypeAlias = list_groups_v0.ListGroupsResponse | list_groups_v1.ListGroupsResponse | list_groups_v2.ListGroupsResponse | list_groups_v3.ListGroupsResponse | list_groups_v4.ListGroupsResponse | list_groups_v5.ListGroupsResponse
SaslHandshakeRequest: TypeAlias = sasl_handshake_v0.SaslHandshakeRequest | sasl_handshake_v1.SaslHandshakeRequest
SaslHandshakeResponse: TypeAlias = sasl_handshake_v0.SaslHandshakeResponse | sasl_handshake_v1.SaslHandshakeResponse
ApiVersionsRequest: TypeAlias = api_versions_v0.ApiVersionsRequest | api_versions_v1.ApiVersionsRequest | api_versions_v2.ApiVersionsRequest | api_versions_v3.ApiVersionsRequest | api_versions_v4.ApiVersionsRequest
ApiVersionsResponse: TypeAlias = api_versions_v0.ApiVersionsResponse | api_versions_v1.ApiVersionsResponse | api_versions_v2.ApiVersionsResponse | api_versions_v3.ApiVersionsResponse | api_versions_v4.ApiVersionsResponse
CreateTopicsRequest: TypeAlias = create_topics_v2.CreateTopicsRequest | create_topics_v3.CreateTopicsRequest | create_topics_v4.CreateTopicsRequest | create_topics_v5.CreateTopicsRequest | create_topics_v6.CreateTopicsRequest | create_topics_v7.CreateTopicsRequest
CreateTopicsResponse: TypeAlias = create_topics_v2.CreateTopicsResponse | create_topics_v3.CreateTopicsResponse | create_topics_v4.CreateTopicsResponse | create_topics_v5.CreateTopicsResponse | create_topics_v6.CreateTopicsResponse | create_topics_v7.CreateTopicsResponse
DeleteTopicsRequest: TypeAlias = delete_topics_v1.DeleteTopicsRequest | delete_topics_v2.DeleteTopicsRequest | delete_topics_v3.DeleteTopicsRequest | delete_topics_v4.DeleteTopicsRequest | delete_topics_v5.DeleteTopicsRequest | delete_topics_v6.DeleteTopicsRequest
DeleteTopicsResponse: TypeAlias = delete_topics_v1.DeleteTopicsResponse | delete_topics_v2.DeleteTopicsResponse | delete_topics_v3.DeleteTopicsResponse | delete_topics_v4.DeleteTopicsResponse | delete_topics_v5.DeleteTopicsResponse | delete_topics_v6.DeleteTopicsResponse
DeleteRecordsRequest: TypeAlias = delete_records_v0.DeleteRecordsRequest | delete_records_v1.DeleteRecordsRequest | delete_records_v2.DeleteRecordsRequest
DeleteRecordsResponse: TypeAlias = delete_records_v0.DeleteRecordsResponse | delete_records_v1.DeleteRecordsResponse | delete_records_v2.DeleteRecordsResponse
InitProducerIdRequest: TypeAlias = init_producer_id_v0.InitProducerIdRequest | init_producer_id_v1.InitProducerIdRequest | init_producer_id_v2.InitProducerIdRequest | init_producer_id_v3.InitProducerIdRequest | init_producer_id_v4.InitProducerIdRequest | init_producer_id_v5.InitProducerIdRequest
InitProducerIdResponse: TypeAlias = init_producer_id_v0.InitProducerIdResponse | init_producer_id_v1.InitProducerIdResponse | init_producer_id_v2.InitProducerIdResponse | init_producer_id_v3.InitProducerIdResponse | init_producer_id_v4.InitProducerIdResponse | init_producer_id_v5.InitProducerIdResponse
OffsetForLeaderEpochRequest: TypeAlias = offset_for_leader_epoch_v2.OffsetForLeaderEpochRequest | offset_for_leader_epoch_v3.OffsetForLeaderEpochRequest | offset_for_leader_epoch_v4.OffsetForLeaderEpochRequest
OffsetForLeaderEpochResponse: TypeAlias = offset_for_leader_epoch_v2.OffsetForLeaderEpochResponse | offset_for_leader_epoch_v3.OffsetForLeaderEpochResponse | offset_for_leader_epoch_v4.OffsetForLeaderEpochResponse
AddPartitionsToTxnRequest: TypeAlias = add_partitions_to_txn_v0.AddPartitionsToTxnRequest | add_partitions_to_txn_v1.AddPartitionsToTxnRequest | add_partitions_to_txn_v2.AddPartitionsToTxnRequest | add_partitions_to_txn_v3.AddPartitionsToTxnRequest
AddPartitionsToTxnResponse: TypeAlias = add_partitions_to_txn_v0.AddPartitionsToTxnResponse | add_partitions_to_txn_v1.AddPartitionsToTxnResponse | add_partitions_to_txn_v2.AddPartitionsToTxnResponse | add_partitions_to_txn_v3.AddPartitionsToTxnResponse
AddOffsetsToTxnRequest: TypeAlias = add_offsets_to_txn_v0.AddOffsetsToTxnRequest | add_offsets_to_txn_v1.AddOffsetsToTxnRequest | add_offsets_to_txn_v2.AddOffsetsToTxnRequest | add_offsets_to_txn_v3.AddOffsetsToTxnRequest
AddOffsetsToTxnResponse: TypeAlias = add_offsets_to_txn_v0.AddOffsetsToTxnResponse | add_offsets_to_txn_v1.AddOffsetsToTxnResponse | add_offsets_to_txn_v2.AddOffsetsToTxnResponse | add_offsets_to_txn_v3.AddOffsetsToTxnResponse
EndTxnRequest: TypeAlias = end_txn_v0.EndTxnRequest | end_txn_v1.EndTxnRequest | end_txn_v2.EndTxnRequest | end_txn_v3.EndTxnRequest
EndTxnResponse: TypeAlias = end_txn_v0.EndTxnResponse | end_txn_v1.EndTxnResponse | end_txn_v2.EndTxnResponse | end_txn_v3.EndTxnResponse
WriteTxnMarkersRequest: TypeAlias = write_txn_markers_v1.WriteTxnMarkersRequest
WriteTxnMarkersResponse: TypeAlias = write_txn_markers_v1.WriteTxnMarkersResponse
TxnOffsetCommitRequest: TypeAlias = txn_offset_commit_v0.TxnOffsetCommitRequest | txn_offset_commit_v1.TxnOffsetCommitRequest | txn_offset_commit_v2.TxnOffsetCommitRequest | txn_offset_commit_v3.TxnOffsetCommitRequest
TxnOffsetCommitResponse: TypeAlias = txn_offset_commit_v0.TxnOffsetCommitResponse | txn_offset_commit_v1.TxnOffsetCommitResponse | txn_offset_commit_v2.TxnOffsetCommitResponse | txn_offset_commit_v3.TxnOffsetCommitResponse
DescribeAclsRequest: TypeAlias = describe_acls_v1.DescribeAclsRequest | describe_acls_v2.DescribeAclsRequest | describe_acls_v3.DescribeAclsRequest
DescribeAclsResponse: TypeAlias = describe_acls_v1.DescribeAclsResponse | describe_acls_v2.DescribeAclsResponse | describe_acls_v3.DescribeAclsResponse
CreateAclsRequest: TypeAlias = create_acls_v1.CreateAclsRequest | create_acls_v2.CreateAclsRequest | create_acls_v3.CreateAclsRequest
CreateAclsResponse: TypeAlias = create_acls_v1.CreateAclsResponse | create_acls_v2.CreateAclsResponse | create_acls_v3.CreateAclsResponse
DeleteAclsRequest: TypeAlias = delete_acls_v1.DeleteAclsRequest | delete_acls_v2.DeleteAclsRequest | delete_acls_v3.DeleteAclsRequest
DeleteAclsResponse: TypeAlias = delete_acls_v1.DeleteAclsResponse | delete_acls_v2.DeleteAclsResponse | delete_acls_v3.DeleteAclsResponse
DescribeConfigsRequest: TypeAlias = describe_configs_v1.DescribeConfigsRequest | describe_configs_v2.DescribeConfigsRequest | describe_configs_v3.DescribeConfigsRequest | describe_configs_v4.DescribeConfigsRequest
DescribeConfigsResponse: TypeAlias = describe_configs_v1.DescribeConfigsResponse | describe_configs_v2.DescribeConfigsResponse | describe_configs_v3.DescribeConfigsResponse | describe_configs_v4.DescribeConfigsResponse
AlterConfigsRequest: TypeAlias = alter_configs_v0.AlterConfigsRequest | alter_configs_v1.AlterConfigsRequest | alter_configs_v2.AlterConfigsRequest
AlterConfigsResponse: TypeAlias = alter_configs_v0.AlterConfigsResponse | alter_configs_v1.AlterConfigsResponse | alter_configs_v2.AlterConfigsResponse
AlterReplicaLogDirsRequest: TypeAlias = alter_replica_log_dirs_v1.AlterReplicaLogDirsRequest | alter_replica_log_dirs_v2.AlterReplicaLogDirsRequest
AlterReplicaLogDirsResponse: TypeAlias = alter_replica_log_dirs_v1.AlterReplicaLogDirsResponse | alter_replica_log_dirs_v2.AlterReplicaLogDirsResponse
DescribeLogDirsRequest: TypeAlias = describe_log_dirs_v1.DescribeLogDirsRequest | describe_log_dirs_v2.DescribeLogDirsRequest | describe_log_dirs_v3.DescribeLogDirsRequest | describe_log_dirs_v4.DescribeLogDirsRequest | describe_log_dirs_v5.DescribeLogDirsRequest
DescribeLogDirsResponse: TypeAlias = describe_log_dirs_v1.DescribeLogDirsResponse | describe_log_dirs_v2.DescribeLogDirsResponse | describe_log_dirs_v3.DescribeLogDirsResponse | describe_log_dirs_v4.DescribeLogDirsResponse | describe_log_dirs_v5.DescribeLogDirsResponse
SaslAuthenticateRequest: TypeAlias = sasl_authenticate_v0.SaslAuthenticateRequest | sasl_authenticate_v1.SaslAuthenticateRequest | sasl_authenticate_v2.SaslAuthenticateRequest
SaslAuthenticateResponse: TypeAlias = sasl_authenticate_v0.SaslAuthenticateResponse | sasl_authenticate_v1.SaslAuthenticateResponse | sasl_authenticate_v2.SaslAuthenticateResponse
CreatePartitionsRequest: TypeAlias = create_partitions_v0.CreatePartitionsRequest | create_partitions_v1.CreatePartitionsRequest | create_partitions_v2.CreatePartitionsRequest | create_partitions_v3.CreatePartitionsRequest
CreatePartitionsResponse: TypeAlias = create_partitions_v0.CreatePartitionsResponse | create_partitions_v1.CreatePartitionsResponse | create_partitions_v2.CreatePartitionsResponse | create_partitions_v3.CreatePartitionsResponse
DeleteGroupsRequest: TypeAlias = delete_groups_v0.DeleteGroupsRequest | delete_groups_v1.DeleteGroupsRequest | delete_groups_v2.DeleteGroupsRequest
DeleteGroupsResponse: TypeAlias = delete_groups_v0.DeleteGroupsResponse | delete_groups_v1.DeleteGroupsResponse | delete_groups_v2.DeleteGroupsResponse
ElectLeadersRequest: TypeAlias = elect_leaders_v0.ElectLeadersRequest | elect_leaders_v1.ElectLeadersRequest | elect_leaders_v2.ElectLeadersRequest
ElectLeadersResponse: TypeAlias = elect_leaders_v0.ElectLeadersResponse | elect_leaders_v1.ElectLeadersResponse | elect_leaders_v2.ElectLeadersResponse
IncrementalAlterConfigsRequest: TypeAlias = incremental_alter_configs_v0.IncrementalAlterConfigsRequest | incremental_alter_configs_v1.IncrementalAlterConfigsRequest
IncrementalAlterConfigsResponse: TypeAlias = incremental_alter_configs_v0.IncrementalAlterConfigsResponse | incremental_alter_configs_v1.IncrementalAlterConfigsResponse
OffsetDeleteRequest: TypeAlias = offset_delete_v0.OffsetDeleteRequest
OffsetDeleteResponse: TypeAlias = offset_delete_v0.OffsetDeleteResponse
AlterPartitionReassignmentsRequest: TypeAlias = alter_partition_reassignments_v0.AlterPartitionReassignmentsRequest
AlterPartitionReassignmentsResponse: TypeAlias = alter_partition_reassignments_v0.AlterPartitionReassignmentsResponse
ListPartitionReassignmentsRequest: TypeAlias = list_partition_reassignments_v0.ListPartitionReassignmentsRequest
ListPartitionReassignmentsResponse: TypeAlias = list_partition_reassignments_v0.ListPartitionReassignmentsResponse
DescribeClientQuotasRequest: TypeAlias = describe_client_quotas_v0.DescribeClientQuotasRequest | describe_client_quotas_v1.DescribeClientQuotasRequest
DescribeClientQuotasResponse: TypeAlias = describe_client_quotas_v0.DescribeClientQuotasResponse | describe_client_quotas_v1.DescribeClientQuotasResponse
AlterClientQuotasRequest: TypeAlias = alter_client_quotas_v0.AlterClientQuotasRequest | alter_client_quotas_v1.AlterClientQuotasRequest
AlterClientQuotasResponse: TypeAlias = alter_client_quotas_v0.AlterClientQuotasResponse | alter_client_quotas_v1.AlterClientQuotasResponse
DescribeUserScramCredentialsRequest: TypeAlias = describe_user_scram_credentials_v0.DescribeUserScramCredentialsRequest
DescribeUserScramCredentialsResponse: TypeAlias = describe_user_scram_credentials_v0.DescribeUserScramCredentialsResponse
AlterUserScramCredentialsRequest: TypeAlias = alter_user_scram_credentials_v0.AlterUserScramCredentialsRequest
AlterUserScramCredentialsResponse: TypeAlias = alter_user_scram_credentials_v0.AlterUserScramCredentialsResponse
DescribeClusterRequest: TypeAlias = describe_cluster_v0.DescribeClusterRequest | describe_cluster_v1.DescribeClusterRequest | describe_cluster_v2.DescribeClusterRequest
DescribeClusterResponse: TypeAlias = describe_cluster_v0.DescribeClusterResponse | describe_cluster_v1.DescribeClusterResponse | describe_cluster_v2.DescribeClusterResponse
DescribeProducersRequest: TypeAlias = describe_producers_v0.DescribeProducersRequest
DescribeProducersResponse: TypeAlias = describe_producers_v0.DescribeProducersResponse
DescribeTransactionsRequest: TypeAlias = describe_transactions_v0.DescribeTransactionsRequest
DescribeTransactionsResponse: TypeAlias = describe_transactions_v0.DescribeTransactionsResponse
ListTransactionsRequest: TypeAlias = list_transactions_v0.ListTransactionsRequest | list_transactions_v1.ListTransactionsRequest | list_transactions_v2.ListTransactionsRequest
ListTransactionsResponse: TypeAlias = list_transactions_v0.ListTransactionsResponse | list_transactions_v1.ListTransactionsResponse | list_transactions_v2.ListTransactionsResponse
ConsumerGroupHeartbeatRequest: TypeAlias = consumer_group_heartbeat_v0.ConsumerGroupHeartbeatRequest | consumer_group_heartbeat_v1.ConsumerGroupHeartbeatRequest
ConsumerGroupHeartbeatResponse: TypeAlias = consumer_group_heartbeat_v0.ConsumerGroupHeartbeatResponse | consumer_group_heartbeat_v1.ConsumerGroupHeartbeatResponse
ConsumerGroupDescribeRequest: TypeAlias = consumer_group_describe_v0.ConsumerGroupDescribeRequest | consumer_group_describe_v1.ConsumerGroupDescribeRequest
ConsumerGroupDescribeResponse: TypeAlias = consumer_group_describe_v0.ConsumerGroupDescribeResponse | consumer_group_describe_v1.ConsumerGroupDescribeResponse
DescribeTopicPartitionsRequest: TypeAlias = describe_topic_partitions_v0.DescribeTopicPartitionsRequest
DescribeTopicPartitionsResponse: TypeAlias = describe_topic_partitions_v0.DescribeTopicPartitionsResponse
# fmt: on
