"""The ACL decision and binding filters (cluster/acls.py), without sockets or a store."""

from __future__ import annotations

import pytest

from logkeel.cluster.acls import (
    AclBinding,
    AclBindingFilter,
    AclError,
    AclOperation,
    AclPermissionType,
    Authorizer,
    PatternType,
    ResourceType,
    parse_super_users,
)

Op, Perm, Pat, Res = AclOperation, AclPermissionType, PatternType, ResourceType

ALICE = "User:alice"
BOB = "User:bob"


def acl(
    name: str,
    op: Op,
    perm: Perm = Perm.ALLOW,
    principal: str = ALICE,
    host: str = "*",
    res: Res = Res.TOPIC,
    pat: Pat = Pat.LITERAL,
) -> AclBinding:
    return AclBinding(res, name, pat, principal, host, op, perm)


def allowed(
    auth: Authorizer,
    op: Op,
    name: str,
    principal: str = ALICE,
    host: str = "10.0.0.1",
    res: Res = Res.TOPIC,
) -> bool:
    return auth.authorize(principal, host, op, res, name)


def test_no_acl_denies_unless_allow_everyone() -> None:
    assert not allowed(Authorizer([]), Op.READ, "t")
    assert allowed(Authorizer([], allow_everyone_if_no_acl_found=True), Op.READ, "t")


def test_an_acl_on_the_resource_stops_allow_everyone_for_others() -> None:
    auth = Authorizer([acl("t", Op.READ)], allow_everyone_if_no_acl_found=True)
    assert allowed(auth, Op.READ, "t")
    assert not allowed(auth, Op.READ, "t", principal=BOB)
    assert allowed(auth, Op.READ, "other", principal=BOB)


def test_super_user_is_allowed_despite_deny() -> None:
    auth = Authorizer(
        [acl("t", Op.ALL, Perm.DENY, principal=BOB)],
        super_users=parse_super_users("User:bob; User:x"),
    )
    assert allowed(auth, Op.DELETE, "t", principal=BOB)
    assert not allowed(auth, Op.DELETE, "t")


def test_deny_wins_over_allow() -> None:
    auth = Authorizer([acl("t", Op.ALL), acl("t", Op.WRITE, Perm.DENY)])
    assert allowed(auth, Op.READ, "t")
    assert not allowed(auth, Op.WRITE, "t")


def test_deny_all_denies_every_operation() -> None:
    auth = Authorizer([acl("t", Op.READ), acl("t", Op.ALL, Perm.DENY, principal="User:*")])
    assert not allowed(auth, Op.READ, "t")
    assert not allowed(auth, Op.DESCRIBE, "t")


def test_implied_operations() -> None:
    for granted in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER):
        assert allowed(Authorizer([acl("t", granted)]), Op.DESCRIBE, "t"), granted
    assert not allowed(Authorizer([acl("t", Op.CREATE)]), Op.DESCRIBE, "t")
    assert allowed(Authorizer([acl("t", Op.ALTER_CONFIGS)]), Op.DESCRIBE_CONFIGS, "t")
    assert not allowed(Authorizer([acl("t", Op.DESCRIBE)]), Op.READ, "t")
    assert allowed(Authorizer([acl("t", Op.ALL)]), Op.IDEMPOTENT_WRITE, "t")


def test_deny_is_not_implied() -> None:
    auth = Authorizer([acl("t", Op.DESCRIBE), acl("t", Op.READ, Perm.DENY)])
    assert allowed(auth, Op.DESCRIBE, "t")
    assert not allowed(auth, Op.READ, "t")


def test_prefixed_and_wildcard_patterns() -> None:
    auth = Authorizer(
        [
            acl("orders-", Op.READ, pat=Pat.PREFIXED),
            acl("*", Op.DESCRIBE, principal=BOB),
        ]
    )
    assert allowed(auth, Op.READ, "orders-eu")
    assert not allowed(auth, Op.READ, "payments")
    assert allowed(auth, Op.DESCRIBE, "anything", principal=BOB)
    # A literal "*" in a PREFIXED binding is a prefix, not a wildcard.
    assert not allowed(Authorizer([acl("*", Op.READ, pat=Pat.PREFIXED)]), Op.READ, "t")


def test_principal_and_host_filters() -> None:
    auth = Authorizer([acl("t", Op.READ, host="10.0.0.1"), acl("t", Op.WRITE, principal="User:*")])
    assert allowed(auth, Op.READ, "t", host="10.0.0.1")
    assert not allowed(auth, Op.READ, "t", host="10.0.0.2")
    assert allowed(auth, Op.WRITE, "t", principal=BOB)


def test_resource_types_are_separate() -> None:
    auth = Authorizer(
        [acl("app", Op.READ, res=Res.GROUP), acl("kafka-cluster", Op.CREATE, res=Res.CLUSTER)]
    )
    assert allowed(auth, Op.READ, "app", res=Res.GROUP)
    assert not allowed(auth, Op.READ, "app", res=Res.TOPIC)
    assert allowed(auth, Op.CREATE, "kafka-cluster", res=Res.CLUSTER)


def test_binding_validation() -> None:
    acl("t", Op.READ).validate()
    with pytest.raises(AclError):
        acl("t", Op.ANY).validate()
    with pytest.raises(AclError):
        acl("t", Op.READ, principal="alice").validate()
    with pytest.raises(AclError):
        acl("c", Op.ALTER, res=Res.CLUSTER).validate()
    with pytest.raises(AclError):
        acl("t", Op.READ, pat=Pat.MATCH).validate()
    with pytest.raises(AclError):
        acl("t", Op.READ, res=Res.USER).validate()


def test_json_round_trip() -> None:
    binding = acl("orders-", Op.WRITE, Perm.DENY, host="1.2.3.4", pat=Pat.PREFIXED)
    assert AclBinding.from_json(binding.to_json()) == binding


def test_filters() -> None:
    literal = acl("orders-eu", Op.READ)
    prefixed = acl("orders-", Op.WRITE, pat=Pat.PREFIXED, principal=BOB)
    wildcard = acl("*", Op.DESCRIBE)
    group = acl("g", Op.READ, res=Res.GROUP)
    everything = [literal, prefixed, wildcard, group]

    def matching(f: AclBindingFilter) -> list[AclBinding]:
        return [b for b in everything if f.matches(b)]

    assert matching(AclBindingFilter()) == everything
    assert matching(AclBindingFilter(Res.TOPIC, principal=BOB)) == [prefixed]
    assert matching(AclBindingFilter(Res.TOPIC, "orders-", Pat.LITERAL)) == []
    assert matching(AclBindingFilter(Res.TOPIC, "orders-", Pat.PREFIXED)) == [prefixed]
    assert matching(AclBindingFilter(Res.TOPIC, "orders-eu", Pat.MATCH)) == [
        literal,
        prefixed,
        wildcard,
    ]
    assert matching(AclBindingFilter(operation=Op.READ, permission=Perm.ALLOW)) == [literal, group]
    with pytest.raises(AclError):
        AclBindingFilter(Res.UNKNOWN).validate()


@pytest.mark.parametrize(
    ("bindings", "expected"),
    [
        ([], False),
        ([acl("t", Op.WRITE)], True),
        ([acl("*", Op.WRITE)], True),
        ([acl("t", Op.ALL)], True),
        ([acl("t", Op.READ)], False),
        # Every ALLOW covered by a DENY: a literal denied literally, a prefix by a shorter one.
        ([acl("t", Op.WRITE), acl("t", Op.WRITE, Perm.DENY)], False),
        (
            [
                acl("dave-", Op.WRITE, pat=Pat.PREFIXED),
                acl("dave", Op.WRITE, Perm.DENY, pat=Pat.PREFIXED),
            ],
            False,
        ),
        ([acl("dave-x", Op.WRITE), acl("dave", Op.WRITE, Perm.DENY, pat=Pat.PREFIXED)], False),
        ([acl("t", Op.WRITE), acl("*", Op.ALL, Perm.DENY)], False),
        # Some ALLOW left uncovered: a denied prefix longer than the allowed one, another name.
        (
            [
                acl("d", Op.WRITE, pat=Pat.PREFIXED),
                acl("dave", Op.WRITE, Perm.DENY, pat=Pat.PREFIXED),
            ],
            True,
        ),
        ([acl("t", Op.WRITE), acl("u", Op.WRITE), acl("t", Op.WRITE, Perm.DENY)], True),
        # Another principal's DENY does not count.
        ([acl("t", Op.WRITE), acl("t", Op.WRITE, Perm.DENY, principal=BOB)], True),
    ],
)
def test_authorize_any_is_kafkas_authorize_by_resource_type(
    bindings: list[AclBinding], expected: bool
) -> None:
    """What lets an idempotent producer without IDEMPOTENT_WRITE get a producer id (KIP-679):
    some topic it may write, after every DENY of its principal is taken into account."""
    assert Authorizer(bindings).authorize_any(ALICE, "10.0.0.1", Op.WRITE, Res.TOPIC) is expected
